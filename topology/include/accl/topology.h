// Host topology: GPUs, NICs, NUMA nodes and the PCIe tree between them, the
// path class between any two devices (NCCL's LOC/NVL/PIX/PXB/PHB/SYS/NET, plus
// nvidia-smi's NODE), and the NIC / NUMA node / CPU set each local rank should
// use. Only this layer probes (sysfs, hwloc, NVML) or reads topology files:
// a backend asks it for a Topology (loadFromConfig) and works on that value.
#pragma once

#include <string>
#include <vector>

namespace accl {
namespace topo {

enum class NodeType { Machine, Numa, HostBridge, PciSwitch, Gpu, Nic, PciDevice };
const char* toString(NodeType t);

// NCCL's path classes, best first.
enum class PathType {
  LOC,  // the same device
  NVL,  // NVLink between two GPUs
  PIX,  // through at most one PCIe switch
  PXB,  // through several PCIe switches, without crossing a host bridge
  PHB,  // through one PCIe host bridge (the CPU)
  NODE, // between host bridges of one NUMA node (nvidia-smi's NODE)
  SYS,  // across the inter-socket link (different NUMA nodes)
  NET,  // through the network (different hosts)
};
const char* toString(PathType p);

struct Node {
  int id = -1;
  NodeType type = NodeType::PciDevice;
  int parent = -1;  // -1 for the machine
  std::vector<int> children;
  int numa = -1;  // NUMA node os index this node hangs under (-1: unknown)

  // PCI devices, switches, host bridges
  std::string busId;  // "0000:4f:00.0" (lower case); virtual switches of NCCL files: "ffff:ff:01.0"
  unsigned pciClass = 0;  // 24-bit class code, e.g. 0x030200
  unsigned vendor = 0, device = 0;
  double linkGBs = 0;  // PCIe link bandwidth in GB/s (0: unknown)

  // NUMA nodes
  std::string cpus;  // CPU list, e.g. "0-47,96-143"

  // GPUs
  int gpuIndex = -1;  // order of GPUs by bus id
  std::string model;
  std::vector<std::pair<std::string, int>> nvlinks;  // (peer bus id, number of links)

  // NICs
  int nicIndex = -1;
  std::string name;                  // RDMA device (mlx5_0, rdmap79s0) or netdev if none
  std::vector<std::string> netdevs;  // Ethernet / IPoIB interfaces
  bool rdma = false;                 // has an RDMA (verbs) device
  double speedGbps = 0;              // link speed (0: unknown)
};

struct Path {
  PathType type = PathType::SYS;
  double bandwidthGBs = 0;  // estimated: the slowest link on the path
};

struct RankBinding {
  int localRank = 0;
  int gpu = -1;              // GPU index, -1 on CPU-only hosts
  std::vector<int> nics;     // NIC indices, first = primary
  int numa = -1;
  std::string cpus;          // CPU list to bind to
};

class Topology {
 public:
  std::string source;  // where it came from: "hwloc:<file>", "nccl:<file>", "live", ...
  std::string hostname;
  std::vector<Node> nodes;  // nodes[0] is the machine

  int addNode(Node n, int parent);

  std::vector<int> gpus() const;  // node ids, in GPU index order
  std::vector<int> nics() const;  // node ids, in NIC index order
  std::vector<int> numaNodes() const;
  const Node& gpu(int index) const { return nodes[static_cast<size_t>(gpus()[static_cast<size_t>(index)])]; }
  const Node& nic(int index) const { return nodes[static_cast<size_t>(nics()[static_cast<size_t>(index)])]; }

  // Path class and bandwidth between two nodes of this host.
  Path path(int a, int b) const;
  // NUMA os index of a node (walking up), -1 if unknown.
  int numaOf(int node) const;
  // CPU list of a NUMA node os index ("" if unknown).
  std::string cpusOfNuma(int numa) const;

  // The NICs each GPU should use: every GPU gets its nearest NICs (best path
  // class, then bandwidth); NICs shared by several GPUs are spread evenly so
  // that all rails carry traffic. RDMA NICs are preferred over plain Ethernet,
  // and PCI functions with a netdev over virtual interfaces (bridges, veth).
  // Result: for GPU i, NIC indices, first = primary.
  // `ibHca` (ACCL_IB_HCA syntax: prefixes, ^ exclude, = exact, :port ignored)
  // restricts the choice to the matching RDMA devices; InvalidArgument if none.
  std::vector<std::vector<int>> gpuNics(const std::string& ibHca = "") const;
  // NIC, NUMA node and CPU set for `localSize` ranks on this host: rank i uses
  // GPU i mod #GPUs; on hosts without GPUs ranks are spread over NUMA nodes and
  // get the NICs nearest to their node.
  std::vector<RankBinding> bindings(int localSize, const std::string& ibHca = "") const;
  // Human-readable warnings: GPU with no NIC under its PCIe switch, NICs of
  // different speeds, GPUDirect RDMA not possible, ...
  std::vector<std::string> warnings() const;

  // Final pass after building: sorts GPUs/NICs by bus id, assigns indices and NUMA.
  void finalize();
};

// NCCL_IB_HCA syntax: "mlx5_0:1,mlx5_1" (prefixes), "^mlx5_2" (all but),
// "=mlx5_0" (exact names). Ports are accepted and ignored here (see hcaSpecPort).
bool matchHcaSpec(const std::string& spec, const std::string& device);
// The port the spec names for `device` ("mlx5_0:1" -> 1), 0 when none.
int hcaSpecPort(const std::string& spec, const std::string& device);

// Loading. Every function throws accl::InvalidArgument naming the file, the
// line and what was expected when the input is not valid.
Topology loadHwlocXml(const std::string& path);
Topology loadNcclXml(const std::string& path);
// Picks the format from the root element (<topology> = hwloc, <system> = NCCL).
Topology loadFile(const std::string& path);
// Probes this host through hwloc (PCI tree, NUMA, OS devices); `fsroot` other
// than "/" redirects the probe to a copy of /sys and /proc. NVLink peers come
// from NVML when libnvidia-ml is present.
Topology probe(const std::string& fsroot = "/");
// ACCL_TOPO_FILE if set, else probe(); then, with `dump`, ACCL_TOPO_DUMP_FILE
// if set (a job dumps from one rank, as NCCL does).
Topology loadFromConfig(bool dump = true);

// Writers.
std::string toNcclXml(const Topology& t);
std::string toJson(const Topology& t);

}  // namespace topo
}  // namespace accl
