#include "accl_process_group.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "accl/config.h"
#include "accl/internal/strings.h"
#include "accl/internal/net.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/logging.h"
#include "accl/registry.h"
#include "accl/topology.h"
#include "algorithms/algorithms.h"

namespace accl {

using core::Algo;
using core::Clock;
using core::Coll;
using core::OpDesc;
using core::Peers;
namespace algo = core::algo;

namespace {

std::string defaultHostId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot = internal::readFirstLine("/proc/sys/kernel/random/boot_id");
  struct stat st{};
  std::string ns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "?";
  return std::string(host) + "/" + boot + "/netns:" + ns;
}

// The host's topology, loaded once per process by the topology layer
// (ACCL_TOPO_FILE or a probe). A file the user named must be valid (its error
// propagates); a failed probe only costs the NIC assignment, with a warning.
// The first group created with rank 0 writes ACCL_TOPO_DUMP_FILE.
std::shared_ptr<const topo::Topology> hostTopology(bool dumpHere) {
  static std::mutex mu;
  static std::shared_ptr<const topo::Topology> cached;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (tried) return cached;
  const Config& cfg = Config::get();
  try {
    cached = std::make_shared<const topo::Topology>(topo::loadFromConfig(dumpHere));
  } catch (const Error& e) {
    if (!cfg.topoFile.empty() || !cfg.ibHca.empty()) throw;
    ACCL_WARN("INIT", "topology probe failed, ranks use the first up interface: " << e.what());
  }
  tried = true;
  return cached;
}

// Which NIC this rank uses and which interface carries its TCP traffic.
struct NicChoice {
  std::string ifSpec;  // for the TCP transport (ACCL_SOCKET_IFNAME syntax)
  std::string rdmaDevice;  // the assigned NIC's RDMA device, for verbs ("" = none assigned)
  std::string text;    // for the INFO log
};

NicChoice chooseNic(const topo::Topology* t, int localRank, int localSize) {
  const Config& cfg = Config::get();
  NicChoice c;
  std::ostringstream os;
  os << "local rank " << localRank << "/" << localSize << ": ";
  const topo::Node* nic = nullptr;
  std::string netdev;
  if (t) {
    auto b = t->bindings(localSize, cfg.ibHca)[static_cast<size_t>(localRank)];
    auto up = internal::listInterfaces();
    auto isUp = [&](const std::string& d) {
      return std::any_of(up.begin(), up.end(), [&](const internal::Interface& i) { return i.name == d && !i.loopback; });
    };
    // The first assigned NIC with a netdev up here; the primary is named even without one.
    for (int idx : b.nics) {
      const topo::Node& n = t->nic(idx);
      if (!nic) nic = &n;
      auto d = std::find_if(n.netdevs.begin(), n.netdevs.end(), isUp);
      if (d == n.netdevs.end()) continue;
      if (&n != nic) os << "NIC" << nic->nicIndex << " " << nic->name << " has no usable netdev here, ";
      nic = &n;
      netdev = *d;
      break;
    }
    if (nic && nic->rdma) c.rdmaDevice = nic->name;
    if (nic) {
      os << "NIC" << nic->nicIndex << " " << nic->name << (nic->rdma ? " (RDMA)" : "");
      os << " assigned by the topology (" << t->source
         << (cfg.ibHca.empty() ? "" : ", ACCL_IB_HCA=" + cfg.ibHca) << ")";
      if (b.gpu >= 0) os << " for GPU" << b.gpu;
      if (b.numa >= 0) os << ", NUMA " << b.numa << " CPUs " << b.cpus;
    } else {
      os << "the topology (" << t->source << ") has no NIC";
    }
  } else {
    os << "no topology";
  }
  if (!cfg.socketIfname.empty()) {
    c.ifSpec = cfg.socketIfname;
    os << "; tcp interface from ACCL_SOCKET_IFNAME=" << cfg.socketIfname;
  } else if (!netdev.empty()) {
    c.ifSpec = "=" + netdev;
    os << "; tcp over its netdev " << netdev;
  } else {
    os << "; " << (nic ? "its netdev is not up with an address in this network namespace, " : "")
       << "tcp over the first up interface";
  }
  c.text = os.str();
  return c;
}

uint64_t randomToken() {
  std::random_device rd;
  uint64_t t = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return t ? t : 1;
}

std::vector<size_t> scaled(const std::vector<size_t>& counts, size_t es) {
  std::vector<size_t> b(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) b[i] = counts[i] * es;
  return b;
}

// Rethrows the current accl::Error with `prefix` added, keeping its type.
[[noreturn]] void rethrowWith(const std::string& prefix) {
  try {
    throw;
  } catch (const Timeout& e) {
    throw Timeout(prefix + e.what());
  } catch (const RemoteError& e) {
    throw RemoteError(prefix + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const NotSupported& e) {
    throw NotSupported(prefix + e.what());
  } catch (const SystemError& e) {
    throw SystemError(prefix + e.what());
  } catch (const std::exception& e) {
    throw Internal(prefix + e.what());
  }
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

AcclProcessGroup::AcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& opts)
    : ProcessGroup(rank, size, "accl", opts),
      store_(std::make_shared<PrefixStore>("accl", std::move(store))) {
  const Config& cfg = Config::get();
  algo_ = core::parseAlgoSpec(cfg.algo);
  inlineBytes_ = static_cast<size_t>(cfg.inlineBytes);
  bool shmOn = std::find(cfg.transports.begin(), cfg.transports.end(), "shm") != cfg.transports.end();
  std::string where = context("");
  where = where.substr(0, where.size() - 2);  // "accl rank R/N accl"

  // Rendezvous: a job token (connections must present it) and host ids.
  if (rank == 0) {
    token_ = randomToken();
    store_->set("token", toBytes(std::to_string(token_)));
  } else {
    store_->wait({"token"}, timeout());
    token_ = std::stoull(toString(store_->get("token")));
  }
  std::string hostId = cfg.hostId.empty() ? defaultHostId() : cfg.hostId;
  store_->set("host/" + std::to_string(rank), toBytes(hostId));
  std::vector<std::string> ids(size);
  int nicLocalRank = 0, nicLocalSize = 0;  // among the ranks of this machine (for the NIC)
  for (int r = 0; r < size; ++r) {
    store_->wait({"host/" + std::to_string(r)}, timeout());
    ids[r] = toString(store_->get("host/" + std::to_string(r)));
    if (ids[r] == hostId) {
      if (r < rank) nicLocalRank++;
      nicLocalSize++;
    }
    if (!shmOn) ids[r] += "/rank" + std::to_string(r);  // tcp only: every rank its own host
  }
  hostOf_.resize(size);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    auto it = std::find(hosts.begin(), hosts.end(), ids[r]);
    hostOf_[r] = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(ids[r]);
      hostRanks_.emplace_back();
    }
    hostRanks_[hostOf_[r]].push_back(r);
  }
  myHost_ = hostOf_[rank];
  auto& mine = hostRanks_[myHost_];
  localRank_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  layout_.size = size;
  layout_.hosts = static_cast<int>(hosts.size());
  layout_.shm = shmOn;
  for (auto& h : hostRanks_) {
    layout_.maxLocal = std::max<int>(layout_.maxLocal, h.size());
    layout_.uniform = layout_.uniform && h.size() == hostRanks_[0].size();
  }

  core::net::NetTransport::Options to;
  to.rank = rank;
  to.size = size;
  to.nstreams.resize(size, 1);
  for (int r = 0; r < size; ++r) to.nstreams[r] = hostOf_[r] == myHost_ ? 1 : cfg.socketNstreams;
  to.token = token_;
  NicChoice nic;
  try {
    auto topology = hostTopology(rank == 0);
    nic = chooseNic(topology.get(), nicLocalRank, nicLocalSize);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + ": " + e.what());
  }
  nicText_ = nic.text;
  to.ifSpec = nic.ifSpec;
  to.timeout = timeout();
  to.store = store_;
  to.where = where;
  bool ibOn = std::find(cfg.transports.begin(), cfg.transports.end(), "ib") != cfg.transports.end();
  bool tcpOn = std::find(cfg.transports.begin(), cfg.transports.end(), "tcp") != cfg.transports.end();
  to.ibWanted = ibOn;
  to.ibRequired = ibOn && !tcpOn;
  to.remote.resize(size);
  for (int r = 0; r < size; ++r) to.remote[r] = hostOf_[r] != myHost_;
  to.ib.device = nic.rdmaDevice;
  to.ib.hcaSpec = cfg.ibHca;
  to.ib.gidIndex = cfg.ibGidIndex;
  to.ib.qpsPerPeer = cfg.ibQpsPerPeer;
  to.ib.ackTimeout = cfg.ibTimeout;
  to.ib.zcopyBytes = static_cast<size_t>(cfg.ibZcopyBytes);
  to.ib.regCacheBytes = static_cast<size_t>(cfg.ibRegCacheMb) << 20;
  net_.reset(new core::net::NetTransport(to));

  if (shmOn && mine.size() > 1) {
    core::ShmDomain::Options so;
    so.localRank = localRank_;
    so.localSize = static_cast<int>(mine.size());
    so.ranks = mine;
    char name[96];
    snprintf(name, sizeof(name), "/accl-%016llx-h%d", static_cast<unsigned long long>(token_), myHost_);
    so.segmentName = name;
    so.cma = cfg.shmCma;
    so.store = store_;
    so.timeout = timeout();
    so.where = where;
    std::vector<int> peers;
    for (int r : mine)
      if (r != rank) peers.push_back(r);
    core::net::NetTransport* t = net_.get();
    so.checkFailure = [t, peers] { t->checkPeers(peers); };
    so.onTimeout = [t](const std::vector<int>& missing) {
      t->throwTimeout("local ranks " + list(missing) + " (shared memory)");
    };
    shm_.reset(new core::ShmDomain(so));
  }
  queue_.reset(new internal::OpQueue("accl-coll", /*waiterRuns=*/true));
  prefix_ = context("");
  logSetup();
}

AcclProcessGroup::~AcclProcessGroup() {
  queue_.reset();  // finishes queued ops (each bounded by its deadline)
  shm_.reset();
  net_.reset();
}

void AcclProcessGroup::logSetup() {
  if (!logEnabled(LogLevel::Info, "INIT")) return;
  std::vector<int> shmPeers, tcpPeers, ibPeers;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    (shm_ && hostOf_[r] == myHost_ ? shmPeers : net_->overIb(r) ? ibPeers : tcpPeers).push_back(r);
  }
  std::ostringstream os;
  os << "communicator" << (options().name.empty() ? "" : " '" + options().name + "'") << ": "
     << size() << " ranks on " << layout_.hosts << " host(s), " << hostRanks_[myHost_].size()
     << " on this one; ";
  if (!shmPeers.empty())
    os << "shm (" << (shm_->singleCopy() ? "single-copy process_vm_readv" : "copy through the segment")
       << ") with ranks " << list(shmPeers) << "; ";
  if (!ibPeers.empty()) {
    os << "ib (" << net_->describeIb() << ") with ranks " << list(ibPeers) << "; ";
  }
  if (!tcpPeers.empty())
    os << "tcp (" << net_->interfaceName() << " " << net_->address() << ", "
       << Config::get().socketNstreams << " stream(s) per remote host) with ranks " << list(tcpPeers) << "; ";
  if (shm_ && !shmPeers.empty())
    os << "point-to-point with ranks " << list(shmPeers) << " over tcp; ";
  os << "inline ops up to " << inlineBytes_ << " bytes";
  ACCL_INFO("INIT", os.str());
  ACCL_INFO("INIT", "network: " << nicText_);
  ACCL_INFO("INIT", "algorithms: " << core::describeSelection(layout_, algo_));
}

Peers AcclProcessGroup::flat() {
  Peers g;
  g.t = net_.get();
  g.ranks.resize(size());
  for (int r = 0; r < size(); ++r) g.ranks[r] = r;
  g.me = rank();
  return g;
}

Peers AcclProcessGroup::members(const std::vector<int>& ranks) {
  Peers g;
  g.t = net_.get();
  g.ranks = ranks;
  g.me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
  return g;
}

template <typename Body>
std::shared_ptr<Work> AcclProcessGroup::submit(OpType op, size_t count, DataType t, ReduceKind r,
                                               int root, size_t bytes, std::chrono::milliseconds timeout,
                                               bool blocking, Body&& body) {
  OpDesc d;
  d.seq = seq_++;
  d.count = count;
  d.op = static_cast<uint16_t>(op);
  d.dtype = static_cast<uint8_t>(t);
  d.redop = static_cast<uint8_t>(r);
  d.root = root;
  // Cheap description, formatted when needed (the full one, with counts and
  // dtype, goes into errors).
  auto work = std::make_shared<Work>(toString(op), d.seq);
  ACCL_TRACE("COLL", "enqueue " << core::describe(d));
  auto fn = [this, d, timeout, body = std::forward<Body>(body)]() -> int {
    const std::string& prefix = prefix_;
    if (isBroken_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lk(brokenMu_);
      throw RemoteError(prefix + core::describe(d) + ": the group is unusable after an earlier failure: " + broken_);
    }
    auto deadline = Clock::now() + timeout;
    net_->beginOp(d, deadline, timeout);
    try {
      body(d, deadline);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      net_->endOp(msg);
      {
        std::lock_guard<std::mutex> lk(brokenMu_);
        if (broken_.empty()) broken_ = msg;
        isBroken_.store(true, std::memory_order_release);
      }
      rethrowWith(prefix);
    }
    // On one host nothing of the op went through the transport: nothing to
    // clean up (saves a lock per op on the latency path).
    if (!layout_.singleHost()) net_->endOp();
    return -1;
  };
  // Small ops, and ops whose caller waits at once, run on the calling thread
  // when the group is idle (no thread hand-off).
  if (bytes <= inlineBytes_ || blocking) return queue_->runOrEnqueue(std::move(work), std::move(fn));
  return queue_->enqueue(std::move(work), std::move(fn));
}

// ---------------------------------------------------------------- allreduce

void AcclProcessGroup::allreduceBody(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                                     const OpDesc& d, Clock::time_point deadline) {
  ReduceKind k = internal::elementwiseKind(op.kind);
  size_t es = dataTypeSize(t), bytes = count * es;
  Algo a = core::choose(Coll::Allreduce, bytes, layout_, algo_);
  if (a == Algo::Shm) {
    shm_ ? shm_->allreduce(in, out, count, t, k, d, deadline)
         : (void)(in != out && bytes ? std::memcpy(out, in, bytes) : out);
  } else if (a == Algo::Hierarchical) {
    auto& mine = hostRanks_[myHost_];
    int L = static_cast<int>(mine.size());
    if (layout_.uniform) {
      // Every local rank owns a slice: reduce-scatter on the segment, one
      // exchange per slice between hosts (all local ranks talk to their peers
      // on other hosts at once), allgather on the segment.
      auto counts = core::equalParts(count, L);
      size_t lo = 0;
      for (int i = 0; i < localRank_; ++i) lo += counts[i];
      char* slice = static_cast<char*>(out) + lo * es;
      if (shm_) shm_->reduceScatterv(in, slice, counts, t, k, d, deadline);
      else if (in != out && bytes) std::memcpy(out, in, bytes);
      std::vector<int> rail;
      for (auto& h : hostRanks_) rail.push_back(h[localRank_]);
      Peers g = members(rail);
      size_t sliceBytes = counts[localRank_] * es;
      if (core::chooseInterHost(Coll::Allreduce, sliceBytes, layout_.hosts, algo_) == Algo::Ring)
        algo::allreduceRing(g, slice, counts[localRank_], t, k);
      else
        algo::allreduceRecursiveDoubling(g, slice, counts[localRank_], t, k);
      if (shm_) shm_->allgatherv(slice, out, scaled(counts, es), d, deadline);
    } else {
      // Uneven hosts: reduce to each host's first rank, exchange between
      // those, broadcast on each host.
      if (shm_) shm_->reduce(in, out, count, t, k, 0, d, deadline);
      else if (in != out && bytes) std::memcpy(out, in, bytes);
      if (localRank_ == 0) {
        std::vector<int> leaders;
        for (auto& h : hostRanks_) leaders.push_back(h[0]);
        Peers g = members(leaders);
        if (core::chooseInterHost(Coll::Allreduce, bytes, layout_.hosts, algo_) == Algo::Ring)
          algo::allreduceRing(g, out, count, t, k);
        else
          algo::allreduceRecursiveDoubling(g, out, count, t, k);
      }
      if (shm_) shm_->broadcast(out, bytes, 0, d, deadline);
    }
  } else {
    if (in != out && bytes) std::memcpy(out, in, bytes);
    if (a == Algo::Ring) algo::allreduceRing(flat(), out, count, t, k);
    else algo::allreduceRecursiveDoubling(flat(), out, count, t, k);
  }
  if (op.kind == ReduceKind::Avg) internal::scale(out, count, t, 1.0 / size());
  else if (op.kind == ReduceKind::PremulSum) internal::scale(out, count, t, op.scalar);
}

std::shared_ptr<Work> AcclProcessGroup::doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  size_t bytes = in.count * dataTypeSize(in.dtype);
  return submit(OpType::Allreduce, in.count, in.dtype, o.op.kind, -1, bytes, effectiveTimeout(o), o.blocking,
                [this, in, out, op = o.op](const OpDesc& d, Clock::time_point dl) {
                  allreduceBody(in.data, out.data, in.count, in.dtype, op, d, dl);
                });
}

// ---------------------------------------------------------------- broadcast / reduce

std::shared_ptr<Work> AcclProcessGroup::doBroadcast(Buffer buf, const BroadcastOptions& o) {
  size_t bytes = buf.count * dataTypeSize(buf.dtype);
  return submit(OpType::Broadcast, buf.count, buf.dtype, ReduceKind::Sum, o.root, bytes, effectiveTimeout(o), o.blocking,
                [this, buf, bytes, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  Algo a = core::choose(Coll::Broadcast, bytes, layout_, algo_);
                  if (a == Algo::Shm) {
                    if (shm_) shm_->broadcast(buf.data, bytes, root, d, dl);
                  } else if (a == Algo::Hierarchical) {
                    int rootHost = hostOf_[root];
                    std::vector<int> reps;
                    for (size_t h = 0; h < hostRanks_.size(); ++h)
                      reps.push_back(static_cast<int>(h) == rootHost ? root : hostRanks_[h][0]);
                    int myRep = reps[myHost_];
                    if (myRep == rank()) {
                      Peers g = members(reps);
                      if (core::chooseInterHost(Coll::Broadcast, bytes, layout_.hosts, algo_) == Algo::Ring)
                        algo::broadcastRing(g, buf.data, bytes, rootHost);
                      else
                        algo::broadcastTree(g, buf.data, bytes, rootHost);
                    }
                    auto& mine = hostRanks_[myHost_];
                    int localRoot = static_cast<int>(std::find(mine.begin(), mine.end(), myRep) - mine.begin());
                    if (shm_) shm_->broadcast(buf.data, bytes, localRoot, d, dl);
                  } else if (a == Algo::Ring) {
                    algo::broadcastRing(flat(), buf.data, bytes, root);
                  } else {
                    algo::broadcastTree(flat(), buf.data, bytes, root);
                  }
                });
}

std::shared_ptr<Work> AcclProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  size_t es = dataTypeSize(in.dtype), bytes = in.count * es;
  return submit(OpType::Reduce, in.count, in.dtype, o.op.kind, o.root, bytes, effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, es, op = o.op, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  ReduceKind k = internal::elementwiseKind(op.kind);
                  Algo a = core::choose(Coll::Reduce, bytes, layout_, algo_);
                  if (a == Algo::Shm) {
                    if (shm_) shm_->reduce(in.data, out.data, in.count, in.dtype, k, root, d, dl);
                    else if (in.data != out.data && bytes) std::memcpy(out.data, in.data, bytes);
                  } else if (a == Algo::Hierarchical) {
                    int rootHost = hostOf_[root];
                    std::vector<int> reps;
                    for (size_t h = 0; h < hostRanks_.size(); ++h)
                      reps.push_back(static_cast<int>(h) == rootHost ? root : hostRanks_[h][0]);
                    int myRep = reps[myHost_];
                    auto& mine = hostRanks_[myHost_];
                    int localRoot = static_cast<int>(std::find(mine.begin(), mine.end(), myRep) - mine.begin());
                    std::vector<char> scratch;
                    void* acc = out.data;
                    if (rank() != root) {
                      scratch.resize(bytes);
                      acc = scratch.data();
                    }
                    if (shm_) shm_->reduce(in.data, acc, in.count, in.dtype, k, localRoot, d, dl);
                    else if (acc != in.data && bytes) std::memcpy(acc, in.data, bytes);
                    if (myRep == rank())
                      algo::reduceTree(members(reps), acc, acc, in.count, in.dtype, k, rootHost);
                  } else {
                    algo::reduceTree(flat(), in.data, out.data, in.count, in.dtype, k, root);
                  }
                  (void)es;
                  if (rank() == root) {
                    if (op.kind == ReduceKind::Avg) internal::scale(out.data, in.count, in.dtype, 1.0 / size());
                    else if (op.kind == ReduceKind::PremulSum) internal::scale(out.data, in.count, in.dtype, op.scalar);
                  }
                });
}

// ---------------------------------------------------------------- gathers and scatters

std::shared_ptr<Work> AcclProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  return doAllgatherv(in, out, std::vector<size_t>(size(), in.count), o);
}

std::shared_ptr<Work> AcclProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                     const AllgatherOptions& o) {
  size_t es = dataTypeSize(in.dtype), total = out.count * es;
  return submit(OpType::Allgatherv, out.count, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, counts, es, total](const OpDesc& d, Clock::time_point dl) {
                  auto bytes = scaled(counts, es);
                  size_t displ = 0;
                  for (int r = 0; r < rank(); ++r) displ += bytes[r];
                  char* o = static_cast<char*>(out.data);
                  Algo a = core::choose(Coll::Allgather, total, layout_, algo_);
                  if (a == Algo::Shm) {
                    if (shm_) shm_->allgatherv(in.data, out.data, bytes, d, dl);
                    else if (o + displ != in.data && bytes[rank()]) std::memmove(o + displ, in.data, bytes[rank()]);
                    return;
                  }
                  if (o + displ != in.data && bytes[rank()]) std::memmove(o + displ, in.data, bytes[rank()]);
                  if (a == Algo::Direct) algo::allgathervDirect(flat(), out.data, bytes);
                  else algo::allgathervRing(flat(), out.data, bytes);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doReduceScatterv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                         const ReduceScatterOptions& o) {
  size_t es = dataTypeSize(in.dtype), total = in.count * es;
  return submit(OpType::ReduceScatterv, in.count, in.dtype, o.op.kind, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, counts, es, total, op = o.op](const OpDesc& d, Clock::time_point dl) {
                  ReduceKind k = internal::elementwiseKind(op.kind);
                  size_t displ = 0;
                  for (int r = 0; r < rank(); ++r) displ += counts[r];
                  size_t mine = counts[rank()];
                  Algo a = core::choose(Coll::ReduceScatter, total, layout_, algo_);
                  if (a == Algo::Shm) {
                    if (shm_) shm_->reduceScatterv(in.data, out.data, counts, in.dtype, k, d, dl);
                    else if (in.data != out.data && mine) std::memmove(out.data, in.data, mine * es);
                  } else {
                    std::vector<char> work(static_cast<const char*>(in.data), static_cast<const char*>(in.data) + total);
                    if (a == Algo::RecursiveDoubling)
                      algo::allreduceRecursiveDoubling(flat(), work.data(), in.count, in.dtype, k);
                    else
                      algo::reduceScattervRing(flat(), work.data(), counts, in.dtype, k);
                    if (mine) std::memcpy(out.data, work.data() + displ * es, mine * es);
                  }
                  if (op.kind == ReduceKind::Avg) internal::scale(out.data, mine, in.dtype, 1.0 / size());
                  else if (op.kind == ReduceKind::PremulSum) internal::scale(out.data, mine, in.dtype, op.scalar);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  std::vector<size_t> c(size(), in.count / size());
  return doAlltoallv(in, c, out, c, o);
}

std::shared_ptr<Work> AcclProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                                    const std::vector<size_t>& recvCounts,
                                                    const AlltoallOptions& o) {
  size_t es = dataTypeSize(in.dtype), total = in.count * es;
  return submit(OpType::Alltoallv, 0, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, sendCounts, recvCounts, es](const OpDesc& d, Clock::time_point dl) {
                  auto sb = scaled(sendCounts, es), rb = scaled(recvCounts, es);
                  if (layout_.singleHost()) {
                    if (shm_) shm_->alltoallv(in.data, sb, out.data, rb, d, dl);
                    else if (in.data != out.data && sb[0]) std::memmove(out.data, in.data, sb[0]);
                    return;
                  }
                  std::vector<char> staged;
                  const void* src = in.data;
                  if (in.data == out.data) {
                    size_t n = 0;
                    for (size_t b : sb) n += b;
                    staged.assign(static_cast<const char*>(in.data), static_cast<const char*>(in.data) + n);
                    src = staged.data();
                  }
                  algo::alltoallvPairwise(flat(), src, sb, out.data, rb);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  size_t es = dataTypeSize(in.dtype), bytes = in.count * es;
  return submit(OpType::Gather, in.count, in.dtype, ReduceKind::Sum, o.root, bytes * size(), effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  std::vector<size_t> b(size(), bytes);
                  if (layout_.singleHost()) {
                    if (shm_) shm_->gatherv(in.data, out.data, b, root, d, dl);
                    else if (in.data != out.data && bytes) std::memmove(out.data, in.data, bytes);
                    return;
                  }
                  algo::gathervDirect(flat(), in.data, out.data, b, root);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  size_t es = dataTypeSize(out.dtype), bytes = out.count * es;
  return submit(OpType::Scatter, out.count, out.dtype, ReduceKind::Sum, o.root, bytes * size(), effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  std::vector<size_t> b(size(), bytes);
                  if (layout_.singleHost()) {
                    if (shm_) shm_->scatterv(in.data, out.data, b, root, d, dl);
                    else if (in.data != out.data && bytes) std::memmove(out.data, in.data, bytes);
                    return;
                  }
                  algo::scattervDirect(flat(), in.data, out.data, b, root);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doBarrier(const BarrierOptions& o) {
  return submit(OpType::Barrier, 0, DataType::Uint8, ReduceKind::Sum, -1, 0, effectiveTimeout(o), o.blocking,
                [this](const OpDesc& d, Clock::time_point dl) {
                  Algo a = core::choose(Coll::Barrier, 0, layout_, algo_);
                  if (a == Algo::Shm) {
                    if (shm_) shm_->barrier(d, dl);
                  } else if (a == Algo::Hierarchical) {
                    if (shm_) shm_->barrier(d, dl);
                    if (localRank_ == 0) {
                      std::vector<int> leaders;
                      for (auto& h : hostRanks_) leaders.push_back(h[0]);
                      algo::barrierDissemination(members(leaders));
                    }
                    if (shm_) shm_->barrier(d, dl);
                  } else {
                    algo::barrierDissemination(flat());
                  }
                });
}

// ---------------------------------------------------------------- point-to-point

std::shared_ptr<Work> AcclProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  size_t bytes = buf.count * dataTypeSize(buf.dtype);
  std::string what = context("send to rank " + std::to_string(dst) + " (tag " + std::to_string(o.tag) + ", " +
                             std::to_string(bytes) + " bytes)");
  auto work = std::make_shared<Work>(what);
  net_->postTagged(true, dst, o.tag, buf.data, bytes, Clock::now() + effectiveTimeout(o), work, what);
  return work;
}

std::shared_ptr<Work> AcclProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  size_t bytes = buf.count * dataTypeSize(buf.dtype);
  std::string what = context("recv from " + (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) +
                             " (tag " + std::to_string(o.tag) + ", " + std::to_string(bytes) + " bytes)");
  auto work = std::make_shared<Work>(what);
  net_->postTagged(false, src, o.tag, buf.data, bytes, Clock::now() + effectiveTimeout(o), work, what);
  return work;
}

// ---------------------------------------------------------------- split

std::shared_ptr<ProcessGroup> AcclProcessGroup::doSplit(const std::vector<int>& ranks,
                                                        const ProcessGroupOptions& opts) {
  return splitThroughStore(ranks, opts, splits_++, store_,
                           [](std::shared_ptr<Store> s, int r, int n, const ProcessGroupOptions& o) {
                             return std::make_shared<AcclProcessGroup>(std::move(s), r, n, o);
                           });
}

namespace {
struct Registrar {
  Registrar() {
    BackendInfo info;
    info.name = "accl";
#if ACCL_HAVE_IBVERBS
    info.description =
        "ACCL's own: shared memory within a host, RDMA verbs (where a device is usable) or TCP between hosts "
        "(CPU buffers)";
#else
    info.description = "ACCL's own: shared memory within a host, TCP between hosts (built without verbs; CPU buffers)";
#endif
    info.factory = [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts) {
      return std::make_shared<AcclProcessGroup>(std::move(store), rank, size, opts);
    };
    registerBackend(std::move(info));
  }
} registrar;
}  // namespace

}  // namespace accl
