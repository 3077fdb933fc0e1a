// The nccl backend: accl::ProcessGroup over NVIDIA's NCCL, for CUDA buffers.
// A thin adapter: one NCCL communicator per group, created at the group's
// first op on the device of that op's buffers (as torch's ProcessGroupNCCL
// does), one CUDA stream per group. Each op is ordered after the work already
// queued on the caller's stream when it was issued (OpOptions::stream; the
// legacy default stream when none is given); Work::wait() returns when the result
// is in device memory. Point-to-point follows NCCL's rule: a send completes
// when the peer has posted the matching recv, so two ranks that send to each
// other must not both send first.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "accl/internal/op_queue.h"
#include "accl/process_group.h"
#include "accl/store.h"

namespace accl {

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts);
  ~NcclProcessGroup() override;

  bool supportsDevice(const Device& d) const override { return d.type == DeviceType::CUDA; }

 protected:
  std::shared_ptr<Work> doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) override;
  std::shared_ptr<Work> doBroadcast(Buffer buf, const BroadcastOptions& o) override;
  std::shared_ptr<Work> doReduce(Buffer in, Buffer out, const ReduceOptions& o) override;
  std::shared_ptr<Work> doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) override;
  std::shared_ptr<Work> doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                     const AllgatherOptions& o) override;
  std::shared_ptr<Work> doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) override;
  std::shared_ptr<Work> doReduceScatterv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                         const ReduceScatterOptions& o) override;
  std::shared_ptr<Work> doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) override;
  std::shared_ptr<Work> doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                    const std::vector<size_t>& recvCounts, const AlltoallOptions& o) override;
  std::shared_ptr<Work> doGather(Buffer in, Buffer out, const GatherOptions& o) override;
  std::shared_ptr<Work> doScatter(Buffer in, Buffer out, const ScatterOptions& o) override;
  std::shared_ptr<Work> doBarrier(const BarrierOptions& o) override;
  std::shared_ptr<Work> doSend(Buffer buf, int dst, const SendOptions& o) override;
  std::shared_ptr<Work> doRecv(Buffer buf, int src, const RecvOptions& o) override;
  std::shared_ptr<Work> doSendRecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                   const SendRecvOptions& o) override;
  std::shared_ptr<ProcessGroup> doSplit(const std::vector<int>& ranks, const ProcessGroupOptions& opts) override;

 private:
  using Launch = std::function<void(const std::string& what)>;  // enqueues NCCL calls on stream_
  // Binds the group to `device` (the first op's), checks later ops use it,
  // and queues `launch` to run after the communicator exists; the worker then
  // waits for the stream until done or the deadline (which aborts the
  // communicator and breaks the group).
  std::shared_ptr<Work> run(OpType op, size_t count, const Device& device, const OpOptions& o, Launch launch);
  void ensureComm(std::chrono::steady_clock::time_point deadline);
  // Waits while the non-blocking communicator is still starting or enqueuing.
  void settle(const std::string& what, std::chrono::steady_clock::time_point deadline);
  void check(ncclResult_t r, const std::string& what);
  [[noreturn]] void fail(const std::string& what, const std::string& why, bool timeout);
  ncclRedOp_t redOp(const ReduceOp& op, DataType t, bool* created);

  std::shared_ptr<Store> store_;
  std::mutex mu_;  // device_, broken_
  int device_ = -1;
  std::string broken_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  int* scratch_ = nullptr;  // one int on the device (barrier)
  std::unique_ptr<internal::OpQueue> queue_;
  std::atomic<uint64_t> seq_{0};
  uint64_t splits_ = 0;
};

}  // namespace accl
