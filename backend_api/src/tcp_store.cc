// TcpStore: a poll-driven server thread and a blocking client.
//
// Frame (both directions): u32 magic | u16 version | u8 code | u8 0 | u32 body length | body.
// Request code = command; response code = status (0 ok, 1 error text).
// Strings in bodies are u32 length + bytes. A request that is malformed, of an
// unknown version or larger than the limit closes that connection (after an
// error response where possible) and is logged; other clients are unaffected.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/logging.h"
#include "accl/store.h"
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

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCas, kCheck, kWait, kDelete, kNumKeys };

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

struct TcpStoreServer::Impl {
  int listenFd = -1;
  int wakeFd = -1;
  int port = 0;
  size_t maxBody = 0;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<size_t> clients{0};

  struct Client {
    int fd;
    std::string in;
    std::string out;
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
    ACCL_WARN("STORE", "store server: dropping client fd " << c.fd << ": " << why);
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
          v = (it == data.end() ? 0 : detail::parseCounter(key, it->second)) + delta;
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
      }
      c.in.erase(0, kHeader + len);
    }
  }

  void closeClient(int fd) {
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
          int fd = accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          internal::setNoDelay(fd);
          conns[fd] = Client{fd, "", "", false};
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

TcpStoreServer::TcpStoreServer(const std::string& host, int port, size_t maxValueBytes)
    : impl_(new Impl) {
  impl_->maxBody = maxValueBytes + kKeyOverhead;
  impl_->listenFd = internal::listenOn(host, port, &impl_->port);
  internal::setNonBlocking(impl_->listenFd, true);
  impl_->wakeFd = eventfd(0, EFD_CLOEXEC);
  impl_->thread = std::thread([this] { impl_->loop(); });
  ACCL_INFO("STORE", "store server listening on " << (host.empty() ? "*" : host) << ":" << impl_->port);
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

  std::string where() const { return "store server " + host + ":" + std::to_string(port); }

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
    return internal::connectTo(host, port, deadline);
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
      std::string f = frame(cmd, body);
      try {
        internal::sendAll(fd, f.data(), f.size(), deadline, where());
      } catch (const RemoteError&) {
        // The server may have refused the request and said why before closing.
        std::string reason = readRefusal(fd);
        if (reason.empty()) throw;
        throw RemoteError("accl: " + where() + " refused " + what + ": " + reason);
      }
      char hdr[kHeader];
      internal::recvAll(fd, hdr, kHeader, deadline, where());
      uint32_t magic, len;
      std::memcpy(&magic, hdr, 4);
      std::memcpy(&len, hdr + 8, 4);
      if (magic != kMagic || len > maxValue + kKeyOverhead)
        throw RemoteError("accl: " + where() + " sent a malformed response");
      std::string resp(len, '\0');
      internal::recvAll(fd, resp.data(), len, deadline, where());
      if (hdr[6] == kStatusInvalid) {
        giveBack(fd);
        throw InvalidArgument(resp);
      }
      if (hdr[6] != 0) throw RemoteError("accl: " + where() + " refused " + what + ": " + resp);
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
  if (opts.isServer) {
    impl_->server.reset(new TcpStoreServer("", opts.port, opts.maxValueBytes));
    impl_->port = impl_->server->port();
  } else if (opts.port <= 0 || opts.port > 65535) {
    throw InvalidArgument("accl TcpStore: invalid port " + std::to_string(opts.port) +
                          "; accepted: 1..65535 (0 only with isServer)");
  }
  // Connect now so that an unreachable server is reported at construction.
  impl_->giveBack(internal::connectTo(host, impl_->port, internal::Clock::now() + timeout_));
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
