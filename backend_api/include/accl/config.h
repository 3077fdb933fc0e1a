// Every ACCL_* environment variable is a row of one table: its name, type,
// default, accepted values, meaning and owner, with the parser that checks a
// value and the printer that shows it. The rows of the core (logging,
// deadlines, rendezvous, topology, torch_accl) are built into libaccl and fill
// `Config`; a backend registers the rows of its own knobs when its module
// loads (accl/internal/config_var.h), so they are not part of this struct.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace accl {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

struct ConfigEntry {
  std::string name;         // ACCL_...
  std::string type;         // "enum", "int", "duration", "string", "path", "list"
  std::string defaultText;  // shown by accl-info --config
  std::string accepted;     // accepted values, in words
  std::string meaning;
  std::string owner;        // "core", "torch_accl" or the backend ("accl backend")
};

// Every registered row: the core's, then those of the backend modules loaded
// so far (accl-info loads them all). docs/configuration.md is generated from it.
std::vector<ConfigEntry> configTable();

// The effective value of any registered variable, as accl-info prints it.
// Throws InvalidArgument for an invalid value (naming the variable, the value
// and what is accepted) or a name no loaded library registers.
std::string configValue(const std::string& name);

// The effective configuration of the core. Parsing happens on first use; an
// invalid value throws InvalidArgument naming the variable, the value and
// what is accepted. Each field's default is its row's.
struct Config {
  LogLevel debug{};                      // ACCL_DEBUG (and its alias ACCL_LOG_LEVEL)
  std::vector<std::string> debugSubsys;  // ACCL_DEBUG_SUBSYS (empty = all)
  bool debugSubsysExcluded = false;      // ACCL_DEBUG_SUBSYS began with ^: all but debugSubsys
  std::string debugFile;                 // ACCL_DEBUG_FILE
  std::chrono::milliseconds timeout{};   // ACCL_TIMEOUT
  std::string socketIfname;              // ACCL_SOCKET_IFNAME
  std::string ibHca;                     // ACCL_IB_HCA
  std::string pluginPath;                // ACCL_PLUGIN_PATH
  int storePort = 0;                     // ACCL_STORE_PORT (0 = derive)
  std::string storeFile;                 // ACCL_STORE_FILE
  std::string storeSecret;               // ACCL_STORE_SECRET
  std::string storeSecretFile;           // ACCL_STORE_SECRET_FILE
  std::string storeBind;                 // ACCL_STORE_BIND: auto, any or an address
  std::string topoFile;                  // ACCL_TOPO_FILE
  std::string topoDumpFile;              // ACCL_TOPO_DUMP_FILE
  int traceBuffer = 0;                   // ACCL_TRACE_BUFFER (0: no flight recorder)
  std::string traceDir;                  // ACCL_TRACE_DIR
  std::string timeline;                  // ACCL_TIMELINE ("": off)
  std::chrono::milliseconds stallWarn{};  // ACCL_STALL_WARN (0: off)
  std::chrono::milliseconds diagPoll{};   // ACCL_DIAG_POLL (0: off)
  int stats = 0;                         // ACCL_STATS (1: on)
  std::string torchBackend;              // ACCL_TORCH_BACKEND
  std::string torchCuda;                 // ACCL_TORCH_CUDA: auto, nccl, stage
  int scratchKeepMb = 0;                 // ACCL_SCRATCH_KEEP_MB (0: no scratch kept between ops)
  // What parsing noticed that users should see (logged once, at the first
  // group): variables of other libraries followed (NCCL_SOCKET_IFNAME, ...),
  // aliases used (ACCL_LOG_LEVEL).
  std::vector<std::string> notes;  // logged at INFO

  // The process-wide configuration (parsed once, thread-safe).
  static const Config& get();
  // Parses from an explicit lookup function (tests); same validation.
  static Config parse(const std::function<const char*(const char*)>& getenv);
  // The value of a core variable as text; other registered variables as
  // configValue() gives them.
  std::string valueText(const std::string& name) const;
};

// ACCL_* names in `names` that no row registers and no script of the project
// uses, each with the warning to log ("... is not an ACCL variable ...; did
// you mean ...?"). Loads every backend module first when one is unknown, so
// that a backend's variable is not taken for a typo.
std::vector<std::string> unknownVariableWarnings(const std::vector<std::string>& names);

// The known ACCL_* name nearest to `name` (edit distance), or "" if none is close.
std::string nearestVariable(const std::string& name);
// Logs Config::get()'s notes and the unknown ACCL_* names of the
// environment, once per process.
void logConfigNotes();

// Parses "30", "30s", "500ms", "2m", "1h" into milliseconds; throws InvalidArgument.
std::chrono::milliseconds parseDuration(const std::string& var, const std::string& text);

}  // namespace accl
