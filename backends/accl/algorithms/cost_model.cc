#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "algorithms/algorithms.h"

namespace accl {
namespace core {

namespace {

int ceilLog2(int p) {
  int s = 0;
  while ((1 << s) < p) ++s;
  return s;
}

int floorPow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// Ops of which every local rank's slice (allreduce) or rail (allgather,
// reduce_scatter, alltoall) crosses between hosts at once in a hierarchical
// run on even hosts.
bool slicesCrossAtOnce(Coll c, int p, int hosts) {
  return (c == Coll::Allreduce || c == Coll::Allgather || c == Coll::ReduceScatter || c == Coll::Alltoall) &&
         p % hosts == 0;
}

// A rank's part in the segment's phases of an op, each counted as one message
// within the host by the CPU floor: before and after for allreduce and barrier.
double segmentPhases(Coll c) { return c == Coll::Allreduce || c == Coll::Barrier ? 2 : 1; }

const char* kFields[] = {"alpha_us", "beta_us_per_byte", "gamma_us_per_byte", "overhead_us"};

// The shared-memory link between ranks of a host, where not calibrated: a
// thread hand-off on each side and two copies at a few GB/s.
LinkParams defaultLocal(double gamma) { return LinkParams{15.0, 1.0 / 3000.0, gamma, 1.0}; }
// The shared segment's allreduce, where not calibrated: a flag handshake,
// then each rank copies in, reduces its slice and copies out (about three
// passes over the vector at a few GB/s).
LinkParams defaultSegment() { return LinkParams{1.0, 1.0 / 3000.0, 0.0, 0.0}; }

void readLink(const nlohmann::json& l, const std::string& where, const std::string& name, LinkParams* out) {
  double* dst[] = {&out->alphaUs, &out->betaUsPerB, &out->gammaUsPerB, &out->overheadUs};
  for (int i = 0; i < 4; ++i) {
    if (!l.contains(kFields[i]) || !l[kFields[i]].is_number())
      throw InvalidArgument(where + ": " + name + "." + kFields[i] + " is missing or not a number; accepted: a number >= 0");
    double v = l[kFields[i]].get<double>();
    if (!std::isfinite(v) || v < 0)
      throw InvalidArgument(where + ": " + name + "." + kFields[i] + " = " + std::to_string(v) +
                            "; accepted: a finite number >= 0");
    *dst[i] = v;
  }
  if (out->betaUsPerB <= 0)
    throw InvalidArgument(where + ": " + name + ".beta_us_per_byte must be > 0 (it is 1 / bandwidth)");
}

nlohmann::json linkJson(const LinkParams& p) {
  return {{"alpha_us", p.alphaUs}, {"beta_us_per_byte", p.betaUsPerB}, {"gamma_us_per_byte", p.gammaUsPerB},
          {"overhead_us", p.overheadUs}};
}

}  // namespace

CostModel CostModel::defaults(const std::string& transport, double linkGbps) {
  CostModel m;
  m.transport = transport == "ib" ? "ib" : "tcp";
  bool ib = m.transport == "ib";
  double gbps = linkGbps > 0 ? linkGbps : (ib ? 100.0 : 10.0);
  // What ACCL's transports reach of the wire's rate: TCP through the kernel
  // about 80 % (with several streams), verbs about 90 %.
  double bytesPerUs = gbps * 1e3 / 8 * (ib ? 0.9 : 0.8);
  m.net_.alphaUs = ib ? 4.0 : 30.0;
  m.net_.betaUsPerB = 1.0 / bytesPerUs;
  // A reduction reads two inputs and writes one on one core: ~4 GB/s.
  m.net_.gammaUsPerB = 1.0 / 4000.0;
  m.net_.overheadUs = ib ? 0.5 : 3.0;
  m.local_ = defaultLocal(m.net_.gammaUsPerB);
  m.segment_ = defaultSegment();
  std::ostringstream os;
  os << "defaults for " << m.transport << " at " << gbps << " Gbit/s"
     << (linkGbps > 0 ? " (the NIC's speed from the topology)" : " (link speed unknown: assumed)");
  m.source_ = os.str();
  return m;
}

CostModel CostModel::fromJson(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InvalidArgument(where + ": not JSON (" + e.what() +
                          "); accepted: the file `accl-perf --calibrate FILE` writes");
  }
  if (!j.is_object() || !j.contains("link") || !j["link"].is_object())
    throw InvalidArgument(where + ": no object \"link\"; accepted: the file `accl-perf --calibrate FILE` writes, "
                                  "{\"version\": 1, \"transport\": \"tcp\"|\"ib\", \"link\": {\"alpha_us\": ..., "
                                  "\"beta_us_per_byte\": ..., \"gamma_us_per_byte\": ..., \"overhead_us\": ...}}");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    throw InvalidArgument(where + ": \"version\" must be 1 (the only tuning-file version this build reads)");
  CostModel m;
  m.transport = "tcp";
  if (j.contains("transport")) {
    if (!j["transport"].is_string() || (j["transport"] != "tcp" && j["transport"] != "ib"))
      throw InvalidArgument(where + ": \"transport\" must be \"tcp\" or \"ib\"");
    m.transport = j["transport"].get<std::string>();
  }
  readLink(j["link"], where, "link", &m.net_);
  m.local_ = defaultLocal(m.net_.gammaUsPerB);
  if (j.contains("local")) {
    if (!j["local"].is_object())
      throw InvalidArgument(where + ": \"local\" must be an object with the fields of \"link\"");
    readLink(j["local"], where, "local", &m.local_);
  }
  if (j.contains("segment")) {
    if (!j["segment"].is_object())
      throw InvalidArgument(where + ": \"segment\" must be an object with the fields of \"link\"");
    readLink(j["segment"], where, "segment", &m.segment_);
    if (j.contains("segment_ranks")) {
      if (!j["segment_ranks"].is_number_integer() || j["segment_ranks"].get<int64_t>() < 2 ||
          j["segment_ranks"].get<int64_t>() > 4096)
        throw InvalidArgument(where + ": \"segment_ranks\" must be an integer 2 - 4096 (the ranks the segment "
                                      "was measured with)");
      m.segmentRanks_ = static_cast<int>(j["segment_ranks"].get<int64_t>());
    }
  }
  if (j.contains("segment_curve")) {
    const auto& cj = j["segment_curve"];
    const std::string accepted =
        "; accepted: an array of at least 2 objects {\"bytes\": integer > 0, \"allreduce_us\": number > 0}, bytes "
        "increasing (what accl-perf --calibrate writes)";
    if (!j.contains("segment"))
      throw InvalidArgument(where + ": \"segment_curve\" needs \"segment\" beside it (the segment it refines)");
    if (!cj.is_array() || cj.size() < 2) throw InvalidArgument(where + ": \"segment_curve\" is not such an array" + accepted);
    for (size_t i = 0; i < cj.size(); ++i) {
      const auto& pt = cj[i];
      std::string at = where + ": segment_curve[" + std::to_string(i) + "]";
      if (!pt.is_object() || !pt.contains("bytes") || !pt["bytes"].is_number_integer() || pt["bytes"].get<int64_t>() <= 0)
        throw InvalidArgument(at + ".bytes is missing or not an integer > 0" + accepted);
      if (!pt.contains("allreduce_us") || !pt["allreduce_us"].is_number() ||
          !std::isfinite(pt["allreduce_us"].get<double>()) || pt["allreduce_us"].get<double>() <= 0)
        throw InvalidArgument(at + ".allreduce_us is missing or not a finite number > 0" + accepted);
      double b = static_cast<double>(pt["bytes"].get<int64_t>());
      if (!m.segmentCurve_.empty() && b <= m.segmentCurve_.back().first)
        throw InvalidArgument(at + ".bytes = " + std::to_string(pt["bytes"].get<int64_t>()) +
                              " does not follow the point before it" + accepted);
      m.segmentCurve_.push_back({b, pt["allreduce_us"].get<double>()});
    }
  }
  if (j.contains("link_shared")) {
    if (!j["link_shared"].is_object())
      throw InvalidArgument(where + ": \"link_shared\" must be an object with the fields of \"link\"");
    readLink(j["link_shared"], where, "link_shared", &m.shared_);
    if (!j.contains("shared_ranks") || !j["shared_ranks"].is_number_integer() ||
        j["shared_ranks"].get<int64_t>() < 2 || j["shared_ranks"].get<int64_t>() > 4096)
      throw InvalidArgument(where + ": \"shared_ranks\" must be an integer 2 - 4096 beside \"link_shared\" (the "
                                    "pairs of ranks that crossed the link at once when it was measured)");
    m.sharedRanks_ = static_cast<int>(j["shared_ranks"].get<int64_t>());
  }
  if (j.contains("cpu")) {
    const auto& cj = j["cpu"];
    if (!cj.is_object())
      throw InvalidArgument(where + ": \"cpu\" must be an object {\"machine_cpus\": ..., \"hosts_per_machine\": ..., "
                                    "\"us_per_message\": ..., \"us_per_local_message\": ...}");
    const char* names[] = {"machine_cpus", "us_per_message", "us_per_local_message"};
    double* dst[] = {&m.cpu_.machineCpus, &m.cpu_.usPerMessage, &m.cpu_.usPerLocalMessage};
    for (int i = 0; i < 3; ++i) {
      if (!cj.contains(names[i]) || !cj[names[i]].is_number())
        throw InvalidArgument(where + ": cpu." + names[i] + " is missing or not a number; accepted: a number >= 0");
      double v = cj[names[i]].get<double>();
      if (!std::isfinite(v) || v < 0)
        throw InvalidArgument(where + ": cpu." + names[i] + " = " + std::to_string(v) +
                              "; accepted: a finite number >= 0 (machine_cpus 0: not known)");
      *dst[i] = v;
    }
    if (!cj.contains("hosts_per_machine") || !cj["hosts_per_machine"].is_number_integer() ||
        cj["hosts_per_machine"].get<int64_t>() < 1 || cj["hosts_per_machine"].get<int64_t>() > 4096)
      throw InvalidArgument(where + ": cpu.hosts_per_machine must be an integer 1 - 4096 (the hosts that shared "
                                    "the calibrated machine)");
    m.cpu_.hostsPerMachine = static_cast<int>(cj["hosts_per_machine"].get<int64_t>());
  }
  m.source_ = where;
  return m;
}

CostModel CostModel::fromFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InvalidArgument("tuning file " + path + " cannot be read (ACCL_TUNING_FILE names it)");
  std::stringstream ss;
  ss << f.rdbuf();
  return fromJson(ss.str(), "tuning file " + path);
}

std::string CostModel::toJson() const {
  nlohmann::json j;
  j["version"] = 1;
  j["transport"] = transport;
  j["link"] = linkJson(net_);
  j["local"] = linkJson(local_);
  j["segment"] = linkJson(segment_);
  if (segmentRanks_ > 0) j["segment_ranks"] = segmentRanks_;
  if (segmentCurve_.size() >= 2) {
    j["segment_curve"] = nlohmann::json::array();
    for (const auto& pt : segmentCurve_)
      j["segment_curve"].push_back({{"bytes", static_cast<int64_t>(pt.first)}, {"allreduce_us", pt.second}});
  }
  if (sharedRanks_ > 1) {
    j["link_shared"] = linkJson(shared_);
    j["shared_ranks"] = sharedRanks_;
  }
  if (cpu_.machineCpus > 0)
    j["cpu"] = {{"machine_cpus", cpu_.machineCpus},
                {"hosts_per_machine", cpu_.hostsPerMachine},
                {"us_per_message", cpu_.usPerMessage},
                {"us_per_local_message", cpu_.usPerLocalMessage}};
  return j.dump(2) + "\n";
}

std::vector<Algo> CostModel::candidates(Coll c) {
  switch (c) {
    case Coll::Allreduce: return {Algo::RecursiveDoubling, Algo::Ring};
    case Coll::Broadcast: return {Algo::Tree, Algo::Ring};
    case Coll::Reduce: return {Algo::Tree};
    case Coll::Allgather: return {Algo::Direct, Algo::Ring};
    case Coll::ReduceScatter: return {Algo::RecursiveDoubling, Algo::Ring};
    case Coll::Alltoall: return {Algo::Direct};
    case Coll::Gather: return {Algo::Direct};
    case Coll::Scatter: return {Algo::Direct};
    case Coll::Barrier: return {Algo::RecursiveDoubling};
  }
  return {};
}

LinkParams CostModel::sharedLink(int ranksPerHost) const {
  // A link shared is not faster than alone: a calibration whose shared
  // figures came out below the link's own (noise) is read as the link's.
  LinkParams s = shared_;
  s.alphaUs = std::max(s.alphaUs, net_.alphaUs);
  s.betaUsPerB = std::max(s.betaUsPerB, net_.betaUsPerB);
  s.overheadUs = std::max(s.overheadUs, net_.overheadUs);
  // More ranks per host than were measured: the bandwidth split further.
  if (ranksPerHost > sharedRanks_) s.betaUsPerB *= static_cast<double>(ranksPerHost) / sharedRanks_;
  return s;
}

double CostModel::predictUs(Coll c, Algo a, size_t bytes, int p, int hosts) const {
  double t = networkUs(c, a, bytes, p, hosts);
  if (p <= 1) return t;
  const int L = hosts <= 0 || hosts >= p ? 1 : (p + hosts - 1) / hosts;
  const int H = (p + L - 1) / L;
  return std::max(t, cpuFloorUs(hostMessages(c, a, bytes, p, hosts), L, H));
}

double CostModel::cpuFloorUs(const HostMessages& m, int ranksPerHost, int hosts) const {
  const double cores = cpu_.coresPerHost(hosts);
  if (cores <= 0 || ranksPerHost <= cores) return 0;
  return (m.net * cpu_.usPerMessage + m.local * cpu_.usPerLocalMessage) / cores;
}

HostMessages CostModel::hostMessages(Coll c, Algo a, size_t bytes, int p, int hosts) {
  HostMessages m;
  if (p <= 1) return m;
  const int L = hosts <= 0 || hosts >= p ? 1 : (p + hosts - 1) / hosts;
  const double H = std::ceil(static_cast<double>(p) / L), P = p, Ld = L;
  // `n` steps in which every rank sends to one neighbour and receives from
  // another, the ranks in host blocks (rings): per host and step, one
  // message leaves the block and one comes in; the rest stay.
  auto ringSteps = [&](double n) {
    double net = H > 1 ? 2 : 0;
    m.net += n * net;
    m.local += n * (2 * Ld - net);
  };
  // Pairwise steps by distance 1, 2, 4, ... < q, spread evenly over the
  // hosts (a step within a host below distance L): recursive doubling's
  // (`exchange`: each of the q ranks sends one message and receives one), or
  // a binomial tree's (the `mask` ranks that have the data send to as many
  // others, those below p).
  auto pairSteps = [&](int q, bool exchange) {
    for (int mask = 1; mask < q; mask <<= 1) {
      double msgs = exchange ? 2.0 * q : 2.0 * std::min(mask, std::max(0, p - mask));
      (mask < L ? m.local : m.net) += msgs / H;
    }
  };
  switch (c) {
    case Coll::Allreduce:
    case Coll::ReduceScatter:
      if (a == Algo::Ring) {
        ringSteps(c == Coll::Allreduce ? 2 * (P - 1) : P - 1);
      } else {  // recursive doubling (reduce-scatter: the allreduce, then a copy)
        int q = floorPow2(p);
        pairSteps(q, true);
        // The ranks beyond q fold into a neighbour before and get the
        // result after: two messages each way per folding pair.
        (L > 1 ? m.local : m.net) += 4.0 * (p - q) / H;
      }
      break;
    case Coll::Broadcast:
    case Coll::Reduce:
      if (a == Algo::Ring) {  // a pipeline: each piece goes down the chain of p ranks
        size_t piece = algo::broadcastRingPiece(bytes);
        double k = bytes == 0 ? 1 : std::ceil(static_cast<double>(bytes) / static_cast<double>(piece));
        m.net += 2 * k * (H - 1) / H;
        m.local += 2 * k * (P - H) / H;
      } else {
        pairSteps(1 << ceilLog2(p), false);
      }
      break;
    case Coll::Allgather:
      if (a == Algo::Ring) {
        ringSteps(P - 1);
        break;
      }
      [[fallthrough]];
    case Coll::Alltoall:  // every rank sends to and receives from every other
      m.net += Ld * 2 * (P - Ld);
      m.local += Ld * 2 * (Ld - 1);
      break;
    case Coll::Gather:
    case Coll::Scatter:  // the root's host: the root's p - 1 messages, one for each other rank there
      m.net += P - Ld;
      m.local += 2 * (Ld - 1);
      break;
    case Coll::Barrier:
      for (int mask = 1; mask < p; mask <<= 1) (mask < L ? m.local : m.net) += 2 * Ld;
      break;
  }
  return m;
}

double CostModel::networkUs(Coll c, Algo a, size_t bytes, int p, int hosts) const {
  if (p <= 1) return 0;
  // Ranks per host (blocks of consecutive ranks); 1: every rank on its own host.
  const int L = hosts <= 0 || hosts >= p ? 1 : (p + hosts - 1) / hosts;
  const LinkParams& H = local_;
  // With several ranks per host and the link measured so (linkShared): NS
  // for steps where every rank of a host crosses at once (its bandwidth
  // split further where the host has more ranks than were measured), and
  // for the other steps between hosts the same latency with the link's own
  // bandwidth (one pair per host crosses; the host's other ranks still take
  // their share of the CPUs).
  LinkParams NS = net_, NA = net_;
  if (L > 1 && sharedRanks_ > 1) {
    NS = sharedLink(L);
    NA.alphaUs = NS.alphaUs;
    NA.overheadUs = NS.overheadUs;
  }
  const LinkParams& N = NA;
  const double n = static_cast<double>(bytes), P = p;
  auto bad = [&]() -> double {
    throw InvalidArgument(std::string("cost model: ") + toString(c) + " has no algorithm " + toString(a));
  };
  // A step that reduces what it receives, b bytes: from 1 MiB they come in
  // pieces (algo::exchangePiece), each reduced while the next one comes, so
  // past the first piece's transfer and up to the last piece's reduction the
  // slower of the two sets the pace; a step of one piece receives, then
  // reduces (a + b beta + b gamma). Over TCP, where the wire is slower than
  // the reduction, a step of 64 MiB then costs its transfer and one piece's
  // reduction: between two ranks, recursive doubling's one step of the whole
  // vector comes out a latency ahead of the ring's two steps of half of it,
  // as the fixed thresholds choose there (forced between 2 namespace hosts
  // at 32-256 MiB, it was the faster in 11 of 13 pairs).
  auto reduceStep = [](const LinkParams& k, double b) {
    double piece = static_cast<double>(algo::exchangePiece(static_cast<size_t>(b), 4));
    return k.alphaUs + b * std::max(k.betaUsPerB, k.gammaUsPerB) + piece * std::min(k.betaUsPerB, k.gammaUsPerB);
  };
  // Pairwise steps by distance 1, 2, 4, ... < q (recursive doubling, binomial
  // trees): the pairs of a step with distance below the ranks per host stay
  // on their host (blocks aligned to powers of two).
  auto steps = [&](int q, double bytesPerStep, bool reduce) {
    double t = 0;
    for (int mask = 1; mask < q; mask <<= 1) {
      const LinkParams& k = mask < L ? H : NS;
      t += reduce ? reduceStep(k, bytesPerStep) : k.alphaUs + bytesPerStep * k.betaUsPerB;
    }
    return t;
  };
  // One rank to `messages` others at once, `block` bytes each: the messages
  // within the host and those between hosts go side by side. `everyone`:
  // every rank does so (allgather), so every rank of a host crosses at once;
  // else only the root does (gather, scatter).
  auto direct = [&](double block, int messages, bool everyone) {
    int inter = L == 1 ? messages : messages - (L - 1);
    int intra = messages - inter;
    const LinkParams& X = everyone ? NS : NA;
    double tn = inter > 0 ? X.alphaUs + (inter - 1) * X.overheadUs + inter * block * X.betaUsPerB : 0;
    double th = intra > 0 ? H.alphaUs + (intra - 1) * H.overheadUs + intra * block * H.betaUsPerB : 0;
    return std::max(tn, th);
  };
  // Rings and dissemination: some pair of every step crosses hosts, which
  // sets the step's time (the link between hosts).
  const double al = N.alphaUs, be = N.betaUsPerB;
  switch (c) {
    case Coll::Allreduce:
      // The ring: p - 1 reduction steps of a block, then p - 1 steps that pass the blocks on.
      if (a == Algo::Ring) return (P - 1) * (reduceStep(N, n / P) + al + n / P * be);
      if (a == Algo::RecursiveDoubling) {
        // log2 of the largest power of two, each step the whole vector; the
        // ranks beyond it fold into a neighbour (on its host) before and get
        // the result after.
        int q = floorPow2(p);
        const LinkParams& f = L > 1 ? H : N;
        double extra = q == p ? 0 : reduceStep(f, n) + f.alphaUs + n * f.betaUsPerB;
        return steps(q, n, true) + extra;
      }
      return bad();
    case Coll::Broadcast:
      if (a == Algo::Tree) return steps(1 << ceilLog2(p), n, false);
      if (a == Algo::Ring) {
        size_t piece = algo::broadcastRingPiece(bytes);
        double k = bytes == 0 ? 1 : std::ceil(n / static_cast<double>(piece));
        double m = std::min(n, static_cast<double>(piece));
        return (P - 2 + k) * (al + m * be);
      }
      return bad();
    case Coll::Reduce:
      if (a == Algo::Tree) return steps(1 << ceilLog2(p), n, true);
      return bad();
    case Coll::Allgather:  // n: the whole gathered vector
      if (a == Algo::Ring) return (P - 1) * (al + n / P * be);
      if (a == Algo::Direct) return direct(n / P, p - 1, true);
      return bad();
    case Coll::ReduceScatter:  // n: the whole input vector
      if (a == Algo::Ring) return (P - 1) * reduceStep(N, n / P);
      // The recursive-doubling variant is the whole allreduce, then a copy of
      // this rank's block (algorithms' reduce-scatter by recursive doubling).
      if (a == Algo::RecursiveDoubling) return networkUs(Coll::Allreduce, Algo::RecursiveDoubling, bytes, p, hosts);
      return bad();
    case Coll::Alltoall:  // n: all a rank sends
      // Small blocks go in one round, as an allgather's (every rank at once).
      if (a == Algo::Direct && n / P <= algo::kAlltoallOneRoundBytes) return direct(n / P, p - 1, true);
      if (a == Algo::Direct) return (P - 1) * (al + n / P * be);
      return bad();
    case Coll::Gather:
    case Coll::Scatter:  // n: one rank's block; the root's links carry p - 1 of them
      if (a == Algo::Direct) return direct(n, p - 1, false);
      return bad();
    case Coll::Barrier:
      if (a == Algo::RecursiveDoubling) return ceilLog2(p) * al;
      return bad();
  }
  return bad();
}

double CostModel::segmentBytesUs(size_t bytes) const {
  const auto& c = segmentCurve_;
  const double b = static_cast<double>(bytes);
  if (c.size() < 2 || b <= c.front().first) return b * segment_.betaUsPerB;
  // Each point's time less the smallest size's (the handshakes, alpha),
  // made non-decreasing: a noisy point does not make more bytes cheaper.
  double prev = 0, cur = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    prev = cur;
    cur = std::max(cur, c[i].second - c.front().second);
    if (b <= c[i].first) return prev + (cur - prev) * (b - c[i - 1].first) / (c[i].first - c[i - 1].first);
  }
  const size_t k = c.size() - 1;
  double slope = (cur - prev) / (c[k].first - c[k - 1].first);
  return cur + (b - c[k].first) * (slope > 0 ? slope : segment_.betaUsPerB);
}

double CostModel::segmentUs(Coll c, size_t bytes, bool hierarchical) const {
  // One pass over the vector at the measured rate (an allreduce's: each rank
  // copies in, reduces its slice, copies out); a handshake per phase. In a
  // hierarchical allreduce or barrier the segment runs before and after the
  // exchange between hosts; in a broadcast or allgather (after), a reduce or
  // reduce_scatter (before), once.
  const double handshakes = hierarchical && (c == Coll::Allreduce || c == Coll::Barrier) ? 2 : 1;
  return handshakes * segment_.alphaUs + (c == Coll::Barrier ? 0 : segmentBytesUs(bytes));
}

size_t CostModel::hierarchicalSlice(Coll c, size_t bytes, int p, int hosts) {
  // Allreduce: each local rank's slice; allgather and reduce_scatter (bytes:
  // the whole vector): what one rail gathers or reduces, a block of each host.
  // Gather and scatter (bytes: one rank's block): a host's blocks together.
  if ((c == Coll::Gather || c == Coll::Scatter) && hosts > 0) return bytes * static_cast<size_t>((p + hosts - 1) / hosts);
  return (c == Coll::Allreduce || c == Coll::Allgather || c == Coll::ReduceScatter) && hosts > 0 && p % hosts == 0
             ? bytes / static_cast<size_t>(p / hosts)
             : bytes;
}

double CostModel::hierarchicalUs(Coll c, Algo inter, size_t bytes, int p, int hosts) const {
  // The exchange between hosts below is predicted without its own CPU floor;
  // the floor of the whole op (the exchange's messages of every rank that
  // takes part, and the segment's phases) is put under the sum at the end.
  const int L = (p + hosts - 1) / hosts;
  HostMessages msgs = hostMessages(c, inter, hierarchicalSlice(c, bytes, p, hosts), hosts, hosts);
  const double instances = slicesCrossAtOnce(c, p, hosts) ? L : 1;  // every local rank's slice or rail, or one rank's
  msgs.net *= instances;
  msgs.local *= instances;
  msgs.local += L * segmentPhases(c);
  return std::max(cpuFloorUs(msgs, L, hosts), hierarchicalNoFloorUs(c, inter, bytes, p, hosts));
}

double CostModel::hierarchicalNoFloorUs(Coll c, Algo inter, size_t bytes, int p, int hosts) const {
  CostModel shared = *this;
  // Every local rank's slice (allreduce) or rail (allgather, reduce_scatter,
  // alltoall) crosses at once: they share the link.
  if (slicesCrossAtOnce(c, p, hosts)) {
    int L = p / hosts;
    if (L > 1 && sharedRanks_ > 1) {
      shared.net_ = sharedLink(L);
    } else {
      shared.net_.betaUsPerB *= L;
    }
  }
  // An allgather's blocks are then copied into rank order, a reduce_scatter's
  // input into rail order first: one more pass; an alltoall's blocks are
  // copied into host order, segment order and rank order: three.
  double passes = c == Coll::Allgather || c == Coll::ReduceScatter ? 1 : c == Coll::Alltoall ? 3 : 0;
  double copy = passes * segmentBytesUs(bytes);
  const size_t slice = hierarchicalSlice(c, bytes, p, hosts);
  if (c == Coll::Gather || c == Coll::Scatter) {
    // The segment's step moves a host's blocks; the root copies all of them
    // between rank order and host order.
    return segmentUs(c, slice, true) + segmentBytesUs(bytes * static_cast<size_t>(p)) +
           networkUs(c, inter, slice, hosts, hosts);
  }
  return segmentUs(c, bytes, true) + copy + shared.networkUs(c, inter, slice, hosts, hosts);
}

double CostModel::predictLayoutUs(Coll c, size_t bytes, int p, int hosts, std::string* plan) const {
  if (p <= 1) {
    if (plan) *plan = "-";
    return 0;
  }
  if (hosts <= 1) {  // every op on the shared segment
    if (plan) *plan = "shm";
    HostMessages msgs;
    msgs.local = p * segmentPhases(c);
    return std::max(segmentUs(c, bytes, false), cpuFloorUs(msgs, p, 1));
  }
  // Through the hosts' ranks where the backend's selection takes it (its
  // bounds; the ops along rails on hosts of as many ranks each).
  if (hierarchicalByDefault(c, bytes, p % hosts == 0) && hosts < p) {
    // As the accl backend runs them: allreduce on even hosts reduce-scatters
    // on the segment, exchanges each local rank's slice with its peers on
    // the other hosts (all slices at once), and allgathers on the segment;
    // on uneven hosts it reduces on the segment, exchanges the whole vector
    // between one rank per host and broadcasts on the segment; broadcast and
    // reduce have one segment phase and one exchange of the whole vector;
    // allgather exchanges each rank's block along its rail (all rails at
    // once), then allgathers on the segment and copies into rank order;
    // reduce_scatter permutes its input into rail order, reduce-scatters on
    // the segment, then along the rails; alltoall sends each rail-mate the
    // blocks for its whole host, then exchanges on the segment; scatter goes
    // through one rank per host, a host's blocks in one message.
    Algo a = best(c, hierarchicalSlice(c, bytes, p, hosts), hosts, hosts);  // as the backend picks it
    if (plan) *plan = std::string("hierarchical(shm+") + toString(a) + ")";
    return hierarchicalUs(c, a, bytes, p, hosts);
  }
  Algo a = best(c, bytes, p, hosts);
  if (plan) *plan = toString(a);
  return predictUs(c, a, bytes, p, hosts);
}

Algo CostModel::best(Coll c, size_t bytes, int p, int hosts) const {
  Algo bestA = Algo::Auto;
  double bestT = 0;
  for (Algo a : candidates(c)) {
    double t = predictUs(c, a, bytes, p, hosts);
    if (bestA == Algo::Auto || t < bestT) {
      bestA = a;
      bestT = t;
    }
  }
  return bestA;
}

}  // namespace core
}  // namespace accl
