// The verbs link: frames over RC queue pairs (QpMesh) to the peers on other
// hosts where both ends have a usable RDMA port. Collective messages are cut
// in chunks of one mailbox slot and alternate between the queue pairs of a
// peer; ordered messages stay on the first queue pair. Completions are
// polled by the event loop's thread: poll() while they come, then the
// completion channel's descriptor (onEvents) after arm().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/net/event_loop.h"
#include "transport/net/frame_link.h"
#include "transport/net/ibverbs/qp_mesh.h"

namespace accl {
namespace core {
namespace net {

class VerbsLink : public FrameLink, public EventHandler {
 public:
  // Collective over the ranks of o.peers (QpMesh::connect). Null if no peer
  // can be served; *usable says which are, *why explains the others.
  static std::unique_ptr<VerbsLink> connect(const ib::QpMesh::Options& o, FrameSink* sink,
                                            std::vector<bool>* usable, std::string* why);
  // Lets writes in flight land (up to 1 s) before the queue pairs go.
  ~VerbsLink() override;

  const ib::QpMesh& mesh() const { return *mesh_; }
  int eventFd() const { return mesh_->eventFd(); }

  const char* name() const override { return "ib"; }
  bool serves(int peer) const override { return usable_[peer]; }
  void send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
            const OutPtr& m, Route route) override;
  bool withdraw(const OutPtr& m) override { return mesh_->withdraw(m); }
  void dropPeer(int peer) override;
  bool poll() override { return mesh_->progress(); }
  bool arm() override { return mesh_->arm(); }
  void onEvents(uint32_t) override { mesh_->onEvent(); }
  // The farewell's payload for `peer` (QpMesh::receivedCounts), and a peer's
  // farewell received (QpMesh::confirmReceived; false if it is malformed).
  std::string farewellFor(int peer) const;
  bool onFarewell(int peer, const std::string& payload);

 private:
  VerbsLink() = default;
  void deliver(int peer, const FrameHeader& h, const char* payload);

  FrameSink* sink_ = nullptr;
  std::string where_;
  std::unique_ptr<ib::QpMesh> mesh_;
  std::vector<bool> usable_;
  std::vector<bool> refused_;  // peers that sent a frame this rank refused
};

}  // namespace net
}  // namespace core
}  // namespace accl
