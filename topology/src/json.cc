// The topology as JSON (accl-topo --json, ACCL_TOPO_DUMP_FILE=*.json), written
// with nlohmann::json: strings escaped as JSON requires, key order kept.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "accl/topology.h"

namespace accl {
namespace topo {

namespace {

using Json = nlohmann::ordered_json;

Json node(const Topology& t, const Node& n) {
  Json j;
  j["type"] = toString(n.type);
  if (!n.busId.empty()) j["busid"] = n.busId;
  if (n.pciClass) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%06x", n.pciClass);
    j["class"] = buf;
  }
  if (n.linkGBs > 0) j["link_GBs"] = n.linkGBs;
  if (n.type == NodeType::Numa) {
    j["numa"] = n.numa;
    j["cpus"] = n.cpus;
  }
  if (n.type == NodeType::Gpu) {
    j["gpu"] = n.gpuIndex;
    if (!n.model.empty()) j["model"] = n.model;
  }
  if (n.type == NodeType::Nic) {
    j["nic"] = n.nicIndex;
    j["name"] = n.name;
    j["rdma"] = n.rdma;
    j["speed_Gbps"] = n.speedGbps;
    j["netdevs"] = n.netdevs;
  }
  if (!n.children.empty()) {
    Json children = Json::array();
    for (int c : n.children) children.push_back(node(t, t.nodes[static_cast<size_t>(c)]));
    j["children"] = std::move(children);
  }
  return j;
}

}  // namespace

std::string toJson(const Topology& t) {
  auto gs = t.gpus(), ns = t.nics();
  Json j;
  j["source"] = t.source;
  j["hostname"] = t.hostname;
  j["gpus"] = gs.size();
  j["nics"] = ns.size();
  std::vector<std::pair<std::string, int>> devs;
  for (int g : gs) devs.emplace_back("GPU" + std::to_string(t.nodes[static_cast<size_t>(g)].gpuIndex), g);
  for (int n : ns) devs.emplace_back("NIC" + std::to_string(t.nodes[static_cast<size_t>(n)].nicIndex), n);
  // A name given twice (not from a loader: they number devices 0..n-1) keeps
  // its first place and its last device, as assigning by key would.
  {
    std::map<std::string, size_t> first;
    std::vector<std::pair<std::string, int>> unique;
    for (const auto& d : devs) {
      auto [it, fresh] = first.emplace(d.first, unique.size());
      if (fresh)
        unique.push_back(d);
      else
        unique[it->second].second = d.second;
    }
    devs = std::move(unique);
  }
  // Rows appended in order with distinct keys: no lookup per cell (an
  // ordered map's lookup is a linear search, which made the matrix cubic).
  Json paths = Json::object();
  auto& pathsObj = paths.get_ref<Json::object_t&>();
  for (const auto& [from, a] : devs) {
    Json row = Json::object();
    auto& rowObj = row.get_ref<Json::object_t&>();
    for (const auto& [to, b] : devs) {
      Path p = t.path(a, b);
      rowObj.Container::emplace_back(to, Json{{"type", toString(p.type)}, {"GBs", p.bandwidthGBs}});
    }
    pathsObj.Container::emplace_back(from, std::move(row));
  }
  j["paths"] = std::move(paths);
  Json bindings = Json::array();
  auto b = t.bindings(gs.empty() ? std::max<int>(1, static_cast<int>(t.numaNodes().size())) : static_cast<int>(gs.size()));
  for (const auto& x : b)
    bindings.push_back(Json{{"local_rank", x.localRank}, {"gpu", x.gpu}, {"numa", x.numa}, {"cpus", x.cpus}, {"nics", x.nics}});
  j["bindings"] = std::move(bindings);
  j["warnings"] = t.warnings();
  j["tree"] = node(t, t.nodes[0]);
  // Invalid UTF-8 in a name read from the host is replaced, not an exception.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace topo
}  // namespace accl
