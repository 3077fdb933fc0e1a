// The network transport's event loop: its timeouts, wake-ups and dispatch.
#include "transport/net/event_loop.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace accl {
namespace core {
namespace net {
namespace {

using Clock = std::chrono::steady_clock;

struct Counting : EventHandler {
  int calls = 0;
  uint32_t last = 0;
  void onEvents(uint32_t events) override {
    ++calls;
    last = events;
  }
};

int64_t elapsedNs(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// The progress thread sleeps until the first deadline of a message left in a
// socket or in its sender's memory (20 us - 2 ms): a timeout rounded up to a
// millisecond held such a message up to a millisecond past it.
TEST(EventLoop, AWaitEndsAtItsTimeoutNotAtTheNextMillisecond) {
  EventLoop loop("test");
  EXPECT_EQ(loop.wait(1000), 0);  // learns whether the kernel has the fine timer
  if (!loop.fineTimeouts())
    GTEST_SKIP() << "epoll_pwait2 is not available here (kernel before 5.11, or a seccomp filter refuses it): "
                    "the loop's timeouts round up to milliseconds";
  constexpr int64_t kWait = 200000;  // 200 us
  int64_t fastest = INT64_MAX;
  for (int i = 0; i < 20; ++i) {
    auto t0 = Clock::now();
    EXPECT_EQ(loop.wait(kWait), 0);
    int64_t took = elapsedNs(t0);
    EXPECT_GE(took, kWait) << "a wait ended before its timeout with nothing ready";
    fastest = std::min(fastest, took);
  }
  // Rounded up to milliseconds, not one of the 20 would end before 1 ms.
  EXPECT_LT(fastest, 900000) << "the fastest of 20 waits of 200 us took " << fastest << " ns";
}

TEST(EventLoop, AZeroTimeoutPollsAndANegativeOneIsTakenAsZero) {
  EventLoop loop("test");
  auto t0 = Clock::now();
  EXPECT_EQ(loop.wait(0), 0);
  EXPECT_EQ(loop.wait(-5), 0);
  EXPECT_LT(elapsedNs(t0), int64_t(500) * 1000000);
}

TEST(EventLoop, AWakeFromAnotherThreadEndsALongWait) {
  EventLoop loop("test");
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    loop.wake();
  });
  auto t0 = Clock::now();
  int n = loop.wait(int64_t(30) * 1000000000);
  waker.join();
  EXPECT_EQ(n, 1);  // the wake-up's eventfd
  EXPECT_LT(elapsedNs(t0), int64_t(20) * 1000000000);
  loop.dispatch();  // drains the eventfd: the next wait times out
  EXPECT_EQ(loop.wait(1000000), 0);
}

TEST(EventLoop, ADescriptorThatBecomesReadableGoesToItsHandler) {
  EventLoop loop("test");
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  Counting h;
  loop.add(p[0], &h, EPOLLIN);
  EXPECT_EQ(loop.wait(1000000), 0);
  ASSERT_EQ(write(p[1], "x", 1), 1);
  ASSERT_EQ(loop.wait(int64_t(5) * 1000000000), 1);
  loop.dispatch();
  EXPECT_EQ(h.calls, 1);
  EXPECT_TRUE(h.last & EPOLLIN);
  loop.remove(p[0]);
  EXPECT_EQ(loop.wait(1000000), 0);  // removed: no more events, though still readable
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace net
}  // namespace core
}  // namespace accl
