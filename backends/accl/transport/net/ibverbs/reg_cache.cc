#include "transport/net/ibverbs/reg_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace accl {
namespace core {
namespace ib {

namespace {
uintptr_t pageSize() {
  static const uintptr_t p = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

std::unique_ptr<RegCache> RegCache::create(RegisterFn reg, DeregisterFn dereg, size_t maxBytes, std::string* why) {
  std::unique_ptr<RegCache> c(new RegCache);
  c->reg_ = std::move(reg);
  c->dereg_ = std::move(dereg);
  c->maxBytes_ = maxBytes;
  c->hook_ = UnmapHook::install(&RegCache::onUnmap, c.get(), why);
  if (!c->hook_) return nullptr;
  return c;
}

RegCache::~RegCache() {
  hook_.reset();  // no callback runs after this
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& e : table_)
    if (e.state.load(std::memory_order_acquire) != kFree) dropLocked(e);
}

void RegCache::onUnmap(void* self, uintptr_t start, uintptr_t end) {
  auto* c = static_cast<RegCache*>(self);
  for (auto& e : c->table_) {
    if (e.state.load(std::memory_order_acquire) != kValid) continue;
    if (e.start.load(std::memory_order_relaxed) >= end || e.end.load(std::memory_order_relaxed) <= start) continue;
    int expect = kValid;
    if (e.state.compare_exchange_strong(expect, kStale, std::memory_order_acq_rel))
      c->stats_.invalidations.fetch_add(1, std::memory_order_relaxed);
  }
}

void RegCache::dropLocked(Entry& e) {
  dereg_(e.handle);
  ++stats_.deregistrations;
  stats_.bytes -= e.end.load(std::memory_order_relaxed) - e.start.load(std::memory_order_relaxed);
  --stats_.entries;
  e.handle = nullptr;
  e.inflight = 0;
  e.state.store(kFree, std::memory_order_release);
}

void RegCache::reapLocked() {
  for (auto& e : table_)
    if (e.state.load(std::memory_order_acquire) == kStale && e.inflight == 0) dropLocked(e);
}

bool RegCache::evictOneLocked() {
  Entry* lru = nullptr;
  for (auto& e : table_)
    if (e.state.load(std::memory_order_acquire) == kValid && e.inflight == 0 && (!lru || e.lastUse < lru->lastUse))
      lru = &e;
  if (!lru) return false;
  // Stale first, so that an unmap racing with this does not count it twice.
  int expect = kValid;
  if (!lru->state.compare_exchange_strong(expect, kStale, std::memory_order_acq_rel)) return true;  // reaped next
  dropLocked(*lru);
  ++stats_.evictions;
  return true;
}

RegCache::Entry* RegCache::acquire(const void* addr, size_t len, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  reapLocked();
  auto a = reinterpret_cast<uintptr_t>(addr);
  for (auto& e : table_) {
    if (e.state.load(std::memory_order_acquire) != kValid) continue;
    if (e.start.load(std::memory_order_relaxed) <= a && a + len <= e.end.load(std::memory_order_relaxed)) {
      ++e.inflight;
      e.lastUse = ++clock_;
      ++stats_.hits;
      return &e;
    }
  }
  ++stats_.misses;
  uintptr_t pg = pageSize();
  uintptr_t start = a & ~(pg - 1);
  uintptr_t end = (a + len + pg - 1) & ~(pg - 1);
  size_t bytes = end - start;
  if (bytes > maxBytes_) {
    ++stats_.failures;
    *why = "the buffer (" + std::to_string(bytes) + " bytes) exceeds the registration cache (" +
           std::to_string(maxBytes_) + " bytes, ACCL_IB_REG_CACHE_MB)";
    return nullptr;
  }
  while (stats_.bytes + bytes > maxBytes_ && evictOneLocked()) reapLocked();
  Entry* slot = nullptr;
  for (;;) {
    for (auto& e : table_)
      if (e.state.load(std::memory_order_acquire) == kFree) {
        slot = &e;
        break;
      }
    if (slot || !evictOneLocked()) break;
    reapLocked();
  }
  if (!slot || stats_.bytes + bytes > maxBytes_) {
    ++stats_.failures;
    *why = "the registration cache is full of buffers that posted writes still use";
    return nullptr;
  }
  uint32_t lkey = 0;
  int err = 0;
  std::string text;
  void* h = reg_(reinterpret_cast<void*>(start), bytes, &lkey, &err, &text);
  // Out of lockable memory: give back what no write uses, then try again.
  while (!h && (err == ENOMEM || err == EAGAIN) && evictOneLocked()) {
    reapLocked();
    text.clear();
    h = reg_(reinterpret_cast<void*>(start), bytes, &lkey, &err, &text);
  }
  if (!h) {
    ++stats_.failures;
    *why = text;
    return nullptr;
  }
  ++stats_.registrations;
  stats_.bytes += bytes;
  ++stats_.entries;
  slot->start.store(start, std::memory_order_relaxed);
  slot->end.store(end, std::memory_order_relaxed);
  slot->handle = h;
  slot->lkey = lkey;
  slot->inflight = 1;
  slot->lastUse = ++clock_;
  slot->state.store(kValid, std::memory_order_release);
  return slot;
}

void RegCache::release(Entry* e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (e->inflight) --e->inflight;
  if (e->inflight == 0 && e->state.load(std::memory_order_acquire) == kStale) dropLocked(*e);
}

}  // namespace ib
}  // namespace core
}  // namespace accl
