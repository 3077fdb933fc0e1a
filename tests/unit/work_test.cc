#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "accl/errors.h"
#include "accl/internal/bounded_mutex.h"
#include "accl/internal/op_queue.h"
#include "accl/internal/work_pool.h"
#include "accl/work.h"

using namespace accl;

TEST(Work, WaitReturnsAfterCompletionAndRunsCallbacksOnce) {
  auto w = std::make_shared<Work>("test op");
  int calls = 0;
  w->onComplete([&](Work& x) {
    ++calls;
    EXPECT_TRUE(x.isCompleted());
  });
  EXPECT_FALSE(w->isCompleted());
  EXPECT_FALSE(w->test());
  std::thread t([&] { w->markCompleted(nullptr, 3); });
  w->wait();
  t.join();
  w->markCompleted(std::make_exception_ptr(RemoteError("late")));  // ignored
  EXPECT_TRUE(w->isSuccess());
  EXPECT_EQ(w->sourceRank(), 3);
  EXPECT_EQ(calls, 1);
  int late = 0;
  w->onComplete([&](Work&) { ++late; });
  EXPECT_EQ(late, 1) << "a callback registered after completion runs at once";
}

TEST(Work, WaitWithTimeoutThrowsTimeoutNamingTheOp) {
  Work w("allreduce #7");
  auto t0 = std::chrono::steady_clock::now();
  try {
    w.wait(std::chrono::milliseconds(20));
    FAIL();
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #7"), std::string::npos);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20)) << "not before its time";
  EXPECT_THROW(w.wait(std::chrono::milliseconds(0)), Timeout);  // a zero bound only looks
}

// Waiters sleep on the Work's completion word: every one of them wakes when
// another thread completes it, only after its callbacks ran, whether it went
// to sleep before the completion or raced with it (many rounds, completion
// after 0-300 us). A lost wake-up shows as a bounded wait's Timeout, or as
// the test's time limit for the unbounded one.
TEST(Work, EveryWaiterWakesWhenAnotherThreadCompletesItAfterItsCallbacks) {
  for (int round = 0; round < 300; ++round) {
    auto w = std::make_shared<Work>("round");
    std::atomic<bool> ran{false};
    w->onComplete([&](Work&) {
      if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      ran = true;
    });
    std::atomic<int> awake{0}, sawCallback{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i)
      waiters.emplace_back([&, i] {
        if (i == 0) w->wait();
        else w->wait(std::chrono::seconds(10));
        ++awake;
        if (ran) ++sawCallback;
      });
    std::this_thread::sleep_for(std::chrono::microseconds(round % 301));
    w->markCompleted(nullptr, round);
    for (auto& t : waiters) t.join();
    ASSERT_EQ(awake.load(), 3) << "round " << round;
    ASSERT_EQ(sawCallback.load(), 3) << "round " << round << ": wait() returned before the callback ran";
    ASSERT_EQ(w->sourceRank(), round);
  }
}

TEST(Work, ErrorsAreRethrownWithTheirType) {
  Work w;
  w.markCompleted(std::make_exception_ptr(RemoteError("peer 3 vanished")));
  EXPECT_THROW(w.wait(), RemoteError);
  EXPECT_THROW(w.test(), RemoteError);
  EXPECT_FALSE(w.isSuccess());
  EXPECT_TRUE(w.exception() != nullptr);
}

TEST(Work, AWorkOfTwoPartsCompletesWithTheLastKeepingTheFirstFailureAndTheSource) {
  // A sendrecv's Work: the receive's part reports the source, the send's
  // part may fail; either may end first, on any thread.
  {
    auto w = std::make_shared<Work>("two parts");
    w->setParts(2);
    int calls = 0;
    w->onComplete([&](Work&) { ++calls; });
    w->markCompleted(nullptr, 3);
    EXPECT_FALSE(w->isCompleted());
    EXPECT_EQ(calls, 0);
    w->markCompleted(std::make_exception_ptr(RemoteError("the send failed")), -1);
    EXPECT_TRUE(w->isCompleted());
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(w->sourceRank(), 3);
    EXPECT_THROW(w->wait(), RemoteError);
    w->markCompleted(nullptr, 5);  // later calls are ignored
    EXPECT_EQ(w->sourceRank(), 3);
    EXPECT_FALSE(w->isSuccess());
  }
  {
    // The first failure wins; completeUnshared of a part is a part too.
    auto w = std::make_shared<Work>("two parts");
    w->setParts(2);
    w->completeUnshared(std::make_exception_ptr(Timeout("first")), -1);
    EXPECT_FALSE(w->isCompleted());
    w->completeUnshared(std::make_exception_ptr(RemoteError("second")), 1);
    ASSERT_TRUE(w->isCompleted());
    try {
      w->wait();
      ADD_FAILURE() << "no failure";
    } catch (const Timeout& e) {
      EXPECT_STREQ(e.what(), "first");
    }
    EXPECT_EQ(w->sourceRank(), 1);
  }
  // Parts ended on two threads at once, many times: exactly one completion,
  // after both, and a waiter wakes.
  for (int round = 0; round < 200; ++round) {
    auto w = std::make_shared<Work>("two parts");
    w->setParts(2);
    std::atomic<int> calls{0};
    w->onComplete([&](Work&) { calls++; });
    std::atomic<bool> go{false};
    std::thread a([&] {
      while (!go) {
      }
      w->markCompleted(nullptr, 2);
    });
    std::thread b([&] {
      while (!go) {
      }
      w->markCompleted(nullptr, -1);
    });
    go = true;
    w->wait();
    a.join();
    b.join();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(w->sourceRank(), 2);
  }
}

TEST(OpQueue, RunsInSubmissionOrderAndStoresExceptions) {
  internal::OpQueue q("test");
  std::vector<int> order;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 50; ++i)
    works.push_back(q.enqueue("op", [&, i] {
      order.push_back(i);
      if (i == 10) throw InvalidArgument("bad op 10");
      return -1;
    }));
  for (int i = 0; i < 50; ++i) {
    if (i == 10) EXPECT_THROW(works[i]->wait(), InvalidArgument);
    else works[i]->wait();
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

// waiterRuns: a waiter runs the op that is next in line on its own thread
// (no hand-off to the worker); ops still run one at a time and in order, and
// a waiter whose op is not next (or while another runs) blocks as usual.
TEST(OpQueue, AWaiterRunsTheNextOpItselfWithoutBreakingOrder) {
  internal::OpQueue q("test", /*waiterRuns=*/true);
  // Keep the worker busy so that the next op is certainly still queued.
  std::atomic<bool> release{false};
  auto blocker = q.enqueue("blocker", [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return -1;
  });
  std::thread::id ranOn;
  std::vector<int> order;
  std::mutex m;
  auto second = q.enqueue("second", [&] {
    std::lock_guard<std::mutex> lk(m);
    ranOn = std::this_thread::get_id();
    order.push_back(2);
    return -1;
  });
  auto third = q.enqueue("third", [&] {
    std::lock_guard<std::mutex> lk(m);
    order.push_back(3);
    return -1;
  });
  // While the blocker runs, waiting on the third op blocks (not next, busy).
  std::thread waiter3([&] { third->wait(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third->isCompleted());
  release = true;
  blocker->wait();
  second->wait();
  waiter3.join();
  ASSERT_EQ(order, (std::vector<int>{2, 3}));
  (void)ranOn;  // the worker or this thread, whichever took it first
  // Now with the worker idle: submit and wait at once, many times; each op
  // runs on the waiting thread or the worker, never two at a time.
  std::atomic<int> running{0}, overlap{0}, onWaiter{0};
  for (int i = 0; i < 2000; ++i) {
    auto w = q.enqueue("op", [&] {
      if (running.fetch_add(1) != 0) ++overlap;
      running.fetch_sub(1);
      return -1;
    });
    auto me = std::this_thread::get_id();
    auto w2 = q.enqueue("mark", [&, me] {
      if (std::this_thread::get_id() == me) ++onWaiter;
      return -1;
    });
    w->wait();
    w2->wait();
  }
  EXPECT_EQ(overlap.load(), 0);
  EXPECT_GT(onWaiter.load(), 0) << "no op ever ran on the waiting thread";
}

// The inline path claims the group without the queue's mutex: run against
// queued ops and waiters from several threads at once, ops still never
// overlap, each thread's ops run in the order it issued them, every op runs
// exactly once, and every Work completes (with its op's exception where it
// threw).
TEST(OpQueue, InlineAndQueuedOpsFromManyThreadsNeverOverlapAndKeepEachThreadsOrder) {
  for (bool waiterRuns : {true, false}) {
    internal::OpQueue q("test", waiterRuns);
    constexpr int kThreads = 4, kOps = 3000;
    std::atomic<int> running{0}, overlap{0}, ran{0}, inlined{0};
    std::vector<std::vector<int>> seen(kThreads);  // per thread: the order its ops ran
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        std::vector<std::pair<int, std::shared_ptr<Work>>> pending;
        auto waitAll = [&] {
          for (auto& [i, w] : pending) {
            if (i % 97 == 0) {
              EXPECT_THROW(w->wait(), InvalidArgument);
            } else {
              EXPECT_NO_THROW(w->wait());
              EXPECT_EQ(w->sourceRank(), i % 5);
            }
          }
          pending.clear();
        };
        auto me = std::this_thread::get_id();
        for (int i = 0; i < kOps; ++i) {
          auto fn = [&, t, i, me] {
            if (running.fetch_add(1) != 0) ++overlap;
            seen[t].push_back(i);  // only one op runs at a time (checked above)
            if (std::this_thread::get_id() == me) ++inlined;
            ++ran;
            running.fetch_sub(1);
            if (i % 97 == 0) throw InvalidArgument("op " + std::to_string(i));
            return i % 5;
          };
          auto w = (i % 3 == 0) ? q.enqueue("queued", fn)
                                : q.runOrEnqueueMade([] { return std::make_shared<Work>("maybe inline"); }, fn,
                                                     [&fn] { return fn; });
          pending.emplace_back(i, w);
          if (i % 7 == 0 || pending.size() > 16) waitAll();  // some at once, others later
        }
        waitAll();
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(overlap.load(), 0) << "two ops ran at once (waiterRuns " << waiterRuns << ")";
    EXPECT_EQ(ran.load(), kThreads * kOps);
    EXPECT_GT(inlined.load(), 0) << "no op ran on its caller's thread";
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_EQ(seen[t].size(), size_t(kOps));
      for (int i = 0; i < kOps; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t << "'s ops ran out of order";
    }
  }
}

// A Work completed inline reports its result as one completed by the worker.
TEST(OpQueue, AnOpRunInlineCompletesItsWorkWithResultAndException) {
  internal::OpQueue q("test", true);
  auto noQueue = [] { return [] { return -1; }; };
  auto ok = q.runOrEnqueueMade([] { return std::make_shared<Work>("ok"); }, [] { return 3; }, noQueue);
  ASSERT_TRUE(ok->isCompleted());
  EXPECT_TRUE(ok->isSuccess());
  EXPECT_EQ(ok->sourceRank(), 3);
  ok->wait();
  bool called = false;
  ok->onComplete([&](Work&) { called = true; });  // already complete: runs at once
  EXPECT_TRUE(called);
  auto bad = q.runOrEnqueueMade([] { return std::make_shared<Work>("bad"); },
                                []() -> int { throw RemoteError("peer gone"); }, noQueue);
  ASSERT_TRUE(bad->isCompleted());
  EXPECT_FALSE(bad->isSuccess());
  EXPECT_THROW(bad->wait(), RemoteError);
  EXPECT_THROW(bad->test(), RemoteError);
}

TEST(OpQueue, AnOpRunInlineMakesAWorkOnlyWhenItFailsReportsASourceOrWaits) {
  internal::OpQueue q("test", true);
  int made = 0;
  auto make = [&](const char* what) {
    return [&made, what] {
      ++made;
      return std::make_shared<Work>(what);
    };
  };
  auto noQueue = [] { return [] { return -1; }; };
  // Succeeded at once, no source: the thread's completed Work, nothing made.
  auto a = q.runOrEnqueueMade(make("a"), [] { return -1; }, noQueue);
  auto b = q.runOrEnqueueMade(make("b"), [] { return -1; }, noQueue);
  EXPECT_EQ(made, 0);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a.get(), internal::completedWork().get());
  ASSERT_TRUE(a->isCompleted());
  EXPECT_TRUE(a->isSuccess());
  EXPECT_EQ(a->sourceRank(), -1);
  a->wait();
  a->wait(std::chrono::milliseconds(0));
  EXPECT_TRUE(a->test());
  EXPECT_EQ(a->exception(), nullptr);
  // Callbacks run at once and are not kept: each runs once, however many are added.
  int calls = 0;
  for (int i = 0; i < 3; ++i) a->onComplete([&](Work&) { ++calls; });
  EXPECT_EQ(calls, 3);
  // It holds no reference: copies and their ends change no count.
  EXPECT_EQ(a.use_count(), 0);
  // Another thread has its own while both run; the object outlives its
  // thread (a pointer to it stays valid), and the next new thread takes it.
  std::shared_ptr<Work> fromThread;
  std::atomic<bool> taken{false}, letGo{false};
  std::thread t([&] {
    fromThread = q.runOrEnqueueMade(make("t"), [] { return -1; }, noQueue);
    taken = true;
    while (!letGo) std::this_thread::yield();
  });
  while (!taken) std::this_thread::yield();
  EXPECT_NE(fromThread.get(), a.get());
  letGo = true;
  t.join();
  EXPECT_TRUE(fromThread->isCompleted());
  EXPECT_TRUE(fromThread->isSuccess());
  fromThread->wait();
  long objects = internal::completedWorksMade();
  const Work* next = nullptr;
  std::thread([&] { next = q.runOrEnqueueMade(make("u"), [] { return -1; }, noQueue).get(); }).join();
  EXPECT_NE(next, nullptr);
  EXPECT_EQ(internal::completedWorksMade(), objects);  // it took one given back
  EXPECT_EQ(made, 0);
  // A failure or a source rank needs a Work of its own, completed as the op ended.
  auto bad = q.runOrEnqueueMade(make("bad"), []() -> int { throw RemoteError("peer gone"); }, noQueue);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(bad->description(), "bad");
  EXPECT_THROW(bad->wait(), RemoteError);
  EXPECT_TRUE(a->isSuccess());  // the shared one is untouched
  auto src = q.runOrEnqueueMade(make("src"), [] { return 2; }, noQueue);
  EXPECT_EQ(made, 2);
  EXPECT_TRUE(src->isSuccess());
  EXPECT_EQ(src->sourceRank(), 2);
  // While an op is queued, the next one waits in line with a Work of its own,
  // and then runs on whoever waits.
  std::atomic<bool> release{false};
  auto slow = q.enqueue("slow", [&] {
    while (!release.load()) std::this_thread::yield();
    return -1;
  });
  int ran = 0;
  auto queued = q.runOrEnqueueMade(make("queued"), [&] { return ++ran, -1; },
                                   [&] { return [&] { return ++ran, -1; }; });
  EXPECT_EQ(made, 3);
  EXPECT_NE(queued.get(), a.get());
  EXPECT_EQ(queued->description(), "queued");
  release = true;
  queued->wait();
  slow->wait();
  EXPECT_EQ(ran, 1);
}

TEST(OpQueue, WithoutWaiterRunsEveryOpRunsOnTheWorker) {
  internal::OpQueue q("test");
  auto me = std::this_thread::get_id();
  int onWaiter = 0;
  for (int i = 0; i < 200; ++i) {
    auto w = q.enqueue("op", [&] {
      if (std::this_thread::get_id() == me) ++onWaiter;
      return -1;
    });
    w->wait();
  }
  EXPECT_EQ(onWaiter, 0);
}

TEST(OpQueue, AWaitHookOutlivingItsQueueIsHarmless) {
  std::shared_ptr<Work> w;
  {
    internal::OpQueue q("test", true);
    w = q.enqueue("op", [] { return -1; });
  }  // the queue finished the op before it went
  EXPECT_TRUE(w->isCompleted());
  w->wait();
}

TEST(OpQueue, ABoundedWaitDoesNotRunTheOpAndTimesOutOnTime) {
  internal::OpQueue q("test", true);
  for (int i = 0; i < 5; ++i) {
    // Waited on at once, as the waiter would usually win the race to run it.
    auto slow = q.enqueue("slow", [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return -1;
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(slow->wait(std::chrono::milliseconds(20)), Timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250))
        << "a bounded wait ran the 300 ms op itself";
    slow->wait();
  }
}

// The bounded mutex (flight recorder dumps, the diag watch): a timed lock
// gives up after its time while another thread holds it, and gets it once
// that thread lets go; the plain lock waits.
TEST(WorkPool, AWorkFreedOnAThreadIsReusedThereAndTheListIsBounded) {
  if (!internal::workPoolEnabled()) GTEST_SKIP() << "ASan build: Works come from operator new";
  auto a = internal::makeWork("allreduce", 1);
  const void* first = a.get();
  int kept = internal::workBlocksKeptHere();
  a.reset();
  EXPECT_EQ(internal::workBlocksKeptHere(), kept + 1);
  auto b = internal::makeWork("broadcast", 2);
  EXPECT_EQ(b.get(), first);  // the block just freed
  EXPECT_EQ(b->description(), "broadcast #2");
  EXPECT_FALSE(b->isCompleted());
  b->markCompleted();
  b->wait();
  b.reset();
  // Many freed at once: the thread keeps at most kWorkBlocksKept.
  std::vector<std::shared_ptr<Work>> many;
  for (int i = 0; i < 3 * internal::kWorkBlocksKept; ++i) many.push_back(internal::makeWork("op", i));
  many.clear();
  EXPECT_EQ(internal::workBlocksKeptHere(), internal::kWorkBlocksKept);
}

TEST(WorkPool, WorksMadeOnOneThreadAndReleasedOnAnotherStayIntact) {
  // The worker pattern: the caller makes the Work, another thread completes
  // it and drops the last reference; each thread then keeps its own blocks.
  // Threads that exit give theirs back.
  for (int round = 0; round < 20; ++round) {
    long before = internal::workBlocksOutstanding() - internal::workBlocksKeptHere();
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 200; ++i) works.push_back(internal::makeWork("allreduce", uint64_t(i)));
    std::thread t([ws = std::move(works)]() mutable {
      for (size_t i = 0; i < ws.size(); ++i) {
        EXPECT_EQ(ws[i]->description(), "allreduce #" + std::to_string(i));
        ws[i]->markCompleted();
      }
      ws.clear();  // freed here, kept in this thread's list until it exits
      EXPECT_LE(internal::workBlocksKeptHere(), internal::kWorkBlocksKept);
    });
    t.join();
    // Every block the thread freed went back to operator delete, at the
    // latest when it exited (none is lost with the thread's list).
    if (internal::workPoolEnabled()) {
      EXPECT_EQ(internal::workBlocksOutstanding() - internal::workBlocksKeptHere(), before);
    }
    auto w = internal::makeWork("after", uint64_t(round));
    EXPECT_EQ(w->description(), "after #" + std::to_string(round));
  }
}

TEST(BoundedMutex, ATimedLockGivesUpWhileHeldAndSucceedsOnceFree) {
  internal::BoundedMutex m;
  std::atomic<bool> held{false}, release{false};
  std::thread owner([&] {
    std::lock_guard<internal::BoundedMutex> lk(m);
    held = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!held) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(m.try_lock());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.try_lock_for(std::chrono::milliseconds(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  {
    std::unique_lock<internal::BoundedMutex> lk(m, std::chrono::seconds(10));  // waits for the owner
    EXPECT_TRUE(lk.owns_lock());
    EXPECT_FALSE(m.try_lock());
  }
  owner.join();
  later.join();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
  m.lock();
  m.unlock();
}
