// What qp_mesh.cc (the data path) and qp_connect.cc (set-up) share: the
// state of one queue pair and of a queued frame. Not for other files.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>

#include "transport/net/ibverbs/ibv_api.h"
#include "transport/net/ibverbs/qp_mesh.h"

namespace accl {
namespace core {
namespace ib {

// Immediate data: the count of freed mailbox slots; the top bit marks a
// credit-only write (no frame in the slot).
constexpr uint32_t kCreditOnly = 0x80000000u;
constexpr uint32_t kCountMask = 0x7fffffffu;
constexpr int kExtraWr = 4;  // credit-only writes in flight per QP (at most 2) + margin
constexpr uint64_t kRecvBit = 1ull << 63;

struct QpMesh::Frame {
  FrameHeader hdr{};
  const char* payload = nullptr;
  std::shared_ptr<void> cookie;
  const char* msg = nullptr;  // the whole message, for its registration
  size_t msgLen = 0;
};

struct QpMesh::Qp {
  int peer = 0;
  int index = 0;  // in qps_
  ibv_qp* qp = nullptr;
  char* mbox = nullptr;  // peer writes here
  char* stage = nullptr;  // our writes read from here
  ibv_mr* mboxMr = nullptr;
  ibv_mr* stageMr = nullptr;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t psn = 0;
  // counters (mod 2^31 where they cross the wire)
  uint32_t sent = 0;      // data writes posted
  uint32_t freed = 0;     // slots of the peer's mailbox it freed (from immediates)
  uint32_t recvd = 0;     // data writes received
  uint32_t consumed = 0;  // of our mailbox, processed and free again
  uint32_t reported = 0;  // consumed as last told to the peer
  int creditInflight = 0;
  uint32_t dataInflight = 0;
  std::deque<Frame> queue;
  struct Posted {
    bool data;
    std::shared_ptr<void> cookie;
    RegCache::Entry* reg = nullptr;  // the payload's registration (zero-copy)
  };
  std::deque<Posted> inflight;
  bool dead = false;

  ~Qp() {
    const Api* a = api(nullptr);
    if (qp) a->destroyQp(qp);
    if (mboxMr) a->deregMr(mboxMr);
    if (stageMr) a->deregMr(stageMr);
    std::free(mbox);
    std::free(stage);
  }
};

}  // namespace ib
}  // namespace core
}  // namespace accl
