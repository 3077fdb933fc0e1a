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

std::shared_ptr<Work> OpQueue::enqueue(std::string description, std::function<int()> fn) {
  auto work = std::make_shared<Work>(std::move(description));
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.emplace_back(work, std::move(fn));
  }
  cv_.notify_one();
  return work;
}

void OpQueue::loop() {
  for (;;) {
    std::pair<std::shared_ptr<Work>, std::function<int()>> item;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      int src = item.second();
      item.first->markCompleted(nullptr, src);
    } catch (...) {
      item.first->markCompleted(std::current_exception());
    }
  }
}

}  // namespace internal
}  // namespace accl
