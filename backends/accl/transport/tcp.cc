#include "transport/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/logging.h"
#include "accl/process_group.h"

namespace accl {
namespace core {

namespace {
constexpr size_t kMaxFrameBytes = 4u << 20;   // chunks of collective messages
constexpr size_t kSplitBytes = 256u << 10;    // messages at least this big use every stream
constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr auto kQueryGrace = std::chrono::milliseconds(1500);

std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[64] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void setBuffers(int fd) {
  int sz = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}
}  // namespace

struct TcpTransport::Request {
  bool isSend = false;
  int peer = -1;  // -1: any source (tagged receive)
  uint64_t key = 0;
  int tag = 0;
  char* buf = nullptr;
  size_t len = 0;
  size_t pending = 0;  // frames (send) or bytes (receive) still to go
  bool done = false;
  int source = -1;
  int errorKind = 0;  // 1 remote, 2 mismatch
  std::string error;
};

struct TcpTransport::Unexpected {
  int peer = -1;
  uint64_t key = 0;
  OpDesc desc{};
  std::vector<char> data;
  size_t got = 0;
  std::shared_ptr<Request> waiter;
  bool tagged = false;
};

struct TcpTransport::OutFrame {
  FrameHeader hdr{};
  const char* data = nullptr;
  size_t sent = 0;  // of header + payload
  std::shared_ptr<Request> req;
  std::shared_ptr<std::string> owned;  // payload owned by the frame (abort reason)
};

struct TcpTransport::Conn {
  int fd = -1;
  int peer = -1;
  int stream = 0;
  bool closed = false;
  std::deque<OutFrame> out;
  bool armedOut = false;
  // receive state
  FrameHeader hdr{};
  size_t hdrGot = 0;
  char* dest = nullptr;  // nullptr with left > 0: discard
  size_t left = 0;
  size_t chunk = 0;
  std::shared_ptr<Request> rreq;
  std::shared_ptr<Unexpected> rux;
  std::string abortText;
  bool readingAbort = false;
  // A point-to-point message that spans several frames (verbs chunks): the
  // frames after the first continue it.
  std::shared_ptr<Request> tagReq;
  std::shared_ptr<Unexpected> tagUx;
  bool tagDiscard = false;
};

TcpTransport::TcpTransport(Options o) : o_(std::move(o)) {
  auto deadline = Clock::now() + o_.timeout;
  auto ifs = internal::selectInterfaces(o_.ifSpec);
  if (ifs.empty())
    throw InvalidArgument(o_.where + ": no network interface matches ACCL_SOCKET_IFNAME='" +
                          o_.ifSpec + "'; accepted: prefixes of up interfaces with an address, ^ to exclude, = for exact names");
  ifName_ = ifs[0].name;
  address_ = ifs[0].address;
  listenFd_ = internal::listenOn(address_, 0, &port_);
  conns_.resize(o_.size);
  peerFailed_.resize(o_.size);
  aborts_.resize(o_.size);
  replies_.resize(o_.size);
  o_.store->set("tcp/" + std::to_string(o_.rank), toBytes(address_ + " " + std::to_string(port_)));
  try {
    connectMesh(deadline);
  } catch (...) {
    for (auto& v : conns_)
      for (auto& c : v)
        if (c && c->fd >= 0) ::close(c->fd);
    ::close(listenFd_);
    throw;
  }
  if (o_.ibWanted) setupIb(deadline);
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = ~0ull;
  epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &ev);
  if (ib_) {
    ev.data.u64 = ~2ull;
    epoll_ctl(epollFd_, EPOLL_CTL_ADD, ib_->eventFd(), &ev);
  }
  internal::setNonBlocking(listenFd_, true);
  ev.data.u64 = ~1ull;
  epoll_ctl(epollFd_, EPOLL_CTL_ADD, listenFd_, &ev);
  for (int p = 0; p < o_.size; ++p)
    for (size_t s = 0; s < conns_[p].size(); ++s) {
      Conn& c = *conns_[p][s];
      internal::setNonBlocking(c.fd, true);
      ev.events = EPOLLIN;
      ev.data.u64 = (static_cast<uint64_t>(p) << 8) | s;
      epoll_ctl(epollFd_, EPOLL_CTL_ADD, c.fd, &ev);
    }
  thread_ = std::thread([this] { progressLoop(); });
  pthread_setname_np(thread_.native_handle(), "accl-tcp");
}

TcpTransport::~TcpTransport() {
  stop_ = true;
  uint64_t one = 1;
  if (write(wakeFd_, &one, sizeof(one)) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  if (ib_) {
    ib_->drain(std::chrono::seconds(1));  // writes in flight land before their QPs go
    ib_.reset();
  }
  // Orderly close: half-close, then drain what peers still send, so that no
  // connection is reset with data in flight.
  std::vector<int> fds;
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && !c->closed) {
        shutdown(c->fd, SHUT_WR);
        fds.push_back(c->fd);
      }
  auto until = Clock::now() + std::chrono::seconds(2);
  std::vector<char> sink(1 << 16);
  while (!fds.empty() && Clock::now() < until) {
    std::vector<pollfd> pf;
    for (int fd : fds) pf.push_back({fd, POLLIN, 0});
    if (poll(pf.data(), pf.size(), 50) <= 0) continue;
    std::vector<int> keep;
    for (auto& p : pf) {
      if (p.revents == 0) {
        keep.push_back(p.fd);
        continue;
      }
      ssize_t n = ::recv(p.fd, sink.data(), sink.size(), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) keep.push_back(p.fd);
    }
    fds.swap(keep);
  }
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && !c->closed) ::close(c->fd);
  for (auto& kv : pendingHello_) ::close(kv.first);
  if (listenFd_ >= 0) ::close(listenFd_);
  if (epollFd_ >= 0) ::close(epollFd_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

// ---------------------------------------------------------------- setup

bool TcpTransport::checkHello(int fd, const std::string& from, Clock::time_point deadline,
                              int* peer, int* stream) {
  Hello h{};
  std::string why;
  try {
    internal::recvAll(fd, &h, sizeof(h), deadline, from);
    why = validateHello(h, o_.token, o_.rank, o_.size, o_.nstreams.data());
    if (why.empty() && conns_[h.rank].size() > h.stream && conns_[h.rank][h.stream])
      why = "duplicate connection for rank " + std::to_string(h.rank);
    if (why.empty()) {
      std::string id(h.idLen, '\0');
      internal::recvAll(fd, &id[0], id.size(), deadline, from);
    }
  } catch (const Error& e) {
    why = std::string("handshake failed: ") + e.what();
  }
  if (!why.empty()) {
    ++dropped_;
    ACCL_WARN("NET", o_.where << ": dropped connection from " << from << ": " << why);
    return false;
  }
  *peer = h.rank;
  *stream = h.stream;
  return true;
}

void TcpTransport::connectMesh(Clock::time_point deadline) {
  std::string hostId = "rank" + std::to_string(o_.rank);
  int expected = 0;
  for (int p = 0; p < o_.size; ++p) {
    if (p == o_.rank) continue;
    int ns = std::max(1, o_.nstreams[p]);
    conns_[p].resize(ns);
    if (p > o_.rank) {
      expected += ns;
      continue;
    }
    auto v = toString(o_.store->get("tcp/" + std::to_string(p)));
    auto sp = v.rfind(' ');
    std::string host = v.substr(0, sp);
    int port = std::stoi(v.substr(sp + 1));
    for (int s = 0; s < ns; ++s) {
      int fd = internal::connectTo(host, port, deadline);
      internal::setNoDelay(fd);
      setBuffers(fd);
      Hello h{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Hello),
              static_cast<uint8_t>(s), o_.token, o_.rank, static_cast<uint32_t>(hostId.size())};
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->peer = p;
      c->stream = s;
      conns_[p][s] = std::move(c);
      internal::sendAll(fd, &h, sizeof(h), deadline, "rank " + std::to_string(p));
      internal::sendAll(fd, hostId.data(), hostId.size(), deadline, "rank " + std::to_string(p));
    }
  }
  while (expected > 0) {
    pollfd pf{listenFd_, POLLIN, 0};
    int left = internal::msLeft(deadline);
    if (left <= 0) {
      std::string missing;
      for (int p = o_.rank + 1; p < o_.size; ++p)
        for (auto& c : conns_[p])
          if (!c) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(p);
            break;
          }
      throw Timeout(o_.where + ": timed out connecting the group; no connection from ranks " + missing);
    }
    if (poll(&pf, 1, std::min(left, 1000)) <= 0) continue;
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string from = peerName(fd);
    int peer = -1, stream = -1;
    auto helloDeadline = std::min(deadline, Clock::now() + kHelloTimeout);
    if (!checkHello(fd, from, helloDeadline, &peer, &stream)) {
      ::close(fd);
      continue;
    }
    internal::setNoDelay(fd);
    setBuffers(fd);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = peer;
    c->stream = stream;
    conns_[peer][stream] = std::move(c);
    --expected;
  }
}

// ---------------------------------------------------------------- progress

void TcpTransport::progressLoop() {
  epoll_event evs[64];
  // With verbs, completions are polled while they keep coming (and a short
  // while after), then the loop blocks on the completion channel.
  constexpr auto kSpin = std::chrono::microseconds(200);
  auto lastIb = Clock::now();
  int waitMs = 50;
  while (!stop_) {
    int n = epoll_wait(epollFd_, evs, 64, waitMs);
    std::vector<std::function<void()>> completions;
    std::unique_lock<std::mutex> lk(mu_);
    for (int i = 0; i < n; ++i) {
      uint64_t id = evs[i].data.u64;
      if (id == ~2ull) {
        ib_->onEvent();
        continue;
      }
      if (id == ~0ull) {
        uint64_t v;
        while (read(wakeFd_, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      if (id == ~1ull) {
        acceptPending();
        continue;
      }
      if (id >> 62 == 1) {
        serviceHello(static_cast<int>(id & 0xffffffff));
        continue;
      }
      Conn& c = *conns_[id >> 8][id & 0xff];
      if (c.closed) continue;
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) readConn(c);
      if (!c.closed && (evs[i].events & EPOLLOUT)) writeConn(c);
    }
    // Handshakes that never complete are dropped.
    auto now = Clock::now();
    for (auto it = pendingHello_.begin(); it != pendingHello_.end();) {
      if (now - it->second > kHelloTimeout) {
        ++dropped_;
        ACCL_WARN("NET", o_.where << ": dropped connection from " << peerName(it->first)
                                  << ": no handshake within " << kHelloTimeout.count() << " s");
        ::close(it->first);
        it = pendingHello_.erase(it);
      } else {
        ++it;
      }
    }
    waitMs = 50;
    if (ib_) {
      auto now2 = Clock::now();
      if (ib_->progress()) lastIb = now2;
      if (now2 - lastIb < kSpin) waitMs = 0;
      else if (ib_->arm()) lastIb = now2, waitMs = 0;
    }
    if (!tagged_.empty()) completions = reapTagged();
    cv_.notify_all();
    lk.unlock();
    for (auto& f : completions) f();
  }
  // Requests still pending at shutdown fail rather than never completing.
  std::vector<std::function<void()>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& p : tagged_) {
      auto w = p.work;
      auto what = p.what;
      left.push_back([w, what] {
        w->markCompleted(std::make_exception_ptr(RemoteError(what + ": the process group was destroyed")));
      });
    }
    tagged_.clear();
  }
  for (auto& f : left) f();
}

void TcpTransport::acceptPending() {
  for (;;) {
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    pendingHello_[fd] = Clock::now();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = (1ull << 62) | static_cast<uint32_t>(fd);
    epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void TcpTransport::serviceHello(int fd) {
  // After setup every peer is connected: whatever arrives here is refused
  // (garbage, another job, a stale or duplicate connection), and the job goes on.
  pendingHello_.erase(fd);
  epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr);
  internal::setNonBlocking(fd, false);
  int peer, stream;
  std::string from = peerName(fd);
  if (checkHello(fd, from, Clock::now() + std::chrono::milliseconds(200), &peer, &stream)) {
    ++dropped_;
    ACCL_WARN("NET", o_.where << ": dropped connection from " << from << " (rank " << peer
                              << "): the group is already connected");
  }
  ::close(fd);
}

void TcpTransport::closeConn(Conn& c, const std::string& why) {
  if (c.closed) return;
  c.closed = true;
  if (c.fd >= 0) {  // a verbs receive state has no socket: the peer fails
    epoll_ctl(epollFd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    // A peer served over verbs closes its sockets only after its writes
    // completed (Link::drain): their receive completions may be queued here
    // still, behind the socket's end. Deliver them first, so that a peer
    // that finished its last op and exited does not fail that op here.
    if (ib_ && overIb(c.peer) && peerFailed_[c.peer].empty())
      while (ib_->progress()) {
      }
  }
  failPeer(c.peer, why);
}

void TcpTransport::failPeer(int peer, const std::string& why) {
  if (!peerFailed_[peer].empty()) return;
  peerFailed_[peer] = why;
  ACCL_INFO("NET", o_.where << ": rank " << peer << ": " << why);
  auto fail = [&](const std::shared_ptr<Request>& r) {
    if (!r->done && (r->peer == peer)) {
      r->done = true;
      r->errorKind = 1;
      r->error = "rank " + std::to_string(peer) + ": " + why;
    }
  };
  for (auto& kv : posted_) fail(kv.second);
  for (auto& r : postedTagged_) fail(r);
  for (auto& r : opReqs_) fail(r);
  for (auto& c : conns_[peer])
    if (c) {
      for (auto& f : c->out)
        if (f.req) fail(f.req);
      c->out.clear();
    }
  if (ib_)
    ib_->dropPeer(peer, [&](const std::shared_ptr<void>& ck) {
      fail(std::static_pointer_cast<Request>(ck));
    });
  cv_.notify_all();
}

void TcpTransport::withdrawLocked(const std::shared_ptr<Request>& r, const char* why, const char* what) {
  if (!r->done) {
    r->done = true;
    if (!r->errorKind) {
      r->errorKind = 1;
      r->error = why;
    }
  }
  if (r->isSend) {
    // Frames not yet written are dropped; a frame half on a socket is
    // finished from a copy (the stream stays in step, the receiver discards
    // it); a verbs write in flight reads registered (pinned) pages.
    if (ib_ && !ib_->withdraw(r) && what)
      ACCL_INFO("NET", o_.where << ": " << what << " failed with part of the message written; "
                                << "the receiver discards the rest");
    for (auto& v : conns_)
      for (auto& c : v) {
        if (!c || c->closed) continue;
        for (auto f = c->out.begin(); f != c->out.end();) {
          if (f->req != r) {
            ++f;
          } else if (f->sent == 0) {
            f = c->out.erase(f);
          } else {
            if (!f->owned && f->hdr.len) f->owned = std::make_shared<std::string>(f->data, f->hdr.len);
            f->data = nullptr;
            f->req.reset();
            ++f;
          }
        }
      }
    return;
  }
  // Receives: unmatched, and a frame being read into the buffer is read to
  // its end and discarded.
  auto pit = posted_.find({r->peer, r->key});
  if (pit != posted_.end() && pit->second == r) posted_.erase(pit);
  auto tit = std::find(postedTagged_.begin(), postedTagged_.end(), r);
  if (tit != postedTagged_.end()) postedTagged_.erase(tit);
  auto detach = [&](Conn& c) {
    if (c.rreq == r) {
      c.rreq.reset();
      c.dest = nullptr;
    }
    if (c.tagReq == r) {
      c.tagReq.reset();
      c.tagDiscard = true;
    }
  };
  for (auto& v : conns_)
    for (auto& c : v)
      if (c) detach(*c);
  for (auto& v : ibConns_)
    for (auto& c : v)
      if (c) detach(*c);
  for (auto& kv : unexpected_)
    if (kv.second->waiter == r) kv.second->waiter.reset();
  for (auto& u : unexpectedTagged_)
    if (u->waiter == r) u->waiter.reset();
}

void TcpTransport::retireOpLocked() {
  for (auto& r : opReqs_) withdrawLocked(r, "the op failed", nullptr);
}

void TcpTransport::readConn(Conn& c) {
  for (int iter = 0; iter < 64 && !c.closed; ++iter) {
    if (c.hdrGot < sizeof(FrameHeader)) {
      ssize_t n = ::recv(c.fd, reinterpret_cast<char*>(&c.hdr) + c.hdrGot,
                         sizeof(FrameHeader) - c.hdrGot, MSG_DONTWAIT);
      if (n == 0) {
        closeConn(c, "connection closed by the peer (process exited or was killed?)");
        return;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        closeConn(c, std::string("connection failed: ") + std::strerror(errno));
        return;
      }
      c.hdrGot += n;
      if (c.hdrGot < sizeof(FrameHeader)) return;
      if (!handleHeader(c)) return;
      if (c.left == 0) {
        payloadDone(c);
        continue;
      }
    }
    static thread_local std::vector<char> sink(1 << 16);
    char* dst = c.dest ? c.dest : sink.data();
    size_t want = c.dest ? c.left : std::min(c.left, sink.size());
    ssize_t n = ::recv(c.fd, dst, want, MSG_DONTWAIT);
    if (n == 0) {
      closeConn(c, "connection closed by the peer in the middle of a message");
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      closeConn(c, std::string("connection failed: ") + std::strerror(errno));
      return;
    }
    if (c.readingAbort) c.abortText.append(dst, n);
    if (c.dest) c.dest += n;
    c.left -= n;
    if (c.left == 0) payloadDone(c);
  }
}

bool TcpTransport::handleHeader(Conn& c) {
  FrameHeader& h = c.hdr;
  std::string bad = validateHeader(h);
  if (!bad.empty()) {
    ACCL_WARN("NET", o_.where << ": malformed frame from rank " << c.peer << ": " << bad);
    closeConn(c, "protocol error: " + bad);
    return false;
  }
  c.dest = nullptr;
  c.left = h.len;
  c.chunk = h.len;
  c.rreq.reset();
  c.rux.reset();
  c.readingAbort = false;
  int p = c.peer;
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::Data: {
      uint64_t seq = h.key >> 32;
      if (seq < cur_.seq || (seq == cur_.seq && !opActive_ && entered_ > seq)) {
        // For an op this rank completed: nothing of it was left to receive, so the
        // peer called something else. Left over from a failed op: discard.
        if (!anyFailed_) noteLate(p, h.desc);
        return true;
      }
      if (opActive_ && seq == cur_.seq && h.desc != cur_ && mismatch_.empty())
        mismatch_ = "rank " + std::to_string(p) + " called " + describe(h.desc);
      auto it = posted_.find({p, h.key});
      if (it != posted_.end()) {
        auto r = it->second;
        if (h.total != r->len) {
          if (!r->done) {
            r->done = true;
            r->errorKind = 2;
            r->error = "rank " + std::to_string(p) + " sends " + std::to_string(h.total) +
                       " bytes for step " + std::to_string(h.key & 0xffffffff) +
                       " of " + describe(h.desc) + ", this rank expects " + std::to_string(r->len);
          }
          posted_.erase(it);
          return true;
        }
        c.rreq = r;
        c.dest = r->buf + h.offset;
      } else {
        auto& u = unexpected_[{p, h.key}];
        if (!u) {
          u = std::make_shared<Unexpected>();
          u->peer = p;
          u->key = h.key;
          u->desc = h.desc;
          u->data.resize(h.total);
        }
        if (u->data.size() != h.total) {
          closeConn(c, "protocol error: inconsistent message length");
          return false;
        }
        c.rux = u;
        c.dest = u->data.data() + h.offset;
      }
      return true;
    }
    case FrameType::Tagged: {
      if (h.offset > 0) {
        // The next frame of the message the previous frame on this QP began.
        if (c.tagReq && !c.tagReq->done && h.offset + h.len <= c.tagReq->len) {
          c.rreq = c.tagReq;
          c.dest = c.tagReq->buf + h.offset;
        } else if (c.tagUx && h.offset + h.len <= c.tagUx->data.size()) {
          c.rux = c.tagUx;
          c.dest = c.tagUx->data.data() + h.offset;
        } else if (!c.tagDiscard && !c.tagReq) {
          closeConn(c, "protocol error: a continuation frame without its message");
          return false;
        }
        return true;  // withdrawn or failed receive: discarded
      }
      c.tagReq.reset();
      c.tagUx.reset();
      c.tagDiscard = false;
      bool more = h.len < h.total;
      int tag = static_cast<int>(static_cast<int64_t>(h.key));
      for (auto it = postedTagged_.begin(); it != postedTagged_.end(); ++it) {
        auto r = *it;
        if ((r->peer == p || r->peer == -1) && r->tag == tag) {
          postedTagged_.erase(it);
          r->source = p;
          if (h.total != r->len) {
            r->done = true;
            r->errorKind = 2;
            r->error = "rank " + std::to_string(p) + " sent " + std::to_string(h.total) +
                       " bytes with tag " + std::to_string(tag) + ", the receive expects " +
                       std::to_string(r->len);
            c.tagDiscard = more;
            return true;
          }
          c.rreq = r;
          c.dest = r->buf;
          if (more) c.tagReq = r;
          return true;
        }
      }
      auto u = std::make_shared<Unexpected>();
      u->peer = p;
      u->key = h.key;
      u->data.resize(h.total);
      u->tagged = true;
      unexpectedTagged_.push_back(u);
      c.rux = u;
      c.dest = u->data.data();
      if (more) c.tagUx = u;
      return true;
    }
    case FrameType::Query: {
      OutFrame f;
      f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Reply), 0,
                          entered_.load(), 0, 0, 0, cur_};
      enqueueFrame(*conns_[p][0], std::move(f));  // control goes over the socket
      return true;
    }
    case FrameType::Reply:
      replies_[p] = {h.key + 1, h.desc};  // stored +1 so that 0 means "no reply yet"
      cv_.notify_all();
      return true;
    case FrameType::Abort:
      c.readingAbort = true;
      c.abortText.clear();
      c.abortText.reserve(h.len);
      return true;
    default:
      return false;
  }
}

void TcpTransport::payloadDone(Conn& c) {
  FrameHeader& h = c.hdr;
  c.hdrGot = 0;
  if (c.readingAbort) {
    c.readingAbort = false;
    aborts_[c.peer] = {h.key + 1, c.abortText};
    cv_.notify_all();
    return;
  }
  if (c.rreq) {
    auto r = std::move(c.rreq);
    if (!r->done) {
      r->pending -= std::min(r->pending, static_cast<size_t>(h.len));
      if (r->pending == 0) {  // zero-length messages complete with their header
        r->done = true;
        if (static_cast<FrameType>(h.type) == FrameType::Data) posted_.erase({c.peer, h.key});
      }
    }
  } else if (c.rux) {
    auto u = std::move(c.rux);
    u->got += h.len;
    if (u->got == u->data.size() && u->waiter) {
      auto r = u->waiter;
      if (!r->done) {
        if (!u->data.empty()) std::memcpy(r->buf, u->data.data(), u->data.size());
        r->pending = 0;
        r->done = true;
      }
      if (!u->tagged) unexpected_.erase({u->peer, u->key});
    }
  }
}

void TcpTransport::enqueueFrame(Conn& c, OutFrame f) {
  c.out.push_back(std::move(f));
  if (c.out.size() == 1) writeConn(c);
}

void TcpTransport::writeConn(Conn& c) {
  while (!c.out.empty() && !c.closed) {
    OutFrame& f = c.out.front();
    const char* payload = f.owned ? f.owned->data() : f.data;
    size_t hdrLen = sizeof(FrameHeader);
    size_t total = hdrLen + f.hdr.len;
    iovec iov[2];
    int n = 0;
    if (f.sent < hdrLen) {
      iov[n++] = {reinterpret_cast<char*>(&f.hdr) + f.sent, hdrLen - f.sent};
      if (f.hdr.len) iov[n++] = {const_cast<char*>(payload), f.hdr.len};
    } else {
      iov[n++] = {const_cast<char*>(payload) + (f.sent - hdrLen), total - f.sent};
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    ssize_t w = sendmsg(c.fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      closeConn(c, std::string("connection failed: ") + std::strerror(errno));
      return;
    }
    f.sent += w;
    if (f.sent < total) break;
    if (f.req && !f.req->done && --f.req->pending == 0) f.req->done = true;
    c.out.pop_front();
  }
  bool want = !c.out.empty() && !c.closed;
  if (want != c.armedOut && !c.closed) {
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.u64 = (static_cast<uint64_t>(c.peer) << 8) | c.stream;
    epoll_ctl(epollFd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.armedOut = want;
  }
}

// ---------------------------------------------------------------- ops

void TcpTransport::beginOp(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  cur_ = d;
  opActive_ = true;
  deadline_ = deadline;
  opTimeout_ = timeout;
  entered_ = d.seq + 1;
  mismatch_.clear();
  opReqs_.clear();
  // Messages of this op that arrived early tell whether the peers run the same op.
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    uint64_t seq = it->first.second >> 32;
    if (seq < d.seq) {
      if (!anyFailed_) noteLate(it->first.first, it->second->desc);
      it = unexpected_.erase(it);
      continue;
    }
    if (seq == d.seq && it->second->desc != d && mismatch_.empty())
      mismatch_ = "rank " + std::to_string(it->first.first) + " called " + describe(it->second->desc);
    ++it;
  }
}

void TcpTransport::endOp(const std::string& error) {
  std::lock_guard<std::mutex> lk(mu_);
  opActive_ = false;
  for (auto it = posted_.begin(); it != posted_.end();)
    it = (it->first.second >> 32) <= cur_.seq ? posted_.erase(it) : std::next(it);
  // The op failed: nothing of it touches the caller's buffers any more (the
  // peers get the abort below instead). Usually done already by the wait
  // that threw; errors raised outside this transport arrive here.
  if (!error.empty()) retireOpLocked();
  opReqs_.clear();
  if (error.empty()) {
    completed_.push_back(cur_);
    if (completed_.size() > 16) completed_.pop_front();
    return;
  }
  anyFailed_ = true;
  auto reason = std::make_shared<std::string>(error.substr(0, kMaxAbortBytes));
  for (int p = 0; p < o_.size; ++p) {
    if (p == o_.rank || conns_[p].empty() || !peerFailed_[p].empty()) continue;
    Conn& c = *conns_[p][0];
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Abort), 0,
                        cur_.seq, 0, reason->size(), reason->size(), cur_};
    f.owned = reason;
    enqueueFrame(c, std::move(f));
  }
}

void TcpTransport::postIb(int peer, FrameType type, uint64_t key, const void* buf, size_t len,
                          const OpDesc& desc, const std::shared_ptr<Request>& r, bool spread) {
  size_t chunk = ib_->chunkBytes();
  size_t frames = len == 0 ? 1 : (len + chunk - 1) / chunk;
  r->pending = frames;
  int nq = ib_->qps();
  for (size_t i = 0; i < frames; ++i) {
    size_t off = i * chunk;
    size_t n = std::min(chunk, len - std::min(len, off));
    FrameHeader h{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, off, n, len, desc};
    // Chunks of big collective messages alternate between the QPs; a
    // point-to-point message stays on one, in order.
    int q = spread ? static_cast<int>(i % nq) : 0;
    ib_->post(peer, q, h, static_cast<const char*>(buf) + off, r, static_cast<const char*>(buf), len);
  }
}

void TcpTransport::deliverIb(int peer, int qp, const FrameHeader& h, const char* payload) {
  Conn& c = *ibConns_[peer][qp];
  if (c.closed) return;
  c.hdr = h;
  if (!handleHeader(c)) return;
  if (c.left) {
    if (c.readingAbort) c.abortText.append(payload, c.left);
    if (c.dest) std::memcpy(c.dest, payload, c.left);
    c.left = 0;
  }
  payloadDone(c);
}

void TcpTransport::setupIb(Clock::time_point deadline) {
  ib::Link::Options lo;
  lo.rank = o_.rank;
  lo.size = o_.size;
  lo.peers = o_.remote;
  lo.required = o_.ibRequired;
  lo.settings = o_.ib;
  lo.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (lo.timeout.count() < 1000) lo.timeout = std::chrono::milliseconds(1000);
  lo.store = o_.store;
  lo.where = o_.where;
  bool anyRemote = std::find(o_.remote.begin(), o_.remote.end(), true) != o_.remote.end();
  if (!anyRemote) return;
#ifdef ACCL_HAVE_IBVERBS
  ib::Link::Callbacks cb;
  cb.deliver = [this](int peer, int qp, const FrameHeader& h, const char* payload) { deliverIb(peer, qp, h, payload); };
  cb.sent = [](const std::shared_ptr<void>& ck) {
    auto* r = static_cast<Request*>(ck.get());
    if (r && !r->done && --r->pending == 0) r->done = true;
  };
  cb.fail = [this](int peer, const std::string& why) { failPeer(peer, why); };
  ib_ = ib::Link::connect(lo, std::move(cb), &ibPeer_, &ibWhy_);
#else
  ibPeer_.assign(o_.size, false);
  ibWhy_ = "this build has no verbs support (libibverbs headers were missing at build time)";
#endif
  std::vector<int> tcpOnly;
  for (int p = 0; p < o_.size; ++p)
    if (o_.remote[p] && !overIb(p)) tcpOnly.push_back(p);
  if (!tcpOnly.empty() && o_.ibRequired) {
    ib_.reset();
    throw NotSupported(o_.where + ": ACCL_TRANSPORTS requires verbs (no tcp) but it is not usable: " + ibWhy_);
  }
  if (!tcpOnly.empty()) {
    std::string ranks;
    for (int p : tcpOnly) ranks += (ranks.empty() ? "" : ",") + std::to_string(p);
    // A host without RDMA is the common case (INFO); RDMA that is there but fails is not (WARN).
#ifdef ACCL_HAVE_IBVERBS
    LogLevel level = ib::noRdmaHere(ibWhy_) ? LogLevel::Info : LogLevel::Warn;
#else
    LogLevel level = LogLevel::Info;
#endif
    if (logEnabled(level, "INIT"))
      logLine(level, "INIT", o_.where + ": verbs not used with ranks " + ranks + ", falling back to tcp: " + ibWhy_);
  }
  if (ib_) {
    ibConns_.resize(o_.size);
    for (int p = 0; p < o_.size; ++p) {
      if (!overIb(p)) continue;
      for (int q = 0; q < ib_->qps(); ++q) {
        auto c = std::make_unique<Conn>();
        c->peer = p;
        c->stream = q;
        ibConns_[p].push_back(std::move(c));
      }
    }
  }
}

void TcpTransport::postData(int peer, uint64_t key, const void* buf, size_t len,
                            const std::shared_ptr<Request>& r) {
  if (overIb(peer)) {
    postIb(peer, FrameType::Data, key, buf, len, cur_, r, true);
    return;
  }
  auto& cs = conns_[peer];
  size_t ns = cs.size();
  size_t parts = (len >= kSplitBytes && ns > 1) ? ns : 1;
  size_t per = (len + parts - 1) / parts;
  std::vector<OutFrame> fs;
  for (size_t p = 0; p < parts; ++p) {
    size_t lo = p * per, hi = std::min(len, lo + per);
    if (lo >= hi && !(len == 0 && p == 0)) continue;
    for (size_t off = lo; off < hi || (len == 0 && off == 0); off += kMaxFrameBytes) {
      size_t n = std::min(kMaxFrameBytes, hi - off);
      OutFrame f;
      f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Data), 0,
                          key, off, n, len, cur_};
      f.data = static_cast<const char*>(buf) + off;
      f.req = r;
      fs.push_back(std::move(f));
      if (len == 0) break;
    }
  }
  r->pending = fs.size();
  std::vector<bool> touched(ns);
  for (auto& f : fs) {
    size_t s = parts == 1 ? 0 : (f.hdr.offset / per) % ns;
    cs[s]->out.push_back(std::move(f));
    touched[s] = true;
  }
  for (size_t s = 0; s < ns; ++s)
    if (touched[s]) writeConn(*cs[s]);
}

void TcpTransport::send(int peer, uint32_t step, const void* buf, size_t len) {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = std::make_shared<Request>();
  r->isSend = true;
  r->peer = peer;
  r->len = len;
  opReqs_.push_back(r);
  if (!peerFailed_[peer].empty()) {
    r->done = true;
    r->errorKind = 1;
    r->error = "rank " + std::to_string(peer) + ": " + peerFailed_[peer];
    return;
  }
  postData(peer, (cur_.seq << 32) | step, buf, len, r);
}

void TcpTransport::recv(int peer, uint32_t step, void* buf, size_t len) {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->buf = static_cast<char*>(buf);
  r->len = len;
  r->pending = len;
  r->key = (cur_.seq << 32) | step;
  opReqs_.push_back(r);
  auto it = unexpected_.find({peer, r->key});
  if (it != unexpected_.end()) {
    auto u = it->second;
    if (u->data.size() != len) {
      r->done = true;
      r->errorKind = 2;
      r->error = "rank " + std::to_string(peer) + " sends " + std::to_string(u->data.size()) +
                 " bytes for step " + std::to_string(step) + " of " + describe(u->desc) +
                 ", this rank expects " + std::to_string(len);
      unexpected_.erase(it);
      return;
    }
    if (u->got == u->data.size()) {
      if (len) std::memcpy(buf, u->data.data(), len);
      r->pending = 0;
      r->done = true;
      unexpected_.erase(it);
    } else {
      u->waiter = r;
    }
    return;
  }
  if (!peerFailed_[peer].empty()) {
    r->done = true;
    r->errorKind = 1;
    r->error = "rank " + std::to_string(peer) + ": " + peerFailed_[peer];
    return;
  }
  posted_[{peer, r->key}] = r;
}

void TcpTransport::noteLate(int peer, const OpDesc& theirs) {
  if (!late_.empty()) return;
  std::string mine = "op #" + std::to_string(theirs.seq);
  for (auto& d : completed_)
    if (d.seq == theirs.seq) mine = describe(d);
  late_ = "rank " + std::to_string(peer) + " called " + describe(theirs) + " but this rank completed " +
          mine + " without receiving that data";
  cv_.notify_all();
}

void TcpTransport::throwIfFailed(const std::vector<int>& peers) {
  try {
    checkFailedLocked(peers);
  } catch (...) {
    // Before the error leaves the transport (and the algorithm's scratch
    // buffers are freed by unwinding), every request of the op is withdrawn.
    retireOpLocked();
    throw;
  }
}

void TcpTransport::checkFailedLocked(const std::vector<int>& peers) {
  if (!late_.empty()) throw InvalidArgument("mismatched collectives: " + late_);
  if (!mismatch_.empty())
    throw InvalidArgument("mismatched collectives: this rank called " + describe(cur_) +
                          " but " + mismatch_);
  // A peer that failed this op, or an earlier one this rank completed (e.g. a
  // broadcast root that sent and returned before its peer saw the mismatch).
  for (int p = 0; p < o_.size; ++p)
    if (aborts_[p].first != 0 && aborts_[p].first <= cur_.seq + 1)
      throw RemoteError("rank " + std::to_string(p) + " failed op #" + std::to_string(aborts_[p].first - 1) +
                        ": " + aborts_[p].second);
  for (auto& r : opReqs_)
    if (r->done && r->errorKind) {
      if (r->errorKind == 2) throw InvalidArgument("mismatched collectives: " + r->error);
      throw RemoteError(describe(cur_) + ": " + r->error);
    }
  for (int p : peers)
    if (!peerFailed_[p].empty())
      throw RemoteError(describe(cur_) + ": rank " + std::to_string(p) + ": " + peerFailed_[p]);
}

void TcpTransport::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    bool all = true;
    for (auto& r : opReqs_)
      if (!r->done) {
        all = false;
        break;
      }
    // A zero-length receive completes when its frame's header was handled.
    if (all) {
      throwIfFailed({});
      opReqs_.clear();
      return;
    }
    throwIfFailed({});
    if (Clock::now() >= deadline_) {
      std::string waiting;
      for (auto& r : opReqs_)
        if (!r->done)
          waiting += std::string(waiting.empty() ? "" : ", ") + (r->isSend ? "send to" : "data from") +
                     " rank " + std::to_string(r->peer);
      lk.unlock();
      throwTimeout(waiting);
    }
    cv_.wait_until(lk, std::min(deadline_, Clock::now() + std::chrono::milliseconds(100)));
  }
}

void TcpTransport::checkPeers(const std::vector<int>& peers) {
  std::lock_guard<std::mutex> lk(mu_);
  throwIfFailed(peers);
}

std::vector<std::pair<int, std::string>> TcpTransport::queryArrivals(uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu_);
  for (int p = 0; p < o_.size; ++p) {
    replies_[p] = {0, OpDesc{}};
    if (p == o_.rank || !peerFailed_[p].empty() || conns_[p].empty()) continue;
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Query), 0, seq,
                        0, 0, 0, cur_};
    enqueueFrame(*conns_[p][0], std::move(f));
  }
  auto until = Clock::now() + kQueryGrace;
  auto pending = [&] {
    for (int p = 0; p < o_.size; ++p)
      if (p != o_.rank && peerFailed_[p].empty() && replies_[p].first == 0) return true;
    return false;
  };
  while (pending() && Clock::now() < until) cv_.wait_until(lk, until);
  std::vector<std::pair<int, std::string>> missing;
  for (int p = 0; p < o_.size; ++p) {
    if (p == o_.rank) continue;
    if (!peerFailed_[p].empty()) {
      missing.push_back({p, peerFailed_[p]});
    } else if (replies_[p].first == 0) {
      missing.push_back({p, "no answer"});
    } else {
      uint64_t entered = replies_[p].first - 1;  // the peer's entered_ value: seq + 1
      if (entered < seq + 1)
        missing.push_back({p, entered == 0 ? "has not started any op"
                                           : "still in " + describe(replies_[p].second)});
    }
  }
  return missing;
}

void TcpTransport::throwTimeout(const std::string& waitingFor) {
  OpDesc d;
  {
    std::lock_guard<std::mutex> lk(mu_);
    d = cur_;
  }
  std::chrono::milliseconds limit;
  {
    std::lock_guard<std::mutex> lk(mu_);
    limit = opTimeout_;
  }
  auto missing = queryArrivals(d.seq);
  std::string msg = describe(d) + " timed out after " + std::to_string(limit.count()) + " ms";
  // Ranks whose connection is gone cannot say where they are: listed apart.
  std::string absent, gone;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& m : missing) {
    std::string& to = peerFailed_[m.first].empty() ? absent : gone;
    to += (to.empty() ? "" : ", ") + std::to_string(m.first) + " (" + m.second + ")";
  }
  msg += absent.empty() ? "; every rank still connected entered the op" : "; ranks that did not arrive: " + absent;
  if (!gone.empty()) msg += "; ranks no longer connected: " + gone;
  if (!waitingFor.empty()) msg += "; this rank was waiting for " + waitingFor;
  retireOpLocked();
  throw Timeout(msg);
}

// ---------------------------------------------------------------- tagged

void TcpTransport::postTagged(bool isSend, int peer, int tag, void* buf, size_t len,
                              Clock::time_point deadline, std::shared_ptr<Work> work, std::string what) {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = std::make_shared<Request>();
  r->isSend = isSend;
  r->peer = peer;
  r->tag = tag;
  r->buf = static_cast<char*>(buf);
  r->len = len;
  tagged_.push_back({r, std::move(work), deadline, std::move(what)});
  uint64_t one = 1;
  auto wake = [&] {
    if (write(wakeFd_, &one, sizeof(one)) < 0) {
    }
  };
  if (peer >= 0 && !peerFailed_[peer].empty()) {
    r->done = true;
    r->errorKind = 1;
    r->error = "rank " + std::to_string(peer) + ": " + peerFailed_[peer];
    wake();
    return;
  }
  if (isSend && overIb(peer)) {
    OpDesc d{};
    d.op = static_cast<uint16_t>(OpType::Send);
    postIb(peer, FrameType::Tagged, static_cast<uint64_t>(static_cast<int64_t>(tag)), buf, len, d, r, false);
    if (r->done) wake();
    return;
  }
  if (isSend) {
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Tagged), 0,
                        static_cast<uint64_t>(static_cast<int64_t>(tag)), 0, len, len, OpDesc{}};
    f.hdr.desc.op = static_cast<uint16_t>(OpType::Send);
    f.data = static_cast<const char*>(buf);
    f.req = r;
    r->pending = 1;
    enqueueFrame(*conns_[peer][0], std::move(f));
    if (r->done) wake();
    return;
  }
  r->pending = len;
  for (auto it = unexpectedTagged_.begin(); it != unexpectedTagged_.end(); ++it) {
    auto u = *it;
    if ((peer == -1 || u->peer == peer) && static_cast<int>(static_cast<int64_t>(u->key)) == tag) {
      unexpectedTagged_.erase(it);
      r->source = u->peer;
      if (u->data.size() != len) {
        r->done = true;
        r->errorKind = 2;
        r->error = "rank " + std::to_string(u->peer) + " sent " + std::to_string(u->data.size()) +
                   " bytes with tag " + std::to_string(tag) + ", the receive expects " +
                   std::to_string(len);
      } else if (u->got == u->data.size()) {
        if (len) std::memcpy(buf, u->data.data(), len);
        r->pending = 0;
        r->done = true;
      } else {
        u->waiter = r;
      }
      if (r->done) wake();
      return;
    }
  }
  postedTagged_.push_back(r);
}

std::vector<std::function<void()>> TcpTransport::reapTagged() {
  std::vector<std::function<void()>> out;
  auto now = Clock::now();
  for (size_t i = 0; i < tagged_.size();) {
    Pending& p = tagged_[i];
    auto r = p.req;
    std::exception_ptr err;
    bool finish = false;
    if (r->done) {
      finish = true;
      if (r->errorKind == 2) err = std::make_exception_ptr(InvalidArgument(p.what + ": " + r->error));
      else if (r->errorKind) err = std::make_exception_ptr(RemoteError(p.what + ": " + r->error));
      if (r->errorKind) withdrawLocked(r, r->error.c_str(), p.what.c_str());
    } else if (now >= p.deadline) {
      finish = true;
      err = std::make_exception_ptr(Timeout(
          p.what + " timed out" + (r->peer >= 0 ? " waiting for rank " + std::to_string(r->peer) : std::string())));
      // Withdrawn, so that nothing lands in (or is read from) the user's
      // buffer after the Work failed.
      withdrawLocked(r, "timed out", p.what.c_str());
    }
    if (!finish) {
      ++i;
      continue;
    }
    auto work = std::move(p.work);
    int src = r->isSend ? -1 : r->source;
    out.push_back([work, err, src] { work->markCompleted(err, src); });
    tagged_[i] = std::move(tagged_.back());
    tagged_.pop_back();
  }
  return out;
}

}  // namespace core
}  // namespace accl
