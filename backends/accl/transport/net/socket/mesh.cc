// Set-up and tear-down of the socket link: the listener, the mesh of
// connections with their Hello handshake, and the refusal of connections
// that arrive after set-up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"
#include "transport/net/socket/socket_link.h"

namespace accl {
namespace core {
namespace net {

namespace {
constexpr auto kHelloTimeout = std::chrono::seconds(10);
// A peer's published address that refuses connections this long: nobody listens there.
constexpr auto kPublishedRefusedFor = std::chrono::seconds(10);

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

SocketLink::SocketLink(Options o, FrameSink* sink, Clock::time_point deadline) : o_(std::move(o)), sink_(sink) {
  listener_.link = this;
  auto ifs = internal::selectInterfaces(o_.ifSpec);
  if (ifs.empty())
    throw InvalidArgument(o_.where + ": no network interface matches ACCL_SOCKET_IFNAME='" + o_.ifSpec +
                          "'; accepted: prefixes of up interfaces with an address, ^ to exclude, = for exact names");
  ifName_ = ifs[0].name;
  address_ = ifs[0].address;
  listenFd_ = internal::listenOn(address_, 0, &port_);
  conns_.resize(o_.size);
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
}

SocketLink::~SocketLink() {
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
    if (::poll(pf.data(), pf.size(), 50) <= 0) continue;
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
  for (auto& kv : late_) ::close(kv.first);
  if (listenFd_ >= 0) ::close(listenFd_);
}

std::unique_ptr<SocketLink::Conn> SocketLink::makeConn(int fd, int peer, int stream) {
  internal::setNoDelay(fd);
  setBuffers(fd);
  auto c = std::make_unique<Conn>();
  c->link = this;
  c->fd = fd;
  c->peer = peer;
  c->stream = stream;
  if (stream == 0) c->ahead.reset(new char[kReadAhead]);
  return c;
}

bool SocketLink::checkHello(int fd, const std::string& from, Clock::time_point deadline, int* peer, int* stream) {
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
    ACCL_WARN("NET", o_.where << ": dropped connection from " << from << ": " << why);
    return false;
  }
  *peer = h.rank;
  *stream = h.stream;
  return true;
}

// Each rank connects to the ranks below it and accepts from those above.
void SocketLink::connectMesh(Clock::time_point deadline) {
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
      int fd;
      try {
        fd = internal::connectTo(host, port, deadline, kPublishedRefusedFor);
      } catch (const internal::ConnectionRefused& e) {
        // It listened before it published the address: a refusal that lasts
        // means no process of this job listens there.
        throw RemoteError(o_.where + ": rank " + std::to_string(p) + " published " + host + ":" +
                          std::to_string(port) + " in the store, but " + e.what() +
                          ": that rank exited, or the store holds an earlier job's addresses (a reused "
                          "ACCL_STORE_FILE, or a store server that outlived its job)");
      }
      conns_[p][s] = makeConn(fd, p, s);
      Hello h{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Hello), static_cast<uint8_t>(s), o_.token,
              o_.rank, static_cast<uint32_t>(hostId.size())};
      internal::sendAll(fd, &h, sizeof(h), deadline, "rank " + std::to_string(p));
      internal::sendAll(fd, hostId.data(), hostId.size(), deadline, "rank " + std::to_string(p));
    }
  }
  while (expected > 0) {
    pollfd pf{listenFd_, POLLIN, 0};
    int left = internal::msLeft(deadline);
    if (left <= 0) {
      std::vector<int> missing;
      for (int p = o_.rank + 1; p < o_.size; ++p)
        if (std::any_of(conns_[p].begin(), conns_[p].end(), [](const auto& c) { return !c; })) missing.push_back(p);
      throw Timeout(o_.where + ": timed out connecting the group; no connection from ranks " +
                    internal::join(missing, ", "));
    }
    if (::poll(&pf, 1, std::min(left, 1000)) <= 0) continue;
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string from = peerName(fd);
    int peer = -1, stream = -1;
    auto helloDeadline = std::min(deadline, Clock::now() + kHelloTimeout);
    if (!checkHello(fd, from, helloDeadline, &peer, &stream)) {
      ::close(fd);
      continue;
    }
    conns_[peer][stream] = makeConn(fd, peer, stream);
    --expected;
  }
}

void SocketLink::attach(EventLoop* loop) {
  loop_ = loop;
  internal::setNonBlocking(listenFd_, true);
  loop_->add(listenFd_, &listener_, EPOLLIN);
  for (auto& v : conns_)
    for (auto& c : v) {
      internal::setNonBlocking(c->fd, true);
      loop_->add(c->fd, c.get(), EPOLLIN);
    }
}

// ---------------------------------------------------------------- after set-up

void SocketLink::acceptLate() {
  for (;;) {
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto c = std::make_unique<LateConn>();
    c->link = this;
    c->fd = fd;
    c->since = Clock::now();
    try {
      loop_->add(fd, c.get(), EPOLLIN);
    } catch (const Error& e) {
      ACCL_WARN("NET", o_.where << ": dropped connection from " << peerName(fd) << ": " << e.what());
      ::close(fd);
      continue;
    }
    late_[fd] = std::move(c);
  }
}

void SocketLink::LateConn::onEvents(uint32_t) {
  SocketLink* l = link;
  int f = fd;
  l->refuseLate(f);  // destroys this handler
}

void SocketLink::refuseLate(int fd) {
  // After set-up every peer is connected: whatever arrives here is refused
  // (garbage, another job, a stale or duplicate connection), and the job goes on.
  loop_->remove(fd);
  late_.erase(fd);
  internal::setNonBlocking(fd, false);
  int peer, stream;
  std::string from = peerName(fd);
  if (checkHello(fd, from, Clock::now() + std::chrono::milliseconds(200), &peer, &stream))
    ACCL_WARN("NET", o_.where << ": dropped connection from " << from << " (rank " << peer
                              << "): the group is already connected");
  ::close(fd);
}

void SocketLink::expireHandshakes(Clock::time_point now) {
  for (auto it = late_.begin(); it != late_.end();) {
    if (now - it->second->since > kHelloTimeout) {
      ACCL_WARN("NET", o_.where << ": dropped connection from " << peerName(it->first) << ": no handshake within "
                                << kHelloTimeout.count() << " s");
      loop_->remove(it->first);
      ::close(it->first);
      it = late_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace net
}  // namespace core
}  // namespace accl
