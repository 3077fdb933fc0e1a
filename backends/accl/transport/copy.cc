#include "copy.h"

#include "transport/transport.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace accl {
namespace internal {

namespace {

std::atomic<size_t>& streamingMinRef() {
  static std::atomic<size_t> v{[] {
    size_t l3 = lastLevelCacheBytes();
    return l3 ? l3 : size_t(16) << 20;
  }()};
  return v;
}

}  // namespace

size_t streamingMin() { return streamingMinRef().load(std::memory_order_relaxed); }
void setStreamingMin(size_t bytes) { streamingMinRef().store(bytes, std::memory_order_relaxed); }

bool streamWay(bool probed, double plainRate, double streamedRate) {
  return probed || (plainRate > 0 && streamedRate > 0 && plainRate < 0.5 * streamedRate);
}

bool WriteWay::choose(bool probed, bool explore) {
  bool way = streamWay(probed, rate_[0], rate_[1]);
  if (explore) {
    auto now = core::coarseNow();  // a few ns; 1-4 ms behind at most
    if (now >= exploreAt_) {
      exploreAt_ = now + kExplore;
      way = !way;
    }
  }
  return way;
}

void WriteWay::copy(void* dst, const void* src, size_t n, bool streamed) {
  if (n < kMinTimedBytes) {
    copyWay(dst, src, n, streamed);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  copyWay(dst, src, n, streamed);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double r = static_cast<double>(n) / std::max(s, 1e-9);
  double& mean = rate_[streamed ? 1 : 0];
  mean = mean > 0 ? (mean + r) / 2 : r;
}

size_t lastLevelCacheBytes() {
  // sysfs: the highest level the kernel lists for cpu0 (glibc's sysconf
  // answers 0 on some CPUs and in some VMs).
  size_t best = 0;
  int bestLevel = 0;
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(lv >> level) || !(ty >> type) || !(sz >> size)) break;
    if (type == "Instruction" || level < bestLevel || size.empty()) continue;
    size_t v = std::strtoull(size.c_str(), nullptr, 10);
    char unit = size.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    else if (unit == 'G') v <<= 30;
    if (v) best = v, bestLevel = level;
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (!best) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = static_cast<size_t>(v);
  }
#endif
  return best;
}

void copyStreaming(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // To a 16-byte boundary of the destination with a plain copy; the lines
  // partly written at either end stay in the cache.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (n < head + 64) {
    std::memcpy(d, s, n);
    return;
  }
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  if (i < n) std::memcpy(d + i, s + i, n - i);
  // Non-temporal stores are weakly ordered: a release store after this
  // copy (a ring's tail, a round's flag) must not pass them.
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace internal
}  // namespace accl
