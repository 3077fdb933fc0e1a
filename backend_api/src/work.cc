#include "accl/work.h"

#include "accl/errors.h"

namespace accl {

Work::Work(std::string description) : description_(std::move(description)) {}
Work::~Work() = default;

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_ && !error_;
}

bool Work::test() {
  std::lock_guard<std::mutex> lk(mu_);
  if (completed_ && error_) std::rethrow_exception(error_);
  return completed_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout.count() < 0) {
    cv_.wait(lk, [&] { return callbacksDone_; });
  } else if (!cv_.wait_for(lk, timeout, [&] { return callbacksDone_; })) {
    throw Timeout("accl: " + (description_.empty() ? std::string("operation") : description_) +
                  " did not complete within " + std::to_string(timeout.count()) +
                  " ms of Work::wait()");
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void Work::onComplete(std::function<void(Work&)> cb) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(cb));
      return;
    }
  }
  cb(*this);
}

int Work::sourceRank() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sourceRank_;
}

void Work::markCompleted(std::exception_ptr error, int sourceRank) {
  std::vector<std::function<void(Work&)>> cbs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (completed_) return;
    completed_ = true;
    error_ = std::move(error);
    sourceRank_ = sourceRank;
    cbs.swap(callbacks_);
  }
  // Callbacks run before waiters wake: after wait() returns, they have run.
  for (auto& cb : cbs) cb(*this);
  {
    std::lock_guard<std::mutex> lk(mu_);
    callbacksDone_ = true;
  }
  cv_.notify_all();
}

}  // namespace accl
