// Work objects of small ops come from a per-thread free list instead of the
// heap: an 8-byte op's Work (with its shared_ptr control block) is allocated
// and freed once per op, and malloc plus free cost about a tenth of such an
// op's instructions. Blocks freed on a thread are kept there (a bounded
// number), like malloc's own per-thread cache but without its checks. The
// accl backend's point-to-point requests and inbound message records, and
// the mpi backend's pending point-to-point requests, which also live for one
// small op, come from the same pool (WorkAllocator).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "accl/work.h"

namespace accl {
namespace internal {

// Blocks of up to kWorkBlockBytes from this thread's free list, larger ones
// from operator new (work.cc). ASan builds use operator new throughout, so
// that a use after free of a Work is still caught.
constexpr std::size_t kWorkBlockBytes = 512;
void* workBlockAllocate(std::size_t bytes);
void workBlockFree(void* p, std::size_t bytes) noexcept;
// For tests: whether blocks are pooled in this build, and how many this
// thread keeps now (at most kWorkBlocksKept).
constexpr int kWorkBlocksKept = 64;
bool workPoolEnabled();
int workBlocksKeptHere();
// Pool blocks in use or kept on some thread.
long workBlocksOutstanding();

template <typename T>
struct WorkAllocator {
  using value_type = T;
  WorkAllocator() = default;
  template <typename U>
  WorkAllocator(const WorkAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(workBlockAllocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { workBlockFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const WorkAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const WorkAllocator<U>&) const noexcept { return false; }
};

// A Work that completed successfully, with no source rank: what an op run
// at once returns when it succeeded (OpQueue::runOrEnqueueMade), instead of a
// Work of its own that it would make, complete and free (an eighth of an
// 8-byte broadcast's instructions in the mpi backend). The same object for every
// such op of the calling thread: a completed Work does not change (waits
// return at once, callbacks run at once and are not kept, a trace is ended
// at once), and no one reads its description but an error's message. The
// pointer holds no reference (use_count() 0: copying and dropping it write
// nothing); the object is never freed, and goes to the next new thread when
// its thread exits.
std::shared_ptr<Work> completedWork();
// How many such objects were made (for tests: a new thread takes one given back).
long completedWorksMade();

// std::make_shared<Work>(args...), from the pool.
template <typename... A>
std::shared_ptr<Work> makeWork(A&&... args) {
  return std::allocate_shared<Work>(WorkAllocator<Work>{}, std::forward<A>(args)...);
}

}  // namespace internal
}  // namespace accl
