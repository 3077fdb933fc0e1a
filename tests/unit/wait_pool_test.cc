// The gloo backend's waits of posted point-to-point ops (backends/gloo/wait_pool.h):
// a thread that waits runs its op's wait itself; an op nobody waits for is
// taken by a pool thread once its grace has passed; none waits behind another.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "accl/errors.h"
#include "accl/work.h"
#include "wait_pool.h"

using namespace accl;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A one-shot flag that a thread can wait on, for at most `limit`.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  void open() {
    std::lock_guard<std::mutex> lk(mu);
    set = true;
    cv.notify_all();
  }
  bool waitFor(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, limit, [&] { return set; });
  }
};

}  // namespace

TEST(WaitPool, AWaitedOpRunsOnTheWaitingThreadAndCompletesItsWork) {
  WaitPool pool("test-wp", 10s);  // no pool thread takes it in the test's time
  auto w = std::make_shared<Work>("recv");
  std::thread::id ranOn;
  pool.submit(w, [&] {
    ranOn = std::this_thread::get_id();
    return 5;
  });
  w->wait();
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_TRUE(w->isSuccess());
  EXPECT_EQ(w->sourceRank(), 5);
}

TEST(WaitPool, AnOpNobodyWaitsForCompletesOnAPoolThreadNoEarlierThanItsGrace) {
  const auto grace = 50ms;
  WaitPool pool("test-wp", grace);
  auto w = std::make_shared<Work>("send");
  std::atomic<bool> called{false};
  std::thread::id ranOn;
  auto t0 = Clock::now();
  Clock::time_point ranAt;
  pool.submit(w, [&] {
    ranAt = Clock::now();
    ranOn = std::this_thread::get_id();
    return -1;
  });
  w->onComplete([&](Work&) { called = true; });
  // A bounded wait does not run the op itself: the pool must.
  w->wait(10000ms);
  EXPECT_TRUE(called.load());
  EXPECT_NE(ranOn, std::this_thread::get_id());
  EXPECT_GE(ranAt - t0, grace);
}

TEST(WaitPool, AWaitedOpThatNeedsAnotherNobodyWaitsForStillCompletes) {
  // A's wait ends only once B's has run; only A is waited for. B must not
  // wait behind A: a pool thread takes it once its grace has passed.
  WaitPool pool("test-wp", 20ms);
  Latch bRan;
  auto a = std::make_shared<Work>("a");
  auto b = std::make_shared<Work>("b");
  pool.submit(a, [&]() -> int {
    if (!bRan.waitFor(10000ms)) throw Timeout("b never ran");
    return -1;
  });
  pool.submit(b, [&] {
    bRan.open();
    return -1;
  });
  a->wait();
  EXPECT_TRUE(a->isSuccess());
  b->wait(10000ms);
  EXPECT_TRUE(b->isSuccess());
}

TEST(WaitPool, OpsThatWaitForEachOtherInTheOrderTheyArePostedAllComplete) {
  // Each op's wait ends only once the op posted after it has run (the last
  // one's at once); nobody waits. On one thread in order this deadlocks;
  // the pool must give each a thread of its own.
  const int n = 6;
  WaitPool pool("test-wp", 1ms);
  std::vector<Latch> ran(n);
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < n; ++i) {
    works.push_back(std::make_shared<Work>("op"));
    pool.submit(works.back(), [&, i]() -> int {
      ran[i].open();
      if (i + 1 < n && !ran[i + 1].waitFor(10000ms)) throw Timeout("the next op never ran");
      return i;
    });
  }
  for (int i = 0; i < n; ++i) {
    works[i]->wait(20000ms);
    EXPECT_TRUE(works[i]->isSuccess()) << "op " << i;
  }
}

TEST(WaitPool, EveryOpRunsExactlyOnceWhetherItsWaiterOrThePoolGetsThereFirst) {
  // A grace of zero: waiters race the pool threads for every op.
  const int n = 2000;
  WaitPool pool("test-wp", 0us);
  std::vector<std::atomic<int>> runs(n);
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < n; ++i) {
    works.push_back(std::make_shared<Work>("op"));
    pool.submit(works.back(), [&, i] {
      runs[i]++;
      return i;
    });
    if (i % 2 == 0) works.back()->wait();
  }
  for (int i = 0; i < n; ++i) {
    works[i]->wait();
    ASSERT_EQ(works[i]->sourceRank(), i);
  }
  for (int i = 0; i < n; ++i) ASSERT_EQ(runs[i].load(), 1) << "op " << i;
}

TEST(WaitPool, AFailedWaitFailsItsWorkWithTheSameError) {
  WaitPool pool("test-wp", 10s);
  auto w = std::make_shared<Work>("recv");
  pool.submit(w, []() -> int { throw RemoteError("peer 1 closed the connection"); });
  try {
    w->wait();
    FAIL() << "wait() returned for a failed op";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("peer 1 closed"), std::string::npos);
  }
  EXPECT_TRUE(w->isCompleted());
  EXPECT_FALSE(w->isSuccess());
}

TEST(WaitPool, DestroyingThePoolRunsTheOpsNobodyTookYet) {
  auto w = std::make_shared<Work>("send");
  std::atomic<bool> ran{false};
  {
    WaitPool pool("test-wp", 1h);
    pool.submit(w, [&] {
      ran = true;
      return -1;
    });
  }
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(w->isSuccess());
  // The Work outlives the pool: a wait now returns at once.
  w->wait();
}
