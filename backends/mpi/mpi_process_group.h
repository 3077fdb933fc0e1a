// The mpi backend: accl::ProcessGroup over the MPI library (Open MPI).
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "accl/internal/op_queue.h"
#include "accl/process_group.h"

namespace accl {

class MpiProcessGroup : public ProcessGroup {
 public:
  // Wraps a duplicate of `comm` (MPI_COMM_WORLD for the world group).
  MpiProcessGroup(MPI_Comm comm, const ProcessGroupOptions& opts);
  ~MpiProcessGroup() override;

 protected:
  std::shared_ptr<Work> doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) override;
  std::shared_ptr<Work> doBroadcast(Buffer buf, const BroadcastOptions& o) override;
  std::shared_ptr<Work> doReduce(Buffer in, Buffer out, const ReduceOptions& o) override;
  std::shared_ptr<Work> doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) override;
  std::shared_ptr<Work> doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                     const AllgatherOptions& o) override;
  std::shared_ptr<Work> doReduceScatterv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                         const ReduceScatterOptions& o) override;
  std::shared_ptr<Work> doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) override;
  std::shared_ptr<Work> doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                    const std::vector<size_t>& recvCounts,
                                    const AlltoallOptions& o) override;
  std::shared_ptr<Work> doGather(Buffer in, Buffer out, const GatherOptions& o) override;
  std::shared_ptr<Work> doScatter(Buffer in, Buffer out, const ScatterOptions& o) override;
  std::shared_ptr<Work> doBarrier(const BarrierOptions& o) override;
  std::shared_ptr<Work> doSend(Buffer buf, int dst, const SendOptions& o) override;
  std::shared_ptr<Work> doRecv(Buffer buf, int src, const RecvOptions& o) override;
  std::shared_ptr<ProcessGroup> doSplit(const std::vector<int>& ranks,
                                        const ProcessGroupOptions& opts) override;

 private:
  // Runs `start` (which posts a non-blocking MPI call and returns its request)
  // on the op queue and polls the request until done or the deadline passes.
  std::shared_ptr<Work> run(OpType op, size_t count, std::chrono::milliseconds timeout,
                            std::function<int()> body);
  // Polls `req` to completion; throws Timeout (and marks the group broken) at the deadline.
  MPI_Status wait(MPI_Request req, std::chrono::milliseconds timeout, const std::string& what);
  void allreduceInPlace(Buffer buf, const ReduceOp& op, std::chrono::milliseconds timeout,
                        const std::string& what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<internal::OpQueue> queue_;
  std::unique_ptr<internal::OpQueue> p2pWaits_;
  std::atomic<uint64_t> seq_{0};
  std::mutex brokenMu_;
  std::string broken_;  // set after a timeout: the group can no longer be used
};

}  // namespace accl
