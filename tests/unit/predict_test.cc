// accl-perf --predict: the two-level model, checked against the formulas
// written out here from the model's definition (tools/accl-perf/predict.h),
// on the shared topology fixtures.
#include <gtest/gtest.h>

#include <string>

#include "accl/errors.h"
#include "accl/topology.h"
#include "predict.h"

using accl_perf::buildNodeModel;
using accl_perf::parseNodes;
using accl_perf::predictOp;
using accl_perf::predictStep;
using accl_perf::PredictArgs;
using accl::core::Algo;
using accl::core::Coll;
using accl::core::CostModel;

namespace {

const std::string kDir = ACCL_TOPO_FIXTURES;

accl::topo::Topology load(const std::string& f) { return accl::topo::loadFile(kDir + "/" + f); }

PredictArgs ndv4Args() {
  PredictArgs a;
  a.topology = "nccl-azure-ndv4.xml";
  a.nicGbps = 200;
  a.intraGBs = 230;
  return a;
}

}  // namespace

TEST(Predict, NodeCounts) {
  EXPECT_EQ(parseNodes("8"), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(parseNodes("3"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(parseNodes("1"), (std::vector<int>{1}));
  EXPECT_EQ(parseNodes("4,1,3,3"), (std::vector<int>{1, 3, 4}));
  for (const char* bad : {"", "0", "x", "2,,3", "-1", "5000", "1.5"})
    EXPECT_THROW(parseNodes(bad), accl::InvalidArgument) << bad;
}

TEST(Predict, NodeModelFromTopology) {
  auto t = load("nccl-azure-ndv4.xml");
  auto m = buildNodeModel(ndv4Args(), &t, CostModel::defaults("tcp", 0), false);
  EXPECT_EQ(m.ranksPerNode, 8);
  EXPECT_FALSE(m.hostMode);
  // 8 NICs x 200 Gbit/s = 200 GB/s per node, 90 % of it over verbs, split over 8 rails.
  EXPECT_NEAR(1.0 / m.rail.link().betaUsPerB, 200e3 * 0.9 / 8, 1e-6);
  EXPECT_EQ(m.rail.transport, "ib");
  EXPECT_EQ(m.rail.link().gammaUsPerB, 0.0);  // GPUs reduce
  EXPECT_NEAR(1.0 / m.intra.betaUsPerB, 230e3, 1e-6);

  // Without --nic-gbps the file has no speed: a clear error naming the flag.
  PredictArgs noSpeed = ndv4Args();
  noSpeed.nicGbps = 0;
  try {
    buildNodeModel(noSpeed, &t, CostModel::defaults("tcp", 0), false);
    FAIL() << "no error without a NIC speed";
  } catch (const accl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--nic-gbps"), std::string::npos) << e.what();
  }

  // p4d: 8 GPUs share 4 NICs; no NVLink in the file, so PCIe within the node.
  auto p4d = load("nccl-aws-p4d.xml");
  PredictArgs pa;
  pa.topology = "nccl-aws-p4d.xml";
  pa.nicGbps = 100;
  auto pm = buildNodeModel(pa, &p4d, CostModel::defaults("tcp", 0), false);
  EXPECT_EQ(pm.ranksPerNode, 8);
  EXPECT_NEAR(1.0 / pm.rail.link().betaUsPerB, 4 * 100e3 / 8 * 0.8 / 8, 1e-6);  // TCP NICs in that file
  bool saysPcie = false;
  for (const auto& n : pm.notes) saysPcie = saysPcie || n.find("no NVLink") != std::string::npos;
  EXPECT_TRUE(saysPcie);
}

TEST(Predict, TwoLevelAllreduce) {
  auto t = load("nccl-azure-ndv4.xml");
  auto m = buildNodeModel(ndv4Args(), &t, CostModel::defaults("tcp", 0), false);
  const double a = m.rail.link().alphaUs, rail = 1.0 / m.rail.link().betaUsPerB, intra = 230e3, step = m.intra.alphaUs;
  const size_t n = 256u << 20;
  // One node: a ring of 8 GPUs.
  double one = 2 * 7 * step + 2 * 7.0 / 8 * n / intra;
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 1).us, one, one * 1e-9);
  // Two nodes: the intra ring and, per rail, recursive doubling of the 1/8
  // shard (one step: less latency than a 2-rank ring); the levels pipeline.
  double s = n / 8.0;
  double two = 2 * 7 * step + a + std::max(2 * 7.0 / 8 * n / intra, s / rail);
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 2).us, two, two * 1e-6);
  // 16 nodes: a ring of 16 over the rails dominates.
  double ring16 = 2 * 15 * a + 2 * 15.0 / 16 * s / rail;
  double sixteen = 2 * 7 * step + 2 * 15 * a + std::max(2 * 7.0 / 8 * n / intra, ring16 - 2 * 15 * a);
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 16).us, sixteen, sixteen * 1e-6);
  EXPECT_NE(predictOp(m, Coll::Allreduce, n, 16).plan.find("ring(16 nodes)"), std::string::npos);
  // More nodes never make the same bytes faster.
  double prev = 0;
  for (int nodes : {1, 2, 4, 8, 16, 32, 64}) {
    double us = predictOp(m, Coll::Allreduce, n, nodes).us;
    EXPECT_GE(us, prev) << nodes;
    prev = us;
  }
  // One rank in all: nothing to do.
  PredictArgs single = ndv4Args();
  single.ranksPerNode = 1;
  auto sm = buildNodeModel(single, &t, CostModel::defaults("tcp", 0), false);
  EXPECT_EQ(predictOp(sm, Coll::Allreduce, n, 1).us, 0.0);
}

// Two CPU ranks per node of a file with no GPU and two NICs (100 Gbit/s), and
// a model whose shared segment has 2 us per handshake at 5 GB/s.
PredictArgs twoRailsCpuArgs() {
  PredictArgs a;
  a.topology = "hand-two-rails.xml";
  a.nicGbps = 100;
  a.ranksPerNode = 2;
  return a;
}

CostModel segmentAt5GBs() {
  CostModel cm = CostModel::defaults("tcp", 0);
  cm.segment() = accl::core::LinkParams{2.0, 1.0 / 5000, 0, 0};
  return cm;
}

TEST(Predict, CpuNodesUseTheSegment) {
  auto t = load("hand-two-rails.xml");  // no GPU, two NICs
  PredictArgs a = twoRailsCpuArgs();
  CostModel cm = segmentAt5GBs();
  auto m = buildNodeModel(a, &t, cm, false);
  EXPECT_TRUE(m.segment);
  EXPECT_DOUBLE_EQ(m.intra.betaUsPerB, 1.0 / 5000);
  // 2 NICs of 100 Gbit/s (ib, 90 %) for 2 ranks: 11250 B/us per rail.
  EXPECT_NEAR(1.0 / m.rail.link().betaUsPerB, 11250, 1e-6);
  const size_t n = 8u << 20;
  EXPECT_DOUBLE_EQ(predictOp(m, Coll::Allreduce, n, 1).us, 2 * 2.0 + n / 5000.0);
  // 4 nodes: the segment's phases, then the half-vector exchange (not pipelined).
  Algo inter = m.rail.best(Coll::Allreduce, n / 2, 4, 4);
  double want = 2 * 2.0 + n / 5000.0 + m.rail.predictUs(Coll::Allreduce, inter, n / 2, 4, 4);
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 4).us, want, want * 1e-9);
  EXPECT_EQ(predictOp(m, Coll::Allreduce, n, 4).plan, std::string("shm(2) + ") + accl::core::toString(inter) + "(4 nodes)");
}

TEST(Predict, CpuNodesReadTheSegmentsCalibratedCurve) {
  auto t = load("hand-two-rails.xml");
  PredictArgs a = twoRailsCpuArgs();
  CostModel cm = segmentAt5GBs();
  // Measured: 1 us at 8 B, 101 us at 1 MiB, 20001 us at 64 MiB.
  cm.setSegmentCurve({{8.0, 1.0}, {double(1u << 20), 101.0}, {double(64u << 20), 20001.0}});
  const size_t n = 8u << 20;
  // Between the points (less the 8 B time): 100 + 19900 x 7/63 us.
  const double curveUs = 100.0 + 19900.0 * 7.0 / 63.0;
  auto m = buildNodeModel(a, &t, cm, true);
  EXPECT_TRUE(m.segmentCurve);
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 1).us, 2 * 2.0 + curveUs, 1e-6);
  Algo inter = m.rail.best(Coll::Allreduce, n / 2, 4, 4);
  double want = 2 * 2.0 + curveUs + m.rail.predictUs(Coll::Allreduce, inter, n / 2, 4, 4);
  EXPECT_NEAR(predictOp(m, Coll::Allreduce, n, 4).us, want, want * 1e-9);
  bool named = false;
  for (const auto& note : m.notes) named = named || note.find("measured curve (3 points") != std::string::npos;
  EXPECT_TRUE(named);
  // --intra-gbs sets the segment's rate: the line, not the curve.
  a.intraGBs = 4;
  auto given = buildNodeModel(a, &t, cm, true);
  EXPECT_FALSE(given.segmentCurve);
  EXPECT_NEAR(predictOp(given, Coll::Allreduce, n, 1).us, 2 * 2.0 + n / 4000.0, 1e-6);
  // Without a tuning file (defaults), no curve either.
  a.intraGBs = 0;
  auto defaults = buildNodeModel(a, &t, cm, false);
  EXPECT_FALSE(defaults.segmentCurve);
  EXPECT_DOUBLE_EQ(predictOp(defaults, Coll::Allreduce, n, 1).us, 2 * 2.0 + n / 5000.0);
}

TEST(Predict, DataParallelStep) {
  auto t = load("nccl-azure-ndv4.xml");
  auto m = buildNodeModel(ndv4Args(), &t, CostModel::defaults("tcp", 0), false);
  const size_t bucket = 25u << 20, grad = 336226108ull * 4;
  auto s = predictStep(m, 4, grad, bucket, 0);
  EXPECT_EQ(s.buckets, 52);  // 1.34 GB in 25 MiB buckets
  double full = predictOp(m, Coll::Allreduce, bucket, 4).us;
  double last = predictOp(m, Coll::Allreduce, grad - 51 * bucket, 4).us;
  EXPECT_NEAR(s.commUs, 51 * full + last, 1e-6);
  EXPECT_NEAR(s.lastBucketUs, last, 1e-9);
  EXPECT_EQ(s.speedup, 0.0);
  // With a step time: max(step + last bucket, step / 3 + all buckets).
  for (double ms : {1.0, 10.0, 1000.0}) {
    auto w = predictStep(m, 4, grad, bucket, ms);
    double T = ms * 1e3, stepUs = std::max(T + last, T / 3 + s.commUs);
    EXPECT_NEAR(w.speedup, 32 * T / stepUs, 1e-9) << ms;
    EXPECT_LE(w.speedup, 32.0);
  }
}

TEST(Predict, HostModeIsTheCostModel) {
  CostModel cm = CostModel::defaults("tcp", 1);
  PredictArgs a;
  a.topology = "host";
  a.ranksPerNode = 2;
  auto m = buildNodeModel(a, nullptr, cm, true);
  EXPECT_TRUE(m.hostMode);
  for (size_t b : {size_t{8}, size_t{1} << 20, size_t{64} << 20}) {
    for (Coll c : {Coll::Allreduce, Coll::Allgather, Coll::Alltoall}) {
      std::string plan;
      EXPECT_DOUBLE_EQ(predictOp(m, c, b, 3).us, cm.predictLayoutUs(c, b, 6, 3, &plan));
      EXPECT_EQ(predictOp(m, c, b, 3).plan, plan);
    }
  }
  // 3 hosts x 2: allreduce is hierarchical, allgather and small alltoall
  // too (along their rails), large alltoall flat.
  EXPECT_EQ(predictOp(m, Coll::Allreduce, 8, 3).plan.rfind("hierarchical(shm+", 0), 0u);
  EXPECT_EQ(predictOp(m, Coll::Allgather, 8, 3).plan.rfind("hierarchical(shm+", 0), 0u);
  EXPECT_EQ(predictOp(m, Coll::Alltoall, 8, 3).plan.rfind("hierarchical(shm+", 0), 0u);
  EXPECT_EQ(predictOp(m, Coll::Alltoall, 64 << 20, 3).plan.find("hierarchical"), std::string::npos);
}
