// Setting up the queue pairs of a QpMesh, in three steps: resources (device,
// protection domain, completion queue, a QP in state INIT per served peer),
// the exchange of endpoint records through the rendezvous store, and the
// state changes of each QP to RTR and RTS against its peer.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <tuple>

#include "accl/errors.h"
#include "accl/logging.h"
#include "transport/net/ibverbs/qp_mesh_internal.h"

namespace accl {
namespace core {
namespace ib {

namespace {

ibv_mtu mtuEnum(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

std::string regError(size_t bytes, int err) {
  return errnoMessage("ibv_reg_mr of " + std::to_string(bytes) + " bytes", err) +
         "; this process may lock " + memlockText() +
         " (RLIMIT_MEMLOCK); raise it: `ulimit -l unlimited`, `docker run --ulimit memlock=-1`, "
         "or LimitMEMLOCK=infinity for a systemd service";
}

}  // namespace

// A peer's endpoint record, as read from the store.
struct QpMesh::Remote {
  uint16_t lid = 0;
  int mtu = 0;
  bool eth = false, global = false;
  ibv_gid gid{};
  std::vector<std::tuple<int, uint32_t, uint32_t, uint64_t, uint32_t>> qps;  // k qpn psn addr rkey
};

std::unique_ptr<QpMesh> QpMesh::connect(const Options& o, Callbacks cb, std::vector<bool>* usable,
                                        std::string* why) {
  usable->assign(o.size, false);
  const std::string me = std::to_string(o.rank);
  std::unique_ptr<QpMesh> L(new QpMesh);
  L->cb_ = std::move(cb);
  L->o_ = o;
  std::string record, myError;
  try {
    L->createResources(o);
    record = L->endpointRecord();
  } catch (const Error& e) {
    myError = e.what();
    record = "no " + myError;
  }
  o.store->set("ib/" + me, toBytes(record));
  if (!myError.empty()) {  // the peers read why from the store; nothing to wait for here
    *why = myError;
    return nullptr;
  }

  // Both ends of a pair decide alike: a pair uses verbs iff both sides are ok.
  std::string reasons;
  std::vector<Remote> remote(o.size);
  std::vector<bool> ok(o.size, false);
  for (int p = 0; p < o.size; ++p) {
    if (!o.peers[p] || p == o.rank) continue;
    o.store->wait({"ib/" + std::to_string(p)}, o.timeout);
    std::string whyNot;
    ok[p] = L->readRemote(p, toString(o.store->get("ib/" + std::to_string(p))), &remote[p], &whyNot);
    if (!ok[p]) reasons += (reasons.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " + whyNot;
  }
  int served = 0;
  for (int p = 0; p < o.size; ++p) {
    if (!o.peers[p] || p == o.rank) continue;
    for (int k = 0; k < L->nqp_; ++k) {
      auto& slot = L->qps_[p * L->nqp_ + k];
      if (!ok[p]) {  // the peer cannot use verbs: its QPs go (the rest of the mesh serves others)
        slot.reset();
        continue;
      }
      L->connectQp(*slot, remote[p]);
    }
    if (ok[p]) {
      (*usable)[p] = true;
      ++served;
    }
  }
  // Every QP of a pair is ready to receive before either side writes.
  o.store->set("ibready/" + me, toBytes("1"));
  for (int p = 0; p < o.size; ++p)
    if ((*usable)[p]) o.store->wait({"ibready/" + std::to_string(p)}, o.timeout);
  *why = reasons;
  if (served == 0) return nullptr;
  return L;
}

// ---------------------------------------------------------------- resources

void QpMesh::createResources(const Options& o) {
  std::string loadWhy;
  const Api* ap = api(&loadWhy);
  if (!ap) throw NotSupported(loadWhy);
  ctx_ = openPort(o.settings, &port_);
  chunk_ = o.settings.chunkBytes;
  slotBytes_ = (sizeof(FrameHeader) + chunk_ + 63) & ~size_t(63);
  slots_ = static_cast<uint32_t>(std::max(4, o.settings.slots));
  nqp_ = std::max(1, o.settings.qpsPerPeer);
  int npeers = 0;
  for (int p = 0; p < o.size; ++p) npeers += o.peers[p] && p != o.rank;
  pd_ = ap->allocPd(ctx_);
  if (!pd_) throw SystemError(errnoMessage("ibv_alloc_pd", errno));
  zcopyBytes_ = o.settings.zcopyBytes;
  if (zcopyBytes_ == 0) {
    noZcopyWhy_ = "ACCL_IB_ZCOPY_BYTES=0";
  } else {
    ibv_pd* pd = pd_;
    auto reg = [ap, pd](void* addr, size_t len, uint32_t* lkey, int* err, std::string* why) -> void* {
      // Read by the local HCA only: no access flags (read-only memory registers too).
      ibv_mr* mr = ap->regMr(pd, addr, len, 0);
      if (!mr) {
        *err = errno;
        *why = regError(len, *err);
        return nullptr;
      }
      *lkey = mr->lkey;
      return mr;
    };
    auto dereg = [ap](void* h) { ap->deregMr(static_cast<ibv_mr*>(h)); };
    cache_ = RegCache::create(reg, dereg, o.settings.regCacheBytes, &noZcopyWhy_);
  }
  channel_ = ap->createCompChannel(ctx_);
  if (!channel_) throw SystemError(errnoMessage("ibv_create_comp_channel", errno));
  int fl = fcntl(channel_->fd, F_GETFL);
  if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0)
    throw SystemError(errnoMessage("fcntl(O_NONBLOCK) on the completion channel", errno));
  int perQp = 2 * (static_cast<int>(slots_) + kExtraWr);
  cq_ = ap->createCq(ctx_, std::max(16, perQp * nqp_ * std::max(1, npeers)), nullptr, channel_, 0);
  if (!cq_) throw SystemError(errnoMessage("ibv_create_cq", errno));
  qps_.resize(static_cast<size_t>(o.size) * nqp_);
  std::mt19937 rng(std::random_device{}());
  for (int p = 0; p < o.size; ++p) {
    if (!o.peers[p] || p == o.rank) continue;
    for (int k = 0; k < nqp_; ++k) createQp(p, k, rng() & 0xffffff);
  }
}

void QpMesh::createQp(int peer, int k, uint32_t psn) {
  const Api* ap = api(nullptr);
  size_t ring = slotBytes_ * slots_;
  auto q = std::make_unique<Qp>();
  q->peer = peer;
  q->index = peer * nqp_ + k;
  // Whatever fails below, the half-built QP is kept in qps_ so that its
  // destructor frees what it got.
  auto fail = [&](const std::string& why) {
    size_t i = q->index;
    qps_[i] = std::move(q);
    throw SystemError(why);
  };
  void* m = nullptr;
  void* s = nullptr;
  if (posix_memalign(&m, 4096, ring) != 0) fail("out of memory for the verbs rings");
  q->mbox = static_cast<char*>(m);
  if (posix_memalign(&s, 4096, ring) != 0) fail("out of memory for the verbs rings");
  q->stage = static_cast<char*>(s);
  std::memset(q->mbox, 0, ring);
  q->mboxMr = ap->regMr(pd_, q->mbox, ring, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!q->mboxMr) fail(regError(ring, errno));
  q->stageMr = ap->regMr(pd_, q->stage, ring, IBV_ACCESS_LOCAL_WRITE);
  if (!q->stageMr) fail(regError(ring, errno));
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = slots_ + kExtraWr;
  ia.cap.max_recv_wr = slots_ + kExtraWr;
  ia.cap.max_send_sge = 2;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 256;
  q->qp = ap->createQp(pd_, &ia);
  if (!q->qp) {
    ia.cap.max_inline_data = 0;
    q->qp = ap->createQp(pd_, &ia);
  }
  if (!q->qp) fail(errnoMessage("ibv_create_qp", errno));
  maxInline_ = ia.cap.max_inline_data;
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = static_cast<uint8_t>(port_.port);
  at.pkey_index = 0;
  at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (int rc = ap->modifyQp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    fail(errnoMessage("ibv_modify_qp(INIT)", rc));
  q->psn = psn;
  size_t i = q->index;
  qps_[i] = std::move(q);
}

// ---------------------------------------------------------------- address exchange

// "ok <lid> <mtu> <ethernet> <global> <16 GID bytes>\n" then a line per QP:
// "<peer> <k> <qpn> <psn> <mailbox address> <rkey>".
std::string QpMesh::endpointRecord() const {
  std::ostringstream pub;
  ibv_gid gid{};
  if (port_.gidIndex >= 0) api(nullptr)->queryGid(ctx_, static_cast<uint8_t>(port_.port), port_.gidIndex, &gid);
  pub << "ok " << port_.lid << " " << port_.activeMtu << " " << (port_.ethernet ? 1 : 0) << " "
      << (port_.gidIndex >= 0 ? 1 : 0);
  for (auto b : gid.raw) pub << " " << static_cast<int>(b);
  pub << "\n";
  for (auto& q : qps_)
    if (q)
      pub << q->peer << " " << (q->index % nqp_) << " " << q->qp->qp_num << " " << q->psn << " "
          << reinterpret_cast<uintptr_t>(q->mbox) << " " << q->mboxMr->rkey << "\n";
  return pub.str();
}

bool QpMesh::readRemote(int peer, const std::string& v, Remote* r, std::string* whyNot) const {
  (void)peer;
  if (v.rfind("ok ", 0) != 0) {
    *whyNot = v.size() > 3 ? v.substr(3) : v;
    return false;
  }
  std::istringstream in(v.substr(3));
  int eth = 0, glob = 0;
  in >> r->lid >> r->mtu >> eth >> glob;
  r->eth = eth;
  r->global = glob;
  for (auto& b : r->gid.raw) {
    int x = 0;
    in >> x;
    b = static_cast<uint8_t>(x);
  }
  int p, k;
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  while (in >> p >> k >> qpn >> psn >> addr >> rkey)
    if (p == o_.rank) r->qps.emplace_back(k, qpn, psn, addr, rkey);
  if (r->eth != port_.ethernet) {
    *whyNot = "link layers differ (RoCE and InfiniBand)";
    return false;
  }
  if (static_cast<int>(r->qps.size()) != nqp_) {
    *whyNot = std::to_string(r->qps.size()) + " queue pairs, this rank has " + std::to_string(nqp_) +
              " (ACCL_IB_QPS_PER_PEER differs)";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- QP state changes

void QpMesh::connectQp(Qp& q, const Remote& r) {
  const Api& a = *api(nullptr);
  int k = q.index % nqp_;
  auto it = std::find_if(r.qps.begin(), r.qps.end(), [&](const auto& t) { return std::get<0>(t) == k; });
  if (it == r.qps.end())
    throw SystemError(o_.where + ": rank " + std::to_string(q.peer) + " published no queue pair " + std::to_string(k));
  q.raddr = std::get<3>(*it);
  q.rkey = std::get<4>(*it);
  postRecv(q, static_cast<int>(slots_) + kExtraWr);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = mtuEnum(std::min(port_.activeMtu, r.mtu));
  at.dest_qp_num = std::get<1>(*it);
  at.rq_psn = std::get<2>(*it);
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 12;
  at.ah_attr.port_num = static_cast<uint8_t>(port_.port);
  at.ah_attr.dlid = r.lid;
  if (port_.gidIndex >= 0 || r.global) {
    at.ah_attr.is_global = 1;
    at.ah_attr.grh.dgid = r.gid;
    at.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(0, port_.gidIndex));
    at.ah_attr.grh.hop_limit = 255;
  }
  int rc = a.modifyQp(q.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc == 0) {
    at = ibv_qp_attr{};
    at.qp_state = IBV_QPS_RTS;
    at.timeout = static_cast<uint8_t>(o_.settings.ackTimeout);
    at.retry_cnt = 6;  // 7 would be finite on hardware but means "retry forever" to soft-RoCE
    at.rnr_retry = 7;  // infinite: a receive is always re-posted, never missing for long
    at.sq_psn = q.psn;
    at.max_rd_atomic = 1;
    rc = a.modifyQp(q.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (rc != 0)
    throw SystemError(o_.where + ": connecting the queue pair to rank " + std::to_string(q.peer) +
                      " failed: " + errnoMessage("ibv_modify_qp", rc) +
                      " (a wrong ACCL_IB_GID_INDEX, or the peer unreachable from " + port_.describe() + ")");
}

}  // namespace ib
}  // namespace core
}  // namespace accl
