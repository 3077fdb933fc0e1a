#pragma once
// Copies within a host with stores that bypass the cache: into an op's
// output, and into the shared memory the local peers read (WriteWay).
//
// A copy into a destination larger than the cache writes lines that the
// core first reads from memory (a write allocates its line), only to evict
// them again: a third of the memory traffic of every byte copied. Stores
// that bypass the cache (non-temporal) skip that read; on x86-64 a copy of
// an out-of-cache destination ran 1.6-1.7x faster with them (a 256 KiB source
// in cache, 128 MiB destination: 27 against 16 GB/s). Into a destination that
// fits in the cache they are slower (27 against 34 GB/s at 8 MiB), and the
// bytes are not in the cache afterwards, so they are used only where the op's
// whole output is at least streamingMin() bytes.

#include <chrono>
#include <cstddef>
#include <cstring>

namespace accl {
namespace internal {

// dst[0..n) = src[0..n), with non-temporal stores where the CPU has them
// (x86-64; elsewhere a plain memcpy). Ordered before a later release store
// like a plain copy (ends with a store fence).
void copyStreaming(void* dst, const void* src, size_t n);

// The smallest output (bytes) copied with non-temporal stores:
// ACCL_SHM_STREAM_BYTES, by default the host's last-level cache size (16 MiB
// where it is not known); SIZE_MAX for never. Set once per process by
// setStreamingMin (the accl backend, from its setting); read on every copy.
size_t streamingMin();
void setStreamingMin(size_t bytes);

// dst[0..n) = src[0..n): with non-temporal stores where `streamed`.
inline void copyWay(void* dst, const void* src, size_t n, bool streamed) {
  if (streamed) copyStreaming(dst, src, n);
  else std::memcpy(dst, src, n);
}

// A copy of part of an output of `total` bytes.
inline void copyOut(void* dst, const void* src, size_t n, size_t total) {
  if (total >= streamingMin()) copyStreaming(dst, src, n);
  else std::memcpy(dst, src, n);
}

// The way a rank writes its slot of the shared segment (ShmDomain): with
// non-temporal stores where the group's probe found that faster (`probed`),
// or where its plain writes have lately run at under half the rate of its
// streamed ones (bytes/s; 0: not measured yet). On one VM a state came and
// went during runs where plain writes into the slots ran at 2-9 GB/s
// against their usual 20-45 (the lines the readers hold passed back to the
// writer's core slowly) while streamed ones kept their 25-33.
bool streamWay(bool probed, double plainRate, double streamedRate);

// How one writer (a rank into its slots of the shared segment, or into its
// rings) writes the bytes its local peers read: plainly or with
// non-temporal stores. It times its own writes of either way (from
// kMinTimedBytes) into a running mean of each way's rate, and takes the
// streamed way where streamWay says so; once per kExplore it takes the other
// way, so that the way not taken keeps a current rate. Not thread-safe: one
// per writer.
class WriteWay {
 public:
  static constexpr size_t kMinTimedBytes = 16u << 10;
  static constexpr std::chrono::milliseconds kExplore{100};

  // The way for the next write: `probed` (the way chosen by measurement at
  // set-up, or by the setting) unless the rates call for streaming, and the
  // other way once per kExplore where `explore`.
  bool choose(bool probed, bool explore);
  // dst[0..n) = src[0..n) the given way, timed where long enough.
  void copy(void* dst, const void* src, size_t n, bool streamed);
  // bytes/s of each way so far (0: not measured).
  double rate(bool streamed) const { return rate_[streamed ? 1 : 0]; }

 private:
  double rate_[2] = {0, 0};
  std::chrono::steady_clock::time_point exploreAt_{};
};

// The host's last-level data cache size in bytes, 0 if unknown.
size_t lastLevelCacheBytes();

}  // namespace internal
}  // namespace accl
