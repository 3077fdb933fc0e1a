#include "wait_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace accl {

using Clock = std::chrono::steady_clock;

// One posted op's wait: run once, by a pool thread or by a thread that waits
// for the op, whichever claims it first.
struct WaitPool::Task {
  std::shared_ptr<Work> work;
  std::function<int()> fn;
  Clock::time_point due;  // a pool thread takes it from then on
  std::atomic<bool> taken{false};

  bool claim() { return !taken.exchange(true, std::memory_order_acq_rel); }
  void run() {
    try {
      int src = fn();
      work->markCompleted(nullptr, src);
    } catch (...) {
      work->markCompleted(std::current_exception());
    }
  }
};

struct WaitPool::State {
  std::mutex mu;
  std::condition_variable work, done;
  std::deque<std::shared_ptr<Task>> tasks;  // in order of `due`
  int idle = 0, live = 0;
  bool timer = false;  // an idle thread sleeps until the first task is due
  bool stop = false;
  std::string name;
  std::chrono::microseconds grace;
};

void WaitPool::spawn(const std::shared_ptr<State>& st) {
  st->live++;
  std::thread t([st] { serve(st); });
  pthread_setname_np(t.native_handle(), st->name.substr(0, 15).c_str());
  t.detach();
}

void WaitPool::serve(const std::shared_ptr<State>& st) {
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    while (!st->tasks.empty() && st->tasks.front()->taken.load(std::memory_order_acquire)) st->tasks.pop_front();
    if (!st->tasks.empty()) {
      auto due = st->tasks.front()->due;
      if (st->stop || Clock::now() >= due) {
        auto task = std::move(st->tasks.front());
        st->tasks.pop_front();
        // The tasks behind this one need a thread to time them while this
        // one waits (its wait may last until its op's deadline).
        if (!st->tasks.empty() && !st->timer) {
          if (st->idle > 0) st->work.notify_one();
          else spawn(st);
        }
        lk.unlock();
        if (task->claim()) task->run();
        task.reset();  // the op's buffers and Work are released before the next wait
        lk.lock();
        continue;
      }
      if (!st->timer) {
        st->timer = true;
        st->idle++;
        st->work.wait_until(lk, due);
        st->idle--;
        st->timer = false;
        continue;
      }
    }
    if (st->stop && st->tasks.empty()) break;
    // Idle: another thread times the queue, or it is empty.
    st->idle++;
    bool got = st->work.wait_for(lk, std::chrono::seconds(5), [&] {
      return st->stop || (!st->tasks.empty() && !st->timer);
    });
    st->idle--;
    if (!got && st->idle >= 2) break;  // enough others stay idle
  }
  st->live--;
  st->done.notify_all();
}

WaitPool::WaitPool(std::string threadName, std::chrono::microseconds grace) : st_(std::make_shared<State>()) {
  st_->name = std::move(threadName);
  st_->grace = grace;
}

WaitPool::~WaitPool() {
  std::unique_lock<std::mutex> lk(st_->mu);
  st_->stop = true;
  st_->work.notify_all();
  // A task nobody took yet gets a thread now (each ends by its op's deadline).
  if (!st_->tasks.empty() && st_->live == 0) spawn(st_);
  st_->done.wait(lk, [&] { return st_->live == 0; });
}

void WaitPool::submit(std::shared_ptr<Work> work, std::function<int()> fn) {
  auto task = std::make_shared<Task>();
  // The hook holds the task and the pool weakly: the Work holds the hook,
  // the task holds the Work.
  work->setWaitHook([weakTask = std::weak_ptr<Task>(task), weakState = std::weak_ptr<State>(st_)](Work&) {
    auto t = weakTask.lock();
    if (!t || !t->claim()) return;
    if (auto st = weakState.lock()) {
      std::lock_guard<std::mutex> lk(st->mu);
      auto it = std::find(st->tasks.begin(), st->tasks.end(), t);
      if (it != st->tasks.end()) st->tasks.erase(it);
    }
    t->run();
  });
  task->work = std::move(work);
  task->fn = std::move(fn);
  task->due = Clock::now() + st_->grace;
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->tasks.push_back(std::move(task));
  // A thread that times the queue wakes by this task's due time (the tasks
  // before it are due no later): nothing to wake. Else an idle thread starts
  // timing it, or a new one.
  if (st_->timer) return;
  if (st_->idle > 0) {
    st_->work.notify_one();
    return;
  }
  spawn(st_);
}

}  // namespace accl
