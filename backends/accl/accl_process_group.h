// The accl backend: shared memory within a host, RDMA verbs or TCP between hosts, every
// collective, algorithm selection, deadlines on everything.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "accl/internal/op_queue.h"
#include "accl/process_group.h"
#include "algorithms/cost_model.h"
#include "algorithms/scratch.h"
#include "algorithms/select.h"
#include "transport/host_group.h"
#include "transport/net/net_transport.h"

namespace accl {

class AcclProcessGroup : public ProcessGroup {
 public:
  // Blocks until all `size` ranks have connected through `store`.
  AcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts);
  ~AcclProcessGroup() override;

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
  // Both halves posted to the transport with one Work of two parts.
  std::shared_ptr<Work> doSendRecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                   const SendRecvOptions& o) override;
  std::shared_ptr<ProcessGroup> doSplit(const std::vector<int>& ranks,
                                        const ProcessGroupOptions& opts) override;

 private:
  // Gives the op its sequence number and runs `body(desc, deadline)` in
  // order (inline when small and the group is idle); failures get this
  // group's context and make the group unusable (its ranks no longer agree on
  // where they are). A template so that an inline op allocates nothing but
  // its Work (defined in the .cc, where every op uses it).
  template <typename Body>
  std::shared_ptr<Work> submit(OpType op, size_t count, DataType t, ReduceKind r, int root,
                               size_t bytes, std::chrono::milliseconds timeout, bool blocking, Body&& body);
  // Runs one op (inline or from the queue): fails it if the group broke,
  // else tells the transport, runs body(desc, deadline) and marks the group
  // broken if it throws.
  template <typename Body>
  int runOp(const core::OpDesc& d, std::chrono::milliseconds timeout, uint64_t traceId, const Body& body);
  core::Peers flat();
  core::Peers members(const std::vector<int>& ranks);
  void allreduceBody(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                     const core::OpDesc& d, core::Clock::time_point deadline);
  void logSetup();
  // Where the host's ranks share CPUs, under ACCL_SHM_CMA=auto: times a ring
  // of point-to-point exchanges among the local ranks (`local`, in local-rank
  // order; `pids`, their processes) through the rings and by single copy at
  // kP2pProbeBytes, and sends by single copy from the smallest probed size
  // from which it was faster at every probed size (else from
  // ShmLink::kSingleCopyAutoMinSharedCpus). Every local rank calls it.
  void probePointToPoint(const std::vector<int>& local, const std::vector<int32_t>& pids);
  // Records the algorithm of the op this thread runs in the flight recorder
  // (inline: a few stores on every op's path).
  void noteAlgo(core::Algo a) {
    if (runningTrace_) recorder()->started(runningTrace_, static_cast<int64_t>(runningSeq_), core::toString(a), transportName_);
  }
  // Records a point-to-point op with `peer` (-1: any) as started.
  void tracePointToPoint(int peer);
  // A send's or receive's Work (described lazily), its op recorded as started.
  std::shared_ptr<Work> pointToPointWork(bool send, int peer, int tag, size_t bytes);
  // The waiter's poll, where the link has one, for a posted op still running;
  // run at once for a blocking op (its caller waits next).
  void addWaiterHook(Work& work, int peer, size_t bytes, bool blocking);
  // What op `traceId` moved per peer over the network, into its flight
  // recorder entry (a lock and a copy: called only for ops that crossed hosts).
  __attribute__((noinline)) void notePeerBytes(uint64_t traceId);

  std::shared_ptr<Store> store_;
  uint64_t token_ = 0;
  core::Layout layout_;  // which host each rank is on
  core::AlgoOverrides algo_;
  // From ACCL_TUNING_FILE: chooses the algorithms between hosts (null: the
  // fixed size thresholds).
  std::unique_ptr<core::CostModel> model_;
  std::unique_ptr<core::net::NetTransport> net_;
  std::unique_ptr<core::HostGroup> host_;  // the ranks of this host (this one alone included)
  core::Scratch scratch_;  // the collectives' scratch buffers (one op at a time)
  std::unique_ptr<internal::OpQueue> queue_;
  size_t inlineBytes_ = 0;
  std::atomic<uint64_t> seq_{0};  // collectives' (submit: one issuing thread at a time)
  std::mutex brokenMu_;
  std::string broken_;
  std::atomic<bool> isBroken_{false};  // broken_ is set (checked without the lock per op)
  std::string nicText_;  // which NIC and interface this rank uses (INFO log)
  std::string p2pProbe_;  // the point-to-point probe's figures and verdict (INFO log; "" if none ran)
  uint64_t splits_ = 0;
  std::string prefix_;  // "accl rank R/N accl: "
  const char* transportName_ = "local";  // "shm", "tcp", "shm+ib", ... (flight recorder; static)
  // The flight recorder id and sequence number of the op the group runs now
  // (it runs one at a time), for noteAlgo() and stall notes.
  uint64_t runningTrace_ = 0;
  uint64_t runningSeq_ = 0;
  // The running op's byte sizes per rank (ops run one at a time): refilled
  // per op without an allocation (the uniform ops built one to five vectors
  // per op before; docs/performance-history.md has the figures).
  std::vector<size_t> sizesA_, sizesB_;
  // The uniform ops' sizes, size() copies of uniformOf_: kept apart from the
  // vectors above, so that an op of the last one's size leaves them as they
  // are (filling them again was about 80 instructions of a small scatter).
  std::vector<size_t> uniform_;
  size_t uniformOf_ = 0;
  const std::vector<size_t>& uniformBytes(size_t bytes) {
    if (uniform_.empty() || bytes != uniformOf_) {
      uniform_.assign(static_cast<size_t>(size()), bytes);
      uniformOf_ = bytes;
    }
    return uniform_;
  }
  const std::vector<size_t>& scaledBytes(std::vector<size_t>& s, const std::vector<size_t>& counts, size_t es) {
    s.resize(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) s[i] = counts[i] * es;
    return s;
  }
  void allgatherBody(Buffer in, Buffer out, const std::vector<size_t>& bytes, size_t total, const core::OpDesc& d,
                     core::Clock::time_point deadline);
  // Across hosts of as many ranks each: each rank's block to its rail (the
  // ranks of its local index on the other hosts), then the host's ranks
  // allgather on the segment what their rails brought, into `work`, and
  // each copies the blocks into rank order in `out`.
  void allgatherHierarchical(const void* in, char* out, const std::vector<size_t>& bytes, const core::OpDesc& d,
                             core::Clock::time_point dl);
  // Across hosts of as many ranks each: a reduce-scatter on the segment that
  // leaves each local rank its rail's blocks (the input permuted into rail
  // order first), then one among each rail between hosts.
  void reduceScatterHierarchical(const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                                 ReduceKind k, const core::OpDesc& d, core::Clock::time_point dl);
  // uniformBlock: every block's size where the op says so on every rank
  // (alltoall), else kNotUniform (alltoallv: a rank knows only its own sizes).
  static constexpr size_t kNotUniform = ~size_t(0);
  void alltoallBody(Buffer in, const std::vector<size_t>& sendBytes, Buffer out, const std::vector<size_t>& recvBytes,
                    size_t uniformBlock, const core::OpDesc& d, core::Clock::time_point deadline);
  // Gather and scatter through one rank per host (the root on its host):
  // the segment's gather or scatter there, one message per host between
  // them. `block`: every rank's bytes.
  void gatherHierarchical(const void* in, void* out, size_t block, int root, const core::OpDesc& d,
                          core::Clock::time_point dl);
  void scatterHierarchical(const void* in, void* out, size_t block, int root, const core::OpDesc& d,
                           core::Clock::time_point dl);
  // What gather and scatter through one rank per host share: the
  // representatives (reps(root)), each host's ranks' blocks together
  // (hostSizes), this host's offset among them (at), and the buffers: `all`
  // (the root's: every host's blocks, in host order) and `mine` (this
  // host's blocks, on the root and the representatives; else nullptr).
  struct ViaHosts {
    core::Peers reps;
    int myRep = 0, rootHost = 0;
    std::vector<size_t> hostSizes, local;
    size_t at = 0;
    char* all = nullptr;
    char* mine = nullptr;
  };
  ViaHosts viaHosts(size_t block, int root);
  // Across hosts of as many ranks each, blocks of `block` bytes: along the
  // rails first (each rank's blocks for a host in one message to its
  // rail-mate there), then on the segment.
  void alltoallHierarchical(const void* in, void* out, size_t block, const core::OpDesc& d,
                            core::Clock::time_point dl);
};

}  // namespace accl
