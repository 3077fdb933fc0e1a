#include "wait_pool.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace accl {

struct WaitPool::State {
  std::mutex mu;
  std::condition_variable work, done;
  std::deque<std::pair<std::shared_ptr<Work>, std::function<int()>>> tasks;
  int idle = 0, live = 0;
  bool stop = false;
  std::string name;
};

void WaitPool::serve(const std::shared_ptr<State>& st) {
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    if (!st->tasks.empty()) {
      auto task = std::move(st->tasks.front());
      st->tasks.pop_front();
      lk.unlock();
      try {
        int src = task.second();
        task.first->markCompleted(nullptr, src);
      } catch (...) {
        task.first->markCompleted(std::current_exception());
      }
      task = {};  // the op's buffers and Work are released before the next wait
      lk.lock();
      continue;
    }
    if (st->stop) break;
    st->idle++;
    bool got = st->work.wait_for(lk, std::chrono::seconds(5), [&] { return st->stop || !st->tasks.empty(); });
    st->idle--;
    if (!got && st->idle >= 2) break;  // enough others stay idle
  }
  st->live--;
  st->done.notify_all();
}

WaitPool::WaitPool(std::string threadName) : st_(std::make_shared<State>()) { st_->name = std::move(threadName); }

WaitPool::~WaitPool() {
  std::unique_lock<std::mutex> lk(st_->mu);
  st_->stop = true;
  st_->work.notify_all();
  st_->done.wait(lk, [&] { return st_->live == 0; });
}

void WaitPool::submit(std::shared_ptr<Work> work, std::function<int()> fn) {
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->tasks.emplace_back(std::move(work), std::move(fn));
  if (st_->idle > 0) {
    st_->work.notify_one();
    return;
  }
  st_->live++;
  std::thread t([st = st_] { serve(st); });
  pthread_setname_np(t.native_handle(), st_->name.substr(0, 15).c_str());
  t.detach();
}

}  // namespace accl
