// accl-perf --predict: collective times and the data-parallel step overhead
// of a job on N nodes, from the cost model (backends/accl/algorithms) and a
// node's topology file, without running anything.
//
// A node is G ranks (one per GPU of the topology, or --ranks-per-node on
// hosts without GPUs) joined by an intra-node link, and a set of NICs that
// its ranks share. A collective runs in two levels, as NCCL's and ACCL's
// hierarchical algorithms do: within the node (G ranks, a ring over the
// intra-node link) and between nodes (N ranks, one per node, on each rank's
// rail: the node's NIC bandwidth split over its G ranks, the algorithm the
// cost model picks). On GPUs the levels pipeline: their latencies add, the
// slower level's transfer time sets the rest. On CPU nodes the intra level is
// the accl backend's shared segment, whose phases run before and after the
// exchange between nodes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/select.h"

namespace accl {
namespace topo {
class Topology;
}
}  // namespace accl

namespace accl_perf {

using accl::core::Coll;
using accl::core::CostModel;
using accl::core::LinkParams;

struct NodeModel {
  int ranksPerNode = 1;
  LinkParams intra;     // between ranks of a node; beta = 1 / the ring's bus bandwidth
  bool segment = false; // nodes without GPUs: the intra level is the shared segment (alpha + n beta)
  bool segmentCurve = false;  // and its bytes' time read off the calibrated curve (calibrated.segmentBytesUs)
  CostModel rail;       // between nodes, one rank per node on its share of the NICs
  bool hostMode = false;    // "host" mode: the cost model as calibrated, what the accl backend runs
  CostModel calibrated; // that mode's model (CostModel::predictLayoutUs); the segment's curve otherwise
  std::vector<std::string> notes;  // where each parameter came from
};

struct PredictArgs {
  std::string topology;        // a topology file, or "host" (the calibrated model as it is)
  std::string nodes = "1,2,4,8,16,32,64";
  std::string tuning;          // tuning file (default: ACCL_TUNING_FILE)
  double nicGbps = 0;          // per NIC, where the file has no speed
  std::string transport;       // "ib" or "tcp" between nodes; empty: ib where every NIC used has RDMA
  double intraGBs = 0;         // intra-node bus bandwidth (GB/s); 0: from the topology
  int ranksPerNode = 0;        // 0: GPUs of the topology (1 where it has none)
  std::string ops = "allreduce,allgather,reduce_scatter";
  double stepMs = 0;           // compute time of one training step on one GPU (0: not given)
  long long params = 336226108;  // BERT-Large with its pretraining heads (examples/bert, "large")
  size_t bucketBytes = 25u << 20;  // DDP's bucket_cap_mb = 25
};

// The node model from a topology (or "host") and a cost model. Throws
// accl::InvalidArgument when a rate it needs is neither in the file nor given.
NodeModel buildNodeModel(const PredictArgs& a, const accl::topo::Topology* t, const CostModel& m,
                         bool calibrated);

struct Prediction {
  double us = 0;
  std::string plan;  // e.g. "ring(8) + rd(4 nodes)"
};

// Predicted time of `c` (allreduce, allgather or reduce_scatter) on `nodes`
// nodes, `bytes` counted as accl-perf counts them (per rank for allreduce,
// the whole gathered / scattered vector for the other two).
Prediction predictOp(const NodeModel& m, Coll c, size_t bytes, int nodes);

struct StepPrediction {
  int buckets = 0;
  double commUs = 0;        // all buckets one after another
  double lastBucketUs = 0;  // the bucket left after the backward pass ends
  double speedup = 0;       // over one GPU, when a step time is given (0 otherwise)
};

// DDP's gradient allreduce of `gradBytes` in buckets of `bucketBytes`. With
// `stepMs` > 0 (forward + backward + optimizer of one GPU), the buckets
// overlap the backward pass (2/3 of the step): the step takes
// max(step + last bucket, step / 3 + all buckets).
StepPrediction predictStep(const NodeModel& m, int nodes, size_t gradBytes, size_t bucketBytes, double stepMs);

// Parses "1,2,4" or "N" (1, 2, 4, ... up to N, and N). Throws InvalidArgument.
std::vector<int> parseNodes(const std::string& s);

// The whole of --predict: prints the tables (and writes JSON to `jsonFile`
// if not empty). Returns the exit status.
int predict(const PredictArgs& a, size_t minBytes, size_t maxBytes, double factor, const std::string& jsonFile);

}  // namespace accl_perf
