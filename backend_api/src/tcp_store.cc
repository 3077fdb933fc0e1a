// TcpStore: a poll-driven server thread and a blocking client.
//
// Frame (both directions): u32 magic | u16 version | u8 code | u8 0 | u32 body length | body.
// Request code = command; response code = status (0 ok, 1 error text).
// Strings in bodies are u32 length + bytes. A request that is malformed, of an
// unknown version or larger than the limit closes that connection (after an
// error response where possible) and is logged; other clients are unaffected.
//
// With a shared secret (ACCL_STORE_SECRET), a connection starts with
//   client: kHello{nc}                    (nc, ns: 32 random bytes each)
//   server: ok{ns, HMAC(k, "server", nc, ns)}   the server proves the secret
//   client: kAuth{HMAC(k, "client", ns, nc)}    the client proves it
//   server: ok
// and the server refuses (and logs) any other request on a connection that
// has not proven it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/logging.h"
#include "accl/store.h"
#include "accl/internal/store_wire.h"
#include "store_auth.h"
#include "store_common.h"

namespace accl {

namespace {

constexpr uint32_t kMagic = 0x41435354;  // "ACST"
constexpr uint16_t kVersion = 1;
constexpr size_t kHeader = 12;
constexpr size_t kKeyOverhead = 1u << 20;  // room for keys on top of the value limit
constexpr uint32_t kMaxKeys = 1u << 16;

// Response status: 0 ok; kStatusRefused closes the connection (RemoteError);
// kStatusInvalid is a caller error (InvalidArgument).
constexpr uint8_t kStatusRefused = 1;
constexpr uint8_t kStatusInvalid = 2;

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCas, kCheck, kWait, kDelete, kNumKeys, kHello, kAuth };

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Writer {
  std::string buf;
  void u32(uint32_t v) { buf.append(reinterpret_cast<char*>(&v), 4); }
  void i64(int64_t v) { buf.append(reinterpret_cast<char*>(&v), 8); }
  void u8(uint8_t v) { buf.push_back(static_cast<char>(v)); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    buf += s;
  }
  void bytes(const Bytes& b) {
    u32(static_cast<uint32_t>(b.size()));
    buf.append(b.begin(), b.end());
  }
};

struct Reader {
  const char* p;
  size_t left;
  void need(size_t n) {
    if (n > left) throw ProtocolError("truncated body");
  }
  uint32_t u32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    left -= 4;
    return v;
  }
  int64_t i64() {
    need(8);
    int64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    left -= 8;
    return v;
  }
  uint8_t u8() {
    need(1);
    uint8_t v = static_cast<uint8_t>(*p);
    ++p;
    --left;
    return v;
  }
  std::string str() {
    uint32_t n = u32();
    need(n);
    std::string s(p, n);
    p += n;
    left -= n;
    return s;
  }
  Bytes bytes() {
    std::string s = str();
    return Bytes(s.begin(), s.end());
  }
  std::vector<std::string> keys() {
    uint32_t n = u32();
    if (n > kMaxKeys) throw ProtocolError("too many keys (" + std::to_string(n) + ")");
    std::vector<std::string> v;
    for (uint32_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  void end() {
    if (left != 0) throw ProtocolError("trailing bytes in body");
  }
};

std::string frame(uint8_t code, const std::string& body) {
  Writer w;
  w.u32(kMagic);
  w.buf.append(reinterpret_cast<const char*>(&kVersion), 2);
  w.u8(code);
  w.u8(0);
  w.u32(static_cast<uint32_t>(body.size()));
  return w.buf + body;
}

}  // namespace

// ---------------------------------------------------------------- server

namespace {

// The server's state and request handling; TcpStoreServer::Impl adds the
// sockets and the poll loop (detail::serveStoreBytes drives it without them).
struct StoreServerState {
  int listenFd = -1;
  int wakeFd = -1;
  int port = 0;
  size_t maxBody = 0;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<size_t> clients{0};
  std::string secret;  // "" = no authentication

  struct Client {
    int fd = -1;
    std::string in;
    std::string out;
    std::string peer;          // address:port, for the log
    bool authed = false;       // proved the secret (or none is needed)
    std::string nc, ns;        // the handshake's nonces
    bool closing = false;  // refused: flush `out`, then half-close and drain
    bool draining = false;
    internal::Clock::time_point drainUntil{};
    size_t drained = 0;
  };
  static constexpr size_t kMaxDrain = 256u << 20;
  struct Waiter {
    int fd;
    uint8_t cmd;  // kGet or kWait
    std::vector<std::string> keys;
  };
  std::map<int, Client> conns;
  std::list<Waiter> waiters;
  std::map<std::string, Bytes> data;

  bool has(const std::vector<std::string>& keys) {
    for (auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }

  void reply(Client& c, uint8_t status, const std::string& body) { c.out += frame(status, body); }

  void refuse(Client& c, const std::string& why) {
    ACCL_WARN("STORE", "store server: dropping client " << c.peer << " (fd " << c.fd << "): " << why);
    reply(c, kStatusRefused, why);
    c.closing = true;
    c.in.clear();
  }

  void wakeWaiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (!has(it->keys)) {
        ++it;
        continue;
      }
      auto cit = conns.find(it->fd);
      if (cit != conns.end()) {
        Writer w;
        if (it->cmd == kGet) w.bytes(data[it->keys[0]]);
        reply(cit->second, 0, w.buf);
      }
      it = waiters.erase(it);
    }
  }

  void handle(Client& c, uint8_t cmd, Reader r) {
    Writer w;
    if (cmd == kHello) {
      c.nc = r.str();
      r.end();
      if (secret.empty())
        return refuse(c, "this store server runs without a secret (ACCL_STORE_SECRET is not set on the rank that "
                         "hosts it): set the same secret on every rank, or on none");
      if (c.nc.size() != detail::kNonceBytes) throw ProtocolError("hello nonce of " + std::to_string(c.nc.size()) + " bytes");
      c.ns = detail::randomNonce();
      w.str(c.ns);
      w.str(detail::storeMac(secret, "accl-store server", c.nc, c.ns));
      return reply(c, 0, w.buf);
    }
    if (cmd == kAuth) {
      std::string mac = r.str();
      r.end();
      if (secret.empty() || c.ns.empty()) throw ProtocolError("authentication without a hello");
      if (!detail::sameMac(mac, detail::storeMac(secret, "accl-store client", c.ns, c.nc)))
        return refuse(c, "authentication failed: the client's ACCL_STORE_SECRET differs from this server's");
      c.authed = true;
      return reply(c, 0, "");
    }
    if (!c.authed)
      return refuse(c, "this store requires a secret: set ACCL_STORE_SECRET (or ACCL_STORE_SECRET_FILE) to the "
                       "job's secret on every rank");
    switch (cmd) {
      case kSet: {
        auto key = r.str();
        auto val = r.bytes();
        r.end();
        data[key] = std::move(val);
        reply(c, 0, "");
        wakeWaiters();
        return;
      }
      case kGet:
      case kWait: {
        std::vector<std::string> keys;
        if (cmd == kGet) keys.push_back(r.str());
        else keys = r.keys();
        r.end();
        if (has(keys)) {
          if (cmd == kGet) w.bytes(data[keys[0]]);
          reply(c, 0, w.buf);
        } else {
          waiters.push_back({c.fd, cmd, std::move(keys)});
        }
        return;
      }
      case kAdd: {
        auto key = r.str();
        int64_t delta = r.i64();
        r.end();
        auto it = data.find(key);
        int64_t v;
        try {
          v = detail::addCounter(key, it == data.end() ? nullptr : &it->second, delta);
        } catch (const Error& e) {
          reply(c, kStatusInvalid, e.what());  // the connection stays usable
          return;
        }
        data[key] = toBytes(std::to_string(v));
        w.i64(v);
        reply(c, 0, w.buf);
        wakeWaiters();
        return;
      }
      case kCas: {
        auto key = r.str();
        auto expected = r.bytes();
        auto desired = r.bytes();
        r.end();
        auto it = data.find(key);
        if ((it == data.end() && expected.empty()) || (it != data.end() && it->second == expected)) {
          data[key] = desired;
          w.bytes(desired);
          reply(c, 0, w.buf);
          wakeWaiters();
        } else {
          w.bytes(it == data.end() ? Bytes{} : it->second);
          reply(c, 0, w.buf);
        }
        return;
      }
      case kCheck: {
        auto keys = r.keys();
        r.end();
        w.u8(has(keys) ? 1 : 0);
        reply(c, 0, w.buf);
        return;
      }
      case kDelete: {
        auto key = r.str();
        r.end();
        w.u8(data.erase(key) ? 1 : 0);
        reply(c, 0, w.buf);
        return;
      }
      case kNumKeys: {
        r.end();
        w.i64(static_cast<int64_t>(data.size()));
        reply(c, 0, w.buf);
        return;
      }
      default:
        throw ProtocolError("unknown command " + std::to_string(cmd));
    }
  }

  // Parses complete frames in c.in.
  void process(Client& c) {
    while (!c.closing && c.in.size() >= kHeader) {
      uint32_t magic, len;
      uint16_t version;
      std::memcpy(&magic, c.in.data(), 4);
      std::memcpy(&version, c.in.data() + 4, 2);
      uint8_t cmd = static_cast<uint8_t>(c.in[6]);
      std::memcpy(&len, c.in.data() + 8, 4);
      if (magic != kMagic) return refuse(c, "bad magic number: not an ACCL store client");
      if (version != kVersion)
        return refuse(c, "protocol version " + std::to_string(version) + " not supported (server speaks " +
                             std::to_string(kVersion) + ")");
      if (len > maxBody)
        return refuse(c, "request of " + std::to_string(len) + " bytes exceeds the limit of " +
                             std::to_string(maxBody) + " bytes");
      if (c.in.size() < kHeader + len) return;
      try {
        handle(c, cmd, Reader{c.in.data() + kHeader, len});
      } catch (const ProtocolError& e) {
        return refuse(c, std::string("malformed request: ") + e.what());
      } catch (const Error& e) {  // libcrypto missing: refuse, keep serving
        return refuse(c, e.what());
      }
      if (c.closing) return;
      c.in.erase(0, kHeader + len);
    }
  }

  static std::string peerName(const sockaddr_storage& ss) {
    char buf[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
      port = ntohs(a->sin6_port);
    }
    return std::string(buf) + ":" + std::to_string(port);
  }

  void closeClient(int fd) {
    auto it = conns.find(fd);
    if (it != conns.end() && !it->second.authed && !it->second.ns.empty() && !it->second.closing)
      ACCL_WARN("STORE", "store server: client " << it->second.peer
                                                 << " left during the secret handshake (its ACCL_STORE_SECRET differs, "
                                                    "or it is not an ACCL client)");
    ::close(fd);
    conns.erase(fd);
    waiters.remove_if([fd](const Waiter& w) { return w.fd == fd; });
    clients = conns.size();
  }

  void loop() {
    std::vector<pollfd> fds;
    char buf[65536];
    while (!stop) {
      fds.clear();
      fds.push_back({listenFd, POLLIN, 0});
      fds.push_back({wakeFd, POLLIN, 0});
      for (auto& [fd, c] : conns)
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      bool anyDraining = false;
      for (auto& [fd, c] : conns) anyDraining |= c.draining;
      int n = poll(fds.data(), fds.size(), anyDraining ? 200 : -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        ACCL_WARN("STORE", errnoMessage("store server: poll failed", errno));
        return;
      }
      if (fds[1].revents) return;
      if (fds[0].revents & POLLIN) {
        for (;;) {
          sockaddr_storage ss{};
          socklen_t sl = sizeof(ss);
          int fd = accept4(listenFd, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          internal::setNoDelay(fd);
          Client c;
          c.fd = fd;
          c.peer = peerName(ss);
          c.authed = secret.empty();
          conns[fd] = std::move(c);
        }
        clients = conns.size();
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        int fd = fds[i].fd;
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Client& c = it->second;
        bool dead = false;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          for (;;) {
            ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
            if (r > 0) {
              if (c.closing) {
                c.drained += static_cast<size_t>(r);  // the rest of a refused request
                continue;
              }
              c.in.append(buf, static_cast<size_t>(r));
              if (c.in.size() >= kHeader) process(c);
              continue;
            }
            if (r == 0 || (errno != EAGAIN && errno != EINTR)) dead = true;
            break;
          }
        }
        if (!dead && !c.out.empty()) {
          ssize_t w = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (w > 0) c.out.erase(0, static_cast<size_t>(w));
          else if (w < 0 && errno != EAGAIN && errno != EINTR) dead = true;
        }
        // A refused client gets its error frame, then a half-close; what it still
        // sends is read and dropped (bounded), so that closing never resets the
        // connection before it has read why.
        if (!dead && c.closing && c.out.empty() && !c.draining) {
          ::shutdown(fd, SHUT_WR);
          c.draining = true;
          c.drainUntil = internal::Clock::now() + std::chrono::seconds(5);
        }
        if (c.draining && (internal::Clock::now() > c.drainUntil || c.drained > kMaxDrain)) dead = true;
        if (dead) closeClient(fd);
      }
    }
  }
};

}  // namespace

struct TcpStoreServer::Impl : StoreServerState {};

namespace detail {

std::string serveStoreBytes(const std::string& stream, const std::string& secret) {
  StoreServerState st;
  st.maxBody = (1u << 20) + kKeyOverhead;
  st.secret = secret;
  StoreServerState::Client c;
  c.peer = "fuzz";
  c.authed = secret.empty();
  // In pieces, as a socket delivers them.
  for (size_t off = 0; off < stream.size() && !c.closing; off += 7) {
    c.in.append(stream, off, 7);
    if (c.in.size() >= kHeader) st.process(c);
  }
  return c.out;
}

std::string checkReplyHeader(const char* hdr, size_t maxBody, uint32_t* len) {
  uint32_t magic;
  std::memcpy(&magic, hdr, 4);
  std::memcpy(len, hdr + 8, 4);
  if (magic != kMagic || *len > maxBody) return "malformed response";
  return "";
}

void decodeStoreReply(uint8_t cmd, const std::string& reply) {
  if (reply.size() < kHeader) throw RemoteError("short reply");
  uint32_t len;
  if (!checkReplyHeader(reply.data(), (1u << 20) + kKeyOverhead, &len).empty()) throw RemoteError("malformed");
  if (reply.size() - kHeader < len) throw RemoteError("truncated");
  Reader r{reply.data() + kHeader, len};
  if (reply[6] != 0) return;  // an error text
  try {
    switch (cmd) {
      case kGet: case kCas: r.bytes(); break;
      case kAdd: case kNumKeys: r.i64(); break;
      case kCheck: case kDelete: r.u8(); break;
      case kHello: r.str(); r.str(); break;
      default: break;
    }
  } catch (const ProtocolError& e) {
    throw RemoteError(std::string("malformed reply: ") + e.what());
  }
}

}  // namespace detail

TcpStoreServer::TcpStoreServer(const std::string& host, int port, size_t maxValueBytes, std::string secret)
    : impl_(new Impl) {
  impl_->maxBody = maxValueBytes + kKeyOverhead;
  impl_->secret = std::move(secret);
  impl_->listenFd = internal::listenOn(host, port, &impl_->port);
  internal::setNonBlocking(impl_->listenFd, true);
  impl_->wakeFd = eventfd(0, EFD_CLOEXEC);
  impl_->thread = std::thread([this] { impl_->loop(); });
  ACCL_INFO("STORE", "store server listening on " << (host.empty() ? "*" : host) << ":" << impl_->port
                                                  << (impl_->secret.empty() ? "" : " (clients prove the shared secret)"));
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop = true;
  uint64_t one = 1;
  ssize_t ignored = write(impl_->wakeFd, &one, sizeof(one));
  (void)ignored;
  impl_->thread.join();
  for (auto& [fd, c] : impl_->conns) ::close(fd);
  ::close(impl_->listenFd);
  ::close(impl_->wakeFd);
}

int TcpStoreServer::port() const { return impl_->port; }
size_t TcpStoreServer::numClients() const { return impl_->clients; }

// ---------------------------------------------------------------- client

struct TcpStore::Impl {
  std::string host;
  int port = 0;
  size_t maxValue = 0;
  std::unique_ptr<TcpStoreServer> server;
  // Idle connections. A request takes one (or opens one) and holds it only for
  // its own duration, so a blocking wait() on one thread never delays set() on another.
  std::mutex mu;
  std::vector<int> idle;

  std::string secret;

  std::string where() const { return "store server " + host + ":" + std::to_string(port); }

  // One request and its response on `fd`: the body, with the status in
  // *status. A server that refused and closed is asked why.
  std::string exchange(int fd, uint8_t cmd, const std::string& body, internal::Clock::time_point deadline,
                       const std::string& what, size_t maxBody, uint8_t* status) {
    std::string f = frame(cmd, body);
    try {
      internal::sendAll(fd, f.data(), f.size(), deadline, where());
    } catch (const RemoteError&) {
      std::string reason = readRefusal(fd);
      if (reason.empty()) throw;
      throw RemoteError("accl: " + where() + " refused " + what + ": " + reason);
    }
    char hdr[kHeader];
    internal::recvAll(fd, hdr, kHeader, deadline, where());
    uint32_t len;
    if (!detail::checkReplyHeader(hdr, maxBody, &len).empty())
      throw RemoteError("accl: " + where() + " sent a malformed response");
    std::string resp(len, '\0');
    internal::recvAll(fd, resp.data(), len, deadline, where());
    *status = static_cast<uint8_t>(hdr[6]);
    return resp;
  }

  // The handshake's exchanges: anything but ok is a refusal.
  std::string handshake(int fd, uint8_t cmd, const std::string& body, internal::Clock::time_point deadline) {
    uint8_t status = 0;
    std::string resp = exchange(fd, cmd, body, deadline, "the secret handshake", 65536, &status);
    if (status != 0) throw RemoteError("accl: " + where() + " refused the secret handshake: " + resp);
    return resp;
  }

  // A new connection, authenticated when a secret is set: the server proves
  // the secret first (so nothing is sent to a server that does not have it),
  // then this client.
  int open(internal::Clock::time_point deadline) {
    int fd = internal::connectTo(host, port, deadline);
    if (secret.empty()) return fd;
    try {
      std::string nc = detail::randomNonce();
      Writer hello;
      hello.str(nc);
      std::string resp = handshake(fd, kHello, hello.buf, deadline);
      Reader r{resp.data(), resp.size()};
      std::string ns = r.str();
      std::string proof = r.str();
      if (ns.size() != detail::kNonceBytes || !detail::sameMac(proof, detail::storeMac(secret, "accl-store server", nc, ns)))
        throw RemoteError("accl: " + where() + " does not know ACCL_STORE_SECRET (its proof is wrong): not this "
                          "job's store, or its secret differs");
      Writer auth;
      auth.str(detail::storeMac(secret, "accl-store client", ns, nc));
      handshake(fd, kAuth, auth.buf, deadline);
      return fd;
    } catch (...) {
      ::close(fd);
      throw;
    }
  }

  ~Impl() {
    for (int fd : idle) ::close(fd);
  }

  int take(internal::Clock::time_point deadline) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!idle.empty()) {
        int fd = idle.back();
        idle.pop_back();
        return fd;
      }
    }
    return open(deadline);
  }

  void giveBack(int fd) {
    std::lock_guard<std::mutex> lk(mu);
    idle.push_back(fd);
  }

  // After a failed send: the error frame the server sent before closing, if any.
  std::string readRefusal(int fd) {
    try {
      auto deadline = internal::Clock::now() + std::chrono::seconds(1);
      char hdr[kHeader];
      internal::recvAll(fd, hdr, kHeader, deadline, where());
      uint32_t magic, len;
      std::memcpy(&magic, hdr, 4);
      std::memcpy(&len, hdr + 8, 4);
      if (magic != kMagic || hdr[6] == 0 || len > 65536) return "";
      std::string resp(len, '\0');
      internal::recvAll(fd, resp.data(), len, deadline, where());
      return resp;
    } catch (const Error&) {
      return "";
    }
  }

  // Sends one request and returns the response body; bounded by `timeout`.
  std::string request(uint8_t cmd, const std::string& body, std::chrono::milliseconds timeout,
                      const std::string& what) {
    auto deadline = internal::Clock::now() + timeout;
    int fd = -1;
    try {
      fd = take(deadline);
      uint8_t status = 0;
      std::string resp = exchange(fd, cmd, body, deadline, what, maxValue + kKeyOverhead, &status);
      if (status == kStatusInvalid) {
        giveBack(fd);
        throw InvalidArgument(resp);
      }
      if (status != 0) throw RemoteError("accl: " + where() + " refused " + what + ": " + resp);
      giveBack(fd);
      return resp;
    } catch (const InvalidArgument&) {
      throw;
    } catch (const Timeout&) {
      if (fd >= 0) ::close(fd);  // the reply may still come; never reuse this stream
      throw Timeout("accl TcpStore: timed out after " + std::to_string(timeout.count()) +
                    " ms on " + what + " at " + where());
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
  }
};

TcpStore::TcpStore(const std::string& host, const TcpStoreOptions& opts) : impl_(new Impl) {
  timeout_ = opts.timeout;
  impl_->host = host;
  impl_->port = opts.port;
  impl_->maxValue = opts.maxValueBytes;
  impl_->secret = opts.secret.empty() ? detail::configuredStoreSecret() : opts.secret;
  if (opts.isServer) {
    std::string bind = opts.bindAddress.empty() ? Config::get().storeBind : opts.bindAddress;
    impl_->server.reset(new TcpStoreServer(internal::storeBindAddress(host, bind), opts.port, opts.maxValueBytes,
                                           impl_->secret));
    impl_->port = impl_->server->port();
  } else if (opts.port <= 0 || opts.port > 65535) {
    throw InvalidArgument("accl TcpStore: invalid port " + std::to_string(opts.port) +
                          "; accepted: 1..65535 (0 only with isServer)");
  }
  // Connect now so that an unreachable server (or a refused secret) is
  // reported at construction.
  impl_->giveBack(impl_->open(internal::Clock::now() + timeout_));
}

TcpStore::~TcpStore() = default;

int TcpStore::port() const { return impl_->port; }

static void checkValue(const Bytes& v, size_t max) {
  if (v.size() > max)
    throw InvalidArgument("accl TcpStore: value of " + std::to_string(v.size()) +
                          " bytes exceeds the limit of " + std::to_string(max) + " bytes");
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  checkValue(value, impl_->maxValue);
  Writer w;
  w.str(key);
  w.bytes(value);
  impl_->request(kSet, w.buf, timeout_, "set(" + key + ")");
}

Bytes TcpStore::get(const std::string& key) {
  Writer w;
  w.str(key);
  std::string resp = impl_->request(kGet, w.buf, timeout_, "get(" + key + ")");
  Reader r{resp.data(), resp.size()};
  return r.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer w;
  w.str(key);
  w.i64(delta);
  std::string resp = impl_->request(kAdd, w.buf, timeout_, "add(" + key + ")");
  Reader r{resp.data(), resp.size()};
  return r.i64();
}

Bytes TcpStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  checkValue(desired, impl_->maxValue);
  Writer w;
  w.str(key);
  w.bytes(expected);
  w.bytes(desired);
  std::string resp = impl_->request(kCas, w.buf, timeout_, "compareSet(" + key + ")");
  Reader r{resp.data(), resp.size()};
  return r.bytes();
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer w;
  w.u32(static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  std::string resp = impl_->request(kCheck, w.buf, timeout_, "check" + detail::joinKeys(keys));
  return !resp.empty() && resp[0] == 1;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Writer w;
  w.u32(static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  impl_->request(kWait, w.buf, timeout, "wait" + detail::joinKeys(keys));
}

bool TcpStore::deleteKey(const std::string& key) {
  Writer w;
  w.str(key);
  std::string resp = impl_->request(kDelete, w.buf, timeout_, "deleteKey(" + key + ")");
  return !resp.empty() && resp[0] == 1;
}

int64_t TcpStore::numKeys() {
  std::string resp = impl_->request(kNumKeys, "", timeout_, "numKeys()");
  Reader r{resp.data(), resp.size()};
  return r.i64();
}

}  // namespace accl
