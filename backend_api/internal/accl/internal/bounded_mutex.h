// A mutex whose lock can wait a bounded time (TimedLockable: works with
// std::lock_guard and with std::unique_lock's timed constructor), built on a
// std::mutex and a condition variable. std::timed_mutex would do the same,
// but its timed lock is glibc's pthread_mutex_clocklock, which the thread
// sanitizer of GCC 12 does not see: it then reports every unlock as the
// unlock of an unlocked mutex and stops the process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace accl {
namespace internal {

class BoundedMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> lk(mu_);
    free_.wait(lk, [this] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard<std::mutex> lk(mu_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <typename Rep, typename Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_until(std::chrono::steady_clock::now() + d);
  }
  template <typename Clock, typename Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    // The inner mutex is taken without waiting on it unbounded either: a
    // child forked while another thread held it for those few instructions
    // would wait forever.
    std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
    while (!lk.owns_lock()) {
      if (Clock::now() >= t) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lk.try_lock();
    }
    if (!free_.wait_until(lk, t, [this] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      held_ = false;
    }
    free_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable free_;
  bool held_ = false;
};

}  // namespace internal
}  // namespace accl
