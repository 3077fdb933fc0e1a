// Handle of an asynchronous operation.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accl {

class FlightRecorder;  // accl/trace.h

constexpr std::chrono::milliseconds kNoTimeout{-1};

// A Work is returned at once by every ProcessGroup op. It completes exactly
// once, successfully or with an exception. All methods are thread-safe. An op
// that completed successfully while it was issued (a small op, or one waited
// on at once, run by the calling thread) may return a Work it shares with
// other such ops of that thread: complete, successful, with no source rank.
class Work {
 public:
  explicit Work(std::string description = "");
  // "<what> #<seq>", formatted only when a message needs it (`what` must be a
  // string literal or otherwise outlive the Work).
  Work(const char* what, uint64_t seq);
  // Formatted by `describe(args)` only when a message needs it: a plain
  // function of plain values, so nothing it reads can go away before the
  // Work (an op's peer, tag and size, say).
  using Describer = std::string (*)(const std::array<int64_t, 4>& args);
  Work(Describer describe, const std::array<int64_t, 4>& args);
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Non-blocking: whether the op has finished (successfully or not).
  bool isCompleted() const;
  // Non-blocking: finished without an exception.
  bool isSuccess() const;
  // Non-blocking: like isCompleted(), but rethrows the op's exception if it failed.
  bool test();
  // Blocks until the op finishes and its completion callbacks have run, then
  // rethrows its exception if it failed.
  // With a timeout >= 0, throws accl::Timeout if the op is still running when
  // it expires; the op itself keeps running and stays bound by its own deadline.
  void wait(std::chrono::milliseconds timeout = kNoTimeout);
  // The op's failure, or nullptr while running or after success.
  std::exception_ptr exception() const;
  // Registers `cb`, called once when the op completes, on the thread that
  // completes it (or immediately on this thread if already complete). `cb`
  // must not block; it is how futures are built on top of Work.
  void onComplete(std::function<void(Work&)> cb);
  // For recv from any source: the rank the message came from (-1 until known).
  int sourceRank() const;
  std::string description() const;

  // Completes the work; used by backends. Later calls are ignored.
  void markCompleted(std::exception_ptr error = nullptr, int sourceRank = -1);
  // The same for a Work that no other thread can reach yet: made by the
  // caller and not handed out, so no callback, waiter or trace is attached.
  // No lock and no wake-up (an op run while it is issued). For a part of a
  // Work of several, no atomic count either while no part has been handed
  // to another thread (partHandedOff).
  void completeUnshared(std::exception_ptr error, int sourceRank);
  // Used by backends, before the Work is handed out: the op has `n` parts
  // (a sendrecv's receive and send), each completed by one call of
  // markCompleted or completeUnshared; the Work completes with the last of
  // them, failed with the first part's failure, with the source rank a part
  // reported. Until then each call only counts.
  void setParts(int n) {
    parts_.store(n, std::memory_order_relaxed);
    multiPart_ = n > 1;
  }
  // How many parts have not ended yet (1 for a Work of one part until it
  // completes): a poller that holds completions for this Work knows
  // whether they complete it.
  int partsLeft() const { return multiPart_ ? parts_.load(std::memory_order_acquire) : 1; }
  // Used by backends, on the thread that posts the parts, before a part goes
  // where another thread may end it (a queue a progress thread serves): the
  // later parts' completeUnshared count as markCompleted does.
  void partHandedOff() { partsHandedOff_ = true; }
  // Used by backends, before the Work is handed out: wait() without a
  // timeout calls `hook` once before it blocks (an op queue may run the op on
  // the waiting thread).
  void setWaitHook(std::function<void(Work&)> hook) { waitHook_ = std::move(hook); }
  // Used by ProcessGroup: completion also ends op `id` in `recorder` (cheaper
  // than a callback: nothing is allocated per op).
  void setTrace(const std::shared_ptr<FlightRecorder>& recorder, uint64_t id);
  // Used by ProcessGroup: the op completed while it was issued (callbacks
  // run) and succeeded. Lock-free: once done, error_ no longer changes.
  bool succeededAtOnce() const { return done_.load(std::memory_order_acquire) && !error_; }
  // Used by wait hooks that poll: completed and its callbacks run (wait()
  // returns at once). Lock-free, for a loop that asks on every pass.
  bool doneForWait() const { return done_.load(std::memory_order_acquire) != 0; }

 private:
  std::string description_;
  const char* what_ = nullptr;  // with seq_: the description, when description_ is empty
  uint64_t seq_ = 0;
  Describer describe_ = nullptr;  // with args_: the description, when set
  std::array<int64_t, 4> args_{};
  // Sets done_ (after the callbacks ran) and wakes the threads that sleep in wait().
  void publishDone();
  // One part of a Work of several ended: keeps its failure and source;
  // true for the last part, whose call completes the Work with them.
  bool lastPart(std::exception_ptr& error, int& sourceRank);

  mutable std::mutex mu_;
  bool completed_ = false;
  // 1 once completed and the callbacks ran: wait() returns then. Waiters
  // sleep on this word (a futex: no condition variable to build and destroy
  // with every op's Work), counted in sleepers_ so that completion makes a
  // system call only when someone sleeps.
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> sleepers_{0};
  int sourceRank_ = -1;
  std::exception_ptr error_;
  bool multiPart_ = false;     // set before the Work is handed out
  bool partsHandedOff_ = false;  // the posting thread's: see partHandedOff
  std::atomic<int> parts_{1};  // parts not yet ended (then below 1)
  std::exception_ptr partError_;          // under mu_ (or unshared): the first part's failure
  std::atomic<bool> partFailed_{false};   // a part failed: partError_ is set
  std::atomic<int> partSource_{-1};       // the source rank a part reported
  std::vector<std::function<void(Work&)>> callbacks_;
  std::function<void(Work&)> waitHook_;
  std::shared_ptr<FlightRecorder> trace_;
  uint64_t traceId_ = 0;
};

}  // namespace accl
