#include "settings.h"

#include <algorithm>

#include "algorithms/select.h"

namespace accl {
namespace settings {

namespace {

const char* kOwner = "accl backend";

// A subset of shm, ib, tcp that can reach other hosts (has ib or tcp).
config::Kind<std::vector<std::string>> transportList() {
  auto k = config::subsetOf({"shm", "ib", "tcp"}, {{"verbs", "ib"}, {"ibverbs", "ib"}, {"rdma", "ib"}});
  k.accepted = "comma-separated subset of shm, ib, tcp (with ib or tcp)";
  auto parse = k.parse;
  k.parse = [parse](const std::string& text, std::vector<std::string>* out) {
    if (!parse(text, out)) return false;
    return std::find(out->begin(), out->end(), "ib") != out->end() ||
           std::find(out->begin(), out->end(), "tcp") != out->end();
  };
  return k;
}

// An integer whose default (-1) means "chosen at run time".
config::Kind<int> autoInt(long lo, long hi) {
  auto k = config::intRange(lo, hi);
  k.print = [](const int& v) { return v < 0 ? std::string("(auto)") : std::to_string(v); };
  return k;
}

// ACCL_ALGO: checked by the algorithm selection's own parser, whose error
// names the bad part.
config::Kind<std::string> algoSpec() {
  auto k = config::text(
      "op:algorithm pairs separated by ';', e.g. allreduce:ring;broadcast:tree. ops: allreduce, "
      "broadcast, reduce, allgather, reduce_scatter, alltoall, gather, scatter, barrier; algorithms: "
      "ring, recursive_doubling (rd), tree, direct, hierarchical (hier); accl-info lists which op takes which");
  k.print = [](const std::string& v) { return v.empty() ? std::string("(auto)") : v; };
  return k;
}

}  // namespace

const config::Var<std::vector<std::string>> transports(
    "ACCL_TRANSPORTS", kOwner, transportList(), {"shm", "ib", "tcp"}, nullptr,
    "Transports the accl backend may use. shm: ranks on one host run collectives on a shared "
    "segment; ib: verbs (RDMA) between hosts where both ends have an ACTIVE port; tcp: between "
    "hosts otherwise (a failed verbs set-up falls back to it, logged). Without shm every rank is "
    "its own host; without tcp a rank that cannot use verbs fails at set-up "
    "(ACCL_TRANSPORTS=tcp or =ib forces either).");

const config::Var<int> ibGidIndex(
    "ACCL_IB_GID_INDEX", kOwner, autoInt(0, 255), -1,
    "(auto: the IPv4-mapped RoCE v2 GID, else v1; none on InfiniBand)",
    "GID table index of the RDMA port used for RoCE addressing (the global routing header). Auto "
    "needs the port's netdev to have an IPv4 address.");

const config::Var<int> ibQpsPerPeer(
    "ACCL_IB_QPS_PER_PEER", kOwner, config::intRange(1, 8), 1, nullptr,
    "RC queue pairs per pair of ranks on different hosts; chunks of large collective messages "
    "alternate between them (spreads traffic over ports and ECMP paths).");

const config::Var<int> ibTimeout(
    "ACCL_IB_TIMEOUT", kOwner, config::intRange(1, 31), 18, nullptr,
    "Verbs ACK timeout exponent: a write is retried after 4.096 us * 2^value (18: ~1 s), 6 times, "
    "before the QP fails and the peer is reported failed.");

const config::Var<int> ibZcopyBytes(
    "ACCL_IB_ZCOPY_BYTES", kOwner, config::intRange(0, 128L << 20, "0: always copy"), 16384, nullptr,
    "Verbs writes with at least this much payload are made straight from the caller's buffer "
    "(registered once and cached); smaller ones are copied into a registered staging ring. Needs "
    "UCX's memory hooks (libucm) to see memory being freed; without them every payload is copied.");

const config::Var<int> ibRegCacheMb(
    "ACCL_IB_REG_CACHE_MB", kOwner, config::intRange(1, 1L << 20), 1024, nullptr,
    "Most memory (MiB) the verbs registration cache keeps registered (pinned); least recently used "
    "buffers are deregistered first, and when a registration fails for lack of lockable memory. "
    "A buffer larger than this is copied.");

const config::Var<std::string> algo(
    "ACCL_ALGO", kOwner, algoSpec(), "", "(auto: chosen by op, size, ranks and host layout)",
    "Forces the accl backend's algorithm for the ops named (between hosts; shared memory "
    "within a host is always used where the layout allows). Unknown names are errors.");

const config::Var<std::string> hostId(
    "ACCL_HOSTID", kOwner, config::text("any non-empty string"), "", "(hostname + boot id + network namespace)",
    "Host identity of this rank: ranks with equal host ids use shared memory with each other.");

const config::Var<int> socketNstreams(
    "ACCL_SOCKET_NSTREAMS", kOwner, config::intRange(1, 16), 2, nullptr,
    "TCP connections per pair of ranks on different hosts; large messages are split across them.");

const config::Var<std::string> shmCma(
    "ACCL_SHM_CMA", kOwner, config::oneOf({"auto", "on", "off"}), "auto", nullptr,
    "Single-copy shared-memory transfers with process_vm_readv. auto: a group times single copy "
    "against the shared segment's slots at 64 KiB - 1 MiB and 4 MiB when it is made (once per set of "
    "processes: about 0.1 s for 2 ranks with a core each, 0.2 s for 4 ranks on 2 cores, 1 s for 16 ranks "
    "on 2 cores; broadcasts with allgathers, scatters, alltoalls, and reduces, each class apart) and "
    "its broadcast, allgather, alltoall, gather, reduce and scatter take single copy in the size bands "
    "(from 32 KiB, 64 KiB where the host's ranks share CPUs; the 1 MiB probe decides up to 2 MiB, the "
    "4 MiB probe every larger size) where it was faster; every other collective copies "
    "through the slots; "
    "point-to-point messages of 1 MiB and more (from the start of the probe's single-copy bands where "
    "those reach the 4 MiB probe's, as in a launch whose copies through shared memory run slow, and "
    "from 16 KiB where they are every band; where the host's ranks share CPUs, 64 KiB, or 16 or 32 KiB "
    "where a ring of sendrecvs timed both ways when the group is made, in a few ms, found single copy "
    "faster from there) are read by single copy where the kernel allows it, smaller "
    "ones go through the rings; ACCL_DEBUG=INFO prints the probes, the bands and that size. on: single "
    "copy for collectives from 16 KiB (reduce 32 KiB) and point-to-point "
    "messages from 8 KiB (where the host's "
    "ranks share CPUs: 64 KiB and 16 KiB), faster from about 16 MiB for buffers on huge pages; fails if unavailable; off: never.");

const config::Var<int> shmStreamBytes(
    "ACCL_SHM_STREAM_BYTES", kOwner, autoInt(0, 1 << 30), -1,
    "(auto: copies into an output from the host's last-level cache size, 16 MiB where the kernel does not "
    "list it, or where an allgather's, or an out-of-place allreduce's or reduce's, buffers on all local ranks "
    "together reach it; "
    "writes into the slots where measured faster)",
    "Non-temporal stores (x86-64) for copies within a host, which skip reading each destination line before "
    "writing it and leave the bytes out of the cache. Into an op's output (from the shared segment or a "
    "ring), they are faster where the output is larger than the cache and slower where it fits. Into the "
    "segment's slots, the readers then take the bytes from memory "
    "rather than from the writer's cache: under auto, the group times the slots both ways beside single copy "
    "when it is made (see ACCL_SHM_CMA) and streams broadcasts, gathers, scatters and alltoalls in the bands "
    "where that was faster; after that, each rank times its own writes both ways now and then and streams "
    "where its plain writes run at under half the rate of its streamed ones (not where the ranks share "
    "CPUs). A value streams both "
    "kinds of copy for every op of at least that many bytes (point-to-point messages: their whole size; "
    "collectives: their output, or the data they move); 0: never.");

const config::Var<int> inlineBytes(
    "ACCL_INLINE_BYTES", kOwner, config::intRange(0, 1L << 30), 65536, nullptr,
    "Ops of at most this many bytes issued while the group is idle run on the calling thread "
    "(lowest latency; the call returns a completed Work). Larger ones are queued for the "
    "group's worker thread; a thread that waits on one while it is next in line runs it "
    "itself. 0 queues every op.");

const config::Var<int> unexpectedCacheMb(
    "ACCL_UNEXPECTED_CACHE_MB", kOwner, config::intRange(0, 1L << 20, "0: none kept"), 128, nullptr,
    "Most memory (MiB) the process keeps, over all its groups, of the buffers of large messages "
    "(256 KiB and up) that arrived before their receive was posted, for the next such message: a "
    "fresh buffer costs a page fault and a zeroed page per 4 KiB as the bytes land. At most the two "
    "largest per group; those that do not fit are freed.");

const config::Var<std::string> tuningFile(
    "ACCL_TUNING_FILE", kOwner, config::text("a path to the JSON file that accl-perf --calibrate FILE writes"), "",
    "(none: fixed size thresholds)",
    "Cost-model parameters (latency, bandwidth, reduction rate, per-message overhead of the link between "
    "hosts and within a host; the link between hosts with every pair of ranks crossing at once, where both hosts "
    "had several; the shared segment's allreduce; the machine's CPUs and the CPU time per message, for hosts "
    "whose ranks outnumber their cores) measured by accl-perf --calibrate. With it, the accl backend picks each op's algorithm between "
    "hosts by the model's predicted time; ACCL_ALGO still overrides. accl-info --plan prints the choices "
    "and predicted times. An unreadable or malformed file fails the group's creation.");

void validate() {
  transports.get();
  ibGidIndex.get();
  ibQpsPerPeer.get();
  ibTimeout.get();
  ibZcopyBytes.get();
  ibRegCacheMb.get();
  algo.get();
  hostId.get();
  socketNstreams.get();
  shmCma.get();
  inlineBytes.get();
  shmStreamBytes.get();
  unexpectedCacheMb.get();
  tuningFile.get();
}

bool transportOn(const std::string& t) {
  const auto& v = transports.get();
  return std::find(v.begin(), v.end(), t) != v.end();
}

}  // namespace settings
}  // namespace accl
