// Choosing the RDMA device, port and GID a rank uses, before any queue pair
// exists: the topology's device first, ACCL_IB_HCA and ACCL_IB_GID_INDEX
// applied, ACTIVE ports only. Every refusal says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct ibv_context;

namespace accl {
namespace core {
namespace ib {

// The device/port/GID a rank uses; chosen before any QP exists.
struct PortInfo {
  std::string device;
  int port = 0;
  int gidIndex = -1;      // -1: no GRH (InfiniBand LID routing)
  std::string gidText;    // "::ffff:192.0.2.1"
  std::string gidType;    // "RoCE v2", "IB/RoCE v1", "" (IB)
  bool ethernet = false;  // RoCE (link layer Ethernet) vs InfiniBand
  uint16_t lid = 0;
  int activeMtu = 0;      // bytes
  std::string describe() const;
};

// Settings of ACCL_IB_* plus what the topology chose.
struct Settings {
  std::string device;    // the topology's RDMA device for this rank ("" = first usable)
  std::string hcaSpec;   // ACCL_IB_HCA
  int gidIndex = -1;     // ACCL_IB_GID_INDEX (-1: the IPv4-mapped RoCE v2 GID, else v1, else 0)
  int qpsPerPeer = 1;    // ACCL_IB_QPS_PER_PEER
  size_t chunkBytes = 128u << 10;  // payload bytes per write (one mailbox slot)
  int slots = 16;                   // mailbox slots per QP (the credits)
  int ackTimeout = 18;              // ACCL_IB_TIMEOUT: 4.096 us * 2^x before a retry
  size_t zcopyBytes = 16384;        // ACCL_IB_ZCOPY_BYTES: payloads from this size are not copied (0: never)
  size_t regCacheBytes = size_t(1) << 30;  // ACCL_IB_REG_CACHE_MB
};

// Picks device and port by `s` (ACTIVE ports only). Throws accl::Error saying
// why none is usable (no library, no device, ENOSYS, port down, no GID).
PortInfo choosePort(const Settings& s);

// Whether `why` (from choosePort / QpMesh::connect) says this host has no RDMA
// at all (no libibverbs, no device, a kernel without RDMA) rather than an
// RDMA setup that failed; the first is logged as INFO, the second as WARN.
bool noRdmaHere(const std::string& why);

// Exported for tests: the IPv4-mapped GID index rule, given each index's GID
// text and type ("" when the entry is empty); -1 if none qualifies.
int pickGidIndex(const std::vector<std::pair<std::string, std::string>>& table);

// Opens the device of the chosen port (choosePort keeps it open): the
// caller owns the context. Throws like choosePort.
ibv_context* openPort(const Settings& s, PortInfo* out);

// RLIMIT_MEMLOCK as text ("unlimited", "65536 KiB"), for registration errors.
std::string memlockText();

}  // namespace ib
}  // namespace core
}  // namespace accl
