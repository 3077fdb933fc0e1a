// The accl backend's cost model: its predictions against the alpha-beta-gamma
// formulas worked out by hand for fixed parameters, the choice it makes, how
// it steers the selection (ACCL_ALGO still first), and the tuning file's
// parsing (round trip; each malformed field named).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "accl/errors.h"
#include "algorithms/cost_model.h"
#include "algorithms/select.h"

using namespace accl;
using namespace accl::core;

namespace {

// alpha 10 us, 1 GB/s (0.001 us/B), reduction 2 GB/s (0.0005 us/B), 2 us per further message.
CostModel fixed() {
  CostModel m;
  m.transport = "tcp";
  m.link() = LinkParams{10, 0.001, 0.0005, 2};
  return m;
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST(CostModel, PredictionsFollowTheFormulasWorkedOutByHand) {
  CostModel m = fixed();
  const size_t n = 1000000;
  // Ring allreduce, p = 4: 2(p-1)a + 2(p-1)/p n b + (p-1)/p n g = 60 + 1500 + 375.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, n, 4), 1935);
  // Recursive doubling, p = 4: 2 steps of (a + n b + n g) = 2 x 1510.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4), 3020);
  // p = 3: one step among 2, plus the third rank folded in and served: 1510 + 2 x 1010 + 500.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 3), 4030);
  // Binomial broadcast, p = 4: 2 x (10 + 1000).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Broadcast, Algo::Tree, n, 4), 2020);
  // Chain broadcast: pieces of 256 KiB (4 of them for 1e6 bytes), p - 2 + 4 = 6 steps of 10 + 262.144.
  EXPECT_NEAR(m.predictUs(Coll::Broadcast, Algo::Ring, n, 4), 6 * (10 + 262.144), 1e-9);
  // Binomial reduce: 2 x (10 + 1000 + 500).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Reduce, Algo::Tree, n, 4), 3020);
  // Allgather of 1e6 bytes in all: ring 3 x (10 + 250); direct 10 + 2 x 2 + 750.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Ring, n, 4), 780);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Direct, n, 4), 764);
  // Reduce-scatter of 1e6 bytes: ring 3 x (10 + 250000 x 0.0015); by recursive doubling, the whole allreduce.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::ReduceScatter, Algo::Ring, n, 4), 1155);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::ReduceScatter, Algo::RecursiveDoubling, n, 4), 3020);
  // Alltoall, 1e6 bytes sent by each: 3 x (10 + 250).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Alltoall, Algo::Direct, n, 4), 780);
  // Blocks of up to 32 KiB go in one round: 40000 bytes, 10000 to each of 3: 10 + 2 x 2 + 30.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Alltoall, Algo::Direct, 40000, 4), 44);
  // Gather of 1e6 bytes per rank: the root takes 3 blocks: 10 + 2 x 2 + 3000.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Gather, Algo::Direct, n, 4), 3014);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Scatter, Algo::Direct, n, 4), 3014);
  // Dissemination barrier: ceil(log2 p) latencies.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Barrier, Algo::RecursiveDoubling, 0, 4), 20);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Barrier, Algo::RecursiveDoubling, 0, 5), 30);
  // One rank: nothing to move.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, n, 1), 0);
  EXPECT_NE(what([&] { m.predictUs(Coll::Alltoall, Algo::Ring, n, 4); }).find("alltoall has no algorithm ring"),
            std::string::npos);
}

TEST(CostModel, AStepOfPiecesReducesEachWhileTheNextComes) {
  CostModel m = fixed();
  const size_t n = size_t(64) << 20;  // pieces of 1 MiB (algo::exchangePiece)
  const double piece = 1 << 20;
  // Recursive doubling, p = 2: one step, the transfer (beta, the slower) and the last piece's reduction.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 2), 10 + n * 0.001 + piece * 0.0005);
  // Ring, p = 2: a reduction step of half (1 MiB pieces too), then a step that passes it on.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, n, 2),
                   (10 + n / 2 * 0.001 + piece * 0.0005) + (10 + n / 2 * 0.001));
  // So between two ranks recursive doubling wins at every size (a latency
  // less); among four, the ring still does at large sizes (1.5 n against 2 n).
  for (size_t b : {size_t(8), size_t(1) << 20, size_t(16) << 20, n})
    EXPECT_EQ(m.best(Coll::Allreduce, b, 2), Algo::RecursiveDoubling);
  EXPECT_EQ(m.best(Coll::Allreduce, n, 4), Algo::Ring);
  // Where the reduction is the slower (a fast link), it sets the pace instead.
  CostModel fast = fixed();
  fast.link().betaUsPerB = 0.0001;
  EXPECT_DOUBLE_EQ(fast.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 2), 10 + n * 0.0005 + piece * 0.0001);
  EXPECT_DOUBLE_EQ(fast.predictUs(Coll::ReduceScatter, Algo::Ring, n, 2), 10 + n / 2 * 0.0005 + piece * 0.0001);
  // A step of one piece (below 1 MiB) receives, then reduces: a + n beta + n gamma.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 1000000, 2), 10 + 1000 + 500);
}

TEST(CostModel, StepsWithinAHostCostTheLocalLink) {
  CostModel m = fixed();
  m.local() = LinkParams{1, 0.0001, 0.0005, 0.5};
  const size_t n = 1000000;
  // 4 ranks on 2 hosts (ranks 0,1 and 2,3): recursive doubling's first step
  // (distance 1) stays on each host, the second crosses: (1 + 100 + 500) + (10 + 1000 + 500).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 2), 601 + 1510);
  // And the binomial broadcast alike: (1 + 100) + (10 + 1000).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Broadcast, Algo::Tree, n, 4, 2), 101 + 1010);
  // The ring's slowest link crosses hosts: as with one rank per host.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, n, 4, 2), m.predictUs(Coll::Allreduce, Algo::Ring, n, 4));
  // Direct allgather of 1e6 bytes: 2 blocks of 250000 over the link (10 + 2 + 500) beside 1 on the host (1 + 25).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Direct, n, 4, 2), 512);
  // Gather of 1e6 bytes per rank: the root takes 2 blocks over the link (10 + 2 + 2000), 1 on the host (1 + 100).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Gather, Algo::Direct, n, 4, 2), 2012);
  // One host per rank (hosts = 0 or = p): the link alone.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 4), 3020);
  // A cheap local link makes recursive doubling win where the link alone would pick the ring.
  // 10000 bytes: ring 3 x (10 + 2500 x 0.0015) = 41.25 against 2 x (10 + 10 + 5) = 50 on the link alone,
  // and against (1 + 1 + 5) + (10 + 10 + 5) = 32 with the first step on the host.
  CostModel flat = fixed();
  EXPECT_EQ(flat.best(Coll::ReduceScatter, 10000, 4), Algo::Ring);
  EXPECT_EQ(m.best(Coll::ReduceScatter, 10000, 4, 2), Algo::RecursiveDoubling);
  Layout l;
  l.size = 4;
  l.hosts = 2;
  l.maxLocal = 2;
  // There the backend goes along the rails (even hosts); flat, as where the
  // hosts differ in size, the model's choice is the selection's.
  EXPECT_EQ(choose(Coll::ReduceScatter, 10000, l, AlgoOverrides{}, &m), Algo::Hierarchical);
  EXPECT_EQ(chooseInterHost(Coll::ReduceScatter, 10000, 4, AlgoOverrides{}, &m, 2), Algo::RecursiveDoubling);
}

TEST(CostModel, BestIsTheLowestPredictionAndMovesWithTheParameters) {
  CostModel m = fixed();
  // Small: latency terms rule (RD 2 steps against ring's 6); large: bandwidth (ring moves 1.5 n, RD 2 n).
  EXPECT_EQ(m.best(Coll::Allreduce, 8, 4), Algo::RecursiveDoubling);
  EXPECT_EQ(m.best(Coll::Allreduce, 1000000, 4), Algo::Ring);
  for (size_t b : {size_t(8), size_t(4096), size_t(1) << 20, size_t(64) << 20})
    for (Coll c : {Coll::Allreduce, Coll::Broadcast, Coll::Allgather, Coll::ReduceScatter}) {
      Algo a = m.best(c, b, 8);
      for (Algo x : CostModel::candidates(c)) EXPECT_LE(m.predictUs(c, a, b, 8), m.predictUs(c, x, b, 8));
    }
  // A link whose latency is 100x higher keeps recursive doubling longer.
  CostModel slow = fixed();
  slow.link().alphaUs = 1000;
  EXPECT_EQ(slow.best(Coll::Allreduce, 100000, 4), Algo::RecursiveDoubling);
  EXPECT_EQ(m.best(Coll::Allreduce, 100000, 4), Algo::Ring);
}

TEST(CostModel, SteersTheSelectionBetweenHostsAndAcclAlgoStillWins) {
  CostModel m = fixed();
  Layout l;  // 4 ranks, each its own host
  l.size = 4;
  l.hosts = 4;
  l.maxLocal = 1;
  EXPECT_EQ(choose(Coll::Allreduce, 1000000, l, AlgoOverrides{}, &m), Algo::Ring);
  EXPECT_EQ(choose(Coll::Allreduce, 8, l, AlgoOverrides{}, &m), Algo::RecursiveDoubling);
  CostModel slow = fixed();
  slow.link().alphaUs = 1000;
  EXPECT_EQ(choose(Coll::Allreduce, 100000, l, AlgoOverrides{}, &slow), Algo::RecursiveDoubling);
  // Without a model: the fixed threshold (64 KiB) decides.
  EXPECT_EQ(choose(Coll::Allreduce, 100000, l, AlgoOverrides{}), Algo::Ring);
  // ACCL_ALGO first.
  EXPECT_EQ(choose(Coll::Allreduce, 1000000, l, parseAlgoSpec("allreduce:rd"), &m), Algo::RecursiveDoubling);
  // One host: shared memory whatever the model says.
  Layout one;
  one.size = 4;
  one.hosts = 1;
  one.maxLocal = 4;
  EXPECT_EQ(choose(Coll::Allreduce, 1000000, one, AlgoOverrides{}, &m), Algo::Shm);
  // Hierarchical layouts: the exchange between hosts is the model's choice.
  EXPECT_EQ(chooseInterHost(Coll::Allreduce, 1000000, 4, AlgoOverrides{}, &m), Algo::Ring);
  EXPECT_NE(describeSelection(l, AlgoOverrides{}, &m).find("recursive_doubling"), std::string::npos);
}

TEST(CostModel, TuningFileRoundTripsAndEachMalformedFieldIsNamed) {
  CostModel m = fixed();
  CostModel back = CostModel::fromJson(m.toJson(), "test");
  EXPECT_EQ(back.transport, "tcp");
  EXPECT_DOUBLE_EQ(back.link().alphaUs, 10);
  EXPECT_DOUBLE_EQ(back.link().betaUsPerB, 0.001);
  EXPECT_DOUBLE_EQ(back.link().gammaUsPerB, 0.0005);
  EXPECT_DOUBLE_EQ(back.link().overheadUs, 2);
  EXPECT_DOUBLE_EQ(back.local().alphaUs, m.local().alphaUs);
  EXPECT_EQ(back.source(), "test");
  // "local" is optional (defaults), but malformed when present.
  EXPECT_NE(what([] {
              CostModel::fromJson("{\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, "
                                  "\"gamma_us_per_byte\": 0, \"overhead_us\": 0}, \"local\": {\"alpha_us\": 1}}",
                                  "f");
            }).find("local.beta_us_per_byte is missing"),
            std::string::npos);

  EXPECT_NE(what([] { CostModel::fromJson("{nope", "f"); }).find("f: not JSON"), std::string::npos);
  EXPECT_NE(what([] { CostModel::fromJson("{\"version\": 1}", "f"); }).find("no object \"link\""), std::string::npos);
  std::string ok = "\"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, \"gamma_us_per_byte\": 0, \"overhead_us\": 0}";
  EXPECT_NE(what([&] { CostModel::fromJson("{\"version\": 2, " + ok + "}", "f"); }).find("\"version\" must be 1"),
            std::string::npos);
  EXPECT_NE(what([&] { CostModel::fromJson("{\"version\": 1, \"transport\": \"udp\", " + ok + "}", "f"); })
                .find("\"transport\" must be \"tcp\" or \"ib\""),
            std::string::npos);
  EXPECT_NE(what([] {
              CostModel::fromJson("{\"version\": 1, \"link\": {\"alpha_us\": -1, \"beta_us_per_byte\": 0.001, "
                                  "\"gamma_us_per_byte\": 0, \"overhead_us\": 0}}",
                                  "f");
            }).find("link.alpha_us = -1"),
            std::string::npos);
  EXPECT_NE(what([] {
              CostModel::fromJson("{\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, "
                                  "\"overhead_us\": 0}}",
                                  "f");
            }).find("link.gamma_us_per_byte is missing"),
            std::string::npos);
  EXPECT_NE(what([] {
              CostModel::fromJson("{\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0, "
                                  "\"gamma_us_per_byte\": 0, \"overhead_us\": 0}}",
                                  "f");
            }).find("beta_us_per_byte must be > 0"),
            std::string::npos);
  EXPECT_NE(what([] { CostModel::fromFile("/nonexistent/tuning.json"); })
                .find("tuning file /nonexistent/tuning.json cannot be read (ACCL_TUNING_FILE"),
            std::string::npos);
  std::string path = ::testing::TempDir() + "cost_model_test.json";
  std::ofstream(path) << m.toJson();
  EXPECT_DOUBLE_EQ(CostModel::fromFile(path).link().betaUsPerB, 0.001);
  std::remove(path.c_str());
}

TEST(CostModel, DefaultsComeFromTheTransportAndTheLinkSpeed) {
  // 25 Gbit/s of TCP at 80 %: 2500 bytes per microsecond.
  CostModel tcp = CostModel::defaults("tcp", 25);
  EXPECT_DOUBLE_EQ(tcp.link().betaUsPerB, 1.0 / 2500);
  EXPECT_NE(tcp.source().find("25 Gbit/s (the NIC's speed from the topology)"), std::string::npos);
  CostModel ib = CostModel::defaults("ib", 0);  // unknown speed: 100 Gbit/s assumed
  EXPECT_EQ(ib.transport, "ib");
  EXPECT_DOUBLE_EQ(ib.link().betaUsPerB, 1.0 / (100e3 / 8 * 0.9));
  EXPECT_LT(ib.link().alphaUs, tcp.link().alphaUs);
  EXPECT_NE(ib.source().find("assumed"), std::string::npos);
}

TEST(CostModel, LayoutPredictionIsWhatTheBackendRuns) {
  CostModel m = fixed();
  m.segment() = LinkParams{0.5, 0.0002, 0, 0};  // 5 GB/s per byte of the vector
  m.setSegmentRanks(2);
  const size_t n = 1 << 20;
  std::string plan;
  // One host: the shared segment, alpha + n beta for any op.
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, n, 4, 1, &plan), 0.5 + n * 0.0002);
  EXPECT_EQ(plan, "shm");
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Barrier, 0, 4, 1), 0.5);
  // 2 hosts x 2: reduce-scatter and allgather on the segment (two
  // handshakes, one pass), and each local rank's half h exchanged between
  // the 2 hosts: a 2-rank ring (2 alpha + h beta + h gamma / 2) beats
  // recursive doubling (alpha + h beta + h gamma) at this reduction rate.
  // Both halves cross at once over the host's one link: beta counts twice.
  const double h = n / 2.0;
  ASSERT_LT(2 * 10 + h * 0.001 + h / 2 * 0.0005, 10 + h * 0.001 + h * 0.0005);
  double ring = 2 * 10 + h * 2 * 0.001 + h / 2 * 0.0005;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, n, 4, 2, &plan), 2 * 0.5 + n * 0.0002 + ring);
  EXPECT_EQ(plan, "hierarchical(shm+ring)");
  // 6 ranks on 4 hosts is uneven: the whole vector between one rank per host.
  double whole = m.predictUs(Coll::Allreduce, m.best(Coll::Allreduce, n, 4, 4), n, 4, 4);
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, n, 6, 4), 2 * 0.5 + n * 0.0002 + whole);
  // A hierarchical broadcast uses the segment once (after the exchange).
  double bc = m.predictUs(Coll::Broadcast, m.best(Coll::Broadcast, n, 2, 2), n, 2, 2);
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Broadcast, n, 4, 2), 0.5 + n * 0.0002 + bc);
  // Allgather on 2 hosts x 2: each rail (a block from each host, n / 2 in
  // all) gathered between the hosts, both rails at once (beta twice), then
  // the segment's allgather of the whole vector and its copy into rank
  // order (two passes, one handshake). Between 2 ranks direct and the ring
  // are one message each (alpha + n / 4 beta): the earlier, direct, is taken.
  const double rail = m.predictUs(Coll::Allgather, m.best(Coll::Allgather, n / 2, 2, 2), n / 2, 2, 2);
  EXPECT_DOUBLE_EQ(rail, 10 + n / 4.0 * 0.001);
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allgather, n, 4, 2, &plan),
                   0.5 + 2 * n * 0.0002 + 10 + n / 4.0 * 2 * 0.001);
  EXPECT_EQ(plan, "hierarchical(shm+direct)");
  // Reduce_scatter on 2 hosts x 2: the input into rail order and the
  // segment's reduce-scatter (two passes, one handshake), then each rail's
  // n / 2 between the 2 hosts, both at once: the ring (alpha + n / 4 (2 beta
  // + gamma)) beats recursive doubling (the rail's whole vector).
  EXPECT_EQ(m.best(Coll::ReduceScatter, n / 2, 2, 2), Algo::Ring);
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::ReduceScatter, n, 4, 2, &plan),
                   0.5 + 2 * n * 0.0002 + 10 + n / 4.0 * (2 * 0.001 + 0.0005));
  EXPECT_EQ(plan, "hierarchical(shm+ring)");
  // Above kHierarchicalAllgatherMax the allgather goes flat, as the backend runs it.
  const size_t big = kHierarchicalAllgatherMax + 4;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allgather, big, 4, 2, &plan),
                   m.predictUs(Coll::Allgather, m.best(Coll::Allgather, big, 4, 2), big, 4, 2));
  EXPECT_EQ(plan.find("hierarchical"), std::string::npos);
  // Hosts of different sizes: flat.
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::ReduceScatter, n, 5, 3, &plan),
                   m.predictUs(Coll::ReduceScatter, m.best(Coll::ReduceScatter, n, 5, 3), n, 5, 3));
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allgather, n, 5, 3, &plan),
                   m.predictUs(Coll::Allgather, m.best(Coll::Allgather, n, 5, 3), n, 5, 3));
  // One rank per host: flat, as before.
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, n, 4, 4),
                   m.predictUs(Coll::Allreduce, m.best(Coll::Allreduce, n, 4, 4), n, 4, 4));
  EXPECT_EQ(m.predictLayoutUs(Coll::Allreduce, n, 1, 1), 0.0);

  // The segment round-trips through the tuning file; malformed ones are named.
  CostModel back = CostModel::fromJson(m.toJson(), "t");
  EXPECT_DOUBLE_EQ(back.segment().betaUsPerB, 0.0002);
  EXPECT_EQ(back.segmentRanks(), 2);
  std::string link = "\"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, \"gamma_us_per_byte\": 0, \"overhead_us\": 0}";
  EXPECT_NE(what([&] { CostModel::fromJson("{\"version\": 1, " + link + ", \"segment\": 3}", "f"); })
                .find("\"segment\" must be an object"),
            std::string::npos);
  EXPECT_NE(what([&] {
              CostModel::fromJson("{\"version\": 1, " + link + ", \"segment\": {\"alpha_us\": 1, \"beta_us_per_byte\": "
                                  "0.001, \"gamma_us_per_byte\": 0, \"overhead_us\": 0}, \"segment_ranks\": 1}",
                                  "f");
            }).find("\"segment_ranks\" must be an integer 2 - 4096"),
            std::string::npos);
  // Without a segment in the file: the default, unmeasured.
  CostModel plain = CostModel::fromJson("{\"version\": 1, " + link + "}", "f");
  EXPECT_EQ(plain.segmentRanks(), 0);
  EXPECT_GT(plain.segment().betaUsPerB, 0);
}

TEST(CostModel, TheSegmentsMeasuredCurveSetsItsTimeAtEachSize) {
  CostModel m = fixed();
  m.segment() = LinkParams{0.5, 0.0002, 0, 0};
  m.setSegmentRanks(2);
  // Worked out by hand: the bytes' part is each point's time less the 8 B
  // point's (0.5 us); 4 MiB costs less per byte than 1 MiB before it (in the
  // cache), 16 MiB more, and 64 MiB's noisy point (below 16 MiB's) counts as
  // 16 MiB's time.
  const double M = 1 << 20;
  m.setSegmentCurve({{8, 0.5}, {M, 100.5}, {4 * M, 300.5}, {16 * M, 2000.5}, {64 * M, 1800.5}});
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(4), 4 * 0.0002);                      // below the first point: beta
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(1 << 20), 100.0);                     // on a point
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(2 << 20), 100.0 + 200.0 / 3);         // a third of the way to 4 MiB
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(10 << 20), 300.0 + 1700.0 / 2);       // half way from 4 to 16 MiB
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(64 << 20), 2000.0);                   // not below 16 MiB's
  // Past the last point: the last piece's slope, here 0 (flat), so beta.
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(128 << 20), 2000.0 + 64 * M * 0.0002);
  // A rising last piece extends at its own slope.
  m.setSegmentCurve({{8, 0.5}, {16 * M, 2000.5}, {64 * M, 10000.5}});
  EXPECT_DOUBLE_EQ(m.segmentBytesUs(128 << 20), 10000.0 + 64 * M * (8000.0 / (48 * M)));
  // The one-host allreduce is the handshake and that part: the measured time at a point.
  std::string plan;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, 16 << 20, 2, 1, &plan), 2000.5);
  EXPECT_EQ(plan, "shm");
  // The tuning file carries it; a file without it keeps alpha + n * beta.
  CostModel back = CostModel::fromJson(m.toJson(), "t");
  ASSERT_EQ(back.segmentCurve().size(), 3u);
  EXPECT_DOUBLE_EQ(back.segmentCurve()[2].first, 64 * M);
  EXPECT_DOUBLE_EQ(back.segmentCurve()[2].second, 10000.5);
  EXPECT_DOUBLE_EQ(back.segmentBytesUs(32 << 20), m.segmentBytesUs(32 << 20));
  m.setSegmentCurve({});
  EXPECT_DOUBLE_EQ(CostModel::fromJson(m.toJson(), "t").segmentBytesUs(32 << 20), 32 * M * 0.0002);
  // Malformed curves are named with what is accepted.
  std::string head = "{\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, \"gamma_us_per_byte\": 0, "
                     "\"overhead_us\": 0}, \"segment\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, "
                     "\"gamma_us_per_byte\": 0, \"overhead_us\": 0}, \"segment_curve\": ";
  const std::pair<const char*, const char*> bad[] = {
      {"[{\"bytes\": 8, \"allreduce_us\": 1}]",
       "\"segment_curve\" is not such an array; accepted: an array of at least 2"},
      {"[{\"bytes\": 8, \"allreduce_us\": 1}, {\"bytes\": 8, \"allreduce_us\": 2}]",
       "segment_curve[1].bytes = 8 does not follow the point before it"},
      {"[{\"bytes\": 8, \"allreduce_us\": 1}, {\"bytes\": 64, \"allreduce_us\": -2}]",
       "segment_curve[1].allreduce_us is missing or not a finite number > 0"},
      {"[{\"bytes\": 0.5, \"allreduce_us\": 1}, {\"bytes\": 64, \"allreduce_us\": 2}]",
       "segment_curve[0].bytes is missing or not an integer > 0"},
  };
  for (const auto& [curve, error] : bad)
    EXPECT_NE(what([&] { CostModel::fromJson(head + curve + "}", "f"); }).find(error), std::string::npos) << curve;
  EXPECT_NE(what([] {
              CostModel::fromJson("{\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, "
                                  "\"gamma_us_per_byte\": 0, \"overhead_us\": 0}, \"segment_curve\": []}",
                                  "f");
            }).find("\"segment_curve\" needs \"segment\" beside it"),
            std::string::npos);
}

TEST(CostModel, ALinkMeasuredWithEveryPairAtOnceSetsTheStepsWhereAHostsRanksAllCross) {
  CostModel m = fixed();  // the link alone: alpha 10, 0.001 us/B, overhead 2
  m.local() = LinkParams{1, 0.0001, 0.0005, 0.5};
  const size_t n = 1000000;
  double rdBefore = m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 2);
  double ringBefore = m.predictUs(Coll::Allreduce, Algo::Ring, n, 4, 2);
  // Two pairs at once: each takes 30 us of latency and half the bandwidth.
  m.linkShared() = LinkParams{30, 0.002, 0.0005, 2};
  m.setSharedRanks(2);
  // One rank per host: nothing shares the link; as before.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4), 3020);
  // 2 ranks per host, recursive doubling: the step on the host (1 + 100 + 500), then both ranks of
  // each host cross at once (30 + 2000 + 500).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 2), 601 + 2530);
  EXPECT_DOUBLE_EQ(rdBefore, 601 + 1510);
  // Ring: one pair per host crosses at each step, the others' CPUs are busy: the shared latency
  // with the link's bandwidth: 6 x 30 + 1.5 n x 0.001 + 0.75 n x 0.0005.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, n, 4, 2), 180 + 1500 + 375);
  EXPECT_DOUBLE_EQ(ringBefore, 60 + 1500 + 375);
  // Direct allgather (every rank to every other): 2 blocks of 250000 over the shared link
  // (30 + 2 + 1000) beside 1 on the host (1 + 25).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Direct, n, 4, 2), 1032);
  // Gather: only the root's messages cross; the shared latency, the link's bandwidth (30 + 2 + 2000).
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Gather, Algo::Direct, n, 4, 2), 2032);
  // 4 ranks per host against 2 measured: the bandwidth of the shared steps split twice as far.
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Direct, 8 * 125000, 8, 2),
                   std::max(30 + 3 * 2 + 4 * 125000 * 0.004, 1 + 2 * 0.5 + 3 * 125000 * 0.0001));
  // The hierarchical allreduce's slices cross at once: the shared link (2 pairs measured, 2 ranks per host).
  m.segment() = LinkParams{0.5, 0.0002, 0, 0};
  m.setSegmentRanks(2);
  const double h = n / 2.0;
  double ring2 = 2 * 30 + h * 0.002 + h / 2 * 0.0005, rd2 = 30 + h * 0.002 + h * 0.0005;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, n, 4, 2), 2 * 0.5 + n * 0.0002 + std::min(ring2, rd2));

  // A shared link measured faster than the link alone (noise) counts as the link.
  CostModel noisy = m;
  noisy.linkShared() = LinkParams{5, 0.0005, 0.0005, 1};
  EXPECT_DOUBLE_EQ(noisy.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 2), 601 + 1510);

  // It round-trips through the tuning file; without it the model is as before; malformed ones are named.
  CostModel back = CostModel::fromJson(m.toJson(), "t");
  EXPECT_EQ(back.sharedRanks(), 2);
  EXPECT_DOUBLE_EQ(back.linkShared().alphaUs, 30);
  EXPECT_DOUBLE_EQ(back.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, n, 4, 2), 601 + 2530);
  std::string link = "\"link\": {\"alpha_us\": 10, \"beta_us_per_byte\": 0.001, \"gamma_us_per_byte\": 0.0005, "
                     "\"overhead_us\": 2}";
  std::string shared = "\"link_shared\": {\"alpha_us\": 30, \"beta_us_per_byte\": 0.002, \"gamma_us_per_byte\": 0, "
                       "\"overhead_us\": 2}";
  CostModel plain = CostModel::fromJson("{\"version\": 1, " + link + "}", "f");
  EXPECT_EQ(plain.sharedRanks(), 0);
  EXPECT_EQ(plain.toJson().find("link_shared"), std::string::npos);
  EXPECT_NE(what([&] { CostModel::fromJson("{\"version\": 1, " + link + ", " + shared + "}", "f"); })
                .find("\"shared_ranks\" must be an integer 2 - 4096 beside \"link_shared\""),
            std::string::npos);
  EXPECT_NE(what([&] { CostModel::fromJson("{\"version\": 1, " + link + ", \"link_shared\": [1], \"shared_ranks\": 2}", "f"); })
                .find("\"link_shared\" must be an object"),
            std::string::npos);
  EXPECT_NE(what([&] {
              CostModel::fromJson("{\"version\": 1, " + link + ", \"link_shared\": {\"alpha_us\": -1, "
                                  "\"beta_us_per_byte\": 0.002, \"gamma_us_per_byte\": 0, \"overhead_us\": 2}, "
                                  "\"shared_ranks\": 2}", "f");
            }).find("link_shared.alpha_us"),
            std::string::npos);
}

// The messages each algorithm's host handles, counted by hand (4 ranks on 2
// hosts in blocks: ranks 0,1 on one, 2,3 on the other; each message once on
// its sending and once on its receiving side), and the CPU floor they put
// under the prediction only where a host's ranks outnumber its cores.
TEST(CostModel, HostsWithMoreRanksThanCoresTakeAtLeastTheCpuTimeOfTheirMessages) {
  auto msgs = [](Coll c, Algo a, size_t bytes, int p, int hosts) {
    HostMessages m = CostModel::hostMessages(c, a, bytes, p, hosts);
    return std::make_pair(m.net, m.local);
  };
  using P = std::pair<double, double>;
  // Recursive doubling: distance 1 within the host (each of its 2 ranks sends
  // and receives one), distance 2 across: 4 local, then 4 between hosts.
  EXPECT_EQ(msgs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 2), P(4, 4));
  // One rank per host: both steps cross (a host's one rank, 2 messages each).
  EXPECT_EQ(msgs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 0), P(4, 0));
  // Ring 0-1-2-3: per step one message leaves each host and one comes in, the
  // other two stay; 2 (p - 1) = 6 steps.
  EXPECT_EQ(msgs(Coll::Allreduce, Algo::Ring, 8, 4, 2), P(12, 12));
  EXPECT_EQ(msgs(Coll::Allgather, Algo::Ring, 8, 4, 2), P(6, 6));
  // Direct: each of the host's 2 ranks sends to and receives from the 2 of the
  // other host (8 between hosts) and its neighbour (4 within).
  EXPECT_EQ(msgs(Coll::Allgather, Algo::Direct, 8, 4, 2), P(8, 4));
  EXPECT_EQ(msgs(Coll::Alltoall, Algo::Direct, 8, 4, 2), P(8, 4));
  // Gather: the root's 2 messages from the other host, and 1 from its
  // neighbour (sent and received on the root's host).
  EXPECT_EQ(msgs(Coll::Gather, Algo::Direct, 8, 4, 2), P(2, 2));
  // A binomial tree over 4 single-rank hosts: 1, then 2 pairs: 3 messages sent
  // and 3 received over 4 hosts.
  EXPECT_EQ(msgs(Coll::Broadcast, Algo::Tree, 8, 4, 0), P(1.5, 0));
  // Five ranks one per host: recursive doubling among 4, the fifth folds in
  // and gets the result (4 messages) - over 5 hosts.
  EXPECT_EQ(msgs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 5, 0), P((8.0 + 8.0) / 5 + 4.0 / 5, 0));

  // 10 us of CPU per message between hosts, 1 within; 2 CPUs shared by the
  // calibrated 2 hosts: 1 core per host on 2 hosts.
  CostModel m = fixed();
  CostModel none = m;  // the same model without the CPU's parameters
  m.cpu() = CpuParams{2, 2, 10, 1};
  EXPECT_DOUBLE_EQ(m.cpu().coresPerHost(2), 1.0);
  // 2 ranks on 1 core: the floor, 4 x 10 + 4 x 1 = 44 us, is above the
  // network's 25 us (15 within the host, then 10 across).
  double net = none.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 2);
  EXPECT_NEAR(net, 25.0, 0.1);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 2), 44.0);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, 8, 4, 2), 12 * 10.0 + 12 * 1.0);
  // Large vectors: the network's time is above the floor, which then changes nothing.
  size_t big = 64u << 20;
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::Ring, big, 4, 2), none.predictUs(Coll::Allreduce, Algo::Ring, big, 4, 2));
  // As many cores as ranks (4 CPUs over 2 hosts), or the CPUs not known: no floor.
  for (double cpus : {4.0, 0.0}) {
    m.cpu().machineCpus = cpus;
    EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 2), net) << cpus;
  }
  // Hosts that shared one machine when calibrated: a layout of more hosts is
  // taken to share it too. 4 single-rank hosts on 2 CPUs have half a core
  // each: recursive doubling's 2 steps, 2 messages each per host, take
  // 4 x 10 / 0.5 us. Separate hosts (1 per machine) keep their 2 CPUs each.
  m.cpu().machineCpus = 2;
  EXPECT_DOUBLE_EQ(m.cpu().coresPerHost(4), 0.5);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 0), 4 * 10.0 / 0.5);
  m.cpu().hostsPerMachine = 1;
  EXPECT_DOUBLE_EQ(m.cpu().coresPerHost(4), 2.0);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 0),
                   none.predictUs(Coll::Allreduce, Algo::RecursiveDoubling, 8, 4, 0));
  // The floor moves the choice: where the direct allgather's messages cost the
  // CPUs more than the ring's network time, the ring wins.
  m.cpu() = CpuParams{2, 2, 100, 1};
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Direct, 64, 4, 2), 8 * 100.0 + 4 * 1.0);
  EXPECT_DOUBLE_EQ(m.predictUs(Coll::Allgather, Algo::Ring, 64, 4, 2), 6 * 100.0 + 6 * 1.0);
  EXPECT_EQ(m.best(Coll::Allgather, 64, 4, 2), Algo::Ring);
}

TEST(CostModel, TheCpuFloorCoversAHierarchicalOpsExchangeAndSegmentPhases) {
  CostModel m = fixed();
  CostModel none = m;
  m.cpu() = CpuParams{2, 2, 10, 1};  // 1 core per host on 2 hosts
  // A hierarchical allreduce of 8 B on 2 hosts x 2 ranks: each local rank's
  // slice is exchanged by recursive doubling with its peer on the other host
  // (2 ranks x 2 messages between hosts), and each rank takes part in the
  // segment's two phases (4 within): 4 x 10 + 4 x 1.
  std::string plan;
  double t = m.predictLayoutUs(Coll::Allreduce, 8, 4, 2, &plan);
  EXPECT_EQ(plan, "hierarchical(shm+recursive_doubling)");
  EXPECT_DOUBLE_EQ(t, 44.0);
  EXPECT_LT(none.predictLayoutUs(Coll::Allreduce, 8, 4, 2), 44.0);
  // A broadcast through the hosts: one rank per host crosses (2 messages over
  // 2 hosts: 1 per host), each rank in one segment phase (2 within).
  EXPECT_DOUBLE_EQ(m.hierarchicalUs(Coll::Broadcast, Algo::Tree, 8, 4, 2), 1 * 10.0 + 2 * 1.0);
  // One host of 4 ranks on 1 CPU: the segment's two phases, each rank's part.
  m.cpu().machineCpus = 1;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, 8, 4, 1), 8 * 1.0);
  // One host of the machine that two shared: it has all 4 CPUs, no floor.
  m.cpu().machineCpus = 4;
  EXPECT_DOUBLE_EQ(m.predictLayoutUs(Coll::Allreduce, 8, 4, 1), none.predictLayoutUs(Coll::Allreduce, 8, 4, 1));
}

TEST(CostModel, TheTuningFilesCpuPartRoundTripsAndEachMalformedFieldIsNamed) {
  CostModel m = fixed();
  EXPECT_EQ(m.toJson().find("\"cpu\""), std::string::npos);  // not known: not written
  m.cpu() = CpuParams{2, 3, 7.5, 0.25};
  CostModel back = CostModel::fromJson(m.toJson(), "t");
  EXPECT_DOUBLE_EQ(back.cpu().machineCpus, 2);
  EXPECT_EQ(back.cpu().hostsPerMachine, 3);
  EXPECT_DOUBLE_EQ(back.cpu().usPerMessage, 7.5);
  EXPECT_DOUBLE_EQ(back.cpu().usPerLocalMessage, 0.25);
  std::string link = "\"version\": 1, \"link\": {\"alpha_us\": 1, \"beta_us_per_byte\": 0.001, \"gamma_us_per_byte\": 0, "
                     "\"overhead_us\": 0}";
  auto parse = [&](const std::string& cpu) { return what([&] { CostModel::fromJson("{" + link + ", \"cpu\": " + cpu + "}", "f"); }); };
  EXPECT_NE(parse("3").find("\"cpu\" must be an object"), std::string::npos);
  EXPECT_NE(parse("{\"machine_cpus\": 1, \"hosts_per_machine\": 1, \"us_per_message\": 2}")
                .find("f: cpu.us_per_local_message is missing"),
            std::string::npos);
  EXPECT_NE(parse("{\"machine_cpus\": -1, \"hosts_per_machine\": 1, \"us_per_message\": 2, \"us_per_local_message\": 1}")
                .find("cpu.machine_cpus = -1"),
            std::string::npos);
  EXPECT_NE(parse("{\"machine_cpus\": 1, \"hosts_per_machine\": 1, \"us_per_message\": \"x\", \"us_per_local_message\": 1}")
                .find("cpu.us_per_message is missing or not a number"),
            std::string::npos);
  for (std::string h : {"0", "1.5", "\"2\""})
    EXPECT_NE(parse("{\"machine_cpus\": 1, \"hosts_per_machine\": " + h + ", \"us_per_message\": 2, \"us_per_local_message\": 1}")
                  .find("cpu.hosts_per_machine must be an integer 1 - 4096"),
              std::string::npos)
        << h;
}
