// The verbs data path of the accl backend's network transport: RC queue pairs
// to the ranks on other hosts, connected through the rendezvous store. The
// verbs FrameLink (verbs_link.h) sends and receives its frames through it.
//
// Every message (a frame: the wire header of transport/wire.h + up to one
// chunk of payload) is one RDMA WRITE WITH IMMEDIATE into a slot of a
// registered mailbox ring at the receiver. The immediate carries the
// sender's count of freed slots of its own mailbox (the credits it returns);
// a credit-only write with no data carries the same when there is nothing to
// piggyback it on. A sender writes only into slots the receiver freed, and the
// receiver keeps a receive posted for every write that may arrive, so no
// receive is ever missing. Frames up to the device's inline limit go inline;
// frames with at least Settings::zcopyBytes of payload are written straight
// from the caller's buffer (two scatter entries: the header from the staging
// ring, the payload from the buffer's registration, kept in a RegCache that
// drops registrations of memory the process unmaps); the rest, and every
// frame when the cache is unavailable, are copied into a registered staging
// ring. A frame's sent() callback comes with its write's completion, so the
// caller's buffer is in use until then. Completions are polled by the owner's
// progress thread, which spins briefly and then blocks on the completion
// channel (eventFd()).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accl/store.h"
#include "transport/net/ibverbs/port.h"
#include "transport/net/ibverbs/reg_cache.h"
#include "transport/wire.h"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_qp;
struct ibv_mr;

namespace accl {
namespace core {
namespace ib {

class QpMesh {
 public:
  struct Callbacks {
    // A frame arrived from `peer` on QP `qp`; `payload` holds hdr.len bytes.
    std::function<void(int peer, int qp, const FrameHeader& hdr, const char* payload)> deliver;
    // A posted frame left this host (its cookie is released after this).
    std::function<void(const std::shared_ptr<void>& cookie)> sent;
    // The peer's QP failed (error completion): the peer is unusable.
    std::function<void(int peer, const std::string& why)> fail;
  };
  struct Options {
    int rank = 0;
    int size = 1;
    std::vector<bool> peers;  // true: connect a QP set to this rank
    bool required = false;    // verbs is the only data path between hosts
    Settings settings;
    std::chrono::milliseconds timeout{30000};
    std::shared_ptr<Store> store;  // prefixed for the communicator
    std::string where;
  };

  // Collective over the ranks of o.peers (and their own peers): every rank
  // publishes either its QP endpoints or why verbs is not usable here, so both
  // ends of a pair agree. Returns the link (null if no peer pair can use
  // verbs); *usable[p] says which peers are served; *why explains the rest.
  static std::unique_ptr<QpMesh> connect(const Options& o, Callbacks cb, std::vector<bool>* usable,
                                       std::string* why);
  ~QpMesh();

  const PortInfo& port() const { return port_; }
  size_t chunkBytes() const { return chunk_; }
  int qps() const { return nqp_; }
  int eventFd() const;
  size_t inlineLimit() const { return maxInline_; }
  // How payloads are sent, for the INFO line: zero-copy with the cache's
  // limit, or copied and why.
  std::string sendMode() const;
  // The registration cache (null when payloads are always copied).
  const RegCache* regCache() const { return cache_.get(); }

  // Queues a frame (hdr.len <= chunkBytes()) to `peer` on QP `qp`; it is
  // written when a credit is free. `payload` must stay valid until sent()
  // reports the frame, or it was withdrawn. [msg, msg+msgLen) is the whole
  // message the payload is part of: a zero-copy write registers all of it
  // once (default: the payload alone).
  void post(int peer, int qp, const FrameHeader& hdr, const char* payload, std::shared_ptr<void> cookie,
            const char* msg = nullptr, size_t msgLen = 0);
  // Polls the completion queue; true if anything completed.
  bool progress();
  // Before blocking on eventFd(): requests a completion event; returns true
  // if completions arrived meanwhile (poll again instead of blocking).
  bool arm();
  // eventFd() became readable.
  void onEvent();
  // Removes frames of `cookie` not yet written; false if some part was
  // written already (the receiver has seen part of the message).
  bool withdraw(const std::shared_ptr<void>& cookie);
  // The peer failed: its queued frames are dropped (their cookies passed to
  // `each`); later completions of its QPs are ignored.
  void dropPeer(int peer, const std::function<void(const std::shared_ptr<void>&)>& each);
  // Waits (polling) up to `limit` for posted writes to complete, before tear-down.
  void drain(std::chrono::milliseconds limit);
  // The data writes received from `peer` so far, one count per QP: what this
  // rank's farewell tells the peer when it closes its end.
  std::vector<uint32_t> receivedCounts(int peer) const;
  // `peer` is closing its end and says how many of this rank's data writes it
  // received on each QP: those writes are reported sent() now, also when
  // their acknowledgement was lost (a peer that has left re-acknowledges
  // nothing, so their completion would only be a failure). Returns how many
  // writes it completed so.
  size_t confirmReceived(int peer, const std::vector<uint32_t>& counts);

  struct Stats {
    uint64_t writes = 0, inlined = 0, zcopy = 0, copied = 0, creditWrites = 0, bytes = 0, waitsForCredit = 0;
    uint64_t confirmedByFarewell = 0;  // writes whose delivery the leaving peer confirmed before their completion
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Qp;
  struct Frame;
  struct Remote;
  QpMesh() = default;
  // connect(), in its three steps (qp_connect.cc): this rank's verbs
  // resources with a QP in state INIT per served peer; the endpoint record
  // published through the store and the peers' records read back (both ends
  // of a pair decide alike); each QP moved to RTR and RTS against its peer.
  void createResources(const Options& o);
  void createQp(int peer, int k, uint32_t psn);
  std::string endpointRecord() const;
  bool readRemote(int peer, const std::string& record, Remote* r, std::string* whyNot) const;
  void connectQp(Qp& q, const Remote& r);
  void trySend(Qp& q);
  void maybeReturnCredits(Qp& q);
  void postRecv(Qp& q, int n);
  void failQp(Qp& q, const std::string& why);

  Callbacks cb_;
  Options o_;
  PortInfo port_;
  size_t chunk_ = 0, slotBytes_ = 0;
  uint32_t slots_ = 0;
  int nqp_ = 1;
  size_t maxInline_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::vector<std::unique_ptr<Qp>> qps_;  // index = peer * nqp + q (null: peer not served)
  std::unique_ptr<RegCache> cache_;       // zero-copy sends (null: copy)
  size_t zcopyBytes_ = 0;
  std::string noZcopyWhy_;
  bool zcopyFallbackLogged_ = false;
  Stats stats_;
};

}  // namespace ib
}  // namespace core
}  // namespace accl
