#include "accl/config.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include <unistd.h>

#include "accl/errors.h"
#include "accl/internal/config_var.h"
#include "accl/internal/name_spec.h"
#include "accl/internal/strings.h"
#include "accl/registry.h"

namespace accl {
namespace config {

std::string upper(std::string s);
std::string lower(std::string s);
struct Rows {
  std::mutex mu;
  std::vector<Row> rows;
};
Rows& rows();

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

namespace {

// "1800000" ms as "30m": the largest unit that divides it.
std::string printDuration(std::chrono::milliseconds d) {
  long long ms = d.count();
  if (ms == 0) return "0";
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

Rows& rows() {
  static Rows* r = new Rows;  // never destroyed: modules register from static init
  return *r;
}

void invalid(const std::string& name, const std::string& value, const std::string& accepted) {
  throw InvalidArgument("accl: invalid value '" + value + "' for " + name + "; accepted: " + accepted);
}

Kind<int> intRange(long lo, long hi, const std::string& note) {
  Kind<int> k;
  k.type = "int";
  k.accepted = std::to_string(lo) + ".." + std::to_string(hi) + (note.empty() ? "" : " (" + note + ")");
  k.parse = [lo, hi](const std::string& v, int* out) {
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || errno || x < lo || x > hi) return false;
    *out = static_cast<int>(x);
    return true;
  };
  k.print = [](const int& v) { return std::to_string(v); };
  return k;
}

Kind<std::chrono::milliseconds> duration(const char* zeroMeans) {
  Kind<std::chrono::milliseconds> k;
  k.type = "duration";
  k.accepted = zeroMeans ? std::string("0 (") + zeroMeans + ") or a positive number with an optional unit: ms, s (default), m, h"
                         : "a positive number with an optional unit: ms, s (default), m, h";
  bool zeroOk = zeroMeans != nullptr;
  k.parse = [zeroOk](const std::string& text, std::chrono::milliseconds* out) {
    size_t pos = 0;
    double v;
    try {
      v = std::stod(text, &pos);
    } catch (const std::exception&) {
      return false;
    }
    std::string unit = text.substr(pos);
    double ms;
    if (unit.empty() || unit == "s") ms = v * 1000;
    else if (unit == "ms") ms = v;
    else if (unit == "m") ms = v * 60000;
    else if (unit == "h") ms = v * 3600000;
    else return false;
    if (zeroOk && ms == 0 && unit.size() <= 2) {
      *out = std::chrono::milliseconds(0);
      return true;
    }
    if (!(ms >= 1) || ms > 1e12) return false;
    *out = std::chrono::milliseconds(static_cast<int64_t>(ms));
    return true;
  };
  k.print = printDuration;
  return k;
}

Kind<std::string> text(const std::string& accepted, const std::string& type) {
  Kind<std::string> k;
  k.type = type;
  k.accepted = accepted;
  k.parse = [](const std::string& v, std::string* out) {
    *out = v;
    return !v.empty();
  };
  k.print = [](const std::string& v) { return v.empty() ? std::string("(unset)") : v; };
  return k;
}

Kind<std::string> oneOf(const std::vector<std::string>& values) {
  Kind<std::string> k;
  k.type = "enum";
  k.accepted = internal::join(values, ", ");
  k.parse = [values](const std::string& v, std::string* out) {
    for (const auto& x : values)
      if (lower(x) == lower(v)) return *out = x, true;
    return false;
  };
  k.print = [](const std::string& v) { return v; };
  return k;
}

Kind<std::vector<std::string>> subsetOf(const std::vector<std::string>& values,
                                        const std::vector<std::pair<std::string, std::string>>& aliases) {
  Kind<std::vector<std::string>> k;
  k.type = "list";
  k.accepted = "a comma-separated subset of " + internal::join(values, ", ");
  k.parse = [values, aliases](const std::string& v, std::vector<std::string>* out) {
    out->clear();
    for (const auto& piece : internal::split(v, ',', /*skipEmpty=*/true)) {
      std::string item = lower(internal::trim(piece));
      for (const auto& [alias, value] : aliases)
        if (lower(alias) == item) item = lower(value);
      auto it = std::find_if(values.begin(), values.end(), [&](const std::string& x) { return lower(x) == item; });
      if (it == values.end()) return false;
      if (std::find(out->begin(), out->end(), *it) == out->end()) out->push_back(*it);
    }
    return !out->empty();
  };
  k.print = [](const std::vector<std::string>& v) { return internal::join(v, ","); };
  return k;
}

void registerRow(Row row) {
  Rows& r = rows();
  std::lock_guard<std::mutex> lk(r.mu);
  for (const auto& x : r.rows)
    if (x.entry.name == row.entry.name) return;
  r.rows.push_back(std::move(row));
}

const char* processEnv(const char* name) { return std::getenv(name); }

}  // namespace config

namespace {

using config::Getenv;
using config::Kind;

// A row of the core: the documented entry, how it sets its field of Config
// from an environment (the default when unset), and how it prints it.
struct CoreRow {
  ConfigEntry entry;
  std::function<void(Config&, const Getenv&)> apply;
  std::function<std::string(const Config&)> print;
};

// The row of field `m`: unset (and none of `follows`, variables of other
// libraries, set either) it takes `def`.
template <typename T>
CoreRow field(const char* name, Kind<T> kind, T def, const char* defaultDoc, const char* meaning, T Config::*m,
              std::vector<const char*> follows = {}) {
  CoreRow r;
  r.entry = {name, kind.type, defaultDoc ? defaultDoc : kind.print(def), kind.accepted, meaning, "core"};
  r.apply = [=](Config& c, const Getenv& env) {
    std::string from = name;
    const char* v = env(name);
    for (size_t i = 0; (!v || !*v) && i < follows.size(); ++i) {
      v = env(follows[i]);
      if (v && *v) {
        from = follows[i];
        c.notes.push_back(std::string(name) + " is unset: following " + from + "=" + v);
      }
    }
    if (!v || !*v) {
      c.*m = def;
      return;
    }
    T out;
    if (!kind.parse(v, &out)) config::invalid(from, v, kind.accepted);
    c.*m = out;
  };
  r.print = [=](const Config& c) { return kind.print(c.*m); };
  return r;
}

template <typename T>
Kind<T> printedAs(Kind<T> k, std::function<std::string(const T&)> print) {
  k.print = std::move(print);
  return k;
}

// NCCL's name-list syntax (accl/internal/name_spec.h): at least one name.
Kind<std::string> nameList(const std::string& accepted, bool withPorts) {
  Kind<std::string> k = config::text(accepted);
  k.parse = [withPorts](const std::string& v, std::string* out) {
    *out = v;
    return !internal::NameSpec::parse(v, withPorts).items.empty();
  };
  k.print = [](const std::string& v) { return v.empty() ? std::string("(auto)") : v; };
  return k;
}

Kind<LogLevel> logLevel(bool alias) {
  Kind<LogLevel> k;
  k.type = "enum";
  k.accepted = alias ? "NONE, OFF, ERROR, WARN, WARNING, INFO, DEBUG, TRACE (an alias of ACCL_DEBUG)"
                     : "NONE, WARN, INFO, TRACE (any case)";
  k.parse = [alias](const std::string& v, LogLevel* out) {
    std::string u = config::upper(v);
    if (u == "NONE" || (alias && u == "OFF")) *out = LogLevel::None;
    else if (u == "WARN" || (alias && (u == "WARNING" || u == "ERROR"))) *out = LogLevel::Warn;
    else if (u == "INFO" || (alias && u == "DEBUG")) *out = LogLevel::Info;
    else if (u == "TRACE") *out = LogLevel::Trace;
    else return false;
    return true;
  };
  k.print = [](const LogLevel& l) {
    static const char* names[] = {"NONE", "WARN", "INFO", "TRACE"};
    return std::string(names[static_cast<int>(l)]);
  };
  return k;
}

const std::vector<CoreRow>& coreRows() {
  static const std::vector<CoreRow> rows = [] {
    std::vector<CoreRow> v;
    // ACCL_DEBUG, with ACCL_LOG_LEVEL (what container launch scripts set) as
    // its alias: ACCL_DEBUG wins.
    CoreRow debug = field("ACCL_DEBUG", logLevel(false), LogLevel::Warn, nullptr,
                          "How much ACCL logs to stderr. INFO prints, once per communicator, what was chosen "
                          "(backend, transport, interface); TRACE adds every operation.",
                          &Config::debug);
    auto applyDebug = debug.apply;
    debug.apply = [applyDebug](Config& c, const Getenv& env) {
      const char* d = env("ACCL_DEBUG");
      const char* l = env("ACCL_LOG_LEVEL");
      bool hasD = d && *d, hasL = l && *l;
      if (hasD || !hasL) {
        applyDebug(c, env);
        if (hasD && hasL && config::upper(l) != config::upper(d))
          c.notes.push_back(std::string("ACCL_LOG_LEVEL=") + l + " ignored: ACCL_DEBUG=" + d + " is set");
        return;
      }
      if (!logLevel(true).parse(l, &c.debug)) config::invalid("ACCL_LOG_LEVEL", l, logLevel(true).accepted);
    };
    v.push_back(debug);
    CoreRow alias;
    alias.entry = {"ACCL_LOG_LEVEL", "enum", "(unset)", logLevel(true).accepted,
                   "Alias of ACCL_DEBUG (container launch scripts set it); ACCL_DEBUG wins when both are set.",
                   "core"};
    alias.apply = [](Config&, const Getenv&) {};  // ACCL_DEBUG's row reads it
    alias.print = [](const Config&) { return std::string("(alias of ACCL_DEBUG)"); };
    v.push_back(alias);
    // ACCL_DEBUG_SUBSYS: a subset, or with ^ first every subsystem but those (as NCCL's).
    Kind<std::vector<std::string>> names = config::subsetOf({"INIT", "COLL", "P2P", "STORE", "NET", "TORCH", "ALL"});
    CoreRow subsys;
    subsys.entry = {"ACCL_DEBUG_SUBSYS", "list", "ALL",
                    names.accepted + "; ^ first excludes them (e.g. ^NET,STORE)",
                    "Restricts INFO/TRACE messages to these subsystems, or with ^ to all others (warnings "
                    "always print).",
                    "core"};
    subsys.apply = [names](Config& c, const Getenv& env) {
      const char* v = env("ACCL_DEBUG_SUBSYS");
      c.debugSubsys.clear();
      c.debugSubsysExcluded = false;
      if (!v || !*v) return;
      std::string text = v;
      bool exclude = text[0] == '^';
      if (!names.parse(exclude ? text.substr(1) : text, &c.debugSubsys))
        config::invalid("ACCL_DEBUG_SUBSYS", text, names.accepted + "; ^ first excludes them");
      bool all = std::find(c.debugSubsys.begin(), c.debugSubsys.end(), "ALL") != c.debugSubsys.end();
      if (all) c.debugSubsys.clear();  // ALL: every subsystem (^ALL: none)
      c.debugSubsysExcluded = exclude;
      if (all && exclude) c.debugSubsys = {"INIT", "COLL", "P2P", "STORE", "NET", "TORCH"};
    };
    subsys.print = [](const Config& c) {
      if (c.debugSubsys.empty()) return std::string("ALL");
      return (c.debugSubsysExcluded ? "^" : "") + internal::join(c.debugSubsys, ",");
    };
    v.push_back(subsys);
    v.push_back(field("ACCL_DEBUG_FILE", config::text("a file path; %h is replaced by the host name, %p by the pid", "path"),
                      std::string(), "(stderr)", "Writes log lines to this file instead of stderr.", &Config::debugFile));
    v.push_back(field("ACCL_TIMEOUT", config::duration(), std::chrono::milliseconds(std::chrono::minutes(30)), nullptr,
                      "Default deadline of every operation and of rendezvous; a timed-out operation fails "
                      "with accl::Timeout instead of hanging.",
                      &Config::timeout));
    v.push_back(field(
        "ACCL_SOCKET_IFNAME",
        nameList("interface name prefixes separated by commas; ^ excludes, = matches names exactly "
                 "(e.g. eth0  ^lo,docker  =eth1)",
                 false),
        std::string(), "(auto: accl per rank from the topology, gloo the first up non-loopback interface)",
        "Network interface used for TCP traffic between ranks (accl and gloo backends). Unset, "
        "NCCL_SOCKET_IFNAME or else GLOO_SOCKET_IFNAME is followed when set (logged at INFO); with neither, "
        "the accl backend uses the netdev of the NIC the topology assigns to each local rank "
        "(nearest to its GPU, or to its NUMA node on hosts without GPUs), else the first up interface.",
        &Config::socketIfname, {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}));
    v.push_back(field(
        "ACCL_IB_HCA",
        nameList("RDMA device name prefixes with an optional :port, separated by commas; ^ excludes, = matches "
                 "names exactly (e.g. mlx5_0:1,mlx5_1  ^mlx5_2  =mlx5_0)",
                 true),
        std::string(), "(auto: the NICs the topology assigns to each local rank)",
        "Restricts the NICs the accl backend assigns to its ranks to these RDMA devices (and the "
        "port, when named; unset, NCCL_IB_HCA is followed when set, logged at INFO) for verbs; the TCP transport "
        "then runs over the chosen device's netdev. An ACCL_IB_HCA that matches no RDMA device of the topology is "
        "an error.",
        &Config::ibHca, {"NCCL_IB_HCA"}));
    v.push_back(field("ACCL_TRACE_BUFFER", config::intRange(0, 1000000, "0: off"), 1000, nullptr,
                      "Collectives each process group keeps in its flight recorder, and as many point-to-point "
                      "ops beside them (each rounded up to a power of two): the "
                      "last ones, with when each was queued, started and finished (to the kernel's coarse clock, "
                      "1-4 ms, unless ACCL_STATS or ACCL_TIMELINE is on), its algorithm, transport and failure. "
                      "Written to "
                      "ACCL_TRACE_DIR when an op times out or fails, on SIGUSR1 and on request (dumpTraces(), "
                      "torch_accl.dump_traces()); accl-diag reads the files.",
                      &Config::traceBuffer));
    v.push_back(field("ACCL_TRACE_DIR", config::text("a folder (created if missing, one level)", "path"),
                      std::string("/tmp/accl-trace"), nullptr,
                      "Where flight recorder dumps go: one file per process, accl-trace-<host>-<pid>.json.",
                      &Config::traceDir));
    v.push_back(field("ACCL_DIAG_POLL", config::duration("off"), std::chrono::milliseconds(2000), nullptr,
                      "How often each process asks its group's rendezvous store (ACCL's TCP store, or torch's "
                      "TCPStore in a torch job) whether accl-diag --store wants the flight recorders; when it does, "
                      "the process puts its dump (each group's last ops) into the store, so that one command on any "
                      "host gets every rank's. One store request per period per process; 0 turns it off.",
                      &Config::diagPoll));
    v.push_back(field("ACCL_STALL_WARN", config::duration("off"), std::chrono::milliseconds(60000), nullptr,
                      "An op that has waited this long logs one WARN on every waiting rank, again at 2x, 4x, ... "
                      "the time; ACCL_TIMEOUT stays the hard limit. The accl backend asks every peer where it is "
                      "and names the ranks that have not arrived or are in another op (with their host and that "
                      "op), and how long this rank has heard nothing from each peer it waits for. Other backends "
                      "name the op and how long it has waited. At an op's first warning each rank also writes its "
                      "flight recorder (ACCL_TRACE_DIR), so that accl-diag can compare the ranks.",
                      &Config::stallWarn));
    v.push_back(field("ACCL_TIMELINE",
                      config::text("a file path; %r is replaced by the rank, %h by the host name, %p by the pid "
                                   "(without %r or %p, .<rank> is added before the extension)",
                                   "path"),
                      std::string(), "(off)",
                      "Writes a timeline of every op (Chrome trace-event JSON, one file per process: a span per "
                      "op with its size, algorithm, transport and peers, a span for the time it was queued "
                      "behind earlier ops, and on the accl backend a span from its first wait for its peers to "
                      "its last, with the sum of the waits) that chrome://tracing and Perfetto open. Timestamps "
                      "are wall-clock "
                      "microseconds, so the files of all ranks line up.",
                      &Config::timeline));
    v.push_back(field("ACCL_STATS", config::intRange(0, 1, "1: on"), 0, nullptr,
                      "At the destruction of each process group, prints (to stderr) a table per op and size "
                      "bucket: count, bytes, mean/p50/p99 time, bus bandwidth, and what this rank received from "
                      "each peer (and how much of it came before its receive: held and copied twice), naming the "
                      "slowest link.",
                      &Config::stats));
    v.push_back(field("ACCL_TORCH_BACKEND", config::oneOf({"accl", "gloo", "mpi", "nccl"}), std::string("accl"), nullptr,
                      "Which ACCL backend runs the ops of torch's backend=\"accl\" (torch_accl). Other values "
                      "route the same adapter through ACCL's gloo, mpi or nccl backend for comparisons.",
                      &Config::torchBackend));
    v.push_back(field("ACCL_TORCH_CUDA", config::oneOf({"auto", "nccl", "stage"}), std::string("auto"), nullptr,
                      "Where torch_accl sends CUDA tensors when the backend in ACCL_TORCH_BACKEND addresses host "
                      "memory only: nccl = ACCL's nccl backend (like cpu:gloo,cuda:nccl), stage = copied to the "
                      "host, run there and copied back (slow; logged once at WARN), auto = nccl where that backend "
                      "is usable, else stage.",
                      &Config::torchCuda));
    v.push_back(field("ACCL_SCRATCH_KEEP_MB", config::intRange(0, 1L << 20, "0: none kept"), 256, nullptr,
                      "Most memory (MiB) the process keeps from one op to the next, over all its groups and "
                      "backends, of the scratch buffers ops work in (reductions in pieces, copies of inputs an "
                      "op overwrites, in-place copies): a buffer allocated afresh for every op costs a page "
                      "fault and a zeroed page per 4 KiB. A buffer above 64 MiB is never kept; one that would "
                      "pass this budget is freed when its op ends. Buffers of early messages have their own "
                      "budget (the accl backend's ACCL_UNEXPECTED_CACHE_MB).",
                      &Config::scratchKeepMb));
    v.push_back(field("ACCL_PLUGIN_PATH", config::text("colon-separated directories", "list"), std::string(),
                      "(directory of libaccl)",
                      "Where backend modules libaccl-backend-<name>.so are searched after libaccl's own directory.",
                      &Config::pluginPath));
    v.push_back(field("ACCL_STORE_PORT",
                      printedAs<int>(config::intRange(1, 65535),
                                     [](const int& p) { return p ? std::to_string(p) : std::string("(derived)"); }),
                      0, "(MASTER_PORT; MASTER_PORT+1 under torchrun's agent store)",
                      "Port of the TCP store that rendezvousFromEnv() hosts on rank 0 at MASTER_ADDR.",
                      &Config::storePort));
    v.push_back(field("ACCL_STORE_FILE", config::text("a path on a file system all ranks share", "path"), std::string(),
                      "(unset: TCP store)",
                      "Makes rendezvousFromEnv() use a FileStore at this path instead of a TCP store.",
                      &Config::storeFile));
    v.push_back(field(
        "ACCL_STORE_SECRET",
        printedAs<std::string>(config::text("any non-empty string, the same on every rank"),
                               [](const std::string& s) { return s.empty() ? "(unset)" : "(set, not shown)"; }),
        std::string(), "(unset: no authentication)",
        "Shared secret that every client of ACCL's TCP store must prove before its first request "
        "(HMAC-SHA256 challenge-response over fresh nonces of both sides; the secret never crosses the "
        "network, and the server proves it too). A client without it, or with another, is refused and "
        "the server logs why. Needs OpenSSL's libcrypto.so.3 at run time. Prefer ACCL_STORE_SECRET_FILE: "
        "a process's environment can be read by other processes of the same user.",
        &Config::storeSecret));
    v.push_back(field("ACCL_STORE_SECRET_FILE", config::text("a file whose first line is the secret (mode 0600)", "path"),
                      std::string(), nullptr,
                      "The same as ACCL_STORE_SECRET, read from a file; ACCL_STORE_SECRET wins when both are set.",
                      &Config::storeSecretFile));
    v.push_back(field("ACCL_STORE_BIND", config::text("auto, any, or an IP address of this host"), std::string("auto"),
                      nullptr,
                      "Where rank 0's TCP store listens. auto: the address MASTER_ADDR names when it is one of this "
                      "host's (a name that resolves to a loopback address other than localhost, as Debian's "
                      "/etc/hosts does for the host's own name, counts as not: other hosts could not connect), else "
                      "every interface (logged at INFO); any: every interface.",
                      &Config::storeBind));
    v.push_back(field("ACCL_TOPO_FILE",
                      config::text("an NCCL topology XML file (what NCCL_TOPO_FILE takes) or an hwloc XML export", "path"),
                      std::string(), "(unset: probe this host)",
                      "Topology to use instead of probing the host, e.g. the file a cloud vendor ships for its VMs. "
                      "Unset, NCCL_TOPO_FILE is followed when set (logged at INFO).",
                      &Config::topoFile, {"NCCL_TOPO_FILE"}));
    v.push_back(field("ACCL_TOPO_DUMP_FILE",
                      config::text("a file path; .json writes JSON, anything else NCCL topology XML", "path"),
                      std::string(), nullptr, "Writes the topology in use (probed or loaded) to this file.",
                      &Config::topoDumpFile));
    return v;
  }();
  return rows;
}

const CoreRow* findCore(const std::string& name) {
  for (const auto& r : coreRows())
    if (r.entry.name == name) return &r;
  return nullptr;
}

// The registered (non-core) row of `name`, copied out of the table.
bool findRegistered(const std::string& name, config::Row* out) {
  config::Rows& r = config::rows();
  std::lock_guard<std::mutex> lk(r.mu);
  for (const auto& x : r.rows)
    if (x.entry.name == name) return *out = x, true;
  return false;
}

// ACCL_* variables of the project's build, test and install scripts, which
// the library does not read: no warning for them.
bool isScriptVariable(const std::string& n) {
  static const char* const prefixes[] = {"ACCL_TEST_", "ACCL_FAULT_", "ACCL_NETNS_", "ACCL_RDMA_",
                                         "ACCL_CONFORMANCE_", "ACCL_TORCH2_", "ACCL_PKG_", "ACCL_INSTALL_"};
  static const char* const exact[] = {"ACCL_PYTHON", "ACCL_PYTHON_EXTRA", "ACCL_BUILD_DIR", "ACCL_REQUIRE_GPU",
                                      "ACCL_NCCL_WHEEL_VERSION", "ACCL_EXIT_ROUNDS", "ACCL_TOPO_FIXTURES",
                                      "ACCL_PREFIX", "ACCL_WHEEL"};
  for (const char* p : prefixes)
    if (n.rfind(p, 0) == 0) return true;
  for (const char* e : exact)
    if (n == e) return true;
  return false;
}

bool isKnown(const std::string& name) {
  config::Row row;
  return findCore(name) || findRegistered(name, &row);
}

}  // namespace

std::vector<ConfigEntry> configTable() {
  std::vector<ConfigEntry> out;
  for (const auto& r : coreRows()) out.push_back(r.entry);
  config::Rows& rows = config::rows();
  std::lock_guard<std::mutex> lk(rows.mu);
  for (const auto& r : rows.rows) out.push_back(r.entry);
  return out;
}

std::string configValue(const std::string& name) {
  if (findCore(name)) return Config::get().valueText(name);
  config::Row row;
  if (!findRegistered(name, &row))
    throw InvalidArgument("accl: unknown configuration variable " + name + " (accl-info --config lists them all)");
  return row.valueText(config::processEnv);
}

std::chrono::milliseconds parseDuration(const std::string& var, const std::string& text) {
  Kind<std::chrono::milliseconds> k = config::duration();
  std::chrono::milliseconds out{};
  if (!k.parse(text, &out)) config::invalid(var, text, k.accepted + " (e.g. 30, 500ms, 2m)");
  return out;
}

Config Config::parse(const std::function<const char*(const char*)>& getenv) {
  Config c;
  for (const auto& r : coreRows()) r.apply(c, getenv);
  return c;
}

std::vector<std::string> unknownVariableWarnings(const std::vector<std::string>& names) {
  std::vector<std::string> unknown;
  for (const auto& n : names)
    if (n.rfind("ACCL_", 0) == 0 && !isScriptVariable(n) && !isKnown(n)) unknown.push_back(n);
  if (unknown.empty()) return {};
  // A backend's variable is known once its module is loaded: load them all
  // before calling a name unknown (only when one looks unknown).
  listBackends();
  std::vector<std::string> out;
  for (const auto& n : unknown) {
    if (isKnown(n)) continue;
    std::string near = nearestVariable(n);
    out.push_back(n + " is not an ACCL variable and is ignored" +
                  (near.empty() ? std::string() : "; did you mean " + near + "?") +
                  " (accl-info --config lists them all)");
  }
  return out;
}

std::string nearestVariable(const std::string& name) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t bestD = std::string::npos;
  for (const auto& e : configTable()) {
    size_t d = distance(name, e.name);
    if (d < bestD) bestD = d, best = e.name;
  }
  // Close enough to be a typo: a third of the name after ACCL_, at least 2 edits.
  size_t allowed = std::max<size_t>(2, (name.size() > 5 ? name.size() - 5 : 0) / 3);
  return bestD <= allowed ? best : "";
}

const Config& Config::get() {
  // Parsed once; a parse error is remembered and rethrown on every call.
  // Once parsed, a call is one load (ops and log checks call this on every
  // op; std::call_once costs a TLS lookup and a locked instruction each time).
  static std::atomic<const Config*> ready{nullptr};
  if (const Config* c = ready.load(std::memory_order_acquire)) return *c;
  static std::once_flag once;
  static Config cfg;
  static std::exception_ptr error;
  std::call_once(once, [] {
    try {
      cfg = parse(config::processEnv);
    } catch (...) {
      error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  ready.store(&cfg, std::memory_order_release);
  return cfg;
}

std::string Config::valueText(const std::string& name) const {
  if (const CoreRow* r = findCore(name)) return r->print(*this);
  return configValue(name);
}

}  // namespace accl
