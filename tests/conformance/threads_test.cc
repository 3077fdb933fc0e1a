// Ranks as threads of one process (gloo and accl allow it): the conformance checks,
// argument errors, timeouts, ordering and concurrency of several groups.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <thread>

#include "accl/config.h"
#include "accl/internal/kept_buffer.h"
#include "accl/registry.h"
#include "accl/trace.h"
#include "checker.h"

using namespace accl;
using namespace accl::conformance;
using namespace std::chrono_literals;

namespace {

// The backend under test: ACCL_TEST_BACKEND (gloo by default).
std::string backendName() {
  const char* b = std::getenv("ACCL_TEST_BACKEND");
  return b && *b ? b : "gloo";
}

// Runs fn(pg) on `n` threads, each a rank of one group over a HashStore.
void runRanks(int n, const std::function<void(ProcessGroup&)>& fn, ProcessGroupOptions opts = {}) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto pg = createProcessGroup(backendName(), store, r, n, opts);
        fn(*pg);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

template <typename E>
void expectError(const std::function<void()>& f, const std::vector<std::string>& mentions) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (auto& m : mentions) EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace

class ThreadRanks : public ::testing::TestWithParam<OpType> {};

TEST_P(ThreadRanks, EveryDtypeAndCountMatchesReference) {
  OpType op = GetParam();
  runRanks(3, [&](ProcessGroup& pg) {
    uint64_t seed = 1;
    for (auto t : allDataTypes())
      for (size_t count : standardCounts(t)) {
        std::vector<ReduceKind> reds{ReduceKind::Sum};
        if (op == OpType::Allreduce || op == OpType::ReduceScatter) reds = validReductions(t);
        for (auto k : reds) {
          Case c;
          c.op = op;
          c.dtype = t;
          c.reduce = k == ReduceKind::PremulSum ? ReduceOp::premulSum(0.625) : ReduceOp(k);
          c.count = count;
          c.root = 2;
          c.seed = seed++;
          auto errs = runCase(pg, c);
          EXPECT_TRUE(errs.empty()) << join(errs);
        }
      }
  });
}

INSTANTIATE_TEST_SUITE_P(Ops, ThreadRanks,
                         ::testing::Values(OpType::Allreduce, OpType::Broadcast, OpType::Reduce, OpType::Allgather,
                                           OpType::Allgatherv, OpType::ReduceScatter, OpType::Alltoallv,
                                           OpType::Gather, OpType::Scatter),
                         [](const ::testing::TestParamInfo<OpType>& i) { return std::string(toString(i.param)); });

TEST(Errors, InvalidArgumentsAreRefusedBeforeAnythingStarts) {
  runRanks(2, [](ProcessGroup& pg) {
    std::vector<float> a(8), b(8);
    std::vector<int32_t> ia(8);
    Buffer fa(a.data(), 8, DataType::Float32), fb(b.data(), 8, DataType::Float32);
    BroadcastOptions bo;
    bo.root = 2;
    expectError<InvalidArgument>([&] { pg.broadcast(fa, bo); }, {"broadcast", "invalid root 2", "0..1"});
    ReduceOptions ro;
    ro.root = -1;
    expectError<InvalidArgument>([&] { pg.reduce(fa, fb, ro); }, {"invalid root -1"});
    expectError<InvalidArgument>([&] { pg.send(fa, 5); }, {"send", "invalid peer rank 5"});
    expectError<InvalidArgument>([&] { pg.recv(fa, -7); }, {"recv", "kAnySource"});
    expectError<InvalidArgument>([&] { pg.send(fa, pg.rank()); }, {"is this rank"});
    expectError<InvalidArgument>([&] { pg.allgather(fa, Buffer(b.data(), 15, DataType::Float32)); },
                                 {"allgather", "output has 15 elements, expected 16"});
    expectError<InvalidArgument>([&] { pg.allreduce(fa, Buffer(ia.data(), 8, DataType::Int32)); },
                                 {"input dtype float32 differs from output dtype int32"});
    expectError<InvalidArgument>([&] { pg.alltoall(Buffer(a.data(), 7, DataType::Float32), Buffer(b.data(), 7, DataType::Float32)); },
                                 {"not a multiple of the group size 2"});
    expectError<InvalidArgument>([&] { pg.allgatherv(fa, fb, {8}); }, {"one per rank"});
    AllreduceOptions band;
    band.op = ReduceKind::BAnd;
    expectError<InvalidArgument>([&] { pg.allreduce(fa, band); }, {"band is not defined for dtype float32", "accepted"});
    AllreduceOptions avg;
    avg.op = ReduceKind::Avg;
    expectError<InvalidArgument>([&] { pg.allreduce(Buffer(ia.data(), 8, DataType::Int32), avg); },
                                 {"avg is not defined for dtype int32"});
    expectError<InvalidArgument>([&] { pg.allreduce(Buffer(nullptr, 4, DataType::Float32)); }, {"null pointer"});
    expectError<NotSupported>([&] { pg.allreduce(Buffer(a.data(), 8, DataType::Float32, Device::cuda(0))); },
                              {"cuda:0", backendName()});
    expectError<InvalidArgument>([&] { pg.split({0, 0}); }, {"listed twice"});
    expectError<InvalidArgument>([&] { pg.split({3}); }, {"out of range"});
    // The group still works after refused calls.
    a.assign(8, 1.0f);
    pg.allreduce(fa)->wait();
    EXPECT_EQ(a[0], 2.0f);
  });
}

TEST(Errors, UnknownBackendListsTheAvailableOnes) {
  expectError<InvalidArgument>([] { createProcessGroup("nccl2", std::make_shared<HashStore>(), 0, 1); },
                               {"unknown backend 'nccl2'", "gloo"});
  expectError<InvalidArgument>([] { createProcessGroup("gloo", std::make_shared<HashStore>(), 2, 2); },
                               {"invalid rank 2"});
  expectError<InvalidArgument>([] { createProcessGroup("gloo", nullptr, 0, 1); }, {"store"});
}

TEST(Timeouts, CollectiveThatOneRankNeverEntersFailsWithinTheDeadline) {
  std::atomic<bool> done{false};
  runRanks(2, [&](ProcessGroup& pg) {
    std::vector<float> a(4, 1.0f);
    if (pg.rank() == 1) {  // alive and connected, but never enters the collective
      while (!done) std::this_thread::sleep_for(10ms);
    } else {
      AllreduceOptions o;
      o.timeout = 500ms;
      auto start = std::chrono::steady_clock::now();
      auto w = pg.allreduce(Buffer(a.data(), 4, DataType::Float32), o);
      expectError<Timeout>([&] { w->wait(); }, {"allreduce #0", "rank 0/2"});
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      done = true;
    }
  });
}

TEST(ThreadSafety, PointToPointFromManyThreadsOfOneGroup) {
  // send/recv may be issued from several threads of one rank at once.
  runRanks(2, [](ProcessGroup& pg) {
    constexpr int kThreads = 4, kMsgs = 50;
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        for (int m = 0; m < kMsgs; ++m) {
          int64_t out = pg.rank() * 1000000 + t * 1000 + m, in = -1;
          SendOptions so;
          so.tag = t;
          RecvOptions ro;
          ro.tag = t;
          auto s = pg.send(Buffer(&out, 1, DataType::Int64), 1 - pg.rank(), so);
          auto r = pg.recv(Buffer(&in, 1, DataType::Int64), 1 - pg.rank(), ro);
          s->wait();
          r->wait();
          // Per (peer, tag), messages arrive in the order they were sent.
          if (in != (1 - pg.rank()) * 1000000 + t * 1000 + m) bad++;
        }
      });
    for (auto& th : ts) th.join();
    EXPECT_EQ(bad.load(), 0);
    // The flight recorder kept every one of those ops, each under its own id,
    // though they were issued from four threads at once.
    if (FlightRecorder* rec = pg.recorder()) {
      if (rec->capacity() >= 2 * kThreads * kMsgs) {
        std::set<uint64_t> ids;
        size_t p2p = 0;
        for (const auto& e : rec->entries()) {
          if (e.op != OpType::Send && e.op != OpType::Recv) continue;
          ++p2p;
          ids.insert(e.id);
          EXPECT_EQ(e.state, OpState::Done) << "op " << e.id;
        }
        EXPECT_EQ(p2p, size_t(2 * kThreads * kMsgs));
        EXPECT_EQ(ids.size(), p2p) << "two ops recorded under one id";
      }
    }
  });
}

// The process's threads (ids of /proc/self/task).
std::set<long> threadIds() {
  std::set<long> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ids.insert(std::atol(e->d_name));
    closedir(d);
  }
  return ids;
}

TEST(GlooLoop, EachGroupsEventLoopRunsAsSetAndTheCallerKeepsItsPolicy) {
  if (backendName() != "gloo") GTEST_SKIP() << "gloo's event loop: backend " << backendName();
  const char* v = std::getenv("ACCL_GLOO_LOOP_POLICY");
  bool batch = !v || !*v || std::string(v) == "batch";
  auto before = threadIds();
  std::atomic<int> callersBatch{0};
  int newBatch = 0, newOther = 0;
  runRanks(2, [&](ProcessGroup& pg) {
    if (sched_getscheduler(0) == SCHED_BATCH) ++callersBatch;
    // Both groups, and so both gloo devices, exist once a collective is done;
    // rank 0 looks at the threads before either group can go.
    pg.barrier()->wait();
    if (pg.rank() == 0)
      for (long t : threadIds()) {
        if (before.count(t)) continue;
        int p = sched_getscheduler(static_cast<pid_t>(t));
        newBatch += p == SCHED_BATCH;
        newOther += p == SCHED_OTHER;
      }
    pg.barrier()->wait();
  });
  EXPECT_EQ(callersBatch.load(), 0) << "a rank's own thread was left SCHED_BATCH";
  // One event loop per group (gloo's tcp device), and no other thread.
  EXPECT_EQ(newBatch, batch ? 2 : 0) << "ACCL_GLOO_LOOP_POLICY=" << (v ? v : "(unset)");
  EXPECT_GE(newOther, 2);  // the ranks' own threads, at least
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

TEST(Recorder, AGroupMadeWithRecordFalseKeepsNoRecorder) {
  if (!FlightRecorder::wanted()) GTEST_SKIP() << "the flight recorder is off in this environment (ACCL_TRACE_BUFFER=0)";
  runRanks(2, [](ProcessGroup& pg) {
    ASSERT_NE(pg.recorder(), nullptr);
    ProcessGroupOptions off;
    off.record = false;
    auto quiet = pg.split({0, 1}, off);
    auto recorded = pg.split({0, 1});
    ASSERT_NE(quiet, nullptr);
    ASSERT_NE(recorded, nullptr);
    EXPECT_EQ(quiet->recorder(), nullptr);
    ASSERT_NE(recorded->recorder(), nullptr);
    float x = 1;
    AllreduceOptions o;
    quiet->allreduce(Buffer(&x, 1, DataType::Float32), o)->wait();
    recorded->allreduce(Buffer(&x, 1, DataType::Float32), o)->wait();
    recorded->allreduce(Buffer(&x, 1, DataType::Float32), o)->wait();
    EXPECT_EQ(x, 8.0f);  // three sums over two ranks of 1
    auto e = recorded->recorder()->entries();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].op, OpType::Allreduce);
    EXPECT_EQ(e[1].state, OpState::Done);
  });
}

TEST(Recorder, APausedGroupRecordsNoOpsUntilItResumes) {
  if (!FlightRecorder::wanted()) GTEST_SKIP() << "the flight recorder is off in this environment (ACCL_TRACE_BUFFER=0)";
  runRanks(2, [](ProcessGroup& pg) {
    auto g = pg.split({0, 1});
    ASSERT_NE(g, nullptr);
    ASSERT_NE(g->recorder(), nullptr);
    EXPECT_TRUE(g->recording());
    float x = 1;
    AllreduceOptions o;
    g->allreduce(Buffer(&x, 1, DataType::Float32), o)->wait();  // recorded
    g->setRecording(false);
    EXPECT_FALSE(g->recording());
    EXPECT_NE(g->recorder(), nullptr);  // paused, not gone
    g->allreduce(Buffer(&x, 1, DataType::Float32), o)->wait();
    BroadcastOptions b;
    g->broadcast(Buffer(&x, 1, DataType::Float32), b)->wait();
    float y = static_cast<float>(pg.rank());
    if (pg.rank() == 0)
      g->send(Buffer(&y, 1, DataType::Float32), 1)->wait();
    else
      g->recv(Buffer(&y, 1, DataType::Float32), 0)->wait();
    EXPECT_EQ(y, 0.0f);
    EXPECT_EQ(g->recorder()->entries().size(), 1u) << "ops issued while paused were recorded";
    g->setRecording(true);
    g->barrier()->wait();
    EXPECT_EQ(x, 4.0f);  // two sums over two ranks of 1, then a broadcast
    auto e = g->recorder()->entries();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].op, OpType::Allreduce);
    EXPECT_EQ(e[1].op, OpType::Barrier);
    EXPECT_EQ(e[1].state, OpState::Done);
    EXPECT_EQ(e[1].id, e[0].id + 2) << "a paused op took an id";  // collectives: every other id
    EXPECT_EQ(e[1].coll, e[0].coll + 1) << "a paused op took a collective number";
  });
}

TEST(Async, WorkCallbacksAndManyGroupsConcurrently) {
  // Two disjoint sub-groups run at the same time; callbacks fire exactly once.
  runRanks(4, [](ProcessGroup& pg) {
    auto lo = pg.split({0, 1});
    auto hi = pg.split({3, 2});
    auto& sub = lo ? lo : hi;
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), pg.rank() == 3 ? 0 : pg.rank() == 2 ? 1 : pg.rank());
    std::atomic<int> fired{0};
    std::vector<std::vector<int64_t>> bufs(20, std::vector<int64_t>(100, pg.rank()));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& b : bufs) {
      works.push_back(sub->allreduce(Buffer(b.data(), 100, DataType::Int64)));
      works.back()->onComplete([&](Work&) { fired++; });
    }
    for (auto& w : works) w->wait();
    EXPECT_EQ(fired.load(), 20);
    int64_t want = pg.rank() < 2 ? 0 + 1 : 2 + 3;
    for (auto& b : bufs) EXPECT_EQ(b[99], want);
    // The parent group is still usable.
    int64_t x = 1;
    pg.allreduce(Buffer(&x, 1, DataType::Int64))->wait();
    EXPECT_EQ(x, 4);
  });
}

TEST(KeptScratch, GroupsOfOneProcessKeepTheirScratchWithinOneBudget) {
  // Seven groups of two ranks in one process (a world group and six of its
  // sub-groups, as a DeviceMesh makes them), each running a 40 MiB reduce to
  // both roots: on gloo every rank copies its input into the group's scratch,
  // 2 x 7 x 40 MiB in all. What stays between ops is the process's budget
  // (ACCL_SCRATCH_KEEP_MB) at most, and nothing once the groups are gone.
  const size_t budget = static_cast<size_t>(Config::get().scratchKeepMb) << 20;
  const size_t count = (40u << 20) / sizeof(float);
  ASSERT_EQ(internal::keptScratchBytes(), 0u);
  std::atomic<size_t> most{0};
  runRanks(2, [&](ProcessGroup& pg) {
    std::vector<std::shared_ptr<ProcessGroup>> groups;
    for (int i = 0; i < 6; ++i) groups.push_back(pg.split({0, 1}));
    groups.push_back(std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {}));
    std::vector<float> in(count), out(count);
    for (auto& g : groups)
      for (int root = 0; root < 2; ++root) {
        std::fill(in.begin(), in.end(), static_cast<float>(pg.rank() + 1));
        std::fill(out.begin(), out.end(), -1.0f);
        ReduceOptions o;
        o.root = root;
        g->reduce(Buffer(in.data(), count, DataType::Float32), Buffer(out.data(), count, DataType::Float32), o)
            ->wait();
        if (pg.rank() == root) {
          ASSERT_EQ(out[0], 3.0f);
          ASSERT_EQ(out[count - 1], 3.0f);
        }
        ASSERT_EQ(in[count / 2], static_cast<float>(pg.rank() + 1)) << "the reduce changed its input";
        size_t kept = internal::keptScratchBytes(), seen = most.load();
        while (kept > seen && !most.compare_exchange_weak(seen, kept)) {
        }
      }
    pg.barrier()->wait();
  });
  EXPECT_LE(most.load(), budget);
  if (backendName() == "gloo" && budget >= (80u << 20)) {
    EXPECT_GE(most.load(), size_t(80) << 20) << "gloo's reduce keeps its copies within the budget";
  }
  EXPECT_EQ(internal::keptScratchBytes(), 0u) << "groups that are gone keep nothing";
}

// ---- the checker itself: one wrong element anywhere must be reported.

namespace {

// Runs each op on the backend under test, then damages one element of rank
// 0's output (or of its input, which out-of-place ops must leave unchanged).
class Corrupting : public ProcessGroup {
 public:
  Corrupting(std::shared_ptr<ProcessGroup> inner, size_t where, bool input)
      : ProcessGroup(inner->rank(), inner->size(), "corrupting", {}), in_(std::move(inner)), where_(where),
        input_(input) {}

 protected:
  std::shared_ptr<Work> done(std::shared_ptr<Work> w, const Buffer& in, const Buffer& out) {
    w->wait();
    const Buffer& b = input_ ? in : out;
    if (rank() == 0 && where_ < b.count) {
      size_t es = dataTypeSize(b.dtype);
      auto* p = static_cast<unsigned char*>(b.data) + where_ * es;
      // Floating point: flip the top exponent bit (a large change); integers and bool: the lowest bit.
      if (isFloatingPoint(b.dtype)) p[es - 1] ^= 0x40;
      else p[0] ^= 0x01;
    }
    auto r = std::make_shared<Work>("corrupted");
    r->markCompleted();
    return r;
  }
  std::shared_ptr<Work> doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) override {
    return done(in_->allreduce(in, out, o), in, out);
  }
  std::shared_ptr<Work> doBroadcast(Buffer b, const BroadcastOptions& o) override {
    return done(in_->broadcast(b, o), b, b);
  }
  std::shared_ptr<Work> doReduce(Buffer in, Buffer out, const ReduceOptions& o) override {
    return done(in_->reduce(in, out, o), in, out);
  }
  std::shared_ptr<Work> doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) override {
    return done(in_->allgather(in, out, o), in, out);
  }
  std::shared_ptr<Work> doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& c,
                                     const AllgatherOptions& o) override {
    return done(in_->allgatherv(in, out, c, o), in, out);
  }
  std::shared_ptr<Work> doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) override {
    return done(in_->reduceScatter(in, out, o), in, out);
  }
  std::shared_ptr<Work> doReduceScatterv(Buffer in, Buffer out, const std::vector<size_t>& c,
                                         const ReduceScatterOptions& o) override {
    return done(in_->reduceScatterv(in, out, c, o), in, out);
  }
  std::shared_ptr<Work> doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) override {
    return done(in_->alltoall(in, out, o), in, out);
  }
  std::shared_ptr<Work> doAlltoallv(Buffer in, const std::vector<size_t>& sc, Buffer out,
                                    const std::vector<size_t>& rc, const AlltoallOptions& o) override {
    return done(in_->alltoallv(in, sc, out, rc, o), in, out);
  }
  std::shared_ptr<Work> doGather(Buffer in, Buffer out, const GatherOptions& o) override {
    return done(in_->gather(in, out, o), in, out);
  }
  std::shared_ptr<Work> doScatter(Buffer in, Buffer out, const ScatterOptions& o) override {
    return done(in_->scatter(in, out, o), in, out);
  }

 private:
  std::shared_ptr<ProcessGroup> in_;
  size_t where_;
  bool input_;
};

}  // namespace

TEST(Checker, ReportsOneWrongElementAnywhereInEveryOp) {
  // Inputs repeat with a period of a few thousand elements and the checker
  // compares whole runs at once: a single damaged element at the start, in
  // the middle or at the end of a large buffer must still be named.
  const std::vector<OpType> ops{OpType::Allreduce, OpType::Broadcast,     OpType::Reduce,
                                OpType::Allgather, OpType::Allgatherv,    OpType::ReduceScatter,
                                OpType::ReduceScatterv, OpType::Alltoall, OpType::Alltoallv,
                                OpType::Gather,    OpType::Scatter};
  const std::vector<DataType> dtypes{DataType::Int8, DataType::Bool, DataType::BFloat16, DataType::Float32,
                                     DataType::Uint64};
  std::atomic<int> checked{0};
  runRanks(2, [&](ProcessGroup& pg) {
    auto self = pg.shared_from_this();
    uint64_t seed = 100;
    for (auto op : ops)
      for (auto t : dtypes)
        for (bool input : {false, true}) {
          // Inputs that ops read but do not own: only out-of-place ops promise to keep them.
          if (input && (op == OpType::Broadcast || op == OpType::Scatter)) continue;
          size_t count = (size_t{1} << 20) / dataTypeSize(t) + 3;
          // Output (or input) elements of rank 0 for this op.
          size_t n = count;
          if (op == OpType::Allgather || op == OpType::Gather || op == OpType::Alltoall) n = input && op != OpType::Alltoall ? count : 2 * count;
          if ((op == OpType::ReduceScatter || op == OpType::ReduceScatterv) && input) n = 2 * count;
          if (op == OpType::Allgatherv || op == OpType::ReduceScatterv || op == OpType::Alltoallv) n = 100;  // counts vary by rank
          for (size_t where : {size_t{0}, n / 2 + 1, n - 1}) {
            Corrupting bad(self, where, input);
            Case c;
            c.op = op;
            c.dtype = t;
            c.count = count;
            c.root = 0;
            c.seed = seed++;
            auto errs = runCase(bad, c);
            if (pg.rank() != 0) continue;
            std::string all = join(errs);
            std::string what = std::string(toString(op)) + " " + toString(t) + (input ? " input" : " output") +
                               " element " + std::to_string(where);
            EXPECT_FALSE(errs.empty()) << what << ": not reported";
            EXPECT_NE(all.find("[" + std::to_string(where) + "]"), std::string::npos) << what << ":\n" << all;
            if (input) {
              EXPECT_NE(all.find("must be unchanged"), std::string::npos) << what << ":\n" << all;
            }
            checked++;
          }
        }
  });
  EXPECT_GT(checked.load(), 250);
}
