// Failure behaviour of the accl backend with ranks as forked processes: a rank
// that never enters a collective, a rank killed mid-collective, mismatched
// collectives, and a listening socket fed garbage; and the eager rooted ops
// of one host (the root runs ahead: results, and a rank that dies meanwhile). Each runs over shared
// memory (one host) and over TCP only.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "accl/config.h"
#include "accl/registry.h"
#include "accl/store.h"

using namespace accl;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The ranks' stderr (dir/err<rank>) holds INFO lines: what each group chose,
// and what some tests look for. Set before anything reads the configuration,
// which the forked ranks inherit as read.
const bool kInfoLogs = [] { return setenv("ACCL_DEBUG", "INFO", 1) == 0; }();

struct Ctx {
  std::string dir;
  std::shared_ptr<Store> store;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The ranks' directories of the running test: removed when it passes, kept
// (and named) when it fails, for the ranks' stderr.
std::vector<std::string>& runDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

// A test parameter "TRANSPORTS+cma": with single copy within the host.
bool wantsSingleCopy(const std::string& transports) {
  return transports.size() > 4 && transports.compare(transports.size() - 4, 4, "+cma") == 0;
}

// Forks `n` ranks; each runs body(rank, pg, ctx) and writes what it wants
// checked to dir/out<rank> (its stderr goes to dir/err<rank>). Returns the
// exit statuses. A rank that does not exit within `limit` is killed and the
// test fails: the whole point is that nothing hangs.
std::vector<int> runRanks(int n, const std::string& transports,
                          const std::function<void(int, ProcessGroup&, Ctx&)>& body,
                          std::chrono::seconds limit = 60s, std::string* dirOut = nullptr,
                          const std::function<void(Ctx&)>& parent = nullptr,
                          const std::function<void(int)>& beforeGroup = nullptr) {
  char tmpl[] = "/tmp/accl-fault-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  runDirs().push_back(dir);
  if (dirOut) *dirOut = dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string err = dir + "/err" + std::to_string(r);
      freopen(err.c_str(), "w", stderr);
      // "...+cma": with single copy within the host (ACCL_SHM_CMA=on); else the default.
      std::string t = transports;
      bool cma = wantsSingleCopy(t);
      if (cma) t.resize(t.size() - 4);
      setenv("ACCL_TRANSPORTS", t.c_str(), 1);
      setenv("ACCL_SHM_CMA", cma ? "on" : "auto", 1);
      int code = 0;
      try {
        if (beforeGroup) beforeGroup(r);
        Ctx ctx{dir, std::make_shared<FileStore>(dir + "/store")};
        ProcessGroupOptions o;
        o.timeout = 20s;
        auto pg = createProcessGroup("accl", ctx.store, r, n, o);
        body(r, *pg, ctx);
      } catch (const std::exception& e) {
        std::ofstream(dir + "/out" + std::to_string(r), std::ios::app) << "setup failed: " << e.what() << "\n";
        code = 3;
      }
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  if (parent) {
    Ctx ctx{dir, std::make_shared<FileStore>(dir + "/store")};
    parent(ctx);
  }
  std::vector<int> status(n, -1);
  auto deadline = Clock::now() + limit;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[r] != -1) continue;
      int st;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --left;
      }
    }
    if (Clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (status[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &status[r], 0);
          ADD_FAILURE() << "rank " << r << " hung; killed after " << limit.count() << " s";
        }
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  return status;
}

std::string out(const std::string& dir, int r) { return slurp(dir + "/out" + std::to_string(r)); }

void record(Ctx& c, int r, const std::string& s) {
  std::ofstream(c.dir + "/out" + std::to_string(r), std::ios::app) << s << "\n";
}

// Runs `f`, records "<ErrorType>: message (N ms)" or "ok".
void recordOutcome(Ctx& c, int r, const std::function<void()>& f) {
  auto t0 = Clock::now();
  std::string s;
  try {
    f();
    s = "ok";
  } catch (const Timeout& e) {
    s = std::string("Timeout: ") + e.what();
  } catch (const RemoteError& e) {
    s = std::string("RemoteError: ") + e.what();
  } catch (const InvalidArgument& e) {
    s = std::string("InvalidArgument: ") + e.what();
  } catch (const std::exception& e) {
    s = std::string("other: ") + e.what();
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  record(c, r, s + " [" + std::to_string(ms) + " ms]");
}

// "ib": every rank its own host, verbs only. Needs an ACTIVE RDMA port (the
// soft-RoCE guest of tests/rdma); elsewhere these cases skip.
bool activeRdmaPort() {
  std::ifstream f;
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string st = slurp(std::string("/sys/class/infiniband/") + e->d_name + "/ports/1/state");
    any = any || st.find("ACTIVE") != std::string::npos;
  }
  closedir(d);
  return any;
}

void cleanRunDirs(bool failed) {
  for (const auto& d : runDirs()) {
    if (failed)
      std::cerr << "kept the ranks' files: " << d << "\n";
    else
      std::filesystem::remove_all(d);
  }
  runDirs().clear();
}

// Whether this process may use process_vm_readv at all (a seccomp profile,
// a container's default, may forbid it): single copy needs it.
bool singleCopyPermitted() {
  uint64_t src = 0x5ca1ab1e, dst = 0;
  iovec l{&dst, sizeof(dst)}, r{&src, sizeof(src)};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(sizeof(dst)) && dst == src;
}

void skipIfNoSingleCopy(const std::string& param) {
  if (wantsSingleCopy(param) && !singleCopyPermitted())
    GTEST_SKIP() << "process_vm_readv is not permitted here: no single copy to test";
}

class Fault : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "ib" && !activeRdmaPort())
      GTEST_SKIP() << "no RDMA device with an ACTIVE port (/sys/class/infiniband); tests/rdma runs these in a soft-RoCE guest";
    skipIfNoSingleCopy(GetParam());
  }
  void TearDown() override { cleanRunDirs(HasFailure()); }
};

// The eager rooted ops of one host's shared-memory domain: shared memory only,
// copying through the segment (the default) and by single copy.
class EagerShm : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { skipIfNoSingleCopy(GetParam()); }
  void TearDown() override { cleanRunDirs(HasFailure()); }
};

// Ranks 0 and 1 leave together: neither while the other still diagnoses.
void ranks01Done(int r, Ctx& c) {
  c.store->set("done" + std::to_string(r), toBytes("1"));
  c.store->wait({"done0", "done1"}, 60s);
}

// Ranks 0 and 1: an allreduce with a 2 s deadline that rank 2 never enters,
// its outcome recorded.
void allreduceRank2Skips(int r, ProcessGroup& pg, Ctx& c, float* x) {
  AllreduceOptions o;
  o.timeout = 2s;
  recordOutcome(c, r, [&] { pg.allreduce(Buffer(x, 4, DataType::Float32), o)->wait(); });
  ranks01Done(r, c);
}

// What a rank recorded, line by line (n lines; missing ones empty).
std::vector<std::string> recordedLines(const std::string& recorded, size_t n) {
  std::istringstream in(recorded);
  std::vector<std::string> lines(n);
  for (auto& l : lines) std::getline(in, l);
  return lines;
}

}  // namespace

TEST_P(Fault, RankThatNeverEntersIsNamedByEveryWaitingRank) {
  std::string dir;
  runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    float x[4] = {1, 2, 3, 4};
    pg.allreduce(Buffer(x, 4, DataType::Float32))->wait();  // #0: everyone
    if (r == 2) {  // alive, connected, but never enters #1
      c.store->wait({"done0", "done1"}, 60s);
      return;
    }
    allreduceRank2Skips(r, pg, c, x);
  }, 60s, &dir);
  for (int r = 0; r < 2; ++r) {
    std::string s = out(dir, r);
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + s);
    EXPECT_TRUE(s.rfind("Timeout:", 0) == 0 || s.rfind("RemoteError:", 0) == 0);
    EXPECT_NE(s.find("allreduce #1"), std::string::npos);
    EXPECT_NE(s.find("did not arrive: 2 ("), std::string::npos);
    EXPECT_EQ(s.find("no answer"), std::string::npos);  // rank 2 is alive and answers
    long ms = std::stol(s.substr(s.rfind('[') + 1));
    EXPECT_LT(ms, 2000 + 5000);  // the deadline plus the arrival query
  }
}

// A receive whose sender never sends: a bounded Work::wait() gives up with a
// Timeout, and the op itself times out at its deadline; both messages name
// the op (rank, peer, tag, size), formatted only then (the description is
// lazy). A send that went out at once completed while it was posted.
TEST_P(Fault, AReceiveNobodySendsToTimesOutNamingItsPeerTagAndSize) {
  std::string dir;
  runRanks(2, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    float x[3] = {1, 2, 3};
    if (r == 0) {
      RecvOptions o;
      o.tag = 41;
      o.timeout = 2s;
      auto w = pg.recv(Buffer(x, 3, DataType::Float32), 1, o);
      recordOutcome(c, r, [&] { w->wait(std::chrono::milliseconds(100)); });  // the wait's bound
      record(c, r, "description: " + w->description());
      recordOutcome(c, r, [&] { w->wait(); });  // the op's deadline
      // The peer's send, tag 42, does not match; taken now, it completes.
      o.tag = 42;
      o.timeout = 20s;
      recordOutcome(c, r, [&] { pg.recv(Buffer(x, 3, DataType::Float32), 1, o)->wait(); });
    } else {
      SendOptions o;
      o.tag = 42;
      auto w = pg.send(Buffer(x, 3, DataType::Float32), 0, o);
      record(c, r, std::string("send posted: ") + (w->isCompleted() ? "complete" : "pending"));
      w->wait();
    }
    ranks01Done(r, c);
  }, 60s, &dir);
  std::string s0 = out(dir, 0), s1 = out(dir, 1);
  SCOPED_TRACE("rank 0: " + s0 + "rank 1: " + s1);
  auto lines = recordedLines(s0, 4);
  const std::string &waitBound = lines[0], &description = lines[1], &deadline = lines[2], &matched = lines[3];
  const std::string what = "accl rank 0/2 accl: recv from rank 1 (tag 41, 12 bytes)";
  EXPECT_EQ(waitBound.rfind("Timeout: " + what + " did not complete within 100 ms", 0), 0u);
  EXPECT_EQ(description, "description: " + what);
  EXPECT_EQ(deadline.rfind("Timeout: " + what + " timed out waiting for rank 1", 0), 0u);
  long ms = std::stol(deadline.substr(deadline.rfind('[') + 1));
  EXPECT_GT(ms, 1500);  // the op's 2 s deadline (less the 100 ms already waited)
  EXPECT_LT(ms, 10000);
  EXPECT_EQ(matched.rfind("ok", 0), 0u);
  // Over shared memory the 12 bytes went into the ring at once.
  if (GetParam().rfind("shm,", 0) == 0) {
    EXPECT_NE(s1.find("send posted: complete"), std::string::npos);
  }
}

TEST_P(Fault, ASendRecvWhoseMessageNeverComesTimesOutNamingBothHalves) {
  // Rank 0's sendrecv: its send (tag 7) is received by rank 1; its receive
  // (tag 41) matches nothing. The one Work fails at the deadline, named with
  // both halves; the group stays usable.
  std::string dir;
  runRanks(2, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
    if (r == 0) {
      SendRecvOptions o;
      o.sendTag = 7;
      o.recvTag = 41;
      o.timeout = 2s;
      auto w = pg.sendrecv(Buffer(y, 3, DataType::Float32), 1, Buffer(x, 3, DataType::Float32), 1, o);
      record(c, r, "description: " + w->description());
      recordOutcome(c, r, [&] { w->wait(); });
      RecvOptions ro;
      ro.tag = 42;
      ro.timeout = 20s;
      recordOutcome(c, r, [&] { pg.recv(Buffer(x, 3, DataType::Float32), 1, ro)->wait(); });
      record(c, r, "got " + std::to_string(x[0]) + " " + std::to_string(x[2]));
    } else {
      RecvOptions ro;
      ro.tag = 7;
      recordOutcome(c, r, [&] { pg.recv(Buffer(x, 3, DataType::Float32), 0, ro)->wait(); });
      record(c, r, "got " + std::to_string(x[0]) + " " + std::to_string(x[2]));
      SendOptions so;
      so.tag = 42;
      x[0] = 7;
      x[2] = 9;
      pg.send(Buffer(x, 3, DataType::Float32), 0, so)->wait();
    }
    ranks01Done(r, c);
  }, 60s, &dir);
  std::string s0 = out(dir, 0), s1 = out(dir, 1);
  SCOPED_TRACE("rank 0: " + s0 + "rank 1: " + s1);
  auto lines = recordedLines(s0, 4);
  const std::string &description = lines[0], &deadline = lines[1], &matched = lines[2], &got = lines[3];
  const std::string what = "accl rank 0/2 accl: sendrecv: send to rank 1 (tag 7, 12 bytes), recv from rank 1 (tag 41)";
  EXPECT_EQ(description, "description: " + what);
  EXPECT_EQ(deadline.rfind("Timeout: " + what + " timed out waiting for rank 1", 0), 0u);
  long ms = std::stol(deadline.substr(deadline.rfind('[') + 1));
  EXPECT_GT(ms, 1500);
  EXPECT_LT(ms, 10000);
  EXPECT_EQ(matched.rfind("ok", 0), 0u);
  EXPECT_EQ(got, "got 7.000000 9.000000");
  EXPECT_EQ(s1.rfind("ok", 0), 0u);  // rank 1 received the send half
  EXPECT_NE(s1.find("got 4.000000 6.000000"), std::string::npos);
}

// Survivor `r` of a run where rank 2 was killed: it exited normally, its ops
// failed with a RemoteError that names rank 2 well within their 20 s
// timeout, or (mayComplete) they all completed.
void expectFailedNamingRank2(const std::string& dir, const std::vector<int>& st, int r, bool mayComplete) {
  std::string s = out(dir, r);
  SCOPED_TRACE("rank " + std::to_string(r) + ": " + s + " (status " + std::to_string(st[r]) + ", stderr: " +
               slurp(dir + "/err" + std::to_string(r)) + ")");
  EXPECT_TRUE(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0);  // exits normally
  if (mayComplete && s.rfind("ok", 0) == 0) return;
  EXPECT_EQ(s.rfind("RemoteError:", 0), 0u);
  EXPECT_NE(s.find("rank 2"), std::string::npos);
  long ms = std::stol(s.substr(s.rfind('[') + 1));
  EXPECT_LT(ms, 10000);
}

TEST_P(Fault, KilledRankMakesTheOthersFailWithRemoteError) {
  std::string dir;
  auto st = runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    std::vector<float> big(8 << 20, 1.0f);
    pg.allreduce(Buffer(big.data(), 16, DataType::Float32))->wait();
    if (r == 2) {
      auto w = pg.allreduce(Buffer(big.data(), big.size(), DataType::Float32));
      std::this_thread::sleep_for(30ms);
      kill(getpid(), SIGKILL);
    }
    AllreduceOptions o;
    o.timeout = 20s;
    recordOutcome(c, r, [&] {
      for (int i = 0; i < 50; ++i) pg.allreduce(Buffer(big.data(), big.size(), DataType::Float32), o)->wait();
    });
  }, 60s, &dir);
  EXPECT_TRUE(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  for (int r = 0; r < 2; ++r) expectFailedNamingRank2(dir, st, r, false);
}

// The same with the large rooted ops, which within a host copy between the
// ranks' buffers both ways (the root writes into the others' buffers in a
// broadcast, the others into the root's in a gather): a rank that dies in the
// middle is named by the gather's root, which needs its part. The other
// survivor either does the same or, where its part of every op never
// touches the dead rank (over tcp the broadcast's root may send to rank 1
// alone), completes its ops; neither hangs.
TEST_P(Fault, KilledRankFailsTheOthersLargeRootedOps) {
  std::string dir;
  auto st = runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    const size_t count = 4 << 20;
    std::vector<float> buf(count, 1.0f), all(3 * count, 0.0f);
    pg.allreduce(Buffer(buf.data(), 16, DataType::Float32))->wait();
    if (r == 2) {
      BroadcastOptions b;
      auto w = pg.broadcast(Buffer(buf.data(), count, DataType::Float32), b);
      std::this_thread::sleep_for(30ms);
      kill(getpid(), SIGKILL);
    }
    recordOutcome(c, r, [&] {
      for (int i = 0; i < 50; ++i) {
        BroadcastOptions b;
        b.root = 0;
        b.timeout = 20s;
        pg.broadcast(Buffer(buf.data(), count, DataType::Float32), b)->wait();
        GatherOptions g;
        g.root = 1;
        g.timeout = 20s;
        pg.gather(Buffer(buf.data(), count, DataType::Float32), Buffer(all.data(), all.size(), DataType::Float32), g)
            ->wait();
      }
    });
  }, 60s, &dir);
  EXPECT_TRUE(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  for (int r = 0; r < 2; ++r) expectFailedNamingRank2(dir, st, r, /*mayComplete=*/r == 0);
}

// Both ranks' recorded outcomes are a mismatch error, within 15 s, that
// names every string of `names`.
void expectBothNameAMismatch(const std::string& dir, const std::vector<std::string>& names) {
  for (int r = 0; r < 2; ++r) {
    std::string s = out(dir, r);
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + s);
    EXPECT_NE(s.find("mismatched collectives"), std::string::npos);
    EXPECT_TRUE(s.rfind("InvalidArgument:", 0) == 0 || s.rfind("RemoteError:", 0) == 0);
    for (auto& n : names) EXPECT_NE(s.find(n), std::string::npos) << n;
    long ms = std::stol(s.substr(s.rfind('[') + 1));
    EXPECT_LT(ms, 15000);
  }
}

TEST_P(Fault, MismatchedCollectivesNameBothSides) {
  struct Case {
    const char* name;
    std::function<std::shared_ptr<Work>(int, ProcessGroup&, float*)> op;
    const char* mine[2];
  };
  std::vector<Case> cases = {
      {"op", [](int r, ProcessGroup& pg, float* x) {
         return r == 0 ? pg.allreduce(Buffer(x, 16, DataType::Float32)) : pg.broadcast(Buffer(x, 16, DataType::Float32));
       }, {"allreduce #1 (16 x float32", "broadcast #1 (16 x float32"}},
      {"count", [](int r, ProcessGroup& pg, float* x) {
         return pg.allreduce(Buffer(x, r == 0 ? 16 : 32, DataType::Float32));
       }, {"allreduce #1 (16 x float32", "allreduce #1 (32 x float32"}},
      {"dtype", [](int r, ProcessGroup& pg, float* x) {
         return pg.allreduce(Buffer(x, 16, r == 0 ? DataType::Float32 : DataType::Int32));
       }, {"allreduce #1 (16 x float32", "allreduce #1 (16 x int32"}},
      {"root", [](int r, ProcessGroup& pg, float* x) {
         BroadcastOptions o;
         o.root = r;
         return pg.broadcast(Buffer(x, 16, DataType::Float32), o);
       }, {"root 0", "root 1"}},
      // Both sides only send (eager on one host): neither waits at this op.
      {"two senders", [](int r, ProcessGroup& pg, float* x) {
         if (r == 0) return pg.broadcast(Buffer(x, 16, DataType::Float32));
         return pg.gather(Buffer(x, 16, DataType::Float32), Buffer(x, 32, DataType::Float32));
       }, {"broadcast #1 (16 x float32", "gather #1 ("}},
      // Large enough to go through the shared segment's slots, whose readers
      // take the root's pieces as they land (16-24 KiB: above the eager cells,
      // below the sizes that ACCL_SHM_CMA=auto may give to single copy): each
      // rank takes the other for the root (both wait for a rank that does not
      // fill), and a receiver told of a smaller message than the root sends.
      // The same for a scatter, whose ranks take their parts as they land.
      {"root, each the other's, through the slots", [](int r, ProcessGroup& pg, float* x) {
         BroadcastOptions o;
         o.root = 1 - r;
         return pg.broadcast(Buffer(x, 4096, DataType::Float32), o);
       }, {"root 1", "root 0"}},
      {"count, through the slots", [](int r, ProcessGroup& pg, float* x) {
         return pg.broadcast(Buffer(x, r == 0 ? 6144 : 4096, DataType::Float32));
       }, {"broadcast #1 (6144 x float32", "broadcast #1 (4096 x float32"}},
      {"scatter root, each the other's, through the slots", [](int r, ProcessGroup& pg, float* x) {
         ScatterOptions o;
         o.root = 1 - r;
         return pg.scatter(Buffer(x, 6144, DataType::Float32), Buffer(x + 6144 + 16, 3072, DataType::Float32), o);
       }, {"root 1", "root 0"}},
      // A two-rank reduce through the slots (16-24 KiB: above the eager
      // cells, below single copy's sizes), whose root reduces the other's
      // pieces as they land: each rank takes the other for the root (both
      // only fill), a root told of a larger input than the other sends, and
      // a reduce's root against a broadcast's receiver (each waits on the
      // other to fill).
      {"reduce root, each the other's, through the slots", [](int r, ProcessGroup& pg, float* x) {
         ReduceOptions o;
         o.root = 1 - r;
         return pg.reduce(Buffer(x, 4096, DataType::Float32), Buffer(x + 8192, 4096, DataType::Float32), o);
       }, {"root 1", "root 0"}},
      {"reduce count, through the slots", [](int r, ProcessGroup& pg, float* x) {
         int n = r == 0 ? 6144 : 4096;
         return pg.reduce(Buffer(x, n, DataType::Float32), Buffer(x + 8192, n, DataType::Float32));
       }, {"reduce #1 (6144 x float32", "reduce #1 (4096 x float32"}},
      {"reduce against broadcast, through the slots", [](int r, ProcessGroup& pg, float* x) {
         if (r == 0) return pg.reduce(Buffer(x, 4096, DataType::Float32), Buffer(x + 8192, 4096, DataType::Float32));
         return pg.broadcast(Buffer(x, 4096, DataType::Float32));
       }, {"reduce #1 (4096 x float32", "broadcast #1 (4096 x float32"}},
  };
  for (auto& cs : cases) {
    SCOPED_TRACE(cs.name);
    std::string dir;
    runRanks(2, GetParam(), [&](int r, ProcessGroup& pg, Ctx& c) {
      std::vector<float> x(65536 + 16, 1.0f);
      pg.barrier()->wait();  // #0
      // A rank whose side of the op completes (a broadcast root only sends)
      // learns of the mismatch at its next op.
      recordOutcome(c, r, [&] {
        cs.op(r, pg, x.data())->wait();
        BarrierOptions bo;
        bo.timeout = 10s;
        pg.barrier(bo)->wait();
      });
    }, 60s, &dir);
    // Both sides' calls are named (what this rank and what the peer called).
    expectBothNameAMismatch(dir, {cs.mine[0], cs.mine[1]});
  }
}

namespace {
int connectRaw(const std::string& addrPort) {
  auto sp = addrPort.rfind(' ');
  std::string host = addrPort.substr(0, sp);
  int port = std::stoi(addrPort.substr(sp + 1));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
// True if the peer closes the connection within 3 s after `bytes` were sent.
bool droppedAfter(const std::string& addrPort, const std::string& bytes) {
  int fd = connectRaw(addrPort);
  if (fd < 0) return false;
  if (send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return true;
  }
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}
std::string hello(uint64_t token, int rank, uint32_t idLen, uint32_t magic = 0x4c434341) {
  struct {
    uint32_t magic;
    uint16_t version;
    uint8_t type, stream;
    uint64_t token;
    int32_t rank;
    uint32_t idLen;
  } h{magic, 1, 1, 0, token, rank, idLen};
  return std::string(reinterpret_cast<char*>(&h), sizeof(h));
}
}  // namespace

TEST_P(Fault, ListenerDropsGarbageForeignTokensAndOversizedLengths) {
  std::string dir;
  std::vector<bool> dropped;
  auto st = runRanks(2, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    c.store->set("up" + std::to_string(r), toBytes("1"));
    c.store->wait({"probed"}, 60s);
    // The job goes on.
    std::vector<double> x(1000, r + 1.0);
    recordOutcome(c, r, [&] {
      pg.allreduce(Buffer(x.data(), x.size(), DataType::Float64))->wait();
      if (x[999] != 3.0) throw std::runtime_error("wrong result");
    });
  }, 60s, &dir, [&](Ctx& c) {
    c.store->wait({"up0", "up1"}, 60s);
    std::string addr = toString(c.store->get("accl/tcp/0"));
    uint64_t token = std::stoull(toString(c.store->get("accl/token")));
    std::mt19937_64 rng(7);
    std::string garbage(256, '\0');
    for (auto& ch : garbage) ch = static_cast<char>(rng());
    dropped.push_back(droppedAfter(addr, garbage));                       // random bytes
    dropped.push_back(droppedAfter(addr, hello(token ^ 0x1234, 1, 4) + "abcd"));  // foreign job
    dropped.push_back(droppedAfter(addr, hello(token, 1, 1u << 30)));     // oversized length
    dropped.push_back(droppedAfter(addr, hello(token, 1, 4) + "abcd"));   // duplicate of a connected rank
    c.store->set("probed", toBytes("1"));
  });
  ASSERT_EQ(dropped.size(), 4u);
  for (size_t i = 0; i < dropped.size(); ++i) EXPECT_TRUE(dropped[i]) << "probe " << i << " was not dropped";
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0);
    EXPECT_EQ(out(dir, r).rfind("ok", 0), 0u) << out(dir, r);
  }
  std::string log = slurp(dir + "/err0");
  EXPECT_NE(log.find("bad magic number"), std::string::npos) << log;
  EXPECT_NE(log.find("job token does not match"), std::string::npos) << log;
  EXPECT_NE(log.find("exceeds 256"), std::string::npos) << log;
  EXPECT_NE(log.find("duplicate connection for rank 1"), std::string::npos) << log;
}


// The flight recorder on a timeout: each waiting rank writes its dump by
// itself, naming the op that failed and why; earlier ops are there, done, with
// their algorithm and transport. SIGUSR1 makes a live rank write one too.
TEST_P(Fault, TimeoutAndSigusr1WriteTheFlightRecorder) {
  std::string dir;
  runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    record(c, r, "pid " + std::to_string(getpid()));
    float x[4] = {1, 2, 3, 4};
    for (int i = 0; i < 3; ++i) pg.allreduce(Buffer(x, 4, DataType::Float32))->wait();  // #0-#2: everyone
    BroadcastOptions bo;
    bo.root = 1;
    pg.broadcast(Buffer(x, 4, DataType::Float32), bo)->wait();  // #3
    if (r == 2) {
      // Alive but never enters #4: it is asked for its dump instead.
      raise(SIGUSR1);
      c.store->wait({"done0", "done1"}, 60s);
      return;
    }
    allreduceRank2Skips(r, pg, c, x);
  }, 60s, &dir);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string traceDir = Config::get().traceDir;
  for (int r = 0; r < 3; ++r) {
    std::string o = out(dir, r);
    std::string pid = o.substr(4, o.find('\n') - 4);
    std::string path = traceDir + "/accl-trace-" + host + "-" + pid + ".json";
    // The SIGUSR1 dump is written by a thread of its own: give it a moment.
    for (int i = 0; i < 100 && slurp(path).empty(); ++i) std::this_thread::sleep_for(50ms);
    std::string t = slurp(path);
    SCOPED_TRACE("rank " + std::to_string(r) + " " + path + ":\n" + t.substr(0, 3000));
    ASSERT_FALSE(t.empty());
    EXPECT_NE(t.find("\"format\": \"accl-trace/1\""), std::string::npos);
    EXPECT_NE(t.find("\"backend\": \"accl\""), std::string::npos);
    EXPECT_NE(t.find("\"rank\": " + std::to_string(r)), std::string::npos);
    // Ops #0-#3 done, with how they ran.
    size_t firstDone = t.find("\"state\": \"done\"");
    EXPECT_NE(firstDone, std::string::npos);
    EXPECT_NE(t.find("\"op\": \"broadcast\""), std::string::npos);
    EXPECT_NE(t.find("\"root\": 1"), std::string::npos);
    EXPECT_EQ(t.find("\"algorithm\": \"\""), std::string::npos) << "an op without its algorithm";
    // The ranks share a host over shared memory, else each is its own host on tcp or ib.
    std::string transport = "\"transport\": \"" + (GetParam().rfind("shm,", 0) == 0 ? std::string("shm") : GetParam()) + "\"";
    EXPECT_NE(t.find(transport), std::string::npos);
    if (r == 2) {
      EXPECT_NE(t.find("\"reason\": \"SIGUSR1\""), std::string::npos);
      EXPECT_EQ(t.find("\"state\": \"failed\""), std::string::npos);
    } else {
      EXPECT_NE(t.find("\"reason\": \"an op failed: "), std::string::npos);
      size_t failed = t.find("\"state\": \"failed\"");
      ASSERT_NE(failed, std::string::npos);
      EXPECT_NE(t.find("\"seq\": 4", t.rfind("\"id\"", failed)), std::string::npos);
      EXPECT_NE(t.find("did not arrive: 2 (", failed), std::string::npos);
    }
    std::remove(path.c_str());
  }
}

// Small rooted ops between ranks of one host go eagerly: the side that only
// sends returns without waiting for the others (as Open MPI's eager messages
// do). Here the ranks that are not waited for hold back until the store says
// the other side has returned, so a rooted op that waited would time out.
TEST_P(EagerShm, SmallRootedOpsReturnOnTheSendingSideBeforeTheOthersCallThem) {
  std::string dir;
  runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    const size_t k = 100;
    std::vector<float> in(3 * k), out(3 * k, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r * 1000 + i);
    auto F = [](std::vector<float>& v, size_t n) { return Buffer(v.data(), n, DataType::Float32); };
    auto check = [&](bool ok, const char* what) {
      if (!ok) throw std::runtime_error(std::string("wrong result of ") + what);
    };
    recordOutcome(c, r, [&] {
      OpOptions quick;
      quick.timeout = 5s;
      // broadcast, root 0: ranks 1 and 2 call it only once root 0 returned.
      BroadcastOptions bo;
      static_cast<OpOptions&>(bo) = quick;
      bo.root = 0;
      std::vector<float> b = in;
      if (r != 0) c.store->wait({"bcast-returned"}, 10s);
      pg.broadcast(F(b, k), bo)->wait();
      if (r == 0) c.store->set("bcast-returned", toBytes("1"));
      for (size_t i = 0; i < k; ++i) check(b[i] == static_cast<float>(i), "broadcast");
      // scatter, root 1.
      ScatterOptions so;
      static_cast<OpOptions&>(so) = quick;
      so.root = 1;
      if (r != 1) c.store->wait({"scatter-returned"}, 10s);
      pg.scatter(F(in, 3 * k), F(out, k), so)->wait();
      if (r == 1) c.store->set("scatter-returned", toBytes("1"));
      for (size_t i = 0; i < k; ++i) check(out[i] == static_cast<float>(1000 + r * k + i), "scatter");
      // gather and reduce, root 2: it calls them only once ranks 0 and 1 returned.
      GatherOptions go;
      static_cast<OpOptions&>(go) = quick;
      go.root = 2;
      if (r == 2) c.store->wait({"gather-returned0", "gather-returned1"}, 10s);
      pg.gather(F(in, k), F(out, 3 * k), go)->wait();
      if (r != 2) c.store->set("gather-returned" + std::to_string(r), toBytes("1"));
      if (r == 2)
        for (size_t i = 0; i < 3 * k; ++i) check(out[i] == static_cast<float>((i / k) * 1000 + i % k), "gather");
      ReduceOptions ro;
      static_cast<OpOptions&>(ro) = quick;
      ro.root = 2;
      if (r == 2) c.store->wait({"reduce-returned0", "reduce-returned1"}, 10s);
      pg.reduce(F(in, k), F(out, k), ro)->wait();
      if (r != 2) c.store->set("reduce-returned" + std::to_string(r), toBytes("1"));
      if (r == 2)
        for (size_t i = 0; i < k; ++i) check(out[i] == static_cast<float>(3000 + 3 * i), "reduce");
      pg.barrier(BarrierOptions{})->wait();
    });
  }, 60s, &dir);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out(dir, r).substr(0, 2), "ok") << "rank " << r << ": " << out(dir, r);
}

// A root may run up to ShmDomain::kDepth - 1 (31) eager ops ahead of the
// ranks that receive. One that reaches a round its root has long passed
// still checks the root's op at that round: a mismatch there is named on
// both sides, not returned as another op's data. Here the root calls a
// scatter and then ten broadcasts, all before rank 1 calls anything; rank 1
// calls eleven broadcasts.
// Run with parts of 128 floats (512 B: the eager cells), of 16 (64 B: a
// broadcast in a box of two cache lines, the scatter's parts in one of three;
// kBoxBytes in shm.cc) and of 4 (16 B: boxes of one line), whose receivers
// look at the sender's box alone.
TEST_P(EagerShm, AReceiverFarBehindItsRootStillNamesAMismatch) {
  for (size_t k : {size_t(128), size_t(16), size_t(4)}) {
    SCOPED_TRACE(std::to_string(k) + " floats");
    std::string dir;
    runRanks(2, GetParam(), [k](int r, ProcessGroup& pg, Ctx& c) {
      std::vector<float> in(2 * k), out(k, -1.0f);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
      auto F = [](std::vector<float>& v, size_t n) { return Buffer(v.data(), n, DataType::Float32); };
      pg.barrier()->wait();  // #0
      recordOutcome(c, r, [&] {
        if (r == 0) {
          ScatterOptions so;
          so.timeout = 5s;
          pg.scatter(F(in, 2 * k), F(out, k), so)->wait();  // #1
          for (int i = 0; i < 10; ++i) {
            BroadcastOptions bo;
            bo.timeout = 5s;
            pg.broadcast(F(in, k), bo)->wait();  // #2 - #11: the root only sends
          }
          c.store->set("root-returned", toBytes("1"));
        } else {
          c.store->wait({"root-returned"}, 10s);
          for (int i = 0; i < 11; ++i) {
            BroadcastOptions bo;
            bo.timeout = 5s;
            pg.broadcast(F(out, k), bo)->wait();  // #1 - #11
          }
        }
        BarrierOptions bo;
        bo.timeout = 10s;
        pg.barrier(bo)->wait();
      });
    }, 60s, &dir);
    expectBothNameAMismatch(dir, {"scatter #1", "broadcast #1"});
  }
}

// At a round where both sides only send (a broadcast's root, a gather's
// non-root) neither checks the other, so a mismatch there first shows at a
// later round, where the two called the same op. Its check walks back to the
// round where the two parted and names those ops, not the later one. The
// senders of eager ops read their peers' progress only every few rounds, so
// a root also meets mismatches after the fact, and names them the same way.
TEST_P(EagerShm, AMismatchFoundRoundsLaterNamesTheOpsWhereTheRanksParted) {
  for (size_t k : {size_t(128), size_t(16), size_t(4)}) {  // the cells, boxes of two lines and of one (as above)
    SCOPED_TRACE(std::to_string(k) + " floats");
    std::string dir;
    runRanks(2, GetParam(), [k](int r, ProcessGroup& pg, Ctx& c) {
      std::vector<float> x(2 * 128, 1.0f);
      auto F = [&](size_t n) { return Buffer(x.data(), n, DataType::Float32); };
      pg.barrier()->wait();  // #0
      recordOutcome(c, r, [&] {
        BroadcastOptions bo;
        bo.timeout = 5s;
        for (int i = 0; i < 5; ++i) pg.broadcast(F(k), bo)->wait();  // #1 - #5
        // Rank 0 calls #6 only once rank 1 has returned from it: rank 1 then
        // first meets the mismatch at #7.
        if (r == 0) {
          c.store->wait({"r1-returned"}, 10s);
          pg.broadcast(F(k), bo)->wait();  // #6: the root only sends
        } else {
          GatherOptions go;
          go.timeout = 5s;
          pg.gather(F(k), Buffer(nullptr, 0, DataType::Float32), go)->wait();  // #6: a non-root only sends
          c.store->set("r1-returned", toBytes("1"));
        }
        for (int i = 0; i < 6; ++i) pg.broadcast(F(k), bo)->wait();  // #7 - #12: rank 1 receives
        BarrierOptions bar;
        bar.timeout = 10s;
        pg.barrier(bar)->wait();
      });
    }, 60s, &dir);
    expectBothNameAMismatch(dir, {"broadcast #6", "gather #6"});
  }
}

// Eager and lock-step ops in a random order (the same on every rank), roots
// rotating, sizes on both sides of the eager limit, with ranks that lag now
// and then, so that roots run ahead: every result is checked, and a slot
// reused too early would show as another op's data.
TEST_P(EagerShm, EagerAndLockStepOpsInARowKeepEveryResult) {
  std::string dir;
  const int n = 4;
  runRanks(n, GetParam(), [&](int r, ProcessGroup& pg, Ctx& c) {
    std::mt19937 order(12345), lag(777 + r);
    // Floats: 7 (28 B) and 13 (52 B) in boxes of one and of two lines, 40 (160 B)
    // in one of three for broadcast and reduce (gather's and scatter's 4 parts
    // of 13 fill a box of four lines, of 40 go in the cells), 250 in the
    // cells; 4096 = 16 KiB and 16384 = 64 KiB, the single-copy limits.
    const size_t sizes[] = {0, 1, 7, 13, 40, 250, 4096, 16384, 20000};
    std::vector<float> a, b;
    recordOutcome(c, r, [&] {
      for (int it = 0; it < 600; ++it) {
        int op = static_cast<int>(order() % 5), root = static_cast<int>(order() % n);
        size_t k = sizes[order() % 9];
        if (lag() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(lag() % 300));
        auto val = [&](int rank, size_t i) { return static_cast<float>((it * 7 + rank * 3 + i) % 1024); };
        a.assign(n * k + 1, 0.0f);
        b.assign(n * k + 1, -1.0f);
        for (size_t i = 0; i < n * k; ++i) a[i] = val(r, i);
        auto A = Buffer(a.data(), k, DataType::Float32), B = Buffer(b.data(), k, DataType::Float32);
        auto An = Buffer(a.data(), n * k, DataType::Float32), Bn = Buffer(b.data(), n * k, DataType::Float32);
        std::string bad;
        auto expect = [&](size_t i, float want) {
          if (bad.empty() && b[i] != want)
            bad = "op " + std::to_string(op) + " root " + std::to_string(root) + " k " + std::to_string(k) +
                  " at " + std::to_string(i) + ": " + std::to_string(b[i]) + " want " + std::to_string(want);
        };
        if (op == 0) {
          BroadcastOptions o;
          o.root = root;
          if (r == root) b = a;
          pg.broadcast(B, o)->wait();
          for (size_t i = 0; i < k; ++i) expect(i, val(root, i));
        } else if (op == 1) {
          ScatterOptions o;
          o.root = root;
          pg.scatter(An, B, o)->wait();
          for (size_t i = 0; i < k; ++i) expect(i, val(root, r * k + i));
        } else if (op == 2) {
          GatherOptions o;
          o.root = root;
          pg.gather(A, Bn, o)->wait();
          if (r == root)
            for (size_t i = 0; i < n * k; ++i) expect(i, val(static_cast<int>(i / k), i % k));
        } else if (op == 3) {
          ReduceOptions o;
          o.root = root;
          pg.reduce(A, B, o)->wait();
          if (r == root)
            for (size_t i = 0; i < k; ++i) expect(i, val(0, i) + val(1, i) + val(2, i) + val(3, i));
        } else {
          pg.allreduce(A, B)->wait();
          for (size_t i = 0; i < k; ++i) expect(i, val(0, i) + val(1, i) + val(2, i) + val(3, i));
        }
        if (!bad.empty()) throw std::runtime_error("iteration " + std::to_string(it) + ", " + bad);
      }
      pg.barrier(BarrierOptions{})->wait();
    });
  }, 120s, &dir);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out(dir, r).substr(0, 2), "ok") << "rank " << r << ": " << out(dir, r);
}

// Pins every thread of this process to `cpu`.
void pinProcess(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    if (sched_setaffinity(std::stoi(e.path().filename().string()), sizeof(one), &one) != 0)
      throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu) + ": " + std::strerror(errno));
}

// "N waits found a late local rank on this rank's CPU" from a rank's log (0 if absent).
long stackedWaits(const std::string& log) {
  const std::string tail = " waits found a late local rank on this rank's CPU";
  size_t at = log.find(tail);
  if (at == std::string::npos) return 0;
  size_t from = log.rfind(": ", at);
  return std::stol(log.substr(from + 2, at - from - 2));
}

// Ranks that each had a CPU when the group was made, and that the scheduler
// later runs on one CPU (here: every thread pinned there after set-up): a
// rank that waits for a late peer on its own CPU gives the CPU up at once
// instead of spinning first (ShmDomain::stackedOnMe), and says so at INFO
// once; every result stays right, sendrecv's too. Pinned to a CPU each from
// before the group is made, the same ops never find a peer on their CPU.
TEST_P(EagerShm, RanksMovedOntoOneCpuAfterSetUpGiveItUpWhileTheyWait) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs, so that the group is made with a CPU per rank";
  ASSERT_TRUE(kInfoLogs);
  const int iters = 200;
  for (bool oneCpu : {true, false}) {
    std::string dir;
    runRanks(2, GetParam(), [&](int r, ProcessGroup& pg, Ctx& c) {
      recordOutcome(c, r, [&] {
        if (oneCpu) pinProcess(cpus[0]);
        const size_t k = 32768;  // 128 KiB of floats: several rounds per op
        std::vector<float> a(k), b(k), s(2), t(2);
        for (int it = 0; it < iters; ++it) {
          for (size_t i = 0; i < k; ++i) a[i] = static_cast<float>((it + r * 5 + i) % 512);
          s[0] = static_cast<float>(r + it);
          s[1] = 1.0f;
          pg.allreduce(Buffer(a.data(), k, DataType::Float32), Buffer(b.data(), k, DataType::Float32))->wait();
          pg.allreduce(Buffer(s.data(), 2, DataType::Float32), Buffer(t.data(), 2, DataType::Float32))->wait();
          for (size_t i = 0; i < k; ++i)
            if (b[i] != static_cast<float>((it + i) % 512 + (it + 5 + i) % 512))
              throw std::runtime_error("iteration " + std::to_string(it) + ": element " + std::to_string(i) +
                                       " is " + std::to_string(b[i]));
          if (t[0] != static_cast<float>(1 + 2 * it) || t[1] != 2.0f)
            throw std::runtime_error("iteration " + std::to_string(it) + ": the 8 B allreduce is wrong");
          // Point-to-point: each sends its input to the other (the waiter's
          // poll of the rings, NetTransport::progressForWaiter).
          for (size_t n : {size_t(2), k}) {
            pg.sendrecv(Buffer(a.data(), n, DataType::Float32), 1 - r, Buffer(b.data(), n, DataType::Float32), 1 - r)
                ->wait();
            for (size_t i = 0; i < n; ++i)
              if (b[i] != static_cast<float>((it + (1 - r) * 5 + i) % 512))
                throw std::runtime_error("iteration " + std::to_string(it) + ": sendrecv of " + std::to_string(n) +
                                         " floats, element " + std::to_string(i) + " is " + std::to_string(b[i]));
          }
        }
      });
    }, 120s, &dir, nullptr, [&](int r) {
      if (!oneCpu) pinProcess(cpus[r]);
    });
    long found = 0;
    bool said = false;
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out(dir, r).substr(0, 2), "ok") << "one CPU " << oneCpu << ", rank " << r << ": " << out(dir, r);
      std::string log = slurp(dir + "/err" + std::to_string(r));
      found += stackedWaits(log);
      said = said || log.find("was last on this rank's CPU") != std::string::npos;
    }
    if (oneCpu) {
      EXPECT_TRUE(said) << "no rank said it found its peer on its CPU";
      // Nearly every op of the 400 has a rank wait for the other.
      EXPECT_GE(found, iters) << "waits that found the peer on the same CPU";
    } else {
      EXPECT_EQ(found, 0) << "waits that found the peer on the same CPU with a CPU per rank";
      EXPECT_FALSE(said);
    }
  }
}

// alltoallv where ranks' chunks lie on different sides of the shared-memory
// limits in one op: a rank whose chunks are small puts them in its slot with
// its layout, one whose chunks are larger does not (single copy, or the
// slots piece by piece beyond a slot's share); all must still agree on the
// path, and every result is checked. 2 ranks (a CPU each on a 2-core host)
// and 3 (sharing CPUs there: other limits).
TEST_P(EagerShm, AlltoallvWithRanksOnBothSidesOfTheLimitsKeepsEveryResult) {
  for (int n : {2, 3}) {
    std::string dir;
    runRanks(n, GetParam(), [&](int r, ProcessGroup& pg, Ctx& c) {
      std::mt19937 lag(99 + r);
      // floats: 0 to 560 KB (a slot's share for 2 ranks is 512 KiB)
      const size_t sizes[] = {0, 1, 7, 1000, 3000, 5000, 20000, 140000};
      std::vector<float> a, b;
      recordOutcome(c, r, [&] {
        for (int it = 0; it < 150; ++it) {
          // The whole matrix, the same on every rank: cnt[s][d] floats from s to d.
          std::mt19937 m(static_cast<unsigned>(it));
          std::vector<std::vector<size_t>> cnt(n, std::vector<size_t>(n));
          for (int s2 = 0; s2 < n; ++s2) {
            size_t base = sizes[m() % 8];
            for (int d = 0; d < n; ++d) cnt[s2][d] = (m() % 3 == 0) ? sizes[m() % 8] : base;
          }
          std::vector<size_t> sc(n), rc(n);
          size_t st = 0, rt = 0;
          for (int p = 0; p < n; ++p) sc[p] = cnt[r][p], rc[p] = cnt[p][r], st += sc[p], rt += rc[p];
          auto val = [&](int from, int to, size_t i) { return static_cast<float>((it * 13 + from * 5 + to * 3 + i) % 4096); };
          a.assign(st + 1, 0.0f);
          b.assign(rt + 1, -1.0f);
          for (int p = 0, off = 0; p < n; off += static_cast<int>(sc[p]), ++p)
            for (size_t i = 0; i < sc[p]; ++i) a[off + i] = val(r, p, i);
          if (lag() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(lag() % 300));
          pg.alltoallv(Buffer(a.data(), st, DataType::Float32), sc, Buffer(b.data(), rt, DataType::Float32), rc)->wait();
          size_t off = 0;
          for (int p = 0; p < n; off += rc[p], ++p)
            for (size_t i = 0; i < rc[p]; ++i)
              if (b[off + i] != val(p, r, i))
                throw std::runtime_error("iteration " + std::to_string(it) + ": from rank " + std::to_string(p) +
                                         " element " + std::to_string(i) + " of " + std::to_string(rc[p]) + " is " +
                                         std::to_string(b[off + i]) + ", want " + std::to_string(val(p, r, i)));
          if (b[rt] != -1.0f) throw std::runtime_error("iteration " + std::to_string(it) + ": written past the output");
        }
        pg.barrier(BarrierOptions{})->wait();
      });
    }, 120s, &dir);
    for (int r = 0; r < n; ++r) EXPECT_EQ(out(dir, r).substr(0, 2), "ok") << n << " ranks, rank " << r << ": " << out(dir, r);
    cleanRunDirs(HasFailure());
  }
}

// A root that returned from an eager op learns at its next op that a rank it
// did not wait for has died.
TEST_P(EagerShm, ARankThatDiesAfterAnEagerRootReturnedFailsTheRootsNextOp) {
  std::string dir;
  auto st = runRanks(3, GetParam(), [](int r, ProcessGroup& pg, Ctx& c) {
    float x[16] = {};
    pg.barrier(BarrierOptions{})->wait();
    if (r == 2) {
      c.store->wait({"bcast-returned"}, 10s);
      kill(getpid(), SIGKILL);
    }
    recordOutcome(c, r, [&] {
      pg.broadcast(Buffer(x, 16, DataType::Float32))->wait();  // root 0
      if (r == 0) c.store->set("bcast-returned", toBytes("1"));
      AllreduceOptions o;
      o.timeout = 20s;
      pg.allreduce(Buffer(x, 16, DataType::Float32), o)->wait();
    });
  }, 60s, &dir);
  EXPECT_TRUE(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  for (int r = 0; r < 2; ++r) {
    std::string s = out(dir, r);
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + s);
    EXPECT_EQ(s.rfind("RemoteError:", 0), 0u);
    EXPECT_NE(s.find("rank 2"), std::string::npos);
    long ms = std::stol(s.substr(s.rfind('[') + 1));
    EXPECT_LT(ms, 10000);  // well within the 20 s timeout
  }
}

namespace {
std::string transportName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "shm,tcp" ? std::string("shm") : info.param == "shm,tcp+cma" ? std::string("shm_cma") : info.param;
}
}  // namespace
INSTANTIATE_TEST_SUITE_P(Transports, Fault, ::testing::Values("shm,tcp", "shm,tcp+cma", "tcp", "ib"), transportName);
INSTANTIATE_TEST_SUITE_P(Copy, EagerShm, ::testing::Values("shm,tcp", "shm,tcp+cma"), transportName);
