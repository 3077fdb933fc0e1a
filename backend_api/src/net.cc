#include "accl/internal/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <cstring>
#include <thread>

#include "accl/errors.h"
#include "accl/internal/name_spec.h"
#include "accl/logging.h"

namespace accl {
namespace internal {

int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > 1000000000 ? 1000000000 : static_cast<int>(left);
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int connectTo(const std::string& host, int port, Clock::time_point deadline, Clock::duration refusedFor) {
  std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw SystemError("accl: cannot resolve " + where + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
  int lastErr = 0;
  int delayMs = 10;
  Clock::time_point refusedSince{};  // of the refusals in a row (epoch: none)
  for (;;) {
    bool allRefused = true;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        lastErr = errno;
        continue;
      }
      setNonBlocking(fd, true);
      int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (r != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int pr = poll(&p, 1, std::max(1, std::min(msLeft(deadline), 1000)));
        if (pr == 1) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          r = err == 0 ? 0 : -1;
          errno = err;
        } else {
          r = -1;
          errno = ETIMEDOUT;
        }
      }
      if (r == 0) {
        setNonBlocking(fd, false);
        setNoDelay(fd);
        return fd;
      }
      lastErr = errno;
      allRefused = allRefused && lastErr == ECONNREFUSED;
      close(fd);
    }
    auto now = Clock::now();
    if (!allRefused) {
      refusedSince = Clock::time_point{};
    } else if (refusedSince == Clock::time_point{}) {
      refusedSince = now;
    } else if (refusedFor != Clock::duration::max() && now - refusedSince >= refusedFor) {
      throw ConnectionRefused(errnoMessage("accl: nothing listens at " + where + " (refused for " +
                                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - refusedSince).count()) +
                                               " s)",
                                           ECONNREFUSED));
    }
    if (now >= deadline)
      throw Timeout(errnoMessage("accl: could not connect to " + where + " before the deadline", lastErr));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(delayMs, msLeft(deadline) + 1)));
    delayMs = std::min(delayMs * 2, 500);
  }
}

int listenOn(const std::string& host, int port, int* boundPort) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw SystemError("accl: cannot resolve listen address " + host + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
  int lastErr = 0;
  // Prefer IPv6 wildcard (dual stack) when no host is given.
  for (int pass = 0; pass < 2; ++pass) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      if (host.empty() && (pass == 0) != (ai->ai_family == AF_INET6)) continue;
      int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        lastErr = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (ai->ai_family == AF_INET6) {
        int zero = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      }
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
        *boundPort = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
        return fd;
      }
      lastErr = errno;
      close(fd);
    }
    if (!host.empty()) break;
  }
  throw SystemError(errnoMessage("accl: cannot listen on " + (host.empty() ? std::string("*") : host) +
                                     ":" + std::to_string(port),
                                 lastErr));
}

void sendAll(int fd, const void* data, size_t len, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<const char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int pr = poll(&pfd, 1, msLeft(deadline));
    if (pr == 0) throw Timeout("accl: timed out sending to " + what);
    if (pr < 0) {
      if (errno == EINTR) continue;
      throw SystemError(errnoMessage("accl: poll while sending to " + what, errno));
    }
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw RemoteError(errnoMessage("accl: sending to " + what + " failed", errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

void recvAll(int fd, void* data, size_t len, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = poll(&pfd, 1, msLeft(deadline));
    if (pr == 0) throw Timeout("accl: timed out waiting for data from " + what);
    if (pr < 0) {
      if (errno == EINTR) continue;
      throw SystemError(errnoMessage("accl: poll while receiving from " + what, errno));
    }
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0) throw RemoteError("accl: " + what + " closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw RemoteError(errnoMessage("accl: receiving from " + what + " failed", errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

std::vector<Interface> listInterfaces() {
  std::vector<Interface> v4, v6;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return {};
  for (ifaddrs* i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    const void* addr = fam == AF_INET
                           ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    inet_ntop(fam, addr, buf, sizeof(buf));
    if (fam == AF_INET6 && std::strncmp(buf, "fe80", 4) == 0) continue;  // link-local needs scope
    Interface it{i->ifa_name, buf, fam, (i->ifa_flags & IFF_LOOPBACK) != 0};
    (fam == AF_INET ? v4 : v6).push_back(it);
  }
  freeifaddrs(ifa);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

bool matchInterfaceSpec(const std::string& spec, const std::string& name) {
  return NameSpec::parse(spec, /*withPorts=*/false).matches(name);
}

std::vector<Interface> selectInterfaces(const std::string& spec) {
  auto all = listInterfaces();
  std::vector<Interface> out;
  if (!spec.empty()) {
    for (auto& i : all)
      if (matchInterfaceSpec(spec, i.name)) out.push_back(i);
    return out;
  }
  for (auto& i : all)
    if (!i.loopback && i.name.compare(0, 6, "docker") != 0) out.push_back(i);
  if (out.empty())
    for (auto& i : all)
      if (i.loopback) out.push_back(i);
  return out;
}

std::string storeBindAddress(const std::string& host, const std::string& mode) {
  if (mode == "any") return "";
  if (mode != "auto") return mode;  // an address of this host; binding says so if it is not
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return "";
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
  auto locals = listInterfaces();
  bool literalLoopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = "";
    const void* a = ai->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
                                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    if (!inet_ntop(ai->ai_family, a, buf, sizeof(buf))) continue;
    std::string addr = buf;
    bool loopback = addr.rfind("127.", 0) == 0 || addr == "::1";
    if (loopback) {
      if (literalLoopback) return addr;
      // e.g. Debian's "127.0.1.1 <hostname>": other hosts reach this one elsewhere.
      ACCL_INFO("STORE", "store server: " << host << " resolves to " << addr
                                          << " here, a loopback address other hosts cannot reach; "
                                             "listening on every interface (ACCL_STORE_BIND sets it)");
      return "";
    }
    for (auto& i : locals)
      if (i.address == addr) return addr;
  }
  ACCL_INFO("STORE", "store server: " << host << " is not an address of this host; listening on every interface "
                                         "(ACCL_STORE_BIND sets it)");
  return "";
}

}  // namespace internal
}  // namespace accl
