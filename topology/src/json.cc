#include <sstream>

#include "accl/topology.h"

namespace accl {
namespace topo {

namespace {
std::string q(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

void node(const Topology& t, const Node& n, std::ostringstream& os) {
  os << "{\"type\":" << q(toString(n.type));
  if (!n.busId.empty()) os << ",\"busid\":" << q(n.busId);
  if (n.pciClass) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%06x", n.pciClass);
    os << ",\"class\":" << q(buf);
  }
  if (n.linkGBs > 0) os << ",\"link_GBs\":" << n.linkGBs;
  if (n.type == NodeType::Numa) os << ",\"numa\":" << n.numa << ",\"cpus\":" << q(n.cpus);
  if (n.type == NodeType::Gpu) os << ",\"gpu\":" << n.gpuIndex << (n.model.empty() ? "" : ",\"model\":" + q(n.model));
  if (n.type == NodeType::Nic) {
    os << ",\"nic\":" << n.nicIndex << ",\"name\":" << q(n.name) << ",\"rdma\":" << (n.rdma ? "true" : "false")
       << ",\"speed_Gbps\":" << n.speedGbps << ",\"netdevs\":[";
    for (size_t i = 0; i < n.netdevs.size(); ++i) os << (i ? "," : "") << q(n.netdevs[i]);
    os << "]";
  }
  if (!n.children.empty()) {
    os << ",\"children\":[";
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (i) os << ",";
      node(t, t.nodes[static_cast<size_t>(n.children[i])], os);
    }
    os << "]";
  }
  os << "}";
}
}  // namespace

std::string toJson(const Topology& t) {
  std::ostringstream os;
  auto gs = t.gpus(), ns = t.nics();
  os << "{\"source\":" << q(t.source) << ",\"hostname\":" << q(t.hostname) << ",\"gpus\":" << gs.size()
     << ",\"nics\":" << ns.size() << ",\"paths\":{";
  std::vector<std::pair<std::string, int>> devs;
  for (int g : gs) devs.emplace_back("GPU" + std::to_string(t.nodes[static_cast<size_t>(g)].gpuIndex), g);
  for (int n : ns) devs.emplace_back("NIC" + std::to_string(t.nodes[static_cast<size_t>(n)].nicIndex), n);
  for (size_t i = 0; i < devs.size(); ++i) {
    os << (i ? "," : "") << q(devs[i].first) << ":{";
    for (size_t j = 0; j < devs.size(); ++j) {
      Path p = t.path(devs[i].second, devs[j].second);
      os << (j ? "," : "") << q(devs[j].first) << ":{\"type\":" << q(toString(p.type)) << ",\"GBs\":" << p.bandwidthGBs << "}";
    }
    os << "}";
  }
  os << "},\"bindings\":[";
  auto b = t.bindings(gs.empty() ? std::max<int>(1, static_cast<int>(t.numaNodes().size())) : static_cast<int>(gs.size()));
  for (size_t i = 0; i < b.size(); ++i) {
    os << (i ? "," : "") << "{\"local_rank\":" << b[i].localRank << ",\"gpu\":" << b[i].gpu << ",\"numa\":" << b[i].numa
       << ",\"cpus\":" << q(b[i].cpus) << ",\"nics\":[";
    for (size_t j = 0; j < b[i].nics.size(); ++j) os << (j ? "," : "") << b[i].nics[j];
    os << "]}";
  }
  os << "],\"warnings\":[";
  auto w = t.warnings();
  for (size_t i = 0; i < w.size(); ++i) os << (i ? "," : "") << q(w[i]);
  os << "],\"tree\":";
  node(t, t.nodes[0], os);
  os << "}\n";
  return os.str();
}

}  // namespace topo
}  // namespace accl
