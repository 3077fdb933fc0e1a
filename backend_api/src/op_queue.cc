#include "accl/internal/op_queue.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>

namespace accl {
namespace internal {

namespace {

int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Both descriptors count events in one 8-byte word: one read resets it.
void drain(int fd) {
  uint64_t n;
  (void)!read(fd, &n, sizeof n);
}

}  // namespace

// The worker sleeps in poll() on two descriptors: an eventfd that wakes it
// at once, and a timer that wakes it when the op at the front of the queue
// is due (its workerDelay has passed).
struct OpQueue::State {
  struct Item {
    std::shared_ptr<Work> work;
    std::function<int()> fn;
    int64_t dueNs;  // the worker takes it from then on; 0: at once
  };
  std::mutex mu;
  std::deque<Item> queue;
  bool stop = false;
  bool busy = false;      // an op is running (on the worker, inline or on a waiter)
  bool sleeping = false;  // the worker is in poll() or about to be: wake() must write
  int64_t timerNs = 0;    // when the armed timer fires; 0: disarmed
  int wakeFd = -1, timerFd = -1;

  State() {
    wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    timerFd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (wakeFd < 0 || timerFd < 0) {
      int e = errno;
      if (wakeFd >= 0) close(wakeFd);
      if (timerFd >= 0) close(timerFd);
      throw std::runtime_error(std::string("accl: cannot create the op queue's wake-up descriptors: ") +
                               std::strerror(e));
    }
  }
  ~State() {
    close(wakeFd);
    close(timerFd);
  }

  // All with mu held.
  void wakeLocked() {
    if (!sleeping) return;  // the worker checks the queue before it sleeps again
    sleeping = false;
    uint64_t one = 1;
    (void)!write(wakeFd, &one, sizeof one);
  }
  void setTimerLocked(int64_t ns) {
    itimerspec t{};
    t.it_value.tv_sec = ns / 1000000000LL;
    t.it_value.tv_nsec = ns % 1000000000LL;
    timerfd_settime(timerFd, TFD_TIMER_ABSTIME, &t, nullptr);  // ns == 0 disarms
    timerNs = ns;
  }
  // What the worker needs now that the queue or `busy` changed: nothing
  // while an op runs (its end calls this again); a wake-up for an op that is
  // due or for the stop; the timer for an op due later; no timer when
  // nothing is queued.
  void kickLocked() {
    if (stop) return wakeLocked();
    if (queue.empty()) {
      if (timerNs) setTimerLocked(0);
      return;
    }
    if (busy) return;
    int64_t due = queue.front().dueNs;
    if (due == 0 || due <= monotonicNs()) return wakeLocked();
    if (timerNs == 0 || timerNs > due) setTimerLocked(due);
  }

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
    Item item;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (busy || queue.empty() || queue.front().work.get() != &w) return;
      item = std::move(queue.front());
      queue.pop_front();
      busy = true;
      if (queue.empty() && timerNs) setTimerLocked(0);  // its timer: the worker need not wake
    }
    run(*item.work, item.fn);
    std::lock_guard<std::mutex> lk(mu);
    busy = false;
    kickLocked();
  }

  void loop() {
    pollfd fds[2] = {{wakeFd, POLLIN, 0}, {timerFd, POLLIN, 0}};
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lk(mu);
        for (;;) {
          if (!busy && !queue.empty()) {
            int64_t due = queue.front().dueNs;
            if (stop || due == 0 || due <= monotonicNs()) break;
            if (timerNs == 0 || timerNs > due) setTimerLocked(due);
          } else if (stop && !busy) {
            return;
          }
          sleeping = true;
          lk.unlock();
          fds[0].revents = fds[1].revents = 0;
          while (poll(fds, 2, -1) < 0 && errno == EINTR) {
          }
          if (fds[0].revents) drain(wakeFd);
          if (fds[1].revents) drain(timerFd);
          lk.lock();
          sleeping = false;
          if (timerNs && timerNs <= monotonicNs()) timerNs = 0;  // it fired
        }
        item = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      run(*item.work, item.fn);
      std::lock_guard<std::mutex> lk(mu);
      busy = false;
      if (queue.empty() && timerNs) setTimerLocked(0);
    }
  }
};

OpQueue::OpQueue(std::string name, bool waiterRuns, std::chrono::microseconds workerDelay)
    : name_(std::move(name)),
      waiterRuns_(waiterRuns),
      delayNs_(waiterRuns ? std::chrono::duration_cast<std::chrono::nanoseconds>(workerDelay).count() : 0),
      st_(std::make_shared<State>()) {
  thread_ = std::thread([st = st_] { st->loop(); });
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->stop = true;
    st_->kickLocked();
  }
  thread_.join();
}

bool OpQueue::startInline() {
  std::lock_guard<std::mutex> lk(st_->mu);
  if (st_->busy || !st_->queue.empty()) return false;
  st_->busy = true;
  return true;
}

void OpQueue::finishInline() {
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->busy = false;
  st_->kickLocked();  // ops queued meanwhile may start
}

void OpQueue::push(const std::shared_ptr<Work>& work, std::function<int()> fn) {
  if (waiterRuns_) {
    std::weak_ptr<State> ws = st_;
    work->setWaitHook([ws](Work& w) {
      if (auto st = ws.lock()) st->runIfNext(w);
    });
  }
  int64_t due = delayNs_ > 0 ? monotonicNs() + delayNs_ : 0;
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->queue.push_back({work, std::move(fn), due});
  if (st_->queue.size() == 1) st_->kickLocked();  // otherwise the op before it kicks
}

}  // namespace internal
}  // namespace accl
