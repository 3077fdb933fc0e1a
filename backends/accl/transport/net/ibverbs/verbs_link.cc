#include "transport/net/ibverbs/verbs_link.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "accl/logging.h"

namespace accl {
namespace core {
namespace net {

std::unique_ptr<VerbsLink> VerbsLink::connect(const ib::QpMesh::Options& o, FrameSink* sink,
                                              std::vector<bool>* usable, std::string* why) {
  std::unique_ptr<VerbsLink> l(new VerbsLink);
  l->sink_ = sink;
  l->where_ = o.where;
  VerbsLink* self = l.get();
  ib::QpMesh::Callbacks cb;
  cb.deliver = [self](int peer, int, const FrameHeader& h, const char* payload) { self->deliver(peer, h, payload); };
  cb.sent = [self](const std::shared_ptr<void>& ck) {
    if (ck) self->sink_->onSent(std::static_pointer_cast<OutMessage>(ck));
  };
  cb.fail = [self](int peer, const std::string& why) { self->sink_->onPeerFailed(self, peer, why); };
  l->mesh_ = ib::QpMesh::connect(o, std::move(cb), usable, why);
  if (!l->mesh_) return nullptr;
  l->usable_ = *usable;
  l->refused_.assign(o.size, false);
  return l;
}

VerbsLink::~VerbsLink() {
  if (mesh_) mesh_->drain(std::chrono::seconds(1));
}

void VerbsLink::send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
                     const OutPtr& m, Route route) {
  size_t chunk = mesh_->chunkBytes();
  size_t frames = len == 0 ? 1 : (len + chunk - 1) / chunk;
  if (m) m->framesLeft = frames;
  int nq = mesh_->qps();
  for (size_t i = 0; i < frames; ++i) {
    size_t off = i * chunk;
    size_t n = std::min(chunk, len - std::min(len, off));
    FrameHeader h{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, off, n, len, desc};
    int q = route == Route::Spread ? static_cast<int>(i % nq) : 0;
    mesh_->post(peer, q, h, buf + off, m, buf, len);
  }
}

std::string VerbsLink::farewellFor(int peer) const {
  std::vector<uint32_t> n = mesh_->receivedCounts(peer);
  return std::string(reinterpret_cast<const char*>(n.data()), n.size() * sizeof(uint32_t));
}

bool VerbsLink::onFarewell(int peer, const std::string& payload) {
  if (payload.size() != static_cast<size_t>(mesh_->qps()) * sizeof(uint32_t)) return false;
  std::vector<uint32_t> n(static_cast<size_t>(mesh_->qps()));
  std::memcpy(n.data(), payload.data(), payload.size());
  size_t k = mesh_->confirmReceived(peer, n);
  if (k) ACCL_INFO("NET", where_ << ": rank " << peer << " closed its end; its farewell confirmed " << k
                                 << " write(s) whose acknowledgement had not come");
  return true;
}

void VerbsLink::dropPeer(int peer) {
  mesh_->dropPeer(peer, [](const std::shared_ptr<void>&) {});
}

void VerbsLink::deliver(int peer, const FrameHeader& h, const char* payload) {
  if (refused_[peer]) return;
  std::string bad;
  LandingPtr l = admitHeader(*sink_, peer, h, "", &bad);
  if (!bad.empty()) {
    ACCL_WARN("NET", where_ << ": refused frame from rank " << peer << " (verbs)" << ": " << bad);
    refused_[peer] = true;
    sink_->onPeerFailed(this, peer, "protocol error: " + bad);
    return;
  }
  if (l && l->base && h.len) std::memcpy(l->base + h.offset, payload, h.len);
  sink_->onFrame(peer, h, l);
}

}  // namespace net
}  // namespace core
}  // namespace accl
