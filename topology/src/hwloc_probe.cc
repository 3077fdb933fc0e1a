// Topology from hwloc: the live host (optionally under another sysfs root) or
// an hwloc XML export. hwloc keeps every I/O object (KEEP_ALL filter), so the
// whole PCIe tree is seen: host bridges, bridges, devices and their OS devices.
#include <hwloc.h>
#include <pugixml.hpp>

#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>

#include "accl/errors.h"
#include "accl/internal/strings.h"
#include "accl/topology.h"
#include "util.h"

namespace accl {
namespace topo {

// The topology that keeps hwloc's plugins loaded (keepHwlocPluginsLoaded):
// a global, so that it stays reachable for the life of the process.
hwloc_topology_t gKeptHwlocTopology = nullptr;

void addNvlinksFromNvml(Topology& t);  // nvml.cc

namespace {

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
  return buf;
}

// hwloc's XML importer copies the bridge and OS-device type attributes from the
// file as integers, unchecked. Reading a value outside the enum's range as the
// enum is undefined behaviour (found by fuzz_topology_xml: upstream_type 3), so
// these are read as the integer they hold.
template <typename E>
long rawEnum(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<long>(v);
}

bool isHostBridge(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE && rawEnum(o->attr->bridge.upstream_type) == HWLOC_OBJ_BRIDGE_HOST;
}
bool isPciBridge(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE && rawEnum(o->attr->bridge.upstream_type) == HWLOC_OBJ_BRIDGE_PCI;
}

// A downstream port of a PCIe switch: a PCI bridge under a PCI bridge whose I/O
// children are all bridges. Such ports are folded into their switch, so that
// two devices under one physical switch are PIX, as NCCL and nvidia-smi say.
bool isDownstreamPort(hwloc_obj_t o) {
  if (!isPciBridge(o) || !o->parent || !isPciBridge(o->parent)) return false;
  for (hwloc_obj_t c = o->parent->io_first_child; c; c = c->next_sibling)
    if (c->type != HWLOC_OBJ_BRIDGE) return false;
  return true;
}

struct Builder {
  hwloc_topology_t topo;
  Topology t;
  std::map<unsigned, int> numaIds;  // os index -> node id
  std::string fsroot;               // for NIC speeds of a live probe ("" for files)

  int parentFor(hwloc_obj_t io) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, io);
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) {
      auto it = numaIds.find(static_cast<unsigned>(hwloc_bitmap_first(anc->nodeset)));
      if (it != numaIds.end()) return it->second;
    }
    return 0;  // the machine: unknown or several NUMA nodes
  }

  void osdevs(hwloc_obj_t pci, Node& n) {
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
      switch (rawEnum(c->attr->osdev.type)) {
        case HWLOC_OBJ_OSDEV_NETWORK: n.netdevs.push_back(c->name); break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS:
          n.rdma = true;
          if (n.name.empty() || n.name == n.busId) n.name = c->name;
          break;
        default: break;
      }
    }
  }

  void nicSpeed(Node& n) {
    if (fsroot.empty()) return;
    if (n.rdma) {
      // "100 Gb/sec (4X EDR)"
      std::string rate = internal::readFirstLine(fsroot + "/sys/class/infiniband/" + n.name + "/ports/1/rate");
      if (!rate.empty()) n.speedGbps = std::atof(rate.c_str());
      if (!(n.speedGbps >= 0 && n.speedGbps <= 1e5)) n.speedGbps = 0;  // unreadable: unknown
    }
    for (auto& d : n.netdevs) {
      if (n.speedGbps > 0) break;
      long mbps = std::atol(internal::readFirstLine(fsroot + "/sys/class/net/" + d + "/speed").c_str());
      if (mbps > 0) n.speedGbps = mbps / 1000.0;
    }
  }

  void walkIo(hwloc_obj_t o, int parent) {
    int here = parent;
    if (isHostBridge(o)) {
      Node n;
      n.type = NodeType::HostBridge;
      n.busId = "";
      here = t.addNode(n, parentFor(o));
    } else if (isPciBridge(o)) {
      if (!isDownstreamPort(o)) {
        Node n;
        n.type = NodeType::PciSwitch;
        n.busId = busIdOf(o->attr->bridge.upstream.pci);
        n.pciClass = static_cast<unsigned>(o->attr->bridge.upstream.pci.class_id) << 8;
        n.vendor = o->attr->bridge.upstream.pci.vendor_id;
        n.device = o->attr->bridge.upstream.pci.device_id;
        n.linkGBs = o->attr->bridge.upstream.pci.linkspeed;
        here = t.addNode(n, parent);
      }
    } else if (o->type == HWLOC_OBJ_PCI_DEVICE) {
      const auto& p = o->attr->pcidev;
      Node n;
      n.busId = busIdOf(p);
      n.pciClass = static_cast<unsigned>(p.class_id) << 8;
      n.vendor = p.vendor_id;
      n.device = p.device_id;
      n.linkGBs = p.linkspeed;
      unsigned base = p.class_id;
      if ((base == 0x0302 || base == 0x0300) && p.vendor_id == 0x10de) n.type = NodeType::Gpu;
      else if (base == 0x0200 || base == 0x0207) n.type = NodeType::Nic;
      else n.type = NodeType::PciDevice;
      if (const char* model = hwloc_obj_get_info_by_name(o, "PCIDevice")) n.model = model;
      if (n.type == NodeType::Nic) {
        osdevs(o, n);
        if (base == 0x0207) n.rdma = true;
        if (n.name.empty()) n.name = n.netdevs.empty() ? n.busId : n.netdevs[0];
        nicSpeed(n);
      }
      here = t.addNode(n, parent);
    } else {
      return;  // OS devices are read with their PCI device
    }
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) walkIo(c, here);
  }

  void walk(hwloc_obj_t o) {
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) walkIo(c, parentFor(c));
    for (hwloc_obj_t c = o->first_child; c; c = c->next_sibling) walk(c);
  }

  Topology build(const std::string& source) {
    t.source = source;
    Node m;
    m.type = NodeType::Machine;
    t.addNode(m, -1);
    if (const char* host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName")) t.hostname = host;
    for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n));) {
      Node numa;
      numa.type = NodeType::Numa;
      numa.numa = static_cast<int>(n->os_index);
      char* list = nullptr;
      hwloc_bitmap_list_asprintf(&list, n->cpuset);
      numa.cpus = list ? list : "";
      std::free(list);
      numaIds[n->os_index] = t.addNode(numa, 0);
    }
    walk(hwloc_get_root_obj(topo));
    t.finalize();
    return t;
  }
};

// hwloc loads its plugins when the first topology of the process is made and
// unloads them when the last one is destroyed: once per probe, a dozen
// libraries each time (X11, OpenCL, libxml2), and the plugins' allocations
// lost at each unload. One topology kept for the life of the process (never
// loaded, never destroyed) keeps them loaded once.
void keepHwlocPluginsLoaded() {
  static std::once_flag once;
  std::call_once(once, [] { hwloc_topology_init(&gKeptHwlocTopology); });
}

struct Hwloc {
  hwloc_topology_t topo = nullptr;
  Hwloc() {
    keepHwlocPluginsLoaded();
    hwloc_topology_init(&topo);
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
    // Only PCI, network and OpenFabrics objects are read here (GPUs come from
    // NVML, nvml.cc). hwloc's GPU-runtime components would start those
    // runtimes in the user's process (OpenCL and CUDA create contexts on every
    // GPU: seconds and memory per rank), and "gl" connects to X displays.
    for (const char* c : {"gl", "opencl", "cuda", "nvml", "rsmi", "levelzero"})
      hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
  }
  ~Hwloc() { hwloc_topology_destroy(topo); }
};

}  // namespace

namespace {

// hwloc's XML importer trusts its input: an object without its cpuset crashes
// it (found by fuzz_topology_xml), and so might a bitmap it cannot parse. What an
// hwloc 2.x export always has is checked here first, with the line.
bool validBitmap(const char* v) {
  std::string s = v;
  // hwloc counts the words after the first character: a leading comma trips
  // its assert (fuzz_topology_xml); it never writes one, nor a trailing one.
  if (s.empty() || s.front() == ',' || s.back() == ',') return false;
  if (s.find("0xf...f", 1) != std::string::npos) return false;  // only as the first word
  for (const std::string& tok : internal::split(s, ',')) {
    // An empty word between commas is a zero word ("0x1,,0x10000"), as hwloc writes it.
    if (!tok.empty() && tok != "0xf...f") {
      if (tok.size() < 3 || tok.size() > 10 || tok[0] != '0' || (tok[1] != 'x' && tok[1] != 'X')) return false;
      for (size_t i = 2; i < tok.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(tok[i]))) return false;
    }
  }
  return true;
}

// Attribute names of every element must be what hwloc writes: ASCII letters,
// digits and "_-:." (pugixml accepts any XML name). An <object>'s attributes
// are further checked against the list hwloc writes (below): an unknown one
// crashed hwloc's own parser (found by fuzz_topology_xml).
bool hwlocName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x80 || !(std::isalnum(u) || c == '_' || c == '-' || c == ':' || c == '.')) return false;
  }
  return true;
}

void validateHwlocNames(const std::string& path, const std::string& text, const pugi::xml_node& node) {
  for (pugi::xml_node n = node.first_child(); n; n = n.next_sibling()) {
    if (n.type() != pugi::node_element) continue;
    for (pugi::xml_attribute a = n.first_attribute(); a; a = a.next_attribute())
      if (!hwlocName(a.name()))
        throw InvalidArgument("accl topology: " + path + ":" + std::to_string(detail::lineOf(text, static_cast<size_t>(n.offset_debug()))) +
                              ": <" + n.name() + "> has an attribute whose name is not ASCII letters, digits and _-:. "
                              "(an hwloc 2.x XML export was expected)");
    validateHwlocNames(path, text, n);
  }
}

void validateHwlocObjects(const std::string& path, const std::string& text, const pugi::xml_node& node) {
  static const std::set<std::string> cpuSide = {"Machine", "Package", "Die", "Core", "PU", "Group", "NUMANode",
                                                "MemCache", "L1Cache", "L2Cache", "L3Cache", "L4Cache", "L5Cache",
                                                "L1iCache", "L2iCache", "L3iCache"};
  static const std::set<std::string> ioSide = {"Bridge", "PCIDev", "OSDev", "Misc"};
  static const char* const sets[] = {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset",
                                     "allowed_cpuset", "allowed_nodeset", "online_cpuset"};
  for (pugi::xml_node o = node.child("object"); o; o = o.next_sibling("object")) {
    auto where = [&] { return "accl topology: " + path + ":" + std::to_string(detail::lineOf(text, static_cast<size_t>(o.offset_debug()))); };
    std::string type = o.attribute("type").value();
    if (!cpuSide.count(type) && !ioSide.count(type))
      throw InvalidArgument(where() + ": <object> of unknown type '" + type + "' (an hwloc 2.x XML export was expected)");
    if (cpuSide.count(type))
      for (const char* a : {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset"})
        if (!o.attribute(a))
          throw InvalidArgument(where() + ": <object type=\"" + type + "\"> lacks " + a +
                                " (every hwloc 2.x export has it)");
    // Only the attributes hwloc writes: its own XML parser crashed (a NULL
    // nodeset in hwloc_bitmap_isequal, found by fuzz_topology_xml) on an
    // object with an unknown attribute such as "complete_cpusetX" next to the
    // real one.
    static const std::set<std::string> known = {
        "type", "subtype", "os_index", "gp_index", "name", "cpuset", "complete_cpuset", "allowed_cpuset",
        "online_cpuset", "nodeset", "complete_nodeset", "allowed_nodeset", "cache_size", "cache_linesize",
        "cache_associativity", "cache_type", "local_memory", "depth", "kind", "subkind", "dont_merge", "pci_busid",
        "pci_type", "pci_link_speed", "bridge_type", "bridge_pci", "osdev_type", "os_level", "huge_page_size_kB",
        "huge_page_free"};
    for (pugi::xml_attribute a = o.first_attribute(); a; a = a.next_attribute())
      if (!known.count(a.name()))
        throw InvalidArgument(where() + ": <object type=\"" + type + "\"> has an attribute '" + a.name() +
                              "' that hwloc does not write (an hwloc 2.x XML export was expected)");
    // A NUMA node or PU names its OS index in every hwloc 2.x export; without
    // it hwloc would number it (unsigned)-1.
    if (type == "NUMANode" || type == "PU") {
      std::string idx = o.attribute("os_index").value();
      if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos)
        throw InvalidArgument(where() + ": <object type=\"" + type + "\"> lacks a valid os_index (\"" + idx +
                              "\"; every hwloc 2.x export gives it, a number)");
    }
    for (const char* a : sets)
      if (o.attribute(a) && !validBitmap(o.attribute(a).value()))
        throw InvalidArgument(where() + ": " + a + "=\"" + o.attribute(a).value() +
                              "\" is not an hwloc bitmap (0x-prefixed hex words separated by commas)");
    validateHwlocObjects(path, text, o);
  }
}

}  // namespace

Topology loadHwlocXml(const std::string& path) {
  std::string text;
  pugi::xml_document doc;
  detail::parseXml(path, text, doc);
  if (!doc.child("topology"))
    throw InvalidArgument("accl topology: " + path + ": the root element is <" + std::string(doc.document_element().name()) +
                          ">; expected <topology> (an hwloc XML export, lstopo --of xml)");
  validateHwlocNames(path, text, doc);
  validateHwlocObjects(path, text, doc.child("topology"));
  Hwloc h;
  if (hwloc_topology_set_xml(h.topo, path.c_str()) != 0 || hwloc_topology_load(h.topo) != 0)
    throw InvalidArgument("accl topology: hwloc could not load " + path + " (an hwloc 2.x XML export was expected)");
  Builder b{h.topo, {}, {}, ""};
  return b.build("hwloc:" + path);
}

Topology probe(const std::string& fsroot) {
  Hwloc h;
  std::string root = fsroot.empty() ? "/" : fsroot;
  const char* old = std::getenv("HWLOC_FSROOT");
  std::string saved = old ? old : "";
  if (root != "/") setenv("HWLOC_FSROOT", root.c_str(), 1);
  int rc = hwloc_topology_load(h.topo);
  if (root != "/") {
    if (old) setenv("HWLOC_FSROOT", saved.c_str(), 1);
    else unsetenv("HWLOC_FSROOT");
  }
  if (rc != 0) throw SystemError("accl topology: hwloc could not probe this host (fsroot " + root + ")");
  Builder b{h.topo, {}, {}, root == "/" ? "" : root};
  Topology t = b.build(root == "/" ? "live" : "live:" + root);
  // Network interfaces that are not PCI functions (virtual NICs, veth, bridges
  // of containers) still carry TCP traffic: list the ones that are up.
  // A live probe asks the kernel (getifaddrs) which interfaces exist: that
  // answer belongs to this process's network namespace, where /sys/class/net
  // may show another one's (setns without remounting /sys). A PCI NIC whose
  // netdev lives in another namespace keeps its RDMA device but not the netdev.
  std::string netDir = (root == "/" ? "" : root) + "/sys/class/net";
  std::vector<std::string> upHere;  // up, non-loopback interfaces of this namespace
  std::set<std::string> existHere;
  if (root == "/") {
    ifaddrs* ifa = nullptr;
    if (getifaddrs(&ifa) == 0) {
      for (ifaddrs* i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_name) continue;
        existHere.insert(i->ifa_name);
        if ((i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) upHere.push_back(i->ifa_name);
      }
      freeifaddrs(ifa);
    }
    for (auto& n : t.nodes) {
      if (n.type != NodeType::Nic) continue;
      bool named = !n.netdevs.empty() && n.name == n.netdevs[0];
      std::vector<std::string> kept;
      for (auto& d : n.netdevs)
        if (existHere.count(d)) kept.push_back(d);
      n.netdevs = kept;
      if (named && kept.empty() && !n.rdma) n.name = n.busId;
    }
  } else if (auto* dir = opendir(netDir.c_str())) {
    while (auto* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name == "lo") continue;
      if (internal::readFirstLine(netDir + "/" + name + "/operstate") == "up") upHere.push_back(name);
    }
    closedir(dir);
  }
  std::set<std::string> seen;
  for (auto& n : t.nodes)
    for (auto& d : n.netdevs) seen.insert(d);
  std::sort(upHere.begin(), upHere.end());
  upHere.erase(std::unique(upHere.begin(), upHere.end()), upHere.end());
  for (auto& name : upHere) {
    if (seen.count(name)) continue;
    Node n;
    n.type = NodeType::Nic;
    n.name = name;
    n.netdevs = {name};
    long mbps = std::atol(internal::readFirstLine(netDir + "/" + name + "/speed").c_str());
    if (mbps > 0) n.speedGbps = mbps / 1000.0;
    t.addNode(n, 0);
  }
  t.finalize();
  addNvlinksFromNvml(t);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  t.hostname = host;
  return t;
}

}  // namespace topo
}  // namespace accl
