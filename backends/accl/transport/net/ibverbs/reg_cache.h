// The registration cache of the verbs transport: user buffers that large
// frames are written from (zero-copy) are registered once, page-aligned, and
// the registration is reused by later ops on the same memory. An entry is
// dropped when any part of its range leaves the address space (munmap, a
// large free(), madvise(DONTNEED), brk shrink, mremap: UnmapHook), so memory
// freed and allocated again at the same address is registered anew instead of
// being sent from the pages the old registration pinned.
//
// Entries live in a fixed table: the unmap callback runs inside munmap and
// possibly inside malloc, so it only flips an entry's state with atomics and
// never allocates or locks. Deregistration is lazy, on the owner's thread,
// and waits until no posted write uses the entry (deregistering under a
// write in flight would fail the queue pair). Least recently used entries go
// first when the byte limit or the table is full, or a registration fails for
// lack of lockable memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "transport/net/ibverbs/mem_events.h"

namespace accl {
namespace core {
namespace ib {

class RegCache {
 public:
  // Registers [addr, addr+len) (page-aligned); returns the registration's
  // handle and its local key, or null with the errno in *err and *why.
  using RegisterFn = std::function<void*(void* addr, size_t len, uint32_t* lkey, int* err, std::string* why)>;
  using DeregisterFn = std::function<void(void* handle)>;

  static constexpr int kEntries = 128;

  struct Entry {
    std::atomic<int> state{0};  // kFree, kValid, kStale
    std::atomic<uintptr_t> start{0}, end{0};  // read by the unmap callback
    void* handle = nullptr;
    uint32_t lkey = 0;
    uint32_t inflight = 0;  // posted writes using it (owner thread)
    uint64_t lastUse = 0;
  };

  struct Stats {
    uint64_t hits = 0, misses = 0, registrations = 0, deregistrations = 0, evictions = 0, failures = 0;
    std::atomic<uint64_t> invalidations{0};  // entries hit by an unmap (counted in the callback)
    size_t bytes = 0;                         // registered now
    int entries = 0;
  };

  // Null with *why when memory events are unavailable: without them a cached
  // registration could outlive its memory, so there is no cache at all.
  static std::unique_ptr<RegCache> create(RegisterFn reg, DeregisterFn dereg, size_t maxBytes, std::string* why);
  ~RegCache();  // deregisters everything; no posted write may still use an entry

  // An entry covering [addr, addr+len), registered if no valid one does, with
  // one more user (release() it when the write completed). Null with *why if
  // the registration failed even after evicting unused entries, or the
  // table is full of entries in use; the caller then copies.
  Entry* acquire(const void* addr, size_t len, std::string* why);
  void release(Entry* e);

  const Stats& stats() const { return stats_; }
  size_t maxBytes() const { return maxBytes_; }

  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  enum : int { kFree = 0, kValid = 1, kStale = 2 };

 private:
  RegCache() = default;
  static void onUnmap(void* self, uintptr_t start, uintptr_t end);
  void reapLocked();
  void dropLocked(Entry& e);
  bool evictOneLocked();

  RegisterFn reg_;
  DeregisterFn dereg_;
  size_t maxBytes_ = 0;
  std::mutex mu_;  // owner-side operations; never taken by onUnmap
  Entry table_[kEntries];
  uint64_t clock_ = 0;
  Stats stats_;
  std::unique_ptr<UnmapHook> hook_;  // last member: removed first on destruction
};

}  // namespace ib
}  // namespace core
}  // namespace accl
