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
#include <string>
#include <thread>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  bool cma = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cma") cma = true;
    else pos.push_back(argv[i]);
  }
  size_t bytes = !pos.empty() ? std::strtoull(pos[0].c_str(), nullptr, 10) : (size_t{64} << 20);
  int reps = pos.size() > 1 ? std::atoi(pos[1].c_str()) : 10;
  if (bytes == 0 || reps <= 0) {
    std::fprintf(stderr, "usage: accl-memcpy-bench [BYTES [REPS]] [--cma] (BYTES and REPS positive)\n");
    return 2;
  }
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
