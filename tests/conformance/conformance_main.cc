// The conformance suite. Every rank of a job runs this program (started by
// accl-run, mpirun, torchrun or srun); each test runs one collective over all
// dtypes, counts, reduce ops, roots and in-place forms, and checks each rank's
// result against the reference it computes itself.
//
//   accl_conformance --backend NAME [--split] [gtest flags]
//
// --split runs the whole suite on sub-groups made by ProcessGroup::split:
// the even ranks in reverse order, and the odd ranks, concurrently.
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include "accl/registry.h"
#include "checker.h"

using namespace accl;
using namespace accl::conformance;

namespace {

std::shared_ptr<ProcessGroup> gWorld;
std::shared_ptr<ProcessGroup> gPg;  // the group under test

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

std::vector<int> roots(int n) {
  std::set<int> s{0, n - 1};
  if (n > 2) s.insert(n / 2);
  return std::vector<int>(s.begin(), s.end());
}

bool isReduction(OpType op) {
  return op == OpType::Allreduce || op == OpType::Reduce || op == OpType::ReduceScatter ||
         op == OpType::ReduceScatterv;
}
bool hasRoot(OpType op) {
  return op == OpType::Broadcast || op == OpType::Reduce || op == OpType::Gather || op == OpType::Scatter;
}
bool hasInPlace(OpType op) {
  return op == OpType::Allreduce || op == OpType::Reduce || op == OpType::Allgather ||
         op == OpType::ReduceScatter || op == OpType::ReduceScatterv || op == OpType::Alltoall ||
         op == OpType::Alltoallv || op == OpType::Allgatherv || op == OpType::Gather || op == OpType::Scatter;
}

// --large BYTES: every op and point-to-point also runs float32 messages of
// about BYTES (an odd count), e.g. over a transport whose chunking starts above
// the standard 1 MiB case.
size_t gLargeBytes = 0;
std::vector<size_t> countsFor(DataType t) {
  auto c = standardCounts(t);
  if (gLargeBytes && t == DataType::Float32) c.push_back(gLargeBytes / dataTypeSize(t) + 5);
  return c;
}

class Collective : public ::testing::TestWithParam<std::tuple<OpType, DataType>> {};

TEST_P(Collective, MatchesReference) {
  auto [op, dtype] = GetParam();
  ProcessGroup& pg = *gPg;
  uint64_t seed = 1;
  std::vector<ReduceOp> reductions;
  if (isReduction(op)) {
    for (auto k : validReductions(dtype))
      reductions.push_back(k == ReduceKind::PremulSum ? ReduceOp::premulSum(1.375) : ReduceOp(k));
  } else {
    reductions.push_back(ReduceOp());
  }
  std::vector<int> rootList = hasRoot(op) ? roots(pg.size()) : std::vector<int>{0};
  for (size_t count : countsFor(dtype))
    for (auto& red : reductions) {
      // The --large size runs every op once per form, with the first reduction only.
      if (gLargeBytes && count * dataTypeSize(dtype) >= gLargeBytes && &red != &reductions.front()) continue;
      for (int root : rootList)
        for (int inPlace = 0; inPlace <= (hasInPlace(op) ? 1 : 0); ++inPlace) {
          Case c;
          c.op = op;
          c.dtype = dtype;
          c.reduce = red;
          c.count = count;
          c.root = root;
          c.inPlace = inPlace != 0;
          c.seed = seed++;
          auto errors = runCase(pg, c);
          EXPECT_TRUE(errors.empty()) << join(errors);
        }
    }
}

std::string paramName(const ::testing::TestParamInfo<std::tuple<OpType, DataType>>& info) {
  return std::string(toString(std::get<0>(info.param))) + "_" + toString(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, Collective,
    ::testing::Combine(::testing::Values(OpType::Allreduce, OpType::Reduce, OpType::Broadcast,
                                         OpType::Allgather, OpType::Allgatherv, OpType::ReduceScatter,
                                         OpType::ReduceScatterv, OpType::Alltoall, OpType::Alltoallv,
                                         OpType::Gather, OpType::Scatter),
                       ::testing::ValuesIn(allDataTypes())),
    paramName);

class PointToPoint : public ::testing::TestWithParam<DataType> {};

TEST_P(PointToPoint, RingSendRecv) {
  uint64_t seed = 1000;
  for (size_t count : countsFor(GetParam())) {
    auto errors = runRing(*gPg, GetParam(), count, seed++);
    EXPECT_TRUE(errors.empty()) << join(errors);
  }
}

TEST_P(PointToPoint, RecvFromAnySource) {
  // The seed is also the tag: unique per dtype and round, because eager sends
  // let a sender run ahead into later rounds before rank 0 has received.
  uint64_t seed = 2000 + 16 * static_cast<uint64_t>(GetParam());
  for (size_t count : countsFor(GetParam())) {
    auto errors = runAnySource(*gPg, GetParam(), count, seed++);
    EXPECT_TRUE(errors.empty()) << join(errors);
  }
}

TEST_P(PointToPoint, SendRecvInOneOp) {
  uint64_t seed = 3000 + 16 * static_cast<uint64_t>(GetParam());
  for (size_t count : countsFor(GetParam())) {
    auto errors = runSendRecv(*gPg, GetParam(), count, seed++);
    EXPECT_TRUE(errors.empty()) << join(errors);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PointToPoint, ::testing::ValuesIn(allDataTypes()),
                         [](const ::testing::TestParamInfo<DataType>& i) { return std::string(toString(i.param)); });

TEST(SendRecv, BadArgumentsAreRefusedBeforeAnythingIsPosted) {
  // Each is refused by the call itself on every backend, so no rank posts
  // anything and the ranks need not agree.
  ProcessGroup& pg = *gPg;
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (pg.rank() + 1) % pg.size(), prev = (pg.rank() + pg.size() - 1) % pg.size();
  std::vector<float> a(64), b(64);
  Buffer sa(a.data(), 64, DataType::Float32), sb(b.data(), 64, DataType::Float32);
  auto refused = [&](const char* what, const std::function<void()>& call, const char* says) {
    try {
      call();
      ADD_FAILURE() << what << ": not refused";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << what << ": " << e.what();
    }
  };
  refused("overlapping buffers", [&] { pg.sendrecv(Buffer(a.data(), 32, DataType::Float32), next,
                                                    Buffer(a.data() + 16, 32, DataType::Float32), prev); },
          "overlap; accepted: disjoint buffers");
  refused("one buffer for both", [&] { pg.sendrecv(sa, next, sa, prev); }, "overlap");
  refused("this rank as the destination", [&] { pg.sendrecv(sa, pg.rank(), sb, prev); }, "is this rank");
  refused("a source out of range", [&] { pg.sendrecv(sa, next, sb, pg.size()); }, "invalid peer rank");
  SendRecvOptions o;
  o.recvTag = -3;
  refused("a negative tag", [&] { pg.sendrecv(sa, next, sb, prev, o); }, "negative tag");
  refused("a null buffer", [&] { pg.sendrecv(Buffer(nullptr, 4, DataType::Float32), next, sb, prev); }, "null pointer");
  // Adjacent buffers do not overlap: a real exchange, checked.
  std::vector<int32_t> both(128);
  for (int i = 0; i < 64; ++i) both[i] = pg.rank() * 1000 + i;
  pg.sendrecv(Buffer(both.data(), 64, DataType::Int32), next, Buffer(both.data() + 64, 64, DataType::Int32), prev)
      ->wait();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(both[64 + i], prev * 1000 + i) << "element " << i;
}

TEST(Collectives, PartlyOverlappingBuffersAreRefusedBeforeAnythingIsPosted) {
  // A partial overlap of input and output is no op's in-place form: every
  // rank's call refuses it, naming the accepted forms, so no rank posts
  // anything. The in-place forms and disjoint buffers run in the cases above.
  ProcessGroup& pg = *gPg;
  const int n = pg.size(), me = pg.rank();
  const size_t c = 8;  // elements per rank
  std::vector<float> buf(c * static_cast<size_t>(n) * 3);
  float* base = buf.data() + c * static_cast<size_t>(n);  // room on both sides
  auto B = [](float* p, size_t count) { return Buffer(p, count, DataType::Float32); };
  const size_t nc = c * static_cast<size_t>(n);
  auto refused = [&](const char* what, const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << what << ": not refused";
    } catch (const InvalidArgument& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("overlap: the input"), std::string::npos) << what << ": " << m;
      EXPECT_NE(m.find("accepted: disjoint buffers, or in place"), std::string::npos) << what << ": " << m;
    }
  };
  std::vector<size_t> counts(static_cast<size_t>(n), c);
  refused("allreduce, output one element on", [&] { pg.allreduce(B(base, c), B(base + 1, c)); });
  refused("alltoall, output one element back", [&] { pg.alltoall(B(base, nc), B(base - 1, nc)); });
  refused("alltoallv, output one element on", [&] { pg.alltoallv(B(base, nc), counts, B(base + 1, nc), counts); });
  // The input one element past this rank's part of the output.
  refused("allgather", [&] { pg.allgather(B(base + me * c + 1, c), B(base, nc)); });
  refused("allgatherv", [&] { pg.allgatherv(B(base + me * c + 1, c), B(base, nc), counts); });
  refused("reduce_scatter", [&] { pg.reduceScatter(B(base, nc), B(base + me * c + 1, c)); });
  refused("reduce_scatterv", [&] { pg.reduceScatterv(B(base, nc), B(base + me * c + 1, c), counts); });
  // Rooted ops: the root's buffers only (the output of a reduce or gather,
  // and the input of a scatter, are ignored elsewhere).
  ReduceOptions ro;
  GatherOptions go;
  ScatterOptions so;
  ro.root = go.root = so.root = me;
  refused("reduce on the root", [&] { pg.reduce(B(base, c), B(base + 2, c), ro); });
  refused("gather on the root", [&] { pg.gather(B(base + me * c + 1, c), B(base, nc), go); });
  refused("scatter on the root", [&] { pg.scatter(B(base, nc), B(base + me * c + 1, c), so); });
}

TEST(Barrier, CompletesOnEveryRank) {
  for (int i = 0; i < 5; ++i) {
    auto errors = runCase(*gPg, Case{OpType::Barrier});
    EXPECT_TRUE(errors.empty()) << join(errors);
  }
}

TEST(Alltoall, InPlaceOnEveryRankOrOnSomeRanksOnly) {
  // In place is each rank's own choice (api.md: "in place when equal"). Chunks
  // large enough for the accl backend's single-copy paths, where a rank in
  // place must not be read while its output lands: every rank in place
  // (chunks swapped pairwise, in pieces of 1 MiB: 2.5 MiB spans three), and
  // the even ranks in place while the odd ones are not.
  ProcessGroup& pg = *gPg;
  if (pg.backendName() == "mpi")
    GTEST_SKIP() << "MPI requires MPI_IN_PLACE on every rank of an alltoall or on none";
  const int n = pg.size(), me = pg.rank();
  auto value = [](int from, int to, size_t i) { return from * 100000000 + to * 1000000 + static_cast<int32_t>(i % 999983); };
  for (size_t chunk : {size_t(64 * 1024 + 3), size_t(640 * 1024 + 5)}) {
    for (int mixed = 0; mixed <= 1; ++mixed) {
      bool inPlace = !mixed || me % 2 == 0;
      std::vector<int32_t> a(chunk * n), b;
      for (int j = 0; j < n; ++j)
        for (size_t i = 0; i < chunk; ++i) a[j * chunk + i] = value(me, j, i);
      if (inPlace) {
        pg.alltoall(Buffer(a.data(), a.size(), DataType::Int32), Buffer(a.data(), a.size(), DataType::Int32))->wait();
      } else {
        b.assign(a.size(), -1);
        pg.alltoall(Buffer(a.data(), a.size(), DataType::Int32), Buffer(b.data(), b.size(), DataType::Int32))->wait();
      }
      const std::vector<int32_t>& got = inPlace ? a : b;
      for (int j = 0; j < n; ++j)
        for (size_t i = 0; i < chunk; ++i)
          ASSERT_EQ(got[j * chunk + i], value(j, me, i))
              << (mixed ? "even ranks in place" : "every rank in place") << ", " << chunk * 4 << "-byte chunks: rank "
              << me << (inPlace ? " (in place)" : "") << ", chunk " << j << ", element " << i;
      if (!inPlace) {
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < chunk; ++i)
            ASSERT_EQ(a[j * chunk + i], value(me, j, i)) << "the input of rank " << me << " changed";
      }
    }
  }
}

TEST(Async, ManyOutstandingOpsCompleteInOrder) {
  // Start 32 allreduces before waiting on any; each must hold its own result.
  ProcessGroup& pg = *gPg;
  const int k = 32, count = 1000;
  std::vector<std::vector<int32_t>> bufs(k, std::vector<int32_t>(count));
  std::vector<std::shared_ptr<Work>> works;
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < count; ++i) bufs[j][i] = (pg.rank() + 1) * (j + 1) + i;
    works.push_back(pg.allreduce(Buffer(bufs[j].data(), count, DataType::Int32)));
  }
  int n = pg.size();
  for (int j = 0; j < k; ++j) {
    works[j]->wait();
    for (int i = 0; i < count; ++i)
      ASSERT_EQ(bufs[j][i], (j + 1) * n * (n + 1) / 2 + n * i) << "op " << j << " element " << i;
  }
}

TEST(PointToPointCompletion, ARecvNobodyWaitsOnCompletesAndCallsBack) {
  // A receive that no thread waits on (the caller polls isCompleted, as
  // torch's is_completed() does) still completes once its message came, and
  // runs its callback; 512 KiB: more than one fragment, and more than an
  // eager send, so the backend must progress it by itself.
  ProcessGroup& pg = *gPg;
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const size_t count = 64 * 1024;
  std::vector<int64_t> buf(count);
  if (pg.rank() == 1) {
    std::fill(buf.begin(), buf.end(), -1);
    RecvOptions ro;
    ro.tag = 4242;
    auto w = pg.recv(Buffer(buf.data(), count, DataType::Int64), 0, ro);
    std::atomic<int> fired{0};
    w->onComplete([&](Work&) { fired++; });
    pg.barrier()->wait();  // rank 0 sends after it
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!w->isCompleted() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(w->isCompleted()) << "the receive did not complete within 60 s without a waiter";
    w->wait();
    EXPECT_EQ(fired.load(), 1);
    EXPECT_EQ(w->sourceRank(), 0);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], static_cast<int64_t>(i * 3 + 1)) << "element " << i;
  } else {
    pg.barrier()->wait();
    if (pg.rank() == 0) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int64_t>(i * 3 + 1);
      SendOptions so;
      so.tag = 4242;
      pg.send(Buffer(buf.data(), count, DataType::Int64), 1, so)->wait();
    }
  }
  pg.barrier()->wait();
}

TEST(PointToPointCompletion, ThreadsOfOneRankSendAndReceiveAtOnce) {
  // Ranks 0 and 1 exchange messages on 4 threads each, at once, a tag per
  // thread: every thread waits on its own requests while the others post.
  ProcessGroup& pg = *gPg;
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (pg.rank() < 2) {
    constexpr int kThreads = 4, kRounds = 200;
    int peer = 1 - pg.rank();
    std::atomic<int> bad{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < kRounds; ++i) {
          std::vector<int32_t> out(16 + t * 700, pg.rank() * 1000000 + t * 10000 + i), in(out.size(), -1);
          RecvOptions ro;
          SendOptions so;
          ro.tag = so.tag = 100 + t;
          auto r = pg.recv(Buffer(in.data(), in.size(), DataType::Int32), peer, ro);
          auto s = pg.send(Buffer(out.data(), out.size(), DataType::Int32), peer, so);
          if (i % 2) {
            r->wait();
            s->wait();
          } else {
            s->wait();
            r->wait();
          }
          for (int32_t v : in)
            if (v != peer * 1000000 + t * 10000 + i) {
              bad++;
              break;
            }
        }
      });
    for (auto& th : ts) th.join();
    EXPECT_EQ(bad.load(), 0) << "messages with the wrong content";
  }
  pg.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string backend = std::getenv("ACCL_TEST_BACKEND") ? std::getenv("ACCL_TEST_BACKEND") : "";
  bool split = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!std::strncmp(argv[i], "--backend=", 10)) backend = argv[i] + 10;
    else if (!std::strcmp(argv[i], "--split")) split = true;
    else if (!std::strcmp(argv[i], "--large") && i + 1 < argc) gLargeBytes = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--count-bytes") && i + 1 < argc) {
      unsigned long long b = std::strtoull(argv[++i], nullptr, 10);
      if (b < 64) {
        std::fprintf(stderr, "accl_conformance: --count-bytes takes the size of the large count in bytes (>= 64), not '%s'\n", argv[i]);
        return 2;
      }
      setLargeCountBytes(b);
    }
    else {
      std::fprintf(stderr, "accl_conformance: unknown argument '%s'\nusage: accl_conformance --backend NAME [--split] [--large BYTES] [--count-bytes BYTES] [gtest flags]\n", argv[i]);
      return 2;
    }
  }
  if (backend.empty()) {
    std::fprintf(stderr, "accl_conformance: --backend NAME (or ACCL_TEST_BACKEND) is required\n");
    return 2;
  }
  // ACCL_SHM_CMA=on needs process_vm_readv, which a seccomp profile (a
  // container's default) may forbid: then there is no single copy to test.
  if (const char* cma = std::getenv("ACCL_SHM_CMA"); cma && !std::strcmp(cma, "on")) {
    uint64_t src = 0x5ca1ab1e, dst = 0;
    iovec l{&dst, sizeof(dst)}, r{&src, sizeof(src)};
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof(dst)) || dst != src) {
      std::printf("SKIP: ACCL_SHM_CMA=on, but process_vm_readv is not permitted here (%s)\n", std::strerror(errno));
      return 77;
    }
  }
  try {
    std::shared_ptr<Store> store;
    int rank, size;
    if (backend == "mpi") {  // ranks come from mpirun; no store needed
      const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
      const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
      rank = r ? std::atoi(r) : 0;
      size = s ? std::atoi(s) : 1;
    } else {
      Rendezvous rv = rendezvousFromEnv();
      store = std::make_shared<PrefixStore>("conformance", rv.store);
      rank = rv.rank;
      size = rv.size;
    }
    gWorld = createProcessGroup(backend, store, rank, size);
    gPg = gWorld;
    if (split) {
      std::vector<int> even, odd;
      for (int r = size - 1; r >= 0; --r)
        if (r % 2 == 0) even.push_back(r);
      for (int r = 1; r < size; r += 2) odd.push_back(r);
      auto a = gWorld->split(even);
      auto b = odd.empty() ? nullptr : gWorld->split(odd);
      gPg = a ? a : b;
      std::printf("rank %d/%d runs the suite as rank %d/%d of a split group\n", rank, size, gPg->rank(), gPg->size());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl_conformance: setup failed: %s\n", e.what());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  try {
    gWorld->barrier()->wait();  // nobody leaves while others still communicate
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl_conformance: final barrier failed: %s\n", e.what());
    rc = 1;
  }
  gPg.reset();
  gWorld.reset();
  return rc;
}
