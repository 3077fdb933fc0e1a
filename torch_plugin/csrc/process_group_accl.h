// The c10d adapter: a torch ProcessGroup (torch 1.13) or Backend (torch 2.x)
// that runs every op on an accl::ProcessGroup. The only code of ACCL that
// includes torch headers.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include <memory>
#include <string>
#include <vector>

#include "accl/process_group.h"
#include "accl/store.h"
#include "torch_compat.h"

namespace torch_accl {

using C10dBase = compat::Base;

// One torch op: one or more accl ops (coalesced lists), plus the work done
// when they complete (copying staged results into the caller's tensors).
class AcclWork : public c10d::Work {
 public:
  // `title` ("accl:all_reduce") and `inputs` are what torch.profiler shows.
  // `stream`: for ops on device tensors, the stream current when the op was
  // issued (staged results are copied back on it; the future has its device).
  AcclWork(int rank, c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
           std::vector<at::Tensor> outputs, c10::optional<c10::Stream> stream = c10::nullopt);
  ~AcclWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Runs the ACCL ops that are still queued on this thread and returns when
  // they completed (their errors reach this Work as on any other thread).
  void runHere();
  // Called once by the adapter after every accl op was issued.
  void start(std::vector<std::shared_ptr<accl::Work>> works, std::function<void()> finish);
  // Called once instead of start(): completes when every one of `parts`
  // (torch ops issued while coalescing) has; fails with the first failure.
#if ACCL_TORCH_HAS_COALESCING
  void startAfter(const std::vector<c10::intrusive_ptr<AcclWork>>& parts);
#endif

 private:
  void onDone(std::exception_ptr err, int src);
  void completeFuture(c10::ivalue::Future& f, const std::exception_ptr& err);

  std::function<void()> finish_;
  std::vector<std::shared_ptr<accl::Work>> works_;  // until done (wait() runs queued ones)
  std::vector<at::Tensor> outputs_;
  c10::optional<c10::Stream> stream_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made by the first getFuture() (mu_)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  int source_ = -1;
};

class ProcessGroupACCL : public C10dBase {
 public:
  // `backend`: which SDK backend runs the ops ("accl" unless ACCL_TORCH_BACKEND says otherwise).
  ProcessGroupACCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, std::vector<int64_t> globalRanks = {},
                   std::string groupName = "");
  ~ProcessGroupACCL() override;

  const std::string getBackendName() const override { return "accl"; }
  // The SDK backend that runs the ops (accl, gloo, mpi or nccl).
  const std::string& sdkBackend() const { return pg_->backendName(); }
  const std::vector<int64_t>& globalRanks() const { return globalRanks_; }
  // Where device (CUDA) tensors go, and why: "direct" (the SDK backend
  // addresses device memory), "nccl" (ACCL's nccl backend, like
  // cpu:gloo,cuda:nccl) or "stage" (copied through host memory), as
  // ACCL_TORCH_CUDA (auto, nccl, stage) and this host decide.
  std::string cudaPath();
  // Sums a contiguous CPU float32 tensor in place on the SDK group directly
  // (no torch Work, future or staging), blocking: the C++ level that
  // bench/torch_allreduce_bench.py compares the adapter against.
  void sdkAllreduce(const at::Tensor& t, bool runInline);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  // Blocking. Every rank reports to rank 0 within the timeout (opts' or the
  // group's); rank 0 names the ranks that did not (the first one, or all of
  // them with waitAllRanks) and releases the others only when all arrived,
  // as torch's gloo does. Point-to-point on a reserved tag (kMonitoredTag).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  // Ops issued between startCoalescing and endCoalescing run as they are
  // issued (every op is asynchronous); endCoalescing's Work completes when
  // all of them have, as torch's _coalescing_manager and batch_isend_irecv expect.
#if ACCL_TORCH_HAS_COALESCING
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#if ACCL_TORCH_HAS_SUPPORTS_COALESCING
  bool supportsCoalescing() const override { return true; }
#endif
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
#endif
#if ACCL_TORCH_HAS_SPLIT
  // A sub-group of `ranks` (this group's numbering, sorted) connected through
  // `store` (torch gives each split its own); nullptr on ranks not in `ranks`.
  // Only the members take part. Blocking.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
#endif
  // The group's collective count, the same on every rank (torch compares it
  // across ranks to find desynchronised collectives).
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // The creator torch calls (register_backend); the extended form carries the
  // group's global ranks and name.
  // accl-diag --store: the first group of the process watches torch's
  // TCPStore (when the job's store is one) for accl-diag's queries.
  void watchForDiag(const c10::intrusive_ptr<c10d::Store>& store);
  static c10::intrusive_ptr<C10dBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout);

 private:
  // The group and stream an op on `tensors` runs on.
  struct Route {
    accl::ProcessGroup* pg;
    void* stream;                          // OpOptions::stream
    c10::optional<c10::Stream> userStream;  // set for device tensors
  };
  Route route(const std::vector<at::Tensor>& tensors);
  // Issues a torch op of `type` on `outputs`: body(OpContext&) issues its
  // accl ops (defined in the .cc, the only place that calls it).
  struct OpContext;
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, bool collective, bool async,
                                       const std::vector<at::Tensor>& outputs, Body&& body);
  void decideCuda();  // under cudaMu_

  std::shared_ptr<accl::ProcessGroup> pg_;
  std::shared_ptr<accl::Store> store_;
  std::mutex cudaMu_;
  bool cudaDecided_ = false;
  std::string cudaPath_, cudaWhy_;
  std::shared_ptr<accl::ProcessGroup> cudaPg_;  // the nccl group, created at the first device op
  std::shared_ptr<accl::Store> diagStore_;      // torch's TCPStore at its root, watched for accl-diag --store
  std::vector<int64_t> globalRanks_;
  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> collectives_{0};
  int64_t monitoredBarriers_ = 0;  // calls so far (stale reports of a failed call are skipped)
#if ACCL_TORCH_HAS_SPLIT
  std::mutex splitMu_;
  std::vector<std::pair<std::string, c10::weak_intrusive_ptr<ProcessGroupACCL>>> splits_;  // by name/ranks
#endif
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<AcclWork>> coalesced_;
};

// Called once at interpreter exit (an atexit hook, before Python starts to
// shut down), with the GIL released: from then on, completing accl ops no
// longer touch torch Works or tensors, and the completions under way are
// waited for (at most `wait`).
void prepareExit(std::chrono::milliseconds wait);

// accl::Store over a torch store (the rendezvous torch already set up).
class TorchStore : public accl::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const accl::Bytes& value) override;
  accl::Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  accl::Bytes compareSet(const std::string& key, const accl::Bytes& expected, const accl::Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;
  using accl::Store::wait;

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

}  // namespace torch_accl
