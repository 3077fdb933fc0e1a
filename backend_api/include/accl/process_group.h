// The one API every backend implements (modeled on c10d::Backend).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accl/errors.h"
#include "accl/store.h"
#include "accl/types.h"
#include "accl/work.h"

namespace accl {

constexpr int kAnySource = -1;

// Every op accepts a timeout; 0 means the group's default (ACCL_TIMEOUT or
// ProcessGroupOptions::timeout). When it passes, the op's Work fails with Timeout.
struct OpOptions {
  std::chrono::milliseconds timeout{0};
  // CUDA buffers: the stream (a cudaStream_t) whose work queued so far the op
  // is ordered after, as NCCL's stream argument; nullptr: the device's legacy
  // default stream. The caller keeps it alive until the op completes.
  // Backends of host memory ignore it.
  void* stream = nullptr;
  // The caller waits for this op right away (a blocking call): a backend may
  // run it on the calling thread when the group is idle, instead of handing it
  // to its worker thread and back. The returned Work is then complete.
  bool blocking = false;
};
struct AllreduceOptions : OpOptions {
  ReduceOp op{};
};
struct BroadcastOptions : OpOptions {
  int root = 0;
};
struct ReduceOptions : OpOptions {
  ReduceOp op{};
  int root = 0;
};
struct AllgatherOptions : OpOptions {};
struct ReduceScatterOptions : OpOptions {
  ReduceOp op{};
};
struct AlltoallOptions : OpOptions {};
struct GatherOptions : OpOptions {
  int root = 0;
};
struct ScatterOptions : OpOptions {
  int root = 0;
};
struct BarrierOptions : OpOptions {};
struct SendOptions : OpOptions {
  int tag = 0;
};
struct RecvOptions : OpOptions {
  int tag = 0;
};
// sendrecv: the send's tag and the receive's (as MPI_Sendrecv's sendtag and recvtag).
struct SendRecvOptions : OpOptions {
  int sendTag = 0;
  int recvTag = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout{0};  // 0: ACCL_TIMEOUT
  std::string name;                      // shown in logs and errors
  // false: this group keeps no flight recorder, statistics or timeline,
  // whatever ACCL_TRACE_BUFFER, ACCL_STATS and ACCL_TIMELINE say (a group
  // whose ops are not worth recording; bench/recorder_cost.cc compares the two).
  bool record = true;
};

enum class OpType {
  Allreduce,
  Broadcast,
  Reduce,
  Allgather,
  Allgatherv,
  ReduceScatter,
  ReduceScatterv,
  Alltoall,
  Alltoallv,
  Gather,
  Scatter,
  Barrier,
  Send,
  Recv,
  Split,
  SendRecv,  // after Split: the codes before it are on the wire
};
const char* toString(OpType op);
// send, recv and sendrecv: matched by peer and tag, not in the group's collective order.
inline bool isPointToPoint(OpType op) {
  return op == OpType::Send || op == OpType::Recv || op == OpType::SendRecv;
}

class FlightRecorder;  // accl/trace.h

// A group of `size()` ranks. Every collective must be called by all ranks of
// the group in the same order with matching arguments. Ops return at once with
// a Work; the buffers must stay valid until it completes. Argument errors are
// thrown by the call itself (InvalidArgument / NotSupported), before anything
// is started; failures while running are rethrown by Work::wait().
// Thread-safety: ops of one group may be issued from several threads, but the
// order in which collectives are issued must match across ranks; distinct
// groups (e.g. from split) are independent.
//
// In-place forms: allreduce with input.data == output.data; allgather with the
// input at output[rank * count]; reduceScatter with the output at
// input[rank * count]; alltoall with input.data == output.data.
class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  ProcessGroup(int rank, int size, std::string backend, ProcessGroupOptions opts);
  virtual ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backendName() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const ProcessGroupOptions& options() const { return options_; }

  // output[i] = op over ranks of input[i]; counts and dtypes equal on all ranks.
  std::shared_ptr<Work> allreduce(Buffer input, Buffer output, const AllreduceOptions& o = {});
  std::shared_ptr<Work> allreduce(Buffer inout, const AllreduceOptions& o = {}) {
    return allreduce(inout, inout, o);
  }
  // Copies root's buffer into every rank's buffer.
  std::shared_ptr<Work> broadcast(Buffer buf, const BroadcastOptions& o = {});
  // Like allreduce, but only root's output receives the result (others' output ignored).
  std::shared_ptr<Work> reduce(Buffer input, Buffer output, const ReduceOptions& o = {});
  // output (size * input.count) = concatenation of every rank's input.
  std::shared_ptr<Work> allgather(Buffer input, Buffer output, const AllgatherOptions& o = {});
  // Per-rank counts: rank r contributes counts[r] elements (input.count == counts[rank]);
  // output holds them concatenated in rank order.
  std::shared_ptr<Work> allgatherv(Buffer input, Buffer output, const std::vector<size_t>& counts,
                                   const AllgatherOptions& o = {});
  // input (size * output.count) reduced over ranks; rank r keeps chunk r.
  std::shared_ptr<Work> reduceScatter(Buffer input, Buffer output,
                                      const ReduceScatterOptions& o = {});
  // Per-rank counts: input.count == sum(counts), rank r keeps counts[r] elements.
  std::shared_ptr<Work> reduceScatterv(Buffer input, Buffer output,
                                       const std::vector<size_t>& counts,
                                       const ReduceScatterOptions& o = {});
  // input and output each hold size equal chunks; chunk j of rank i goes to
  // chunk i of rank j.
  std::shared_ptr<Work> alltoall(Buffer input, Buffer output, const AlltoallOptions& o = {});
  // sendCounts[j] elements go to rank j (contiguous, in rank order);
  // recvCounts[i] elements arrive from rank i.
  std::shared_ptr<Work> alltoallv(Buffer input, const std::vector<size_t>& sendCounts,
                                  Buffer output, const std::vector<size_t>& recvCounts,
                                  const AlltoallOptions& o = {});
  // root's output (size * input.count) = concatenation of every rank's input.
  std::shared_ptr<Work> gather(Buffer input, Buffer output, const GatherOptions& o = {});
  // root's input (size * output.count); rank r receives chunk r.
  std::shared_ptr<Work> scatter(Buffer input, Buffer output, const ScatterOptions& o = {});
  std::shared_ptr<Work> barrier(const BarrierOptions& o = {});
  // Point-to-point; matched by (peer, tag) in order of issue.
  std::shared_ptr<Work> send(Buffer buf, int dstRank, const SendOptions& o = {});
  // srcRank may be kAnySource; Work::sourceRank() tells who sent.
  std::shared_ptr<Work> recv(Buffer buf, int srcRank, const RecvOptions& o = {});
  // A send to dstRank and a receive from srcRank (kAnySource allowed) as one
  // op, like MPI_Sendrecv and nccl-tests' sendrecv: one Work, which completes
  // when both have (failed with the first failure; sourceRank() tells who
  // sent). Each half matches a plain recv / send of the peer, by peer and
  // tag. The two buffers must not overlap. A backend runs the pair as one
  // call where its library has one (MPI_Sendrecv, an NCCL group); otherwise
  // the halves are posted together, the receive first.
  std::shared_ptr<Work> sendrecv(Buffer sendBuf, int dstRank, Buffer recvBuf, int srcRank,
                                 const SendRecvOptions& o = {});

  // Collective over this group: every rank calls it with the same list of
  // distinct ranks (in this group's numbering). Members get a new group whose
  // rank i is ranks[i]; non-members get nullptr. Blocking.
  std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks,
                                      const ProcessGroupOptions& opts = {});

  // This group's flight recorder (accl/trace.h); nullptr when it is off
  // (ACCL_TRACE_BUFFER=0 without ACCL_STATS or ACCL_TIMELINE).
  FlightRecorder* recorder() const { return recorder_.get(); }
  // Pauses (false) or resumes (true) this group's recording for the ops
  // issued from then on: while paused, an op is issued as in a group made
  // with record = false (no flight-recorder entry, no statistics, no
  // timeline span); ops issued before still end their entries. The recorder
  // itself stays: its ring, failure dumps and statistics table remain. No
  // effect on a group without a recorder. Takes effect for ops issued after
  // it returns (call it between ops). bench/recorder_cost.cc measures the
  // recorder's cost by turning it on and off in one group, whose memory the
  // two sides then share.
  void setRecording(bool on) { active_.store(on ? recorder_.get() : nullptr, std::memory_order_relaxed); }
  bool recording() const { return active_.load(std::memory_order_relaxed) != nullptr; }
  // The flight recorder id of the op being issued on this thread (0: none,
  // or the recorder is off): a backend's do*() passes it to
  // recorder()->started(); an op that runs while being issued has this id.
  static uint64_t issuingTraceId();

  // Which buffers' devices this backend accepts.
  virtual bool supportsDevice(const Device& d) const { return d.type == DeviceType::CPU; }

 protected:
  // Implementations receive validated arguments. Defaults throw NotSupported,
  // except doReduceScatter, which calls doReduceScatterv with equal counts,
  // and doSendRecv, which joins doRecv and doSend.
  virtual std::shared_ptr<Work> doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o);
  virtual std::shared_ptr<Work> doBroadcast(Buffer buf, const BroadcastOptions& o);
  virtual std::shared_ptr<Work> doReduce(Buffer in, Buffer out, const ReduceOptions& o);
  virtual std::shared_ptr<Work> doAllgather(Buffer in, Buffer out, const AllgatherOptions& o);
  virtual std::shared_ptr<Work> doAllgatherv(Buffer in, Buffer out,
                                             const std::vector<size_t>& counts,
                                             const AllgatherOptions& o);
  virtual std::shared_ptr<Work> doReduceScatter(Buffer in, Buffer out,
                                                const ReduceScatterOptions& o);
  virtual std::shared_ptr<Work> doReduceScatterv(Buffer in, Buffer out,
                                                 const std::vector<size_t>& counts,
                                                 const ReduceScatterOptions& o);
  virtual std::shared_ptr<Work> doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o);
  virtual std::shared_ptr<Work> doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts,
                                            Buffer out, const std::vector<size_t>& recvCounts,
                                            const AlltoallOptions& o);
  virtual std::shared_ptr<Work> doGather(Buffer in, Buffer out, const GatherOptions& o);
  virtual std::shared_ptr<Work> doScatter(Buffer in, Buffer out, const ScatterOptions& o);
  virtual std::shared_ptr<Work> doBarrier(const BarrierOptions& o);
  virtual std::shared_ptr<Work> doSend(Buffer buf, int dst, const SendOptions& o);
  virtual std::shared_ptr<Work> doRecv(Buffer buf, int src, const RecvOptions& o);
  // Default: doRecv and doSend, joined in one Work.
  virtual std::shared_ptr<Work> doSendRecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                           const SendRecvOptions& o);
  virtual std::shared_ptr<ProcessGroup> doSplit(const std::vector<int>& ranks,
                                                const ProcessGroupOptions& opts);

  // The common doSplit of backends that connect a sub-group through a store:
  // nullptr for non-members; else make(store under a prefix unique to this
  // split call and rank list, new rank, new size, opts with the group's timeout
  // as default). `splitId` counts this group's split calls.
  using GroupMaker = std::function<std::shared_ptr<ProcessGroup>(
      std::shared_ptr<Store>, int, int, const ProcessGroupOptions&)>;
  std::shared_ptr<ProcessGroup> splitThroughStore(const std::vector<int>& ranks,
                                                  const ProcessGroupOptions& opts, uint64_t splitId,
                                                  const std::shared_ptr<Store>& store,
                                                  const GroupMaker& make) const;

  // splitThroughStore for backends whose groups are G(store, rank, size, opts).
  template <typename G>
  std::shared_ptr<ProcessGroup> splitAs(const std::vector<int>& ranks, const ProcessGroupOptions& opts,
                                        uint64_t splitId, const std::shared_ptr<Store>& store) const {
    return splitThroughStore(ranks, opts, splitId, store,
                             [](std::shared_ptr<Store> s, int r, int n, const ProcessGroupOptions& o) {
                               return std::make_shared<G>(std::move(s), r, n, o);
                             });
  }


  // The deadline for an op given its options.
  std::chrono::milliseconds effectiveTimeout(const OpOptions& o) const {
    return o.timeout.count() > 0 ? o.timeout : timeout_;
  }
  // "accl rank R/N <backend>: <what>"
  std::string context(const std::string& what) const;
  [[noreturn]] void notSupported(OpType op, const std::string& why = "") const;

 private:
  // Records the op in the flight recorder around `issue` (which calls do*()).
  template <typename Issue>
  std::shared_ptr<Work> traced(OpType op, DataType t, uint64_t count, int root, int peer, uint64_t bytes,
                               Issue&& issue);
  // The argument checks of every op: the tests inline, the errors (which
  // build their message) out of line, so a valid call pays a few compares.
  void checkBuffer(OpType op, const char* which, const Buffer& b) const {
    if (__builtin_expect(static_cast<unsigned>(b.dtype) >= static_cast<unsigned>(kNumDataTypes) ||
                             (b.data == nullptr && b.count > 0) || !supportsDevice(b.device),
                         0))
      badBuffer(op, which, b);
  }
  void checkReduction(OpType op, const ReduceOp& r, DataType t) const {
    if (__builtin_expect(static_cast<unsigned>(r.kind) >= static_cast<unsigned>(kNumReduceKinds) ||
                             !isValidReduction(r.kind, t),
                         0))
      badReduction(op, r, t);
  }
  void checkRoot(OpType op, int root) const {
    if (__builtin_expect(root < 0 || root >= size_, 0)) badRoot(op, root);
  }
  void checkPeer(OpType op, int peer, bool allowAny) const {
    if (allowAny && peer == kAnySource) return;
    if (__builtin_expect(peer < 0 || peer >= size_ || peer == rank_, 0)) badPeer(op, peer, allowAny);
  }
  void checkCount(OpType op, const char* which, size_t got, size_t want, const char* rule) const {
    if (__builtin_expect(got != want, 0)) badCount(op, which, got, want, rule);
  }
  void checkCounts(OpType op, const char* which, const std::vector<size_t>& counts) const {
    if (__builtin_expect(counts.size() != static_cast<size_t>(size_), 0)) badCounts(op, which, counts);
  }
  void checkSameDtype(OpType op, const Buffer& a, const Buffer& b) const {
    if (__builtin_expect(a.dtype != b.dtype || !(a.device == b.device), 0)) badSameDtype(op, a, b);
  }
  // An op's input and output share no byte, or are the op's in-place form
  // (`inPlace()` says whether they are, asked only when they overlap; `form`
  // says what it is): a partial overlap has no defined result on any backend.
  template <typename InPlace>
  void checkOverlap(OpType op, const Buffer& in, const Buffer& out, InPlace&& inPlace, const char* form) const {
    if (__builtin_expect(in.overlaps(out), 0) && !inPlace()) badOverlap(op, in, out, form);
  }
  [[noreturn, gnu::cold]] void badOverlap(OpType op, const Buffer& in, const Buffer& out, const char* form) const;
  [[noreturn, gnu::cold]] void badBuffer(OpType op, const char* which, const Buffer& b) const;
  [[noreturn, gnu::cold]] void badReduction(OpType op, const ReduceOp& r, DataType t) const;
  [[noreturn, gnu::cold]] void badRoot(OpType op, int root) const;
  [[noreturn, gnu::cold]] void badPeer(OpType op, int peer, bool allowAny) const;
  [[noreturn, gnu::cold]] void badCount(OpType op, const char* which, size_t got, size_t want,
                                        const char* rule) const;
  [[noreturn, gnu::cold]] void badCounts(OpType op, const char* which, const std::vector<size_t>& counts) const;
  [[noreturn, gnu::cold]] void badSameDtype(OpType op, const Buffer& a, const Buffer& b) const;

  int rank_;
  int size_;
  std::string backend_;
  ProcessGroupOptions options_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::atomic<FlightRecorder*> active_{nullptr};  // recorder_ while recording; nullptr: off or paused
};

}  // namespace accl
