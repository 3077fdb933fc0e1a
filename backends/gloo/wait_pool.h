// The waits of posted point-to-point ops, each on a thread of its own.
//
// gloo completes a send only once the peer has posted the matching receive.
// Waiting for posted ops one at a time, in order, on one thread can therefore
// deadlock: this rank waits for send A, whose receive the peer posts only
// after an earlier op of the peer completed, and the peer's waiting thread is
// itself stuck on a send whose receive this rank posts only after an op queued
// behind A completes. Here no wait delays another op's completion: each runs
// on an idle thread, or on a new one when none is idle; a thread idle for 5 s
// exits while two others stay idle.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "accl/work.h"

namespace accl {

class WaitPool {
 public:
  explicit WaitPool(std::string threadName);
  // Returns once every submitted wait has finished (each is bounded by its
  // op's deadline).
  ~WaitPool();

  // Runs `fn` on a pool thread and completes `work` with its result (a source
  // rank or -1) or its exception.
  void submit(std::shared_ptr<Work> work, std::function<int()> fn);

 private:
  struct State;
  static void serve(const std::shared_ptr<State>& st);  // a pool thread
  std::shared_ptr<State> st_;  // shared with the threads, which are detached
};

}  // namespace accl
