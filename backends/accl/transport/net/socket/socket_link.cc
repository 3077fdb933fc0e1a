// The socket link's data path: frames read and written by non-blocking
// connections on the event loop's thread.
#include "transport/net/socket/socket_link.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "accl/errors.h"
#include "accl/logging.h"

namespace accl {
namespace core {
namespace net {

namespace {
constexpr size_t kMaxFrameBytes = 4u << 20;  // chunks of collective messages
constexpr size_t kSplitBytes = 256u << 10;   // messages at least this big use every stream
}  // namespace

void SocketLink::Conn::onEvents(uint32_t events) {
  if (closed) return;
  // A connection left waiting that fails or ends: read now (what it brought
  // before its end lands first).
  if (deferUntil && (events & (EPOLLHUP | EPOLLERR))) link->resume(*this);
  if (closed) return;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) link->readConn(*this);
  if (!closed && (events & EPOLLOUT)) link->writeConn(*this);
}

void SocketLink::closeConn(Conn& c, const std::string& why, bool cleanEnd) {
  if (c.closed) return;
  c.closed = true;
  if (c.deferUntil) c.deferUntil = 0, --deferred_;
  if (c.lingerUntil) c.lingerUntil = 0, --lingering_;
  if (c.readPending) c.readPending = false, --pendingReads_;
  c.aheadPos = c.aheadEnd = 0;
  loop_->remove(c.fd);
  ::close(c.fd);
  c.out.clear();
  c.land.reset();
  if (cleanEnd)
    for (auto& o : conns_[c.peer])
      if (o && !o->closed) return;  // the peer's other streams end too, after what they still carry
  sink_->onPeerFailed(this, c.peer, why);
}

// ---------------------------------------------------------------- receive

// One non-blocking read of up to `len` bytes into `dst`: the bytes read, or
// 0 when there is nothing to do now (no data yet, or the connection closed:
// `atEof` names how).
size_t SocketLink::readSome(Conn& c, char* dst, size_t len, const char* atEof, bool betweenFrames) {
  if (c.buffered()) {
    size_t n = std::min(len, c.aheadEnd - c.aheadPos);
    std::memcpy(dst, c.ahead.get() + c.aheadPos, n);
    c.aheadPos += n;
    return n;
  }
  // A read that got less than it asked for emptied the socket: another now
  // would find nothing (EAGAIN), and what comes later raises an epoll event
  // or is found by a waiter's next poll (each readConn asks again).
  if (c.drained) return 0;
  if (c.ahead && len < kReadAhead) {
    ++reads_;
    ssize_t n = ::recv(c.fd, c.ahead.get(), kReadAhead, MSG_DONTWAIT);
    if (n > 0) {
      c.aheadPos = 0;
      c.aheadEnd = static_cast<size_t>(n);
      c.drained = c.aheadEnd < kReadAhead;
      return readSome(c, dst, len, atEof, betweenFrames);
    }
    if (n == 0) closeConn(c, atEof, betweenFrames);
    else if (errno != EAGAIN && errno != EINTR) closeConn(c, errnoMessage("connection failed", errno));
    return 0;
  }
  ++reads_;
  ssize_t n = ::recv(c.fd, dst, len, MSG_DONTWAIT);
  if (n > 0) {
    c.drained = static_cast<size_t>(n) < len;
    return static_cast<size_t>(n);
  }
  if (n == 0) closeConn(c, atEof, betweenFrames);
  else if (errno != EAGAIN && errno != EINTR) closeConn(c, errnoMessage("connection failed", errno));
  return 0;
}

void SocketLink::readConn(Conn& c) {
  static thread_local std::vector<char> discard(1 << 16);
  if (c.readPending) c.readPending = false, --pendingReads_;
  c.drained = false;
  // 64 reads of the socket at most; what the buffer holds is read whole (no
  // epoll event would tell of it again).
  for (int iter = 0; (iter < 64 || c.buffered()) && !c.closed && !c.deferUntil; ++iter) {
    if (c.hdrGot < sizeof(FrameHeader)) {
      bool fromBuffer = c.buffered();  // a short read there says nothing of the socket
      size_t n = readSome(c, reinterpret_cast<char*>(&c.hdr) + c.hdrGot, sizeof(FrameHeader) - c.hdrGot,
                          c.hdrGot == 0 ? "connection closed by the peer (process exited or was killed?)"
                                        : "connection closed by the peer in the middle of a frame header",
                          c.hdrGot == 0);
      if (n == 0) return;
      c.hdrGot += n;
      if (c.hdrGot < sizeof(FrameHeader)) {
        if (fromBuffer) continue;
        return;
      }
      if (!headerArrived(c)) return;
      if (c.hdr.len == 0) {
        frameArrived(c);
        continue;
      }
    }
    // The landing is looked at for every read: a receive withdrawn meanwhile
    // (base = nullptr) gets no more bytes.
    size_t left = c.hdr.len - c.pos;
    bool keep = c.land && c.land->base;
    char* dst = keep ? c.land->base + c.hdr.offset + c.pos : discard.data();
    size_t n = readSome(c, dst, keep ? left : std::min(left, discard.size()),
                        "connection closed by the peer in the middle of a message", false);
    if (n == 0) return;
    c.pos += n;
    if (c.pos == c.hdr.len) frameArrived(c);
  }
}

bool SocketLink::headerArrived(Conn& c) {
  if (!headerValid(c.hdr)) {
    std::string bad = validateHeader(c.hdr);
    ACCL_WARN("NET", o_.where << ": malformed frame from rank " << c.peer << ": " << bad);
    closeConn(c, "protocol error: " + bad);
    return false;
  }
  auto type = static_cast<FrameType>(c.hdr.type);
  if (c.hdr.total >= kDeferMin && c.hdr.len > 0 && (type == FrameType::Data || type == FrameType::Tagged) &&
      !sink_->readNow(c.peer, c.hdr)) {
    c.deferUntil = Clock::now().time_since_epoch().count() + holdForReceiveNs(c.hdr.total);
    ++deferred_;
    ++framesDeferred_;
    rearm(c);
    return false;
  }
  return admitHeader(c);
}

bool SocketLink::admitHeader(Conn& c) {
  c.pos = 0;
  try {
    c.land = sink_->onHeader(c.peer, c.hdr);
  } catch (const ProtocolError& e) {
    ACCL_WARN("NET", o_.where << ": refused frame from rank " << c.peer << ": " << e.what);
    closeConn(c, "protocol error: " + e.what);
    return false;
  }
  return !c.closed;
}

void SocketLink::frameArrived(Conn& c) {
  c.hdrGot = 0;
  ++framesIn_;
  LandingPtr l = std::move(c.land);
  sink_->onFrame(c.peer, c.hdr, l);
}

void SocketLink::resume(Conn& c) {
  if (c.closed || !c.deferUntil) return;
  c.deferUntil = 0;
  --deferred_;
  if (!admitHeader(c) || !rearm(c)) return;
  // Its payload, or frames behind it, in the read buffer: no epoll event
  // tells of them, so the loop is asked to read them.
  if (c.buffered() && !c.readPending) {
    c.readPending = true;
    ++pendingReads_;
    loop_->wake();
  }
}

void SocketLink::readPending() {
  if (!pendingReads_) return;
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && c->readPending && !c->closed) readConn(*c);
}

int64_t SocketLink::deferredUntil() const {
  if (!deferred_) return 0;
  int64_t first = 0;
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && c->deferUntil && (!first || c->deferUntil < first)) first = c->deferUntil;
  return first;
}

void SocketLink::resumeDeferred(int peer) {
  if (!deferred_) return;
  for (int p = 0; p < static_cast<int>(conns_.size()); ++p)
    if (peer < 0 || p == peer)
      for (auto& c : conns_[p])
        if (c && c->deferUntil) resume(*c);
}

void SocketLink::expireDeferred(Clock::time_point now) {
  if (!deferred_) return;
  int64_t t = now.time_since_epoch().count();
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && c->deferUntil && c->deferUntil <= t) {
        resume(*c);
        if (!c->closed) readConn(*c);  // the loop's thread: read what is there now
      }
}

bool SocketLink::rearm(Conn& c) {
  if (c.closed) return false;
  uint32_t ev = (c.polled || c.deferUntil ? 0u : static_cast<uint32_t>(EPOLLIN)) |
                (c.armedOut ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (loop_->modify(c.fd, &c, ev)) return true;
  closeConn(c, errnoMessage("epoll_ctl(MOD) on the connection", errno));
  return false;
}

uint64_t SocketLink::pollPeer(int peer) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer].empty()) return 0;
  Conn& c = *conns_[peer][0];
  if (c.closed) return 0;
  uint64_t before = framesIn_;
  readConn(c);
  return framesIn_ - before;
}

bool SocketLink::setPolled(int peer, bool polled) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer].empty()) return true;
  Conn& c = *conns_[peer][0];
  if (c.lingerUntil) c.lingerUntil = 0, --lingering_;  // a waiter takes it over, or the loop does
  if (c.closed || c.polled == polled) return true;
  c.polled = polled;
  return rearm(c);
}

void SocketLink::linger(int peer, int64_t untilNs) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer].empty()) return;
  Conn& c = *conns_[peer][0];
  if (c.closed || !c.polled) return;
  if (!c.lingerUntil) ++lingering_, ++lingered_;
  c.lingerUntil = untilNs;
}

int64_t SocketLink::lingerUntil() const {
  if (!lingering_) return 0;
  int64_t first = 0;
  for (auto& v : conns_)
    if (!v.empty() && v[0] && v[0]->lingerUntil && (!first || v[0]->lingerUntil < first)) first = v[0]->lingerUntil;
  return first;
}

void SocketLink::expireLingers(Clock::time_point now) { endLingersDue(now.time_since_epoch().count(), true); }

void SocketLink::endLingers(bool read) { endLingersDue(INT64_MAX, read); }

void SocketLink::endLingersDue(int64_t dueNs, bool read) {
  if (!lingering_) return;
  for (int p = 0; p < static_cast<int>(conns_.size()); ++p) {
    if (conns_[p].empty() || !conns_[p][0]) continue;
    Conn& c = *conns_[p][0];
    if (!c.lingerUntil || c.lingerUntil > dueNs) continue;
    if (setPolled(p, false) && read && !c.closed) readConn(c);
  }
}

// ---------------------------------------------------------------- send

void SocketLink::queue(Conn& c, OutFrame f) {
  c.out.push_back(std::move(f));
  // A queue that was not empty waits for EPOLLOUT: the socket is full.
  if (!c.armedOut) writeConn(c);
}

void SocketLink::send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
                      const OutPtr& m, Route route) {
  auto& cs = conns_[peer];
  auto frame = [&](uint64_t off, size_t n) {
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, off, n, len, desc};
    f.data = buf + off;
    f.msg = m;
    return f;
  };
  if (route == Route::Ordered) {  // one frame on stream 0
    if (m) m->framesLeft = 1;
    if (!cs[0]->closed) queue(*cs[0], frame(0, len));
    return;
  }
  // Spread: parts of big messages go to every stream, in chunks.
  size_t ns = cs.size();
  size_t parts = (len >= kSplitBytes && ns > 1) ? ns : 1;
  size_t per = (len + parts - 1) / parts;
  std::vector<std::pair<size_t, OutFrame>> fs;  // (stream, frame)
  for (size_t p = 0; p < parts; ++p) {
    size_t lo = p * per, hi = std::min(len, lo + per);
    if (lo >= hi && !(len == 0 && p == 0)) continue;
    for (size_t off = lo; off < hi || (len == 0 && off == 0); off += kMaxFrameBytes) {
      fs.emplace_back(p % ns, frame(off, std::min(kMaxFrameBytes, hi - off)));
      if (len == 0) break;
    }
  }
  if (m) m->framesLeft = fs.size();
  std::vector<bool> touched(ns);
  for (auto& sf : fs) {
    Conn& c = *cs[sf.first];
    if (c.closed) continue;
    c.out.push_back(std::move(sf.second));
    touched[sf.first] = true;
  }
  for (size_t s = 0; s < ns; ++s)
    if (touched[s] && !cs[s]->armedOut) writeConn(*cs[s]);
}

void SocketLink::writeConn(Conn& c) {
  while (!c.out.empty() && !c.closed) {
    OutFrame& f = c.out.front();
    const char* payload = f.copy ? f.copy->data() : f.data;
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
      closeConn(c, errnoMessage("connection failed", errno));
      return;
    }
    f.sent += w;
    if (f.sent < total) break;
    OutPtr m = std::move(f.msg);
    c.out.pop_front();
    if (m) sink_->onSent(m);
  }
  bool want = !c.out.empty() && !c.closed;
  if (want != c.armedOut && !c.closed) {
    c.armedOut = want;
    rearm(c);
  }
}

bool SocketLink::withdraw(const OutPtr& m) {
  // Frames not yet written are dropped; a frame half on a socket is finished
  // from a copy (the stream stays in step; the receiver discards it).
  bool clean = true;
  for (auto& v : conns_)
    for (auto& c : v) {
      if (!c || c->closed) continue;
      for (auto f = c->out.begin(); f != c->out.end();) {
        if (f->msg != m) {
          ++f;
        } else if (f->sent == 0) {
          f = c->out.erase(f);
        } else {
          clean = false;
          if (!f->copy && f->hdr.len) f->copy = std::make_shared<std::string>(f->data, f->hdr.len);
          f->data = nullptr;
          f->msg.reset();
          ++f;
        }
      }
    }
  return clean;
}

void SocketLink::dropPeer(int peer) {
  for (auto& c : conns_[peer])
    if (c) c->out.clear();
}

bool SocketLink::flushed() const {
  for (auto& v : conns_)
    for (auto& c : v)
      if (c && !c->closed && !c->out.empty()) return false;
  return true;
}

}  // namespace net
}  // namespace core
}  // namespace accl
