// The mpi backend: accl::ProcessGroup over the MPI library (Open MPI).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accl/internal/kept_buffer.h"
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
  std::shared_ptr<Work> doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) override;
  std::shared_ptr<Work> doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) override;
  std::shared_ptr<Work> doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                    const std::vector<size_t>& recvCounts,
                                    const AlltoallOptions& o) override;
  std::shared_ptr<Work> doGather(Buffer in, Buffer out, const GatherOptions& o) override;
  std::shared_ptr<Work> doScatter(Buffer in, Buffer out, const ScatterOptions& o) override;
  std::shared_ptr<Work> doBarrier(const BarrierOptions& o) override;
  std::shared_ptr<Work> doSend(Buffer buf, int dst, const SendOptions& o) override;
  std::shared_ptr<Work> doRecv(Buffer buf, int src, const RecvOptions& o) override;
  // MPI_Irecv and MPI_Isend tested together (MPI_Testall): one Work, one
  // pending record, as MPI_Sendrecv posts them.
  std::shared_ptr<Work> doSendRecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                   const SendRecvOptions& o) override;
  std::shared_ptr<ProcessGroup> doSplit(const std::vector<int>& ranks,
                                        const ProcessGroupOptions& opts) override;

 private:
  // What a running op knows of itself: enough to name it in an error, built
  // into a message only when one is needed.
  struct Call {
    OpType op;
    size_t count;
    uint64_t seq;
    uint64_t traceId;
    std::chrono::milliseconds timeout;
    bool blocking;  // run MPI's blocking collective (under the guard), not the non-blocking one
  };
  // Queues the op (or runs it on the calling thread: small ops, blocking
  // calls, and a waiter whose op is next in line). `body(const Call&)`
  // posts its MPI call through collective().
  template <typename Body>
  std::shared_ptr<Work> submit(OpType op, size_t count, size_t bytes, const OpOptions& o, Body&& body);
  // Runs one queued or inline op: fails it if the group broke, else body(c).
  template <typename Body>
  int runCall(const Call& c, const Body& body);
  // Runs one collective: `blocking()` (returns an MPI error code) when
  // c.blocking, else `start(MPI_Request*)` and polls the request until done or
  // the deadline passes.
  template <typename Blocking, typename Start>
  void collective(const Call& c, const char* mpiName, Blocking&& blocking, Start&& start);
  // "allreduce #7 (1024 elements)", with the rank prefix.
  std::string describe(const Call& c) const;
  // `n` as MPI's int count; NotSupported above INT_MAX.
  int countOf(size_t n, const Call& c) const;
  // Polls `req` to completion; throws Timeout (and marks the group broken) at
  // the deadline. `what()` names the op, called only for an error.
  template <typename What>
  MPI_Status wait(MPI_Request req, std::chrono::milliseconds timeout, What&& what);
  void allreduceInPlace(Buffer buf, const ReduceOp& op, const Call& c);
  // The guard of blocking calls: a thread that aborts the job (MPI_Abort) when
  // one outlives its deadline, which MPI gives no other way to end.
  void guardLoop();

  // A point-to-point request that did not complete when it was posted. The
  // thread that waits on its Work polls it (the wait hook); the progress
  // thread polls what no thread waits on. One thread tests it at a time
  // (`claimed`): MPI forbids two testing one request at once.
  // Its record (copyable: an op's is made on the stack, and copied to the
  // heap only when the op is left pending).
  struct P2pRecord {
    MpiProcessGroup* g = nullptr;  // touched only until finished
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // a sendrecv's: receive, send
    int nreq = 1;
    std::shared_ptr<Work> work;  // until it finished (then the Work holds this, through its hook)
    std::chrono::steady_clock::time_point posted, deadline;
    std::chrono::milliseconds timeout{0};
    bool isRecv = false;
    int peer = 0, tag = 0;  // recv: kAnySource or the source
    int sendPeer = -1, sendTag = 0;  // a sendrecv's send (isRecv is set: req[0] is its receive)
    size_t count = 0;
    DataType dtype = DataType::Float32;
    // The Work is not handed out yet (its caller waits here, waitHere): it
    // is completed without its lock.
    bool unshared = false;
  };
  struct PendingP2p : P2pRecord {
    std::atomic<bool> claimed{false};
    std::atomic<bool> finished{false};
  };
  // A receive's record: buffer, source and tag (the rest is filled in by
  // waitHere or pendP2p).
  static void recvRecord(P2pRecord& p, Buffer buf, int src, int tag);
  // `q`'s op on the calling thread, which waits for it at once (a blocking
  // call): its requests are tested until they finished, with no record for
  // the progress thread, no wait hook and no allocation. Its deadline (from
  // the first read of the clock, after 256 tests) fails it with a Timeout
  // as a pending request's would.
  void waitHere(PendingP2p& q, const std::shared_ptr<Work>& work, std::chrono::milliseconds timeout);
  // The op of record `q` left pending (not waited for at once): `work`
  // completes when q's requests do. The record is copied to the heap, for
  // the Work's waiter (its wait hook polls it) and the progress thread.
  std::shared_ptr<Work> pendP2p(std::shared_ptr<Work> work, const P2pRecord& q, std::chrono::milliseconds timeout);
  // "send to rank 1 tag 7" / "recv from any rank tag 7", with the rank prefix.
  std::string describeP2p(bool isRecv, int peer, int tag) const;
  // The same for a pending request, a sendrecv's naming both halves.
  std::string describeP2p(const P2pRecord& p) const;
  // A completed receive's source rank; InvalidArgument naming both sizes if
  // its message was not `count` elements.
  int recvSource(const MPI_Status& st, DataType dtype, size_t count, int src, int tag) const;
  // One test of `p` (its claim held): true once it finished (its Work
  // completed: done, failed, or past its deadline when `clock`).
  bool testP2p(PendingP2p& p, bool clock);
  void p2pLoop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  // The collectives' scratch (premul_sum, an overlapping reduce-scatter,
  // alltoallv in place), kept from op to op; only ops on the queue use it,
  // one at a time.
  internal::KeptBuffer scratch_;
  std::unique_ptr<internal::OpQueue> queue_;
  std::mutex p2pMu_;
  std::condition_variable p2pCv_;
  std::vector<std::shared_ptr<PendingP2p>> p2p_;  // the progress thread's (finished ones go on its next pass)
  bool p2pIdle_ = false;                          // it sleeps until a request comes (else it looks every tick)
  bool p2pStop_ = false;
  std::thread p2pThread_;
  // Sequence numbers, in descriptions and errors: collectives ("allreduce #7";
  // one issuing thread at a time) and point-to-point ops (any thread).
  std::atomic<uint64_t> collSeq_{0};
  std::atomic<uint64_t> p2pSeq_{0};
  size_t inlineBytes_ = 0;    // ACCL_MPI_BLOCKING_BYTES: ops up to it run on the calling thread
  size_t blockingBytes_ = 0;  // the same, 0 when MPI serializes calls: ops up to it call blocking MPI
  // The blocking call in progress (0: none; else its sequence number + 1),
  // read by the guard, which times it from the first tick that sees it: the
  // call reads no clock.
  std::atomic<uint64_t> guardActive_{0};
  // Its description, each field atomic (relaxed): the guard re-reads
  // guardActive_ after them and skips a torn copy.
  std::atomic<uint64_t> guardSeq_{0}, guardCount_{0}, guardTraceId_{0};
  std::atomic<int64_t> guardTimeoutMs_{0};
  std::atomic<int> guardOp_{0};
  std::atomic<const char*> guardMpiName_{nullptr};
  std::mutex guardMu_;
  std::condition_variable guardCv_;
  bool guardStop_ = false;
  std::thread guard_;
  std::mutex brokenMu_;
  std::atomic<bool> isBroken_{false};
  std::string broken_;  // set after a timeout: the group can no longer be used
};

}  // namespace accl
