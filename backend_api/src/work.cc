#include "accl/work.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <vector>

#include "accl/trace.h"

#include "accl/errors.h"
#include "accl/internal/work_pool.h"

// ASan builds take every Work from operator new, so that a use after free is
// caught; TSan builds keep the pool (its hand-offs between threads are what
// TSan should see).
#if defined(__SANITIZE_ADDRESS__)
#define ACCL_WORK_POOL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define ACCL_WORK_POOL 0
#endif
#endif
#ifndef ACCL_WORK_POOL
#define ACCL_WORK_POOL 1
#endif

namespace accl {

namespace internal {
namespace {
struct FreeBlock {
  FreeBlock* next;
};
// Trivially destructible, so still usable while the thread's other
// thread_local objects are destroyed (a Work may die then): after the
// drainer ran, blocks go straight back to operator delete.
struct ThreadBlocks {
  FreeBlock* head;
  int count;
  bool drained;     // the thread is exiting: nothing more is kept
  bool registered;  // the drainer will run at the thread's exit
};
// Initial-exec: a %fs-relative access on every Work's allocation and release
// instead of a call to __tls_get_addr each (16 bytes of the static TLS that
// glibc keeps for libraries loaded later, as process_group.cc's op id).
__attribute__((tls_model("initial-exec"))) thread_local ThreadBlocks tBlocks{nullptr, 0, false, false};
// Pool blocks taken from operator new and not given back: in use, or kept on
// some thread (for tests; touched only off the fast paths).
std::atomic<long> gBlocksOutstanding{0};

struct Drainer {
  ~Drainer() {
    ThreadBlocks& t = tBlocks;
    t.drained = true;
    while (t.head) {
      FreeBlock* n = t.head->next;
      ::operator delete(t.head);
      t.head = n;
    }
    gBlocksOutstanding.fetch_sub(t.count, std::memory_order_relaxed);
    t.count = 0;
  }
};
// The first block kept on this thread: the drainer frees the list when the
// thread exits (a thread_local's first use registers it).
[[maybe_unused]] __attribute__((noinline)) void keepFirst(void* p) {  // unused where the pool is off (ASan)
  static thread_local Drainer drainer;
  (void)drainer;
  ThreadBlocks& t = tBlocks;
  t.registered = true;
  auto* b = static_cast<FreeBlock*>(p);
  b->next = t.head;
  t.head = b;
  ++t.count;
}
}  // namespace

void* workBlockAllocate(std::size_t bytes) {
#if ACCL_WORK_POOL
  if (bytes <= kWorkBlockBytes) {
    ThreadBlocks& t = tBlocks;
    if (t.head) {
      FreeBlock* b = t.head;
      t.head = b->next;
      --t.count;
      return b;
    }
    void* p = ::operator new(kWorkBlockBytes);
    gBlocksOutstanding.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
#endif
  return ::operator new(bytes);
}

void workBlockFree(void* p, std::size_t bytes) noexcept {
#if ACCL_WORK_POOL
  if (bytes <= kWorkBlockBytes) {
    ThreadBlocks& t = tBlocks;
    if (!t.drained && t.count < kWorkBlocksKept) {
      // The first block kept on a thread registers its drainer; the common
      // path stays free of that call (after it, the compiler would look the
      // thread-local up again).
      if (__builtin_expect(!t.registered, 0)) return keepFirst(p);
      auto* b = static_cast<FreeBlock*>(p);
      b->next = t.head;
      t.head = b;
      ++t.count;
      return;
    }
    gBlocksOutstanding.fetch_sub(1, std::memory_order_relaxed);
  }
#else
  (void)bytes;
#endif
  ::operator delete(p);
}

bool workPoolEnabled() { return ACCL_WORK_POOL != 0; }
int workBlocksKeptHere() { return tBlocks.count; }
long workBlocksOutstanding() { return gBlocksOutstanding.load(); }

namespace {
// The thread's completed Work (completedWork), null before its first op.
// These objects are never freed: completedWork hands out pointers that hold
// no reference (use_count() 0), so that a copy and its destruction write
// nothing, and such a pointer may outlive its thread. A thread that exits
// gives its object back for the next new thread to take.
__attribute__((tls_model("initial-exec"))) thread_local Work* tDone = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local bool tDoneGone = false;  // the thread gave it back
std::mutex gDoneMu;
long gDoneMade = 0;  // under gDoneMu
std::vector<Work*>& doneSpare() {
  static auto* v = new std::vector<Work*>;  // never destroyed: a thread may exit after the static destructors
  return *v;
}
struct DoneReturner {
  ~DoneReturner() {
    tDoneGone = true;
    if (!tDone) return;
    std::lock_guard<std::mutex> lk(gDoneMu);
    doneSpare().push_back(tDone);
    tDone = nullptr;
  }
};
__attribute__((noinline)) Work* takeDone() {
  static thread_local DoneReturner returner;
  (void)returner;
  {
    std::lock_guard<std::mutex> lk(gDoneMu);
    if (!doneSpare().empty()) {
      tDone = doneSpare().back();
      doneSpare().pop_back();
      return tDone;
    }
  }
  auto* w = new Work("an op that completed when it was issued");
  w->markCompleted();
  {
    std::lock_guard<std::mutex> lk(gDoneMu);
    ++gDoneMade;
  }
  return tDone = w;
}
}  // namespace

long completedWorksMade() {
  std::lock_guard<std::mutex> lk(gDoneMu);
  return gDoneMade;
}

std::shared_ptr<Work> completedWork() {
  Work* w = tDone;
  if (__builtin_expect(w == nullptr, 0)) {
    // An op issued while the thread exits, after its object went back: one of its own.
    if (tDoneGone) {
      auto own = std::make_shared<Work>("an op that completed when it was issued");
      own->markCompleted();
      return own;
    }
    w = takeDone();
  }
  // Aliasing an empty pointer: no control block, no count to change.
  return std::shared_ptr<Work>(std::shared_ptr<Work>(), w);
}
}  // namespace internal

Work::Work(std::string description) : description_(std::move(description)) {}
Work::Work(const char* what, uint64_t seq) : what_(what), seq_(seq) {}
Work::Work(Describer describe, const std::array<int64_t, 4>& args) : describe_(describe), args_(args) {}
Work::~Work() = default;

std::string Work::description() const {
  if (describe_) return describe_(args_);
  if (what_) return std::string(what_) + " #" + std::to_string(seq_);
  return description_;
}

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_ && !error_;
}

bool Work::test() {
  std::lock_guard<std::mutex> lk(mu_);
  if (completed_ && error_) std::rethrow_exception(error_);
  return completed_;
}

namespace {
// Sleeps while *word is 0, at most `ns` (< 0: no limit); returns on a wake-up,
// a signal, the time limit, or a word that is no longer 0.
void futexWaitZero(std::atomic<uint32_t>* word, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, 0, ns < 0 ? nullptr : &ts, nullptr, 0);
}
void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace

void Work::publishDone() {
  // Against wait(): either it sees done_, or this sees its sleeper count and
  // wakes it (both sides seq_cst).
  done_.store(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futexWakeAll(&done_);
}

void Work::wait(std::chrono::milliseconds timeout) {
  // Only an unbounded wait may run the op itself: a bounded one must be able
  // to return when its time is up while the op goes on.
  if (timeout.count() < 0 && !done_.load(std::memory_order_acquire) && waitHook_) waitHook_(*this);
  if (!done_.load(std::memory_order_acquire)) {
    using Clock = std::chrono::steady_clock;
    auto until = timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (!done_.load(std::memory_order_seq_cst)) {
      int64_t ns = -1;
      if (timeout.count() >= 0) {
        ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now()).count();
        if (ns <= 0) break;
      }
      futexWaitZero(&done_, ns);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (!done_.load(std::memory_order_acquire)) {
    std::string d = description();
    // A backend's description may carry the group's context ("accl rank 0/2 ...") already.
    if (d.empty()) d = "accl: operation";
    else if (d.rfind("accl", 0) != 0) d = "accl: " + d;
    throw Timeout(d + " did not complete within " + std::to_string(timeout.count()) + " ms of Work::wait()");
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void Work::onComplete(std::function<void(Work&)> cb) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(cb));
      return;
    }
  }
  cb(*this);
}

int Work::sourceRank() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sourceRank_;
}

void Work::setTrace(const std::shared_ptr<FlightRecorder>& recorder, uint64_t id) {
  // Completed already (an op run while it was issued): error_ no longer
  // changes, and nothing needs the lock or a reference to the recorder.
  if (done_.load(std::memory_order_acquire)) {
    recorder->finished(id, error_);
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (completed_) {
    recorder->finished(id, error_);
    return;
  }
  trace_ = recorder;
  traceId_ = id;
}

bool Work::lastPart(std::exception_ptr& error, int& sourceRank) {
  // A successful part takes no lock: its source goes in an atomic, ordered
  // before the count by the count's release.
  if (sourceRank >= 0) partSource_.store(sourceRank, std::memory_order_relaxed);
  if (error) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!partError_) partError_ = error;
    partFailed_.store(true, std::memory_order_relaxed);
  }
  if (parts_.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
  if (partFailed_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lk(mu_);
    error = partError_;
  }
  sourceRank = partSource_.load(std::memory_order_relaxed);
  return true;
}

void Work::completeUnshared(std::exception_ptr error, int sourceRank) {
  if (multiPart_) {
    // A part of a Work of several: once a part was handed off, another
    // thread may end it meanwhile.
    if (partsHandedOff_) return markCompleted(std::move(error), sourceRank);
    // Every part so far ended on this thread: plain counting (the atomic
    // decrement, lock and wake-up of markCompleted were about 230
    // instructions of a small sendrecv's 1,900).
    if (sourceRank >= 0) partSource_.store(sourceRank, std::memory_order_relaxed);
    if (error && !partFailed_.load(std::memory_order_relaxed)) {
      partError_ = error;
      partFailed_.store(true, std::memory_order_relaxed);
    }
    int left = parts_.load(std::memory_order_relaxed) - 1;
    parts_.store(left, std::memory_order_relaxed);
    if (left > 0) return;
    error = partError_;
    sourceRank = partSource_.load(std::memory_order_relaxed);
  }
  if (completed_) return;
  completed_ = true;
  error_ = std::move(error);
  sourceRank_ = sourceRank;
  done_.store(1, std::memory_order_release);  // nobody waits yet
}

void Work::markCompleted(std::exception_ptr error, int sourceRank) {
  if (multiPart_ && !lastPart(error, sourceRank)) return;
  std::vector<std::function<void(Work&)>> cbs;
  std::shared_ptr<FlightRecorder> trace;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (completed_) return;
    trace.swap(trace_);
    completed_ = true;
    error_ = std::move(error);
    sourceRank_ = sourceRank;
    cbs.swap(callbacks_);
    if (trace) trace->finished(traceId_, error_);
  }
  // Callbacks run before waiters wake: after wait() returns, they have run.
  for (auto& cb : cbs) cb(*this);
  publishDone();
}

}  // namespace accl
