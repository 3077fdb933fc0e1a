#include "accl/internal/op_queue.h"

#include <pthread.h>

namespace accl {
namespace internal {

struct OpQueue::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::shared_ptr<Work>, std::function<int()>>> queue;
  bool stop = false;
  bool busy = false;  // an op is running (on the worker, inline or on a waiter)

  static void run(Work& w, const std::function<int()>& fn) {
    try {
      int src = fn();
      w.markCompleted(nullptr, src);
    } catch (...) {
      w.markCompleted(std::current_exception());
    }
  }

  // Runs `w`'s op on this thread if it is next and nothing runs.
  void runIfNext(Work& w) {
    std::pair<std::shared_ptr<Work>, std::function<int()>> item;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (busy || queue.empty() || queue.front().first.get() != &w) return;
      item = std::move(queue.front());
      queue.pop_front();
      busy = true;
    }
    run(*item.first, item.second);
    bool more;
    {
      std::lock_guard<std::mutex> lk(mu);
      busy = false;
      more = !queue.empty() || stop;
    }
    if (more) cv.notify_all();
  }

  void loop() {
    for (;;) {
      std::pair<std::shared_ptr<Work>, std::function<int()>> item;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return (stop && !busy) || (!busy && !queue.empty()); });
        if (queue.empty()) return;
        item = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      run(*item.first, item.second);
      {
        std::lock_guard<std::mutex> lk(mu);
        busy = false;
      }
    }
  }
};

OpQueue::OpQueue(std::string name, bool waiterRuns)
    : name_(std::move(name)), waiterRuns_(waiterRuns), st_(std::make_shared<State>()) {
  thread_ = std::thread([st = st_] { st->loop(); });
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->stop = true;
  }
  st_->cv.notify_all();
  thread_.join();
}

bool OpQueue::startInline() {
  std::lock_guard<std::mutex> lk(st_->mu);
  if (st_->busy || !st_->queue.empty()) return false;
  st_->busy = true;
  return true;
}

void OpQueue::finishInline() {
  bool queued;
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->busy = false;
    queued = !st_->queue.empty() || st_->stop;
  }
  if (queued) st_->cv.notify_all();  // ops queued meanwhile may start
}

void OpQueue::push(const std::shared_ptr<Work>& work, std::function<int()> fn) {
  if (waiterRuns_) {
    std::weak_ptr<State> ws = st_;
    work->setWaitHook([ws](Work& w) {
      if (auto st = ws.lock()) st->runIfNext(w);
    });
  }
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->queue.emplace_back(work, std::move(fn));
  }
  st_->cv.notify_one();
}

}  // namespace internal
}  // namespace accl
