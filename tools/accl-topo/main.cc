// accl-topo: shows which NIC and CPUs sit next to each GPU, as nvidia-smi topo -m does.
#include "../common/cli.h"
#include <cstdio>
#include <cstring>
#include <string>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/topology.h"

using namespace accl;
using namespace accl::topo;

namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

void printMatrix(const Topology& t) {
  auto gs = t.gpus(), ns = t.nics();
  std::vector<std::pair<std::string, int>> devs;
  for (int g : gs) devs.emplace_back("GPU" + std::to_string(t.nodes[g].gpuIndex), g);
  for (int n : ns) devs.emplace_back("NIC" + std::to_string(t.nodes[n].nicIndex), n);
  if (devs.empty()) return;
  size_t w = 6;
  std::string head = pad("", 8);
  for (auto& d : devs) head += pad(d.first, w);
  std::printf("%s%s%s\n", head.c_str(), pad("CPU Affinity", 16).c_str(), "NUMA Affinity");
  for (auto& row : devs) {
    std::string line = pad(row.first, 8);
    for (auto& col : devs) {
      Path p = t.path(row.second, col.second);
      std::string cell = p.type == PathType::LOC ? "X" : toString(p.type);
      if (p.type == PathType::NVL) {
        for (auto& [peer, count] : t.nodes[row.second].nvlinks)
          if (peer == t.nodes[col.second].busId) cell = "NV" + std::to_string(count);
      }
      line += pad(cell, w);
    }
    int numa = t.numaOf(row.second);
    std::string cpus = numa >= 0 ? t.cpusOfNuma(numa) : "";
    line += pad(cpus.empty() ? "N/A" : cpus, 16) + (numa >= 0 ? std::to_string(numa) : "N/A");
    std::printf("%s\n", line.c_str());
  }
  std::printf("\nLegend:\n  X    = self\n  NV#  = NVLink (# links)\n"
              "  PIX  = through at most one PCIe switch\n  PXB  = through several PCIe switches, no host bridge\n"
              "  PHB  = through a PCIe host bridge (the CPU)\n"
              "  NODE = between PCIe host bridges within a NUMA node\n"
              "  SYS  = across the inter-socket link (different NUMA nodes)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, fsroot;
  bool json = false, xml = false;
  int ranks = 0;
  CLI::App app{"Prints the topology of this host (probed, or ACCL_TOPO_FILE) or of a file: the GPU/NIC matrix, "
               "the NIC, NUMA node and CPUs per local rank, and warnings.",
               "accl-topo"};
  auto* in = app.add_option("--input", input, "an NCCL topology XML file or an hwloc XML export (lstopo --of xml)")
                 ->type_name("FILE");
  app.add_option("--fsroot", fsroot, "probe a copy of /sys and /proc under DIR instead of this host")
      ->type_name("DIR")
      ->excludes(in);
  app.add_option("--ranks", ranks, "local ranks to show bindings for (default: one per GPU or NUMA node)")
      ->check(CLI::Range(1, 4096));
  auto* js = app.add_flag("--json", json, "the topology, path matrix, bindings and warnings as JSON");
  app.add_flag("--xml", xml, "the topology as an NCCL topology file (NCCL_TOPO_FILE / ACCL_TOPO_FILE)")->excludes(js);
  if (int rc = accl_tools::parseCommandLine(app, argc, argv, "accl-topo"); rc >= 0) return rc;
  Topology t;
  try {
    if (!input.empty()) t = loadFile(input);
    else if (!fsroot.empty()) t = probe(fsroot);
    else t = loadFromConfig();
  } catch (const Error& e) {
    std::fprintf(stderr, "accl-topo: %s\n", e.what());
    return 1;
  }
  if (json) {
    std::fputs(toJson(t).c_str(), stdout);
    return 0;
  }
  if (xml) {
    std::fputs(toNcclXml(t).c_str(), stdout);
    return 0;
  }
  auto gs = t.gpus(), ns = t.nics(), numas = t.numaNodes();
  std::printf("Topology of %s (%s): %zu GPU(s), %zu NIC(s), %zu NUMA node(s)\n\n",
              t.hostname.empty() ? "?" : t.hostname.c_str(), t.source.c_str(), gs.size(), ns.size(), numas.size());
  printMatrix(t);
  if (!numas.empty()) {
    std::printf("\nNUMA nodes:\n");
    for (int id : numas) std::printf("  node %d: CPUs %s\n", t.nodes[id].numa, t.nodes[id].cpus.c_str());
  }
  if (!ns.empty()) {
    std::printf("\nNICs:\n");
    for (int id : ns) {
      const Node& n = t.nodes[id];
      std::string nd;
      for (auto& d : n.netdevs) nd += (nd.empty() ? "" : ",") + d;
      std::printf("  NIC%d: %-12s %-13s %-5s %s  netdev %s  NUMA %s\n", n.nicIndex, n.name.c_str(),
                  n.busId.empty() ? "(virtual)" : n.busId.c_str(), n.rdma ? "RDMA" : "TCP",
                  n.speedGbps > 0 ? (std::to_string(static_cast<int>(n.speedGbps)) + " Gb/s").c_str() : "speed ?",
                  nd.empty() ? "-" : nd.c_str(), n.numa >= 0 ? std::to_string(n.numa).c_str() : "?");
    }
  }
  bool anyRdma = false;
  for (int id : ns) anyRdma |= t.nodes[id].rdma;
  if (gs.empty() && !anyRdma)
    std::printf("\nThis host has no GPU and no RDMA device: ranks on it use shared memory among themselves and TCP "
                "to other hosts%s.\n", ns.empty() ? " (no network interface is up besides loopback)" : "");
  int n = ranks > 0 ? ranks : gs.empty() ? std::max<int>(1, static_cast<int>(numas.size())) : static_cast<int>(gs.size());
  const std::string& hca = accl::Config::get().ibHca;
  std::printf("\nPer local rank (NIC, NUMA node and CPUs to bind to%s):\n",
              hca.empty() ? "" : (", ACCL_IB_HCA=" + hca).c_str());
  for (auto& b : t.bindings(n, hca)) {
    std::string nics;
    for (int i : b.nics) nics += (nics.empty() ? "NIC" : " +NIC") + std::to_string(i) + " " + t.nic(i).name;
    std::printf("  rank %d: %s-> %s  NUMA %s  CPUs %s\n", b.localRank,
                b.gpu >= 0 ? ("GPU" + std::to_string(b.gpu) + " (" + t.gpu(b.gpu).busId + ") ").c_str() : "",
                nics.empty() ? "no NIC" : nics.c_str(), b.numa >= 0 ? std::to_string(b.numa).c_str() : "?",
                b.cpus.empty() ? "all" : b.cpus.c_str());
  }
  auto w = t.warnings();
  if (!w.empty()) {
    std::printf("\nWarnings:\n");
    for (auto& s : w) std::printf("  - %s\n", s.c_str());
  }
  return 0;
}
