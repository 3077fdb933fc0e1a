// NCCL topology XML (what NCCL_TOPO_FILE takes and NCCL_TOPO_DUMP_FILE writes).
#include <pugixml.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "accl/errors.h"
#include "accl/topology.h"
#include "util.h"

namespace accl {
namespace topo {

namespace {

struct Reader {
  std::string path, text;
  Topology t;

  [[noreturn]] void fail(const pugi::xml_node& n, const std::string& what) {
    throw InvalidArgument("accl topology: " + path + ":" + std::to_string(detail::lineOf(text, static_cast<size_t>(n.offset_debug()))) +
                          ": " + what);
  }

  unsigned hexAttr(const pugi::xml_node& n, const char* name, bool required) {
    pugi::xml_attribute a = n.attribute(name);
    if (!a) {
      if (required) fail(n, std::string("<") + n.name() + "> needs a " + name + " attribute");
      return 0;
    }
    char* end = nullptr;
    unsigned long v = std::strtoul(a.value(), &end, 16);
    if (*a.value() == '\0' || *end != '\0')
      fail(n, std::string(name) + "=\"" + a.value() + "\" is not a hexadecimal number (expected e.g. 0x030200)");
    return static_cast<unsigned>(v);
  }

  void nic(const pugi::xml_node& nicEl, Node& n) {
    n.type = NodeType::Nic;
    for (pugi::xml_node net : nicEl.children("net")) {
      const char* name = net.attribute("name").value();
      if (!*name) fail(net, "<net> needs a name attribute (the RDMA or network device)");
      if (n.name.empty()) n.name = name;
      double mbps = net.attribute("speed").as_double(0);
      // Up to 100 Tb/s; beyond that a file is wrong (found by fuzz_topology_xml: 1e105 overflowed the writer).
      if (!(mbps >= 0 && mbps <= 1e8))
        fail(net, std::string("speed=\"") + net.attribute("speed").value() +
                      "\" is not a link speed in Mb/s (expected 0 to 100000000, e.g. speed=\"200000\")");
      if (mbps > 0) n.speedGbps = mbps / 1000.0;
      // NCCL lists IB/RoCE devices here; plain sockets would have no port/guid.
      n.rdma = n.rdma || net.attribute("port") || net.attribute("guid") || std::string(name).find("mlx") == 0 ||
               std::string(name).find("rdmap") == 0 || std::string(name).find("efa") == 0;
    }
  }

  void gpu(const pugi::xml_node& gpuEl, Node& n) {
    for (pugi::xml_node l : gpuEl.children("nvlink")) {
      const char* target = l.attribute("target").value();
      if (!*target) fail(l, "<nvlink> needs a target attribute (the peer's bus id)");
      n.nvlinks.emplace_back(detail::lowerBusId(target), l.attribute("count").as_int(1));
    }
  }

  void pci(const pugi::xml_node& el, int parent) {
    static const std::regex busRe("^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F]$");
    Node n;
    std::string bus = el.attribute("busid").value();
    if (bus.empty()) fail(el, "<pci> needs a busid attribute (expected e.g. busid=\"0000:4f:00.0\")");
    if (!std::regex_match(bus, busRe)) fail(el, "busid=\"" + bus + "\" is not a PCI address (expected dddd:bb:dd.f)");
    n.busId = detail::lowerBusId(bus);
    n.pciClass = hexAttr(el, "class", false);
    n.vendor = hexAttr(el, "vendor", false);
    n.device = hexAttr(el, "device", false);
    double gt = std::atof(el.attribute("link_speed").value());
    int width = el.attribute("link_width").as_int(0);
    if (!(gt >= 0 && gt <= 1000) || width < 0 || width > 64)
      fail(el, "link_speed/link_width out of range (expected e.g. link_speed=\"16.0 GT/s PCIe\" link_width=\"16\")");
    if (gt > 0 && width > 0) n.linkGBs = detail::pcieGBs(gt, width);
    unsigned base = n.pciClass >> 8;
    bool hasPciChildren = static_cast<bool>(el.child("pci"));
    if (base == 0x0604 || (n.pciClass == 0 && hasPciChildren)) n.type = NodeType::PciSwitch;
    else if (base == 0x0302 || (base == 0x0300 && n.vendor == 0x10de)) n.type = NodeType::Gpu;  // not a VGA console
    else if (base == 0x0200 || base == 0x0207) n.type = NodeType::Nic;
    else n.type = NodeType::PciDevice;
    if (pugi::xml_node g = el.child("gpu")) {
      n.type = NodeType::Gpu;
      gpu(g, n);
    }
    if (pugi::xml_node c = el.child("nic")) nic(c, n);
    if (n.type == NodeType::Nic && n.name.empty()) n.name = n.busId;
    if (base == 0x0207) n.rdma = true;  // InfiniBand
    int id = t.addNode(n, parent);
    for (pugi::xml_node child : el.children()) {
      std::string nm = child.name();
      if (nm == "pci") pci(child, id);
      else if (nm == "nic" && n.type != NodeType::Nic) virtualNic(child, id);
    }
  }

  void virtualNic(const pugi::xml_node& el, int parent) {
    Node n;
    nic(el, n);
    t.addNode(n, parent);
  }

  Topology run() {
    pugi::xml_document doc;
    detail::parseXml(path, text, doc);
    pugi::xml_node sys = doc.child("system");
    if (!sys)
      throw InvalidArgument("accl topology: " + path + ": the root element is <" + std::string(doc.document_element().name()) +
                            ">; expected <system> (an NCCL topology file)");
    t.source = "nccl:" + path;
    Node m;
    m.type = NodeType::Machine;
    int root = t.addNode(m, -1);
    for (pugi::xml_node c : sys.children()) {
      std::string nm = c.name();
      if (nm != "cpu") continue;
      pugi::xml_attribute id = c.attribute("numaid");
      if (!id) fail(c, "<cpu> needs a numaid attribute");
      Node numa;
      numa.type = NodeType::Numa;
      numa.numa = id.as_int(-1);
      if (numa.numa < 0) fail(c, std::string("numaid=\"") + id.value() + "\" is not a NUMA node number");
      if (const char* aff = c.attribute("affinity").value(); *aff) numa.cpus = detail::maskToList(aff);
      int nid = t.addNode(numa, root);
      // NCCL files have no host bridges: paths through the CPU are PHB, as NCCL says.
      Node hb;
      hb.type = NodeType::HostBridge;
      nid = t.addNode(hb, nid);
      for (pugi::xml_node d : c.children()) {
        std::string dn = d.name();
        if (dn == "pci") pci(d, nid);
        else if (dn == "nic") virtualNic(d, nid);
      }
    }
    t.finalize();
    return t;
  }
};

void writePci(const Topology& t, const Node& n, std::ostringstream& os, int indent) {
  std::string pad(static_cast<size_t>(indent), ' ');
  double gt = 0;
  int width = 0;
  if (n.linkGBs > 0) detail::pcieRateWidth(n.linkGBs, &gt, &width);
  if (n.type == NodeType::HostBridge) {  // NCCL has no host bridges: children go to the CPU
    for (int c : n.children) writePci(t, t.nodes[static_cast<size_t>(c)], os, indent);
    return;
  }
  if (n.type == NodeType::Nic && n.busId.empty()) {
    os << pad << "<nic>\n" << pad << "  <net name=\"" << n.name << "\" dev=\"" << n.nicIndex << "\" speed=\""
       << static_cast<long>(n.speedGbps * 1000) << "\"/>\n" << pad << "</nic>\n";
    return;
  }
  unsigned cls = n.pciClass;
  if (cls == 0 && n.type == NodeType::PciSwitch) cls = 0x060400;
  if (cls == 0 && n.type == NodeType::Gpu) cls = 0x030200;
  if (cls == 0 && n.type == NodeType::Nic) cls = n.rdma ? 0x020700 : 0x020000;
  char head[256];
  std::snprintf(head, sizeof head, "<pci busid=\"%s\" class=\"0x%06x\" vendor=\"0x%04x\" device=\"0x%04x\"", n.busId.c_str(),
                cls, n.vendor, n.device);
  os << pad << head;
  if (width > 0) os << " link_speed=\"" << gt << " GT/s PCIe\" link_width=\"" << width << "\"";
  bool inner = !n.children.empty() || n.type == NodeType::Gpu || n.type == NodeType::Nic;
  if (!inner) {
    os << "/>\n";
    return;
  }
  os << ">\n";
  if (n.type == NodeType::Gpu) {
    os << pad << "  <gpu dev=\"" << n.gpuIndex << "\"";
    if (n.nvlinks.empty()) os << "/>\n";
    else {
      os << ">\n";
      for (auto& [peer, count] : n.nvlinks)
        os << pad << "    <nvlink target=\"" << peer << "\" count=\"" << count << "\" tclass=\"0x030200\"/>\n";
      os << pad << "  </gpu>\n";
    }
  }
  if (n.type == NodeType::Nic) {
    os << pad << "  <nic>\n" << pad << "    <net name=\"" << n.name << "\" dev=\"" << n.nicIndex << "\" speed=\""
       << static_cast<long>(n.speedGbps * 1000) << "\"" << (n.rdma ? " port=\"1\"" : "") << "/>\n" << pad << "  </nic>\n";
  }
  for (int c : n.children) writePci(t, t.nodes[static_cast<size_t>(c)], os, indent + 2);
  os << pad << "</pci>\n";
}

}  // namespace

Topology loadNcclXml(const std::string& path) {
  Reader r;
  r.path = path;
  return r.run();
}

std::string toNcclXml(const Topology& t) {
  std::ostringstream os;
  os << "<system version=\"1\">\n";
  auto numas = t.numaNodes();
  auto writeUnder = [&](const Node& parent) {
    for (int c : parent.children) {
      const Node& n = t.nodes[static_cast<size_t>(c)];
      if (n.type == NodeType::Numa) continue;
      writePci(t, n, os, 4);
    }
  };
  if (numas.empty()) {
    os << "  <cpu numaid=\"0\">\n";
    writeUnder(t.nodes[0]);
    os << "  </cpu>\n";
  } else {
    for (int id : numas) {
      const Node& n = t.nodes[static_cast<size_t>(id)];
      os << "  <cpu numaid=\"" << n.numa << "\"";
      if (!n.cpus.empty()) os << " affinity=\"" << detail::listToMask(n.cpus) << "\"";
      os << ">\n";
      writeUnder(n);
      os << "  </cpu>\n";
    }
    // Devices with no NUMA node go to the first one.
    bool loose = false;
    for (int c : t.nodes[0].children) loose |= t.nodes[static_cast<size_t>(c)].type != NodeType::Numa;
    if (loose) {
      os << "  <cpu numaid=\"" << t.nodes[static_cast<size_t>(numas[0])].numa << "\">\n";
      writeUnder(t.nodes[0]);
      os << "  </cpu>\n";
    }
  }
  os << "</system>\n";
  return os.str();
}

}  // namespace topo
}  // namespace accl
