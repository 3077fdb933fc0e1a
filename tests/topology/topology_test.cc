// Topology layer on real machines' files (tests/fixtures/topologies, see its
// SOURCES.md) and on hand-written odd layouts. Expectations come from the PCIe
// trees the files describe, as tabulated in SOURCES.md.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "accl/errors.h"
#include "accl/topology.h"

using namespace accl;
using namespace accl::topo;

namespace {

std::string fixture(const std::string& name) { return std::string(ACCL_TOPO_FIXTURES) + "/" + name; }

int gpuByBus(const Topology& t, const std::string& bus) {
  for (int id : t.gpus())
    if (t.nodes[id].busId == bus) return id;
  ADD_FAILURE() << "no GPU at " << bus;
  return 0;
}
int nicByBus(const Topology& t, const std::string& bus) {
  for (int id : t.nics())
    if (t.nodes[id].busId == bus) return id;
  ADD_FAILURE() << "no NIC at " << bus;
  return 0;
}
// Bus ids of the NICs assigned to the GPU at `bus`.
std::vector<std::string> nicsOf(const Topology& t, const std::string& bus) {
  auto gn = t.gpuNics();
  std::vector<std::string> out;
  for (int i : gn[static_cast<size_t>(t.nodes[gpuByBus(t, bus)].gpuIndex)]) out.push_back(t.nic(i).busId);
  return out;
}
std::vector<std::string> busIds(const Topology& t, const std::vector<int>& ids) {
  std::vector<std::string> v;
  for (int id : ids) v.push_back(t.nodes[id].busId);
  return v;
}

std::string writeTemp(const std::string& text) {
  static int n = 0;
  std::string path = "/tmp/accl-topo-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".xml";
  std::ofstream(path) << text;
  return path;
}

std::string errorOf(const std::string& text) {
  std::string path = writeTemp(text);
  try {
    loadFile(path);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HwlocFixtures, AwsP4dGpusShareAHostBridgeWithTheirEfa) {
  Topology t = loadHwlocXml(fixture("hwloc-aws-p4d.xml"));
  EXPECT_EQ(busIds(t, t.gpus()), (std::vector<std::string>{"0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0", "0000:20:1d.0",
                                                           "0000:90:1c.0", "0000:90:1d.0", "0000:a0:1c.0", "0000:a0:1d.0"}));
  int rdma = 0;
  for (int id : t.nics()) rdma += t.nodes[id].rdma;
  EXPECT_EQ(t.nics().size(), 8u);  // 4 EFA + 4 ENA
  EXPECT_EQ(rdma, 4);
  // No PCIe switch: GPU and EFA meet at the host bridge.
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:10:1b.0")).type, PathType::PHB);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), gpuByBus(t, "0000:10:1d.0")).type, PathType::PHB);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:20:1b.0")).type, PathType::NODE);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:90:1b.0")).type, PathType::SYS);
  const std::map<std::string, std::string> efa = {{"0000:10", "0000:10:1b.0"}, {"0000:20", "0000:20:1b.0"},
                                                  {"0000:90", "0000:90:1b.0"}, {"0000:a0", "0000:a0:1b.0"}};
  for (int g : t.gpus()) {
    auto nics = nicsOf(t, t.nodes[g].busId);
    ASSERT_EQ(nics.size(), 1u);
    EXPECT_EQ(nics[0], efa.at(t.nodes[g].busId.substr(0, 7))) << t.nodes[g].busId;
    EXPECT_EQ(t.numaOf(g), t.nodes[g].busId < "0000:80" ? 0 : 1);
  }
  EXPECT_EQ(t.nic(t.nodes[nicByBus(t, "0000:10:1b.0")].nicIndex).name, "rdmap16s27");
  // GPUDirect RDMA needs a shared switch: every GPU is warned about.
  int gdrWarnings = 0;
  for (auto& w : t.warnings()) gdrWarnings += w.find("GPUDirect RDMA beyond a PCIe switch") != std::string::npos;
  EXPECT_EQ(gdrWarnings, 8);
}

TEST(HwlocFixtures, AwsP5enTwoGpusShareFourEfaBehindOneSwitch) {
  Topology t = loadHwlocXml(fixture("hwloc-aws-p5en.xml"));
  ASSERT_EQ(t.gpus().size(), 8u);
  EXPECT_EQ(t.nics().size(), 32u);
  struct Group {
    std::string g0, g1;
    std::vector<std::string> efa;
    int numa;
  };
  std::vector<Group> groups = {
      {"0000:59:00.0", "0000:5a:00.0", {"0000:55:00.0", "0000:56:00.0", "0000:57:00.0", "0000:58:00.0"}, 0},
      {"0000:72:00.0", "0000:73:00.0", {"0000:6e:00.0", "0000:6f:00.0", "0000:70:00.0", "0000:71:00.0"}, 0},
      {"0000:8b:00.0", "0000:8c:00.0", {"0000:87:00.0", "0000:88:00.0", "0000:89:00.0", "0000:8a:00.0"}, 1},
      {"0000:a4:00.0", "0000:a5:00.0", {"0000:a0:00.0", "0000:a1:00.0", "0000:a2:00.0", "0000:a3:00.0"}, 1}};
  for (auto& g : groups) {
    EXPECT_EQ(t.path(gpuByBus(t, g.g0), gpuByBus(t, g.g1)).type, PathType::PIX);
    for (auto& e : g.efa) {
      EXPECT_EQ(t.path(gpuByBus(t, g.g0), nicByBus(t, e)).type, PathType::PIX) << g.g0 << " " << e;
      EXPECT_TRUE(t.nodes[nicByBus(t, e)].rdma);
    }
    // Four rails for two GPUs: two each, none shared.
    EXPECT_EQ(nicsOf(t, g.g0), (std::vector<std::string>{g.efa[0], g.efa[2]}));
    EXPECT_EQ(nicsOf(t, g.g1), (std::vector<std::string>{g.efa[1], g.efa[3]}));
    EXPECT_EQ(t.numaOf(gpuByBus(t, g.g0)), g.numa);
  }
  EXPECT_EQ(t.path(gpuByBus(t, "0000:59:00.0"), gpuByBus(t, "0000:72:00.0")).type, PathType::NODE);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:59:00.0"), gpuByBus(t, "0000:8b:00.0")).type, PathType::SYS);
  EXPECT_EQ(t.cpusOfNuma(0), "0-47,96-143");
  for (auto& w : t.warnings()) EXPECT_EQ(w.find("GPUDirect"), std::string::npos) << w;
  auto b = t.bindings(8);
  EXPECT_EQ(b[1].gpu, 1);
  EXPECT_EQ(b[1].cpus, "0-47,96-143");
  EXPECT_EQ(b[7].numa, 1);
}

TEST(HwlocFixtures, AwsP6B200TwoEfaPerSwitchAndInfinibandOnTheThird) {
  Topology t = loadHwlocXml(fixture("hwloc-aws-p6-b200.xml"));
  ASSERT_EQ(t.gpus().size(), 8u);
  int ib = 0;
  for (int id : t.nics()) ib += (t.nodes[id].pciClass >> 8) == 0x0207;
  EXPECT_EQ(ib, 2);
  std::vector<std::tuple<std::string, std::string, std::string, std::string>> groups = {
      {"0000:51:00.0", "0000:52:00.0", "0000:4f:00.0", "0000:50:00.0"},
      {"0000:62:00.0", "0000:63:00.0", "0000:60:00.0", "0000:61:00.0"},
      {"0000:75:00.0", "0000:76:00.0", "0000:71:00.0", "0000:72:00.0"},
      {"0000:86:00.0", "0000:87:00.0", "0000:84:00.0", "0000:85:00.0"}};
  for (auto& [g0, g1, e0, e1] : groups) {
    EXPECT_EQ(t.path(gpuByBus(t, g0), nicByBus(t, e0)).type, PathType::PIX);
    EXPECT_EQ(nicsOf(t, g0).at(0), e0) << g0;
    EXPECT_EQ(nicsOf(t, g1).at(0), e1) << g1;
  }
  // The ConnectX-7 ports share the third switch (PIX to its GPUs) but sit on a
  // slower link than the EFA devices, so the faster EFA paths win the tie.
  EXPECT_EQ(t.path(gpuByBus(t, "0000:75:00.0"), nicByBus(t, "0000:73:00.0")).type, PathType::PIX);
  EXPECT_LT(t.path(gpuByBus(t, "0000:75:00.0"), nicByBus(t, "0000:73:00.0")).bandwidthGBs,
            t.path(gpuByBus(t, "0000:75:00.0"), nicByBus(t, "0000:71:00.0")).bandwidthGBs);
  EXPECT_EQ(nicsOf(t, "0000:75:00.0"), std::vector<std::string>{"0000:71:00.0"});
}

TEST(NcclFixtures, AwsP4dVirtualSwitchesHoldTwoGpusAndOneEfa) {
  Topology t = loadNcclXml(fixture("nccl-aws-p4d.xml"));
  ASSERT_EQ(t.gpus().size(), 8u);
  ASSERT_EQ(t.nics().size(), 4u);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:10:1b.0")).type, PathType::PIX);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:20:1b.0")).type, PathType::PHB);
  EXPECT_EQ(t.path(gpuByBus(t, "0000:10:1c.0"), nicByBus(t, "0000:90:1b.0")).type, PathType::SYS);
  EXPECT_EQ(nicsOf(t, "0000:10:1c.0"), std::vector<std::string>{"0000:10:1b.0"});
  EXPECT_EQ(nicsOf(t, "0000:10:1d.0"), std::vector<std::string>{"0000:10:1b.0"});  // shared by the pair
  EXPECT_EQ(nicsOf(t, "0000:a0:1d.0"), std::vector<std::string>{"0000:a0:1b.0"});
  EXPECT_EQ(t.numaOf(gpuByBus(t, "0000:90:1c.0")), 1);
  EXPECT_EQ(t.cpusOfNuma(0), "0-23,48-71");
}

TEST(NcclFixtures, AwsP5WithoutClassesHasNoGpusOrNicsButLoads) {
  Topology t = loadNcclXml(fixture("nccl-aws-p5.xml"));
  EXPECT_EQ(t.gpus().size(), 0u);
  EXPECT_EQ(t.nics().size(), 0u);
  int switches = 0, endpoints = 0;
  for (auto& n : t.nodes) {
    switches += n.type == NodeType::PciSwitch;
    endpoints += n.type == NodeType::PciDevice;
  }
  EXPECT_EQ(switches, 8);
  EXPECT_EQ(endpoints, 32);
  EXPECT_EQ(t.numaNodes().size(), 2u);
}

TEST(NcclFixtures, AwsP5Pr1226OneGpuAndFourEfaPerSwitch) {
  Topology t = loadNcclXml(fixture("nccl-aws-p5-pr1226.xml"));
  ASSERT_EQ(t.gpus().size(), 8u);
  ASSERT_EQ(t.nics().size(), 32u);
  EXPECT_EQ(nicsOf(t, "0000:4f:00.0"),
            (std::vector<std::string>{"0000:50:00.0", "0000:51:00.0", "0000:52:00.0", "0000:53:00.0"}));
  EXPECT_EQ(nicsOf(t, "0000:c0:00.0"),
            (std::vector<std::string>{"0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0", "0000:c4:00.0"}));
  EXPECT_EQ(t.nic(t.nodes[nicByBus(t, "0000:50:00.0")].nicIndex).name, "rdmap79s0");
  EXPECT_EQ(t.nodes[nicByBus(t, "0000:50:00.0")].speedGbps, 100);
  for (int g : t.gpus()) EXPECT_EQ(t.numaOf(g), 0);  // the file puts everything under one CPU
  EXPECT_EQ(t.cpusOfNuma(0), "0-47");
  EXPECT_EQ(t.path(gpuByBus(t, "0000:4f:00.0"), gpuByBus(t, "0000:60:00.0")).type, PathType::PHB);
}

TEST(NcclFixtures, AzureNdv4TwoGpusTwoNicsPerSwitch) {
  Topology t = loadNcclXml(fixture("nccl-azure-ndv4.xml"));
  std::vector<std::tuple<std::string, std::string, std::string, std::string, int>> rows = {
      {"0003:00:00.0", "0004:00:00.0", "0103:00:00.0", "0104:00:00.0", 0},
      {"0001:00:00.0", "0002:00:00.0", "0101:00:00.0", "0102:00:00.0", 1},
      {"000d:00:00.0", "000e:00:00.0", "0107:00:00.0", "0108:00:00.0", 2},
      {"000b:00:00.0", "000c:00:00.0", "0105:00:00.0", "0106:00:00.0", 3}};
  for (auto& [g0, g1, n0, n1, numa] : rows) {
    EXPECT_EQ(nicsOf(t, g0), std::vector<std::string>{n0});
    EXPECT_EQ(nicsOf(t, g1), std::vector<std::string>{n1});
    EXPECT_EQ(t.numaOf(gpuByBus(t, g0)), numa);
    EXPECT_TRUE(t.nodes[nicByBus(t, n0)].rdma) << "class 0x0207 is InfiniBand";
  }
  EXPECT_TRUE(t.warnings().empty());
}

TEST(NcclFixtures, AzureNdv4Of2023HasSwappedPairsAndOverlappingAffinity) {
  Topology t = loadNcclXml(fixture("nccl-azure-ndv4-heredoc-2023.xml"));
  EXPECT_EQ(t.numaOf(gpuByBus(t, "0001:00:00.0")), 0);  // NUMA 1 in the corrected file
  EXPECT_EQ(nicsOf(t, "0001:00:00.0"), std::vector<std::string>{"0101:00:00.0"});
  int overlap = 0;
  for (auto& w : t.warnings()) overlap += w.find("have the same CPU set") != std::string::npos;
  EXPECT_EQ(overlap, 6) << "4 NUMA nodes, all with one mask: 6 pairs";
}

TEST(NcclFixtures, AzureNdv5OneGpuOneNicPerSwitch) {
  Topology t = loadNcclXml(fixture("nccl-azure-ndv5.xml"));
  std::vector<std::pair<std::string, std::string>> pairs = {
      {"0001:00:00.0", "0101:00:00.0"}, {"0002:00:00.0", "0102:00:00.0"}, {"0003:00:00.0", "0103:00:00.0"},
      {"0008:00:00.0", "0104:00:00.0"}, {"0009:00:00.0", "0105:00:00.0"}, {"000a:00:00.0", "0106:00:00.0"},
      {"000b:00:00.0", "0107:00:00.0"}, {"000c:00:00.0", "0108:00:00.0"}};
  for (auto& [g, n] : pairs) {
    EXPECT_EQ(nicsOf(t, g), std::vector<std::string>{n});
    EXPECT_EQ(t.path(gpuByBus(t, g), nicByBus(t, n)).type, PathType::PIX);
  }
  EXPECT_EQ(t.numaOf(gpuByBus(t, "0009:00:00.0")), 1);
  EXPECT_EQ(t.path(gpuByBus(t, "0001:00:00.0"), gpuByBus(t, "0002:00:00.0")).type, PathType::PHB);
}

TEST(NcclXml, WritingAndReadingBackKeepsDevicesPathsAndAssignment) {
  for (auto f : {"hwloc-aws-p5en.xml", "nccl-azure-ndv4.xml", "nccl-aws-p5-pr1226.xml"}) {
    Topology a = loadFile(fixture(f));
    Topology b = loadNcclXml(writeTemp(toNcclXml(a)));
    ASSERT_EQ(busIds(a, a.gpus()), busIds(b, b.gpus())) << f;
    ASSERT_EQ(busIds(a, a.nics()), busIds(b, b.nics())) << f;
    EXPECT_EQ(a.gpuNics(), b.gpuNics()) << f;
    // NCCL's format has no host-bridge level: NODE (between host bridges of a
    // NUMA node) reads back as PHB, which is how NCCL classifies such paths.
    for (size_t i = 0; i < a.gpus().size(); ++i)
      for (size_t j = 0; j < a.nics().size(); ++j) {
        PathType want = a.path(a.gpus()[i], a.nics()[j]).type;
        if (want == PathType::NODE) want = PathType::PHB;
        EXPECT_EQ(b.path(b.gpus()[i], b.nics()[j]).type, want) << f;
      }
    for (int id : a.numaNodes()) EXPECT_EQ(a.nodes[id].cpus, b.cpusOfNuma(a.nodes[id].numa)) << f;
  }
}

TEST(NcclXml, NvlinkPeersBecomeNvlPaths) {
  Topology t = loadNcclXml(writeTemp(R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><nvlink target="0000:02:00.0" count="12"/></gpu></pci>
    <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1"><nvlink target="0000:01:00.0" count="12"/></gpu></pci>
  </cpu>
</system>)"));
  Path p = t.path(t.gpus()[0], t.gpus()[1]);
  EXPECT_EQ(p.type, PathType::NVL);
  EXPECT_GT(p.bandwidthGBs, 100);
}

TEST(OddLayouts, GpuWithNoNicNearbyIsWarnedAbout) {
  Topology t = loadNcclXml(writeTemp(R"(<system version="1">
  <cpu numaid="0" affinity="000000ff">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:12:00.0" class="0x020700" link_speed="16.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="0000ff00">
    <pci busid="0000:80:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:81:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>)"));
  EXPECT_EQ(nicsOf(t, "0000:81:00.0"), std::vector<std::string>{"0000:12:00.0"});
  EXPECT_EQ(t.path(gpuByBus(t, "0000:81:00.0"), nicByBus(t, "0000:12:00.0")).type, PathType::SYS);
  auto w = t.warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("GPU1 (0000:81:00.0) has no NIC under its PCIe switch"), std::string::npos) << w[0];
  EXPECT_EQ(t.bindings(2)[1].cpus, "8-15");
}

TEST(OddLayouts, TwoNicsBehindOneSwitchGiveOneGpuTwoRails) {
  Topology t = loadNcclXml(writeTemp(R"(<system version="1">
  <cpu numaid="0" affinity="000000ff">
    <pci busid="0000:10:00.0" class="0x060400">
      <pci busid="0000:11:00.0" class="0x030200"/>
      <pci busid="0000:12:00.0" class="0x020700"><nic><net name="mlx5_0" speed="200000" port="1"/></nic></pci>
      <pci busid="0000:13:00.0" class="0x020700"><nic><net name="mlx5_1" speed="100000" port="1"/></nic></pci>
    </pci>
  </cpu>
</system>)"));
  EXPECT_EQ(nicsOf(t, "0000:11:00.0"), (std::vector<std::string>{"0000:12:00.0", "0000:13:00.0"}));
  bool speedWarning = false;
  for (auto& w : t.warnings()) speedWarning |= w.find("NICs of different speeds") != std::string::npos;
  EXPECT_TRUE(speedWarning);
}

TEST(OddLayouts, SingleSocketWorkstationWithoutSwitches) {
  Topology t = loadNcclXml(writeTemp(R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff">
    <pci busid="0000:01:00.0" class="0x030000" vendor="0x10de" link_speed="8.0 GT/s PCIe" link_width="16"/>
    <pci busid="0000:02:00.0" class="0x030000" vendor="0x10de" link_speed="8.0 GT/s PCIe" link_width="8"/>
    <pci busid="0000:05:00.0" class="0x020000" link_speed="5.0 GT/s PCIe" link_width="1"><nic><net name="enp5s0" speed="1000"/></nic></pci>
  </cpu>
</system>)"));
  EXPECT_EQ(t.path(t.gpus()[0], t.gpus()[1]).type, PathType::PHB);
  Path p = t.path(t.gpus()[0], t.nics()[0]);
  EXPECT_EQ(p.type, PathType::PHB);
  EXPECT_NEAR(p.bandwidthGBs, 0.5, 1e-9) << "slowest link: PCIe gen2 x1";
  EXPECT_FALSE(t.nodes[t.nics()[0]].rdma);
  auto b = t.bindings(2);
  EXPECT_EQ(b[0].cpus, "0-15");
  EXPECT_EQ(b[1].nics, std::vector<int>{0});
  bool noRdma = false;
  for (auto& w : t.warnings()) noRdma |= w.find("no RDMA NIC") != std::string::npos;
  EXPECT_TRUE(noRdma);
}

TEST(OddLayouts, CpuOnlyHostSpreadsRanksOverNumaNodesAndTheirNics) {
  Topology t = loadNcclXml(writeTemp(R"(<system version="1">
  <cpu numaid="0" affinity="0000000f"><pci busid="0000:01:00.0" class="0x020000"><nic><net name="eth0" speed="25000"/></nic></pci></cpu>
  <cpu numaid="1" affinity="000000f0"><pci busid="0000:81:00.0" class="0x020000"><nic><net name="eth1" speed="25000"/></nic></pci></cpu>
</system>)"));
  auto b = t.bindings(4);
  EXPECT_EQ(b[0].numa, 0);
  EXPECT_EQ(b[1].numa, 1);
  EXPECT_EQ(b[1].cpus, "4-7");
  EXPECT_EQ(t.nic(b[0].nics.at(0)).name, "eth0");
  EXPECT_EQ(t.nic(b[1].nics.at(0)).name, "eth1");
  EXPECT_EQ(t.nic(b[3].nics.at(0)).name, "eth1");
}

TEST(InvalidFiles, ErrorsNameTheLineAndWhatWasExpected) {
  std::string e = errorOf("<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\"\n</system>\n");
  EXPECT_NE(e.find(":4: not well-formed XML"), std::string::npos) << e;
  e = errorOf("<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci class=\"0x030200\"/>\n  </cpu>\n</system>\n");
  EXPECT_NE(e.find(":3: <pci> needs a busid attribute"), std::string::npos) << e;
  e = errorOf("<system>\n<cpu numaid=\"0\">\n\n<pci busid=\"zz:1\"/></cpu></system>");
  EXPECT_NE(e.find(":4: busid=\"zz:1\" is not a PCI address (expected dddd:bb:dd.f)"), std::string::npos) << e;
  e = errorOf("<system>\n<cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"GPU\"/></cpu></system>");
  EXPECT_NE(e.find(":2: class=\"GPU\" is not a hexadecimal number"), std::string::npos) << e;
  e = errorOf("<system>\n<cpu affinity=\"ff\"/></system>");
  EXPECT_NE(e.find(":2: <cpu> needs a numaid attribute"), std::string::npos) << e;
  e = errorOf("<gpus><gpu/></gpus>");
  EXPECT_NE(e.find("accepted: <system> (NCCL topology file) or <topology> (hwloc XML)"), std::string::npos) << e;
  EXPECT_THROW(loadFile("/nonexistent/topo.xml"), InvalidArgument);
}

// hwloc's own XML parser (used where its libxml2 plugin is not installed)
// dereferenced a NULL nodeset on an <object> with an attribute it does not
// know (such as complete_cpusetX beside the real one): a crash of the process,
// found by fuzz_topology_xml. Such an attribute, a name that is not ASCII, and
// a NUMA node without a numeric os_index are errors naming the line now.
TEST(InvalidFiles, HwlocNamesAndIndexesItCannotParseAreErrorsNotCrashes) {
  setenv("HWLOC_LIBXML_IMPORT", "0", 1);
  const std::string sets =
      " cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"";
  auto file = [&](const std::string& numaIndex) {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"2.0\">\n"
           "  <object type=\"Machine\" os_index=\"0\"" + sets + " gp_index=\"1\">\n"
           "    <object type=\"Package\" os_index=\"0\"" + sets + " gp_index=\"2\">\n"
           "      <object type=\"NUMANode\"" + numaIndex + sets + " gp_index=\"3\" local_memory=\"1073741824\"/>\n"
           "      <object type=\"Core\" os_index=\"0\"" + sets + " gp_index=\"4\">\n"
           "        <object type=\"PU\" os_index=\"0\"" + sets + " gp_index=\"5\"/>\n"
           "      </object>\n    </object>\n  </object>\n</topology>\n";
  };
  std::string e = errorOf(file(""));
  EXPECT_NE(e.find(":5: <object type=\"NUMANode\"> lacks a valid os_index"), std::string::npos) << e;
  e = errorOf(file(" os_index=\"0\" complete_c\xf0uset=\"0x00000001\""));
  EXPECT_NE(e.find(":5: <object> has an attribute whose name is not ASCII"), std::string::npos) << e;
  e = errorOf(file(" os_index=\"0\" complete_cpusetX=\"0x1\""));
  EXPECT_NE(e.find(":5: <object type=\"NUMANode\"> has an attribute 'complete_cpusetX' that hwloc does not write"),
            std::string::npos) << e;
  e = errorOf(file(" os_index=\"x1\""));
  EXPECT_NE(e.find(":5: <object type=\"NUMANode\"> lacks a valid os_index"), std::string::npos) << e;
  Topology t = loadFile(writeTemp(file(" os_index=\"0\"")));  // the same with its os_index loads
  EXPECT_EQ(t.numaNodes().size(), 1u);
  unsetenv("HWLOC_LIBXML_IMPORT");
}

TEST(Probe, ThisHostShowsWhatItHas) {
  Topology t = probe();
  EXPECT_FALSE(t.numaNodes().empty()) << "hwloc always reports at least one NUMA node";
  EXPECT_FALSE(t.cpusOfNuma(t.nodes[t.numaNodes()[0]].numa).empty());
  auto b = t.bindings(2);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_NE(toJson(t).find("\"tree\""), std::string::npos);
}

// ACCL_IB_HCA / NCCL_IB_HCA syntax.
TEST(NicSelection, HcaSpecSyntax) {
  EXPECT_TRUE(matchHcaSpec("mlx5", "mlx5_0"));
  EXPECT_TRUE(matchHcaSpec("mlx5_0:1,mlx5_1:1", "mlx5_1"));
  EXPECT_FALSE(matchHcaSpec("mlx5_0:1,mlx5_1:1", "mlx5_2"));
  EXPECT_FALSE(matchHcaSpec("=mlx5_1", "mlx5_10"));
  EXPECT_TRUE(matchHcaSpec("=mlx5_1", "mlx5_1"));
  EXPECT_TRUE(matchHcaSpec("mlx5_1", "mlx5_10")) << "without = a name is a prefix";
  EXPECT_FALSE(matchHcaSpec("^mlx5_2,mlx5_3", "mlx5_3"));
  EXPECT_TRUE(matchHcaSpec("^mlx5_2,mlx5_3", "mlx5_0"));
  EXPECT_FALSE(matchHcaSpec("^=mlx5_1", "mlx5_1"));
  EXPECT_TRUE(matchHcaSpec("^=mlx5_1", "mlx5_10"));
  // The port, for the verbs transport.
  EXPECT_EQ(hcaSpecPort("mlx5_0:1,mlx5_1:2", "mlx5_1"), 2);
  EXPECT_EQ(hcaSpecPort("mlx5_0:1,mlx5_1", "mlx5_1"), 0);
  EXPECT_EQ(hcaSpecPort("=mlx5_1:2", "mlx5_10"), 0);
  EXPECT_EQ(hcaSpecPort("^mlx5_1:2", "mlx5_0"), 0);
  EXPECT_EQ(hcaSpecPort("", "mlx5_0"), 0);
}

TEST(NicSelection, IbHcaRestrictsTheAssignment) {
  Topology t = loadHwlocXml(fixture("hwloc-aws-p4d.xml"));
  // Unrestricted: GPUs 0,1 -> rdmap16s27, 2,3 -> rdmap32s27, ... (one EFA per switch pair).
  EXPECT_EQ(t.nic(t.bindings(8)[0].nics[0]).name, "rdmap16s27");
  for (auto& b : t.bindings(8, "=rdmap144s27")) {
    ASSERT_EQ(b.nics.size(), 1u);
    EXPECT_EQ(t.nic(b.nics[0]).name, "rdmap144s27");
  }
  for (auto& b : t.bindings(8, "^rdmap16s27,rdmap32s27"))
    for (int i : b.nics) EXPECT_TRUE(t.nic(i).name == "rdmap144s27" || t.nic(i).name == "rdmap160s27") << t.nic(i).name;
  std::string e;
  try {
    t.bindings(8, "mlx5");
  } catch (const InvalidArgument& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("ACCL_IB_HCA='mlx5' matches no RDMA device; RDMA devices of this host (hwloc:"), std::string::npos) << e;
  EXPECT_NE(e.find("rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27"), std::string::npos) << e;
}

TEST(NicSelection, CpuHostRanksGetTheNicOfTheirNumaNode) {
  // mlx5_0 (netdev rail1) on NUMA 0, mlx5_1 (netdev rail0) on NUMA 1.
  Topology t = loadHwlocXml(fixture("hand-two-rails.xml"));
  auto b = t.bindings(4);
  EXPECT_EQ(t.nic(b[0].nics[0]).name, "mlx5_0");
  EXPECT_EQ(t.nic(b[0].nics[0]).netdevs, std::vector<std::string>{"rail1"});
  EXPECT_EQ(b[0].numa, 0);
  EXPECT_EQ(t.nic(b[1].nics[0]).name, "mlx5_1");
  EXPECT_EQ(b[1].cpus, "1");
  EXPECT_EQ(t.nic(b[2].nics[0]).name, "mlx5_0");
  EXPECT_EQ(t.nic(b[3].nics[0]).name, "mlx5_1");
  for (auto& x : t.bindings(2, "mlx5_1")) EXPECT_EQ(x.nics, std::vector<int>{1});
}

TEST(NicSelection, PciNicsBeforeVirtualInterfaces) {
  // No NUMA information: every NIC is equally near. A container bridge must
  // not become a rank's rail when a PCI NIC with a netdev exists.
  Topology t;
  Node m;
  m.type = NodeType::Machine;
  t.addNode(m, -1);
  Node hb;
  hb.type = NodeType::HostBridge;
  hb.busId = "0000:00:00.0";
  int h = t.addNode(hb, 0);
  Node eth;
  eth.type = NodeType::Nic;
  eth.busId = "0000:01:00.0";
  eth.name = "eth0";
  eth.netdevs = {"eth0"};
  t.addNode(eth, h);
  Node gone = eth;  // a PCI NIC whose netdev is in another network namespace
  gone.busId = "0000:02:00.0";
  gone.name = "0000:02:00.0";
  gone.netdevs.clear();
  t.addNode(gone, h);
  Node br;
  br.type = NodeType::Nic;
  br.name = "docker0";
  br.netdevs = {"docker0"};
  t.addNode(br, 0);
  t.finalize();
  for (auto& b : t.bindings(3)) {
    ASSERT_EQ(b.nics.size(), 1u) << "rank " << b.localRank;
    EXPECT_EQ(t.nic(b.nics[0]).name, "eth0") << "rank " << b.localRank;
  }
  // With only virtual interfaces (a namespace of veths) they are the rails.
  Topology v;
  v.addNode(m, -1);
  for (const char* name : {"veth1", "veth0"}) {
    Node n;
    n.type = NodeType::Nic;
    n.name = name;
    n.netdevs = {name};
    v.addNode(n, 0);
  }
  v.finalize();
  auto b = v.bindings(2);
  EXPECT_NE(b[0].nics[0], b[1].nics[0]) << "two ranks, two interfaces: one each";
}
