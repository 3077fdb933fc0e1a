// Every ACCL_* environment variable, in one table, read once.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace accl {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

struct ConfigEntry {
  const char* name;         // ACCL_...
  const char* type;         // "enum", "int", "seconds", "string", "path", "list"
  const char* defaultText;  // shown by accl-info --config
  const char* accepted;     // accepted values, in words
  const char* meaning;
};

// The documented table of all variables (docs/configuration.md is generated from it).
const std::vector<ConfigEntry>& configTable();

// The effective configuration. Parsing happens on first use; an invalid value
// throws InvalidArgument naming the variable, the value and what is accepted.
struct Config {
  LogLevel debug = LogLevel::Warn;            // ACCL_DEBUG
  std::vector<std::string> debugSubsys;       // ACCL_DEBUG_SUBSYS (empty = all)
  std::string debugFile;                      // ACCL_DEBUG_FILE
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // ACCL_TIMEOUT
  std::string socketIfname;                   // ACCL_SOCKET_IFNAME
  std::string ibHca;                          // ACCL_IB_HCA
  std::vector<std::string> transports{"shm", "ib", "tcp"};  // ACCL_TRANSPORTS
  int ibGidIndex = -1;                        // ACCL_IB_GID_INDEX (-1 = auto)
  int ibQpsPerPeer = 1;                       // ACCL_IB_QPS_PER_PEER
  int ibTimeout = 18;                         // ACCL_IB_TIMEOUT
  int ibZcopyBytes = 16384;                   // ACCL_IB_ZCOPY_BYTES (0 = always copy)
  int ibRegCacheMb = 1024;                    // ACCL_IB_REG_CACHE_MB
  std::string algo;                           // ACCL_ALGO (validated by the accl backend)
  std::string hostId;                         // ACCL_HOSTID
  int socketNstreams = 2;                     // ACCL_SOCKET_NSTREAMS
  int shmCma = 0;                             // ACCL_SHM_CMA: 0 auto, 1 on, -1 off
  int inlineBytes = 65536;                    // ACCL_INLINE_BYTES
  std::string torchBackend = "accl";          // ACCL_TORCH_BACKEND
  std::string torchCuda = "auto";             // ACCL_TORCH_CUDA: auto, nccl, stage
  std::string pluginPath;                     // ACCL_PLUGIN_PATH
  int storePort = 0;                          // ACCL_STORE_PORT (0 = derive)
  std::string storeFile;                      // ACCL_STORE_FILE
  std::string storeSecret;                    // ACCL_STORE_SECRET
  std::string storeSecretFile;                // ACCL_STORE_SECRET_FILE
  std::string storeBind = "auto";             // ACCL_STORE_BIND: auto, any or an address
  std::string topoFile;                       // ACCL_TOPO_FILE
  std::string topoDumpFile;                   // ACCL_TOPO_DUMP_FILE
  // What parsing noticed that users should see (logged once, at the first
  // group): variables of other libraries followed (NCCL_SOCKET_IFNAME, ...),
  // aliases used (ACCL_LOG_LEVEL), ACCL_* names ACCL does not know.
  std::vector<std::string> notes;             // logged at INFO
  std::vector<std::string> warnings;          // logged at WARN

  // The process-wide configuration (parsed once, thread-safe).
  static const Config& get();
  // Parses from an explicit lookup function (tests); same validation.
  // `names`: the environment's variable names, for the unknown-ACCL_* check
  // (empty: no check).
  static Config parse(const std::function<const char*(const char*)>& getenv,
                      const std::vector<std::string>& names = {});
  // Value of `name` as text, as the effective configuration sees it.
  std::string valueText(const std::string& name) const;
};

// Parses "30", "30s", "500ms", "2m", "1h" into milliseconds; throws InvalidArgument.
// The known ACCL_* name nearest to `name` (edit distance), or "" if none is close.
std::string nearestVariable(const std::string& name);
// Logs Config::get()'s notes and warnings, once per process.
void logConfigNotes();

std::chrono::milliseconds parseDuration(const std::string& var, const std::string& text);

}  // namespace accl
