#include "predict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "accl/topology.h"

namespace accl_perf {

using accl::InvalidArgument;
using accl::core::Algo;

namespace {

// What a transport reaches of the wire's rate (as CostModel::defaults assumes).
double efficiency(const std::string& transport) { return transport == "ib" ? 0.9 : 0.8; }

// NVLink per link and direction, as NCCL's ring reaches it (A100's NVLink 3 is
// 25 GB/s per link and direction on the wire).
constexpr double kNvlinkGBsPerLink = 20.0;
// One step of a ring between GPUs of a node (a kernel's hand-off over NVLink
// or PCIe): the order of NCCL's low-latency protocol.
constexpr double kGpuStepUs = 3.0;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string sizeName(size_t b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && i < 3 && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++i;
  }
  std::ostringstream os;
  os << v << " " << u[i];
  return os.str();
}

double busFactor(Coll c, int p) {
  if (p <= 1) return 1;
  return c == Coll::Allreduce ? 2.0 * (p - 1) / p : static_cast<double>(p - 1) / p;
}

Coll parseOp(const std::string& s) {
  if (s == "allreduce") return Coll::Allreduce;
  if (s == "allgather") return Coll::Allgather;
  if (s == "reduce_scatter") return Coll::ReduceScatter;
  throw InvalidArgument("--predict-ops: '" + s + "' is not predicted; accepted: allreduce, allgather, reduce_scatter");
}

}  // namespace

std::vector<int> parseNodes(const std::string& s) {
  std::vector<int> out;
  auto bad = [&]() -> InvalidArgument {
    return InvalidArgument("--nodes '" + s + "': accepted: a node count N (1, 2, 4, ... up to N, and N) or a list "
                           "like 1,2,3,4, each 1 - 4096");
  };
  std::vector<long> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 5) throw bad();
    long n = std::stol(tok);
    if (n < 1 || n > 4096) throw bad();
    v.push_back(n);
  }
  if (v.empty()) throw bad();
  if (v.size() == 1) {
    for (long n = 1; n < v[0]; n *= 2) out.push_back(static_cast<int>(n));
    out.push_back(static_cast<int>(v[0]));
  } else {
    for (long n : v) out.push_back(static_cast<int>(n));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

NodeModel buildNodeModel(const PredictArgs& a, const accl::topo::Topology* t, const CostModel& m, bool calibrated) {
  NodeModel nm;
  if (!t) {  // "host": the calibrated model as the accl backend uses it
    nm.hostMode = true;
    nm.ranksPerNode = a.ranksPerNode > 0 ? a.ranksPerNode : 1;
    nm.calibrated = m;
    nm.notes.push_back("link between hosts and within a host: " + m.source() +
                       "; what the accl backend runs on such hosts: the shared segment within a host, hierarchical "
                       "allreduce across hosts, the model's flat algorithm otherwise");
    return nm;
  }
  const int gpus = static_cast<int>(t->gpus().size());
  nm.ranksPerNode = a.ranksPerNode > 0 ? a.ranksPerNode : std::max(gpus, 1);
  const int G = nm.ranksPerNode;

  // The NICs the node's ranks use (each rank's first NIC, as the bindings
  // spread them) and their rate.
  if (t->nics().empty())
    throw InvalidArgument("--predict " + a.topology + ": the topology has no NIC, so nothing joins its nodes");
  std::set<int> used;
  for (const auto& b : t->bindings(G))
    if (!b.nics.empty()) used.insert(b.nics[0]);
  double lineGbps = 0;
  bool allRdma = true;
  std::string missing;
  for (int i : used) {
    const auto& nic = t->nic(i);
    allRdma = allRdma && nic.rdma;
    double g = a.nicGbps > 0 ? a.nicGbps : nic.speedGbps;
    if (g <= 0) missing += (missing.empty() ? "" : ", ") + (nic.name.empty() ? nic.busId : nic.name);
    lineGbps += g;
  }
  if (!missing.empty())
    throw InvalidArgument("--predict " + a.topology + ": the file gives no speed for NIC(s) " + missing +
                          "; pass --nic-gbps, the speed of one NIC in Gbit/s (e.g. 100 for p4d's EFA, 200 for "
                          "NDv4's HDR InfiniBand, 400 for NDv5's NDR InfiniBand)");
  const std::string transport = !a.transport.empty() ? a.transport : allRdma ? "ib" : "tcp";
  const double nodeBytesPerUs = lineGbps * 1e3 / 8 * efficiency(transport);
  const double railBytesPerUs = nodeBytesPerUs / G;
  nm.rail = CostModel::defaults(transport, railBytesPerUs * 8 / 1e3 / efficiency(transport));
  nm.rail.link().betaUsPerB = 1.0 / railBytesPerUs;
  // GPUs reduce at their memory's rate, far above any NIC's: not counted.
  if (gpus > 0) nm.rail.link().gammaUsPerB = 0;
  std::ostringstream net;
  net << used.size() << " NIC(s) used of " << t->nics().size() << " at " << lineGbps / used.size()
      << " Gbit/s" << (a.nicGbps > 0 ? " (--nic-gbps)" : " (the file)") << ", " << transport
      << (a.transport.empty() ? "" : " (--net-transport)") << " at " << efficiency(transport) * 100 << " % of the line: " << fmt("%.1f", nodeBytesPerUs / 1e3)
      << " GB/s per node, " << fmt("%.2f", railBytesPerUs / 1e3) << " GB/s per rank's rail";
  if (calibrated) {
    // Latency, per-message overhead and reduction rate as measured; the
    // bandwidth the slower of the measured link and the rail's share.
    LinkParams& r = nm.rail.link();
    r.alphaUs = m.link().alphaUs;
    r.overheadUs = m.link().overheadUs;
    if (gpus == 0) r.gammaUsPerB = m.link().gammaUsPerB;
    r.betaUsPerB = std::max(r.betaUsPerB, m.link().betaUsPerB);
    net << "; latency " << fmt("%.1f", r.alphaUs) << " us, overhead " << fmt("%.1f", r.overheadUs)
        << " us, bandwidth at most " << fmt("%.2f", 1e-3 / r.betaUsPerB) << " GB/s from " << m.source();
  } else {
    net << "; latency " << nm.rail.link().alphaUs << " us and overhead " << nm.rail.link().overheadUs
        << " us assumed for " << transport << " (no tuning file)";
  }
  nm.notes.push_back("between nodes: " + net.str());

  std::ostringstream in;
  if (G == 1) {
    in << "one rank per node: no intra-node level";
  } else if (gpus > 0) {
    double gbs = a.intraGBs;
    if (gbs > 0) {
      in << fmt("%.0f", gbs) << " GB/s bus bandwidth (--intra-gbs)";
    } else {
      int links = 0;
      double pcie = 0;
      for (int id : t->gpus()) {
        const auto& g = t->nodes[static_cast<size_t>(id)];
        int l = 0;
        for (const auto& nv : g.nvlinks) l += nv.second;
        links = links == 0 ? l : std::min(links, l);
        pcie = pcie == 0 ? g.linkGBs : std::min(pcie, g.linkGBs);
      }
      if (links > 0) {
        gbs = links * kNvlinkGBsPerLink;
        in << gbs << " GB/s from " << links << " NVLink(s) per GPU at " << kNvlinkGBsPerLink << " GB/s each";
      } else {
        gbs = (pcie > 0 ? pcie : 16.0) * 0.8;
        in << fmt("%.1f", gbs) << " GB/s: the file records no NVLink, so PCIe "
           << (pcie > 0 ? "(its link rate" : "(Gen3 x16 assumed") << " at 80 %); pass --intra-gbs for NVLink machines";
      }
    }
    nm.intra = LinkParams{kGpuStepUs, 1.0 / (gbs * 1e3), 0.0, 0.0};
    in << "; " << kGpuStepUs << " us per ring step assumed; reductions on the GPU not counted";
  } else {
    // CPU ranks: the accl backend's shared segment (reduce-scatter and
    // allgather there, around the exchange between nodes).
    nm.segment = true;
    nm.intra = m.segment();
    if (a.intraGBs > 0) nm.intra.betaUsPerB = 1.0 / (a.intraGBs * 1e3);
    // Where the calibration measured the segment size by size, its time at
    // each size is read off that curve, as the accl backend's model does.
    nm.segmentCurve = a.intraGBs <= 0 && calibrated && m.segmentCurve().size() >= 2;
    if (nm.segmentCurve) nm.calibrated = m;
    in << "the shared segment: " << fmt("%.1f", nm.intra.alphaUs) << " us per handshake, ";
    if (nm.segmentCurve) {
      in << "its measured curve (" << m.segmentCurve().size() << " points: " << fmt("%.2f", 1e-3 * (1 << 20) / m.segmentBytesUs(1u << 20))
         << " GB/s of the vector at 1 MiB, " << fmt("%.2f", 1e-3 * (64 << 20) / m.segmentBytesUs(64u << 20))
         << " at 64 MiB) (" << m.source() << ")";
    } else {
      in << fmt("%.2f", 1e-3 / nm.intra.betaUsPerB) << " GB/s of the vector"
         << (a.intraGBs > 0 ? " (--intra-gbs)"
                            : calibrated && m.segmentRanks() > 0 ? " (" + m.source() + ")" : std::string(" (assumed)"));
    }
  }
  nm.notes.push_back("within a node: " + std::to_string(G) + " rank(s) (" +
                     (a.ranksPerNode > 0 ? "--ranks-per-node" : gpus > 0 ? "one per GPU" : "no GPU") + "), " +
                     in.str());
  return nm;
}

Prediction predictOp(const NodeModel& m, Coll c, size_t bytes, int nodes) {
  const int G = m.ranksPerNode, N = nodes, p = N * G;
  Prediction r;
  if (p <= 1) {
    r.plan = "-";
    return r;
  }
  if (m.hostMode) {
    r.us = m.calibrated.predictLayoutUs(c, bytes, p, N, &r.plan);
    return r;
  }
  const double n = static_cast<double>(bytes);
  double latI = 0, bwI = 0;
  if (G > 1 && m.segment) {
    latI = (c == Coll::Allreduce ? 2 : 1) * m.intra.alphaUs;
    bwI = m.segmentCurve ? m.calibrated.segmentBytesUs(bytes) : n * m.intra.betaUsPerB;
    r.plan = "shm(" + std::to_string(G) + ")";
  } else if (G > 1) {
    const LinkParams& k = m.intra;
    const double frac = (G - 1.0) / G;
    if (c == Coll::Allreduce) {
      latI = 2 * (G - 1) * k.alphaUs;
      bwI = 2 * frac * n * k.betaUsPerB + frac * n * k.gammaUsPerB;
    } else {
      latI = (G - 1) * k.alphaUs;
      bwI = frac * n * (k.betaUsPerB + (c == Coll::ReduceScatter ? k.gammaUsPerB : 0));
    }
    r.plan = "ring(" + std::to_string(G) + ")";
  }
  double latN = 0, bwN = 0;
  if (N > 1) {
    // Each rank's shard on its rail: allreduce of n / G; the gathered or
    // scattered vector of one rail is n / G as well.
    size_t shard = (bytes + static_cast<size_t>(G) - 1) / static_cast<size_t>(G);
    Algo a = m.rail.best(c, shard, N, N);
    latN = m.rail.predictUs(c, a, 0, N, N);
    bwN = m.rail.predictUs(c, a, shard, N, N) - latN;
    r.plan += (r.plan.empty() ? "" : " + ") + std::string(accl::core::toString(a)) + "(" + std::to_string(N) +
              " nodes)";
  }
  // GPU rings pipeline with the exchange between nodes; the segment's
  // phases come before and after it.
  r.us = m.segment ? latI + bwI + latN + bwN : latI + latN + std::max(bwI, bwN);
  return r;
}

StepPrediction predictStep(const NodeModel& m, int nodes, size_t gradBytes, size_t bucketBytes, double stepMs) {
  StepPrediction s;
  if (bucketBytes == 0) throw InvalidArgument("predictStep: the bucket size must be > 0");
  s.buckets = static_cast<int>((gradBytes + bucketBytes - 1) / bucketBytes);
  if (s.buckets == 0) return s;
  size_t last = gradBytes - (static_cast<size_t>(s.buckets) - 1) * bucketBytes;
  double full = predictOp(m, Coll::Allreduce, bucketBytes, nodes).us;
  s.lastBucketUs = predictOp(m, Coll::Allreduce, last, nodes).us;
  s.commUs = (s.buckets - 1) * full + s.lastBucketUs;
  if (stepMs > 0) {
    double T = stepMs * 1e3;
    double step = std::max(T + s.lastBucketUs, T / 3 + s.commUs);
    s.speedup = nodes * m.ranksPerNode * T / step;
  }
  return s;
}

int predict(const PredictArgs& a, size_t minBytes, size_t maxBytes, double factor, const std::string& jsonFile) {
  try {
    std::vector<int> nodes = parseNodes(a.nodes);
    std::vector<Coll> ops;
    {
      std::stringstream ss(a.ops);
      std::string tok;
      while (std::getline(ss, tok, ',')) ops.push_back(parseOp(tok));
    }
    if (a.params <= 0) throw InvalidArgument("--params must be > 0");
    if (!(factor > 1) || minBytes > maxBytes)
      throw InvalidArgument("--predict: sizes -b " + std::to_string(minBytes) + " -e " + std::to_string(maxBytes) +
                            " -f " + std::to_string(factor) + "; accepted: -b <= -e and a factor -f > 1");
    std::string tuning = a.tuning;
    if (tuning.empty()) {
      const char* e = std::getenv("ACCL_TUNING_FILE");
      if (e && *e) tuning = e;
    }
    CostModel m = tuning.empty() ? CostModel::defaults("tcp", 0) : CostModel::fromFile(tuning);
    accl::topo::Topology t;
    bool host = a.topology == "host";
    if (!host) t = accl::topo::loadFile(a.topology);
    NodeModel nm = buildNodeModel(a, host ? nullptr : &t, m, !tuning.empty());
    const int G = nm.ranksPerNode;

    nlohmann::json j;
    j["topology"] = a.topology;
    j["ranks_per_node"] = G;
    j["model"] = nm.notes;
    std::printf("# accl-perf --predict %s: predicted, not measured\n", a.topology.c_str());
    if (!host) std::printf("# topology: %s\n", t.source.c_str());
    for (const auto& n : nm.notes) std::printf("# %s\n", n.c_str());
    for (Coll c : ops) {
      std::printf("\n# %s\n#%6s %6s %12s %12s %10s %10s  %s\n", accl::core::toString(c), "nodes", "ranks", "bytes",
                  "time_us", "algbw", "busbw", "plan");
      for (int N : nodes) {
        for (size_t b = minBytes; b <= maxBytes; b = static_cast<size_t>(std::max<double>(b + 1, b * factor))) {
          Prediction pr = predictOp(nm, c, b, N);
          double alg = pr.us > 0 ? b / pr.us / 1e3 : 0;  // GB/s
          double bus = alg * busFactor(c, N * G);
          std::printf(" %6d %6d %12zu %12.1f %10.2f %10.2f  %s\n", N, N * G, b, pr.us, alg, bus, pr.plan.c_str());
          j["ops"].push_back({{"op", accl::core::toString(c)}, {"nodes", N}, {"ranks", N * G}, {"bytes", b},
                              {"time_us", pr.us}, {"algbw_GBs", alg}, {"busbw_GBs", bus}, {"plan", pr.plan}});
          if (b == maxBytes) break;
        }
      }
    }
    std::printf("\n# data-parallel step: the gradients of %lld parameters allreduced in DDP buckets of %s",
                a.params, sizeName(a.bucketBytes).c_str());
    if (a.stepMs > 0)
      std::printf(", overlapping the backward pass of a %.1f ms step (speedup over 1 rank)", a.stepMs);
    std::printf("\n#%6s %6s %8s %8s %10s %10s", "nodes", "ranks", "dtype", "buckets", "comm_ms", "last_ms");
    if (a.stepMs > 0) std::printf(" %8s %8s", "speedup", "eff");
    std::printf("\n");
    for (auto [name, width] : {std::pair<const char*, int>{"fp32", 4}, {"bf16", 2}}) {
      for (int N : nodes) {
        StepPrediction s = predictStep(nm, N, static_cast<size_t>(a.params) * width, a.bucketBytes, a.stepMs);
        std::printf(" %6d %6d %8s %8d %10.2f %10.2f", N, N * G, name, s.buckets, s.commUs / 1e3,
                    s.lastBucketUs / 1e3);
        if (a.stepMs > 0) std::printf(" %8.2f %8.2f", s.speedup, s.speedup / (N * G));
        std::printf("\n");
        nlohmann::json row = {{"nodes", N}, {"ranks", N * G}, {"dtype", name}, {"buckets", s.buckets},
                              {"comm_ms", s.commUs / 1e3}, {"last_bucket_ms", s.lastBucketUs / 1e3}};
        if (a.stepMs > 0) row["speedup"] = s.speedup;
        j["steps"].push_back(row);
      }
    }
    if (!jsonFile.empty()) {
      std::ofstream f(jsonFile);
      f << j.dump(1) << "\n";
      if (!f) throw InvalidArgument("-J " + jsonFile + ": cannot be written");
    }
    return 0;
  } catch (const accl::Error& e) {
    std::fprintf(stderr, "accl-perf: %s\n", e.what());
    return 2;
  }
}

}  // namespace accl_perf
