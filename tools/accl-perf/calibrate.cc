// accl-perf --calibrate FILE: measures the cost model's parameters of the
// link between rank 0 and a peer (send/recv through the group under test)
// and writes them as the tuning file the accl backend reads
// (ACCL_TUNING_FILE).
#include "calibrate.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "algorithms/cost_model.h"

namespace accl_perf {

using Clock = std::chrono::steady_clock;
using accl::Buffer;
using accl::DataType;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// This rank's part in a measured pair: its partner (-1: none; it takes part
// in the barriers only) and whether it sends first.
struct Pairing {
  int other = -1;
  bool first = false;
};
Pairing pairOf(int me, int a, int b) { return me == a ? Pairing{b, true} : me == b ? Pairing{a, false} : Pairing{}; }

// One-way time (us) of `bytes` within this rank's pair: the best of `reps`
// blocks of `iters` round trips, halved. Every pair of the group measures at
// once (rank 0's figures count).
double pingPong(accl::ProcessGroup& pg, Pairing pr, std::vector<char>& buf, size_t bytes, int iters, int reps) {
  Buffer b(buf.data(), bytes, DataType::Uint8);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters && pr.other >= 0; ++i) {
      if (pr.first) {
        pg.send(b, pr.other, accl::SendOptions{})->wait();
        pg.recv(b, pr.other, accl::RecvOptions{})->wait();
      } else {
        pg.recv(b, pr.other, accl::RecvOptions{})->wait();
        pg.send(b, pr.other, accl::SendOptions{})->wait();
      }
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters / 2 * 1e6);
  }
  return best;
}

// Time (us) of an exchange of `bytes` each way within this rank's pair (both
// send and receive at once, as the steps of ring and recursive doubling do):
// the best of `reps` blocks of `iters`.
double exchange(accl::ProcessGroup& pg, Pairing pr, std::vector<char>& out, std::vector<char>& in, size_t bytes,
                int iters, int reps) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters && pr.other >= 0; ++i) {
      auto rw = pg.recv(Buffer(in.data(), bytes, DataType::Uint8), pr.other, accl::RecvOptions{});
      pg.send(Buffer(out.data(), bytes, DataType::Uint8), pr.other, accl::SendOptions{})->wait();
      rw->wait();
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters * 1e6);
  }
  return best;
}

// CPU time (us) this process (every thread: the caller's and the progress
// thread) spends per message in `iters` exchanges of 8 bytes with its pair,
// each a message sent and one received and waited for, as a collective's
// step does: the messages' work and each step's waiting (a waiting rank on
// a machine whose ranks outnumber its CPUs yields, and its wake-ups and
// yields take CPU time too). Posting many messages at once before waiting
// halves the figure here (4 against 6-11 us between two namespace hosts):
// what a message costs alone, not what a step costs. The mean over the ranks
// that have a pair. Every rank calls it.
double cpuPerMessage(accl::ProcessGroup& pg, Pairing pr, int iters) {
  auto cpuUs = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  std::vector<char> out(8, 1), in(8);
  exchange(pg, pr, out, in, 8, 20, 1);  // warm-up
  double t0 = cpuUs();
  exchange(pg, pr, out, in, 8, iters, 1);  // a barrier, then the exchanges
  double mine[2] = {pr.other >= 0 ? (cpuUs() - t0) / (2.0 * iters) : 0.0, pr.other >= 0 ? 1.0 : 0.0};
  pg.allreduce(Buffer(mine, 2, DataType::Float64))->wait();
  return mine[1] > 0 ? mine[0] / mine[1] : 0;
}

// Time (us) for rank 0 to have `k` 8-byte messages to `peer` acknowledged
// (all posted at once, then one reply): the per-message overhead is the
// growth with k.
double burst(accl::ProcessGroup& pg, int peer, int k, int iters, int reps) {
  int me = pg.rank();
  std::vector<uint64_t> v(static_cast<size_t>(k) + 1);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      std::vector<std::shared_ptr<accl::Work>> w;
      if (me == 0) {
        for (int j = 0; j < k; ++j) w.push_back(pg.send(Buffer(&v[static_cast<size_t>(j)], 1, DataType::Uint64), peer, accl::SendOptions{}));
        for (auto& x : w) x->wait();
        pg.recv(Buffer(&v[static_cast<size_t>(k)], 1, DataType::Uint64), peer, accl::RecvOptions{})->wait();
      } else if (me == peer) {
        for (int j = 0; j < k; ++j) w.push_back(pg.recv(Buffer(&v[static_cast<size_t>(j)], 1, DataType::Uint64), 0, accl::RecvOptions{}));
        for (auto& x : w) x->wait();
        pg.send(Buffer(&v[static_cast<size_t>(k)], 1, DataType::Uint64), 0, accl::SendOptions{})->wait();
      }
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters * 1e6);
  }
  return best;
}

// Reduction time per byte (us) of a float32 sum on this core, out of cache
// (16 MiB inputs): two reads and a write per element, as the backend's
// reduction kernels do.
double reduceRate() {
  const size_t n = 4u << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double best = 1e300;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    for (size_t i = 0; i < n; ++i) pa[i] += pb[i];
    best = std::min(best, seconds(t0, Clock::now()));
  }
  if (a[n / 2] < 3.0f) std::fprintf(stderr, "accl-perf: --calibrate: the reduction loop went wrong\n");
  return best * 1e6 / static_cast<double>(n * sizeof(float));
}

}  // namespace

namespace {

// Time per byte (us): the least-squares slope of `us` over the sizes of at
// least 1 MiB; where noise makes it <= 0, the largest size's time alone.
double slopeFrom1MiB(const std::vector<size_t>& sizes, const std::vector<double>& us) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < (1u << 20)) continue;
    double xs = static_cast<double>(sizes[i]), y = us[i];
    sx += xs, sy += y, sxx += xs * xs, sxy += xs * y, ++m;
  }
  double beta = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  return beta > 0 ? beta : us.back() / static_cast<double>(sizes.back());
}

struct Measured {
  int peer = -1;
  std::vector<double> oneWay, exchanged;  // us per size
  double burst1 = 0, burst16 = 0;
  accl::core::LinkParams params;
};

const std::vector<size_t>& sizes() {
  // From one small frame to several chunks: the latency from the smallest,
  // the bandwidth from a least-squares line through the large ones.
  static const std::vector<size_t> s = {8, 1024, 65536, 1u << 20, 4u << 20, 16u << 20};
  return s;
}

// Every rank calls it; rank 0 and `peer` measure, rank 0's figures count.
// `pr`, where given, pairs every rank instead (rank 0 with `peer`): the pairs
// measure side by side, and the per-message overhead is not measured.
Measured measure(accl::ProcessGroup& pg, int peer, double gamma, const Pairing* pr = nullptr) {
  Measured r;
  r.peer = peer;
  Pairing mine = pr ? *pr : pairOf(pg.rank(), 0, peer);
  std::vector<char> buf(sizes().back()), buf2(sizes().back());
  for (size_t s : sizes()) {
    int iters = s <= 65536 ? 200 : s <= (1u << 20) ? 20 : 5;
    pingPong(pg, mine, buf, s, 3, 1);  // warm-up
    r.oneWay.push_back(pingPong(pg, mine, buf, s, iters, 5));
    r.exchanged.push_back(exchange(pg, mine, buf, buf2, s, iters, 5));
  }
  if (!pr) {
    r.burst1 = burst(pg, peer, 1, 100, 5);
    r.burst16 = burst(pg, peer, 16, 100, 5);
  }
  // Bandwidth: slope of the exchange's time over the sizes >= 1 MiB. The
  // collectives' steps send and receive at once, and a link (or the CPUs
  // that drive TCP) may not carry both directions at the one-way rate.
  r.params.alphaUs = r.oneWay.front();
  r.params.betaUsPerB = slopeFrom1MiB(sizes(), r.exchanged);
  r.params.gammaUsPerB = gamma;
  r.params.overheadUs = std::max(0.0, (r.burst16 - r.burst1) / 15);
  return r;
}

// The shared segment's allreduce among the ranks of rank 0's host
// (`members`, a group of their own): time (us) per size, the best of 5
// blocks. From 1 MiB the blocks go round the sizes (all of them, then all
// again): a slow spell of the machine then costs each size one block, not
// one size all of its blocks (size by size, two calibrations in a row on a
// 2-core VM put the segment at 2.2 and 10.4 GB/s). Every rank calls it;
// only members measure.
struct SegmentMeasured {
  int ranks = 0;
  std::vector<double> us;  // per segmentSizes()
  accl::core::LinkParams params;
};

const std::vector<size_t>& segmentSizes() {
  // Up to 64 MiB: past the cache of most hosts, as a 25 MiB DDP bucket's
  // input and output are (the model reads the time at each size).
  static const std::vector<size_t> s = {8, 65536, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  return s;
}

SegmentMeasured measureSegment(accl::ProcessGroup& pg, const std::vector<int>& members) {
  SegmentMeasured r;
  r.ranks = static_cast<int>(members.size());
  auto sub = pg.split(members);
  if (sub) {
    std::vector<float> buf(segmentSizes().back() / sizeof(float), 0.0f);  // sums stay 0: no overflow
    r.us.assign(segmentSizes().size(), 1e300);
    auto block = [&](size_t k, bool timed) {
      size_t s = segmentSizes()[k];
      size_t count = std::max<size_t>(1, s / sizeof(float));
      int iters = s <= 65536 ? 200 : s <= (1u << 20) ? 20 : 5;
      sub->barrier()->wait();
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) sub->allreduce(Buffer(buf.data(), count, DataType::Float32))->wait();
      if (timed) r.us[k] = std::min(r.us[k], seconds(t0, Clock::now()) / iters * 1e6);
    };
    // Below 1 MiB a block takes a millisecond or less: size by size, before
    // the large ones (a small op right after a block of 64 MiB ones ran at 7
    // us against 0.3: its waiters had gone to sleep).
    size_t k = 0;
    for (; k < segmentSizes().size() && segmentSizes()[k] < (1u << 20); ++k)
      for (int rep = 0; rep < 6; ++rep) block(k, rep > 0);  // the first block warms up
    for (int rep = 0; rep < 6; ++rep)  // the first round warms up
      for (size_t j = k; j < segmentSizes().size(); ++j) block(j, rep > 0);
    // alpha: the smallest; beta: the slope over >= 1 MiB.
    r.params = accl::core::LinkParams{r.us.front(), slopeFrom1MiB(segmentSizes(), r.us), 0.0, 0.0};
  }
  pg.barrier()->wait();
  return r;
}

// This process's host, as the accl backend tells hosts apart: ACCL_HOSTID,
// else the hostname and the network namespace.
std::string hostKey() {
  if (const char* id = std::getenv("ACCL_HOSTID"); id && *id) return id;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  return std::string(name) + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "");
}

// Every rank's `s`, cut or padded with zeros to `width` bytes, in rank order.
std::vector<char> gatherFixed(accl::ProcessGroup& pg, std::string s, size_t width) {
  s.resize(width, '\0');
  std::vector<char> all(width * static_cast<size_t>(pg.size()));
  pg.allgather(accl::Buffer(s.data(), width, accl::DataType::Uint8),
               accl::Buffer(all.data(), all.size(), accl::DataType::Uint8))
      ->wait();
  return all;
}

// The kernel's boot id: ranks with the same one run on one machine.
std::string readBootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

nlohmann::json pointsJson(const Measured& m) {
  nlohmann::json pts = nlohmann::json::array();
  for (size_t i = 0; i < sizes().size(); ++i)
    pts.push_back({{"bytes", sizes()[i]}, {"one_way_us", m.oneWay[i]}, {"exchange_us", m.exchanged[i]}});
  return {{"between_ranks", {0, m.peer}}, {"ping_pong", pts}, {"burst_us", {{"1", m.burst1}, {"16", m.burst16}}}};
}

void print(const char* what, const Measured& m) {
  std::printf("# %s: ranks 0 and %d\n#      bytes  one-way us  exchange us   model us\n", what, m.peer);
  for (size_t i = 0; i < sizes().size(); ++i)
    std::printf("%12zu  %10.2f  %11.2f %10.2f\n", sizes()[i], m.oneWay[i], m.exchanged[i],
                m.params.alphaUs + static_cast<double>(sizes()[i]) * m.params.betaUsPerB);
  std::printf("%s: alpha %.2f us, bandwidth %.3f GB/s, reduction %.3f GB/s, per-message overhead %.2f us\n", what,
              m.params.alphaUs, 1e-3 / m.params.betaUsPerB, 1e-3 / m.params.gammaUsPerB, m.params.overheadUs);
}

}  // namespace

int calibrate(accl::ProcessGroup& pg, const CalibrateArgs& a) {
  int n = pg.size(), me = pg.rank();
  if (n < 2 || (a.peer >= 0 && (a.peer == 0 || a.peer >= n))) {
    if (me == 0)
      std::fprintf(stderr, "accl-perf: --calibrate needs at least 2 ranks and a peer in 1..%d (got %d of %d ranks)\n",
                   n - 1, a.peer, n);
    return 2;
  }
  // Which ranks share rank 0's host: the link between hosts is measured with
  // the last rank on another host (or --calibrate-peer), the link within a
  // host with the first other rank on rank 0's.
  const size_t kKey = 256;
  std::vector<char> keys = gatherFixed(pg, hostKey(), kKey);
  auto sameHost = [&](int r) { return std::memcmp(&keys[0], &keys[kKey * static_cast<size_t>(r)], kKey) == 0; };
  int remote = -1, local = -1;
  for (int r = 1; r < n; ++r) {
    if (!sameHost(r)) remote = r;
    else if (local < 0) local = r;
  }
  int netPeer = a.peer >= 0 ? a.peer : remote >= 0 ? remote : n - 1;
  double gamma = reduceRate();
  Measured net = measure(pg, netPeer, gamma);
  Measured loc;
  bool haveLocal = local >= 0 && local != netPeer;
  if (haveLocal) loc = measure(pg, local, gamma);
  std::vector<int> hostRanks;
  for (int r = 0; r < n; ++r)
    if (sameHost(r)) hostRanks.push_back(r);
  // With several ranks on each of the two hosts: the link again with every
  // pair at once (the k-th rank of rank 0's host with the k-th of the
  // peer's), as the collectives between hosts use it.
  Measured shared;
  std::vector<int> peerRanks;
  auto peerHost = [&](int r) {
    return std::memcmp(&keys[kKey * static_cast<size_t>(netPeer)], &keys[kKey * static_cast<size_t>(r)], kKey) == 0;
  };
  for (int r = 0; r < n && remote >= 0; ++r)
    if (peerHost(r)) peerRanks.push_back(r);
  size_t pairs = std::min(hostRanks.size(), peerRanks.size());
  bool haveShared = remote >= 0 && pairs >= 2;
  // The k-th rank of rank 0's host with the k-th of the peer's (the others
  // unpaired); with one rank per host, rank 0 and the peer.
  Pairing across = haveShared ? Pairing{} : pairOf(me, 0, netPeer);
  for (size_t k = 0; haveShared && k < pairs; ++k) {
    if (me == hostRanks[k]) across = Pairing{peerRanks[k], true};
    if (me == peerRanks[k]) across = Pairing{hostRanks[k], false};
  }
  if (haveShared) {
    shared = measure(pg, peerRanks[0], gamma, &across);
    shared.params.overheadUs = net.params.overheadUs;
  }
  SegmentMeasured seg;
  if (hostRanks.size() >= 2) seg = measureSegment(pg, hostRanks);
  // The CPUs the ranks of a host share: rank 0's machine (its kernel's boot
  // id) and the CPUs its affinity allows, divided among the hosts whose ranks
  // run on it (namespace hosts of one machine share its cores). Where the
  // machine's ranks outnumber its CPUs, what a message costs them is
  // measured (process CPU time over 8-byte exchanges, every pair at once);
  // elsewhere the per-message overheads stand for it (waiting ranks spin
  // there, so CPU time would count the spinning).
  const size_t kBoot = 64;
  std::vector<char> boots = gatherFixed(pg, readBootId(), kBoot);
  auto sameMachine = [&](int r) { return std::memcmp(&boots[0], &boots[kBoot * static_cast<size_t>(r)], kBoot) == 0; };
  int machineRanks = 0;
  std::vector<std::string> machineHosts;
  for (int r = 0; r < n; ++r) {
    if (!sameMachine(r)) continue;
    ++machineRanks;
    std::string k(&keys[kKey * static_cast<size_t>(r)], kKey);
    if (std::find(machineHosts.begin(), machineHosts.end(), k) == machineHosts.end()) machineHosts.push_back(k);
  }
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  double cpus0 = cpus;
  pg.broadcast(accl::Buffer(&cpus0, 1, accl::DataType::Float64), accl::BroadcastOptions{})->wait();  // rank 0's figure for every rank
  const bool oversubscribed = machineRanks > cpus0;
  double cpuNet = 0, cpuLocal = 0;
  if (oversubscribed) {
    cpuNet = cpuPerMessage(pg, across, 2000);
    // Within hosts: the ranks of each host in pairs, in rank order.
    Pairing within;
    int prev = -1;
    for (int r = 0; r < n; ++r) {
      if (std::memcmp(&keys[kKey * static_cast<size_t>(me)], &keys[kKey * static_cast<size_t>(r)], kKey) != 0) continue;
      if (prev < 0) {
        prev = r;
      } else {
        if (me == prev) within = Pairing{r, true};
        if (me == r) within = Pairing{prev, false};
        prev = -1;
      }
    }
    if (haveLocal) cpuLocal = cpuPerMessage(pg, within, 2000);
  }
  if (me != 0) {
    pg.barrier()->wait();
    return 0;
  }
  accl::core::CostModel model = accl::core::CostModel::defaults(a.transport, 0);
  model.transport = a.transport;
  model.link() = net.params;
  if (haveLocal) model.local() = loc.params;
  else if (remote < 0) model.local() = net.params;  // one host: the same link
  else model.local().gammaUsPerB = gamma;
  if (seg.ranks >= 2) {
    model.segment() = seg.params;
    model.setSegmentRanks(seg.ranks);
    std::vector<std::pair<double, double>> curve;
    for (size_t i = 0; i < segmentSizes().size(); ++i) curve.push_back({static_cast<double>(segmentSizes()[i]), seg.us[i]});
    model.setSegmentCurve(curve);
  }
  if (haveShared) {
    model.linkShared() = shared.params;
    model.setSharedRanks(static_cast<int>(pairs));
  }
  model.cpu().machineCpus = cpus0;
  model.cpu().hostsPerMachine = static_cast<int>(machineHosts.size());
  model.cpu().usPerMessage = oversubscribed ? cpuNet : model.link().overheadUs;
  model.cpu().usPerLocalMessage = oversubscribed && haveLocal ? cpuLocal : model.local().overheadUs;
  nlohmann::json j = nlohmann::json::parse(model.toJson());
  j["measured"] = {{"backend", pg.backendName()},
                   {"ranks", n},
                   {"link", pointsJson(net)},
                   {"method", "alpha: one-way time of 8 B (half a round trip, best of 5 blocks); beta: least-squares "
                              "slope over 1-16 MiB of the time of an exchange (both ranks send and receive at once); "
                              "gamma: float32 sum of 16 MiB on one core; overhead: growth of a burst of 16 8-byte "
                              "sends over 1, per message; link_shared: alpha and beta so measured with every pair of ranks of the two "
                              "hosts at once (the k-th of each), overhead as the link's"}};
  if (haveLocal) j["measured"]["local"] = pointsJson(loc);
  j["measured"]["cpu"] = {{"machine_cpus", cpus0},
                          {"machine_ranks", machineRanks},
                          {"machine_hosts", machineHosts.size()},
                          {"method", oversubscribed
                                         ? "the machine's ranks outnumber its CPUs: us_per_message and "
                                           "us_per_local_message are process CPU time (getrusage) per message over "
                                           "2000 exchanges of 8 B, every pair at once"
                                         : "each rank has a CPU: us_per_message and us_per_local_message are the "
                                           "links' per-message overheads"}};
  if (haveShared) {
    j["measured"]["link_shared"] = pointsJson(shared);
    j["measured"]["link_shared"]["pairs"] = pairs;
    j["measured"]["link_shared"].erase("burst_us");
  }
  if (seg.ranks >= 2) {
    // The measured points are the model's curve (toJson wrote them as segment_curve).
    j["measured"]["segment"] = {{"ranks", seg.ranks},
                                {"allreduce", j["segment_curve"]},
                                {"method", "in-place float32 allreduce of the host's ranks, best of 5 blocks "
                                           "(after one of warm-up); from 1 MiB in rounds that each go over every "
                                           "size once"}};
  }
  std::ofstream f(a.file);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "accl-perf: --calibrate: cannot write %s\n", a.file.c_str());
    pg.barrier()->wait();
    return 1;
  }
  std::printf("# calibration (%s backend; the link between hosts recorded as %s)\n", pg.backendName().c_str(),
              a.transport.c_str());
  if (remote < 0 && a.peer < 0)
    std::printf("# every rank is on rank 0's host: \"link\" is this host's transport, not a link between hosts\n");
  print("between hosts", net);
  if (haveShared) {
    std::printf("# the same link with %zu pairs of ranks crossing it at once (overhead as above)\n", pairs);
    print("between hosts, shared", shared);
  }
  if (haveLocal) print("within a host", loc);
  else if (remote >= 0)
    std::printf("within a host: no other rank on rank 0's host; the default (alpha %.1f us, %.2f GB/s) stays\n",
                model.local().alphaUs, 1e-3 / model.local().betaUsPerB);
  std::printf("cpu: %.2f cores per host (%g CPUs, %d ranks, %zu hosts on rank 0's machine), %.2f us per message "
              "between hosts, %.2f within (%s)\n",
              cpus0 / static_cast<double>(machineHosts.size()), cpus0, machineRanks, machineHosts.size(), model.cpu().usPerMessage,
              model.cpu().usPerLocalMessage, oversubscribed ? "CPU time measured: its ranks outnumber its CPUs"
                                                            : "the overheads: every rank has a CPU");
  if (seg.ranks >= 2) {
    std::printf("# shared segment: allreduce among the %d ranks of rank 0's host (best of 5 blocks; from 1 MiB in rounds over the sizes)\n"
                "#      bytes  measured us    line us\n",
                seg.ranks);
    for (size_t i = 0; i < segmentSizes().size(); ++i)
      std::printf("%12zu  %11.2f %10.2f\n", segmentSizes()[i], seg.us[i],
                  seg.params.alphaUs + static_cast<double>(segmentSizes()[i]) * seg.params.betaUsPerB);
    std::printf("shared segment: alpha %.2f us, bandwidth %.3f GB/s (%d ranks); the model takes the time at each "
                "size from the points above (segment_curve), the line only for files without them\n",
                seg.params.alphaUs, 1e-3 / seg.params.betaUsPerB, seg.ranks);
  }
  std::printf("wrote %s: ACCL_TUNING_FILE=%s lets the accl backend choose by this model; accl-info --plan shows "
              "its choices\n",
              a.file.c_str(), a.file.c_str());
  pg.barrier()->wait();
  return 0;
}

}  // namespace accl_perf
