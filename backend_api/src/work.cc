#include "accl/work.h"

#include <cstdint>

#include "accl/trace.h"

#include "accl/errors.h"

namespace accl {

Work::Work(std::string description) : description_(std::move(description)) {}
Work::Work(const char* what, uint64_t seq) : what_(what), seq_(seq) {}
Work::~Work() = default;

std::string Work::description() const {
  if (what_) return std::string(what_) + " #" + std::to_string(seq_);
  return description_;
}

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
  // Only an unbounded wait may run the op itself: a bounded one must be able
  // to return when its time is up while the op goes on.
  if (timeout.count() < 0 && !done_.load(std::memory_order_acquire) && waitHook_) waitHook_(*this);
  if (done_.load(std::memory_order_acquire)) {  // completed: error_ is final
    if (error_) std::rethrow_exception(error_);
    return;
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout.count() < 0) {
    cv_.wait(lk, [&] { return callbacksDone_; });
  } else if (!cv_.wait_for(lk, timeout, [&] { return callbacksDone_; })) {
    std::string d = description();
    throw Timeout("accl: " + (d.empty() ? std::string("operation") : d) +
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

void Work::setTrace(const std::shared_ptr<FlightRecorder>& recorder, uint64_t id) {
  // Completed already (an op run while it was issued): error_ no longer
  // changes, and nothing needs the lock or a reference to the recorder.
  if (done_.load(std::memory_order_acquire)) {
    recorder->finished(id, error_);
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (completed_) {
    recorder->finished(id, error_);
    return;
  }
  trace_ = recorder;
  traceId_ = id;
}

void Work::completeUnshared(std::exception_ptr error, int sourceRank) {
  if (completed_) return;
  completed_ = true;
  error_ = std::move(error);
  sourceRank_ = sourceRank;
  callbacksDone_ = true;
  done_.store(true, std::memory_order_release);
}

void Work::markCompleted(std::exception_ptr error, int sourceRank) {
  std::vector<std::function<void(Work&)>> cbs;
  std::shared_ptr<FlightRecorder> trace;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (completed_) return;
    trace.swap(trace_);
    completed_ = true;
    error_ = std::move(error);
    sourceRank_ = sourceRank;
    cbs.swap(callbacks_);
    if (trace) trace->finished(traceId_, error_);
    if (cbs.empty()) {
      callbacksDone_ = true;
      done_.store(true, std::memory_order_release);
    }
  }
  if (!cbs.empty()) {
    // Callbacks run before waiters wake: after wait() returns, they have run.
    for (auto& cb : cbs) cb(*this);
    std::lock_guard<std::mutex> lk(mu_);
    callbacksDone_ = true;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace accl
