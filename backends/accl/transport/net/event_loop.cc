#include "transport/net/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "accl/errors.h"
#include "accl/logging.h"

#if defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 35)
#define ACCL_HAVE_EPOLL_PWAIT2 1
#endif
#endif
#ifndef ACCL_HAVE_EPOLL_PWAIT2
#define ACCL_HAVE_EPOLL_PWAIT2 0
#endif

namespace accl {
namespace core {
namespace net {

class EventLoop::Waker : public EventHandler {
 public:
  explicit Waker(int fd) : fd_(fd) {}
  void onEvents(uint32_t) override {
    uint64_t v;
    while (read(fd_, &v, sizeof(v)) > 0) {
    }
  }

 private:
  int fd_;
};

EventLoop::EventLoop(std::string where) : where_(std::move(where)), fine_(ACCL_HAVE_EPOLL_PWAIT2) {
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epollFd_ < 0) throw SystemError(where_ + ": " + errnoMessage("epoll_create1", errno));
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    int e = errno;
    ::close(epollFd_);
    throw SystemError(where_ + ": " + errnoMessage("eventfd", e));
  }
  waker_ = new Waker(wakeFd_);
  try {
    add(wakeFd_, waker_, EPOLLIN);
  } catch (...) {
    delete waker_;
    ::close(wakeFd_);
    ::close(epollFd_);
    throw;
  }
}

EventLoop::~EventLoop() {
  ::close(wakeFd_);
  ::close(epollFd_);
  delete waker_;
}

void EventLoop::add(int fd, EventHandler* h, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  if (epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw SystemError(where_ + ": " + errnoMessage("epoll_ctl(ADD)", errno));
}

bool EventLoop::modify(int fd, EventHandler* h, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  return epoll_ctl(epollFd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::remove(int fd) {
  if (epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr) != 0 && errno != ENOENT && errno != EBADF)
    ACCL_WARN("NET", where_ << ": " << errnoMessage("epoll_ctl(DEL)", errno));
}

void EventLoop::wake() {
  uint64_t one = 1;
  // The only failure of a write to a non-blocking eventfd is EAGAIN: the
  // counter is at its maximum, so a wake-up is pending already.
  if (write(wakeFd_, &one, sizeof(one)) < 0 && errno != EAGAIN)
    ACCL_WARN("NET", where_ << ": " << errnoMessage("waking the progress thread", errno));
}

int EventLoop::wait(int64_t timeoutNs) {
  if (timeoutNs < 0) timeoutNs = 0;
  int n = -1;
  bool done = false;
#if ACCL_HAVE_EPOLL_PWAIT2
  // The loop's deadlines (a message left in a socket or a sender's memory
  // for 20 us - 2 ms) fall between milliseconds.
  if (fine_ && timeoutNs > 0) {
    timespec ts{static_cast<time_t>(timeoutNs / 1000000000), static_cast<long>(timeoutNs % 1000000000)};
    n = epoll_pwait2(epollFd_, events_, 64, &ts, nullptr);
    // Not in this kernel (ENOSYS), or refused by a container's seccomp
    // filter (EPERM): milliseconds from now on.
    if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
      fine_ = false;
      ACCL_INFO("NET", where_ << ": epoll_pwait2 unavailable (" << errnoMessage("epoll_pwait2", errno)
                              << "): the progress thread's timers round up to milliseconds");
    } else {
      done = true;
    }
  }
#endif
  if (!done) {
    int ms = static_cast<int>(std::min<int64_t>((timeoutNs + 999999) / 1000000, 1 << 30));
    n = epoll_wait(epollFd_, events_, 64, ms);
  }
  ready_ = n < 0 ? 0 : n;  // EINTR: nothing ready; the caller loops
  return ready_;
}

void EventLoop::dispatch() {
  int n = ready_;
  ready_ = 0;
  for (int i = 0; i < n; ++i) static_cast<EventHandler*>(events_[i].data.ptr)->onEvents(events_[i].events);
}

}  // namespace net
}  // namespace core
}  // namespace accl
