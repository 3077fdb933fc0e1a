// A worker thread that runs a group's operations one at a time, in the order
// they were enqueued, and completes their Work (gloo's ProcessGroupGloo model).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "accl/internal/work_pool.h"
#include "accl/work.h"

namespace accl {
namespace internal {

class OpQueue {
 public:
  // waiterRuns: a thread that waits on the Work of the op that is next in
  // line while nothing runs takes it off the queue and runs it itself,
  // instead of sleeping until the worker thread has woken up, run it and
  // woken it (two thread hand-offs of several microseconds each on the
  // submit-then-wait path). Ops still run one at a time, in order. Only for
  // backends whose ops may run on any thread.
  explicit OpQueue(std::string name, bool waiterRuns = false);
  // Finishes the queued ops (each is bounded by its own deadline), then joins.
  ~OpQueue();

  // Thread-safe. Returns at once; `fn` runs on the worker thread. If `fn`
  // throws, the Work completes with that exception. `fn` may return a source
  // rank (for recv from any source) or -1.
  std::shared_ptr<Work> enqueue(std::string description, std::function<int()> fn) {
    return enqueue(internal::makeWork(std::move(description)), std::move(fn));
  }
  std::shared_ptr<Work> enqueue(std::shared_ptr<Work> work, std::function<int()> fn) {
    push(work, std::move(fn));
    return work;
  }
  // Like enqueue, but when nothing is queued or running, runs the op on the
  // calling thread (ops still run one at a time, in order): used for small
  // ops, where a thread hand-off costs more than the op. The op's closure is
  // built only when the op has to wait in the queue: `runNow()` runs the op
  // on the calling thread and may refer to the caller's locals; `queued()`
  // returns the callable that owns copies of them (wrapped here in a
  // std::function). An op run at once then copies nothing: copying its
  // arguments, just written field by field, into a closure with wide loads
  // stalled on store forwarding (seen in profiles of 8-byte ops). Either may
  // return a source rank (for recv from any source) or -1, or throw: the
  // Work completes with that exception.
  // The Work is made only where it is needed: `make()` makes the
  // op's Work when the op waits in the queue, or ran at once and failed or
  // reports a source rank; an op that ran at once and succeeded returns
  // completedWork(). `runNow` cannot refer to the Work (there may be none).
  template <typename M, typename F, typename Q>
  std::shared_ptr<Work> runOrEnqueueMade(M&& make, F&& runNow, Q&& queued) {
    if (!startInline()) {
      std::shared_ptr<Work> work = make();
      push(work, std::function<int()>(queued()));
      return work;
    }
    struct Finish {
      OpQueue* q;
      ~Finish() { q->finishInline(); }
    } finish{this};
    std::exception_ptr error;
    int src = runCatching(runNow, error);
    if (!error && src < 0) return completedWork();
    std::shared_ptr<Work> work = make();
    work->completeUnshared(std::move(error), src);
    return work;
  }

 private:
  // runNow()'s result, or -1 with its exception in `error`.
  template <typename F>
  static int runCatching(F& runNow, std::exception_ptr& error) {
    try {
      return runNow();
    } catch (...) {
      error = std::current_exception();
      return -1;
    }
  }
  struct State;
  // Claims the group for an inline run: false if something is queued or running.
  bool startInline();
  void finishInline();
  void push(const std::shared_ptr<Work>& work, std::function<int()> fn);

  std::string name_;
  bool waiterRuns_ = false;
  std::shared_ptr<State> st_;  // shared with waiters' hooks, which may outlive the queue
  std::thread thread_;
};

}  // namespace internal
}  // namespace accl
