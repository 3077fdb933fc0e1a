// The process's account of scratch kept between ops (internal::KeptBuffer).
#include "accl/internal/kept_buffer.h"

#include <atomic>

#include "accl/config.h"

namespace accl {
namespace internal {
namespace {
std::atomic<size_t> gKept{0};
}  // namespace

bool reserveKeptScratch(size_t bytes) {
  // A group exists only once the configuration parsed (createProcessGroup
  // checks it first), so this does not throw for a buffer of a group.
  const size_t budget = static_cast<size_t>(Config::get().scratchKeepMb) << 20;
  size_t kept = gKept.load(std::memory_order_relaxed);
  do {
    if (bytes > budget || kept > budget - bytes) return false;
  } while (!gKept.compare_exchange_weak(kept, kept + bytes, std::memory_order_relaxed));
  return true;
}

void releaseKeptScratch(size_t bytes) { gKept.fetch_sub(bytes, std::memory_order_relaxed); }

size_t keptScratchBytes() { return gKept.load(std::memory_order_relaxed); }

}  // namespace internal
}  // namespace accl
