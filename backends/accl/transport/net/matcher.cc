#include "transport/net/matcher.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace accl {
namespace core {
namespace net {

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
  auto it = active_.find(Key{peer, s, h.key});
  if (it != active_.end()) {
    Inbound& in = *it->second;
    if (h.total != in.total || h.offset + h.len > in.total)
      throw ProtocolError{"inconsistent message length (" + std::to_string(h.total) + " bytes, the message has " +
                          std::to_string(in.total) + ")"};
    return it->second;
  }
  // Tagged messages travel in order on one channel: a frame past the first
  // belongs to the message in progress.
  if (s == Space::Tagged && h.offset != 0) throw ProtocolError{"a continuation frame without its message"};
  auto in = std::make_shared<Inbound>();
  in->peer = peer;
  in->space = s;
  in->key = h.key;
  in->desc = h.desc;
  in->total = h.total;
  auto pit = std::find_if(posted_.begin(), posted_.end(),
                          [&](const RequestPtr& r) { return matches(*r, peer, s, h.key); });
  if (pit != posted_.end()) {
    RequestPtr r = *pit;
    posted_.erase(pit);
    if (s == Space::Tagged) r->source = peer;
    if (h.total != r->len) {
      r->fail(Failure::Mismatch, sizeMismatch(peer, s, h.key, h.desc, h.total, r->len));
      in->drop();
    } else {
      in->req = r;
      in->base = r->buf;
    }
  } else {
    in->held.resize(h.total);
    in->base = in->held.data();
    held_.push_back(in);
  }
  if (in->total > 0) active_[Key{peer, s, h.key}] = in;
  return in;
}

void Matcher::landed(const FrameHeader& h, Inbound& in) {
  in.got += h.len;
  if (in.got < in.total) return;
  auto it = active_.find(Key{in.peer, in.space, in.key});
  if (it != active_.end() && it->second.get() == &in) active_.erase(it);
  if (in.req) {
    in.req->done = true;  // a failed receive is done already: no change
    in.req.reset();
    in.base = nullptr;
    return;
  }
  if (in.waiter) {
    RequestPtr r = std::move(in.waiter);
    if (!r->done) {
      if (in.total) std::memcpy(r->buf, in.held.data(), in.total);
      r->done = true;
    }
    auto hit = std::find_if(held_.begin(), held_.end(), [&](const InboundPtr& u) { return u.get() == &in; });
    if (hit != held_.end()) held_.erase(hit);
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
    if (u->total) std::memcpy(r->buf, u->held.data(), u->total);
    r->done = true;
    return;
  }
  u->waiter = r;  // still arriving: it stays held until its last frame
}

void Matcher::post(const RequestPtr& r) {
  auto it = std::find_if(held_.begin(), held_.end(), [&](const InboundPtr& u) {
    return u->waiter == nullptr && !u->dropped && matches(*r, u->peer, u->space, u->key);
  });
  if (it == held_.end()) {
    posted_.push_back(r);
    return;
  }
  InboundPtr u = *it;
  if (u->got == u->total || u->total != r->len) held_.erase(it);
  takeHeld(r, u);
}

void Matcher::withdraw(const RequestPtr& r) {
  auto pit = std::find(posted_.begin(), posted_.end(), r);
  if (pit != posted_.end()) posted_.erase(pit);
  for (auto& u : held_)
    if (u->waiter == r) u->waiter.reset();
  for (auto& kv : active_)
    if (kv.second->req == r) kv.second->drop();
}

void Matcher::forgetOpsUpTo(uint64_t seq) {
  auto old = [seq](Space s, uint64_t key) { return s == Space::Op && (key >> 32) <= seq; };
  posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                               [&](const RequestPtr& r) { return old(r->space, r->key); }),
                posted_.end());
  for (auto it = active_.begin(); it != active_.end();) {
    if (old(std::get<1>(it->first), std::get<2>(it->first))) {
      it->second->drop();
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
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
