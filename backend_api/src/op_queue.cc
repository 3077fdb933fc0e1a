#include "accl/internal/op_queue.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace accl {
namespace internal {

struct OpQueue::State {
  // The inline path (an idle group, an op run by its caller) claims the group
  // with one compare-and-swap of `word` and gives it back with one atomic
  // and, without the mutex. Everything else goes through the mutex as before.
  // kSlow is set, under the mutex, exactly while the mutex's side is in use
  // (an op queued or running on the worker or a waiter, or the queue
  // stopping), so an inline claim fails then; kInline is set while an inline
  // op runs, so the worker and the waiters hold back then.
  static constexpr uint32_t kInline = 1, kSlow = 2;
  std::atomic<uint32_t> word{0};
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::shared_ptr<Work>, std::function<int()>>> queue;
  bool stop = false;
  bool busy = false;  // an op is running on the worker or on a waiter

  // Under mu, after busy, queue or stop changed.
  void syncLocked() {
    if (busy || !queue.empty() || stop) word.fetch_or(kSlow, std::memory_order_acq_rel);
    else word.fetch_and(~kSlow, std::memory_order_acq_rel);
  }
  bool inlineRunning() const { return word.load(std::memory_order_acquire) & kInline; }

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
      if (busy || inlineRunning() || queue.empty() || queue.front().first.get() != &w) return;
      item = std::move(queue.front());
      queue.pop_front();
      busy = true;
      syncLocked();
    }
    run(*item.first, item.second);
    bool more;
    {
      std::lock_guard<std::mutex> lk(mu);
      busy = false;
      syncLocked();
      more = !queue.empty() || stop;
    }
    if (more) cv.notify_all();
  }

  void loop() {
    for (;;) {
      std::pair<std::shared_ptr<Work>, std::function<int()>> item;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !busy && !inlineRunning() && (stop || !queue.empty()); });
        if (queue.empty()) return;
        item = std::move(queue.front());
        queue.pop_front();
        busy = true;
        syncLocked();
      }
      run(*item.first, item.second);
      {
        std::lock_guard<std::mutex> lk(mu);
        busy = false;
        syncLocked();
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
    st_->syncLocked();
  }
  st_->cv.notify_all();
  thread_.join();
}

bool OpQueue::startInline() {
  // Fails while anything is queued or running (the word is not 0); acquire:
  // this op sees what the ops before it did.
  uint32_t idle = 0;
  return st_->word.compare_exchange_strong(idle, State::kInline, std::memory_order_acquire,
                                           std::memory_order_relaxed);
}

void OpQueue::finishInline() {
  uint32_t was = st_->word.fetch_and(~State::kInline, std::memory_order_acq_rel);
  if (!(was & State::kSlow)) return;
  // Ops were queued meanwhile (or the queue stops): the worker and the
  // waiters held back for this op. Taking the mutex before the wake-up means
  // a thread that saw this op still running is waiting by now, not about to.
  { std::lock_guard<std::mutex> lk(st_->mu); }
  st_->cv.notify_all();
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
    st_->syncLocked();
  }
  st_->cv.notify_one();
}

}  // namespace internal
}  // namespace accl
