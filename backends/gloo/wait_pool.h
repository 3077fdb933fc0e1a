// The waits of posted point-to-point ops, each on a thread of its own.
//
// gloo completes a send only once the peer has posted the matching receive.
// Waiting for posted ops one at a time, in order, on one thread can therefore
// deadlock: this rank waits for send A, whose receive the peer posts only
// after an earlier op of the peer completed, and the peer's waiting thread is
// itself stuck on a send whose receive this rank posts only after an op queued
// behind A completes. Here no wait delays another op's completion: a thread
// that waits for an op (an unbounded Work::wait()) runs that op's wait itself,
// and an op nobody waits for is taken by an idle pool thread, or a new one,
// once it has been posted for `grace`; a thread idle for 5 s exits while two
// others stay idle.
//
// Why the grace: gloo's own event loop completes the op either way, and the
// caller usually waits at once (torch's isend/irecv then wait(), a sendrecv's
// two halves); then only the caller wakes, as with torch's gloo. Handing every
// op to a pool thread at once woke that thread and then the caller: 2 ranks on
// 2 cores, torch isend+irecv through this backend took 206-273 us at 8 B -
// 32 KiB, 1.25-1.45x torch's gloo; waited on the caller's thread, 119-153 us.
// One idle thread sleeps until the oldest op is due, so the pool wakes about
// once per grace period while ops keep coming, not once per op (accl-perf
// sendrecv, 64 B: 9 context switches per op before, 3.2 after). The cost: a
// Work that is polled or given a callback, but not waited for, reports its
// completion no earlier than `grace` after it was posted.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "accl/work.h"

namespace accl {

class WaitPool {
 public:
  explicit WaitPool(std::string threadName,
                    std::chrono::microseconds grace = std::chrono::microseconds(1000));
  // Returns once every submitted wait has finished (each is bounded by its
  // op's deadline).
  ~WaitPool();

  // Runs `fn` on a pool thread and completes `work` with its result (a source
  // rank or -1) or its exception.
  void submit(std::shared_ptr<Work> work, std::function<int()> fn);

 private:
  struct Task;
  struct State;
  static void serve(const std::shared_ptr<State>& st);  // a pool thread
  static void spawn(const std::shared_ptr<State>& st);  // a new pool thread (st->mu held)
  std::shared_ptr<State> st_;  // shared with the threads, which are detached
};

}  // namespace accl
