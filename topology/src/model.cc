#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "accl/errors.h"
#include "accl/internal/name_spec.h"
#include "accl/topology.h"

namespace accl {
namespace topo {

namespace {
constexpr double kNvlinkGBsPerLink = 20.0;  // NCCL's per-link estimate for sm80/sm90
constexpr double kInterSocketGBs = 10.0;    // NCCL's estimate for the SMP interconnect
}  // namespace

const char* toString(NodeType t) {
  switch (t) {
    case NodeType::Machine: return "machine";
    case NodeType::Numa: return "numa";
    case NodeType::HostBridge: return "hostbridge";
    case NodeType::PciSwitch: return "switch";
    case NodeType::Gpu: return "gpu";
    case NodeType::Nic: return "nic";
    case NodeType::PciDevice: return "pci";
  }
  return "?";
}

const char* toString(PathType p) {
  switch (p) {
    case PathType::LOC: return "LOC";
    case PathType::NVL: return "NVL";
    case PathType::PIX: return "PIX";
    case PathType::PXB: return "PXB";
    case PathType::PHB: return "PHB";
    case PathType::NODE: return "NODE";
    case PathType::SYS: return "SYS";
    case PathType::NET: return "NET";
  }
  return "?";
}

int Topology::addNode(Node n, int parent) {
  n.id = static_cast<int>(nodes.size());
  n.parent = parent;
  nodes.push_back(n);
  if (parent >= 0) nodes[static_cast<size_t>(parent)].children.push_back(n.id);
  return n.id;
}

static std::vector<int> collect(const Topology& t, NodeType type) {
  std::vector<int> v;
  for (auto& n : t.nodes)
    if (n.type == type) v.push_back(n.id);
  return v;
}

std::vector<int> Topology::gpus() const {
  auto v = collect(*this, NodeType::Gpu);
  std::sort(v.begin(), v.end(), [&](int a, int b) { return nodes[a].gpuIndex < nodes[b].gpuIndex; });
  return v;
}

std::vector<int> Topology::nics() const {
  auto v = collect(*this, NodeType::Nic);
  std::sort(v.begin(), v.end(), [&](int a, int b) { return nodes[a].nicIndex < nodes[b].nicIndex; });
  return v;
}

std::vector<int> Topology::numaNodes() const {
  auto v = collect(*this, NodeType::Numa);
  std::sort(v.begin(), v.end(), [&](int a, int b) { return nodes[a].numa < nodes[b].numa; });
  return v;
}

void Topology::finalize() {
  for (auto& n : nodes) {
    if (n.type == NodeType::Numa) continue;
    n.numa = n.parent >= 0 ? nodes[static_cast<size_t>(n.parent)].numa : -1;  // parents come first
  }
  auto byBus = [&](std::vector<int> v) {
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) { return nodes[a].busId < nodes[b].busId; });
    return v;
  };
  int i = 0;
  for (int id : byBus(collect(*this, NodeType::Gpu))) nodes[id].gpuIndex = i++;
  i = 0;
  for (int id : byBus(collect(*this, NodeType::Nic))) nodes[id].nicIndex = i++;
}

int Topology::numaOf(int node) const { return nodes[static_cast<size_t>(node)].numa; }

std::string Topology::cpusOfNuma(int numa) const {
  for (auto& n : nodes)
    if (n.type == NodeType::Numa && n.numa == numa) return n.cpus;
  return "";
}

Path Topology::path(int a, int b) const {
  const Node& na = nodes[static_cast<size_t>(a)];
  const Node& nb = nodes[static_cast<size_t>(b)];
  Path p;
  if (a == b) {
    p.type = PathType::LOC;
    p.bandwidthGBs = na.linkGBs;
    return p;
  }
  if (na.type == NodeType::Gpu && nb.type == NodeType::Gpu) {
    for (auto& [peer, count] : na.nvlinks)
      if (peer == nb.busId && count > 0) {
        p.type = PathType::NVL;
        p.bandwidthGBs = count * kNvlinkGBsPerLink;
        return p;
      }
  }
  std::vector<int> up;  // a and its ancestors
  for (int x = a; x >= 0; x = nodes[static_cast<size_t>(x)].parent) up.push_back(x);
  std::sort(up.begin(), up.end());  // searched below (no set: this runs for every pair of devices)
  int lca = b;
  while (lca >= 0 && !std::binary_search(up.begin(), up.end(), lca)) lca = nodes[static_cast<size_t>(lca)].parent;
  // Bandwidth: the slowest known link on the path; switches between endpoint and LCA.
  double bw = 0;
  auto addLink = [&](double g) {
    if (g > 0) bw = bw > 0 ? std::min(bw, g) : g;
  };
  auto climb = [&](int from) {
    int switches = 0;
    for (int x = from; x != lca && x >= 0; x = nodes[static_cast<size_t>(x)].parent) {
      addLink(nodes[static_cast<size_t>(x)].linkGBs);
      if (x != from && nodes[static_cast<size_t>(x)].type == NodeType::PciSwitch) ++switches;
    }
    return switches;
  };
  int sa = climb(a), sb = climb(b);
  NodeType lt = lca >= 0 ? nodes[static_cast<size_t>(lca)].type : NodeType::Machine;
  if (lt == NodeType::PciSwitch) {
    addLink(nodes[static_cast<size_t>(lca)].linkGBs);
    p.type = (sa == 0 && sb == 0) ? PathType::PIX : PathType::PXB;
  } else if (lt == NodeType::HostBridge) {
    p.type = PathType::PHB;
  } else if (lt == NodeType::Numa) {
    p.type = PathType::NODE;
  } else if (lt == NodeType::Gpu || lt == NodeType::Nic || lt == NodeType::PciDevice) {
    p.type = PathType::PIX;  // one device behind the other (e.g. a function of a multi-function card)
  } else {
    p.type = (na.numa >= 0 && na.numa == nb.numa) ? PathType::NODE : PathType::SYS;
    if (p.type == PathType::SYS) bw = bw > 0 ? std::min(bw, kInterSocketGBs) : kInterSocketGBs;
  }
  p.bandwidthGBs = bw;
  return p;
}

bool matchHcaSpec(const std::string& spec, const std::string& device) {
  return spec.empty() || internal::NameSpec::parse(spec, /*withPorts=*/true).matches(device);
}

int hcaSpecPort(const std::string& spec, const std::string& device) {
  auto s = internal::NameSpec::parse(spec, /*withPorts=*/true);
  if (s.exclude) return 0;
  auto* item = s.find(device);
  return item ? std::max(0, item->port) : 0;
}

namespace {
bool better(const Path& x, const Path& y) {
  if (x.type != y.type) return x.type < y.type;
  return x.bandwidthGBs > y.bandwidthGBs;
}
bool same(const Path& x, const Path& y) { return x.type == y.type && x.bandwidthGBs == y.bandwidthGBs; }

// NICs a rank may use: RDMA NICs when there are any; else NICs with a netdev
// of this host, PCI functions before virtual interfaces (bridges, veth); else
// all. `hca` (ACCL_IB_HCA syntax) restricts the RDMA NICs.
std::vector<int> candidateNics(const Topology& t, const std::string& hca = "") {
  std::vector<int> all = t.nics(), rdma, pci, net;
  for (int id : all) {
    const Node& n = t.nodes[static_cast<size_t>(id)];
    if (n.rdma && (hca.empty() || matchHcaSpec(hca, n.name))) rdma.push_back(id);
    if (n.netdevs.empty()) continue;
    net.push_back(id);
    if (!n.busId.empty()) pci.push_back(id);
  }
  if (!hca.empty()) {
    if (rdma.empty()) {
      std::vector<std::string> devices;
      for (int id : all)
        if (t.nodes[static_cast<size_t>(id)].rdma) devices.push_back(t.nodes[static_cast<size_t>(id)].name);
      std::string have = internal::join(devices, ", ");
      throw InvalidArgument("accl topology: ACCL_IB_HCA='" + hca + "' matches no RDMA device; RDMA devices of this host" +
                            (t.source.empty() ? "" : " (" + t.source + ")") + ": " +
                            (have.empty() ? "none" : have) +
                            "; accepted: device name prefixes with an optional :port, ^ to exclude, = for exact names");
    }
    return rdma;
  }
  if (!rdma.empty()) return rdma;
  if (!pci.empty()) return pci;
  return net.empty() ? all : net;
}

// Spreads NICs over the clients (GPUs or ranks) that consider them nearest.
// best[c] = nearest NIC node ids of client c. Returns NIC node ids per client.
std::vector<std::vector<int>> spread(const std::vector<std::vector<int>>& best) {
  std::map<int, int> primaryLoad;
  std::vector<std::vector<int>> out(best.size());
  for (size_t c = 0; c < best.size(); ++c) {
    if (best[c].empty()) continue;
    int pick = best[c][0];
    for (int n : best[c])
      if (primaryLoad[n] < primaryLoad[pick]) pick = n;
    primaryLoad[pick]++;
    out[c].push_back(pick);
  }
  // NICs nobody uses as primary go to the client with the fewest NICs among
  // those for which they are nearest: every rail carries traffic.
  std::set<int> used;
  for (auto& v : out)
    if (!v.empty()) used.insert(v[0]);
  std::set<int> all;
  for (auto& v : best) all.insert(v.begin(), v.end());
  for (int n : all) {
    if (used.count(n)) continue;
    int target = -1;
    for (size_t c = 0; c < best.size(); ++c)
      if (std::find(best[c].begin(), best[c].end(), n) != best[c].end() &&
          (target < 0 || out[c].size() < out[static_cast<size_t>(target)].size()))
        target = static_cast<int>(c);
    if (target >= 0) out[static_cast<size_t>(target)].push_back(n);
  }
  return out;
}

std::vector<int> nearest(const Topology& t, int from, const std::vector<int>& cands) {
  std::vector<int> bestSet;
  Path best;
  best.type = PathType::NET;
  for (int n : cands) {
    Path p = t.path(from, n);
    if (bestSet.empty() || better(p, best)) {
      best = p;
      bestSet = {n};
    } else if (same(p, best)) {
      bestSet.push_back(n);
    }
  }
  return bestSet;
}
}  // namespace

std::vector<std::vector<int>> Topology::gpuNics(const std::string& ibHca) const {
  auto cands = candidateNics(*this, ibHca);
  std::vector<std::vector<int>> best;
  for (int g : gpus()) best.push_back(nearest(*this, g, cands));
  auto spreadIds = spread(best);
  std::vector<std::vector<int>> out;
  for (auto& v : spreadIds) {
    std::vector<int> idx;
    for (int id : v) idx.push_back(nodes[static_cast<size_t>(id)].nicIndex);
    out.push_back(idx);
  }
  return out;
}

std::vector<RankBinding> Topology::bindings(int localSize, const std::string& ibHca) const {
  std::vector<RankBinding> out;
  auto gs = gpus();
  if (!gs.empty()) {
    auto gn = gpuNics(ibHca);
    for (int r = 0; r < localSize; ++r) {
      RankBinding b;
      b.localRank = r;
      b.gpu = r % static_cast<int>(gs.size());
      b.nics = gn[static_cast<size_t>(b.gpu)];
      b.numa = numaOf(gs[static_cast<size_t>(b.gpu)]);
      b.cpus = cpusOfNuma(b.numa);
      out.push_back(b);
    }
    return out;
  }
  // CPU-only host: ranks spread over NUMA nodes, NICs nearest to each node.
  auto numas = numaNodes();
  auto cands = candidateNics(*this, ibHca);
  std::vector<std::vector<int>> best;
  for (int r = 0; r < localSize; ++r) {
    RankBinding b;
    b.localRank = r;
    int nodeId = numas.empty() ? 0 : numas[static_cast<size_t>(r) % numas.size()];
    b.numa = numas.empty() ? -1 : nodes[static_cast<size_t>(nodeId)].numa;
    b.cpus = numas.empty() ? "" : nodes[static_cast<size_t>(nodeId)].cpus;
    std::vector<int> near;
    for (int n : cands)
      if (b.numa >= 0 && nodes[static_cast<size_t>(n)].numa == b.numa) near.push_back(n);
    best.push_back(near.empty() ? cands : near);
    out.push_back(b);
  }
  auto spreadIds = spread(best);
  for (size_t r = 0; r < out.size(); ++r)
    for (int id : spreadIds[r]) out[r].nics.push_back(nodes[static_cast<size_t>(id)].nicIndex);
  return out;
}

std::vector<std::string> Topology::warnings() const {
  std::vector<std::string> w;
  auto cands = candidateNics(*this);
  auto gs = gpus();
  if (!gs.empty() && cands.empty()) w.push_back("GPUs but no NIC: inter-host traffic has no network device");
  for (int g : gs) {
    if (cands.empty()) break;
    auto near = nearest(*this, g, cands);
    Path p = path(g, near[0]);
    const Node& gpu = nodes[static_cast<size_t>(g)];
    const Node& nic = nodes[static_cast<size_t>(near[0])];
    if (p.type > PathType::PXB) {
      std::ostringstream os;
      os << "GPU" << gpu.gpuIndex << " (" << gpu.busId << ") has no NIC under its PCIe switch: nearest is NIC"
         << nic.nicIndex << " " << nic.name << " (" << toString(p.type)
         << "); GPUDirect RDMA beyond a PCIe switch is slow or unsupported on most platforms (NCCL enables it "
            "only up to PXB by default), so GPU traffic would be staged through host memory";
      w.push_back(os.str());
    }
  }
  std::set<double> speeds;
  for (int n : cands)
    if (nodes[static_cast<size_t>(n)].speedGbps > 0) speeds.insert(nodes[static_cast<size_t>(n)].speedGbps);
  if (speeds.size() > 1) {
    std::ostringstream os;
    os << "NICs of different speeds:";
    for (double s : speeds) os << " " << s << " Gb/s";
    os << "; rails are as fast as the slowest";
    w.push_back(os.str());
  }
  // CPU sets of NUMA nodes must not overlap (a known defect of some shipped topology files).
  auto numas = numaNodes();
  for (size_t i = 0; i < numas.size(); ++i)
    for (size_t j = i + 1; j < numas.size(); ++j) {
      const Node& a = nodes[static_cast<size_t>(numas[i])];
      const Node& b = nodes[static_cast<size_t>(numas[j])];
      if (!a.cpus.empty() && a.cpus == b.cpus) {
        std::ostringstream os;
        os << "NUMA nodes " << a.numa << " and " << b.numa << " have the same CPU set (" << a.cpus
           << "): the topology's CPU affinity is probably wrong, CPU binding will not separate them";
        w.push_back(os.str());
      }
    }
  bool anyRdma = false;
  for (int n : nics()) anyRdma |= nodes[static_cast<size_t>(n)].rdma;
  if (!gs.empty() && !anyRdma && !nics().empty())
    w.push_back("no RDMA NIC: GPU traffic between hosts goes over TCP through host memory");
  return w;
}

}  // namespace topo
}  // namespace accl
