// Which host this process is on and which NIC a rank uses: the accl
// backend's use of the topology layer. The topology is loaded once per
// process; the choice follows ACCL_IB_HCA, ACCL_SOCKET_IFNAME and the
// GPU-NIC affinity the topology reports.
#pragma once

#include <memory>
#include <string>

#include "accl/topology.h"

namespace accl {

// Hostname, boot id and network namespace: ranks with the same id share
// memory. ACCL_HOST_ID overrides it.
std::string defaultHostId();

// The host's topology, loaded once per process by the topology layer
// (ACCL_TOPO_FILE or a probe). A file the user named must be valid (its error
// propagates); a failed probe only costs the NIC assignment, with a warning
// (nullptr). The first call with `dumpHere` writes ACCL_TOPO_DUMP_FILE.
std::shared_ptr<const topo::Topology> hostTopology(bool dumpHere);

// Which NIC this rank uses and which interface carries its TCP traffic.
struct NicChoice {
  std::string ifSpec;      // for the TCP transport (ACCL_SOCKET_IFNAME syntax)
  std::string rdmaDevice;  // the assigned NIC's RDMA device, for verbs ("" = none assigned)
  std::string text;        // for the INFO log
};

// The NIC of local rank `localRank` of `localSize` on this machine, from
// topology `t` (nullptr: no topology, the first up interface).
NicChoice chooseNic(const topo::Topology* t, int localRank, int localSize);

}  // namespace accl
