// The accl backend's algorithms against an in-memory transport (threads as
// ranks, no sockets, no shared memory): results against a reference, and the
// shape of each schedule (who sends to whom, how many steps). Also algorithm
// selection, the host layout, the one-rank host group, ACCL_ALGO parsing and
// wire-header validation.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "accl/errors.h"
#include "algorithms/algorithms.h"
#include "algorithms/scratch.h"
#include "algorithms/select.h"
#include "transport/copy.h"
#include "transport/host_group.h"
#include "transport/wire.h"

using namespace accl;
using namespace accl::core;

namespace {

struct Hub {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, uint32_t>, std::vector<char>> msgs;  // (src, dst, step)
  std::vector<std::tuple<int, int, uint32_t, size_t>> log;           // sends in order
};

// Eager, buffered point-to-point between threads.
class MemTransport : public Transport {
 public:
  MemTransport(Hub& h, int me, int n) : h_(h), me_(me), n_(n) {}
  int rank() const override { return me_; }
  int size() const override { return n_; }
  void send(int peer, uint32_t step, const void* buf, size_t len) override {
    std::lock_guard<std::mutex> lk(h_.mu);
    auto key = std::make_tuple(me_, peer, step);
    if (h_.msgs.count(key)) throw Internal("step reused: " + std::to_string(step));
    h_.msgs[key] = std::vector<char>(static_cast<const char*>(buf), static_cast<const char*>(buf) + len);
    h_.log.emplace_back(me_, peer, step, len);
    h_.cv.notify_all();
    ++posted_;
  }
  void recv(int peer, uint32_t step, void* buf, size_t len) override {
    pending_.push_back({posted_++, peer, step, buf, len});
  }
  void wait() override {
    waitFirst(posted_);
    posted_ = 0;
  }
  size_t posted() const override { return posted_; }
  // Completes the receives among the first n posted (sends are eager: done
  // when posted); the later ones stay pending.
  void waitFirst(size_t n) override {
    std::unique_lock<std::mutex> lk(h_.mu);
    while (!pending_.empty() && pending_.front().index < n) {
      Pending& r = pending_.front();
      auto key = std::make_tuple(r.peer, me_, r.step);
      if (!h_.cv.wait_for(lk, std::chrono::seconds(20), [&] { return h_.msgs.count(key) > 0; }))
        throw Timeout("no message from " + std::to_string(r.peer) + " step " + std::to_string(r.step));
      auto& m = h_.msgs[key];
      if (m.size() != r.len) throw InvalidArgument("size mismatch");
      if (r.len) std::memcpy(r.buf, m.data(), r.len);
      h_.msgs.erase(key);
      pending_.pop_front();
    }
  }

 private:
  struct Pending {
    size_t index;  // its place among the posted sends and receives
    int peer;
    uint32_t step;
    void* buf;
    size_t len;
  };
  Hub& h_;
  int me_, n_;
  size_t posted_ = 0;
  std::deque<Pending> pending_;
};

// Runs fn(peers) on n threads; returns the send log.
std::vector<std::tuple<int, int, uint32_t, size_t>> run(int n, const std::function<void(const Peers&)>& fn) {
  Hub hub;
  std::vector<std::unique_ptr<MemTransport>> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(new MemTransport(hub, r, n));
  std::vector<std::thread> th;
  std::vector<std::exception_ptr> err(n);
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      Peers g;
      g.t = ts[r].get();
      for (int i = 0; i < n; ++i) g.ranks.push_back(i);
      g.me = r;
      try {
        fn(g);
      } catch (...) {
        err[r] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  EXPECT_TRUE(hub.msgs.empty()) << "messages sent but never received";
  return hub.log;
}

int64_t val(int r, size_t i) { return static_cast<int64_t>((r + 1) * 1000003 + i * 7919) % 100003 - 50000; }

// Ring allreduce of int64 values on this rank, checked element by element
// against the sum over every rank's inputs.
void ringAllreduceIsExact(const Peers& g, size_t count) {
  std::vector<int64_t> b(count);
  for (size_t i = 0; i < count; ++i) b[i] = val(g.me, i);
  algo::allreduceRing(g, b.data(), count, DataType::Int64, ReduceKind::Sum);
  for (size_t i = 0; i < count; ++i) {
    int64_t want = 0;
    for (int r = 0; r < g.size(); ++r) want += val(r, i);
    ASSERT_EQ(b[i], want) << "rank " << g.me << " element " << i;
  }
}

int ceilLog2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

}  // namespace

class Sizes : public ::testing::TestWithParam<int> {};

TEST_P(Sizes, AllreduceRingMatchesReferenceAndTalksOnlyToTheRightNeighbour) {
  int p = GetParam();
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
    auto log = run(p, [&](const Peers& g) { ringAllreduceIsExact(g, count); });
    std::vector<int> sends(p);
    for (auto& [src, dst, step, len] : log) {
      EXPECT_EQ(dst, (src + 1) % p);
      sends[src]++;
    }
    for (int r = 0; r < p; ++r) EXPECT_EQ(sends[r], 2 * (p - 1));
  }
}

// Steps from 1 MiB go in pieces (ids step + (piece << 16)) whose reduction
// overlaps the next piece's transfer: the results stay exact (ring) and
// bitwise identical on every rank (recursive doubling, folded ranks included),
// and uneven blocks (a count that p does not divide) are cut alike on both
// sides of every message.
TEST_P(Sizes, LargeStepsGoInPiecesWithTheSameResults) {
  int p = GetParam();
  size_t count = (3u << 20) / 8 * p + 5;  // 3 MiB blocks of int64 per rank for the ring, plus a remainder
  auto ringLog = run(p, [&](const Peers& g) { ringAllreduceIsExact(g, count); });
  size_t pieces = 0;
  for (auto& [src, dst, step, len] : ringLog) pieces += step >= (1u << 16);
  if (p > 1) {
    EXPECT_GT(pieces, 0u) << "no step went in pieces";
    // The allgather's first step (id p) runs inside the last reduction step
    // (id p - 2): in pieces, the first of them sent by each rank before its
    // last piece of the reduction step.
    for (int r = 0; r < p; ++r) {
      long firstOnward = -1, lastReduce = -1, onwardPieces = 0;
      for (size_t x = 0; x < ringLog.size(); ++x) {
        auto& [src, dst, step, len] = ringLog[x];
        if (src != r) continue;
        if ((step & 0xffff) == static_cast<uint32_t>(p)) {
          ++onwardPieces;
          if (firstOnward < 0) firstOnward = static_cast<long>(x);
        }
        if ((step & 0xffff) == static_cast<uint32_t>(p - 2)) lastReduce = static_cast<long>(x);
      }
      EXPECT_GT(onwardPieces, 1) << "rank " << r << ": the allgather's first step went whole";
      EXPECT_LT(firstOnward, lastReduce) << "rank " << r << ": the allgather began after the reduction";
    }
  }
  size_t fcount = (5u << 20) / 4 + 3;  // 5 MiB of float32
  std::vector<std::vector<float>> results(p);
  auto rdLog = run(p, [&](const Peers& g) {
    std::vector<float> b(fcount);
    for (size_t i = 0; i < fcount; ++i) b[i] = 1.0f / (1 + g.me * 3 + i % 1000);  // inexact sums
    algo::allreduceRecursiveDoubling(g, b.data(), fcount, DataType::Float32, ReduceKind::Sum);
    results[g.me] = std::move(b);
  });
  for (int r = 1; r < p; ++r)
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), fcount * 4), 0) << "rank " << r;
  for (size_t i = 0; i < fcount; i += 4099) {
    double want = 0;
    for (int r = 0; r < p; ++r) want += 1.0 / (1 + r * 3 + i % 1000);
    EXPECT_NEAR(results[0][i], want, 1e-5 * p) << "element " << i;
  }
  pieces = 0;
  for (auto& [src, dst, step, len] : rdLog) pieces += step >= (1u << 16);
  if (p > 1) {
    EXPECT_GT(pieces, 0u) << "no step went in pieces";
  }
  // Out of place, small and large: the same bits in `out`, `in` untouched.
  for (size_t n : {size_t(7), size_t(1000), fcount}) {
    for (bool ring : {false, true}) {
      std::vector<std::vector<float>> outs(p);
      run(p, [&](const Peers& g) {
        std::vector<float> in(n), out(n, -1.0f);
        for (size_t i = 0; i < n; ++i) in[i] = 1.0f / (1 + g.me * 3 + i % 1000);
        auto before = in;
        if (ring) algo::allreduceRing(g, in.data(), out.data(), n, DataType::Float32, ReduceKind::Sum);
        else algo::allreduceRecursiveDoubling(g, in.data(), out.data(), n, DataType::Float32, ReduceKind::Sum);
        EXPECT_EQ(in, before) << "rank " << g.me << ": the input changed";
        outs[g.me] = std::move(out);
      });
      for (int r = 1; r < p; ++r) EXPECT_EQ(outs[r], outs[0]) << (ring ? "ring" : "rd") << " rank " << r;
      if (!ring && n == fcount) {
        EXPECT_EQ(outs[0], results[0]) << "out of place differs from in place";
      }
      for (size_t i = 0; i < n; i += 997) {
        double want = 0;
        for (int r = 0; r < p; ++r) want += 1.0 / (1 + r * 3 + i % 1000);
        EXPECT_NEAR(outs[0][i], want, 1e-5 * p) << (ring ? "ring" : "rd") << " element " << i;
      }
    }
  }
}

TEST_P(Sizes, AllreduceRecursiveDoublingIsBitwiseIdenticalEverywhere) {
  int p = GetParam();
  std::vector<std::vector<float>> results(p);
  auto log = run(p, [&](const Peers& g) {
    std::vector<float> b(33);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / (1 + g.me * 3 + i);  // inexact sums
    algo::allreduceRecursiveDoubling(g, b.data(), b.size(), DataType::Float32, ReduceKind::Sum);
    results[g.me] = b;
  });
  for (int r = 1; r < p; ++r) EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), 33 * 4), 0);
  for (size_t i = 0; i < 33; ++i) {
    double want = 0;
    for (int r = 0; r < p; ++r) want += 1.0 / (1 + r * 3 + i);
    EXPECT_NEAR(results[0][i], want, 1e-5 * p);
  }
  if ((p & (p - 1)) == 0) {
    // Power of two: log2(p) exchanges per rank, partner = rank xor 2^k.
    std::vector<std::set<int>> partners(p);
    for (auto& [src, dst, step, len] : log) partners[src].insert(src ^ dst);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(partners[r].size(), static_cast<size_t>(ceilLog2(p)));
      for (int x : partners[r]) EXPECT_EQ(x & (x - 1), 0) << "partner not at a power-of-two distance";
    }
  }
}

TEST_P(Sizes, BroadcastTreeAndRingDeliverFromEveryRoot) {
  int p = GetParam();
  for (int root = 0; root < p; ++root)
    for (int ring = 0; ring < 2; ++ring) {
      size_t bytes = ring ? (600u << 10) + 3 : 13;
      auto log = run(p, [&](const Peers& g) {
        std::vector<char> b(bytes, g.me == root ? 0 : 'x');
        if (g.me == root)
          for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<char>(i * 31);
        ring ? algo::broadcastRing(g, b.data(), bytes, root) : algo::broadcastTree(g, b.data(), bytes, root);
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(b[i], static_cast<char>(i * 31));
      });
      if (!ring) {
        // Binomial tree: p - 1 messages, each rank but the root receives one;
        // the root sends ceil(log2 p).
        EXPECT_EQ(log.size(), static_cast<size_t>(p - 1));
        std::vector<int> recvd(p), sent(p);
        for (auto& [src, dst, step, len] : log) {
          recvd[dst]++;
          sent[src]++;
        }
        for (int r = 0; r < p; ++r) EXPECT_EQ(recvd[r], r == root ? 0 : 1);
        EXPECT_EQ(sent[root], ceilLog2(p));
      } else {
        for (auto& [src, dst, step, len] : log) EXPECT_EQ(dst, (src + 1) % p);  // a chain
      }
    }
}

TEST_P(Sizes, ReduceTreeAllgathervReduceScattervAlltoallvGatherScatterBarrier) {
  int p = GetParam();
  std::vector<size_t> counts(p);
  for (int r = 0; r < p; ++r) counts[r] = (r * 5) % 7;  // uneven, some zero
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  std::vector<size_t> displ(p + 1, 0);
  for (int r = 0; r < p; ++r) displ[r + 1] = displ[r] + counts[r];
  run(p, [&](const Peers& g) {
    int me = g.me;
    // reduce (max) to every root
    for (int root = 0; root < p; ++root) {
      Peers h = g;
      h.stepBase = 1000 * (root + 1);
      std::vector<int64_t> in(9), out(9, 0);
      for (size_t i = 0; i < 9; ++i) in[i] = val(me, i);
      algo::reduceTree(h, in.data(), out.data(), 9, DataType::Int64, ReduceKind::Max, root);
      if (me == root)
        for (size_t i = 0; i < 9; ++i) {
          int64_t want = val(0, i);
          for (int r = 1; r < p; ++r) want = std::max(want, val(r, i));
          ASSERT_EQ(out[i], want);
        }
    }
    Peers h = g;
    h.stepBase = 100000;
    // allgatherv, ring and direct
    for (int direct = 0; direct < 2; ++direct) {
      std::vector<int64_t> out(total, -1);
      for (size_t i = 0; i < counts[me]; ++i) out[displ[me] + i] = val(me, i);
      std::vector<size_t> bytes(p);
      for (int r = 0; r < p; ++r) bytes[r] = counts[r] * 8;
      h.stepBase += 1000;
      direct ? algo::allgathervDirect(h, out.data(), bytes) : algo::allgathervRing(h, out.data(), bytes);
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < counts[r]; ++i) ASSERT_EQ(out[displ[r] + i], val(r, i));
    }
    // reduce_scatterv
    {
      std::vector<int64_t> work(total);
      for (size_t i = 0; i < total; ++i) work[i] = val(me, i);
      h.stepBase += 1000;
      algo::reduceScattervRing(h, work.data(), counts, DataType::Int64, ReduceKind::Sum);
      for (size_t i = displ[me]; i < displ[me + 1]; ++i) {
        int64_t want = 0;
        for (int r = 0; r < p; ++r) want += val(r, i);
        ASSERT_EQ(work[i], want);
      }
    }
    // alltoallv: rank s sends (s + d) % 4 elements to d, times a factor:
    // small blocks (one round), blocks of up to 48 KiB (in steps, on ranks
    // where one is above 32 KiB), and one large block from rank 0 to rank 1
    // only (those two in steps, the others in one round).
    for (int variant = 0; variant < 3; ++variant) {
      auto factor = [&](int s, int d) -> size_t {
        return variant == 0 ? 1 : variant == 1 ? 2000 : (s == 0 && d == 1) ? 5000 : 1;
      };
      std::vector<size_t> sb(p), rb(p);
      for (int d = 0; d < p; ++d) {
        sb[d] = ((me + d) % 4) * 8 * factor(me, d);
        rb[d] = ((d + me) % 4) * 8 * factor(d, me);
      }
      std::vector<int64_t> in(std::accumulate(sb.begin(), sb.end(), size_t(0)) / 8), out(std::accumulate(rb.begin(), rb.end(), size_t(0)) / 8);
      size_t k = 0;
      for (int d = 0; d < p; ++d)
        for (size_t i = 0; i < sb[d] / 8; ++i) in[k++] = me * 100 + d * 10 + static_cast<int64_t>(i);
      h.stepBase += 1000;
      algo::alltoallvPairwise(h, in.data(), sb, out.data(), rb);
      k = 0;
      for (int s = 0; s < p; ++s)
        for (size_t i = 0; i < rb[s] / 8; ++i) ASSERT_EQ(out[k++], s * 100 + me * 10 + static_cast<int64_t>(i));
    }
    // gather / scatter from the last rank
    {
      int root = p - 1;
      std::vector<size_t> b(p, 16);
      int64_t mine[2] = {me, -me};
      std::vector<int64_t> all(2 * p, 0);
      h.stepBase += 1000;
      algo::gathervDirect(h, mine, all.data(), b, root);
      if (me == root) {
        for (int r = 0; r < p; ++r) ASSERT_EQ(all[2 * r + 1], -r);
      }
      int64_t got[2] = {0, 0};
      h.stepBase += 1000;
      algo::scattervDirect(h, all.data(), got, b, root);
      ASSERT_EQ(got[1], -me);
    }
    h.stepBase += 1000;
    algo::barrierDissemination(h);
  });
  // Dissemination barrier: ceil(log2 p) empty messages per rank.
  auto log = run(p, [](const Peers& g) { algo::barrierDissemination(g); });
  std::vector<int> sent(p);
  for (auto& [src, dst, step, len] : log) {
    EXPECT_EQ(len, 0u);
    sent[src]++;
  }
  for (int r = 0; r < p; ++r) EXPECT_EQ(sent[r], ceilLog2(p));
}

TEST_P(Sizes, LargeReductionsUseTheGroupsScratchAndLeaveTheInputAlone) {
  // A 5 MiB reduce to every root, then a ring reduce-scatter and a recursive
  // doubling allreduce out of place, twice over with each rank's scratch kept
  // between the ops (as a group keeps it): results against the reference, the
  // input untouched, the tree's children in pieces, the scratch the same size
  // after the second round (reused, not grown), its pieces buffer at most
  // 3 x 1 MiB (three pieces in flight) and a leaf's accumulator never taken.
  int p = GetParam();
  size_t count = (5u << 20) / 8 + 3;  // int64
  std::vector<core::Scratch> scratch(p);
  std::vector<size_t> kept(p);
  for (int round = 0; round < 2; ++round) {
    auto log = run(p, [&](const Peers& g0) {
      Peers g = g0;
      g.scratch = &scratch[g.me];
      std::vector<int64_t> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = val(g.me, i);
      auto before = in;
      for (int root = 0; root < p; ++root) {
        Peers h = g;
        h.stepBase = 100 * (root + 1);
        std::fill(out.begin(), out.end(), -1);
        algo::reduceTree(h, in.data(), out.data(), count, DataType::Int64, ReduceKind::Sum, root);
        if (g.me == root)
          for (size_t i = 0; i < count; i += 1009) {
            int64_t want = 0;
            for (int r = 0; r < p; ++r) want += val(r, i);
            ASSERT_EQ(out[i], want) << "reduce to " << root << ", element " << i;
          }
        ASSERT_EQ(in, before) << "rank " << g.me << ": reduce to " << root << " changed the input";
      }
      Peers h = g;
      h.stepBase = 50000;
      std::vector<int64_t> whole(count, -1);
      algo::allreduceRecursiveDoubling(h, in.data(), whole.data(), count, DataType::Int64, ReduceKind::Sum);
      ASSERT_EQ(in, before) << "rank " << g.me << ": the allreduce changed the input";
      for (size_t i = 0; i < count; i += 1009) {
        int64_t want = 0;
        for (int r = 0; r < p; ++r) want += val(r, i);
        ASSERT_EQ(whole[i], want) << "allreduce element " << i;
      }
    });
    size_t pieces = 0;
    for (auto& [src, dst, step, len] : log) pieces += step >= (1u << 16) && (step & 0xffff) < 50000;
    if (p > 1) {
      EXPECT_GT(pieces, 0u) << "no reduce step went in pieces";
    }
    for (int r = 0; r < p; ++r) {
      if (round == 0) kept[r] = scratch[r].keptBytes();
      else EXPECT_EQ(scratch[r].keptBytes(), kept[r]) << "rank " << r << ": the scratch grew in the second round";
      // kTreeAcc (a whole vector) only on a rank that was an inner node for some root.
      EXPECT_LE(scratch[r].keptBytes(), count * 8 + 3 * (1u << 20)) << "rank " << r;
    }
  }
  if (p == 2) {
    // Two ranks: the root reduces into its output and the other is a leaf.
    for (int r = 0; r < p; ++r) EXPECT_LE(scratch[r].keptBytes(), 3 * (1u << 20)) << "rank " << r;
  }
  // trim() keeps buffers up to kKeepMax and frees larger ones.
  core::Scratch s;
  char* a = s.get(core::Scratch::kPieces, 1 << 20);
  EXPECT_EQ(s.get(core::Scratch::kPieces, 4096), a);
  s.get(core::Scratch::kOpWhole, core::Scratch::kKeepMax + 1);
  EXPECT_EQ(s.keptBytes(), (size_t(1) << 20) + core::Scratch::kKeepMax + 1);
  s.trim();
  EXPECT_EQ(s.keptBytes(), size_t(1) << 20);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Sizes, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 9));

TEST(Selection, ByLayoutSizeAndOverride) {
  Layout one;
  one.size = 4;
  one.hosts = 1;
  one.maxLocal = 4;
  AlgoOverrides none;
  EXPECT_EQ(choose(Coll::Allreduce, 8, one, none), Algo::Shm);
  EXPECT_EQ(choose(Coll::Alltoall, 1 << 20, one, none), Algo::Shm);
  Layout three;  // 3 hosts x 2 ranks
  three.size = 6;
  three.hosts = 3;
  three.maxLocal = 2;
  EXPECT_EQ(choose(Coll::Allreduce, 8, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Broadcast, 1 << 20, three, none), Algo::Hierarchical);
  // Allgather along its rails on even hosts; flat where the hosts differ.
  EXPECT_EQ(choose(Coll::Allgather, 1 << 20, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Allgather, 64, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Allgather, kHierarchicalAllgatherMax, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Allgather, kHierarchicalAllgatherMax + 1, three, none), Algo::Ring);  // flat above
  EXPECT_EQ(choose(Coll::Allgather, 64 << 20, three, parseAlgoSpec("allgather:hier")), Algo::Hierarchical);
  Layout uneven = three;  // 3 hosts, of 1, 2 and 2 ranks
  uneven.size = 5;
  uneven.uniform = false;
  EXPECT_EQ(choose(Coll::Allgather, 1 << 20, uneven, none), Algo::Ring);
  EXPECT_EQ(choose(Coll::Allgather, 64, uneven, none), Algo::Direct);
  EXPECT_EQ(choose(Coll::Allgather, 64, uneven, parseAlgoSpec("allgather:hier")), Algo::Direct);
  EXPECT_EQ(choose(Coll::Allgather, 64, three, parseAlgoSpec("allgather:ring")), Algo::Ring);
  EXPECT_EQ(choose(Coll::Allreduce, 64, uneven, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::ReduceScatter, 64, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::ReduceScatter, 1 << 20, uneven, none), Algo::Ring);
  EXPECT_EQ(choose(Coll::ReduceScatter, 64, uneven, none), Algo::RecursiveDoubling);
  // Alltoall along rails on even hosts up to kHierarchicalAlltoallMax.
  EXPECT_EQ(choose(Coll::Alltoall, 64, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Alltoall, kHierarchicalAlltoallMax, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Alltoall, kHierarchicalAlltoallMax + 1, three, none), Algo::Direct);
  EXPECT_EQ(choose(Coll::Alltoall, 64 << 20, three, parseAlgoSpec("alltoall:hier")), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Alltoall, 64, three, parseAlgoSpec("alltoall:direct")), Algo::Direct);
  EXPECT_EQ(choose(Coll::Alltoall, 64, uneven, none), Algo::Direct);  // flat: no rails
  EXPECT_EQ(choose(Coll::Alltoall, 64, uneven, parseAlgoSpec("alltoall:hier")), Algo::Direct);
  // Scatter through one rank per host up to kHierarchicalGatherMax, on
  // uneven hosts too (no rails); gather only where forced.
  EXPECT_EQ(choose(Coll::Scatter, 64, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Scatter, 64, uneven, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Scatter, kHierarchicalGatherMax, three, none), Algo::Hierarchical);
  EXPECT_EQ(choose(Coll::Scatter, kHierarchicalGatherMax + 1, three, none), Algo::Direct);
  EXPECT_EQ(choose(Coll::Scatter, 64, three, parseAlgoSpec("scatter:direct")), Algo::Direct);
  EXPECT_EQ(choose(Coll::Gather, 64, three, none), Algo::Direct);
  for (Coll c : {Coll::Gather, Coll::Scatter})
    EXPECT_EQ(choose(c, 64 << 20, uneven, parseAlgoSpec("gather:hier;scatter:hier")), Algo::Hierarchical);
  Layout flat;  // tcp only: every rank its own host
  flat.size = flat.hosts = 5;
  EXPECT_EQ(choose(Coll::Gather, 64, flat, none), Algo::Direct);
  EXPECT_EQ(choose(Coll::Scatter, 64, flat, parseAlgoSpec("scatter:hier")), Algo::Direct);
  EXPECT_EQ(choose(Coll::Allreduce, 64, flat, none), Algo::RecursiveDoubling);
  EXPECT_EQ(choose(Coll::Allreduce, 64 << 20, flat, none), Algo::Ring);
  Layout pair;  // two hosts, one rank each: the whole vector in one exchange (over verbs up to 16 MiB)
  pair.size = pair.hosts = 2;
  AlgoOverrides rdma;
  rdma.rdmaBetweenHosts = true;
  for (const AlgoOverrides& link : {none, rdma}) {
    EXPECT_EQ(choose(Coll::Allreduce, 1 << 20, pair, link), Algo::RecursiveDoubling);
    EXPECT_EQ(choose(Coll::Allreduce, 16 << 20, pair, link), Algo::RecursiveDoubling);
  }
  EXPECT_EQ(choose(Coll::Allreduce, 64 << 20, pair, none), Algo::RecursiveDoubling);  // tcp
  EXPECT_EQ(choose(Coll::Allreduce, size_t(1) << 30, pair, none), Algo::RecursiveDoubling);
  EXPECT_EQ(choose(Coll::Allreduce, (16 << 20) + 1, pair, rdma), Algo::Ring);
  EXPECT_EQ(choose(Coll::Allreduce, 64 << 20, pair, rdma), Algo::Ring);
  EXPECT_NE(describeSelection(pair, rdma).find("allreduce: <16777217B recursive_doubling >=16777217B ring"),
            std::string::npos);
  EXPECT_NE(describeSelection(pair, none).find("allreduce: recursive_doubling;"), std::string::npos);
  // Three ranks: the ring above 64 KiB whatever the link.
  EXPECT_EQ(chooseInterHost(Coll::Allreduce, 1 << 20, 3, none), Algo::Ring);
  // Through the hosts' ranks, forced where it does not apply: the default, for the link.
  AlgoOverrides hierRdma = parseAlgoSpec("allreduce:hier");
  hierRdma.rdmaBetweenHosts = true;
  EXPECT_EQ(choose(Coll::Allreduce, 64 << 20, pair, hierRdma), Algo::Ring);
  EXPECT_EQ(choose(Coll::Allreduce, 64 << 20, pair, parseAlgoSpec("allreduce:hier")), Algo::RecursiveDoubling);
  EXPECT_EQ(choose(Coll::Broadcast, 64, flat, none), Algo::Tree);
  EXPECT_EQ(choose(Coll::Broadcast, 64 << 20, flat, none), Algo::Ring);
  auto o = parseAlgoSpec("allreduce:ring; broadcast:tree");
  EXPECT_EQ(choose(Coll::Allreduce, 8, flat, o), Algo::Ring);
  EXPECT_EQ(choose(Coll::Broadcast, 64 << 20, flat, o), Algo::Tree);
  EXPECT_EQ(choose(Coll::Allreduce, 8, three, o), Algo::Ring);  // forced flat across hosts
  EXPECT_EQ(choose(Coll::Allreduce, 8, one, o), Algo::Shm);     // one host: always the segment
  EXPECT_EQ(chooseInterHost(Coll::Allreduce, 64 << 20, 3, o), Algo::Ring);
  auto h = parseAlgoSpec("allreduce:hier");
  EXPECT_EQ(choose(Coll::Allreduce, 8, flat, h), Algo::RecursiveDoubling);  // not applicable: default
  EXPECT_NE(describeSelection(three, none).find("allreduce:"), std::string::npos);
  // Each fixed bound shows where the choice changes: alltoall along rails
  // below 256 KiB + 1, flat from there; scatter through the hosts up to 64 KiB.
  const std::string sel = describeSelection(three, none);
  const std::string a2a = sel.substr(sel.find("alltoall:"), sel.find("; gather:") - sel.find("alltoall:"));
  EXPECT_NE(a2a.find("<" + std::to_string(kHierarchicalAlltoallMax + 1) + "B hierarchical(shm+direct)"),
            std::string::npos)
      << a2a;
  EXPECT_NE(a2a.find(">=" + std::to_string(kHierarchicalAlltoallMax + 1) + "B direct"), std::string::npos) << a2a;
  EXPECT_NE(sel.find("scatter: <" + std::to_string(kHierarchicalGatherMax + 1) + "B hierarchical"), std::string::npos)
      << sel;
}

TEST(Layout, HostsListsAndLeadersFromHostIds) {
  // Ranks 0 and 2 on host a, 1 and 3 on b, 4 alone on c.
  std::vector<std::string> ids = {"a", "b", "a", "b", "c"};
  Layout l = Layout::fromHostIds(ids, 3, /*shm=*/true);
  EXPECT_EQ(l.size, 5);
  EXPECT_EQ(l.hosts, 3);
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(l.hostRanks, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4}}));
  EXPECT_EQ(l.maxLocal, 2);
  EXPECT_FALSE(l.uniform);
  EXPECT_TRUE(l.hierarchical());
  EXPECT_EQ(l.myHost, 1);
  EXPECT_EQ(l.localRank, 1);
  EXPECT_EQ(l.local(), (std::vector<int>{1, 3}));
  EXPECT_EQ(l.localIndex(2), 1);
  EXPECT_EQ(l.localIndex(4), 0);
  EXPECT_EQ(l.leaders(), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(l.reps(3), (std::vector<int>{0, 3, 4}));  // root 3 stands for host b
  EXPECT_EQ(l.reps(0), (std::vector<int>{0, 1, 4}));

  Layout u = Layout::fromHostIds({"x", "x", "y", "y"}, 0, true);
  EXPECT_TRUE(u.uniform);
  EXPECT_EQ(u.rail(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(u.rail(1), (std::vector<int>{1, 3}));

  // Blocks along rails: 3 hosts x 2 ranks, rank r's block 10 + r long,
  // seen from rank 4 (host b, local index 1).
  Layout r3 = Layout::fromHostIds({"a", "b", "c", "a", "b", "c"}, 4, true);
  auto rb = r3.railBlocks({10, 11, 12, 13, 14, 15});
  EXPECT_EQ(rb.order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(rb.seg, (std::vector<size_t>{33, 42}));
  EXPECT_EQ(rb.mine, (std::vector<size_t>{13, 14, 15}));
  EXPECT_EQ(rb.at, 13u);
  // Ranks interleaved the other way: hosts x {0,1}, y {2,3}; from rank 2.
  auto rx = Layout::fromHostIds({"x", "x", "y", "y"}, 2, true).railBlocks({1, 2, 3, 4});
  EXPECT_EQ(rx.order, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(rx.seg, (std::vector<size_t>{4, 6}));
  EXPECT_EQ(rx.mine, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(rx.at, 1u);

  // Shared memory off: every rank is a host of its own, same ids or not.
  Layout f = Layout::fromHostIds({"x", "x", "x"}, 1, false);
  EXPECT_EQ(f.hosts, 3);
  EXPECT_EQ(f.maxLocal, 1);
  EXPECT_FALSE(f.singleHost());
  EXPECT_FALSE(f.hierarchical());
  EXPECT_EQ(f.local(), (std::vector<int>{1}));
  EXPECT_TRUE(Layout::fromHostIds({"x", "x", "x"}, 1, true).singleHost());
}

TEST(HostGroup, OneRankCopiesItsOwnPartOrNothing) {
  auto h = makeSoloHost();
  EXPECT_EQ(h->size(), 1);
  EXPECT_EQ(h->rank(), 0);
  OpDesc d;
  auto dl = Clock::now() + std::chrono::seconds(1);
  std::vector<float> in = {1.5f, -2.f, 3.f, 4.f}, out(4, 0.f);
  h->allreduce(in.data(), out.data(), 4, DataType::Float32, ReduceKind::Max, d, dl);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.f);
  h->reduce(in.data(), out.data(), 3, DataType::Float32, ReduceKind::Sum, 0, d, dl);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.f, 3.f, 0.f}));
  h->reduce(in.data(), nullptr, 4, DataType::Float32, ReduceKind::Sum, 0, d, dl);  // no output: no write
  std::fill(out.begin(), out.end(), 0.f);
  h->reduceScatterv(in.data(), out.data(), {2}, DataType::Float32, ReduceKind::Sum, d, dl);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.f, 0.f, 0.f}));
  std::vector<char> a = {'a', 'b', 'c'}, b(3, '-');
  h->allgatherv(a.data(), b.data(), {3}, d, dl);
  EXPECT_EQ(b, a);
  std::fill(b.begin(), b.end(), '-');
  h->alltoallv(a.data(), {2}, b.data(), {2}, d, dl);
  EXPECT_EQ(b, (std::vector<char>{'a', 'b', '-'}));
  std::fill(b.begin(), b.end(), '-');
  h->gatherv(a.data(), b.data(), {1}, 0, d, dl);
  EXPECT_EQ(b, (std::vector<char>{'a', '-', '-'}));
  std::fill(b.begin(), b.end(), '-');
  h->scatterv(a.data(), b.data(), {3}, 0, d, dl);
  EXPECT_EQ(b, a);
  h->allgatherv(b.data(), b.data(), {3}, d, dl);  // in place
  h->broadcast(b.data(), 3, 0, d, dl);
  h->barrier(d, dl);
  EXPECT_EQ(b, a);
}

TEST(Selection, InvalidAlgoSpecsNameTheVariableAndTheAccepted) {
  auto expectBad = [](const std::string& spec, const std::string& mention) {
    try {
      parseAlgoSpec(spec);
      ADD_FAILURE() << spec << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("ACCL_ALGO"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  expectBad("allreduce:fast", "accepted: ring, recursive_doubling, hierarchical");
  expectBad("allreduc:ring", "accepted ops: allreduce");
  expectBad("broadcast", "accepted: tree, ring, hierarchical");
  expectBad("alltoall:ring", "accepted: direct");
  EXPECT_NO_THROW(parseAlgoSpec(""));
  EXPECT_NO_THROW(parseAlgoSpec("allreduce:rd;;barrier:rd;"));
}

TEST(Wire, HeadersThatDoNotParseAreRefused) {
  FrameHeader ok{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Data), 0, 5, 0, 16, 64, OpDesc{}};
  EXPECT_EQ(validateHeader(ok), "");
  auto bad = [&](const std::function<void(FrameHeader&)>& f, const std::string& why) {
    FrameHeader h = ok;
    f(h);
    EXPECT_NE(validateHeader(h).find(why), std::string::npos) << validateHeader(h);
    EXPECT_FALSE(headerValid(h)) << why;
  };
  EXPECT_TRUE(headerValid(ok));
  bad([](FrameHeader& h) { h.magic ^= 1; }, "magic");
  bad([](FrameHeader& h) { h.version = 9; }, "version 9");
  bad([](FrameHeader& h) { h.type = 77; }, "frame type 77");
  bad([](FrameHeader& h) { h.total = kMaxMessageBytes + 1; h.len = 0; }, "too large");
  bad([](FrameHeader& h) { h.offset = 60; }, "outside");
  bad([](FrameHeader& h) { h.len = 65; }, "outside");
  bad([](FrameHeader& h) { h.type = static_cast<uint8_t>(FrameType::Query); }, "control frame");
  bad([](FrameHeader& h) { h.desc.dtype = 200; }, "descriptor");
  // A farewell: one frame of a uint32 per queue pair.
  auto farewell = [](uint64_t len, uint64_t total) {
    return FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Farewell), 0, 0, 0, len, total, OpDesc{}};
  };
  EXPECT_EQ(validateHeader(farewell(8, 8)), "");
  EXPECT_NE(validateHeader(farewell(6, 6)).find("malformed farewell (6 bytes"), std::string::npos);
  EXPECT_NE(validateHeader(farewell(4, 8)).find("malformed farewell"), std::string::npos);
  EXPECT_NE(validateHeader(farewell(kMaxFarewellBytes + 4, kMaxFarewellBytes + 4)).find("malformed farewell"),
            std::string::npos);
  // A point-to-point message may come in chunks (verbs); whether a chunk
  // continues a message begun on its connection is the receiver's check.
  FrameHeader chunk = ok;
  chunk.type = static_cast<uint8_t>(FrameType::Tagged);
  chunk.offset = 16;
  EXPECT_EQ(validateHeader(chunk), "");
  EXPECT_TRUE(headerValid(chunk));
  EXPECT_TRUE(headerValid(farewell(8, 8)));
  EXPECT_FALSE(headerValid(farewell(6, 6)));
  // The quick check and the described one agree on every header of a sweep
  // over the fields each check reads (types, lengths, offsets at the limits).
  int n = 0;
  for (int type = 0; type < 9; ++type)
    for (uint64_t total : {uint64_t{0}, uint64_t{4}, uint64_t{6}, uint64_t{64}, kMaxAbortBytes + 1,
                           kMaxFarewellBytes + 4, kMaxMessageBytes, kMaxMessageBytes + 1})
      for (uint64_t len : {uint64_t{0}, uint64_t{4}, uint64_t{64}, total, total + 1})
        for (uint64_t offset : {uint64_t{0}, uint64_t{4}, total - len, total})
          for (int flaw = 0; flaw < 6; ++flaw) {
            FrameHeader h{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, 0, offset, len, total, OpDesc{}};
            if (flaw == 1) h.magic ^= 1;
            if (flaw == 2) h.version = 2;
            if (flaw == 3) h.desc.op = 200;
            if (flaw == 4) h.desc.dtype = 200;
            if (flaw == 5) h.desc.redop = 200;
            EXPECT_EQ(headerValid(h), validateHeader(h).empty()) << "type " << type << " total " << total << " len "
                                                                  << len << " offset " << offset << " flaw " << flaw;
            n += headerValid(h);
          }
  EXPECT_GT(n, 50);  // the sweep holds valid headers too
}

// The non-temporal copy against memcpy: every destination alignment within a
// 16-byte line and sizes around its 64-byte steps, the bytes on either side of
// the destination untouched; and the threshold setter.
TEST(CopyStreaming, CopiesExactlyWhatMemcpyWouldAtEveryAlignmentAndSize) {
  const size_t sizes[] = {0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096 + 7, (1u << 20) + 3};
  std::vector<char> src((1u << 20) + 64 + 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 7);
  for (size_t n : sizes)
    for (size_t dstOff = 0; dstOff < 16; ++dstOff)
      for (size_t srcOff : {size_t(0), size_t(3)}) {
        std::vector<char> got(n + 64, '\x5a'), want(n + 64, '\x5a');
        internal::copyStreaming(got.data() + 16 + dstOff % 16, src.data() + srcOff, n);
        std::memcpy(want.data() + 16 + dstOff % 16, src.data() + srcOff, n);
        ASSERT_TRUE(got == want) << n << " bytes to offset " << dstOff << " from offset " << srcOff;
      }
}

TEST(CopyStreaming, CopyOutStreamsFromTheThresholdAndTheCacheSizeIsRead) {
  size_t before = internal::streamingMin();
  EXPECT_GT(before, 0u);
  internal::setStreamingMin(4096);
  EXPECT_EQ(internal::streamingMin(), 4096u);
  std::vector<char> a(8192, 'a'), b(8192, 'b');
  internal::copyOut(b.data(), a.data(), 100, 4095);  // below: memcpy
  internal::copyOut(b.data() + 100, a.data(), 8092, 8192);  // from it: streamed
  EXPECT_TRUE(a == b);
  internal::setStreamingMin(before);
  // sysfs lists the caches on Linux; 0 only where it does not.
  size_t llc = internal::lastLevelCacheBytes();
  if (llc) {
    EXPECT_GE(llc, size_t(64) << 10);
    EXPECT_LE(llc, size_t(4) << 30);
  }
}

// The slot's write way: the probe's choice stands, and plain writes that run
// at under half the streamed ones' rate (both measured) switch to streamed.
TEST(CopyStreaming, SlotWritesStreamWhereProbedOrWherePlainWritesRunAtUnderHalfTheStreamedRate) {
  EXPECT_TRUE(internal::streamWay(true, 40e9, 20e9));
  EXPECT_FALSE(internal::streamWay(false, 40e9, 20e9));
  EXPECT_FALSE(internal::streamWay(false, 15e9, 25e9));  // slower, not half
  EXPECT_TRUE(internal::streamWay(false, 2.7e9, 31e9));  // the slow state seen
  EXPECT_FALSE(internal::streamWay(false, 0, 31e9));     // plain not measured yet
  EXPECT_FALSE(internal::streamWay(false, 2.7e9, 0));    // streamed not measured yet
}
