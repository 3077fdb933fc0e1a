// The network transport's event loop: epoll over the sockets, the listener
// and the verbs completion channel, each registered with the handler that
// serves it (no tags to decode), plus a wake-up eventfd so that another
// thread can interrupt a wait. One thread waits and dispatches.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <string>

namespace accl {
namespace core {
namespace net {

class EventHandler {
 public:
  virtual ~EventHandler() = default;
  // `events`: EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR as epoll reported them.
  virtual void onEvents(uint32_t events) = 0;
};

class EventLoop {
 public:
  // Throws SystemError (naming `where`) if epoll or the eventfd cannot be made.
  explicit EventLoop(std::string where);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Throws SystemError if epoll refuses the descriptor.
  void add(int fd, EventHandler* h, uint32_t events);
  // False (with errno set) if epoll refused; the caller fails what fd serves.
  bool modify(int fd, EventHandler* h, uint32_t events);
  // Before closing fd. A descriptor epoll no longer knows is not an error.
  void remove(int fd);
  // From any thread: the current or next wait() returns at once.
  void wake();
  // Waits up to `timeoutNs` (0: poll) for events; returns how many. To the
  // microsecond where the kernel has epoll_pwait2 (Linux 5.11) and lets the
  // process call it; else rounded up to the next millisecond (epoll_wait).
  int wait(int64_t timeoutNs);
  // Whether wait() has the microsecond timer (false once the kernel or a
  // seccomp filter refused epoll_pwait2).
  bool fineTimeouts() const { return fine_; }
  // Calls the handlers of the events the last wait() returned. A handler may
  // remove (and destroy) itself, but no other handler with events pending.
  void dispatch();

 private:
  class Waker;
  std::string where_;
  int epollFd_ = -1;
  int wakeFd_ = -1;
  Waker* waker_ = nullptr;
  epoll_event events_[64];
  int ready_ = 0;
  bool fine_;
};

}  // namespace net
}  // namespace core
}  // namespace accl
