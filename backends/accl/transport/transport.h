// The seam between algorithms and transports: algorithms post sends and
// receives of whole buffers to peers of their group and wait for them; they
// never see sockets, verbs or shared memory.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accl {
namespace core {

using Clock = std::chrono::steady_clock;

// Now, from the kernel's coarse clock: CLOCK_MONOTONIC, which Clock reads,
// as of the last tick (1-4 ms behind at most, never ahead). A few ns where
// the precise read costs 25-35 ns: for what is kept at millisecond
// resolution on the small-message path (when a peer was last heard from,
// whether a deadline has passed).
inline Clock::time_point coarseNow() {
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return Clock::now();
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

// One pass of a busy wait: tells the core (and its sibling thread) so.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Stores the CPU this thread runs on into `word` where it changed (a word
// that peers read anyway: a waiter that finds a late peer on its own CPU
// yields instead of spinning); returns it (-1: unknown). `noted` is what the
// caller, the word's only writer, stored last: the word shares a line that
// peers poll, and reading it back waited for that line on every op. glibc
// reads the CPU from the thread's rseq area (2.35 and later), else from the
// vDSO: a few nanoseconds either way.
inline int noteCpu(std::atomic<int32_t>& word, int& noted) {
  int cpu = sched_getcpu();
  if (cpu != noted) {
    noted = cpu;
    word.store(cpu, std::memory_order_relaxed);
  }
  return cpu;
}

// An op's deadline, `timeout` from now. From a second on it is read from the
// kernel's coarse clock (the same CLOCK_MONOTONIC that Clock reads, updated
// every tick: a few ns where the precise read costs ~25 ns, a fifth of a
// small op on one host), plus one tick so that it is never early: at most a
// tick (1-4 ms) late. Shorter timeouts read the precise clock.
inline Clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  if (timeout < std::chrono::seconds(1)) return Clock::now() + timeout;
  static const std::chrono::nanoseconds tick = [] {
    timespec r;
    return std::chrono::nanoseconds(clock_getres(CLOCK_MONOTONIC_COARSE, &r) == 0 ? r.tv_sec * 1000000000LL + r.tv_nsec
                                                                                   : 10000000LL);
  }();
  return coarseNow() + std::chrono::duration_cast<Clock::duration>(tick) + timeout;
}

// The op a message belongs to. Every data frame carries it, so a receiver can
// tell a mismatched collective (different op, count, dtype or root at the same
// sequence number) from a late one.
struct OpDesc {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint16_t op = 0;  // accl::OpType
  uint8_t dtype = 0;
  uint8_t redop = 0;
  int32_t root = -1;

  bool operator==(const OpDesc& o) const {
    return seq == o.seq && count == o.count && op == o.op && dtype == o.dtype &&
           redop == o.redop && root == o.root;
  }
  bool operator!=(const OpDesc& o) const { return !(*this == o); }
};
static_assert(sizeof(OpDesc) == 24, "OpDesc is part of the wire format");

// "allreduce #5 (1024 x float32, sum)"
std::string describe(const OpDesc& d);

// Offsets of consecutive blocks: result[i] = sizes[0] + ... + sizes[i-1] (size n + 1).
inline std::vector<size_t> prefixSums(const std::vector<size_t>& sizes) {
  std::vector<size_t> d(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) d[i + 1] = d[i] + sizes[i];
  return d;
}
// The same into `d`, which an op's path reuses (no allocation once it has the capacity).
inline const std::vector<size_t>& prefixSums(const std::vector<size_t>& sizes, std::vector<size_t>& d) {
  d.assign(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) d[i + 1] = d[i] + sizes[i];
  return d;
}
// n items split into p near-equal parts, the first n % p one larger.
inline std::vector<size_t> equalParts(size_t n, int p) {
  std::vector<size_t> c(p);
  for (int i = 0; i < p; ++i) c[i] = n / p + (static_cast<size_t>(i) < n % p ? 1 : 0);
  return c;
}

// Where an op waited for its peers, when the flight recorder times it
// (ACCL_TIMELINE, ACCL_STATS): the first wait's start, the last wait's end and
// the sum of the waits, steady-clock ns. Transports add to it while a caller
// has set it (timeWaits()); otherwise they read no clock for it.
struct WaitTimes {
  int64_t firstNs = 0, lastNs = 0, totalNs = 0;
  void add(Clock::time_point a, Clock::time_point b) {
    int64_t x = std::chrono::duration_cast<std::chrono::nanoseconds>(a.time_since_epoch()).count();
    int64_t y = std::chrono::duration_cast<std::chrono::nanoseconds>(b.time_since_epoch()).count();
    if (!firstNs) firstNs = x;
    lastNs = y;
    totalNs += y - x;
  }
};

// Adds the time from its construction to its end to `w` (nothing when null).
class WaitScope {
 public:
  explicit WaitScope(WaitTimes* w) : w_(w) {
    if (__builtin_expect(w_ != nullptr, 0)) t0_ = Clock::now();
  }
  ~WaitScope() {
    if (__builtin_expect(w_ != nullptr, 0)) w_->add(t0_, Clock::now());
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  WaitTimes* w_;
  Clock::time_point t0_{};
};

// Point-to-point messages between ranks of one communicator. A message is
// identified by (peer, step) within the current op; a receive names exactly
// how many bytes it expects (a different size is a mismatch error). Any number
// of sends and receives may be outstanding per peer; they complete in any order.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(int peer, uint32_t step, const void* buf, size_t len) = 0;
  virtual void recv(int peer, uint32_t step, void* buf, size_t len) = 0;
  // Waits until every send and receive posted since the last wait() is
  // complete. Throws accl::Timeout (naming the ranks that did not arrive),
  // RemoteError (peer failed or aborted) or InvalidArgument (mismatch). When
  // it throws, every send and receive of the op was withdrawn first: nothing
  // reads or writes their buffers afterwards, so they may be freed at once.
  virtual void wait() = 0;
  // How many sends and receives were posted since the last wait() returned:
  // a mark for waitFirst().
  virtual size_t posted() const = 0;
  // Waits until the first `n` sends and receives posted since the last
  // wait() are complete, while the later ones keep moving (a pipeline's next
  // pieces, whose receives are posted before their data comes). Fails as
  // wait() does, withdrawing every request of the op. n >= posted(): wait().
  virtual void waitFirst(size_t n) = 0;
  // Where wait() adds its time (nullptr: it does not look at the clock).
  void timeWaits(WaitTimes* w) { waitTimes_ = w; }

 protected:
  WaitTimes* waitTimes_ = nullptr;
};

// A sub-group of a transport's ranks, as the algorithms see it: index i is
// transport rank ranks[i]. `stepBase` separates the message ids of the phases
// of a composed (e.g. hierarchical) algorithm.
class Scratch;  // algorithms/scratch.h

struct Peers {
  Transport* t = nullptr;
  std::vector<int> ranks;
  int me = 0;
  uint32_t stepBase = 0;
  // The group's scratch buffers, kept between ops (null: each op allocates its own).
  Scratch* scratch = nullptr;

  int size() const { return static_cast<int>(ranks.size()); }
  void send(int i, uint32_t step, const void* buf, size_t len) const {
    t->send(ranks[i], stepBase + step, buf, len);
  }
  void recv(int i, uint32_t step, void* buf, size_t len) const {
    t->recv(ranks[i], stepBase + step, buf, len);
  }
  void wait() const { t->wait(); }
  // What has been posted so far, for waitFor(): everything posted before
  // mark() is complete when waitFor() returns, the rest still moves.
  size_t mark() const { return t->posted(); }
  void waitFor(size_t mark) const { t->waitFirst(mark); }
};

}  // namespace core
}  // namespace accl
