#include "algorithms/select.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "accl/errors.h"
#include "algorithms/cost_model.h"
#include "accl/internal/strings.h"

namespace accl {
namespace core {

namespace {
constexpr size_t kSmallAllreduce = 64u << 10;
// Two ranks over verbs: recursive doubling (one exchange of the whole
// vector, in pieces) up to here, the ring (half the reduction's reads and
// writes) above, where a fast link may outrun the reduction of the whole
// vector. Over TCP, recursive doubling at every size: between two namespace
// hosts (2026-12-06), forced both ways in alternating launches, it ran
// 32-256 MiB at 1.34-2.22 GB/s busbw against the ring's 1.02-1.65 (11 of 13
// pairs faster), with 10-20 % less system CPU time: half of the ring's bytes
// land in the cold output buffer, all of recursive doubling's in
// cache-sized scratch pieces that are reduced while still in cache.
constexpr size_t kTwoRankRing = 16u << 20;
constexpr size_t kSmallBroadcast = 256u << 10;
constexpr size_t kSmallGather = 64u << 10;

const char* kCollNames[kNumColls] = {"allreduce", "broadcast",      "reduce", "allgather", "reduce_scatter",
                                     "alltoall",  "gather", "scatter", "barrier"};

// Algorithms each op accepts in ACCL_ALGO.
std::vector<Algo> accepted(Coll c) {
  switch (c) {
    case Coll::Allreduce: return {Algo::Ring, Algo::RecursiveDoubling, Algo::Hierarchical};
    case Coll::Broadcast: return {Algo::Tree, Algo::Ring, Algo::Hierarchical};
    case Coll::Reduce: return {Algo::Tree, Algo::Hierarchical};
    case Coll::Allgather: return {Algo::Ring, Algo::Direct, Algo::Hierarchical};
    case Coll::ReduceScatter: return {Algo::Ring, Algo::RecursiveDoubling, Algo::Hierarchical};
    case Coll::Alltoall: return {Algo::Direct, Algo::Hierarchical};
    case Coll::Gather: return {Algo::Direct, Algo::Hierarchical};
    case Coll::Scatter: return {Algo::Direct, Algo::Hierarchical};
    case Coll::Barrier: return {Algo::RecursiveDoubling, Algo::Hierarchical};
  }
  return {};
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}
}  // namespace

const char* toString(Coll c) { return kCollNames[static_cast<int>(c)]; }

AlgoOverrides parseAlgoSpec(const std::string& spec) {
  AlgoOverrides o;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(';', start);
    if (end == std::string::npos) end = spec.size();
    std::string item = trim(spec.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    auto colon = item.find(':');
    std::string op = trim(item.substr(0, colon));
    std::string al = colon == std::string::npos ? "" : trim(item.substr(colon + 1));
    int ci = -1;
    for (int i = 0; i < kNumColls; ++i)
      if (op == kCollNames[i]) ci = i;
    std::string ops = internal::join(kCollNames, ", ");
    if (ci < 0)
      throw InvalidArgument("accl: invalid value '" + spec + "' for ACCL_ALGO: unknown op '" + op +
                            "'; accepted ops: " + ops + " (form: op:algorithm;op:algorithm)");
    Algo a = Algo::Auto;
    if (al == "ring") a = Algo::Ring;
    else if (al == "rd" || al == "recursive_doubling") a = Algo::RecursiveDoubling;
    else if (al == "tree") a = Algo::Tree;
    else if (al == "direct") a = Algo::Direct;
    else if (al == "hier" || al == "hierarchical") a = Algo::Hierarchical;
    auto ok = accepted(static_cast<Coll>(ci));
    bool found = false;
    for (Algo x : ok) found = found || x == a;
    if (!found) {
      std::vector<std::string> names;
      for (Algo x : ok) names.push_back(toString(x));
      throw InvalidArgument("accl: invalid value '" + spec + "' for ACCL_ALGO: '" + al +
                            "' is not an algorithm of " + op + "; accepted: " + internal::join(names, ", "));
    }
    o.algo[ci] = a;
  }
  return o;
}

Algo chooseInterHost(Coll c, size_t bytes, int hosts, const AlgoOverrides& o, const CostModel* m, int hostCount) {
  Algo forced = o.algo[static_cast<int>(c)];
  if (forced != Algo::Auto && forced != Algo::Hierarchical) return forced;
  if (m) return m->best(c, bytes, hosts, hostCount);
  switch (c) {
    case Coll::Allreduce:
      return (bytes <= kSmallAllreduce || (hosts == 2 && (bytes <= kTwoRankRing || !o.rdmaBetweenHosts)))
                 ? Algo::RecursiveDoubling
                 : Algo::Ring;
    case Coll::Broadcast: return bytes <= kSmallBroadcast ? Algo::Tree : Algo::Ring;
    case Coll::Reduce: return Algo::Tree;
    case Coll::Allgather: return bytes <= kSmallGather ? Algo::Direct : Algo::Ring;
    case Coll::ReduceScatter: return bytes <= kSmallGather ? Algo::RecursiveDoubling : Algo::Ring;
    case Coll::Barrier: return Algo::RecursiveDoubling;
    default: return Algo::Direct;
  }
}

Algo choose(Coll c, size_t bytes, const Layout& l, const AlgoOverrides& o, const CostModel* m) {
  if (l.singleHost()) return Algo::Shm;
  Algo forced = o.algo[static_cast<int>(c)];
  // The hierarchical allgather, reduce-scatter and alltoall need every host
  // to hold as many ranks (their rails).
  const bool railed = c == Coll::Allgather || c == Coll::ReduceScatter || c == Coll::Alltoall;
  bool hier = l.hierarchical() && (!railed || l.uniform);
  if (forced == Algo::Hierarchical) {
    if (hier) return forced;
    AlgoOverrides unforced;
    unforced.rdmaBetweenHosts = o.rdmaBetweenHosts;
    return chooseInterHost(c, bytes, l.size, unforced, m, l.hosts);
  }
  if (forced != Algo::Auto) return forced;
  if (l.hierarchical() && hierarchicalByDefault(c, bytes, l.uniform)) return Algo::Hierarchical;
  return chooseInterHost(c, bytes, l.size, o, m, l.hosts);
}

bool hierarchicalByDefault(Coll c, size_t bytes, bool uniform) {
  switch (c) {
    case Coll::Allreduce:
    case Coll::Broadcast:
    case Coll::Reduce:
    case Coll::Barrier: return true;
    case Coll::Allgather: return uniform && bytes <= kHierarchicalAllgatherMax;
    case Coll::ReduceScatter: return uniform;
    case Coll::Alltoall: return uniform && bytes <= kHierarchicalAlltoallMax;
    // Scatter through one rank per host; gather only where forced
    // (kHierarchicalGatherMax says why).
    case Coll::Scatter: return bytes <= kHierarchicalGatherMax;
    case Coll::Gather: return false;
  }
  return false;
}

static std::vector<size_t> selectionProbes(const CostModel* m) {
  if (!m) {
    // Every fixed threshold's first byte past it.
    std::vector<size_t> p{0,
                          1,
                          kSmallGather + 1,
                          kSmallBroadcast + 1,
                          kTwoRankRing + 1,
                          kHierarchicalGatherMax + 1,
                          kHierarchicalAlltoallMax + 1,
                          kHierarchicalAllgatherMax + 1};
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    return p;
  }
  std::vector<size_t> p{0};
  for (size_t b = 1; b <= (size_t(1) << 30); b *= 2) p.push_back(b);
  return p;
}

std::string describeSelection(const Layout& l, const AlgoOverrides& o, const CostModel* m) {
  std::ostringstream os;
  if (l.singleHost()) return "every op on the shared segment (one host)";
  const std::vector<size_t> probes = selectionProbes(m);
  for (int ci = 0; ci < kNumColls; ++ci) {
    Coll c = static_cast<Coll>(ci);
    os << (ci ? "; " : "") << toString(c) << ":";
    std::string last;
    std::vector<std::pair<size_t, std::string>> ranges;
    for (size_t b : probes) {
      Algo a = choose(c, b, l, o, m);
      std::string name = toString(a);
      if (a == Algo::Hierarchical) {
        name += "(shm+";
        // What the exchange between hosts carries, as the backend sizes it.
        name += toString(chooseInterHost(c, CostModel::hierarchicalSlice(c, b, l.size, l.hosts), l.hosts, o, m));
        name += ")";
      }
      if (name != last) {
        ranges.push_back({b, name});
        last = name;
      }
    }
    for (size_t i = 0; i < ranges.size(); ++i) {
      os << " ";
      if (ranges.size() > 1) os << (i + 1 < ranges.size() ? "<" + std::to_string(ranges[i + 1].first) + "B " : ">=" + std::to_string(ranges[i].first) + "B ");
      os << ranges[i].second;
    }
  }
  return os.str();
}

}  // namespace core
}  // namespace accl
