// The seam inside the network transport: NetTransport (matching, op
// sessions, arrivals) above, the wires that carry its frames below. A frame
// is a FrameHeader (wire.h) and up to one chunk of payload. Three links
// implement it as siblings:
//   socket/  SocketLink: TCP connections, several streams per remote host;
//            always present, it also carries set-up and control frames, and
//            a closed socket is how a dead peer process is noticed;
//   ibverbs/ VerbsLink: RC queue pairs (RDMA WRITE WITH IMMEDIATE), for the
//            data of peers on other hosts where both ends have an RDMA port;
//   shm/     ShmLink: rings in shared memory, for the data of peers on this
//            host.
// A new link (another fabric, a GPU-direct path) implements FrameLink and
// reports to a FrameSink; nothing above this seam changes.
//
// Threading: every call in both directions happens with the owning
// NetTransport's lock held (on the caller's thread or its progress thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/wire.h"

namespace accl {
namespace core {
namespace net {

// A message handed to a link to send (the transport's requests derive from
// it). The link sets framesLeft before it writes any frame of the message;
// FrameSink::onSent follows once per frame, and the sink calls frameSent().
struct OutMessage {
  virtual ~OutMessage() = default;
  virtual void frameSent() {
    if (framesLeft > 0) --framesLeft;
  }
  size_t framesLeft = 0;
};
using OutPtr = std::shared_ptr<OutMessage>;

// A control message that owns its payload (abort reasons, farewells).
struct OwnedText : OutMessage {
  explicit OwnedText(std::string t) : text(std::move(t)) {}
  std::string text;
};

// Where the payload of an arriving message goes: frame bytes at h.offset land
// at base + h.offset. The receiving side may withdraw it at any time (base =
// nullptr); the link then reads the rest of the frame and discards it.
struct Landing {
  virtual ~Landing() = default;
  char* base = nullptr;
};
using LandingPtr = std::shared_ptr<Landing>;

// A frame the receiving side refuses (the link then fails the peer with
// "protocol error: <what>").
struct ProtocolError {
  std::string what;
};

class FrameLink;

// How long a link leaves a message that no receive wants yet where it is
// (in the sender's memory, in the socket's buffers) before it reads it into
// a held copy: as long as reading it there and copying it once more into
// the receive would take (its size at 2 GB/s, 20 us - 2 ms), so that a
// receive posted meanwhile takes it with one copy, while a send never waits
// for its receive for long. Steady-clock nanoseconds.
inline int64_t holdForReceiveNs(size_t bytes) {
  return std::clamp<int64_t>(static_cast<int64_t>(bytes / 2), 20000, 2000000);
}

// What a link reports to (implemented by NetTransport).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A well-formed header (validateHeader passed) from `peer`. Returns the
  // landing of its h.len payload bytes (null: discard them); throws
  // ProtocolError to refuse the frame.
  virtual LandingPtr onHeader(int peer, const FrameHeader& h) = 0;
  // All h.len payload bytes of the frame went to `l` (or were discarded).
  virtual void onFrame(int peer, const FrameHeader& h, const LandingPtr& l) = 0;
  // One frame of `m` left this host: the part of its buffer is free.
  virtual void onSent(const OutPtr& m) = 0;
  // `link` can no longer reach `peer` (connection closed or reset, queue
  // pair in error, protocol error): nothing more comes from it that way.
  virtual void onPeerFailed(FrameLink* link, int peer, const std::string& why) = 0;
  // Whether a data frame (an op's step or a point-to-point message) with
  // header h from `peer` is wanted now: it would land in a receive posted
  // already or in a message under way, or be discarded (else it is held
  // until a receive takes it), or a receive from `peer` waits for another
  // message (which may come behind it), or messages from `peer` are held
  // already (its receives lag behind its sends: waiting for them gains
  // nothing). A link that can leave a message where it is for a while
  // (single copy, a socket's buffers) asks, to read it once into its
  // receive rather than into a held copy first (holdForReceiveNs).
  virtual bool readNow(int /*peer*/, const FrameHeader& /*h*/) { return true; }
  // A frame that is a whole message (offset 0, len == total), which
  // validateHeader and the link's own checks passed, with its payload
  // readable at `payload`: the sink may take it in one step, copying the
  // payload where it belongs, and returns true; false leaves it to
  // onHeader and onFrame (nothing changed). A link whose payload lies in
  // place (shared memory) offers it, for a small message's fewer steps.
  virtual bool landWhole(int /*peer*/, const FrameHeader& /*h*/, const char* /*payload*/) { return false; }
};

// The receiving side of every link: a header that validateHeader passes, and
// the link's own check (`linkBad`, empty if it passed), goes to the sink's
// onHeader. Returns the landing; sets *bad (non-empty) where the frame is
// refused instead, by either check or by the sink (ProtocolError).
inline LandingPtr admitHeader(FrameSink& sink, int peer, const FrameHeader& h, std::string linkBad,
                              std::string* bad) {
  if (!headerValid(h)) *bad = validateHeader(h);
  else *bad = std::move(linkBad);
  if (!bad->empty()) return nullptr;
  try {
    return sink.onHeader(peer, h);
  } catch (const ProtocolError& e) {
    *bad = e.what;
  }
  return nullptr;
}

class FrameLink {
 public:
  // Spread: the frames may go over any of the peer's channels, in any order
  // (collective data; the receiver places them by offset). Ordered: one
  // channel, in order (point-to-point messages, control frames).
  enum class Route { Spread, Ordered };

  virtual ~FrameLink() = default;
  virtual const char* name() const = 0;  // "tcp", "ib"
  // Whether this link carries frames to `peer`.
  virtual bool serves(int peer) const = 0;
  // Sends [buf, buf+len) to `peer` as frames of `type` (key, desc as in
  // FrameHeader), chunked as the link sees fit. `m` (may be null: no
  // completions wanted) keeps the message's owner alive; buf must stay valid
  // until every frame was reported sent or withdraw(m) returned. onSent may
  // be called from inside this call.
  virtual void send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
                    const OutPtr& m, Route route) = 0;
  // A message that the link can write whole at once, as one frame, with
  // nothing queued before it to `peer`: written, and true (it is sent:
  // its buffer is free; no onSent follows). False: nothing was written, and
  // the caller sends it with send(). For a small message, whose owner then
  // needs no record.
  virtual bool sendNow(int /*peer*/, FrameType /*type*/, uint64_t /*key*/, const OpDesc& /*desc*/,
                       const char* /*buf*/, size_t /*len*/) {
    return false;
  }
  // Withdraws the frames of `m` not yet written; after it returns the link
  // no longer reads the message's buffer (a frame half on the wire is
  // finished from a copy, or from the registration a write in flight holds)
  // and reports no more onSent for it. False if part of the message reached
  // the wire already (the receiver discards the rest).
  virtual bool withdraw(const OutPtr& m) = 0;
  // `peer` failed: queued frames to it are dropped without onSent (their
  // messages' failure is the sink's to record).
  virtual void dropPeer(int peer) = 0;
  // Progress that no file descriptor signals (verbs completions); true if
  // anything happened. The event loop spins on it while it returns true.
  virtual bool poll() { return false; }
  // Before the event loop blocks: asks for a wake-up on the link's
  // descriptor; true if progress arrived meanwhile (poll again instead).
  virtual bool arm() { return false; }
};

}  // namespace net
}  // namespace core
}  // namespace accl
