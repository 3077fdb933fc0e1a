// Soak and load: random collectives and point-to-point rings, in flight
// together on three process groups from two threads per rank, every result
// checked against the conformance checker's reference, and the process's
// resident memory and open file descriptors sampled: both must stay flat once
// warmed up.
//
//   accl-run -n 4 accl_soak [--backend accl] [--seconds S | --ops N]
//                           [--max-bytes B] [--seed K] [--report S]
//
// Groups (4 ranks): the world; a half (even ranks, odd ranks); a pair
// ({0,1}, {2,3}). Thread 0 issues on the world; thread 1 alternates half and
// pair. Each group draws its op sequence from a generator seeded by the group,
// so every member issues the same case at the same step. Each thread keeps up
// to 8 ops in flight and waits on a random one of them at random points, with
// an occasional pause of up to 2 ms. When to stop is agreed every 32 steps by
// an allreduce(MAX) on a control group of the thread's own (a time limit seen
// by any rank stops all of them at the same step).
//
// Exit status: 0 when every result matched and memory and descriptors were
// flat; 1 otherwise (each wrong result is printed with its case).
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "accl/registry.h"
#include "accl/store.h"
#include "checker.h"

using namespace accl;
using namespace accl::conformance;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string backend = "accl";
  double seconds = 30;
  uint64_t ops = 0;  // per thread; 0: run for `seconds`
  size_t maxBytes = 64u << 20;
  uint64_t seed = 1;
  double report = 0;  // seconds between progress lines; 0: none
  uint64_t leakFdEvery = 0;  // self-test: leak a descriptor every N steps
  uint64_t leakMibEvery = 0;  // self-test: leak 1 MiB (touched) every N steps
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "accl_soak: %s\nusage: accl_soak [--backend NAME] [--seconds S | --ops N] [--max-bytes B] "
               "[--seed K] [--report S] [--leak-fd-every N | --leak-mib-every N (self-tests)]\n",
               why);
  std::exit(2);
}

double number(const char* flag, const char* v) {
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end || !(d >= 0)) usage((std::string(flag) + " takes a number >= 0, not '" + v + "'").c_str());
  return d;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (i + 1 >= argc) usage(("unknown or incomplete argument '" + f + "'").c_str());
    const char* v = argv[++i];
    if (f == "--backend") a.backend = v;
    else if (f == "--seconds") a.seconds = number("--seconds", v);
    else if (f == "--ops") a.ops = static_cast<uint64_t>(number("--ops", v));
    else if (f == "--max-bytes") a.maxBytes = static_cast<size_t>(number("--max-bytes", v));
    else if (f == "--seed") a.seed = static_cast<uint64_t>(number("--seed", v));
    else if (f == "--report") a.report = number("--report", v);
    else if (f == "--leak-fd-every") a.leakFdEvery = static_cast<uint64_t>(number("--leak-fd-every", v));
    else if (f == "--leak-mib-every") a.leakMibEvery = static_cast<uint64_t>(number("--leak-mib-every", v));
    else usage(("unknown argument '" + f + "'").c_str());
  }
  return a;
}

// Private resident memory (bytes) and open descriptors of this process. The
// private part only (RssAnon): the shared-memory segment's pages count as
// resident as the ops first touch them, up to its fixed size, and the
// libraries' file pages as the code first runs; neither can leak.
size_t residentBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;  // "RssAnon:  123 kB"
  std::ifstream m("/proc/self/statm");  // kernels before 4.5: the whole resident set
  size_t total = 0, resident = 0;
  m >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}
int openFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
    --n;  // the directory stream itself
  }
  return n;
}

const std::vector<OpType> kOps = {OpType::Allreduce,     OpType::Reduce,         OpType::Broadcast,
                                  OpType::Allgather,     OpType::Allgatherv,     OpType::ReduceScatter,
                                  OpType::ReduceScatterv, OpType::Alltoall,      OpType::Alltoallv,
                                  OpType::Gather,        OpType::Scatter,        OpType::Barrier,
                                  OpType::Send};

// Buffers an op's count multiplies by the group size (per-rank chunks).
bool chunked(OpType op) {
  switch (op) {
    case OpType::Allgather: case OpType::Allgatherv: case OpType::ReduceScatter: case OpType::ReduceScatterv:
    case OpType::Alltoall: case OpType::Alltoallv: case OpType::Gather: case OpType::Scatter:
      return true;
    default:
      return false;
  }
}

// One group as seen by the thread that drives it: the same generator on every member.
struct Driven {
  const char* name;
  std::shared_ptr<ProcessGroup> pg;
  std::mt19937_64 rng;
  uint64_t ops = 0, bytes = 0;
};

// A random case for `d`'s next step: op, dtype, reduction, root, in-place and
// a size from 0 B to maxBytes (per rank): most small, some medium, a few
// large, each band log-uniform.
Case nextCase(Driven& d, size_t maxBytes) {
  auto& r = d.rng;
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(r); };
  Case c;
  c.op = kOps[r() % kOps.size()];
  auto types = allDataTypes();
  c.dtype = types[r() % types.size()];
  auto reds = validReductions(c.dtype);
  ReduceKind k = reds[r() % reds.size()];
  c.reduce = k == ReduceKind::PremulSum ? ReduceOp::premulSum(uni(-2, 2)) : ReduceOp(k);
  c.root = static_cast<int>(r() % static_cast<uint64_t>(d.pg->size()));
  c.inPlace = r() % 2;
  c.seed = r();
  double band = uni(0, 1), bytes;
  double top = std::log(static_cast<double>(std::max<size_t>(maxBytes, 2)));
  if (band < 0.03) bytes = 0;
  else if (band < 0.75) bytes = std::exp(uni(0, std::min(top, std::log(4096.0))));
  else if (band < 0.98) bytes = std::exp(uni(std::min(top, std::log(4096.0)), std::min(top, std::log(1048576.0))));
  else bytes = std::exp(uni(std::min(top, std::log(1048576.0)), top));
  size_t count = static_cast<size_t>(bytes) / dataTypeSize(c.dtype);
  if (chunked(c.op)) count /= static_cast<size_t>(d.pg->size());
  c.count = count;
  return c;
}

struct Shared {
  Args args;
  Clock::time_point start;
  std::atomic<uint64_t> wrong{0}, issued{0};
  // Bytes of the ops' own buffers allocated and not yet freed (both threads):
  // the sampler takes them off the resident size, so that what it compares
  // is the memory of everything else (the library's above all).
  std::atomic<int64_t> live{0};
  std::mutex printMu;
  int worldRank = 0;
};

void report(Shared& sh, const Case& c, const std::string& group, const std::vector<std::string>& errs) {
  std::lock_guard<std::mutex> lock(sh.printMu);
  std::fprintf(stderr, "accl_soak: rank %d, group %s: WRONG %s\n", sh.worldRank, group.c_str(), c.describe().c_str());
  for (auto& e : errs) std::fprintf(stderr, "  %s\n", e.c_str());
}

// A thread's ops in flight, bounded as in the run: at most 8, and buffers of
// at most 4 x --max-bytes (plus a little for tiny ops). Each result is
// checked when its op is finished; its buffers count in `sh.live` meanwhile.
class InFlightOps {
 public:
  explicit InFlightOps(Shared& sh) : sh_(sh) {}
  size_t size() const { return ops_.size(); }
  // Issues `c` on `pg`, first finishing the oldest ops until it fits.
  void start(ProcessGroup& pg, const Case& c, std::string group) {
    size_t bytes = c.count * dataTypeSize(c.dtype) * (chunked(c.op) ? static_cast<size_t>(pg.size()) + 1 : 2);
    while (!ops_.empty() && (ops_.size() >= 8 || held_ + bytes > 4 * sh_.args.maxBytes + 4096)) finish(0);
    sh_.live += static_cast<int64_t>(bytes);  // counted before they exist: never less than what is allocated
    ops_.push_back({startCase(pg, c), c, std::move(group), bytes});
    held_ += bytes;
  }
  // Waits for the i-th op in flight (oldest first), checks it and frees its buffers.
  void finish(size_t i) {
    auto it = ops_.begin() + static_cast<long>(i);
    auto errs = it->p.finish();
    if (!errs.empty()) {
      sh_.wrong++;
      report(sh_, it->c, it->group, errs);
    }
    size_t bytes = it->bytes;
    held_ -= bytes;
    ops_.erase(it);  // frees the case's buffers
    sh_.live -= static_cast<int64_t>(bytes);
  }
  void finishAll() {
    while (!ops_.empty()) finish(0);
  }

 private:
  struct Op {
    PendingCase p;
    Case c;
    std::string group;
    size_t bytes;
  };
  Shared& sh_;
  std::deque<Op> ops_;
  size_t held_ = 0;
};

// A thread's loop over its groups (taken in turn), with `ctl` for the stop decision.
void drive(Shared& sh, std::vector<Driven>& groups, ProcessGroup& ctl, uint64_t threadSeed) {
  std::mt19937_64 local(threadSeed);  // when to wait and pause: differs per rank
  InFlightOps inFlight(sh);
  for (uint64_t step = 0;; ++step) {
    if (step % 32 == 0) {
      // Agree on stopping: any rank past the limit stops every rank here.
      bool mine = sh.args.ops ? step >= sh.args.ops
                              : std::chrono::duration<double>(Clock::now() - sh.start).count() >= sh.args.seconds;
      int32_t flag = mine ? 1 : 0;
      AllreduceOptions o;
      o.op = ReduceKind::Max;
      ctl.allreduce(Buffer(&flag, 1, DataType::Int32), o)->wait();
      if (flag) break;
    }
    // The self-test of the descriptor check: a leak it must report.
    if (sh.args.leakFdEvery && step % sh.args.leakFdEvery == 0) {
      int leaked = open("/dev/null", O_RDONLY);
      (void)leaked;
    }
    if (sh.args.leakMibEvery && step % sh.args.leakMibEvery == 0) {
      char* leaked = static_cast<char*>(std::malloc(1u << 20));
      if (leaked) std::memset(leaked, 1, 1u << 20);  // resident, and never freed
    }
    Driven& d = groups[step % groups.size()];
    Case c = nextCase(d, sh.args.maxBytes);
    inFlight.start(*d.pg, c, d.name);
    d.ops++;
    d.bytes += c.count * dataTypeSize(c.dtype);
    sh.issued++;
    // Random waits: sometimes on a random op in flight, sometimes on all of them.
    uint64_t x = local() % 100;
    if (x < 25) inFlight.finish(local() % inFlight.size());
    else if (x < 30) inFlight.finishAll();
    if (local() % 200 == 0) std::this_thread::sleep_for(std::chrono::microseconds(local() % 2000));
  }
  inFlight.finishAll();
}

// Warm-up, before anything is sampled, on each of `groups`.
// - Two messages of --max-bytes that arrive before their receives are posted.
//   The transport holds each in a buffer of its own and keeps the two
//   largest such buffers for reuse (the matcher's spares). Without this
//   they grew whenever the random steps first left a large message
//   unexpected, over minutes: in 20 s runs the memory less the ops' buffers
//   rose by 0.2-10.2 MiB between the halves; with it, 51 of 56 rank-runs by
//   -4.1..+3.5 MiB, the other five by 6.4-14.4 (docs/testing.md).
// - Before them, every op once at --max-bytes, in flight as in the run
//   (alone, this did not change that growth). Results are checked.
void warmUp(Shared& sh, std::vector<Driven>& groups) {
  for (auto& d : groups) {
    InFlightOps inFlight(sh);
    for (size_t i = 0; i < kOps.size(); ++i) {
      Case c;
      c.op = kOps[i];
      c.dtype = DataType::Float32;
      c.root = static_cast<int>(i % static_cast<size_t>(d.pg->size()));
      c.inPlace = i % 2;
      c.seed = 7 + i;
      c.count = sh.args.maxBytes / 4 / (chunked(c.op) ? static_cast<size_t>(d.pg->size()) : 1);
      inFlight.start(*d.pg, c, std::string(d.name) + " (warm-up)");
    }
    inFlight.finishAll();
    int n = d.pg->size(), me = d.pg->rank();
    if (n < 2) continue;  // a group of one (the half of a 2-rank job) sends to no one
    std::vector<char> out(sh.args.maxBytes, 1), in1(sh.args.maxBytes), in2(sh.args.maxBytes);
    SendOptions s1, s2;
    s1.tag = 901;
    s2.tag = 902;
    auto a = d.pg->send(Buffer(out.data(), out.size(), DataType::Uint8), (me + 1) % n, s1);
    auto b = d.pg->send(Buffer(out.data(), out.size(), DataType::Uint8), (me + 1) % n, s2);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    RecvOptions r1, r2;
    r1.tag = 901;
    r2.tag = 902;
    auto c = d.pg->recv(Buffer(in1.data(), in1.size(), DataType::Uint8), (me + n - 1) % n, r1);
    auto e = d.pg->recv(Buffer(in2.data(), in2.size(), DataType::Uint8), (me + n - 1) % n, r2);
    for (auto* w : {&a, &b, &c, &e}) (*w)->wait();
    if (in1 != out || in2 != out) {
      sh.wrong++;
      std::fprintf(stderr, "accl_soak: rank %d, group %s (warm-up): WRONG data in the held messages\n", sh.worldRank,
                   d.name);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
#ifdef __GLIBC__
  // Buffers from 256 KiB are mapped and unmapped at free: the resident size
  // follows the live buffers instead of keeping the largest heap ever needed
  // (glibc raises its threshold after each large free otherwise).
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
#endif
  Shared sh;
  sh.args = args;
  std::shared_ptr<ProcessGroup> world, half, pair, ctl0, ctl1;
  int size = 0;
  try {
    Rendezvous rv = rendezvousFromEnv();
    auto store = std::make_shared<PrefixStore>("soak", rv.store);
    world = createProcessGroup(args.backend, store, rv.rank, rv.size);
    sh.worldRank = rv.rank;
    size = rv.size;
    if (size < 2 || size % 2) usage("needs an even number of ranks (4 recommended)");
    std::vector<int> all, even, odd;
    for (int r = 0; r < size; ++r) {
      all.push_back(r);
      (r % 2 ? odd : even).push_back(r);
    }
    ctl0 = world->split(all);
    ctl1 = world->split(all);
    auto e = world->split(even), o = world->split(odd);
    half = e ? e : o;
    for (int r = 0; r < size; r += 2) {
      auto p = world->split({r, r + 1});
      if (p) pair = p;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl_soak: set-up failed: %s\n", e.what());
    return 1;
  }
  const int me = sh.worldRank;
  // Each group's generator is seeded by the group, so all its members agree.
  std::vector<Driven> t0{{"world", world, std::mt19937_64(args.seed * 1000 + 1)}};
  std::vector<Driven> t1{{"half", half, std::mt19937_64(args.seed * 1000 + 100 + static_cast<uint64_t>(me % 2))},
                         {"pair", pair, std::mt19937_64(args.seed * 1000 + 200 + static_cast<uint64_t>(me / 2))}};

  // Sampler: resident memory and descriptors once a second (and at the end).
  struct Sample {
    double t;
    size_t rss;   // resident size
    size_t rest;  // resident size less the ops' own live buffers
    int fds;
  };
  std::vector<Sample> samples;
  std::mutex sampleMu;
  std::atomic<bool> done{false};
  try {
    warmUp(sh, t0);
    warmUp(sh, t1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl_soak: rank %d: warm-up failed: %s\n", me, e.what());
    return 1;
  }
  sh.start = Clock::now();
  auto sampleNow = [&] {
    std::lock_guard<std::mutex> lock(sampleMu);
    size_t rss = residentBytes();
    int64_t live = std::max<int64_t>(0, sh.live.load());
    size_t rest = rss > static_cast<size_t>(live) ? rss - static_cast<size_t>(live) : 0;
    samples.push_back({std::chrono::duration<double>(Clock::now() - sh.start).count(), rss, rest, openFds()});
  };
  std::thread sampler([&] {
    double lastReport = 0;
    uint64_t lastIssued = 0;
    while (!done) {
      sampleNow();
      double t = std::chrono::duration<double>(Clock::now() - sh.start).count();
      if (args.report > 0 && me == 0 && t - lastReport >= args.report) {
        uint64_t n = sh.issued;
        std::lock_guard<std::mutex> lock(sh.printMu);
        std::printf("accl_soak: t=%.0f s  ops issued by rank 0: %llu (%.0f/s)  wrong: %llu  rss %.1f MiB  fds %d\n", t,
                    static_cast<unsigned long long>(n), (n - lastIssued) / std::max(1e-9, t - lastReport),
                    static_cast<unsigned long long>(sh.wrong.load()), samples.back().rss / 1048576.0,
                    samples.back().fds);
        std::fflush(stdout);
        lastReport = t;
        lastIssued = n;
      }
      for (int i = 0; i < 10 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  std::atomic<int> failed{0};
  auto guarded = [&](std::vector<Driven>& g, ProcessGroup& ctl, uint64_t seed) {
    try {
      drive(sh, g, ctl, seed);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(sh.printMu);
      std::fprintf(stderr, "accl_soak: rank %d: a thread failed: %s\n", me, e.what());
      failed++;
    }
  };
  std::thread a([&] { guarded(t0, *ctl0, args.seed * 7919 + static_cast<uint64_t>(me) * 2); });
  std::thread b([&] { guarded(t1, *ctl1, args.seed * 7919 + static_cast<uint64_t>(me) * 2 + 1); });
  a.join();
  b.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - sh.start).count();
  done = true;
  sampler.join();
  sampleNow();

  // Flat after warm-up: the samples after the first quarter of the run are
  // split in two halves. The later half's peak resident memory, less the ops'
  // own buffers in flight at each sample, may exceed the peak before it
  // (warm-up included) by at most 10 % + max(16 MiB, 2 x --max-bytes) (the
  // copies an op's check and the transports make while it runs). Its
  // descriptor count may not exceed the earlier half's at all.
  int rc = 0;
  std::vector<Sample> post;
  for (auto& s : samples)
    if (s.t >= elapsed / 4) post.push_back(s);
  size_t rssA = 0, rssB = 0;
  int fdA = 0, fdB = 0;
  double mid = post.empty() ? 0 : post[post.size() / 2].t;
  for (auto& s : samples) {
    if (s.t < mid) rssA = std::max(rssA, s.rest);
    else rssB = std::max(rssB, s.rest);
  }
  for (size_t i = 0; i < post.size(); ++i) {
    bool later = i >= post.size() / 2;
    (later ? fdB : fdA) = std::max(later ? fdB : fdA, post[i].fds);
  }
  bool enough = post.size() >= 4;
  size_t slack = rssA / 10 + std::max<size_t>(16u << 20, 2 * args.maxBytes);
  bool rssFlat = !enough || rssB <= rssA + slack;
  bool fdFlat = !enough || fdB <= fdA;
  uint64_t ops = 0, bytes = 0;
  for (auto* v : {&t0, &t1})
    for (auto& d : *v) {
      ops += d.ops;
      bytes += d.bytes;
    }
  {
    std::lock_guard<std::mutex> lock(sh.printMu);
    std::printf(
        "accl_soak: rank %d: %llu ops (world %llu, half %llu, pair %llu) in %.1f s, %.0f ops/s, %.2f GiB per-rank "
        "payload, %llu wrong; rss less the ops' buffers, peak %.1f -> %.1f MiB%s, fds peak %d -> %d%s\n",
        me, static_cast<unsigned long long>(ops), static_cast<unsigned long long>(t0[0].ops),
        static_cast<unsigned long long>(t1[0].ops), static_cast<unsigned long long>(t1[1].ops), elapsed,
        ops / std::max(elapsed, 1e-9), bytes / 1073741824.0, static_cast<unsigned long long>(sh.wrong.load()),
        rssA / 1048576.0, rssB / 1048576.0, rssFlat ? "" : " (GROWING)", fdA, fdB, fdFlat ? "" : " (GROWING)");
    if (!enough) std::printf("accl_soak: rank %d: run too short to judge memory and descriptors (%zu samples)\n", me, post.size());
  }
  if (sh.wrong || failed || !rssFlat || !fdFlat) rc = 1;
  try {
    world->barrier()->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl_soak: rank %d: final barrier failed: %s\n", me, e.what());
    rc = 1;
  }
  return rc;
}
