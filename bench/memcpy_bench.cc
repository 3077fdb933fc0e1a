// The physical limit of shared-memory collectives on this host: memcpy
// bandwidth with 1 and 2 threads. Prints "threads bytes GB/s" lines.
//
//   accl-memcpy-bench [BYTES [REPS]] [--cma]
//
// --cma also prints what a single-copy transfer costs beside a plain copy of
// the same bytes on one thread: process_vm_readv (the kernel pins every page
// of the source, then copies) from buffers of 4 KiB pages and from buffers
// backed by 2 MiB transparent huge pages (madvise; "thp unavailable" where the
// kernel gives none), as "cma-4k|cma-thp|copy-4k|copy-thp bytes GB/s" lines.
//
//   accl-memcpy-bench --cross-core [BYTES] [--cpus A,B] [--seconds S]
//
// What a message costs that one core writes and another reads, the way the
// shm transport moves it (default 128 KiB; the CPUs: the first two this
// process may run on). One thread on each CPU hands messages to the other in
// turn through a buffer of 8 messages, in three ways, a third of a second
// each, round after round for S seconds (default 6):
// - plain:     the writer copies the message in with plain stores, the
//              reader copies it out (the lines move from core to core);
// - streamed:  the writer uses non-temporal stores (the reader takes the
//              lines from memory);
// - unchanged: the reader copies a buffer that was written once (what a
//              single-copy transfer of an input that never changes costs,
//              as in a benchmark that sends the same buffer again and again).
// Each round prints "cross-core WAY bytes us_per_message write_us read_us
// GB/s wrong" (wrong: messages whose stamps the reader did not find).
// Rounds that differ by 2x and more in the plain way show a host whose
// cores move lines between them at a rate that changes while it runs (a
// VM whose virtual CPUs the host moves between its core complexes).
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "transport/copy.h"

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Anonymous memory of `bytes`, 2 MiB-aligned; with huge pages asked for when `thp`.
char* mapBuffer(size_t bytes, bool thp) {
  size_t align = size_t(2) << 20, len = bytes + align;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char* a = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + align - 1) & ~(align - 1));
  if (thp) madvise(a, bytes, MADV_HUGEPAGE);
  std::memset(a, 1, bytes);
  return a;
}

// Whether the kernel backs [p, p + bytes) with huge pages (AnonHugePages of its mapping).
bool hasHugePages(const void* p) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return false;
  char line[512];
  bool inside = false, huge = false;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = a >= lo && a < hi;
      continue;
    }
    long kb;
    if (inside && std::sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) huge = kb > 0;
  }
  std::fclose(f);
  return huge;
}

void cmaRows(size_t bytes, int reps) {
  for (bool thp : {false, true}) {
    char* src = mapBuffer(bytes, thp);
    char* dst = mapBuffer(bytes, thp);
    const char* tag = thp ? "thp" : "4k";
    if (!src || !dst) {
      std::printf("cma-%s %zu unavailable (mmap failed)\n", tag, bytes);
      continue;
    }
    if (thp && !(hasHugePages(src) && hasHugePages(dst))) {
      std::printf("cma-thp %zu thp unavailable\n", bytes);
      continue;
    }
    double cma = 1e30, copy = 1e30;
    for (int r = 0; r < reps; ++r) {
      iovec l{dst, bytes}, rm{src, bytes};
      auto t0 = std::chrono::steady_clock::now();
      if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != static_cast<ssize_t>(bytes)) {
        std::printf("cma-%s %zu unavailable (process_vm_readv: %s)\n", tag, bytes, std::strerror(errno));
        return;
      }
      cma = std::min(cma, seconds(t0));
      t0 = std::chrono::steady_clock::now();
      std::memcpy(dst, src, bytes);
      copy = std::min(copy, seconds(t0));
    }
    std::printf("cma-%s %zu %.3f\n", tag, bytes, bytes / cma / 1e9);
    std::printf("copy-%s %zu %.3f\n", tag, bytes, bytes / copy / 1e9);
  }
}

// The CPUs this process may run on.
std::vector<int> cpusAllowed() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}
std::string allowedCpus() {
  std::string s;
  for (int c : cpusAllowed()) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s.empty() ? "none" : s;
}

bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Message k's stamp: its first and last 8 bytes hold k (the reader checks
// both after its copy, so a message read before it was whole counts as wrong).
void stamp(char* m, size_t bytes, uint64_t k) {
  std::memcpy(m, &k, 8);
  std::memcpy(m + bytes - 8, &k, 8);
}
bool stamped(const char* m, size_t bytes, uint64_t k) {
  uint64_t a, b;
  std::memcpy(&a, m, 8);
  std::memcpy(&b, m + bytes - 8, 8);
  return a == k && b == k;
}

enum Way { kPlain = 0, kStreamed = 1, kUnchanged = 2 };
const char* const kWayNames[] = {"plain", "streamed", "unchanged"};

int crossCore(size_t bytes, int writerCpu, int readerCpu, double duration) {
  constexpr int kSlots = 8;
  constexpr double kTurn = 0.33;
  size_t stride = (bytes + 63) & ~size_t(63);
  std::vector<char> ringMem(stride * kSlots + 64), src(bytes), dst(bytes), fixed(bytes, 3);
  char* ring = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ringMem.data()) + 63) & ~uintptr_t(63));
  for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 31 + 7);
  // The turn word: even, the writer's (message k = turn / 2 is next); odd,
  // the reader's. `way` and `stop` change only while the writer holds it.
  alignas(64) std::atomic<uint64_t> turn{0};
  std::atomic<int> way{kPlain};
  std::atomic<bool> stop{false};
  std::atomic<int> readerReady{0};  // 1: pinned; -1: could not be
  std::atomic<uint64_t> wrong{0};
  std::atomic<double> readSeconds{0};
  std::thread reader([&] {
    readerReady = pinTo(readerCpu) ? 1 : -1;
    if (readerReady < 0) return;
    for (uint64_t t = 1;; t += 2) {
      while (turn.load(std::memory_order_acquire) != t)
        if (stop.load(std::memory_order_relaxed)) return;
      uint64_t k = t / 2;
      int w = way.load(std::memory_order_relaxed);
      const char* m = w == kUnchanged ? fixed.data() : ring + (k % kSlots) * stride;
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), m, bytes);
      readSeconds.store(readSeconds.load(std::memory_order_relaxed) + seconds(t0), std::memory_order_relaxed);
      if (w != kUnchanged && !stamped(dst.data(), bytes, k)) wrong.fetch_add(1, std::memory_order_relaxed);
      turn.store(t + 1, std::memory_order_release);
    }
  });
  std::string allowed = allowedCpus();
  bool writerPinned = pinTo(writerCpu);
  while (readerReady.load() == 0) {
  }
  if (!writerPinned || readerReady < 0) {
    stop = true;
    reader.join();
    std::fprintf(stderr, "accl-memcpy-bench: cannot run threads on CPUs %d and %d (this process may run on: %s)\n",
                 writerCpu, readerCpu, allowed.c_str());
    return 2;
  }
  std::printf("# cross-core way bytes us_per_message write_us read_us GB/s wrong (writer CPU %d, reader CPU %d)\n",
              writerCpu, readerCpu);
  uint64_t t = 0;
  auto begin = std::chrono::steady_clock::now();
  bool first = true;
  while (first || seconds(begin) < duration) {
    first = false;
    for (int w = kPlain; w <= kUnchanged; ++w) {
      while (turn.load(std::memory_order_acquire) != t) {
      }
      way.store(w, std::memory_order_relaxed);
      readSeconds.store(0, std::memory_order_relaxed);
      wrong.store(0, std::memory_order_relaxed);
      double writeSeconds = 0;
      uint64_t n = 0;
      auto t0 = std::chrono::steady_clock::now();
      while (n < 3 || seconds(t0) < kTurn) {
        while (turn.load(std::memory_order_acquire) != t) {
        }
        uint64_t k = t / 2;
        if (w != kUnchanged) {
          char* m = ring + (k % kSlots) * stride;
          stamp(src.data(), bytes, k);
          auto w0 = std::chrono::steady_clock::now();
          accl::internal::copyWay(m, src.data(), bytes, w == kStreamed);
          writeSeconds += seconds(w0);
        }
        turn.store(t + 1, std::memory_order_release);
        t += 2;
        ++n;
      }
      while (turn.load(std::memory_order_acquire) != t) {
      }
      double total = seconds(t0);
      std::printf("cross-core %s %zu %.2f %.2f %.2f %.3f %llu\n", kWayNames[w], bytes, total / n * 1e6,
                  writeSeconds / n * 1e6, readSeconds.load() / n * 1e6, bytes * n / total / 1e9,
                  static_cast<unsigned long long>(wrong.load()));
      std::fflush(stdout);
    }
  }
  stop = true;
  reader.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Copy rates of this host: memcpy with 1 and 2 threads (\"threads bytes GB/s\"); with --cma, single copy "
               "beside a plain copy; with --cross-core, a message one core writes and another reads."};
  size_t bytes = 0;
  int reps = 10;
  bool cma = false, cross = false;
  std::string cpuList;
  double duration = 6;
  app.add_option("bytes", bytes, "bytes per copy (default 64 MiB; with --cross-core, per message: 128 KiB)");
  app.add_option("reps", reps, "copies per figure, the fastest is printed (default 10)");
  app.add_flag("--cma", cma, "also time process_vm_readv beside a plain copy, on 4 KiB and 2 MiB pages");
  app.add_flag("--cross-core", cross, "time messages that one CPU writes and another reads (plain, streamed, unchanged)");
  app.add_option("--cpus", cpuList, "with --cross-core: the writer's and the reader's CPU, as A,B "
                                    "(default: the first two this process may run on)");
  app.add_option("--seconds", duration, "with --cross-core: how long to run, in rounds of a second (default 6)")
      ->check(CLI::Range(0.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  if ((app.count("bytes") > 0 && bytes == 0) || reps <= 0) {
    std::fprintf(stderr, "accl-memcpy-bench: BYTES and REPS must be positive (got %zu and %d)\n", bytes, reps);
    return 2;
  }
  if (cross) {
    if (bytes == 0) bytes = size_t{128} << 10;
    if (bytes < 16) {
      std::fprintf(stderr, "accl-memcpy-bench: --cross-core needs messages of at least 16 bytes (got %zu)\n", bytes);
      return 2;
    }
    std::vector<int> cpus;
    if (!cpuList.empty()) {
      std::stringstream in(cpuList);
      std::string part;
      while (std::getline(in, part, ',')) {
        char* end = nullptr;
        long c = std::strtol(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || c < 0 || c >= CPU_SETSIZE) {
          cpus.clear();
          break;
        }
        cpus.push_back(static_cast<int>(c));
      }
      if (cpus.size() != 2 || cpus[0] == cpus[1]) {
        std::fprintf(stderr, "accl-memcpy-bench: --cpus takes two different CPU numbers as A,B (got '%s'; this "
                     "process may run on: %s)\n", cpuList.c_str(), allowedCpus().c_str());
        return 2;
      }
    } else {
      cpus = cpusAllowed();
      if (cpus.size() < 2) {
        std::fprintf(stderr, "accl-memcpy-bench: --cross-core needs two CPUs; this process may run on: %s\n",
                     allowedCpus().c_str());
        return 2;
      }
      cpus.resize(2);
    }
    try {
      return crossCore(bytes, cpus[0], cpus[1], duration);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "accl-memcpy-bench: cannot allocate 11 buffers of %zu bytes (8 in flight, source, destination, unchanged)\n", bytes);
      return 2;
    }
  }
  if (bytes == 0) bytes = size_t{64} << 20;
  for (int threads : {1, 2}) {
    std::vector<std::vector<char>> src(threads, std::vector<char>(bytes, 1)), dst(threads, std::vector<char>(bytes, 0));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { std::memcpy(dst[t].data(), src[t].data(), bytes); });
      for (auto& t : ts) t.join();
      best = std::min(best, seconds(t0));
    }
    std::printf("%d %zu %.3f\n", threads, bytes, threads * bytes / best / 1e9);
  }
  if (cma) cmaRows(bytes, reps);
  return 0;
}
