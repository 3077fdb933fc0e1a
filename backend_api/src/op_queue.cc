#include "accl/internal/op_queue.h"

#include <pthread.h>

namespace accl {
namespace internal {

OpQueue::OpQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

namespace {
void runInto(Work& w, const std::function<int()>& fn) {
  try {
    int src = fn();
    w.markCompleted(nullptr, src);
  } catch (...) {
    w.markCompleted(std::current_exception());
  }
}
}  // namespace

bool OpQueue::startInline() {
  std::lock_guard<std::mutex> lk(mu_);
  if (busy_ || !queue_.empty()) return false;
  busy_ = true;
  return true;
}

void OpQueue::finishInline() {
  bool queued;
  {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = false;
    queued = !queue_.empty();
  }
  if (queued) cv_.notify_one();  // ops queued meanwhile may start
}

void OpQueue::push(const std::shared_ptr<Work>& work, std::function<int()> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.emplace_back(work, std::move(fn));
  }
  cv_.notify_one();
}

void OpQueue::loop() {
  for (;;) {
    std::pair<std::shared_ptr<Work>, std::function<int()>> item;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (stop_ && !busy_) || (!busy_ && !queue_.empty()); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    runInto(*item.first, item.second);
    {
      std::lock_guard<std::mutex> lk(mu_);
      busy_ = false;
    }
  }
}

}  // namespace internal
}  // namespace accl
