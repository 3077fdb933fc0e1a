#include "transport/net/ibverbs/port.h"

#include <arpa/inet.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "accl/errors.h"
#include "accl/internal/strings.h"
#include "accl/topology.h"
#include "transport/net/ibverbs/ibv_api.h"

namespace accl {
namespace core {
namespace ib {

namespace {

std::string gidText(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, g.raw, buf, sizeof(buf));
  return buf;
}

bool gidZero(const ibv_gid& g) {
  for (auto b : g.raw)
    if (b) return false;
  return true;
}

int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

const char* stateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

// ibv_query_port is an inline in verbs.h that prefers the provider's extended
// op and falls back to the exported function; the same here, through the
// dlopen'd table.
int queryPort(const Api& a, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  return a.queryPort(ctx, port, attr);
}

}  // namespace

std::string memlockText() {
  rlimit rl{};
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(rl.rlim_cur / 1024) + " KiB";
}

ibv_context* openPort(const Settings& s, PortInfo* out) {
  std::string why;
  const Api* a = api(&why);
  if (!a) throw NotSupported(why);
  int n = 0;
  errno = 0;
  ibv_device** list = a->getDeviceList(&n);
  if (!list) {
    int e = errno;
    throw NotSupported(errnoMessage("ibv_get_device_list failed", e) +
                       (e == ENOSYS ? " (this kernel has no RDMA support)" : ""));
  }
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(a->getDeviceName(list[i]));
  if (names.empty()) {
    a->freeDeviceList(list);
    throw NotSupported("no RDMA device (ibv_get_device_list found none)");
  }
  // The topology's device first, then the others in the kernel's order.
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (names[i] == s.device) order.push_back(i);
  for (int i = 0; i < n; ++i)
    if (names[i] != s.device) order.push_back(i);
  std::string reasons;
  auto note = [&](const std::string& r) { reasons += (reasons.empty() ? "" : "; ") + r; };
  for (int i : order) {
    const std::string& name = names[i];
    if (!s.hcaSpec.empty() && !topo::matchHcaSpec(s.hcaSpec, name)) {
      note(name + ": excluded by ACCL_IB_HCA=" + s.hcaSpec);
      continue;
    }
    ibv_context* ctx = a->openDevice(list[i]);
    if (!ctx) {
      note(name + ": " + errnoMessage("ibv_open_device", errno) + " (permissions of /dev/infiniband?)");
      continue;
    }
    ibv_device_attr da{};
    if (a->queryDevice(ctx, &da) != 0) {
      note(name + ": ibv_query_device failed");
      a->closeDevice(ctx);
      continue;
    }
    int want = topo::hcaSpecPort(s.hcaSpec, name);
    for (int p = 1; p <= da.phys_port_cnt; ++p) {
      if (want && p != want) continue;
      ibv_port_attr pa{};
      if (queryPort(*a, ctx, static_cast<uint8_t>(p), &pa) != 0) {
        note(name + " port " + std::to_string(p) + ": ibv_query_port failed");
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        note(name + " port " + std::to_string(p) + ": state " + stateName(pa.state));
        continue;
      }
      PortInfo info;
      info.device = name;
      info.port = p;
      info.lid = pa.lid;
      info.activeMtu = mtuBytes(pa.active_mtu);
      info.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      std::string base = "/sys/class/infiniband/" + name + "/ports/" + std::to_string(p) + "/gid_attrs/types/";
      std::vector<std::pair<std::string, std::string>> table;
      std::vector<ibv_gid> gids;
      for (int g = 0; g < pa.gid_tbl_len && g < 256; ++g) {
        ibv_gid gid{};
        if (a->queryGid(ctx, static_cast<uint8_t>(p), g, &gid) != 0 || gidZero(gid)) {
          table.push_back({"", ""});
          gids.push_back(gid);
          continue;
        }
        table.push_back({gidText(gid), internal::readFirstLine(base + std::to_string(g))});
        gids.push_back(gid);
      }
      int idx = s.gidIndex;
      if (idx >= 0) {
        if (idx >= static_cast<int>(table.size()) || table[idx].first.empty()) {
          note(name + " port " + std::to_string(p) + ": ACCL_IB_GID_INDEX=" + std::to_string(idx) +
               " is not a valid GID entry (" + std::to_string(table.size()) + " entries)");
          continue;
        }
      } else if (info.ethernet) {
        idx = pickGidIndex(table);
        if (idx < 0) {
          note(name + " port " + std::to_string(p) +
               ": no IPv4-mapped GID (its netdev has no IPv4 address?); set ACCL_IB_GID_INDEX");
          continue;
        }
      }
      info.gidIndex = idx;
      if (idx >= 0) {
        info.gidText = table[idx].first;
        info.gidType = table[idx].second;
      }
      a->freeDeviceList(list);
      *out = info;
      return ctx;
    }
    a->closeDevice(ctx);
    if (want && want > da.phys_port_cnt)
      note(name + ": ACCL_IB_HCA names port " + std::to_string(want) + ", the device has " +
           std::to_string(da.phys_port_cnt));
  }
  a->freeDeviceList(list);
  throw NotSupported("no usable RDMA port: " + reasons);
}

std::string PortInfo::describe() const {
  std::ostringstream os;
  os << device << " port " << port;
  if (ethernet) os << " (RoCE";
  else os << " (InfiniBand, LID " << lid;
  if (gidIndex >= 0) os << ", GID[" << gidIndex << "] " << gidText << (gidType.empty() ? "" : " " + gidType);
  os << ", MTU " << activeMtu << ")";
  return os.str();
}

bool noRdmaHere(const std::string& why) {
  return why.rfind("libibverbs.so.1 cannot be loaded", 0) == 0 || why.rfind("ibv_get_device_list failed", 0) == 0 ||
         why.rfind("no RDMA device", 0) == 0;
}

int pickGidIndex(const std::vector<std::pair<std::string, std::string>>& table) {
  int v1 = -1;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].first.rfind("::ffff:", 0) != 0) continue;
    if (table[i].second == "RoCE v2") return static_cast<int>(i);
    if (v1 < 0) v1 = static_cast<int>(i);
  }
  return v1;
}

PortInfo choosePort(const Settings& s) {
  PortInfo info;
  ibv_context* ctx = openPort(s, &info);
  api(nullptr)->closeDevice(ctx);
  return info;
}

}  // namespace ib
}  // namespace core
}  // namespace accl
