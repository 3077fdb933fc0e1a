#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <thread>

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
