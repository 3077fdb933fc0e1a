// The accl backend's knobs: rows of the configuration table that this module
// registers when it loads (accl/internal/config_var.h); accl-info and
// docs/configuration.md show them with the core's.
#pragma once

#include <string>
#include <vector>

#include "accl/internal/config_var.h"

namespace accl {
namespace settings {

extern const config::Var<std::vector<std::string>> transports;  // ACCL_TRANSPORTS
extern const config::Var<int> ibGidIndex;                       // ACCL_IB_GID_INDEX (-1: auto)
extern const config::Var<int> ibQpsPerPeer;                     // ACCL_IB_QPS_PER_PEER
extern const config::Var<int> ibTimeout;                        // ACCL_IB_TIMEOUT
extern const config::Var<int> ibZcopyBytes;                     // ACCL_IB_ZCOPY_BYTES
extern const config::Var<int> ibRegCacheMb;                     // ACCL_IB_REG_CACHE_MB
extern const config::Var<std::string> algo;                     // ACCL_ALGO ("": auto)
extern const config::Var<std::string> hostId;                   // ACCL_HOSTID ("": derived)
extern const config::Var<int> socketNstreams;                   // ACCL_SOCKET_NSTREAMS
extern const config::Var<std::string> shmCma;                   // ACCL_SHM_CMA: auto, on, off
extern const config::Var<int> shmStreamBytes;                   // ACCL_SHM_STREAM_BYTES
extern const config::Var<int> inlineBytes;                      // ACCL_INLINE_BYTES
extern const config::Var<int> unexpectedCacheMb;                // ACCL_UNEXPECTED_CACHE_MB
extern const config::Var<std::string> tuningFile;               // ACCL_TUNING_FILE ("": none)

// Reads every knob: throws InvalidArgument for the first invalid one (so a
// group fails before it connects, not halfway).
void validate();

// Whether ACCL_TRANSPORTS lists `t` ("shm", "ib" or "tcp").
bool transportOn(const std::string& t);

}  // namespace settings
}  // namespace accl
