#include "nic_choice.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <sstream>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/internal/process_info.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"

namespace accl {

std::string defaultHostId() {
  std::string host = internal::hostName();
  std::string boot = internal::readFirstLine("/proc/sys/kernel/random/boot_id");
  struct stat st{};
  std::string ns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "?";
  return host + "/" + boot + "/netns:" + ns;
}

std::shared_ptr<const topo::Topology> hostTopology(bool dumpHere) {
  static std::mutex mu;
  static std::shared_ptr<const topo::Topology> cached;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (tried) return cached;
  const Config& cfg = Config::get();
  try {
    cached = std::make_shared<const topo::Topology>(topo::loadFromConfig(dumpHere));
  } catch (const Error& e) {
    if (!cfg.topoFile.empty() || !cfg.ibHca.empty()) throw;
    ACCL_WARN("INIT", "topology probe failed, ranks use the first up interface: " << e.what());
  }
  tried = true;
  return cached;
}

NicChoice chooseNic(const topo::Topology* t, int localRank, int localSize) {
  const Config& cfg = Config::get();
  NicChoice c;
  std::ostringstream os;
  os << "local rank " << localRank << "/" << localSize << ": ";
  const topo::Node* nic = nullptr;
  std::string netdev;
  if (t) {
    auto b = t->bindings(localSize, cfg.ibHca)[static_cast<size_t>(localRank)];
    auto up = internal::listInterfaces();
    auto isUp = [&](const std::string& d) {
      return std::any_of(up.begin(), up.end(), [&](const internal::Interface& i) { return i.name == d && !i.loopback; });
    };
    // The first assigned NIC with a netdev up here; the primary is named even without one.
    for (int idx : b.nics) {
      const topo::Node& n = t->nic(idx);
      if (!nic) nic = &n;
      auto d = std::find_if(n.netdevs.begin(), n.netdevs.end(), isUp);
      if (d == n.netdevs.end()) continue;
      if (&n != nic) os << "NIC" << nic->nicIndex << " " << nic->name << " has no usable netdev here, ";
      nic = &n;
      netdev = *d;
      break;
    }
    if (nic && nic->rdma) c.rdmaDevice = nic->name;
    if (nic) {
      os << "NIC" << nic->nicIndex << " " << nic->name << (nic->rdma ? " (RDMA)" : "");
      os << " assigned by the topology (" << t->source
         << (cfg.ibHca.empty() ? "" : ", ACCL_IB_HCA=" + cfg.ibHca) << ")";
      if (b.gpu >= 0) os << " for GPU" << b.gpu;
      if (b.numa >= 0) os << ", NUMA " << b.numa << " CPUs " << b.cpus;
    } else {
      os << "the topology (" << t->source << ") has no NIC";
    }
  } else {
    os << "no topology";
  }
  if (!cfg.socketIfname.empty()) {
    c.ifSpec = cfg.socketIfname;
    os << "; tcp interface from ACCL_SOCKET_IFNAME=" << cfg.socketIfname;
  } else if (!netdev.empty()) {
    c.ifSpec = "=" + netdev;
    os << "; tcp over its netdev " << netdev;
  } else {
    os << "; " << (nic ? "its netdev is not up with an address in this network namespace, " : "")
       << "tcp over the first up interface";
  }
  c.text = os.str();
  return c;
}

}  // namespace accl
