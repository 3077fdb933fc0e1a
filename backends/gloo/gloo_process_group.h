// The gloo backend: accl::ProcessGroup over Facebook's gloo (TCP transport).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "accl/internal/kept_buffer.h"
#include "accl/internal/op_queue.h"
#include "accl/process_group.h"
#include "wait_pool.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace accl {

class GlooProcessGroup : public ProcessGroup {
 public:
  // Blocks until all `size` ranks have connected through `store`.
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts);
  ~GlooProcessGroup() override;

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
  // Runs `fn` on the op queue; converts gloo's exceptions into accl errors
  // naming the op and its sequence number.
  std::shared_ptr<Work> enqueue(OpType op, size_t count, std::chrono::milliseconds timeout, bool blocking,
                                std::function<int()> fn);
  // Allreduce of `buf` in place (with avg/premul handling), on the queue thread.
  void allreduceInPlace(Buffer buf, const ReduceOp& op, std::chrono::milliseconds timeout);

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // The collectives' scratch (reduce, reduce-scatter, alltoall in place),
  // kept from op to op; only ops on the queue use it, one at a time.
  internal::KeptBuffer scratch_;
  std::unique_ptr<internal::OpQueue> queue_;     // collectives, in order
  std::unique_ptr<WaitPool> p2pWaits_;           // waits of posted send/recv
  std::atomic<uint64_t> seq_{0};
  uint64_t splits_ = 0;
};

}  // namespace accl
