#include "transport/ibverbs/ib_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "accl/errors.h"
#include "accl/logging.h"
#include "accl/topology.h"
#include "transport/ibverbs/ibv_api.h"

namespace accl {
namespace core {
namespace ib {

namespace {

constexpr uint32_t kCreditOnly = 0x80000000u;
constexpr uint32_t kCountMask = 0x7fffffffu;
constexpr int kExtraWr = 4;  // credit-only writes in flight per QP (at most 2) + margin
constexpr uint64_t kRecvBit = 1ull << 63;

std::string gidText(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, g.raw, buf, sizeof(buf));
  return buf;
}

bool gidZero(const ibv_gid& g) {
  for (auto b : g.raw)
    if (b) return false;
  return true;
}

std::string readLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

ibv_mtu mtuEnum(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

const char* stateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

// ibv_query_port is an inline in verbs.h that prefers the provider's extended
// op and falls back to the exported function; the same here, through the
// dlopen'd table.
int queryPort(const Api& a, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  return a.queryPort(ctx, port, attr);
}

std::string memlockText() {
  rlimit rl{};
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(rl.rlim_cur / 1024) + " KiB";
}

ibv_context* openPort(const Settings& s, PortInfo* out) {
  std::string why;
  const Api* a = api(&why);
  if (!a) throw NotSupported(why);
  int n = 0;
  errno = 0;
  ibv_device** list = a->getDeviceList(&n);
  if (!list) {
    int e = errno;
    throw NotSupported(std::string("ibv_get_device_list failed: ") + std::strerror(e) +
                       (e == ENOSYS ? " (this kernel has no RDMA support)" : ""));
  }
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(a->getDeviceName(list[i]));
  if (names.empty()) {
    a->freeDeviceList(list);
    throw NotSupported("no RDMA device (ibv_get_device_list found none)");
  }
  // The topology's device first, then the others in the kernel's order.
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (names[i] == s.device) order.push_back(i);
  for (int i = 0; i < n; ++i)
    if (names[i] != s.device) order.push_back(i);
  std::string reasons;
  auto note = [&](const std::string& r) { reasons += (reasons.empty() ? "" : "; ") + r; };
  for (int i : order) {
    const std::string& name = names[i];
    if (!s.hcaSpec.empty() && !topo::matchHcaSpec(s.hcaSpec, name)) {
      note(name + ": excluded by ACCL_IB_HCA=" + s.hcaSpec);
      continue;
    }
    ibv_context* ctx = a->openDevice(list[i]);
    if (!ctx) {
      note(name + ": ibv_open_device: " + std::strerror(errno) + " (permissions of /dev/infiniband?)");
      continue;
    }
    ibv_device_attr da{};
    if (a->queryDevice(ctx, &da) != 0) {
      note(name + ": ibv_query_device failed");
      a->closeDevice(ctx);
      continue;
    }
    int want = topo::hcaSpecPort(s.hcaSpec, name);
    for (int p = 1; p <= da.phys_port_cnt; ++p) {
      if (want && p != want) continue;
      ibv_port_attr pa{};
      if (queryPort(*a, ctx, static_cast<uint8_t>(p), &pa) != 0) {
        note(name + " port " + std::to_string(p) + ": ibv_query_port failed");
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        note(name + " port " + std::to_string(p) + ": state " + stateName(pa.state));
        continue;
      }
      PortInfo info;
      info.device = name;
      info.port = p;
      info.lid = pa.lid;
      info.activeMtu = mtuBytes(pa.active_mtu);
      info.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      std::string base = "/sys/class/infiniband/" + name + "/ports/" + std::to_string(p) + "/gid_attrs/types/";
      std::vector<std::pair<std::string, std::string>> table;
      std::vector<ibv_gid> gids;
      for (int g = 0; g < pa.gid_tbl_len && g < 256; ++g) {
        ibv_gid gid{};
        if (a->queryGid(ctx, static_cast<uint8_t>(p), g, &gid) != 0 || gidZero(gid)) {
          table.push_back({"", ""});
          gids.push_back(gid);
          continue;
        }
        table.push_back({gidText(gid), readLine(base + std::to_string(g))});
        gids.push_back(gid);
      }
      int idx = s.gidIndex;
      if (idx >= 0) {
        if (idx >= static_cast<int>(table.size()) || table[idx].first.empty()) {
          note(name + " port " + std::to_string(p) + ": ACCL_IB_GID_INDEX=" + std::to_string(idx) +
               " is not a valid GID entry (" + std::to_string(table.size()) + " entries)");
          continue;
        }
      } else if (info.ethernet) {
        idx = pickGidIndex(table);
        if (idx < 0) {
          note(name + " port " + std::to_string(p) +
               ": no IPv4-mapped GID (its netdev has no IPv4 address?); set ACCL_IB_GID_INDEX");
          continue;
        }
      }
      info.gidIndex = idx;
      if (idx >= 0) {
        info.gidText = table[idx].first;
        info.gidType = table[idx].second;
      }
      a->freeDeviceList(list);
      *out = info;
      return ctx;
    }
    a->closeDevice(ctx);
    if (want && want > da.phys_port_cnt)
      note(name + ": ACCL_IB_HCA names port " + std::to_string(want) + ", the device has " +
           std::to_string(da.phys_port_cnt));
  }
  a->freeDeviceList(list);
  throw NotSupported("no usable RDMA port: " + reasons);
}

}  // namespace

std::string PortInfo::describe() const {
  std::ostringstream os;
  os << device << " port " << port;
  if (ethernet) os << " (RoCE";
  else os << " (InfiniBand, LID " << lid;
  if (gidIndex >= 0) os << ", GID[" << gidIndex << "] " << gidText << (gidType.empty() ? "" : " " + gidType);
  os << ", MTU " << activeMtu << ")";
  return os.str();
}

bool noRdmaHere(const std::string& why) {
  return why.rfind("libibverbs.so.1 cannot be loaded", 0) == 0 || why.rfind("ibv_get_device_list failed", 0) == 0 ||
         why.rfind("no RDMA device", 0) == 0;
}

int pickGidIndex(const std::vector<std::pair<std::string, std::string>>& table) {
  int v1 = -1;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].first.rfind("::ffff:", 0) != 0) continue;
    if (table[i].second == "RoCE v2") return static_cast<int>(i);
    if (v1 < 0) v1 = static_cast<int>(i);
  }
  return v1;
}

PortInfo choosePort(const Settings& s) {
  PortInfo info;
  ibv_context* ctx = openPort(s, &info);
  api(nullptr)->closeDevice(ctx);
  return info;
}

// ---------------------------------------------------------------- link

struct Link::Frame {
  FrameHeader hdr{};
  const char* payload = nullptr;
  std::shared_ptr<void> cookie;
  const char* msg = nullptr;  // the whole message, for its registration
  size_t msgLen = 0;
};

struct Link::Qp {
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

namespace {
std::string regError(size_t bytes, int err) {
  return "ibv_reg_mr of " + std::to_string(bytes) + " bytes failed: " + std::strerror(err) +
         "; this process may lock " + memlockText() +
         " (RLIMIT_MEMLOCK); raise it: `ulimit -l unlimited`, `docker run --ulimit memlock=-1`, "
         "or LimitMEMLOCK=infinity for a systemd service";
}
}  // namespace

std::unique_ptr<Link> Link::connect(const Options& o, Callbacks cb, std::vector<bool>* usable,
                                    std::string* why) {
  usable->assign(o.size, false);
  const std::string me = std::to_string(o.rank);
  std::unique_ptr<Link> L(new Link);
  L->cb_ = std::move(cb);
  L->o_ = o;
  std::string myError;
  std::ostringstream pub;
  try {
    std::string loadWhy;
    const Api* ap = api(&loadWhy);
    if (!ap) throw NotSupported(loadWhy);
    L->ctx_ = openPort(o.settings, &L->port_);
    L->chunk_ = o.settings.chunkBytes;
    L->slotBytes_ = (sizeof(FrameHeader) + L->chunk_ + 63) & ~size_t(63);
    L->slots_ = static_cast<uint32_t>(std::max(4, o.settings.slots));
    L->nqp_ = std::max(1, o.settings.qpsPerPeer);
    int npeers = 0;
    for (int p = 0; p < o.size; ++p) npeers += o.peers[p] && p != o.rank;
    L->pd_ = ap->allocPd(L->ctx_);
    if (!L->pd_) throw SystemError("ibv_alloc_pd failed: " + std::string(std::strerror(errno)));
    L->zcopyBytes_ = o.settings.zcopyBytes;
    if (L->zcopyBytes_ == 0) {
      L->noZcopyWhy_ = "ACCL_IB_ZCOPY_BYTES=0";
    } else {
      ibv_pd* pd = L->pd_;
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
      L->cache_ = RegCache::create(reg, dereg, o.settings.regCacheBytes, &L->noZcopyWhy_);
    }
    L->channel_ = ap->createCompChannel(L->ctx_);
    if (!L->channel_) throw SystemError("ibv_create_comp_channel failed: " + std::string(std::strerror(errno)));
    int fl = fcntl(L->channel_->fd, F_GETFL);
    fcntl(L->channel_->fd, F_SETFL, fl | O_NONBLOCK);
    int perQp = 2 * (static_cast<int>(L->slots_) + kExtraWr);
    L->cq_ = ap->createCq(L->ctx_, std::max(16, perQp * L->nqp_ * std::max(1, npeers)), nullptr, L->channel_, 0);
    if (!L->cq_) throw SystemError("ibv_create_cq failed: " + std::string(std::strerror(errno)));
    L->qps_.resize(static_cast<size_t>(o.size) * L->nqp_);
    std::mt19937 rng(std::random_device{}());
    size_t ring = L->slotBytes_ * L->slots_;
    for (int p = 0; p < o.size; ++p) {
      if (!o.peers[p] || p == o.rank) continue;
      for (int k = 0; k < L->nqp_; ++k) {
        auto q = std::make_unique<Qp>();
        q->peer = p;
        q->index = p * L->nqp_ + k;
        void* m = nullptr;
        void* s = nullptr;
        if (posix_memalign(&m, 4096, ring) != 0 || posix_memalign(&s, 4096, ring) != 0) {
          std::free(m);
          throw SystemError("out of memory for the verbs rings");
        }
        q->mbox = static_cast<char*>(m);
        q->stage = static_cast<char*>(s);
        std::memset(q->mbox, 0, ring);
        q->mboxMr = ap->regMr(L->pd_, q->mbox, ring, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!q->mboxMr) {
          int e = errno;
          L->qps_[q->index] = std::move(q);
          throw SystemError(regError(ring, e));
        }
        q->stageMr = ap->regMr(L->pd_, q->stage, ring, IBV_ACCESS_LOCAL_WRITE);
        if (!q->stageMr) {
          int e = errno;
          L->qps_[q->index] = std::move(q);
          throw SystemError(regError(ring, e));
        }
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = L->cq_;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = L->slots_ + kExtraWr;
        ia.cap.max_recv_wr = L->slots_ + kExtraWr;
        ia.cap.max_send_sge = 2;
        ia.cap.max_recv_sge = 1;
        ia.cap.max_inline_data = 256;
        q->qp = ap->createQp(L->pd_, &ia);
        if (!q->qp) {
          ia.cap.max_inline_data = 0;
          q->qp = ap->createQp(L->pd_, &ia);
        }
        if (!q->qp) {
          int e = errno;
          L->qps_[q->index] = std::move(q);
          throw SystemError(std::string("ibv_create_qp failed: ") + std::strerror(e));
        }
        L->maxInline_ = ia.cap.max_inline_data;
        ibv_qp_attr at{};
        at.qp_state = IBV_QPS_INIT;
        at.port_num = static_cast<uint8_t>(L->port_.port);
        at.pkey_index = 0;
        at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        if (int rc = ap->modifyQp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
          L->qps_[q->index] = std::move(q);
          throw SystemError(std::string("ibv_modify_qp(INIT) failed: ") + std::strerror(rc));
        }
        q->psn = rng() & 0xffffff;
        L->qps_[q->index] = std::move(q);
      }
    }
    // Endpoint record: lid gid mtu linklayer, then a line per QP.
    ibv_gid gid{};
    if (L->port_.gidIndex >= 0)
      ap->queryGid(L->ctx_, static_cast<uint8_t>(L->port_.port), L->port_.gidIndex, &gid);
    pub << "ok " << L->port_.lid << " " << L->port_.activeMtu << " " << (L->port_.ethernet ? 1 : 0) << " "
        << (L->port_.gidIndex >= 0 ? 1 : 0);
    for (auto b : gid.raw) pub << " " << static_cast<int>(b);
    pub << "\n";
    for (auto& q : L->qps_)
      if (q)
        pub << q->peer << " " << (q->index % L->nqp_) << " " << q->qp->qp_num << " " << q->psn << " "
            << reinterpret_cast<uintptr_t>(q->mbox) << " " << q->mboxMr->rkey << "\n";
  } catch (const Error& e) {
    myError = e.what();
  }
  if (!myError.empty()) {
    pub.str("");
    pub << "no " << myError;
  }
  o.store->set("ib/" + me, toBytes(pub.str()));
  if (!myError.empty()) {  // the peers read why from the store; nothing to wait for here
    *why = myError;
    return nullptr;
  }

  // Both ends of a pair decide alike: a pair uses verbs iff both sides are ok.
  std::string reasons;
  struct Remote {
    uint16_t lid = 0;
    int mtu = 0;
    bool eth = false, global = false;
    ibv_gid gid{};
    std::vector<std::tuple<int, uint32_t, uint32_t, uint64_t, uint32_t>> qps;  // k qpn psn addr rkey
  };
  std::vector<Remote> remote(o.size);
  std::vector<bool> ok(o.size, false);
  for (int p = 0; p < o.size; ++p) {
    if (!o.peers[p] || p == o.rank) continue;
    o.store->wait({"ib/" + std::to_string(p)}, o.timeout);
    std::string v = toString(o.store->get("ib/" + std::to_string(p)));
    if (v.rfind("ok ", 0) != 0) {
      reasons += (reasons.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " +
                 (v.size() > 3 ? v.substr(3) : v);
      continue;
    }
    std::istringstream in(v.substr(3));
    Remote& r = remote[p];
    int eth = 0, glob = 0;
    in >> r.lid >> r.mtu >> eth >> glob;
    r.eth = eth;
    r.global = glob;
    for (auto& b : r.gid.raw) {
      int x = 0;
      in >> x;
      b = static_cast<uint8_t>(x);
    }
    int peer, k;
    uint32_t qpn, psn, rkey;
    uint64_t addr;
    while (in >> peer >> k >> qpn >> psn >> addr >> rkey)
      if (peer == o.rank) r.qps.emplace_back(k, qpn, psn, addr, rkey);
    if (r.eth != L->port_.ethernet) {
      reasons += (reasons.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) +
                 ": link layers differ (RoCE and InfiniBand)";
      continue;
    }
    if (static_cast<int>(r.qps.size()) != L->nqp_) {
      reasons += (reasons.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " +
                 std::to_string(r.qps.size()) + " queue pairs, this rank has " + std::to_string(L->nqp_) +
                 " (ACCL_IB_QPS_PER_PEER differs)";
      continue;
    }
    ok[p] = true;
  }
  const Api& a = *api(nullptr);
  int served = 0;
  for (int p = 0; p < o.size; ++p) {
    if (!o.peers[p] || p == o.rank) continue;
    for (int k = 0; k < L->nqp_; ++k) {
      auto& slot = L->qps_[p * L->nqp_ + k];
      if (!ok[p]) {  // the peer cannot use verbs: its QPs go (the rest of the link serves others)
        slot.reset();
        continue;
      }
      Qp& q = *slot;
      const Remote& r = remote[p];
      auto it = std::find_if(r.qps.begin(), r.qps.end(), [&](const auto& t) { return std::get<0>(t) == k; });
      q.raddr = std::get<3>(*it);
      q.rkey = std::get<4>(*it);
      L->postRecv(q, static_cast<int>(L->slots_) + kExtraWr);
      ibv_qp_attr at{};
      at.qp_state = IBV_QPS_RTR;
      at.path_mtu = mtuEnum(std::min(L->port_.activeMtu, r.mtu));
      at.dest_qp_num = std::get<1>(*it);
      at.rq_psn = std::get<2>(*it);
      at.max_dest_rd_atomic = 1;
      at.min_rnr_timer = 12;
      at.ah_attr.port_num = static_cast<uint8_t>(L->port_.port);
      at.ah_attr.dlid = r.lid;
      if (L->port_.gidIndex >= 0 || r.global) {
        at.ah_attr.is_global = 1;
        at.ah_attr.grh.dgid = r.gid;
        at.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(0, L->port_.gidIndex));
        at.ah_attr.grh.hop_limit = 255;
      }
      int rc = a.modifyQp(q.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      if (rc == 0) {
        at = ibv_qp_attr{};
        at.qp_state = IBV_QPS_RTS;
        at.timeout = static_cast<uint8_t>(o.settings.ackTimeout);
        at.retry_cnt = 6;  // 7 would be finite on hardware but means "retry forever" to soft-RoCE
        at.rnr_retry = 7;  // infinite: a receive is always re-posted, never missing for long
        at.sq_psn = q.psn;
        at.max_rd_atomic = 1;
        rc = a.modifyQp(q.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      }
      if (rc != 0)
        throw SystemError(o.where + ": connecting the queue pair to rank " + std::to_string(p) +
                          " failed: ibv_modify_qp: " + std::strerror(rc) +
                          " (a wrong ACCL_IB_GID_INDEX, or the peer unreachable from " + L->port_.describe() + ")");
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

Link::~Link() {
  const Api* a = api(nullptr);
  if (!a) return;
  qps_.clear();   // before the CQ and PD they use
  cache_.reset();  // its registrations: no QP uses them now
  if (cq_) a->destroyCq(cq_);
  if (channel_) a->destroyCompChannel(channel_);
  if (pd_) a->deallocPd(pd_);
  if (ctx_) a->closeDevice(ctx_);
}

int Link::eventFd() const { return channel_ ? channel_->fd : -1; }

void Link::postRecv(Qp& q, int n) {
  for (int i = 0; i < n; ++i) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = kRecvBit | static_cast<uint64_t>(q.index);
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    if (int rc = ibv_post_recv(q.qp, &wr, &bad)) {
      failQp(q, std::string("ibv_post_recv failed: ") + std::strerror(rc));
      return;
    }
  }
}

void Link::post(int peer, int qp, const FrameHeader& hdr, const char* payload, std::shared_ptr<void> cookie,
                const char* msg, size_t msgLen) {
  auto& slot = qps_[static_cast<size_t>(peer) * nqp_ + qp];
  if (!slot || slot->dead) return;  // the peer failed; its requests failed with it
  slot->queue.push_back(Frame{hdr, payload, std::move(cookie), msg, msgLen});
  trySend(*slot);
}

std::string Link::sendMode() const {
  if (!cache_)
    return "payloads copied into registered staging (" + noZcopyWhy_ + ")";
  return "zero-copy from registered user buffers for payloads >= " + std::to_string(zcopyBytes_) +
         " bytes, registration cache up to " + std::to_string(cache_->maxBytes() >> 20) + " MiB";
}

void Link::trySend(Qp& q) {
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
      failQp(q, std::string("ibv_post_send failed: ") + std::strerror(rc));
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

void Link::maybeReturnCredits(Qp& q) {
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
    failQp(q, std::string("ibv_post_send (credits) failed: ") + std::strerror(rc));
    return;
  }
  ++stats_.creditWrites;
  q.reported = q.consumed;
  ++q.creditInflight;
  q.inflight.push_back({false, nullptr});
}

void Link::failQp(Qp& q, const std::string& why) {
  if (q.dead) return;
  int peer = q.peer;
  for (int k = 0; k < nqp_; ++k) {
    auto& s = qps_[static_cast<size_t>(peer) * nqp_ + k];
    if (s) s->dead = true;
  }
  cb_.fail(peer, why);
}

bool Link::progress() {
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
                        "; the peer's process or port is gone?)");
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
          if (cb_.sent) cb_.sent(done.cookie);
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

bool Link::arm() {
  ibv_req_notify_cq(cq_, 0);
  return progress();
}

void Link::onEvent() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  const Api* a = api(nullptr);
  int n = 0;
  while (a->getCqEvent(channel_, &cq, &ctx) == 0) ++n;
  if (n) a->ackCqEvents(cq_, static_cast<unsigned>(n));
}

bool Link::withdraw(const std::shared_ptr<void>& cookie) {
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

void Link::dropPeer(int peer, const std::function<void(const std::shared_ptr<void>&)>& each) {
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

void Link::drain(std::chrono::milliseconds limit) {
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

}  // namespace ib
}  // namespace core
}  // namespace accl
