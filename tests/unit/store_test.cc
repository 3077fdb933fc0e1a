#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/store.h"

using namespace accl;
using namespace std::chrono_literals;

namespace {

// The same behaviour is expected of every store.
void exerciseStore(Store& s) {
  s.set("a", toBytes("1"));
  EXPECT_EQ(toString(s.get("a")), "1");
  s.set("a", toBytes("22"));
  EXPECT_EQ(toString(s.get("a")), "22");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_TRUE(s.check({"a", "n"}));
  EXPECT_FALSE(s.check({"a", "missing"}));
  EXPECT_EQ(toString(s.compareSet("c", {}, toBytes("x"))), "x");
  EXPECT_EQ(toString(s.compareSet("c", toBytes("wrong"), toBytes("y"))), "x");
  EXPECT_EQ(toString(s.compareSet("c", toBytes("x"), toBytes("y"))), "y");
  EXPECT_TRUE(s.deleteKey("c"));
  EXPECT_FALSE(s.deleteKey("c"));
  EXPECT_GE(s.numKeys(), 2);
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31);
  s.set("big", big);
  EXPECT_EQ(s.get("big"), big);
  s.set("text", toBytes("abc"));
  EXPECT_THROW(s.add("text", 1), InvalidArgument);
  // A counter never wraps (found by fuzz_store_server: signed overflow), and
  // a refused add leaves it as it was.
  EXPECT_EQ(s.add("max", INT64_MAX), INT64_MAX);
  EXPECT_THROW(s.add("max", 1), InvalidArgument);
  EXPECT_EQ(s.add("max", -1), INT64_MAX - 1);
  EXPECT_EQ(s.add("min", INT64_MIN), INT64_MIN);
  EXPECT_THROW(s.add("min", -1), InvalidArgument);

  // wait() blocks until another thread sets the key.
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    s.set("late", toBytes("ok"));
  });
  s.wait({"late"}, 10s);
  t.join();
  EXPECT_EQ(toString(s.get("late")), "ok");

  // A missing key times out with a message naming it.
  auto start = std::chrono::steady_clock::now();
  try {
    s.wait({"never"}, 200ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  s.setTimeout(200ms);
  EXPECT_THROW(s.get("never"), Timeout);
  s.setTimeout(Store::kDefaultTimeout);
}

std::string tempPath(const char* name) {
  return std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/accl-test-" + name + "-" +
         std::to_string(getpid());
}

}  // namespace

TEST(HashStore, Semantics) {
  HashStore s;
  exerciseStore(s);
}

TEST(FileStore, Semantics) {
  auto path = tempPath("fs");
  unlink(path.c_str());
  FileStore s(path);
  exerciseStore(s);
  unlink(path.c_str());
}

TEST(FileStore, AtomicAddAcrossProcesses) {
  auto path = tempPath("fs-procs");
  unlink(path.c_str());
  const int procs = 4, adds = 100;
  std::vector<pid_t> pids;
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      FileStore s(path);
      for (int i = 0; i < adds; ++i) s.add("counter", 1);
      s.set("done" + std::to_string(p), toBytes("1"));
      _exit(0);
    }
    pids.push_back(pid);
  }
  FileStore s(path);
  std::vector<std::string> keys;
  for (int p = 0; p < procs; ++p) keys.push_back("done" + std::to_string(p));
  s.wait(keys, 60s);
  for (pid_t pid : pids) {
    int st;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  EXPECT_EQ(s.add("counter", 0), procs * adds);
  unlink(path.c_str());
}

TEST(PrefixStore, IsolatesKeys) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", toBytes("1"));
  b.set("k", toBytes("2"));
  EXPECT_EQ(toString(a.get("k")), "1");
  EXPECT_EQ(toString(b.get("k")), "2");
  EXPECT_EQ(toString(base->get("a/k")), "1");
  EXPECT_FALSE(a.check({"other"}));
  exerciseStore(a);
}

TEST(TcpStore, SemanticsWithServerInProcess) {
  TcpStoreOptions o;
  o.isServer = true;
  TcpStore server("127.0.0.1", o);
  TcpStoreOptions c;
  c.port = server.port();
  TcpStore client("127.0.0.1", c);
  exerciseStore(client);
  EXPECT_EQ(toString(server.get("a")), "22") << "server and client see one map";
}

TEST(TcpStore, StandaloneServerServesHundredsOfClients) {
  TcpStoreServer server("127.0.0.1", 0);
  const int clients = 300;
  std::vector<std::unique_ptr<TcpStore>> stores;
  TcpStoreOptions o;
  o.port = server.port();
  for (int i = 0; i < clients; ++i) stores.emplace_back(new TcpStore("127.0.0.1", o));
  // Connections complete in the kernel before the server accepts them.
  for (int i = 0; i < 500 && server.numClients() < static_cast<size_t>(clients); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server.numClients(), static_cast<size_t>(clients));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = t; i < clients; i += 10) {
          stores[i]->add("arrived", 1);
          stores[i]->wait({"go"}, 30s);  // all park on the server at once
        }
      } catch (...) {
        failures++;
      }
    });
  // Wait until the first client of each thread is parked, then release all.
  while (stores[0]->add("arrived", 0) < 10) std::this_thread::sleep_for(1ms);
  stores[0]->set("go", toBytes("1"));
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(stores[0]->add("arrived", 0), clients);
}

namespace {
// Sends raw bytes to the server; returns what it answered before closing.
std::string rawExchange(int port, const std::string& bytes) {
  auto deadline = internal::Clock::now() + 5s;
  int fd = internal::connectTo("127.0.0.1", port, deadline);
  internal::sendAll(fd, bytes.data(), bytes.size(), deadline, "server");
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) break;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}
std::string header(uint32_t magic, uint16_t version, uint8_t cmd, uint32_t len) {
  std::string h(12, '\0');
  std::memcpy(&h[0], &magic, 4);
  std::memcpy(&h[4], &version, 2);
  h[6] = static_cast<char>(cmd);
  std::memcpy(&h[8], &len, 4);
  return h;
}
}  // namespace

TEST(TcpStore, ServerRefusesGarbageAndOversizedRequestsAndKeepsServing) {
  TcpStoreServer server("127.0.0.1", 0, 1 << 20);
  TcpStoreOptions o;
  o.port = server.port();
  TcpStore good("127.0.0.1", o);
  good.set("before", toBytes("1"));

  std::string random;
  for (int i = 0; i < 64; ++i) random.push_back(static_cast<char>(i * 37 + 11));
  EXPECT_NE(rawExchange(server.port(), random).find("bad magic"), std::string::npos);
  EXPECT_NE(rawExchange(server.port(), header(0x41435354, 1, 1, 0x7fffffff)).find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(rawExchange(server.port(), header(0x41435354, 9, 1, 0)).find("version"), std::string::npos);
  // A body whose inner string length points past its end.
  std::string body(4, '\0');
  uint32_t bogus = 1000;
  std::memcpy(&body[0], &bogus, 4);
  EXPECT_NE(rawExchange(server.port(), header(0x41435354, 1, 2, 4) + body).find("malformed"), std::string::npos);
  EXPECT_NE(rawExchange(server.port(), header(0x41435354, 1, 99, 0)).find("unknown command"), std::string::npos);

  // A value over the server's limit is refused with the limit in the message...
  try {
    good.set("huge", Bytes(2 << 20));
    ADD_FAILURE() << "oversized set accepted";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
  // ...and one over the client's own limit is not even sent.
  TcpStoreOptions small = o;
  small.maxValueBytes = 1000;
  TcpStore limited("127.0.0.1", small);
  EXPECT_THROW(limited.set("big", Bytes(1001)), InvalidArgument);
  EXPECT_EQ(toString(good.get("before")), "1");
  good.set("after", toBytes("2"));
  EXPECT_EQ(toString(good.get("after")), "2");
}

TEST(TcpStore, ClientTimesOutWhenNoServerListens) {
  int port = 0;
  int fd = internal::listenOn("127.0.0.1", 0, &port);
  close(fd);  // the port is now closed
  TcpStoreOptions o;
  o.port = port;
  o.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", o), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(TcpStore, TimedOutGetLeavesClientUsable) {
  TcpStoreOptions o;
  o.isServer = true;
  o.timeout = 200ms;
  TcpStore s("127.0.0.1", o);
  EXPECT_THROW(s.get("absent"), Timeout);
  s.set("absent", toBytes("now"));
  EXPECT_EQ(toString(s.get("absent")), "now");
}

namespace {

// A TCP relay between a client and the store server that records every byte
// in both directions (what someone on the network would see).
struct RecordingRelay {
  int listenFd = -1, port = 0, target = 0;
  std::string seen;
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::thread thread;

  explicit RecordingRelay(int targetPort) : target(targetPort) {
    listenFd = internal::listenOn("127.0.0.1", 0, &port);
    thread = std::thread([this] { run(); });
  }
  ~RecordingRelay() {
    stop = true;
    shutdown(listenFd, SHUT_RDWR);
    thread.join();
    close(listenFd);
  }
  void run() {
    std::vector<std::pair<int, int>> pairs;
    while (!stop) {
      std::vector<pollfd> fds{{listenFd, POLLIN, 0}};
      for (auto& [a, b] : pairs) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int c = accept(listenFd, nullptr, nullptr);
        if (c >= 0) pairs.push_back({c, internal::connectTo("127.0.0.1", target, internal::Clock::now() + 5s)});
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        auto& pr = pairs[(i - 1) / 2];
        int from = fds[i].fd, to = from == pr.first ? pr.second : pr.first;
        char buf[65536];
        ssize_t n = recv(from, buf, sizeof(buf), 0);
        if (n > 0) {
          std::lock_guard<std::mutex> lk(mu);
          seen.append(buf, static_cast<size_t>(n));
          ssize_t ignored = send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
          (void)ignored;
        } else if (n == 0) {
          shutdown(to, SHUT_WR);
        }
      }
    }
    for (auto& [a, b] : pairs) {
      close(a);
      close(b);
    }
  }
};

}  // namespace

TEST(TcpStore, SharedSecretIsProvedNeverSentAndRefusedWithoutIt) {
  const std::string secret = "k9-store-secret-for-this-test-Zq";
  TcpStoreServer server("127.0.0.1", 0, 1 << 20, secret);
  RecordingRelay relay(server.port());

  TcpStoreOptions o;
  o.port = relay.port;
  o.secret = secret;
  {
    TcpStore client("127.0.0.1", o);
    client.set("k", toBytes("v"));
    EXPECT_EQ(toString(client.get("k")), "v");
    EXPECT_EQ(client.add("n", 3), 3);
  }
  {
    std::lock_guard<std::mutex> lk(relay.mu);
    EXPECT_GT(relay.seen.size(), 100u);  // the handshake and the requests went through the relay
    EXPECT_EQ(relay.seen.find(secret), std::string::npos) << "the secret crossed the network";
    EXPECT_EQ(relay.seen.find(secret.substr(0, 12)), std::string::npos);
  }

  // No secret: refused, with the reason.
  TcpStoreOptions none;
  none.port = server.port();
  none.timeout = 5s;
  none.secret = "";
  try {
    TcpStore client("127.0.0.1", none);
    client.get("k");
    ADD_FAILURE() << "a client without the secret was served";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("requires a secret"), std::string::npos) << e.what();
  }
  // Another secret: the server's proof does not verify, and nothing is asked of it.
  TcpStoreOptions wrong = none;
  wrong.secret = "another-secret";
  try {
    TcpStore client("127.0.0.1", wrong);
    ADD_FAILURE() << "a client with another secret connected";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("does not know ACCL_STORE_SECRET"), std::string::npos) << e.what();
  }
  // A client with a secret against a server without one is told so.
  TcpStoreServer open("127.0.0.1", 0, 1 << 20);
  TcpStoreOptions toOpen = wrong;
  toOpen.port = open.port();
  try {
    TcpStore client("127.0.0.1", toOpen);
    ADD_FAILURE() << "a secret handshake with a server without a secret succeeded";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("runs without a secret"), std::string::npos) << e.what();
  }
  // The server kept serving its own clients throughout.
  TcpStoreOptions again = o;
  again.port = server.port();
  TcpStore client("127.0.0.1", again);
  EXPECT_EQ(toString(client.get("k")), "v");
}

TEST(TcpStore, ServerBindsTheAddressClientsUse) {
  EXPECT_EQ(internal::storeBindAddress("127.0.0.1", "auto"), "127.0.0.1");
  EXPECT_EQ(internal::storeBindAddress("127.0.0.1", "any"), "");
  EXPECT_EQ(internal::storeBindAddress("10.0.0.1", "192.0.2.7"), "192.0.2.7");  // explicit: as given
  // An address that is not this host's (TEST-NET-1): every interface.
  EXPECT_EQ(internal::storeBindAddress("192.0.2.1", "auto"), "");
  // A server bound to loopback is not reachable on another address of this host.
  for (auto& i : internal::listInterfaces()) {
    if (i.loopback || i.family != AF_INET) continue;
    TcpStoreOptions o;
    o.isServer = true;
    o.bindAddress = "127.0.0.1";
    TcpStore s("127.0.0.1", o);
    EXPECT_THROW(internal::connectTo(i.address, s.port(), internal::Clock::now() + 300ms), Error)
        << "the loopback-bound server answered on " << i.address;
    break;
  }
}

// Where something should listen already (a peer's published address),
// connections refused for `refusedFor` end the retries with
// ConnectionRefused, long before the deadline; without it they go on until
// the deadline (Timeout).
TEST(ConnectTo, RefusalsThatLastEndTheRetriesOnlyWhenAsked) {
  int port = 0;
  int fd = internal::listenOn("127.0.0.1", 0, &port);
  ::close(fd);  // nothing listens there now
  auto t0 = internal::Clock::now();
  EXPECT_THROW(internal::connectTo("127.0.0.1", port, t0 + 20s, 300ms), internal::ConnectionRefused);
  EXPECT_LT(internal::Clock::now() - t0, 5s) << "the refusals were retried until the deadline";
  try {
    internal::connectTo("127.0.0.1", port, internal::Clock::now() + 20s, 300ms);
  } catch (const internal::ConnectionRefused& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
  t0 = internal::Clock::now();
  EXPECT_THROW(internal::connectTo("127.0.0.1", port, t0 + 400ms), Timeout);
  EXPECT_GE(internal::Clock::now() - t0, 400ms);
}
