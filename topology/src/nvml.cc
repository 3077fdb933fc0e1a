// NVLink peers through NVML, loaded at run time: the same build runs on hosts
// without the NVIDIA driver (nothing is added there).
#include <dlfcn.h>

#include <cstdio>
#include <map>

#include "accl/logging.h"
#include "accl/topology.h"

namespace accl {
namespace topo {

namespace {
struct NvmlPciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
using Init = int (*)();
using Shutdown = int (*)();
using ByBus = int (*)(const char*, void**);
using LinkState = int (*)(void*, unsigned, int*);
using RemotePci = int (*)(void*, unsigned, NvmlPciInfo*);
constexpr unsigned kMaxLinks = 18;
}  // namespace

void addNvlinksFromNvml(Topology& t) {
  auto gs = t.gpus();
  if (gs.empty()) return;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    ACCL_INFO("INIT", "topology: NVML not available (" << dlerror() << "); NVLink peers unknown");
    return;
  }
  auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Shutdown>(dlsym(lib, "nvmlShutdown"));
  auto byBus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto state = reinterpret_cast<LinkState>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
  auto remote = reinterpret_cast<RemotePci>(dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  if (!init || !shutdown || !byBus || !state || !remote || init() != 0) {
    ACCL_WARN("INIT", "topology: NVML found but unusable; NVLink peers unknown");
    dlclose(lib);
    return;
  }
  std::map<std::string, int> gpuByBus;
  for (int id : gs) gpuByBus[t.nodes[static_cast<size_t>(id)].busId] = id;
  std::map<int, int> switchLinks;  // GPU node -> links to NVSwitches
  for (int id : gs) {
    Node& g = t.nodes[static_cast<size_t>(id)];
    void* dev = nullptr;
    if (byBus(g.busId.c_str(), &dev) != 0) continue;
    std::map<std::string, int> peers;
    for (unsigned l = 0; l < kMaxLinks; ++l) {
      int active = 0;
      NvmlPciInfo pci{};
      if (state(dev, l, &active) != 0 || !active || remote(dev, l, &pci) != 0) continue;
      char bus[32];
      std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus, pci.device);
      if (gpuByBus.count(bus)) peers[bus]++;
      else switchLinks[id]++;  // the far end is an NVSwitch
    }
    for (auto& [bus, count] : peers) g.nvlinks.emplace_back(bus, count);
  }
  // GPUs on NVSwitches reach each other over NVLink.
  for (auto& [a, la] : switchLinks)
    for (auto& [b, lb] : switchLinks)
      if (a != b) t.nodes[static_cast<size_t>(a)].nvlinks.emplace_back(t.nodes[static_cast<size_t>(b)].busId, std::min(la, lb));
  shutdown();
  dlclose(lib);
}

}  // namespace topo
}  // namespace accl
