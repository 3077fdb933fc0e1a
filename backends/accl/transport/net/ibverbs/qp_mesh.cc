#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "accl/errors.h"
#include "accl/logging.h"
#include "transport/net/ibverbs/qp_mesh_internal.h"

namespace accl {
namespace core {
namespace ib {

QpMesh::~QpMesh() {
  const Api* a = api(nullptr);
  if (!a) return;
  qps_.clear();   // before the CQ and PD they use
  cache_.reset();  // its registrations: no QP uses them now
  if (cq_) a->destroyCq(cq_);
  if (channel_) a->destroyCompChannel(channel_);
  if (pd_) a->deallocPd(pd_);
  if (ctx_) a->closeDevice(ctx_);
}

int QpMesh::eventFd() const { return channel_ ? channel_->fd : -1; }

void QpMesh::postRecv(Qp& q, int n) {
  for (int i = 0; i < n; ++i) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = kRecvBit | static_cast<uint64_t>(q.index);
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    if (int rc = ibv_post_recv(q.qp, &wr, &bad)) {
      failQp(q, errnoMessage("ibv_post_recv", rc));
      return;
    }
  }
}

void QpMesh::post(int peer, int qp, const FrameHeader& hdr, const char* payload, std::shared_ptr<void> cookie,
                const char* msg, size_t msgLen) {
  auto& slot = qps_[static_cast<size_t>(peer) * nqp_ + qp];
  if (!slot || slot->dead) return;  // the peer failed; its requests failed with it
  slot->queue.push_back(Frame{hdr, payload, std::move(cookie), msg, msgLen});
  trySend(*slot);
}

std::string QpMesh::sendMode() const {
  if (!cache_)
    return "payloads copied into registered staging (" + noZcopyWhy_ + ")";
  return "zero-copy from registered user buffers for payloads >= " + std::to_string(zcopyBytes_) +
         " bytes, registration cache up to " + std::to_string(cache_->maxBytes() >> 20) + " MiB";
}

void QpMesh::trySend(Qp& q) {
  while (!q.dead && !q.queue.empty()) {
    uint32_t outstanding = (q.sent - q.freed) & kCountMask;
    if (outstanding >= slots_ || q.dataInflight >= slots_) {
      ++stats_.waitsForCredit;
      return;
    }
    Frame f = std::move(q.queue.front());
    q.queue.pop_front();
    uint32_t slot = q.sent % slots_;
    size_t len = f.hdr.len;
    size_t total = sizeof(FrameHeader) + len;
    ibv_sge sg[2]{};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    RegCache::Entry* reg = nullptr;
    wr.wr_id = static_cast<uint64_t>(q.index);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(q.consumed & kCountMask);
    wr.wr.rdma.remote_addr = q.raddr + static_cast<uint64_t>(slot) * slotBytes_;
    wr.wr.rdma.rkey = q.rkey;
    wr.sg_list = sg;
    if (total <= maxInline_) {
      sg[0].addr = reinterpret_cast<uintptr_t>(&f.hdr);
      sg[0].length = sizeof(FrameHeader);
      wr.num_sge = 1;
      if (len) {
        sg[1].addr = reinterpret_cast<uintptr_t>(f.payload);
        sg[1].length = static_cast<uint32_t>(len);
        wr.num_sge = 2;
      }
      wr.send_flags |= IBV_SEND_INLINE;
      ++stats_.inlined;
    } else {
      char* s = q.stage + static_cast<size_t>(slot) * slotBytes_;
      std::memcpy(s, &f.hdr, sizeof(FrameHeader));
      sg[0].addr = reinterpret_cast<uintptr_t>(s);
      sg[0].lkey = q.stageMr->lkey;
      wr.num_sge = 1;
      if (cache_ && len >= zcopyBytes_) {
        std::string why;
        const char* base = f.msg ? f.msg : f.payload;
        size_t blen = f.msg ? f.msgLen : len;
        reg = cache_->acquire(base, blen, &why);
        if (!reg && !zcopyFallbackLogged_) {
          zcopyFallbackLogged_ = true;
          ACCL_INFO("NET", o_.where << ": a zero-copy write is copied instead (logged once): " << why);
        }
      }
      if (reg) {
        sg[0].length = sizeof(FrameHeader);
        sg[1].addr = reinterpret_cast<uintptr_t>(f.payload);
        sg[1].length = static_cast<uint32_t>(len);
        sg[1].lkey = reg->lkey;
        wr.num_sge = 2;
        ++stats_.zcopy;
      } else {
        if (len) std::memcpy(s + sizeof(FrameHeader), f.payload, len);
        sg[0].length = static_cast<uint32_t>(total);
        ++stats_.copied;
      }
    }
    if (int rc = ibv_post_send(q.qp, &wr, &bad)) {
      if (reg) cache_->release(reg);
      failQp(q, errnoMessage("ibv_post_send", rc));
      return;
    }
    ++stats_.writes;
    stats_.bytes += total;
    q.reported = q.consumed;
    ++q.sent;
    ++q.dataInflight;
    q.inflight.push_back({true, std::move(f.cookie), reg});
  }
}

void QpMesh::maybeReturnCredits(Qp& q) {
  if (q.dead) return;
  uint32_t unreported = (q.consumed - q.reported) & kCountMask;
  if (unreported < std::max<uint32_t>(1, slots_ / 2) || q.creditInflight >= 2) return;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = static_cast<uint64_t>(q.index);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(kCreditOnly | (q.consumed & kCountMask));
  wr.wr.rdma.remote_addr = q.raddr;
  wr.wr.rdma.rkey = q.rkey;
  wr.num_sge = 0;
  if (int rc = ibv_post_send(q.qp, &wr, &bad)) {
    failQp(q, errnoMessage("ibv_post_send (credits)", rc));
    return;
  }
  ++stats_.creditWrites;
  q.reported = q.consumed;
  ++q.creditInflight;
  q.inflight.push_back({false, nullptr});
}

void QpMesh::failQp(Qp& q, const std::string& why) {
  if (q.dead) return;
  int peer = q.peer;
  for (int k = 0; k < nqp_; ++k) {
    auto& s = qps_[static_cast<size_t>(peer) * nqp_ + k];
    if (s) s->dead = true;
  }
  cb_.fail(peer, why);
}

namespace {
// What a failed completion most likely means, for the op's error message.
const char* failedCompletionHint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return "no acknowledgement from the peer through every retry (ACCL_IB_TIMEOUT sets the wait): its process, "
             "its port or the network path to it is gone";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer posted no receive through every retry: its process is stopped or gone";
    case IBV_WC_WR_FLUSH_ERR:
      return "flushed: this connection had already failed";
    default:
      return "the peer's process or port is gone?";
  }
}
}  // namespace

bool QpMesh::progress() {
  ibv_wc wc[32];
  bool any = false;
  for (;;) {
    int n = ibv_poll_cq(cq_, 32, wc);
    if (n <= 0) break;
    any = true;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      bool isRecv = (w.wr_id & kRecvBit) != 0;
      size_t idx = static_cast<size_t>(w.wr_id & ~kRecvBit);
      if (idx >= qps_.size() || !qps_[idx]) continue;
      Qp& q = *qps_[idx];
      if (w.status != IBV_WC_SUCCESS) {
        if (!q.dead)
          failQp(q, std::string(isRecv ? "RDMA receive" : "RDMA write") + " on " + port_.device + " failed: " +
                        api(nullptr)->wcStatusStr(w.status) + " (vendor error " + std::to_string(w.vendor_err) +
                        "; " + failedCompletionHint(w.status) + ")");
        continue;
      }
      if (q.dead) continue;
      if (!isRecv) {
        if (q.inflight.empty()) continue;
        auto done = std::move(q.inflight.front());
        q.inflight.pop_front();
        if (done.data) {
          --q.dataInflight;
          if (done.reg) cache_->release(done.reg);
          if (cb_.sent && done.cookie) cb_.sent(done.cookie);  // null: confirmed by the peer's farewell
        } else {
          --q.creditInflight;
        }
      } else {
        uint32_t imm = ntohl(w.imm_data);
        q.freed = imm & kCountMask;
        if (!(imm & kCreditOnly)) {
          uint32_t slot = q.recvd % slots_;
          ++q.recvd;
          const char* base = q.mbox + static_cast<size_t>(slot) * slotBytes_;
          FrameHeader h;
          std::memcpy(&h, base, sizeof(h));
          if (h.len > chunk_) {
            failQp(q, "protocol error: a frame of " + std::to_string(h.len) + " bytes exceeds the slot of " +
                          std::to_string(chunk_));
            continue;
          }
          cb_.deliver(q.peer, static_cast<int>(idx % nqp_), h, base + sizeof(FrameHeader));
          if (q.dead) continue;
          ++q.consumed;
        }
        postRecv(q, 1);
      }
      trySend(q);
      maybeReturnCredits(q);
    }
  }
  return any;
}

bool QpMesh::arm() {
  ibv_req_notify_cq(cq_, 0);
  return progress();
}

void QpMesh::onEvent() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  const Api* a = api(nullptr);
  int n = 0;
  while (a->getCqEvent(channel_, &cq, &ctx) == 0) ++n;
  if (n) a->ackCqEvents(cq_, static_cast<unsigned>(n));
}

bool QpMesh::withdraw(const std::shared_ptr<void>& cookie) {
  bool clean = true;
  for (auto& q : qps_) {
    if (!q) continue;
    for (auto it = q->queue.begin(); it != q->queue.end();)
      it = it->cookie == cookie ? q->queue.erase(it) : std::next(it);
    for (auto& p : q->inflight)
      if (p.cookie == cookie) clean = false;
  }
  return clean;
}

void QpMesh::dropPeer(int peer, const std::function<void(const std::shared_ptr<void>&)>& each) {
  for (int k = 0; k < nqp_; ++k) {
    auto& s = qps_[static_cast<size_t>(peer) * nqp_ + k];
    if (!s) continue;
    s->dead = true;
    for (auto& f : s->queue)
      if (f.cookie) each(f.cookie);
    s->queue.clear();
    for (auto& p : s->inflight)
      if (p.cookie) each(p.cookie);
  }
}

void QpMesh::drain(std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  auto busy = [&] {
    for (auto& q : qps_)
      if (q && !q->dead && (!q->inflight.empty() || !q->queue.empty())) return true;
    return false;
  };
  while (busy() && std::chrono::steady_clock::now() < until) {
    if (!progress()) usleep(100);
  }
}

std::vector<uint32_t> QpMesh::receivedCounts(int peer) const {
  std::vector<uint32_t> n(static_cast<size_t>(nqp_), 0);
  for (int k = 0; k < nqp_; ++k) {
    const auto& s = qps_[static_cast<size_t>(peer) * nqp_ + k];
    if (s) n[k] = s->recvd;
  }
  return n;
}

size_t QpMesh::confirmReceived(int peer, const std::vector<uint32_t>& counts) {
  std::vector<std::shared_ptr<void>> done;
  for (int k = 0; k < nqp_ && k < static_cast<int>(counts.size()); ++k) {
    auto& s = qps_[static_cast<size_t>(peer) * nqp_ + k];
    if (!s || s->dead) continue;
    Qp& q = *s;
    // Data writes complete in posting order: the oldest one in flight is
    // number sent - dataInflight of this QP.
    uint32_t index = q.sent - q.dataInflight;
    for (auto& p : q.inflight) {
      if (!p.data) continue;
      if (static_cast<int32_t>(counts[k] - index) <= 0) break;  // the peer did not get this one
      ++index;
      // The entry stays until its completion (success or flush), which keeps
      // the count in step and the registration held while the device may
      // still read it; only the caller hears of it now.
      if (p.cookie) done.push_back(std::move(p.cookie));
      p.cookie = nullptr;
    }
  }
  stats_.confirmedByFarewell += done.size();
  if (cb_.sent)
    for (auto& c : done) cb_.sent(c);
  return done.size();
}

}  // namespace ib
}  // namespace core
}  // namespace accl
