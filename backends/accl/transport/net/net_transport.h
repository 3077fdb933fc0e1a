// The accl backend's network transport. It implements the algorithms'
// Transport seam (transport.h) and the user's point-to-point messages over
// FrameLinks (frame_link.h): the socket link to every peer, the verbs link
// for the data of peers on other hosts where both ends can use RDMA, and
// the shared-memory link for the data of peers on this host (the sockets
// then carry only set-up and control frames, and their closing still tells
// this rank at once that a peer process is gone).
//
// Its parts, one concern each:
//   matcher.h     posted receives and unexpected messages, both spaces
//   op_session.h  the current op, its requests, mismatches, aborts, failure
//   arrivals.h    which op every peer is in, for stall warnings and timeouts
//   event_loop.h  the progress thread's epoll loop
// This class wires them: one progress thread, one lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "accl/store.h"
#include "accl/trace.h"
#include "accl/work.h"
#include "transport/net/arrivals.h"
#include "transport/net/event_loop.h"
#include "transport/net/frame_link.h"
#include "transport/net/ibverbs/port.h"
#include "transport/net/matcher.h"
#include "transport/net/op_session.h"
#include "transport/net/shm/shm_link.h"
#include "transport/net/socket/socket_link.h"
#include "transport/transport.h"

namespace accl {
namespace core {
namespace net {

class VerbsLink;

class NetTransport : public Transport, private FrameSink {
 public:
  // The socket link's (rank, size, streams, token, interface, store, where)
  // and what the rest needs.
  struct Options : SocketLink::Options {
    std::chrono::milliseconds timeout{30000};  // of set-up
    // verbs: peers on other hosts (remote[p]) use it when both ends can;
    // required = no fallback to TCP (ACCL_TRANSPORTS without tcp).
    bool ibWanted = false;
    bool ibRequired = false;
    std::vector<bool> remote;
    ib::Settings ib;
    // Peers on this host (not remote, not this rank): their frames go
    // through shared-memory rings (ShmLink) where both ends can make them.
    bool shmWanted = true;
    bool shmCma = true;  // large frames to local peers may be read with process_vm_readv (probed)
    // ACCL_SHM_CMA=on: from ShmLink's thresholds (kSingleCopyMin*); else
    // (auto) from kSingleCopyAutoMin*: larger sizes than on's.
    bool shmCmaAlways = false;
    // ACCL_SHM_STREAM_BYTES (ShmLink::Options::stream).
    long long shmStream = -1;
    // The process's budget for the buffers of large messages that arrived
    // before their receive, kept for the next (Matcher; ACCL_UNEXPECTED_CACHE_MB).
    size_t unexpectedCacheBytes = Matcher::kDefaultSpareLimit;
    // Diagnosis: an op that has waited stallWarn (0: never) logs a WARN with
    // where every peer is, again at 2x, 4x, ... that time; onStall (may be
    // empty) gets the same text. hosts[r] labels rank r in it (may be empty).
    std::chrono::milliseconds stallWarn{0};
    std::function<void(const std::string&)> onStall;
    std::vector<std::string> hosts;
  };

  explicit NetTransport(Options o);
  ~NetTransport() override;

  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }

  // Marks the start / end of an op: its descriptor goes into every data frame,
  // peers asking whether this rank arrived get its sequence number, and the
  // deadline bounds every wait. endOp with an error tells all peers (abort frame).
  // `deadline` is when the op began plus `timeout` (named in timeout errors;
  // the stall warnings count from deadline - timeout).
  void beginOp(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout);
  void endOp(const std::string& error = "");
  // The end of an op that moved nothing through this transport (a group on
  // one host): no lock, no bookkeeping (OpSession::leave).
  void leaveOp() { session_.leave(); }
  // The start of such an op: no lock (OpSession::beginLocal), only what the
  // stall warnings and the peers' queries read.
  void beginLocalOp(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout) {
    session_.beginLocal(d, deadline, timeout);
    armStallWarning(deadline, timeout);
  }

  void send(int peer, uint32_t step, const void* buf, size_t len) override;
  void recv(int peer, uint32_t step, void* buf, size_t len) override;
  void wait() override;
  size_t posted() const override;
  void waitFirst(size_t n) override;

  // Point-to-point messages of the user API: matched by (source, tag) in order
  // of posting, like MPI; peer may be -1 (any source) for receives. Posted at
  // once; `work` (not yet handed out: no other thread can reach it) completes
  // here when the message is done at once (sent into a ring, or had arrived),
  // else on the progress thread or a waiter when it is done, failed, or
  // `deadline` passed (Timeout).
  void postTagged(bool isSend, int peer, int tag, void* buf, size_t len, Clock::time_point deadline,
                  const std::shared_ptr<Work>& work);
  // A sendrecv's two parts of `work`, under one hold of the lock: the send
  // first, or the receive first (sendFirst false), as two postTagged would.
  // With the send first (a blocking op: its caller waits next), a small
  // receive from a local peer waits for its message in the peer's ring for
  // a few microseconds before a request is made for it.
  void postSendRecv(bool sendFirst, int dst, int sendTag, const void* sendBuf, size_t sendLen, int src, int recvTag,
                    void* recvBuf, size_t recvLen, Clock::time_point deadline, const std::shared_ptr<Work>& work);

  // For a point-to-point Work with `peer` (-1: any source), set before the
  // Work is handed out: a thread that waits on it polls the shared-memory
  // link, or for a small message over TCP the peer's socket, itself for a
  // while before it sleeps (completing whatever finished): a message already
  // there, or coming soon, costs no wake-up of the progress thread and of
  // the waiter. Null where neither serves the peer (any source with no peer
  // over shared memory, a large message over TCP; verbs is left to the
  // progress thread). Harmless once the transport is gone.
  std::function<void(Work&)> waiterHook(int peer, size_t bytes = 0);
  // The same poll, run now by a thread that is about to wait on `w` (a
  // blocking op, just posted): no hook to make and release. False (nothing
  // done) where the link does not serve `peer`.
  bool pollForWaiter(Work& w, int peer, size_t bytes);
  // How many frames from peers over TCP waiters read themselves (above, and
  // an op's waits: pollForOpWaiter), not the progress thread.
  uint64_t framesReadByWaiters() const { return waiterFrames_.load(std::memory_order_relaxed); }
  // How many messages arrived before their receive and were held (copied
  // once more when it was posted), and how many frames over TCP were left in
  // their socket a while instead (SocketLink::kDeferMin), since the
  // transport was made.
  struct Holding {
    uint64_t messagesHeld = 0, framesLeftInSocket = 0;
    uint64_t socketReads = 0;  // recv calls on the connections (SocketLink::reads)
    uint64_t socketsLingered = 0;  // sockets an op's waiter left polled (SocketLink::linger)
  };
  Holding holding() const;
  // Where the ranks of this host share CPUs (or this machine's, across the
  // hosts its namespaces or containers make): a waiter then gives its core up
  // between polls rather than spin, the progress thread does not spin on the
  // rings after a frame, and point-to-point messages to them go by single
  // copy from a larger size (ShmLink::singleCopyMin). Under ACCL_SHM_CMA=auto
  // with a CPU each, from ShmLink::kSingleCopyAutoMinOwnCpus, or from
  // `probedSingleCopyFrom` where that is smaller (ShmDomain::
  // singleCopyEveryBandFrom; not below kSingleCopyMinOwnCpus).
  void setLocalRanksShareCpus(bool shared, size_t probedSingleCopyFrom = SIZE_MAX);

  // For waits outside this transport (shared memory): throws RemoteError if
  // one of `peers` failed or any peer aborted the current op; detects mismatch.
  void checkPeers(const std::vector<int>& peers);
  // For a peer known to have exited (shared memory saw its process go):
  // waits until its connection's end was read (so every notice it sent
  // before leaving was handled), at most `grace`, then throws the abort it
  // sent for the current op, if any. Returns if it sent none.
  void throwAbortOfExited(int peer, std::chrono::milliseconds grace);
  // Throws accl::Timeout for the current op after asking every peer which op
  // it is in; names the ranks that did not arrive. `waitingFor` is what this
  // rank was waiting on when the deadline passed.
  [[noreturn]] void throwTimeout(const std::string& waitingFor);
  // For waits outside this transport (shared memory): whether the current op
  // is due for a stall warning (cheap), and the warning itself, which asks
  // every peer where it is (takes up to 1.5 s). `waitingFor` names what this
  // rank waits on.
  bool stallDue() const { return Clock::now().time_since_epoch().count() >= nextStallNs_.load(std::memory_order_relaxed); }
  void warnStall(const std::string& waitingFor);

  // What this rank exchanged with each peer (index = rank) since the
  // transport was made: payload bytes of data frames, and the time during
  // which at least one frame from the peer was arriving (bytes / that time is
  // the rate the link delivered at while it carried data; a frame that lands
  // at once, as over verbs, adds no time).
  std::vector<PeerTraffic> traffic() const;
  // The payload bytes the current op (since beginOp) posted to and from each
  // peer it exchanged data with, in the order the peers were first used
  // (the flight recorder's per-op traffic).
  struct OpBytes {
    int rank = -1;
    uint64_t sent = 0, received = 0;
  };
  std::vector<OpBytes> opTraffic() const;
  // The same into `out` (room for `max`), with no allocation; returns how
  // many peers there are (only `max` of them copied when more).
  size_t opTrafficInto(OpBytes* out, size_t max) const;

  const std::string& interfaceName() const;
  const std::string& address() const;
  // Whether frames to `peer` go over verbs; how (device, port, queue pairs,
  // chunks, send mode; "" without verbs); why verbs is not used for the
  // other peers ("" if it is for all).
  bool overIb(int peer) const;
  // Whether frames to `peer` go through the shared-memory link; its ring
  // size; why it does not serve some local peers ("" if it serves all).
  bool overShm(int peer) const { return shm_ && shm_->serves(peer); }
  // Whether `peer` is another rank of this host (o_.remote).
  bool onThisHost(int peer) const {
    return peer != o_.rank && peer < static_cast<int>(o_.remote.size()) && !o_.remote[peer];
  }
  // Whether a message of `bytes` to `peer` goes by single copy: the peer
  // reads it from this process's memory (ShmLink::singleCopyMin).
  bool singleCopyTo(int peer, size_t bytes) const {
    return overShm(peer) && shm_->singleCopyTo(peer) && bytes >= shm_->singleCopyMin();
  }
  // The smallest point-to-point message to a local peer that goes by single
  // copy (SIZE_MAX: none), and whether the group may choose it by measuring
  // (ACCL_SHM_CMA=auto, and single copy allowed to every local peer). The
  // group's point-to-point probe (AcclProcessGroup::probePointToPoint) sets
  // it on every local rank alike; a receiver takes either way.
  size_t shmSingleCopyMin() const { return shm_ ? shm_->singleCopyMin() : SIZE_MAX; }
  void setShmSingleCopyMin(size_t bytes) {
    if (shm_) shm_->setSingleCopyMin(bytes);
  }
  bool shmSingleCopyProbeable() const;
  std::string describeShm() const;
  const std::string& whyNotShm() const { return shmWhy_; }
  std::string describeIb() const;
  const std::string& whyNotIb() const { return ibWhy_; }

  // Over TCP, the smallest message left in its socket while an earlier one
  // of its peer is held (readNow); without one held: SocketLink::kDeferMin.
  static constexpr size_t kLagDeferMin = size_t(256) << 10;

 private:
  struct Tagged {
    RequestPtr req;
    std::shared_ptr<Work> work;
    Clock::time_point deadline;
  };

  // FrameSink (called with mu_ held)
  LandingPtr onHeader(int peer, const FrameHeader& h) override;
  void onFrame(int peer, const FrameHeader& h, const LandingPtr& l) override;
  void onSent(const OutPtr& m) override { m->frameSent(); }
  bool landWhole(int peer, const FrameHeader& h, const char* payload) override;
  bool readNow(int peer, const FrameHeader& h) override;
  // A data frame (an op's step, a point-to-point message) that is not left
  // over from an op this rank completed: its matching space in *s, and its
  // op's descriptor noted (a mismatch is seen as soon as a header is).
  bool liveData(int peer, const FrameHeader& h, Space* s);
  void onPeerFailed(FrameLink* link, int peer, const std::string& why) override;
  // Statistics (mu_ held): a data frame of `len` bytes from `peer` started
  // arriving / landed.
  void noteArriving(int peer, size_t len);
  void noteArriving(int peer, size_t len, const Inbound& in);  // a data frame (counts held bytes)
  void noteLanded(int peer, size_t len);
  static constexpr size_t kTimedFrameBytes = size_t(16) << 10;

  // What keeps waiterHook's poll off a destroyed transport (the destructor
  // takes the gate exclusively and clears it), and the poll loop.
  struct WaiterGate {
    std::shared_mutex m;
    NetTransport* t = nullptr;
  };
  // `tcpPeer` >= 0: the waiter reads that peer's socket (stream 0), which
  // meanwhile does not wake the loop; else it polls the rings as a guest.
  static void progressForWaiter(WaiterGate& g, Work& w, std::chrono::microseconds spin, bool yields, int tcpPeer);
  // How a waiter on `peer` polls (how long, whether it yields between
  // passes, over TCP: tcpPeer); false where neither the rings nor a socket
  // poll serves it.
  bool waiterPoll(int peer, size_t bytes, std::chrono::microseconds& spin, bool& yields, int& tcpPeer) const;
  std::shared_ptr<WaiterGate> gate_ = std::make_shared<WaiterGate>();
  std::atomic<bool> spinningWaiters_{true};
  // Whether the progress thread has no CPU of its own: the host's ranks
  // share cores, or this process may run on no more CPUs than the host has
  // local ranks (a rank bound to a core, 2 ranks on 2 CPUs). Its lazy look
  // then backs off while waiters poll (progressLoop).
  std::atomic<bool> loopTakesRankCpu_{false};
  std::atomic<uint64_t> waiterFrames_{0};  // framesReadByWaiters (written with mu_ held)
  // When the progress thread's current wait ends at the latest (steady-clock
  // ns; the largest value before its first pass): a waiter that leaves a
  // socket lingering past it wakes the loop.
  std::atomic<int64_t> loopWakeBy_{INT64_MAX};
  // A waiter hook's state: the gate and how long the waiter polls. The hook
  // holds only a pointer to it, so that std::function keeps it inline (no
  // allocation per op); small messages share one of these two (index 0: the
  // host's ranks share cores, the waiter yields; 1: it spins).
  struct HookState {
    std::weak_ptr<WaiterGate> gate;
    std::chrono::microseconds spin;
    bool yields;  // gives the core up between passes (ranks share cores)
    int tcpPeer;  // >= 0: the socket of this peer is polled (yields: as the transport says then)
  };
  std::shared_ptr<const HookState> smallHooks_[2];
  std::vector<std::shared_ptr<const HookState>> tcpHooks_;  // per peer over TCP (else null)

  void setupIb(Clock::time_point deadline);
  void setupShm(Clock::time_point deadline);
  // Before tear-down: tells every peer served over verbs how many of its
  // writes arrived (FrameType::Farewell), and waits up to 1 s for the
  // sockets to carry it.
  void sayFarewell();
  void progressLoop();
  FrameLink& dataLink(int peer);
  void sendControl(int peer, FrameType type, uint64_t key, std::shared_ptr<OutMessage> owner, const std::string* text);
  void failPeer(int peer, const std::string& why);
  // Sends a Query to every connected peer and waits (lk held, released while
  // waiting) until all answered or the grace time passed.
  void queryArrivals(std::unique_lock<std::mutex>& lk);
  // "data from rank 3 (nothing heard from it for 2.1 s), send to rank 1" for
  // the current op's unfinished requests (mu_ held).
  std::string waitingText();
  // An op's waiter on small messages (mu_ held) reads its peers' sockets
  // (stream 0) and, as a guest, the rings itself, as Open MPI's transports
  // do, rather than sleep until the progress thread, woken by the bytes
  // (or by a ring's doorbell), reads them and wakes it: two wake-ups per
  // step on the critical path. While it polls, those sockets and the rings
  // do not wake the progress thread. One pass per call, then true (look
  // again), for kSocketPollUs from the first pass; false: nothing to poll
  // for (verbs, a larger message), or the time is up (the links wake the
  // loop again and the waiter sleeps).
  struct OpPoll {
    NetTransport* t;
    std::unique_lock<std::mutex>& lk;
    int peers[8] = {};  // whose sockets are polled
    int n = 0;
    bool guest = false;  // of the rings
    Clock::time_point until{};
    ~OpPoll() {
      if (n || guest) end(false);
    }
    // The polled links wake the loop again (takes the lock if need be).
    // `served`: the op got what it waited for; its sockets then linger
    // (SocketLink::linger) for kSocketLingerUs, for the next op's waiter.
    // Not served (the waiter sleeps, or fails): every lingering socket goes
    // back to the loop too.
    void end(bool served);
  };
  bool pollForOpWaiter(OpPoll& op);
  static constexpr size_t kSocketPollMaxBytes = size_t(64) << 10;
  static constexpr int kSocketPollUs = 200;
  // 2 namespace hosts x 2 ranks on 2 cores, back-to-back allreduce,
  // allgather and alltoall of 32 B - 2 KiB: 0.50-0.95 of the time with the
  // socket given back to the loop at once (a wake-up of the progress thread
  // per message, on a core the ranks need); the receiving rank of 8-byte
  // broadcasts between 2 hosts switched 29,000 times instead of 7,000 per
  // 100,000 ops.
  static constexpr int kSocketLingerUs = 1000;
  // Throws the op's first failure (mu_ held), after withdrawing its requests.
  void throwIfFailed(const std::vector<int>& peers);
  // Withdraws a request (mu_ held): once this returns, nothing reads or
  // writes its buffer. It is done, failed with `why` unless it failed
  // already; `what` names it in the log when part of a send was written.
  void withdrawLocked(const RequestPtr& r, const std::string& why, const char* what);
  // Withdraws every request of the current op (mu_ held): called before an
  // error of the op leaves this transport, so that buffers freed while the
  // error unwinds (the algorithm's scratch, the caller's) are never touched.
  void retireOpLocked();
  // The op that began now warns after ACCL_STALL_WARN (the caller read the
  // clock for the deadline: no second read per op).
  void armStallWarning(Clock::time_point deadline, std::chrono::milliseconds timeout) {
    probeAt_ = deadline - timeout + kMismatchProbe;
    if (o_.stallWarn.count() <= 0) return;
    opBegan_ = deadline - timeout;
    nextStallNs_.store((opBegan_ + o_.stallWarn).time_since_epoch().count(), std::memory_order_relaxed);
  }
  // A point-to-point Work to complete after mu_ is released (it may run
  // callbacks), with its outcome.
  struct Completion {
    std::shared_ptr<Work> work;
    std::exception_ptr error;
    int source;
    void run() { work->markCompleted(std::move(error), source); }
  };
  // The finished (done, failed, or with a deadline before `now` timed out)
  // point-to-point ops, taken off tagged_ into `out` (appended).
  // Clock::time_point::min(): no deadlines checked.
  void reapTagged(std::vector<Completion>& out, Clock::time_point now);
  // A small receive from local peer `peer` may land straight in its buffer
  // (no point-to-point op pending, nothing deferred or lingering), mu_ held.
  bool directAllowedLocked(int peer, size_t len) const;
  // Such a receive: reads the peer's ring, and completes `work`'s part if its
  // message was there (true). mu_ held.
  bool directLocked(int peer, uint64_t key, void* buf, size_t len, const std::shared_ptr<Work>& work);
  // postTagged's body, mu_ held. `polledAtOnce`: the caller polls for
  // `work` as soon as this returns (a blocking op's waiter), and reaps its
  // parts itself.
  void postTaggedLocked(bool isSend, int peer, int tag, void* buf, size_t len, Clock::time_point deadline,
                        const std::shared_ptr<Work>& work, bool polledAtOnce = false);

  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<SocketLink> sockets_;
  std::unique_ptr<VerbsLink> verbs_;
  std::unique_ptr<ShmLink> shm_;
  std::string shmWhy_;
  std::vector<bool> ibPeer_;
  std::string ibWhy_;
  Matcher matcher_;
  OpSession session_;
  Arrivals arrivals_;
  std::vector<Tagged> tagged_;           // user sends/recvs not yet completed
  // A small receive from a local peer being posted (postTagged, mu_ held):
  // the first whole message of its tag that its peer's ring holds, with no
  // earlier receive or message in the way, lands in `buf` (landWhole), with
  // no request made for it. `buf` is null otherwise.
  struct DirectReceive {
    int peer = -1;
    uint64_t key = 0;
    char* buf = nullptr;
    size_t len = 0;
    bool took = false;
  };
  DirectReceive direct_;
  std::vector<std::string> peerFailed_;  // per peer: why it failed ("" = fine)
  // Statistics per peer (mu_ held): bytes sent and received, receive busy
  // time; receiving_ counts the data frames of kTimedFrameBytes or more from
  // the peer whose header arrived and payload did not yet.
  struct Counters {
    uint64_t sent = 0, received = 0, timed = 0;  // timed: of received, in frames busyNs covers
    uint64_t held = 0;                           // of received, landed in a held copy
    int64_t busyNs = 0;
  };
  std::vector<Counters> traffic_;
  std::vector<OpBytes> opTraffic_;  // this op's peers (mu_)
  std::vector<int> opTrafficAt_;    // peer -> index in opTraffic_, -1: none yet
  void countOp(int peer, size_t len, bool sent);
  std::vector<int> receiving_;
  std::vector<Clock::time_point> busySince_, lastHeard_;
  // Steady-clock ns at which the current op is due for a stall warning.
  std::atomic<int64_t> nextStallNs_{INT64_MAX};
  Clock::time_point opBegan_{};
  // A collective's wait that lasts kMismatchProbe asks the peers which op
  // they are in (Query frames; the Reply carries the op), again each time
  // the wait has doubled: ranks that each wait for the other's data (each
  // took the other for a broadcast's root) exchange no frame whose op could
  // differ from theirs, and would otherwise wait out the whole timeout.
  static constexpr std::chrono::milliseconds kMismatchProbe{1000};
  Clock::time_point probeAt_{};  // the op's next probe (mu_, or the op's own thread)
  void probeArrivals();
  std::mutex stallMu_;  // one warning at a time
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace net
}  // namespace core
}  // namespace accl
