#include "transport/net/matcher.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "accl/internal/work_pool.h"

namespace accl {
namespace core {
namespace net {

namespace {
// Bytes of spare buffers kept by every matcher of the process.
std::atomic<size_t> processSpares{0};
}  // namespace

Matcher::~Matcher() { processSpares.fetch_sub(spareBytes(), std::memory_order_relaxed); }

size_t Matcher::spareBytes() const {
  size_t n = 0;
  for (auto& s : spares_) n += s.second;
  return n;
}

size_t Matcher::processSpareBytes() { return processSpares.load(std::memory_order_relaxed); }

std::string sizeMismatch(int peer, Space s, uint64_t key, const OpDesc& theirs, size_t theirBytes,
                         size_t expected) {
  if (s == Space::Op)
    return "rank " + std::to_string(peer) + " sends " + std::to_string(theirBytes) + " bytes for step " +
           std::to_string(key & 0xffffffff) + " of " + describe(theirs) + ", this rank expects " +
           std::to_string(expected);
  return "rank " + std::to_string(peer) + " sent " + std::to_string(theirBytes) + " bytes with tag " +
         std::to_string(static_cast<int>(static_cast<int64_t>(key))) + ", the receive expects " +
         std::to_string(expected);
}

InboundPtr Matcher::arrive(int peer, Space s, const FrameHeader& h) {
  auto it = findActive(Key{peer, s, h.key});
  if (it != active_.end()) {
    Inbound& in = *it->in;
    if (h.total != in.total || h.offset + h.len > in.total)
      throw ProtocolError{"inconsistent message length (" + std::to_string(h.total) + " bytes, the message has " +
                          std::to_string(in.total) + ")"};
    if (in.held && in.base == in.held.get()) in.heldFrames.emplace_back(h.offset, h.len);
    return it->in;
  }
  // Tagged messages travel in order on one channel: a frame past the first
  // belongs to the message in progress.
  if (s == Space::Tagged && h.offset != 0) throw ProtocolError{"a continuation frame without its message"};
  auto in = std::allocate_shared<Inbound>(internal::WorkAllocator<Inbound>{});  // the block pool, as a Request
  in->peer = peer;
  in->space = s;
  in->key = h.key;
  in->desc = h.desc;
  in->total = h.total;
  auto pit = findPosted(peer, s, h.key);
  if (pit != posted_.end()) {
    RequestPtr r = std::move(*pit);
    erasePosted(pit);
    if (s == Space::Tagged) r->source = peer;
    if (h.total != r->len) {
      r->fail(Failure::Mismatch, sizeMismatch(peer, s, h.key, h.desc, h.total, r->len));
      in->drop();
    } else {
      in->req = r;
      in->base = r->buf;
    }
  } else {
    holdBuffer(*in, h.total);
    in->base = in->held.get();
    in->heldFrames.emplace_back(h.offset, h.len);
    held_.push_back(in);
    ++heldEver_;
  }
  if (in->total > 0) active_.push_back({Key{peer, s, h.key}, in});  // not there: found above
  return in;
}

bool Matcher::arriveWhole(int peer, Space s, const FrameHeader& h, const char* payload) {
  if (h.offset != 0 || h.len != h.total || findActive(Key{peer, s, h.key}) != active_.end()) return false;
  auto pit = findPosted(peer, s, h.key);
  if (pit == posted_.end() || (*pit)->len != h.total) return false;
  Request& r = **pit;
  if (s == Space::Tagged) r.source = peer;
  if (h.len) std::memcpy(r.buf, payload, h.len);
  r.done = true;
  erasePosted(pit);
  return true;
}

void Matcher::landed(const FrameHeader& h, Inbound& in) {
  in.got += h.len;
  if (in.got < in.total) return;
  auto it = findActive(Key{in.peer, in.space, in.key});
  if (it != active_.end() && it->in.get() == &in) eraseActive(it);
  if (in.req) {
    in.req->done = true;  // a failed receive is done already: no change
    in.req.reset();
    in.base = nullptr;
  }
}

void Matcher::takeHeld(const RequestPtr& r, const InboundPtr& u) {
  if (r->space == Space::Tagged) r->source = u->peer;
  if (u->total != r->len) {
    r->fail(Failure::Mismatch, sizeMismatch(u->peer, u->space, u->key, u->desc, u->total, r->len));
    u->drop();  // the rest of it, if any, is discarded
    return;
  }
  if (u->got == u->total) {
    if (u->total) std::memcpy(r->buf, u->held.get(), u->total);
    r->done = true;
    releaseBuffer(*u);
    return;
  }
  // Still arriving: what its announced frames brought so far (the bytes of a
  // frame still being read included) is copied, and the rest lands straight
  // in the receive's buffer. The link looks at `base` before each read, and
  // reads under the lock this runs under, so no byte goes to the old place
  // after the copy.
  for (auto& f : u->heldFrames) std::memcpy(r->buf + f.first, u->held.get() + f.first, f.second);
  u->req = r;
  u->base = r->buf;
  releaseBuffer(*u);
  u->heldFrames.clear();
}

void Matcher::holdBuffer(Inbound& in, size_t n) {
  if (n == 0) return;
  // The smallest spare that fits.
  auto best = spares_.end();
  for (auto it = spares_.begin(); it != spares_.end(); ++it)
    if (it->second >= n && (best == spares_.end() || it->second < best->second)) best = it;
  if (best != spares_.end()) {
    in.held = std::move(best->first);
    in.heldCap = best->second;
    processSpares.fetch_sub(best->second, std::memory_order_relaxed);
    spares_.erase(best);
    return;
  }
  in.held.reset(new char[n]);  // not value-initialised: pages are touched as bytes land
  in.heldCap = n;
}

void Matcher::releaseBuffer(Inbound& in) {
  std::unique_ptr<char[]> buf = std::move(in.held);
  size_t cap = in.heldCap;
  in.heldCap = 0;
  if (!buf || cap < kSpareMinBytes || cap > spareLimit_) return;  // freed
  auto small = spares_.end();  // full: the smaller spare makes room if this one is larger
  size_t freed = 0;
  if (spares_.size() == kSpares) {
    small = spares_[0].second <= spares_[1].second ? spares_.begin() : spares_.begin() + 1;
    if (small->second >= cap) return;
    freed = small->second;
  }
  // Kept only within the process's budget (other groups' spares count too).
  size_t kept = processSpares.load(std::memory_order_relaxed);
  do {
    if (kept - freed + cap > spareLimit_) return;
  } while (!processSpares.compare_exchange_weak(kept, kept - freed + cap, std::memory_order_relaxed));
  if (small != spares_.end()) spares_.erase(small);
  spares_.emplace_back(std::move(buf), cap);
}

void Matcher::post(const RequestPtr& r) {
  auto it = std::find_if(held_.begin(), held_.end(), [&](const InboundPtr& u) {
    return !u->dropped && matches(*r, u->peer, u->space, u->key);
  });
  if (it == held_.end()) {
    posted_.push_back(r);
    return;
  }
  InboundPtr u = std::move(*it);
  if (it == held_.begin()) held_.pop_front();
  else held_.erase(it);
  takeHeld(r, u);
}

void Matcher::withdraw(const RequestPtr& r) {
  auto pit = std::find(posted_.begin(), posted_.end(), r);
  if (pit != posted_.end()) posted_.erase(pit);
  for (auto& a : active_)
    if (a.in->req == r) a.in->drop();
}

void Matcher::forgetOpsUpTo(uint64_t seq) {
  auto old = [seq](Space s, uint64_t key) { return s == Space::Op && (key >> 32) <= seq; };
  posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                               [&](const RequestPtr& r) { return old(r->space, r->key); }),
                posted_.end());
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [&](const Active& a) {
                                 if (!old(std::get<1>(a.key), std::get<2>(a.key))) return false;
                                 a.in->drop();
                                 return true;
                               }),
                active_.end());
}

void Matcher::sweepHeldOps(const std::function<bool(const Inbound&)>& drop) {
  for (auto it = held_.begin(); it != held_.end();) {
    if ((*it)->space == Space::Op && drop(**it)) {
      (*it)->drop();
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace net
}  // namespace core
}  // namespace accl
