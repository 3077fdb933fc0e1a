#include "accl/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include <unistd.h>

#include "accl/errors.h"

namespace accl {

namespace {

const char* const kSubsystems = "INIT, COLL, P2P, STORE, NET, ALL";

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> splitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

[[noreturn]] void invalid(const std::string& var, const std::string& value,
                          const std::string& accepted) {
  throw InvalidArgument("accl: invalid value '" + value + "' for " + var + "; accepted: " +
                        accepted);
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

const ConfigEntry* findEntry(const std::string& name) {
  for (const auto& e : configTable())
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

const std::vector<ConfigEntry>& configTable() {
  static const std::vector<ConfigEntry> table = {
      {"ACCL_DEBUG", "enum", "WARN", "NONE, WARN, INFO, TRACE (any case)",
       "How much ACCL logs to stderr. INFO prints, once per communicator, what was chosen "
       "(backend, transport, interface); TRACE adds every operation."},
      {"ACCL_LOG_LEVEL", "enum", "(unset)", "as ACCL_DEBUG, plus DEBUG (= INFO) and ERROR/WARNING (= WARN)",
       "Alias of ACCL_DEBUG (container launch scripts set it); ACCL_DEBUG wins when both are set."},
      {"ACCL_DEBUG_SUBSYS", "list", "ALL", "comma-separated subset of INIT, COLL, P2P, STORE, NET, ALL",
       "Restricts INFO/TRACE messages to these subsystems (warnings always print)."},
      {"ACCL_DEBUG_FILE", "path", "(stderr)", "a file path; %h is replaced by the host name, %p by the pid",
       "Writes log lines to this file instead of stderr."},
      {"ACCL_TIMEOUT", "duration", "30m",
       "a positive number with an optional unit: ms, s (default), m, h",
       "Default deadline of every operation and of rendezvous; a timed-out operation fails "
       "with accl::Timeout instead of hanging."},
      {"ACCL_SOCKET_IFNAME", "string", "(auto: accl per rank from the topology, gloo the first up non-loopback interface)",
       "interface name prefixes separated by commas; ^ excludes, = matches names exactly "
       "(e.g. eth0  ^lo,docker  =eth1)",
       "Network interface used for TCP traffic between ranks (accl and gloo backends). Unset, "
       "NCCL_SOCKET_IFNAME or else GLOO_SOCKET_IFNAME is followed when set (logged at INFO); with neither, "
       "the accl backend uses the netdev of the NIC the topology assigns to each local rank "
       "(nearest to its GPU, or to its NUMA node on hosts without GPUs), else the first up interface."},
      {"ACCL_IB_HCA", "string", "(auto: the NICs the topology assigns to each local rank)",
       "RDMA device name prefixes with an optional :port, separated by commas; ^ excludes, = matches "
       "names exactly (e.g. mlx5_0:1,mlx5_1  ^mlx5_2  =mlx5_0)",
       "Restricts the NICs the accl backend assigns to its ranks to these RDMA devices (and the "
       "port, when named; unset, NCCL_IB_HCA is followed when set, logged at INFO) for verbs; the TCP transport then runs over the chosen device's netdev. An "
       "ACCL_IB_HCA that matches no RDMA device of the topology is an error."},
      {"ACCL_TRANSPORTS", "list", "shm,ib,tcp", "comma-separated subset of shm, ib, tcp (with ib or tcp)",
       "Transports the accl backend may use. shm: ranks on one host run collectives on a shared "
       "segment; ib: verbs (RDMA) between hosts where both ends have an ACTIVE port; tcp: between "
       "hosts otherwise (a failed verbs set-up falls back to it, logged). Without shm every rank is "
       "its own host; without tcp a rank that cannot use verbs fails at set-up "
       "(ACCL_TRANSPORTS=tcp or =ib forces either)."},
      {"ACCL_IB_GID_INDEX", "int", "(auto: the IPv4-mapped RoCE v2 GID, else v1; none on InfiniBand)", "0..255",
       "GID table index of the RDMA port used for RoCE addressing (the global routing header). Auto "
       "needs the port's netdev to have an IPv4 address."},
      {"ACCL_IB_QPS_PER_PEER", "int", "1", "1..8",
       "RC queue pairs per pair of ranks on different hosts; chunks of large collective messages "
       "alternate between them (spreads traffic over ports and ECMP paths)."},
      {"ACCL_IB_TIMEOUT", "int", "18", "1..31",
       "Verbs ACK timeout exponent: a write is retried after 4.096 us * 2^value (18: ~1 s), 6 times, "
       "before the QP fails and the peer is reported failed."},
      {"ACCL_IB_ZCOPY_BYTES", "int", "16384", "0..134217728 (0: always copy)",
       "Verbs writes with at least this much payload are made straight from the caller's buffer "
       "(registered once and cached); smaller ones are copied into a registered staging ring. Needs "
       "UCX's memory hooks (libucm) to see memory being freed; without them every payload is copied."},
      {"ACCL_IB_REG_CACHE_MB", "int", "1024", "1..1048576",
       "Most memory (MiB) the verbs registration cache keeps registered (pinned); least recently used "
       "buffers are deregistered first, and when a registration fails for lack of lockable memory. "
       "A buffer larger than this is copied."},
      {"ACCL_ALGO", "string", "(auto: chosen by op, size, ranks and host layout)",
       "op:algorithm pairs separated by ';', e.g. allreduce:ring;broadcast:tree. ops: allreduce, "
       "broadcast, reduce, allgather, reduce_scatter, alltoall, gather, scatter, barrier; algorithms: "
       "ring, recursive_doubling (rd), tree, direct, hierarchical (hier); accl-info lists which op takes which",
       "Forces the accl backend's algorithm for the ops named (between hosts; shared memory "
       "within a host is always used where the layout allows). Unknown names are errors."},
      {"ACCL_HOSTID", "string", "(hostname + boot id + network namespace)", "any non-empty string",
       "Host identity of this rank: ranks with equal host ids use shared memory with each other."},
      {"ACCL_SOCKET_NSTREAMS", "int", "2", "1..16",
       "TCP connections per pair of ranks on different hosts; large messages are split across them."},
      {"ACCL_SHM_CMA", "enum", "auto", "auto, on, off",
       "Single-copy shared-memory transfers with process_vm_readv. auto: used when the kernel "
       "allows it; off: always copy through the shared segment; on: fail if unavailable."},
      {"ACCL_INLINE_BYTES", "int", "65536", "0..1073741824",
       "Ops of at most this many bytes issued while the group is idle run on the calling thread "
       "(lowest latency; the call returns a completed Work). Larger ones are queued for the "
       "group's worker thread; a thread that waits on one while it is next in line runs it "
       "itself. 0 queues every op."},
      {"ACCL_TORCH_BACKEND", "enum", "accl", "accl, gloo, mpi, nccl",
       "Which ACCL backend runs the ops of torch's backend=\"accl\" (torch_accl). Other values "
       "route the same adapter through ACCL's gloo, mpi or nccl backend for comparisons."},
      {"ACCL_TORCH_CUDA", "enum", "auto", "auto, nccl, stage",
       "Where torch_accl sends CUDA tensors when the backend in ACCL_TORCH_BACKEND addresses host memory "
       "only: nccl = ACCL's nccl backend (like cpu:gloo,cuda:nccl), stage = copied to the host, run there "
       "and copied back (slow; logged once at WARN), auto = nccl where that backend is usable, else stage."},
      {"ACCL_PLUGIN_PATH", "list", "(directory of libaccl)", "colon-separated directories",
       "Where backend modules libaccl-backend-<name>.so are searched after libaccl's own directory."},
      {"ACCL_STORE_PORT", "int", "(MASTER_PORT; MASTER_PORT+1 under torchrun's agent store)",
       "1..65535",
       "Port of the TCP store that rendezvousFromEnv() hosts on rank 0 at MASTER_ADDR."},
      {"ACCL_STORE_FILE", "path", "(unset: TCP store)", "a path on a file system all ranks share",
       "Makes rendezvousFromEnv() use a FileStore at this path instead of a TCP store."},
      {"ACCL_STORE_SECRET", "string", "(unset: no authentication)", "any non-empty string, the same on every rank",
       "Shared secret that every client of ACCL's TCP store must prove before its first request "
       "(HMAC-SHA256 challenge-response over fresh nonces of both sides; the secret never crosses the "
       "network, and the server proves it too). A client without it, or with another, is refused and "
       "the server logs why. Needs OpenSSL's libcrypto.so.3 at run time. Prefer ACCL_STORE_SECRET_FILE: "
       "a process's environment can be read by other processes of the same user."},
      {"ACCL_STORE_SECRET_FILE", "path", "(unset)", "a file whose first line is the secret (mode 0600)",
       "The same as ACCL_STORE_SECRET, read from a file; ACCL_STORE_SECRET wins when both are set."},
      {"ACCL_STORE_BIND", "string", "auto", "auto, any, or an IP address of this host",
       "Where rank 0's TCP store listens. auto: the address MASTER_ADDR names when it is one of this "
       "host's (a name that resolves to a loopback address other than localhost, as Debian's /etc/hosts "
       "does for the host's own name, counts as not: other hosts could not connect), else every "
       "interface (logged at INFO); any: every interface."},
      {"ACCL_TOPO_FILE", "path", "(unset: probe this host)",
       "an NCCL topology XML file (what NCCL_TOPO_FILE takes) or an hwloc XML export",
       "Topology to use instead of probing the host, e.g. the file a cloud vendor ships for its VMs. "
       "Unset, NCCL_TOPO_FILE is followed when set (logged at INFO)."},
      {"ACCL_TOPO_DUMP_FILE", "path", "(unset)", "a file path; .json writes JSON, anything else NCCL topology XML",
       "Writes the topology in use (probed or loaded) to this file."},
  };
  return table;
}

std::chrono::milliseconds parseDuration(const std::string& var, const std::string& text) {
  const char* accepted = "a positive number with an optional unit ms, s, m or h (e.g. 30, 500ms, 2m)";
  size_t pos = 0;
  double v;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    invalid(var, text, accepted);
  }
  std::string unit = text.substr(pos);
  double ms;
  if (unit.empty() || unit == "s") ms = v * 1000;
  else if (unit == "ms") ms = v;
  else if (unit == "m") ms = v * 60000;
  else if (unit == "h") ms = v * 3600000;
  else invalid(var, text, accepted);
  if (!(ms >= 1) || ms > 1e12) invalid(var, text, accepted);
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

Config Config::parse(const std::function<const char*(const char*)>& getenv, const std::vector<std::string>& names) {
  Config c;
  auto val = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (auto v = val("ACCL_DEBUG"); !v.empty()) {
    auto u = upper(v);
    if (u == "NONE") c.debug = LogLevel::None;
    else if (u == "WARN") c.debug = LogLevel::Warn;
    else if (u == "INFO") c.debug = LogLevel::Info;
    else if (u == "TRACE") c.debug = LogLevel::Trace;
    else invalid("ACCL_DEBUG", v, "NONE, WARN, INFO, TRACE");
    if (!val("ACCL_LOG_LEVEL").empty() && upper(val("ACCL_LOG_LEVEL")) != u)
      c.notes.push_back("ACCL_LOG_LEVEL=" + val("ACCL_LOG_LEVEL") + " ignored: ACCL_DEBUG=" + v + " is set");
  } else if (auto l = val("ACCL_LOG_LEVEL"); !l.empty()) {
    auto u = upper(l);
    if (u == "NONE" || u == "OFF") c.debug = LogLevel::None;
    else if (u == "WARN" || u == "WARNING" || u == "ERROR") c.debug = LogLevel::Warn;
    else if (u == "INFO" || u == "DEBUG") c.debug = LogLevel::Info;
    else if (u == "TRACE") c.debug = LogLevel::Trace;
    else invalid("ACCL_LOG_LEVEL", l, "NONE, OFF, ERROR, WARN, WARNING, INFO, DEBUG, TRACE (an alias of ACCL_DEBUG)");
  }
  // Variables of other libraries that launch scripts already set: followed
  // when ACCL's own is unset, and said so.
  auto follow = [&](const char* ours, std::initializer_list<const char*> theirs) -> std::string {
    if (!val(ours).empty()) return val(ours);
    for (const char* t : theirs)
      if (auto v = val(t); !v.empty()) {
        c.notes.push_back(std::string(ours) + " is unset: following " + t + "=" + v);
        return v;
      }
    return "";
  };
  if (auto v = val("ACCL_DEBUG_SUBSYS"); !v.empty()) {
    for (auto& s : splitList(upper(v), ',')) {
      if (s != "INIT" && s != "COLL" && s != "P2P" && s != "STORE" && s != "NET" && s != "ALL")
        invalid("ACCL_DEBUG_SUBSYS", v, kSubsystems);
      if (s != "ALL") c.debugSubsys.push_back(s);
    }
  }
  c.debugFile = val("ACCL_DEBUG_FILE");
  if (auto v = val("ACCL_TIMEOUT"); !v.empty()) c.timeout = parseDuration("ACCL_TIMEOUT", v);
  c.socketIfname = follow("ACCL_SOCKET_IFNAME", {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"});
  if (!c.socketIfname.empty() && splitList(c.socketIfname.substr(c.socketIfname[0] == '^' || c.socketIfname[0] == '=' ? 1 : 0), ',').empty())
    invalid("ACCL_SOCKET_IFNAME", c.socketIfname, "interface names or prefixes, e.g. eth0 or ^lo");
  c.ibHca = follow("ACCL_IB_HCA", {"NCCL_IB_HCA"});
  if (!c.ibHca.empty() && splitList(c.ibHca.substr(c.ibHca[0] == '^' || c.ibHca[0] == '=' ? 1 : 0), ',').empty())
    invalid("ACCL_IB_HCA", c.ibHca, "RDMA device names or prefixes with an optional :port, e.g. mlx5_0:1,mlx5_1 or ^mlx5_2");
  if (auto v = val("ACCL_TRANSPORTS"); !v.empty()) {
    c.transports.clear();
    for (auto& t : splitList(v, ',')) {
      std::string l = t;
      for (auto& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (l == "verbs" || l == "ibverbs" || l == "rdma") l = "ib";
      if (l != "shm" && l != "tcp" && l != "ib") invalid("ACCL_TRANSPORTS", v, "a comma-separated subset of shm, ib, tcp");
      if (std::find(c.transports.begin(), c.transports.end(), l) == c.transports.end())
        c.transports.push_back(l);
    }
    if (std::find(c.transports.begin(), c.transports.end(), "tcp") == c.transports.end() &&
        std::find(c.transports.begin(), c.transports.end(), "ib") == c.transports.end())
      invalid("ACCL_TRANSPORTS", v, "a list that includes tcp or ib (ranks on other hosts need one), e.g. shm,ib,tcp or tcp");
  }
  c.algo = val("ACCL_ALGO");
  c.hostId = val("ACCL_HOSTID");
  auto intVar = [&](const char* name, long lo, long hi, int* out) {
    auto v = val(name);
    if (v.empty()) return;
    char* end = nullptr;
    long x = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || x < lo || x > hi)
      invalid(name, v, "an integer " + std::to_string(lo) + ".." + std::to_string(hi));
    *out = static_cast<int>(x);
  };
  intVar("ACCL_SOCKET_NSTREAMS", 1, 16, &c.socketNstreams);
  intVar("ACCL_IB_GID_INDEX", 0, 255, &c.ibGidIndex);
  intVar("ACCL_IB_QPS_PER_PEER", 1, 8, &c.ibQpsPerPeer);
  intVar("ACCL_IB_TIMEOUT", 1, 31, &c.ibTimeout);
  intVar("ACCL_IB_ZCOPY_BYTES", 0, 128L << 20, &c.ibZcopyBytes);
  intVar("ACCL_IB_REG_CACHE_MB", 1, 1L << 20, &c.ibRegCacheMb);
  intVar("ACCL_INLINE_BYTES", 0, 1L << 30, &c.inlineBytes);
  if (auto v = val("ACCL_SHM_CMA"); !v.empty()) {
    auto u = upper(v);
    if (u != "AUTO" && u != "ON" && u != "OFF") invalid("ACCL_SHM_CMA", v, "auto, on, off");
    c.shmCma = u == "AUTO" ? 0 : u == "ON" ? 1 : -1;
  }
  if (auto v = val("ACCL_TORCH_BACKEND"); !v.empty()) {
    std::string l;
    for (char ch : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (l != "accl" && l != "gloo" && l != "mpi" && l != "nccl") invalid("ACCL_TORCH_BACKEND", v, "accl, gloo, mpi, nccl");
    c.torchBackend = l;
  }
  if (auto v = val("ACCL_TORCH_CUDA"); !v.empty()) {
    std::string l;
    for (char ch : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (l != "auto" && l != "nccl" && l != "stage") invalid("ACCL_TORCH_CUDA", v, "auto, nccl, stage");
    c.torchCuda = l;
  }
  c.pluginPath = val("ACCL_PLUGIN_PATH");
  intVar("ACCL_STORE_PORT", 1, 65535, &c.storePort);
  c.storeFile = val("ACCL_STORE_FILE");
  c.storeSecret = val("ACCL_STORE_SECRET");
  c.storeSecretFile = val("ACCL_STORE_SECRET_FILE");
  if (auto v = val("ACCL_STORE_BIND"); !v.empty()) c.storeBind = v;
  c.topoFile = follow("ACCL_TOPO_FILE", {"NCCL_TOPO_FILE"});
  c.topoDumpFile = val("ACCL_TOPO_DUMP_FILE");
  for (const auto& n : names) {
    if (n.rfind("ACCL_", 0) != 0 || findEntry(n) || isScriptVariable(n)) continue;
    std::string near = nearestVariable(n);
    c.warnings.push_back(n + " is not an ACCL variable and is ignored" +
                         (near.empty() ? std::string() : "; did you mean " + near + "?") +
                         " (accl-info --config lists them all)");
  }
  return c;
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
  static std::once_flag once;
  static Config cfg;
  static std::exception_ptr error;
  std::call_once(once, [] {
    try {
      std::vector<std::string> names;
      for (char** e = environ; e && *e; ++e) {
        std::string kv = *e;
        names.push_back(kv.substr(0, kv.find('=')));
      }
      cfg = parse([](const char* n) { return std::getenv(n); }, names);
    } catch (...) {
      error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  return cfg;
}

std::string Config::valueText(const std::string& name) const {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
    return s;
  };
  if (name == "ACCL_DEBUG") {
    static const char* names[] = {"NONE", "WARN", "INFO", "TRACE"};
    return names[static_cast<int>(debug)];
  }
  if (name == "ACCL_LOG_LEVEL") return "(alias of ACCL_DEBUG)";
  if (name == "ACCL_DEBUG_SUBSYS") return debugSubsys.empty() ? "ALL" : join(debugSubsys);
  if (name == "ACCL_DEBUG_FILE") return debugFile.empty() ? "(stderr)" : debugFile;
  if (name == "ACCL_TIMEOUT") return std::to_string(timeout.count()) + "ms";
  if (name == "ACCL_SOCKET_IFNAME") return socketIfname.empty() ? "(auto)" : socketIfname;
  if (name == "ACCL_IB_HCA") return ibHca.empty() ? "(auto)" : ibHca;
  if (name == "ACCL_TRANSPORTS") return join(transports);
  if (name == "ACCL_ALGO") return algo.empty() ? "(auto)" : algo;
  if (name == "ACCL_HOSTID") return hostId.empty() ? "(derived)" : hostId;
  if (name == "ACCL_SOCKET_NSTREAMS") return std::to_string(socketNstreams);
  if (name == "ACCL_IB_GID_INDEX") return ibGidIndex < 0 ? "(auto)" : std::to_string(ibGidIndex);
  if (name == "ACCL_IB_QPS_PER_PEER") return std::to_string(ibQpsPerPeer);
  if (name == "ACCL_IB_TIMEOUT") return std::to_string(ibTimeout);
  if (name == "ACCL_IB_ZCOPY_BYTES") return std::to_string(ibZcopyBytes);
  if (name == "ACCL_IB_REG_CACHE_MB") return std::to_string(ibRegCacheMb);
  if (name == "ACCL_SHM_CMA") return shmCma == 0 ? "auto" : shmCma > 0 ? "on" : "off";
  if (name == "ACCL_INLINE_BYTES") return std::to_string(inlineBytes);
  if (name == "ACCL_TORCH_BACKEND") return torchBackend;
  if (name == "ACCL_TORCH_CUDA") return torchCuda;
  if (name == "ACCL_PLUGIN_PATH") return pluginPath.empty() ? "(unset)" : pluginPath;
  if (name == "ACCL_STORE_PORT") return storePort ? std::to_string(storePort) : "(derived)";
  if (name == "ACCL_STORE_SECRET") return storeSecret.empty() ? "(unset)" : "(set, not shown)";
  if (name == "ACCL_STORE_SECRET_FILE") return storeSecretFile.empty() ? "(unset)" : storeSecretFile;
  if (name == "ACCL_STORE_BIND") return storeBind;
  if (name == "ACCL_STORE_FILE") return storeFile.empty() ? "(unset)" : storeFile;
  if (name == "ACCL_TOPO_FILE") return topoFile.empty() ? "(unset)" : topoFile;
  if (name == "ACCL_TOPO_DUMP_FILE") return topoDumpFile.empty() ? "(unset)" : topoDumpFile;
  if (!findEntry(name)) throw InvalidArgument("accl: unknown configuration variable " + name);
  return "";
}

}  // namespace accl
