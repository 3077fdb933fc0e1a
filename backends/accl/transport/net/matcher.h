// Matching of arriving messages to posted receives, written once for both
// spaces: an op's steps (exact peer and key) and the user's point-to-point
// messages (tag, in order of posting, a receive may take any source). A
// message arrives as one or more frames, in any order for op steps (several
// streams or queue pairs) and in order for tagged ones; each frame lands at
// its offset, straight in the receive's buffer when one is posted, else in
// a held copy that the receive takes when it is posted.
//
// Contract: a receive withdrawn (failed op, timeout, destroyed group) is
// never written again: the rest of its message is read and discarded.
// Sizes that differ fail the receive with Failure::Mismatch; the message is
// discarded. Every call is made with the transport's lock held.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "transport/net/request.h"

namespace accl {
namespace core {
namespace net {

// One message being received or held.
struct Inbound : Landing {
  int peer = -1;
  Space space = Space::Op;
  uint64_t key = 0;
  OpDesc desc{};
  size_t total = 0;
  size_t got = 0;
  RequestPtr req;                 // the receive it lands in (null: held or discarded)
  std::unique_ptr<char[]> held;   // unmatched: the bytes, until a receive takes them
  size_t heldCap = 0;             // its size (a reused buffer may be larger than the message)
  // The frames announced while held (offset, length): what a receive posted
  // while the message is still arriving copies before the rest lands in it.
  std::vector<std::pair<size_t, size_t>> heldFrames;
  bool dropped = false;           // discarded: its bytes go nowhere, no receive takes it

  void drop() {
    dropped = true;
    base = nullptr;
    req.reset();
  }
};
using InboundPtr = std::shared_ptr<Inbound>;

class Matcher {
 public:
  // Spare buffers (below) are kept within a budget shared by every matcher of
  // the process: ACCL_UNEXPECTED_CACHE_MB, this by default.
  static constexpr size_t kDefaultSpareLimit = size_t(128) << 20;

  Matcher() = default;
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // The process's budget for spare buffers, as this matcher reads it (every
  // matcher of a process is given the same value).
  void setSpareLimit(size_t bytes) { spareLimit_ = bytes; }
  // Bytes of spare buffers kept: by this matcher, by every matcher of the process.
  size_t spareBytes() const;
  static size_t processSpareBytes();

  // A frame's header (after the caller's own checks): returns the landing of
  // its payload. Throws ProtocolError for a continuation of no message or a
  // length that contradicts the message's.
  InboundPtr arrive(int peer, Space s, const FrameHeader& h);
  // The frame's payload landed (or was discarded): completes the receive
  // when it was the message's last.
  void landed(const FrameHeader& h, Inbound& in);
  // A frame that is a whole message (offset 0, len == total), its payload
  // at `payload`: where arrive() would land it straight in a posted receive
  // of its size, copies it there and completes the receive (true), without
  // a record of the message. False, with nothing changed, where arrive()
  // would hold it, fail the receive on its size, or find it in progress.
  bool arriveWhole(int peer, Space s, const FrameHeader& h, const char* payload);
  // A receive: takes the first held message that matches, else waits.
  void post(const RequestPtr& r);
  // After this, nothing writes r's buffer.
  void withdraw(const RequestPtr& r);
  // The op `seq` and those before it ended: their receives and partial
  // messages are forgotten (frames still coming for them are the caller's to
  // discard). Held messages stay until the next sweep.
  void forgetOpsUpTo(uint64_t seq);
  // Calls `drop` for every held message of an op, oldest first; those it
  // returns true for are discarded.
  void sweepHeldOps(const std::function<bool(const Inbound&)>& drop);

  // Whether a new message from `peer` with this key would land in a posted
  // receive (arrive() would not hold it).
  bool hasPosted(int peer, Space s, uint64_t key) const {
    return std::any_of(posted_.begin(), posted_.end(),
                       [&](const RequestPtr& r) { return matches(*r, peer, s, key); });
  }
  // Whether a receive that a message from `peer` could match (any key) is
  // posted and waits for its first frame.
  bool hasPostedFrom(int peer, Space s) const {
    return std::any_of(posted_.begin(), posted_.end(),
                       [&](const RequestPtr& r) { return r->space == s && (r->peer == peer || r->peer == -1); });
  }
  // Whether a message from `peer` with this key has frames still to come
  // (its first frames arrived: the rest lands where they did).
  bool underWay(int peer, Space s, uint64_t key) const {
    Key k{peer, s, key};
    return std::any_of(active_.begin(), active_.end(), [&](const Active& a) { return a.key == k; });
  }
  // Whether a message from `peer` is held (arrived, no receive took it yet).
  bool holds(int peer, Space s) const {
    return std::any_of(held_.begin(), held_.end(),
                       [&](const InboundPtr& u) { return u->peer == peer && u->space == s; });
  }
  // Whether a message from `peer` in `s` would be the next for a new
  // receive: none of its messages is held or under way, and no posted
  // receive (from it or any source) would take it first.
  bool quietFor(int peer, Space s) const {
    if (posted_.empty() && held_.empty() && active_.empty()) return true;
    return !hasPostedFrom(peer, s) && !holds(peer, s) &&
           std::none_of(active_.begin(), active_.end(),
                        [&](const Active& a) { return std::get<0>(a.key) == peer && std::get<1>(a.key) == s; });
  }
  size_t postedCount() const { return posted_.size(); }
  // Messages held (arrived before their receive) since the matcher was made.
  uint64_t heldEver() const { return heldEver_; }
  size_t heldCount() const { return held_.size(); }

 private:
  using Key = std::tuple<int, Space, uint64_t>;
  static bool matches(const Request& r, int peer, Space s, uint64_t key) {
    return r.space == s && r.key == key && (r.peer == peer || (s == Space::Tagged && r.peer == -1));
  }
  void takeHeld(const RequestPtr& r, const InboundPtr& u);
  // The oldest posted receive that a message from `peer` with this key
  // matches (posted_.end(): none), and its removal (usually the oldest).
  std::deque<RequestPtr>::iterator findPosted(int peer, Space s, uint64_t key) {
    return std::find_if(posted_.begin(), posted_.end(),
                        [&](const RequestPtr& r) { return matches(*r, peer, s, key); });
  }
  void erasePosted(std::deque<RequestPtr>::iterator it) {
    if (it == posted_.begin()) posted_.pop_front();
    else posted_.erase(it);
  }
  // Buffers of held messages: big ones are kept for the next (at most
  // kSpares per matcher, the largest ones, and within the process's budget
  // spareLimit_), since a fresh allocation of that size is a new mapping whose
  // every page the kernel faults in and zeroes while the bytes arrive.
  void holdBuffer(Inbound& in, size_t n);
  void releaseBuffer(Inbound& in);
  static constexpr size_t kSpareMinBytes = 256 << 10;
  static constexpr size_t kSpares = 2;

  size_t spareLimit_ = kDefaultSpareLimit;
  uint64_t heldEver_ = 0;
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> spares_;
  std::deque<RequestPtr> posted_;  // in order of posting
  std::deque<InboundPtr> held_;    // in order of arrival
  // Messages with bytes still to come: a few at a time (an op's steps in
  // flight, a message per peer), so a flat list searched in order, which
  // allocates nothing per message (a map took a node per message).
  struct Active {
    Key key;
    InboundPtr in;
  };
  std::vector<Active> active_;
  std::vector<Active>::iterator findActive(const Key& k) {
    return std::find_if(active_.begin(), active_.end(), [&](const Active& a) { return a.key == k; });
  }
  void eraseActive(std::vector<Active>::iterator it) {  // order does not matter
    if (it + 1 != active_.end()) *it = std::move(active_.back());
    active_.pop_back();
  }
};

// "rank 1 sends 8 bytes for step 0 of allreduce #3 (...), this rank expects 4"
// or "rank 1 sent 8 bytes with tag 5, the receive expects 4".
std::string sizeMismatch(int peer, Space s, uint64_t key, const OpDesc& theirs, size_t theirBytes,
                         size_t expected);

}  // namespace net
}  // namespace core
}  // namespace accl
