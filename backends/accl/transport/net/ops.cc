// NetTransport: the algorithms' side (an op's sends, receives and wait) and
// the user's point-to-point messages.
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "accl/errors.h"
#include "accl/internal/work_pool.h"
#include "accl/logging.h"
#include "accl/process_group.h"
#include "transport/net/net_transport.h"

namespace accl {
namespace core {
namespace net {

namespace {
constexpr auto kQueryGrace = std::chrono::milliseconds(1500);
// A stall warning this late (the waiter checks at least every 100 ms) says
// that its thread did not run.
constexpr int64_t kStallLateMs = 500;

}  // namespace

// ---------------------------------------------------------------- op sessions

void NetTransport::beginOp(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  session_.begin(d, deadline, timeout);
  if (!opTraffic_.empty()) {
    for (const auto& b : opTraffic_) opTrafficAt_[b.rank] = -1;
    opTraffic_.clear();
  }
  armStallWarning(deadline, timeout);
  // Messages of this op that arrived early tell whether the peers run the
  // same op; those of ops before it are late. (Usually none are held: then
  // no std::function is built.)
  if (matcher_.heldCount() == 0) return;
  matcher_.sweepHeldOps([&](const Inbound& u) {
    uint64_t seq = u.key >> 32;
    if (seq < d.seq) {
      if (!session_.anyFailed()) session_.noteLate(u.peer, u.desc);
      return true;
    }
    if (seq == d.seq) session_.noteDesc(u.peer, u.desc);
    return false;
  });
}

void NetTransport::endOp(const std::string& error) {
  std::lock_guard<std::mutex> lk(mu_);
  matcher_.forgetOpsUpTo(session_.current().seq);
  nextStallNs_.store(INT64_MAX, std::memory_order_relaxed);
  // The op failed: nothing of it touches the caller's buffers any more (the
  // peers get the abort below instead). Usually done already by the wait
  // that threw; errors raised outside this transport arrive here.
  if (!error.empty()) retireOpLocked();
  session_.end(error.empty());
  if (error.empty()) return;
  auto reason = std::make_shared<OwnedText>(error.substr(0, kMaxAbortBytes));
  for (int p = 0; p < o_.size; ++p) {
    if (p == o_.rank || !sockets_->serves(p) || !peerFailed_[p].empty()) continue;
    sendControl(p, FrameType::Abort, session_.current().seq, reason, &reason->text);
  }
}

void NetTransport::send(int peer, uint32_t step, const void* buf, size_t len) {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = std::make_shared<Request>();
  r->isSend = true;
  r->peer = peer;
  r->len = len;
  r->key = (session_.current().seq << 32) | step;
  session_.requests().push_back(r);
  if (!peerFailed_[peer].empty()) {
    r->fail(Failure::Remote, "rank " + std::to_string(peer) + ": " + peerFailed_[peer]);
    return;
  }
  traffic_[peer].sent += len;
  countOp(peer, len, true);
  dataLink(peer).send(peer, FrameType::Data, r->key, session_.current(), static_cast<const char*>(buf), len, r,
                      FrameLink::Route::Spread);
}

void NetTransport::recv(int peer, uint32_t step, void* buf, size_t len) {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->buf = static_cast<char*>(buf);
  r->len = len;
  r->key = (session_.current().seq << 32) | step;
  session_.requests().push_back(r);
  countOp(peer, len, false);
  matcher_.post(r);
  // A frame from the peer left in its socket waits no longer (the loop reads it).
  if (sockets_->deferring()) sockets_->resumeDeferred(peer);
  // Nor one a lingering socket holds, where the op's waiter will not poll
  // for this receive (pollForOpWaiter: a larger message).
  if (len > kSocketPollMaxBytes && sockets_->lingering()) sockets_->endLingers(false);
  if (!r->done && !peerFailed_[peer].empty()) {
    matcher_.withdraw(r);
    r->fail(Failure::Remote, "rank " + std::to_string(peer) + ": " + peerFailed_[peer]);
  }
}

NetTransport::Holding NetTransport::holding() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {matcher_.heldEver(), sockets_->framesDeferred(), sockets_->reads(), sockets_->lingered()};
}

void NetTransport::countOp(int peer, size_t len, bool sent) {
  if (peer < 0 || peer >= o_.size) return;
  int& at = opTrafficAt_[peer];
  if (at < 0) {
    at = static_cast<int>(opTraffic_.size());
    opTraffic_.push_back({peer, 0, 0});
  }
  (sent ? opTraffic_[at].sent : opTraffic_[at].received) += len;
}

std::vector<NetTransport::OpBytes> NetTransport::opTraffic() const {
  std::lock_guard<std::mutex> lk(mu_);
  return opTraffic_;
}

size_t NetTransport::opTrafficInto(OpBytes* out, size_t max) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::copy_n(opTraffic_.begin(), std::min(max, opTraffic_.size()), out);
  return opTraffic_.size();
}

void NetTransport::throwIfFailed(const std::vector<int>& peers) {
  try {
    session_.check(peerFailed_, peers);
  } catch (...) {
    // Before the error leaves the transport (and the algorithm's scratch
    // buffers are freed by unwinding), every request of the op is withdrawn.
    retireOpLocked();
    throw;
  }
}

void NetTransport::wait() { waitFirst(SIZE_MAX); }

size_t NetTransport::posted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return session_.requests().size();
}

void NetTransport::waitFirst(size_t n) {
  WaitScope timed(waitTimes_);
  std::unique_lock<std::mutex> lk(mu_);
  OpPoll polls{this, lk, {}};  // after lk: its end runs first
  for (;;) {
    // A zero-length receive completes when its frame's header was handled.
    bool all = n >= session_.requests().size();
    bool done = session_.firstDone(n);
    throwIfFailed({});
    if (done) {
      polls.end(true);
      if (all) session_.requests().clear();
      return;
    }
    if (Clock::now() >= session_.deadline()) {
      std::string waiting = waitingText();
      polls.end(false);  // the peers' answers to the queries wake the loop
      lk.unlock();
      throwTimeout(waiting);
    }
    if (stallDue()) {
      std::string waiting = waitingText();
      polls.end(false);
      lk.unlock();
      warnStall(waiting);
      lk.lock();
      continue;
    }
    auto now = Clock::now();
    if (now >= probeAt_) {
      polls.end(false);  // the replies come through the progress thread
      probeAt_ = now + (now - (session_.deadline() - session_.timeout()));
      probeArrivals();
      continue;
    }
    if (pollForOpWaiter(polls)) continue;
    cv_.wait_until(lk, std::min(session_.deadline(), Clock::now() + std::chrono::milliseconds(100)));
  }
}

void NetTransport::OpPoll::end(bool served) {
  if (n == 0 && !guest && served) return;
  if (!lk.owns_lock()) lk.lock();
  if (served && n) {
    int64_t until = Clock::now().time_since_epoch().count() + int64_t(kSocketLingerUs) * 1000;
    for (int i = 0; i < n; ++i) t->sockets_->linger(peers[i], until);
    // The loop gives them back by then (it sleeps until then at most).
    if (t->loopWakeBy_.load(std::memory_order_relaxed) > until) t->loop_->wake();
  } else {
    for (int i = 0; i < n; ++i) t->sockets_->setPolled(peers[i], false);
    if (!served) t->sockets_->endLingers(false);
  }
  n = 0;
  if (guest) t->shm_->guestEnd(served);
  guest = false;
}

bool NetTransport::pollForOpWaiter(OpPoll& op) {
  // The peers over TCP whose small messages the op still waits for, and
  // whether some come over the rings; a larger message among them (its
  // bytes come over several streams, at the link's rate, which a sleep does
  // not slow), or one over verbs: the waiter sleeps.
  constexpr int kMaxPeers = static_cast<int>(sizeof(op.peers) / sizeof(op.peers[0]));
  int peers[kMaxPeers];
  int np = 0;
  bool rings = false, sleep = false;
  for (const auto& r : session_.requests()) {
    if (r->done || r->isSend) continue;
    if (r->peer < 0 || r->len > kSocketPollMaxBytes || overIb(r->peer)) {
      sleep = true;
      break;
    }
    if (overShm(r->peer)) {
      rings = true;
      continue;
    }
    bool seen = false;
    for (int i = 0; i < np; ++i) seen = seen || peers[i] == r->peer;
    if (seen) continue;
    if (np == kMaxPeers) {
      sleep = true;
      break;
    }
    peers[np++] = r->peer;
  }
  auto now = Clock::now();
  if (op.until == Clock::time_point{}) op.until = now + std::chrono::microseconds(kSocketPollUs);
  if (sleep || (np == 0 && !rings) || now >= op.until) {
    op.end(false);
    return false;
  }
  uint64_t frames = 0;
  for (int i = 0; i < np; ++i) {
    bool known = false;
    for (int j = 0; j < op.n; ++j) known = known || op.peers[j] == peers[i];
    if (!known) {
      op.peers[op.n++] = peers[i];
      sockets_->setPolled(peers[i], true);
    }
    frames += sockets_->pollPeer(peers[i]);
  }
  bool moved = frames > 0;
  if (moved) waiterFrames_.fetch_add(frames, std::memory_order_relaxed);
  if (rings) {
    if (!op.guest) shm_->guestBegin(), op.guest = true;
    moved = shm_->pollAsGuest() || moved;
  }
  if (moved) {
    // What they finished is looked at again at once. Point-to-point
    // requests among them are the progress thread's to complete.
    if (!tagged_.empty()) loop_->wake();
    return true;
  }
  // Nothing yet: the lock goes to the progress thread for a moment, and the
  // core too where this host's ranks share cores (the peer may need it).
  op.lk.unlock();
  if (spinningWaiters_.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
  op.lk.lock();
  return true;
}

void NetTransport::checkPeers(const std::vector<int>& peers) {
  std::lock_guard<std::mutex> lk(mu_);
  throwIfFailed(peers);
}

void NetTransport::throwAbortOfExited(int peer, std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lk(mu_);
  if (peer < 0 || peer >= o_.size || peer == o_.rank) return;
  auto until = Clock::now() + grace;
  while (peerFailed_[peer].empty() && sockets_->serves(peer) && Clock::now() < until) cv_.wait_until(lk, until);
  throwIfFailed({});  // aborts and mismatches only: the closed connection is the caller's to report
}

// ---------------------------------------------------------------- arrivals

std::string NetTransport::waitingText() {
  std::string waiting;
  auto now = Clock::now();
  for (auto& r : session_.requests()) {
    if (r->done) continue;
    waiting += std::string(waiting.empty() ? "" : ", ") + (r->isSend ? "send to" : "data from") + " rank " +
               std::to_string(r->peer);
    if (!r->isSend && r->peer >= 0) {
      char buf[80];
      if (lastHeard_[r->peer] == Clock::time_point{})
        snprintf(buf, sizeof(buf), " (nothing received from it yet)");
      else
        snprintf(buf, sizeof(buf), " (nothing received from it for %.1f s)",
                 std::chrono::duration<double>(now - lastHeard_[r->peer]).count());
      waiting += buf;
    }
  }
  return waiting;
}

void NetTransport::queryArrivals(std::unique_lock<std::mutex>& lk) {
  uint64_t seq = session_.current().seq;
  for (int p = 0; p < o_.size; ++p) {
    arrivals_.clear(p);
    if (p == o_.rank || !peerFailed_[p].empty() || !sockets_->serves(p)) continue;
    sendControl(p, FrameType::Query, seq, nullptr, nullptr);
  }
  auto until = Clock::now() + kQueryGrace;
  auto pending = [&] {
    for (int p = 0; p < o_.size; ++p)
      if (p != o_.rank && peerFailed_[p].empty() && sockets_->serves(p) && !arrivals_.answered(p)) return true;
    return false;
  };
  while (pending() && Clock::now() < until) cv_.wait_until(lk, until);
}

void NetTransport::probeArrivals() {
  // No wait for the replies: a Reply whose op has this op's number but
  // differs from it marks the op mismatched (OpSession::noteDesc), which the
  // wait throws when it next looks.
  for (int p = 0; p < o_.size; ++p)
    if (p != o_.rank && peerFailed_[p].empty() && sockets_->serves(p))
      sendControl(p, FrameType::Query, session_.current().seq, nullptr, nullptr);
}

void NetTransport::throwTimeout(const std::string& waitingFor) {
  std::unique_lock<std::mutex> lk(mu_);
  OpDesc d = session_.current();
  auto limit = session_.timeout();
  queryArrivals(lk);
  auto missing = arrivals_.missing(d.seq, o_.rank, peerFailed_, o_.hosts);
  std::string msg = Arrivals::timeoutMessage(d, limit, missing, peerFailed_, waitingFor);
  retireOpLocked();
  throw Timeout(msg);
}

void NetTransport::warnStall(const std::string& waitingFor) {
  std::lock_guard<std::mutex> one(stallMu_);
  std::unique_lock<std::mutex> lk(mu_);
  auto now = Clock::now();
  int64_t due = nextStallNs_.load(std::memory_order_relaxed);
  if (!session_.active() || now.time_since_epoch().count() < due) return;
  OpDesc d = session_.current();
  auto waited = now - opBegan_;
  // How long after it was due this warning comes: more than a wake-up's
  // slack means the waiting thread did not run (stopped, or starved of a
  // core), which the warning says, as it changes what the wait means.
  int64_t lateMs = (now.time_since_epoch().count() - due) / 1000000;
  // Backoff: the next warning when the op has waited twice as long.
  nextStallNs_.store((opBegan_ + 2 * waited).time_since_epoch().count(), std::memory_order_relaxed);
  queryArrivals(lk);
  if (!session_.active() || session_.current() != d) {
    lk.unlock();
    ACCL_INFO("COLL", o_.where << ": no stall warning for " << describe(d)
                               << ": it ended while its peers were asked where they are");
    return;
  }
  auto missing = arrivals_.missing(d.seq, o_.rank, peerFailed_, o_.hosts);
  auto ms = [](Clock::duration x) { return std::chrono::duration_cast<std::chrono::milliseconds>(x); };
  std::string msg = Arrivals::stallMessage(d, ms(waited), ms(session_.deadline() - Clock::now()), missing, peerFailed_,
                                           waitingFor);
  if (lateMs >= kStallLateMs)
    msg += "; this warning comes " + std::to_string(lateMs) +
           " ms after it was due: this rank's waiting thread did not run meanwhile (the process was stopped, or "
           "the host's cores are oversubscribed), so part of the wait is this rank's own";
  lk.unlock();
  ACCL_WARN("COLL", o_.where << ": " << msg);
  if (o_.onStall) o_.onStall(msg);
}

// ---------------------------------------------------------------- point-to-point

// The largest receive that reads its peer's ring as it is posted (postTagged).
static constexpr size_t kReadOnPostMaxBytes = size_t(64) << 10;
// How many times a blocking sendrecv's receive looks at its peer's ring
// before it makes a request (postSendRecv): a few microseconds.
static constexpr int kRingWaitPasses = 256;
// Where the host's ranks share cores: how many times it gives the core up
// between those looks.
static constexpr int kRingWaitYields = 8;

void NetTransport::postTagged(bool isSend, int peer, int tag, void* buf, size_t len, Clock::time_point deadline,
                              const std::shared_ptr<Work>& work) {
  std::lock_guard<std::mutex> lk(mu_);
  postTaggedLocked(isSend, peer, tag, buf, len, deadline, work);
}

void NetTransport::postSendRecv(bool sendFirst, int dst, int sendTag, const void* sendBuf, size_t sendLen, int src,
                                int recvTag, void* recvBuf, size_t recvLen, Clock::time_point deadline,
                                const std::shared_ptr<Work>& work) {
  std::unique_lock<std::mutex> lk(mu_);
  void* sb = const_cast<void*>(sendBuf);  // only read: a send's buffer
  if (!sendFirst) {
    postTaggedLocked(false, src, recvTag, recvBuf, recvLen, deadline, work);
    postTaggedLocked(true, dst, sendTag, sb, sendLen, deadline, work);
    return;
  }
  postTaggedLocked(true, dst, sendTag, sb, sendLen, deadline, work);
  uint64_t key = static_cast<uint64_t>(static_cast<int64_t>(recvTag));
  if (directAllowedLocked(src, recvLen)) {
    if (directLocked(src, key, recvBuf, recvLen, work)) return;
    // A message from the peer held already (read behind the one an earlier
    // receive took) goes to a request at once: nothing comes to the ring for
    // it, and the peer waits for this rank.
    if (!matcher_.quietFor(src, Space::Tagged))
      return postTaggedLocked(false, src, recvTag, recvBuf, recvLen, deadline, work, true);
    // The peer, which sends first as well, is a moment behind: its message
    // is waited for in its ring here, for a few microseconds, as a guest of
    // the rings (the peer rings no doorbell), and taken as it lands, before
    // a request is made for it (2 ranks with a core each, sendrecv 8-128 B:
    // a request, its match and the waiter's completion were about 1,000 of
    // the op's 2,000 instructions). The lock is taken only once frames came.
    // Where the ranks share cores, the wait gives the core up between looks
    // (the peer may need it), a few times: 4 ranks on 2 cores, sendrecv of
    // 8-128 B, about 10 % less time against Open MPI's than with a request
    // made at once (docs/performance-history.md).
    bool spinning = spinningWaiters_.load(std::memory_order_relaxed);
    lk.unlock();
    shm_->guestBegin();
    bool took = false;
    for (int n = 0, passes = spinning ? kRingWaitPasses : kRingWaitYields; n < passes && !took; ++n) {
      if (!shm_->framesFrom(src)) {
        if (spinning)
          cpuRelax();
        else
          sched_yield();
        continue;
      }
      lk.lock();
      bool allowed = directAllowedLocked(src, recvLen);
      took = allowed && directLocked(src, key, recvBuf, recvLen, work);
      allowed = allowed && matcher_.quietFor(src, Space::Tagged);
      lk.unlock();
      if (!allowed) break;
    }
    // Served either way: when the message did not come, this rank's waiter
    // polls the rings next (the op is blocking), and ends its own guest
    // time as served or not.
    shm_->guestEnd(true);
    if (took) return;
    lk.lock();
  }
  // (Send first: a blocking op's, whose caller polls for it at once.)
  postTaggedLocked(false, src, recvTag, recvBuf, recvLen, deadline, work, true);
}

bool NetTransport::directAllowedLocked(int peer, size_t len) const {
  return len <= kReadOnPostMaxBytes && tagged_.empty() && peer >= 0 && overShm(peer) && peerFailed_[peer].empty() &&
         !sockets_->deferring() && !sockets_->lingering() && !shm_->deferring();
}

bool NetTransport::directLocked(int peer, uint64_t key, void* buf, size_t len, const std::shared_ptr<Work>& work) {
  // Its message, when already in the peer's ring, lands in the buffer now,
  // and the receive completes with no request made, matched or released.
  // Whatever the ring holds before it lands as it always does; a message
  // of this tag of another size, or one behind an earlier message or
  // receive that comes first, is left to a request.
  direct_ = DirectReceive{peer, key, static_cast<char*>(buf), len, false};
  bool moved = shm_->readPeer(peer);
  bool took = direct_.took;
  direct_ = DirectReceive{};
  if (moved) cv_.notify_all();  // frames read may be steps an op's waiter waits for
  if (took) work->completeUnshared(nullptr, peer);
  return took;
}

void NetTransport::postTaggedLocked(bool isSend, int peer, int tag, void* buf, size_t len, Clock::time_point deadline,
                                    const std::shared_ptr<Work>& work, bool polledAtOnce) {
  uint64_t key = static_cast<uint64_t>(static_cast<int64_t>(tag));
  OpDesc sendDesc{};
  sendDesc.op = static_cast<uint16_t>(OpType::Send);
  if (isSend && peerFailed_[peer].empty()) {
    // A small message that the link writes at once (into a shared-memory
    // ring) is sent when this returns: its Work completes here, with no
    // request to make, track and release.
    if (dataLink(peer).sendNow(peer, FrameType::Tagged, key, sendDesc, static_cast<const char*>(buf), len)) {
      traffic_[peer].sent += len;
      work->completeUnshared(nullptr, -1);
      return;
    }
  }
  // A small receive from a local peer while no other point-to-point op is
  // pending (the peer sent first: a small sendrecv sends first).
  if (!isSend && directAllowedLocked(peer, len) && directLocked(peer, key, buf, len, work)) return;
  // From the per-thread block pool, as an op's Work: a small message's
  // request lives for one op, and malloc and free were a fifth of a small
  // sendrecv's instructions.
  auto r = std::allocate_shared<Request>(internal::WorkAllocator<Request>{});
  r->isSend = isSend;
  r->peer = peer;
  r->space = Space::Tagged;
  r->key = key;
  r->buf = static_cast<char*>(buf);
  r->len = len;
  if (peer >= 0 && !peerFailed_[peer].empty()) {
    r->fail(Failure::Remote, "rank " + std::to_string(peer) + ": " + peerFailed_[peer]);
  } else if (isSend) {
    traffic_[peer].sent += len;
    dataLink(peer).send(peer, FrameType::Tagged, key, sendDesc, static_cast<const char*>(buf), len, r,
                        FrameLink::Route::Ordered);
  } else {
    matcher_.post(r);
    if (sockets_->deferring()) sockets_->resumeDeferred(peer);
    // A point-to-point receive is the loop's to serve (its waiter may not
    // poll, or not wait at all): lingering sockets go back to it.
    if (sockets_->lingering()) sockets_->endLingers(false);
    // A message from a local peer that came before this receive may have
    // been left in its sender's memory: it lands here now, in one copy (as
    // a held copy would have been copied into it now).
    bool moved = !r->done && shm_ && shm_->deferring() && shm_->readDeferred();
    // A small message from a local peer already in its ring (the peer sent
    // before this rank posted: a small sendrecv sends first) lands here now:
    // the receive is done before its Work is handed out, with nothing to wait
    // for. Only for a small receive while no other point-to-point op is
    // pending: a large message read here would hold up this rank's own send
    // (a large sendrecv posts its receive first), and with ops pending the
    // frames read here finish theirs, for the progress thread to be woken
    // (2 ranks, accl-perf sendrecv issued back to back: 512 KiB took 2-5x
    // as long when every receive read here).
    if (!r->done && len <= kReadOnPostMaxBytes && tagged_.empty() && peer >= 0 && overShm(peer))
      moved = shm_->readPeer(peer) || moved;
    if (moved) {
      // Frames behind it may have finished other requests: reaped by the
      // loop; and steps of a collective: its waiter is told. Not where the
      // only requests finished are this op's, whose caller polls at once: a
      // blocking sendrecv by single copy, whose send the peer's
      // acknowledgement, read here behind its message, finished. That wake-up
      // put the progress thread on the caller's core during its wait (2 ranks
      // bound to a core each, sendrecv of 64-128 KiB with ACCL_SHM_CMA=on:
      // 0.70-0.87 of Open MPI's busbw and 0.25-0.46 context switches per op
      // with it, 0.90-1.00 and 0.01-0.14 without; 3 alternating launches).
      for (const auto& t : tagged_)
        if (t.req->done && !(polledAtOnce && t.work == work)) {
          loop_->wake();
          break;
        }
      cv_.notify_all();
    }
  }
  if (r->done && r->failure == Failure::None) {
    // Done already: a send whose frames went out at once (a small message
    // into a shared-memory ring), a receive whose message had arrived. The
    // Work completes here, before it is handed out: no entry to reap, no
    // wake-up of the progress thread (a system call, and a thread that takes
    // a core from the ranks on a busy host).
    work->completeUnshared(nullptr, isSend ? -1 : r->source);
    return;
  }
  // From here the progress thread or a waiter may end this part.
  work->partHandedOff();
  tagged_.push_back({r, work, deadline});
  if (r->done) loop_->wake();
}

void NetTransport::reapTagged(std::vector<Completion>& out, Clock::time_point now) {
  for (size_t i = 0; i < tagged_.size();) {
    Tagged& p = tagged_[i];
    const RequestPtr& r = p.req;  // p stays in place until its completion is taken below
    std::exception_ptr err;
    bool finish = false;
    if (r->done) {
      finish = true;
      if (r->failure != Failure::None) {
        // The Work's description (formatted only now) names the op.
        std::string what = p.work->description();
        if (r->failure == Failure::Mismatch) err = std::make_exception_ptr(InvalidArgument(what + ": " + r->error));
        else err = std::make_exception_ptr(RemoteError(what + ": " + r->error));
        withdrawLocked(r, r->error, what.c_str());
      }
    } else if (now >= p.deadline) {
      finish = true;
      std::string what = p.work->description();
      err = std::make_exception_ptr(Timeout(what + " timed out" +
                                            (r->peer >= 0 ? " waiting for rank " + std::to_string(r->peer) : std::string())));
      // Withdrawn, so that nothing lands in (or is read from) the user's
      // buffer after the Work failed.
      withdrawLocked(r, "timed out", what.c_str());
    }
    if (!finish) {
      ++i;
      continue;
    }
    out.push_back({std::move(p.work), std::move(err), r->isSend ? -1 : r->source});
    tagged_[i] = std::move(tagged_.back());
    tagged_.pop_back();
  }
}

}  // namespace net
}  // namespace core
}  // namespace accl
