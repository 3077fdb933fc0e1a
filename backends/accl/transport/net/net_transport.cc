#include "transport/net/net_transport.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "accl/errors.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"
#include "transport/machine.h"
#ifdef ACCL_HAVE_IBVERBS
#include "transport/net/ibverbs/verbs_link.h"
#endif

namespace accl {
namespace core {
namespace net {

namespace {
// How long a waiter polls the rings for a small message before it sleeps
// (see waiterHook). 2 ranks on 2 cores, sendrecv: with 20 us, 5-15 % of the
// 16-32 KiB messages took ~150 us (the peer's message came after the spin,
// and then both ranks went through doorbells and wake-ups), 4.5-5.2x Open
// MPI's mean time at 32 KiB; with 100 or 200 us, 1.3-1.5x.
constexpr size_t kWaiterSpinUs = 200;
// Where the host's ranks share cores, the waiter polls this long, yielding
// the core between passes (the peer it waits for may need it).
constexpr size_t kWaiterYieldUs = 200;
// Where an abort's reason lands.
struct TextLanding : Landing {
  explicit TextLanding(size_t n) : text(n, '\0') { base = &text[0]; }
  std::string text;
};
}  // namespace

#ifndef ACCL_HAVE_IBVERBS
// A build without verbs headers: the type exists, never an object of it.
class VerbsLink : public FrameLink {};
#endif

NetTransport::NetTransport(Options o)
    : o_(std::move(o)),
      session_(o_.size),
      arrivals_(o_.size),
      peerFailed_(o_.size),
      traffic_(o_.size),
      opTrafficAt_(o_.size, -1),
      receiving_(o_.size, 0),
      busySince_(o_.size),
      lastHeard_(o_.size) {
  gate_->t = this;  // no waiter hook exists before this constructor returns
  matcher_.setSpareLimit(o_.unexpectedCacheBytes);
  smallHooks_[0] =
      std::make_shared<const HookState>(HookState{gate_, std::chrono::microseconds(kWaiterYieldUs), true, -1});
  smallHooks_[1] =
      std::make_shared<const HookState>(HookState{gate_, std::chrono::microseconds(kWaiterSpinUs), false, -1});
  auto deadline = Clock::now() + o_.timeout;
  sockets_ = std::make_unique<SocketLink>(static_cast<const SocketLink::Options&>(o_), static_cast<FrameSink*>(this),
                                          deadline);
  if (o_.ibWanted) setupIb(deadline);
  if (o_.shmWanted) setupShm(deadline);
  tcpHooks_.resize(o_.size);
  for (int p = 0; p < o_.size; ++p)
    if (p != o_.rank && sockets_->serves(p) && !overShm(p) && !overIb(p))
      tcpHooks_[p] = std::make_shared<const HookState>(
          HookState{gate_, std::chrono::microseconds(kSocketPollUs), false, p});
  loop_ = std::make_unique<EventLoop>(o_.where);
  sockets_->attach(loop_.get());
  if (shm_) loop_->add(shm_->doorbellFd(), shm_.get(), EPOLLIN);
#ifdef ACCL_HAVE_IBVERBS
  if (verbs_) loop_->add(verbs_->eventFd(), verbs_.get(), EPOLLIN);
#endif
  thread_ = std::thread([this] { progressLoop(); });
  pthread_setname_np(thread_.native_handle(), "accl-net");
}

NetTransport::~NetTransport() {
  {
    std::unique_lock<std::shared_mutex> g(gate_->m);  // waits out a waiter's poll
    gate_->t = nullptr;
  }
  sayFarewell();
  stop_ = true;
  loop_->wake();
  if (thread_.joinable()) thread_.join();
  verbs_.reset();    // writes in flight land before their QPs go
  shm_.reset();      // what this rank wrote stays in the peers' segments
  sockets_.reset();  // orderly close
  loop_.reset();
}

void NetTransport::sayFarewell() {
#ifdef ACCL_HAVE_IBVERBS
  if (!verbs_) return;
  std::unique_lock<std::mutex> lk(mu_);
  while (verbs_->poll()) {
  }  // receive completions still queued count as received
  bool any = false;
  for (int p = 0; p < o_.size; ++p) {
    if (p == o_.rank || !overIb(p) || !peerFailed_[p].empty() || !sockets_->serves(p)) continue;
    auto t = std::make_shared<OwnedText>(verbs_->farewellFor(p));
    sendControl(p, FrameType::Farewell, 0, t, &t->text);
    any = true;
  }
  auto until = Clock::now() + std::chrono::seconds(1);
  while (any && !sockets_->flushed() && Clock::now() < until)
    cv_.wait_until(lk, std::min(until, Clock::now() + std::chrono::milliseconds(10)));
#endif
}

const std::string& NetTransport::interfaceName() const { return sockets_->interfaceName(); }
const std::string& NetTransport::address() const { return sockets_->address(); }
bool NetTransport::overIb(int peer) const { return !ibPeer_.empty() && ibPeer_[peer]; }

std::string NetTransport::describeIb() const {
#ifdef ACCL_HAVE_IBVERBS
  if (!verbs_) return "";
  const ib::QpMesh& m = verbs_->mesh();
  return "verbs " + m.port().describe() + ", " + std::to_string(m.qps()) + " RC QP(s) per peer, " +
         std::to_string(m.chunkBytes() / 1024) + " KiB chunks, inline up to " + std::to_string(m.inlineLimit()) +
         " bytes, " + m.sendMode();
#else
  return "";
#endif
}

FrameLink& NetTransport::dataLink(int peer) {
  if (overIb(peer)) return *verbs_;
  if (overShm(peer)) return *shm_;
  return *sockets_;
}

std::string NetTransport::describeShm() const {
  if (!shm_) return "";
  std::string s = "shared-memory rings of " + std::to_string(shm_->ringBytes() >> 10) + " KiB";
  bool single = false;
  for (int p = 0; p < o_.size; ++p) single = single || (overShm(p) && shm_->singleCopyTo(p));
  if (single && shm_->singleCopyMin() != ShmLink::kSingleCopyNever)
    s += ", single copy from " + internal::sizeText(static_cast<double>(shm_->singleCopyMin()));
  return s;
}

void NetTransport::setupShm(Clock::time_point deadline) {
  ShmLink::Options so;
  so.rank = o_.rank;
  so.size = o_.size;
  so.local.assign(o_.size, false);
  bool any = false;
  for (int p = 0; p < o_.size; ++p) {
    so.local[p] = onThisHost(p);
    any = any || so.local[p];
  }
  if (!any) return;
  so.token = o_.token;
  so.store = o_.store;
  so.deadline = deadline;
  so.where = o_.where;
  so.cma = o_.shmCma;
  so.stream = o_.shmStream;
  shm_ = ShmLink::connect(so, this, &shmWhy_);
  if (shm_) shm_->setSingleCopyMin(o_.shmCmaAlways ? ShmLink::kSingleCopyMinSharedCpus : ShmLink::kSingleCopyNever);
  if (!shmWhy_.empty())
    ACCL_WARN("INIT", o_.where << ": point-to-point with some ranks of this host goes over tcp, not shared memory: "
                               << shmWhy_);
}

void NetTransport::setLocalRanksShareCpus(bool shared, size_t probedSingleCopyFrom) {
  spinningWaiters_ = !shared;
  int local = 1;
  for (int p = 0; p < o_.size; ++p) local += onThisHost(p);
  int allowed = allowedCpuCount();
  loopTakesRankCpu_ = shared || (allowed > 0 && allowed <= local);
  if (shm_) {
    if (o_.shmCmaAlways)
      shm_->setSingleCopyMin(shared ? ShmLink::kSingleCopyMinSharedCpus : ShmLink::kSingleCopyMinOwnCpus);
    else if (shared)
      shm_->setSingleCopyMin(ShmLink::kSingleCopyAutoMinSharedCpus);
    else
      shm_->setSingleCopyMin(std::min(ShmLink::kSingleCopyAutoMinOwnCpus,
                                      std::max(probedSingleCopyFrom, ShmLink::kSingleCopyMinOwnCpus)));
    shm_->setDeferMin(shared ? ShmLink::kDeferMinSharedCpus : ShmLink::kDeferMinOwnCpus);
    shm_->setTryWriteWays(!shared);
  }
}

bool NetTransport::shmSingleCopyProbeable() const {
  if (!shm_ || o_.shmCmaAlways || !o_.shmCma) return false;
  bool any = false;
  for (int p = 0; p < o_.size; ++p) {
    if (!onThisHost(p)) continue;
    if (!overShm(p) || !shm_->singleCopyTo(p)) return false;
    any = true;
  }
  return any;
}

void NetTransport::setupIb(Clock::time_point deadline) {
  bool anyRemote = std::find(o_.remote.begin(), o_.remote.end(), true) != o_.remote.end();
  if (!anyRemote) return;
#ifdef ACCL_HAVE_IBVERBS
  ib::QpMesh::Options lo;
  lo.rank = o_.rank;
  lo.size = o_.size;
  lo.peers = o_.remote;
  lo.required = o_.ibRequired;
  lo.settings = o_.ib;
  lo.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (lo.timeout.count() < 1000) lo.timeout = std::chrono::milliseconds(1000);
  lo.store = o_.store;
  lo.where = o_.where;
  verbs_ = VerbsLink::connect(lo, this, &ibPeer_, &ibWhy_);
#else
  (void)deadline;
  ibPeer_.assign(o_.size, false);
  ibWhy_ = "this build has no verbs support (libibverbs headers were missing at build time)";
#endif
  std::vector<int> tcpOnly;
  for (int p = 0; p < o_.size; ++p)
    if (o_.remote[p] && !overIb(p)) tcpOnly.push_back(p);
  if (tcpOnly.empty()) return;
  if (o_.ibRequired) {
    verbs_.reset();
    throw NotSupported(o_.where + ": ACCL_TRANSPORTS requires verbs (no tcp) but it is not usable: " + ibWhy_);
  }
  std::string ranks = internal::join(tcpOnly);
  // A host without RDMA is the common case (INFO); RDMA that is there but fails is not (WARN).
#ifdef ACCL_HAVE_IBVERBS
  LogLevel level = ib::noRdmaHere(ibWhy_) ? LogLevel::Info : LogLevel::Warn;
#else
  LogLevel level = LogLevel::Info;
#endif
  if (logEnabled(level, "INIT"))
    logLine(level, "INIT", o_.where + ": verbs not used with ranks " + ranks + ", falling back to tcp: " + ibWhy_);
}

// ---------------------------------------------------------------- progress

bool NetTransport::waiterPoll(int peer, size_t bytes, std::chrono::microseconds& spin, bool& yields,
                              int& tcpPeer) const {
  tcpPeer = -1;
  yields = !spinningWaiters_;
  // A small message from a peer over TCP: its socket, for kSocketPollUs (2
  // namespace hosts, a rank each, sendrecv 8 B - 2 KiB: 1.2-1.35x Open MPI's
  // time with the progress thread reading it, as its allreduce was before
  // the op's waits polled).
  if (peer >= 0 && peer < o_.size && tcpHooks_[peer]) {
    if (bytes > kSocketPollMaxBytes) return false;
    tcpPeer = peer;
    spin = std::chrono::microseconds(kSocketPollUs);
    return true;
  }
  // A named peer is one lookup (this runs for every point-to-point op); any
  // source, whether some peer is served by the rings.
  bool fast = peer >= 0 && overShm(peer);
  for (int p = 0; peer < 0 && p < o_.size && !fast; ++p) fast = p != o_.rank && overShm(p);
  if (!fast) return false;
  // The spin: kWaiterSpinUs, and for a large message the time it takes at 2 GB/s
  // (a copy on a busy host), up to 4 MiB's, so that the waiter copies it
  // itself rather than hand it to the progress thread and sleep (2 ranks on
  // 2 cores, sendrecv 1-4 MiB: 2.5-3.5x Open MPI's time with 20 us, 1.0-1.2x
  // with 2 ms).
  // 4 ranks on 2 cores, the same sendrecv: 60-80 us at 8 B and 0.1-0.2x
  // Open MPI's busbw at 128 KiB - 2 MiB with it; there the waiter yields
  // between passes instead, for kWaiterYieldUs (5-6 us at 8 B), and for a
  // large message as long as it takes at 0.1 GB/s (up to 64 MiB's): a
  // waiter that slept after 200 us left its peer's message and the
  // acknowledgement of its own to the progress threads' doorbells, and both
  // cores stood idle 3-15 % of a ring of 2-16 MiB sendrecv. Yielding on, as
  // Open MPI's waiters do, 2 MiB went from 0.61-0.86x Open MPI's busbw to
  // 0.83-0.97x (8 alternating launches, docs/performance-history.md).
  spin = std::chrono::microseconds(yields ? kWaiterYieldUs + std::min<size_t>(bytes, size_t(64) << 20) / 100
                                          : kWaiterSpinUs + std::min<size_t>(bytes, size_t(4) << 20) / 2000);
  return true;
}

std::function<void(Work&)> NetTransport::waiterHook(int peer, size_t bytes) {
  std::chrono::microseconds spin;
  bool yields;
  int tcpPeer;
  if (!waiterPoll(peer, bytes, spin, yields, tcpPeer)) return nullptr;
  // The two usual polls of the rings and each TCP peer's are shared; a large
  // message's spin has a state of its own.
  std::shared_ptr<const HookState> state =
      tcpPeer >= 0 ? tcpHooks_[tcpPeer]
      : yields && spin.count() == kWaiterYieldUs ? smallHooks_[0]
      : !yields && spin.count() == kWaiterSpinUs
          ? smallHooks_[1]
          : std::make_shared<const HookState>(HookState{gate_, spin, yields, -1});
  struct Hook {  // 16 bytes, moved without throwing: kept inside the std::function
    std::shared_ptr<const HookState> s;
    void operator()(Work& w) const {
      if (auto g = s->gate.lock()) progressForWaiter(*g, w, s->spin, s->yields, s->tcpPeer);
    }
  };
  return Hook{std::move(state)};
}

bool NetTransport::pollForWaiter(Work& w, int peer, size_t bytes) {
  std::chrono::microseconds spin;
  bool yields;
  int tcpPeer;
  if (!waiterPoll(peer, bytes, spin, yields, tcpPeer)) return false;
  progressForWaiter(*gate_, w, spin, yields, tcpPeer);
  return true;
}

void NetTransport::progressForWaiter(WaiterGate& g, Work& w, std::chrono::microseconds spin, bool yields,
                                     int tcpPeer) {
  // The waiter polls the rings itself for a while (as a guest: writers to
  // this rank ring no doorbell meanwhile, so the progress thread sleeps on),
  // or the peer's socket (which meanwhile wakes no one), then sleeps on the
  // Work as any waiter. Bounded: on a host with more ranks than cores a
  // spinning waiter takes the core its peer needs.
  // 2 ranks on 2 cores, sendrecv 8 B - 64 KiB: 2.2-6 us with a spin of
  // 20 us (0-100 us measured alike), 11-64 us with one pass and doorbells
  // (a wake-up of the progress thread and one of the waiter per message).
  // Where ranks share cores (`yields`), the waiter gives the core up between
  // passes, as the shared-memory collectives do there; so does a pass that
  // found the lock taken: the progress thread is working (copying a piece of
  // a large message), often on the same core (2 ranks bound to a core each,
  // sendrecv 32-128 MiB: 1.09-1.52x Open MPI's time spinning, 1.02-1.08x
  // yielding).
  // The clock is read every 64 passes (the spin counts from the first such
  // read), not on the pass that finds the message.
  Clock::time_point until{};
  bool guest = false, polled = false, movedSinceLook = false;
  // This thread's list from its last wait (no allocation per op); a wait
  // nested in a completion's callback finds none and makes its own.
  static thread_local std::vector<Completion> spare;
  std::vector<Completion> completions = std::move(spare);
  struct GiveBack {
    std::vector<Completion>& v;
    ~GiveBack() {
      v.clear();
      spare = std::move(v);
    }
  } giveBack{completions};
  for (int n = 0;; ++n) {
    bool stop, yieldNow = yields;  // and where the pass found the lock taken
    {
      // The gate is held only while polling, not while completions run (one
      // may destroy the group, whose destructor takes the gate).
      std::shared_lock<std::shared_mutex> gl(g.m);
      NetTransport* t = g.t;
      if (!t || (tcpPeer < 0 && !t->shm_)) return;
      if (tcpPeer >= 0) yields = yieldNow = !t->spinningWaiters_.load(std::memory_order_relaxed);
      if (tcpPeer < 0 && !guest) t->shm_->guestBegin(), guest = true;
      // The progress thread may be polling: then it completes the Work.
      std::unique_lock<std::mutex> lk(t->mu_, std::try_to_lock);
      yieldNow = yields || !lk.owns_lock();
      if (lk.owns_lock() && !t->stop_) {
        bool moved;
        if (tcpPeer >= 0) {
          if (!polled) polled = true, t->sockets_->setPolled(tcpPeer, true);
          uint64_t frames = t->sockets_->pollPeer(tcpPeer);
          if (frames) t->waiterFrames_.fetch_add(frames, std::memory_order_relaxed);
          moved = frames > 0;
        } else {
          moved = t->shm_->pollAsGuest();
        }
        movedSinceLook = movedSinceLook || moved;
        // After frames moved, what they finished; now and then, deadlines
        // too, by the coarse clock (a timeout may show a tick late; the
        // precise read was a few percent of a small sendrecv).
        if (!t->tagged_.empty() && (moved || (n & 15) == 0))
          t->reapTagged(completions, (n & 15) == 0 ? coarseNow() : Clock::time_point::min());
      }
      // This waiter's Work is among them (each of its parts, for a Work of
      // several): it stops after running them.
      int mine = 0;
      for (const auto& c : completions) mine += c.work.get() == &w;
      bool served = (mine > 0 && mine >= w.partsLeft()) || w.doneForWait();
      stop = served || spin.count() == 0;
      // A pass that yields may take a while: the clock is read every 4th.
      if (!stop && (n & (yieldNow ? 3 : 63)) == (yieldNow ? 3 : 63)) {
        // A peer on this waiter's CPU (the scheduler put them together, or
        // they were pinned there after the group was made) gets the CPU only
        // when the spin ends: yield from here on. Ranks moved onto one CPU,
        // sendrecv of 8 B took 287 us spinning, 5.6 us so (bench/cpu_sharing.sh;
        // docs/performance.md, "Two ranks on one CPU").
        if (!yields && tcpPeer < 0 && t->shm_->writerOnCpu(sched_getcpu())) yields = true;
        auto now = Clock::now();
        if (until == Clock::time_point{}) until = now + spin;
        // While frames move (a large message copied piece by piece, its
        // acknowledgement), the spin goes on.
        if (movedSinceLook) until = std::max(until, now + std::chrono::microseconds(20));
        movedSinceLook = false;
        stop = now >= until;
      }
      if (stop && guest) t->shm_->guestEnd(served);
      if (stop && polled) {
        // The socket wakes the loop again (what came meanwhile at once).
        if (!lk.owns_lock()) lk.lock();
        t->sockets_->setPolled(tcpPeer, false);
      }
    }
    for (auto& c : completions) c.run();
    completions.clear();
    if (stop) return;
    if (yieldNow) {
      sched_yield();
      continue;
    }
    cpuRelax();
  }
}

void NetTransport::progressLoop() {
  // With verbs, completions are polled while they keep coming (and a short
  // while after), then the loop blocks on the completion channel.
  constexpr auto kSpin = std::chrono::microseconds(200);
  constexpr auto kSpinShm = std::chrono::microseconds(50);
  auto lastIb = Clock::now(), lastShm = lastIb;
  constexpr int64_t kMs = 1000000;
  // The lazy look's longest sleep, reached by doubling from 1 ms while each
  // look finds a waiter polling (below).
  constexpr int64_t kLazyMaxNs = 16 * kMs;
  int64_t waitNs = 50 * kMs;
  bool lazy = false, lazyGrows = false;
  // Every peer in shared memory: no socket's timers for the look to miss.
  bool onlyShm = true;
  for (int p = 0; p < o_.size; ++p) onlyShm = onlyShm && (p == o_.rank || overShm(p));
  std::vector<Completion> completions;  // kept: no allocation per pass
  while (!stop_) {
    int events = loop_->wait(waitNs);
    // A lazy look (a millisecond slept, nothing signalled) while a waiter
    // polls: that waiter does it (and holds the lock). The next look comes
    // twice as late, up to 16 ms, where this thread has no CPU of its own
    // (loopTakesRankCpu_), every peer is on this host, and nothing has a
    // deadline: each look wakes this thread on a core the waiters need, and
    // preempts one of them (4 ranks on 2 cores, a ring of sendrecv of
    // 8-128 B, against Open MPI's time: 3-8 % less with it; 2 ranks bound to
    // a core each, sendrecv of 2-8 MiB: 0.95-0.98 of Open MPI's busbw without
    // it, 1.01-1.06 with it, half the context switches; medians of 8
    // launches, docs/performance-history.md). The waiters read every ring
    // meanwhile. A message a waiter leaves in its sender's memory has a
    // deadline, which the loop must keep once no waiter polls: back to 1 ms.
    if (lazy && waitNs > 0 && events == 0 && shm_->guestsActive()) {
      if (shm_->deferring()) lazyGrows = false, waitNs = std::min(waitNs, kMs);
      if (lazyGrows) waitNs = std::min(waitNs * 2, kLazyMaxNs);
      loopWakeBy_.store(Clock::now().time_since_epoch().count() + waitNs, std::memory_order_relaxed);
      continue;
    }
    completions.clear();
    std::unique_lock<std::mutex> lk(mu_);
    loop_->dispatch();
    auto now = Clock::now();
    sockets_->expireHandshakes(now);
    waitNs = 50 * kMs;
    // The loop does not sleep past `until` (steady-clock ns; 0: no limit).
    auto wakeBy = [&](int64_t until) {
      if (!until) return;
      int64_t left = until - now.time_since_epoch().count();
      waitNs = std::min<int64_t>(waitNs, std::max<int64_t>(left, 0));
    };
    if (verbs_) {
      if (verbs_->poll()) lastIb = now;
      if (now - lastIb < kSpin) waitNs = 0;
      else if (verbs_->arm()) lastIb = now, waitNs = 0;
    }
    if (shm_) {
      // Rings are polled while frames come, and a short while after (a
      // peer's reply often follows at once), then a doorbell wakes the loop.
      if (shm_->poll()) lastShm = now;
      // While waiters get their messages by polling the rings themselves,
      // the loop neither spins nor asks for doorbells (a wake-up per
      // message, on a core the waiters need): it looks every millisecond
      // for what no waiter took. Not while a collective runs here.
      lazy = !session_.active() && shm_->guestsServed(now);
      if (lazy) {
        if (shm_->arm(true)) lastShm = now, waitNs = 0;
        else waitNs = kMs;
      } else if (spinningWaiters_.load(std::memory_order_relaxed) && now - lastShm < kSpinShm) {
        // Not where the ranks share cores: the spin would hold the core a
        // peer needs (2 namespace hosts x 2 ranks on 2 cores: allgather and
        // reduce_scatter of 64 B - 64 KiB took 1.3-1.6x the time with it).
        waitNs = 0;
      } else if (shm_->arm(false)) {
        lastShm = now, waitNs = 0;
      }
      // A message left in its sender's memory is read by its deadline.
      Clock::rep deferred = shm_->deferredUntil();
      wakeBy(deferred);
      // The look backs off only where this thread has no CPU of its own,
      // every peer is on this host, and nothing else needs the loop by a time.
      lazyGrows = lazy && waitNs == kMs && deferred == 0 && onlyShm &&
                  loopTakesRankCpu_.load(std::memory_order_relaxed);
    }
    // And one left in a socket's buffers (SocketLink::kDeferMin).
    if (sockets_->deferring()) {
      sockets_->expireDeferred(now);
      wakeBy(sockets_->deferredUntil());
    }
    // Sockets an op's waiter left polled (SocketLink::linger) come back.
    if (sockets_->lingering()) {
      sockets_->expireLingers(now);
      wakeBy(sockets_->lingerUntil());
    }
    // Frames in a connection's read buffer that no epoll event announces.
    if (sockets_->pendingReads()) sockets_->readPending();
    if (!tagged_.empty()) reapTagged(completions, now);
    // Set with the lock held: a waiter that leaves a socket lingering (under
    // the lock) either sees this wait's end or is seen by the pass above.
    loopWakeBy_.store(now.time_since_epoch().count() + waitNs, std::memory_order_relaxed);
    cv_.notify_all();
    lk.unlock();
    for (auto& c : completions) c.run();
  }
  // Requests still pending at shutdown fail rather than never completing.
  completions.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& p : tagged_)
      completions.push_back(
          {p.work, std::make_exception_ptr(RemoteError(p.work->description() + ": the process group was destroyed")), -1});
    tagged_.clear();
  }
  for (auto& c : completions) c.run();
}

// ---------------------------------------------------------------- frames in

LandingPtr NetTransport::onHeader(int peer, const FrameHeader& h) {
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::Data: {
      uint64_t seq = h.key >> 32;
      if (session_.isPast(seq)) {
        // For an op this rank completed: nothing of it was left to receive, so the
        // peer called something else. Left over from a failed op: discard.
        if (!session_.anyFailed()) {
          session_.noteLate(peer, h.desc);
          cv_.notify_all();
        }
        return nullptr;
      }
      session_.noteDesc(peer, h.desc);
      InboundPtr in = matcher_.arrive(peer, Space::Op, h);
      if (in) noteArriving(peer, h.len, *in);
      return in;
    }
    case FrameType::Tagged: {
      InboundPtr in = matcher_.arrive(peer, Space::Tagged, h);
      if (in) noteArriving(peer, h.len, *in);
      return in;
    }
    case FrameType::Query:
      sendControl(peer, FrameType::Reply, Arrivals::replyKey(session_.entered(), session_.active()), nullptr, nullptr);
      return nullptr;
    case FrameType::Reply:
      arrivals_.onReply(peer, h.key, h.desc);
      // The peer is in an op of this op's number: a different one is a mismatch.
      if (h.key & Arrivals::kActive) session_.noteDesc(peer, h.desc);
      cv_.notify_all();
      return nullptr;
    case FrameType::Abort:
    case FrameType::Farewell:
      return std::make_shared<TextLanding>(h.len);
    default:
      throw ProtocolError{"unexpected frame type " + std::to_string(h.type)};
  }
}

bool NetTransport::liveData(int peer, const FrameHeader& h, Space* s) {
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::Data:
      if (session_.isPast(h.key >> 32)) return false;
      session_.noteDesc(peer, h.desc);
      *s = Space::Op;
      return true;
    case FrameType::Tagged:
      *s = Space::Tagged;
      return true;
    default:
      return false;
  }
}

bool NetTransport::landWhole(int peer, const FrameHeader& h, const char* payload) {
  // As onHeader and onFrame for a message of one frame that a posted
  // receive takes; anything else goes that way (held, late, mismatched).
  Space s;
  if (!liveData(peer, h, &s)) return false;
  DirectReceive& d = direct_;
  if (d.buf && !d.took && s == Space::Tagged && peer == d.peer && h.key == d.key && h.len == d.len &&
      matcher_.quietFor(peer, s)) {
    if (h.len) std::memcpy(d.buf, payload, h.len);
    d.took = true;
  } else if (!matcher_.arriveWhole(peer, s, h, payload)) {
    return false;
  }
  noteArriving(peer, h.len);
  noteLanded(peer, h.len);
  return true;
}

bool NetTransport::readNow(int peer, const FrameHeader& h) {
  Space s;
  if (!liveData(peer, h, &s)) return true;  // not data, or discarded
  // A receive from the peer that waits for its first frame (for this message
  // or another, which may come behind it on the same connection) wants the
  // peer's frames read now.
  if (matcher_.hasPostedFrom(peer, s) || matcher_.underWay(peer, s, h.key)) return true;
  // A rank whose receives lag (a message of the peer is held already) reads
  // at once over shared memory: waiting only delays it. Over TCP it does so
  // below kLagDeferMin only (leaving those too cost scatter of 64 KiB between
  // 2 hosts a third of its busbw). A larger message held is what a receiver
  // that lags makes of every message while its sender runs ahead (a root's
  // broadcasts of 1 MiB: 86 % copied twice); left in its socket, it holds
  // the sender to the receiver's pace, with one copy per message.
  if (!matcher_.holds(peer, s)) return false;
  return overShm(peer) || h.total < kLagDeferMin;
}

void NetTransport::onFrame(int peer, const FrameHeader& h, const LandingPtr& l) {
  if (!l) return;
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::Data:
    case FrameType::Tagged:
      noteLanded(peer, h.len);
      matcher_.landed(h, static_cast<Inbound&>(*l));
      break;
    case FrameType::Abort:
      session_.noteAbort(peer, h.key, static_cast<TextLanding&>(*l).text);
      cv_.notify_all();
      break;
    case FrameType::Farewell:
#ifdef ACCL_HAVE_IBVERBS
      if (verbs_ && overIb(peer) && !verbs_->onFarewell(peer, static_cast<TextLanding&>(*l).text))
        ACCL_WARN("NET", o_.where << ": ignored a farewell from rank " << peer << " of "
                                  << static_cast<TextLanding&>(*l).text.size() << " bytes (expected a uint32 per queue pair)");
#endif
      cv_.notify_all();
      break;
    default:
      break;
  }
}

void NetTransport::onPeerFailed(FrameLink* link, int peer, const std::string& why) {
  // A peer served over verbs closes its sockets only after its writes
  // completed: their receive completions may be queued here still, behind
  // the socket's end. Deliver them first, so that a peer that finished its
  // last op and exited does not fail that op here.
  if (link == sockets_.get() && verbs_ && overIb(peer) && peerFailed_[peer].empty())
    while (verbs_->poll()) {
    }
  // Likewise what a local peer wrote to its ring before it left.
  if (link == sockets_.get() && shm_ && peerFailed_[peer].empty()) shm_->drain(peer);
  failPeer(peer, why);
}

void NetTransport::noteArriving(int peer, size_t len, const Inbound& in) {
  // A frame that lands in a held copy (its message came before its receive)
  // is copied once more when the receive is posted.
  if (!in.req && !in.dropped) traffic_[peer].held += len;
  noteArriving(peer, len);
}

void NetTransport::noteArriving(int peer, size_t len) {
  // When the peer was last heard from is kept for a stall's message, in
  // tenths of a second: the coarse clock. Only frames of kTimedFrameBytes
  // count towards the busy time (the receive rate of large transfers): a
  // smaller frame lands in the same pass as its header, and two precise
  // reads of the clock were a tenth of a small sendrecv.
  lastHeard_[peer] = coarseNow();
  traffic_[peer].received += len;
  if (len < kTimedFrameBytes) return;
  traffic_[peer].timed += len;
  if (receiving_[peer]++ == 0) busySince_[peer] = Clock::now();
}

void NetTransport::noteLanded(int peer, size_t len) {
  if (len >= kTimedFrameBytes && receiving_[peer] > 0 && --receiving_[peer] == 0)
    traffic_[peer].busyNs += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busySince_[peer]).count();
}

std::vector<PeerTraffic> NetTransport::traffic() const {
  std::lock_guard<std::mutex> lk(mu_);
  auto now = Clock::now();
  auto ns = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  std::vector<PeerTraffic> out(o_.size);
  for (int p = 0; p < o_.size; ++p) {
    int64_t busy = traffic_[p].busyNs + (receiving_[p] > 0 ? ns(now - busySince_[p]) : 0);
    out[p].rank = p;
    out[p].bytesSent = traffic_[p].sent;
    out[p].bytesReceived = traffic_[p].received;
    out[p].bytesTimed = traffic_[p].timed;
    out[p].bytesHeld = traffic_[p].held;
    out[p].receiveBusyUs = busy / 1000;
    out[p].idleMs = lastHeard_[p] == Clock::time_point{} ? -1 : ns(now - lastHeard_[p]) / 1000000;
  }
  return out;
}

void NetTransport::failPeer(int peer, const std::string& why) {
  if (!peerFailed_[peer].empty()) return;
  peerFailed_[peer] = why;
  receiving_[peer] = 0;
  ACCL_INFO("NET", o_.where << ": rank " << peer << ": " << why);
  std::string text = "rank " + std::to_string(peer) + ": " + why;
  for (auto& r : session_.requests())
    if (r->peer == peer)
      r->fail(Failure::Remote, text + (r->isSend ? " (while this rank's message to it was in flight)"
                                                 : " (before its message to this rank arrived)"));
  for (auto& t : tagged_)
    if (t.req->peer == peer) t.req->fail(Failure::Remote, text);
  sockets_->dropPeer(peer);
  if (verbs_ && overIb(peer)) verbs_->dropPeer(peer);
  if (shm_) shm_->dropPeer(peer);
  cv_.notify_all();
}

void NetTransport::sendControl(int peer, FrameType type, uint64_t key, std::shared_ptr<OutMessage> owner,
                               const std::string* text) {
  // Control goes over the socket, also for peers whose data goes over verbs.
  const char* buf = text ? text->data() : nullptr;
  size_t len = text ? text->size() : 0;
  // The published copy: a group on one host begins its ops without the lock.
  sockets_->send(peer, type, key, session_.published(), buf, len, owner, FrameLink::Route::Ordered);
}

// ---------------------------------------------------------------- withdrawal

void NetTransport::withdrawLocked(const RequestPtr& r, const std::string& why, const char* what) {
  r->fail(Failure::Remote, why);
  if (!r->isSend) {
    matcher_.withdraw(r);
    return;
  }
  // Frames not yet written are dropped; a frame half on a socket is finished
  // from a copy; a verbs write in flight reads registered (pinned) pages.
  sockets_->withdraw(r);
  if (shm_ && !shm_->withdraw(r) && what)
    ACCL_INFO("NET", o_.where << ": " << what << " failed with part of the message written; "
                              << "the receiver discards the rest");
  if (verbs_ && !verbs_->withdraw(r) && what)
    ACCL_INFO("NET", o_.where << ": " << what << " failed with part of the message written; "
                              << "the receiver discards the rest");
}

void NetTransport::retireOpLocked() {
  for (auto& r : session_.requests()) withdrawLocked(r, "the op failed", nullptr);
}

}  // namespace net
}  // namespace core
}  // namespace accl
