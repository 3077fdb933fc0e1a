// The verbs registration cache with a fake registrar and the process's real
// memory hooks (UCX's libucm): reuse across ops, invalidation when memory is
// unmapped or freed, deferred deregistration of entries in use, LRU eviction
// and the retry after running out of lockable memory. No RDMA device needed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include "transport/net/ibverbs/reg_cache.h"

using accl::core::ib::RegCache;

namespace {

// Registrations as the device would see them: handle -> range.
struct FakeDevice {
  std::map<void*, std::pair<uintptr_t, size_t>> live;
  int regs = 0, deregs = 0;
  size_t lockLimit = ~size_t(0);  // bytes that may be registered at once (ENOMEM beyond)
  size_t locked = 0;
  std::set<void*> deregistered;
  uint32_t nextKey = 100;

  RegCache::RegisterFn reg() {
    return [this](void* addr, size_t len, uint32_t* lkey, int* err, std::string* why) -> void* {
      if (locked + len > lockLimit) {
        *err = ENOMEM;
        *why = "fake: cannot lock " + std::to_string(len) + " more bytes";
        return nullptr;
      }
      ++regs;
      locked += len;
      void* h = reinterpret_cast<void*>(static_cast<uintptr_t>(nextKey));
      *lkey = nextKey++;
      live[h] = {reinterpret_cast<uintptr_t>(addr), len};
      return h;
    };
  }
  RegCache::DeregisterFn dereg() {
    return [this](void* h) {
      ++deregs;
      locked -= live.at(h).second;
      live.erase(h);
      deregistered.insert(h);
    };
  }
};

std::unique_ptr<RegCache> makeCache(FakeDevice& d, size_t maxBytes = size_t(1) << 30) {
  std::string why;
  auto c = RegCache::create(d.reg(), d.dereg(), maxBytes, &why);
#ifdef ACCL_HAVE_UCM
  EXPECT_TRUE(c) << "memory hooks unavailable: " << why;
#endif
  return c;
}

#define CACHE_OR_SKIP(c)                                                              \
  if (!(c)) GTEST_SKIP() << "this build has no memory hooks (libucx-dev at build time)"

char* mapPages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<char*>(p);
}

const size_t kMiB = size_t(1) << 20;

// Registers [p, p+n) through the cache and lets go of it (an op that ended).
RegCache::Entry* registerOnce(RegCache& c, const char* p, size_t n) {
  std::string why;
  auto* e = c.acquire(p, n, &why);
  EXPECT_TRUE(e) << why;
  if (e) c.release(e);
  return e;
}

}  // namespace

TEST(RegCache, ARegistrationIsReusedAcrossOpsAndCoversItsWholeMessage) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* buf = mapPages(4 * kMiB);
  std::string why;
  auto* e = c->acquire(buf, 4 * kMiB, &why);
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(d.regs, 1);
  EXPECT_EQ(d.live.begin()->second.first, reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(d.live.begin()->second.second, 4 * kMiB);
  c->release(e);
  for (int op = 0; op < 10; ++op) {  // chunks of the same buffer in later ops
    auto* x = c->acquire(buf + op * 100000, 100000, &why);
    ASSERT_EQ(x, e);
    c->release(x);
  }
  EXPECT_EQ(d.regs, 1);
  EXPECT_EQ(c->stats().hits, 10u);
  EXPECT_EQ(c->stats().misses, 1u);
  munmap(buf, 4 * kMiB);
}

TEST(RegCache, UnalignedBuffersAreRegisteredOnWholePages) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* buf = mapPages(3 * 4096);
  std::string why;
  auto* e = c->acquire(buf + 100, 4096, &why);  // spans two pages
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(d.live.begin()->second.first, reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(d.live.begin()->second.second, 2 * 4096u);
  c->release(e);
  munmap(buf, 3 * 4096);
}

TEST(RegCache, UnmappedMemoryIsRegisteredAgainAtTheSameAddress) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* buf = mapPages(kMiB);
  auto* e = registerOnce(*c, buf, kMiB);
  ASSERT_TRUE(e);
  void* first = e->handle;
  ASSERT_EQ(munmap(buf, kMiB), 0);
  EXPECT_EQ(c->stats().invalidations.load(), 1u);
  // New memory at the very same address (what malloc after free often gives).
  void* again = mmap(buf, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, static_cast<void*>(buf));
  std::string why;
  auto* e2 = c->acquire(buf, kMiB, &why);
  ASSERT_TRUE(e2);
  EXPECT_NE(e2->handle, first) << "the registration of the unmapped memory was reused";
  EXPECT_EQ(d.regs, 2);
  EXPECT_TRUE(d.deregistered.count(first)) << "the stale registration was never dropped";
  c->release(e2);
  munmap(buf, kMiB);
}

TEST(RegCache, FreeOfALargeMallocBufferInvalidatesIt) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  // Above glibc's largest mmap threshold (32 MiB): free() unmaps it inside libc.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator keeps freed memory mapped (quarantine), so free() unmaps nothing "
                  "to be seen; the munmap and madvise cases still run";
#endif
  size_t n = 48 * kMiB;
  char* volatile buf = static_cast<char*>(std::malloc(n));
  ASSERT_TRUE(buf);
  buf[0] = 1;
  std::string why;
  auto* e = c->acquire(buf, n, &why);
  ASSERT_TRUE(e);
  c->release(e);
  std::free(buf);
  EXPECT_EQ(c->stats().invalidations.load(), 1u) << "free() of a 48 MiB buffer was not seen";
  auto* other = c->acquire(&d, 8, &why);  // any acquire reaps the stale entry
  ASSERT_TRUE(other);
  c->release(other);
  EXPECT_EQ(d.deregs, 1);
}

TEST(RegCache, DroppedPagesAndPartialUnmapsInvalidateToo) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* a = mapPages(kMiB);
  char* b = mapPages(kMiB);
  std::string why;
  auto* ea = c->acquire(a, kMiB, &why);
  auto* eb = c->acquire(b, kMiB, &why);
  ASSERT_TRUE(ea && eb);
  c->release(ea);
  c->release(eb);
  ASSERT_EQ(madvise(a + 4096, 4096, MADV_DONTNEED), 0);  // one page of a
  EXPECT_EQ(ea->state.load(), RegCache::kStale);
  EXPECT_EQ(eb->state.load(), RegCache::kValid);
  ASSERT_EQ(munmap(b + kMiB - 4096, 4096), 0);  // the last page of b
  EXPECT_EQ(eb->state.load(), RegCache::kStale);
  EXPECT_EQ(c->stats().invalidations.load(), 2u);
  munmap(a, kMiB);
  munmap(b, kMiB - 4096);
}

TEST(RegCache, UnrelatedUnmapsLeaveEntriesAlone) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* buf = mapPages(kMiB);
  auto* e = registerOnce(*c, buf, kMiB);
  ASSERT_TRUE(e);
  for (int i = 0; i < 20; ++i) {
    char* other = mapPages(kMiB);
    munmap(other, kMiB);
    void* m = std::malloc(40 * kMiB);
    std::free(m);
  }
  EXPECT_EQ(e->state.load(), RegCache::kValid);
  EXPECT_EQ(c->stats().invalidations.load(), 0u);
  munmap(buf, kMiB);
}

TEST(RegCache, AnEntryInUseIsDeregisteredOnlyAfterItsLastWrite) {
  FakeDevice d;
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* buf = mapPages(kMiB);
  char* other = mapPages(kMiB);
  std::string why;
  auto* e = c->acquire(buf, kMiB, &why);  // a write in flight
  auto* e2 = c->acquire(buf, 4096, &why);  // and another one
  ASSERT_EQ(e, e2);
  munmap(buf, kMiB);  // the caller freed it too early
  auto* x = c->acquire(other, kMiB, &why);
  ASSERT_TRUE(x);
  c->release(x);
  EXPECT_EQ(d.deregs, 0) << "deregistered under a posted write";
  c->release(e);
  EXPECT_EQ(d.deregs, 0);
  c->release(e2);
  EXPECT_EQ(d.deregs, 1);
  munmap(other, kMiB);
}

TEST(RegCache, TheLeastRecentlyUsedEntryGoesWhenTheByteLimitIsReached) {
  FakeDevice d;
  auto c = makeCache(d, 3 * kMiB);
  CACHE_OR_SKIP(c);
  char* b[4];
  RegCache::Entry* e[4];
  std::string why;
  for (int i = 0; i < 3; ++i) {
    b[i] = mapPages(kMiB);
    e[i] = c->acquire(b[i], kMiB, &why);
    c->release(e[i]);
  }
  void* h1 = e[1]->handle;
  c->release(c->acquire(b[0], kMiB, &why));  // b[0] used again: b[1] is now the oldest
  b[3] = mapPages(kMiB);
  e[3] = c->acquire(b[3], kMiB, &why);
  ASSERT_TRUE(e[3]) << why;
  c->release(e[3]);
  EXPECT_EQ(d.deregs, 1);
  EXPECT_TRUE(d.deregistered.count(h1));
  EXPECT_EQ(c->stats().evictions, 1u);
  EXPECT_LE(c->stats().bytes, 3 * kMiB);
  // A buffer larger than the whole cache is refused (the caller copies).
  char* big = mapPages(4 * kMiB);
  EXPECT_FALSE(c->acquire(big, 4 * kMiB, &why));
  EXPECT_NE(why.find("ACCL_IB_REG_CACHE_MB"), std::string::npos) << why;
  for (char* p : b) munmap(p, kMiB);
  munmap(big, 4 * kMiB);
}

TEST(RegCache, RunningOutOfLockableMemoryEvictsUnusedEntriesAndRetries) {
  FakeDevice d;
  d.lockLimit = 2 * kMiB;  // as RLIMIT_MEMLOCK would
  auto c = makeCache(d);
  CACHE_OR_SKIP(c);
  char* a = mapPages(kMiB);
  char* b = mapPages(kMiB);
  char* x = mapPages(kMiB);
  std::string why;
  c->release(c->acquire(a, kMiB, &why));
  auto* eb = c->acquire(b, kMiB, &why);  // stays in use
  auto* ex = c->acquire(x, kMiB, &why);  // needs a's lock: a goes
  ASSERT_TRUE(ex) << why;
  EXPECT_EQ(c->stats().evictions, 1u);
  // Nothing left to give back: the failure's own text comes through.
  char* y = mapPages(kMiB);
  EXPECT_FALSE(c->acquire(y, kMiB, &why));
  EXPECT_NE(why.find("fake: cannot lock"), std::string::npos) << why;
  EXPECT_EQ(c->stats().failures, 1u);
  c->release(eb);
  c->release(ex);
  for (char* p : {a, b, x, y}) munmap(p, kMiB);
}

TEST(RegCache, DestroyingTheCacheDeregistersEverything) {
  FakeDevice d;
  char* a = mapPages(kMiB);
  {
    auto c = makeCache(d);
    CACHE_OR_SKIP(c);
    std::string why;
    c->release(c->acquire(a, kMiB, &why));
    c->release(c->acquire(a + 8192, 100, &why));
  }
  EXPECT_TRUE(d.live.empty());
  munmap(a, kMiB);  // the removed hook is not called any more (no crash)
}
