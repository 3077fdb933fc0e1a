#include <gtest/gtest.h>

#include <thread>

#include "accl/errors.h"
#include "accl/internal/op_queue.h"
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
  try {
    w.wait(std::chrono::milliseconds(20));
    FAIL();
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #7"), std::string::npos);
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
