#include "accl_process_group.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include "accl/config.h"
#include "accl/internal/strings.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/internal/work_pool.h"
#include "accl/logging.h"
#include "accl/registry.h"
#include "accl/trace.h"
#include "algorithms/algorithms.h"
#include "nic_choice.h"
#include "settings.h"
#include "transport/copy.h"
#include "transport/machine.h"
#include "transport/shm.h"

namespace accl {

using core::Algo;
using core::Clock;
using core::Coll;
using core::OpDesc;
using core::Peers;
namespace algo = core::algo;

namespace {

// The flight recorder's transport column: static strings (the recorder keeps
// the pointer), one per combination.
const char* transportName(bool shm, bool ib, bool tcp) {
  static const char* const names[8] = {"local", "tcp", "ib", "ib+tcp", "shm", "shm+tcp", "shm+ib", "shm+ib+tcp"};
  return names[(shm ? 4 : 0) | (ib ? 2 : 0) | (tcp ? 1 : 0)];
}

uint64_t randomToken() {
  std::random_device rd;
  uint64_t t = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return t ? t : 1;
}

// A readable name of each rank's host: the host name from its host id, with
// "#<host index>" where different hosts share it (namespaces, containers).
std::vector<std::string> hostLabels(const std::vector<std::string>& ids) {
  std::map<std::string, std::vector<std::string>> idsOfName;  // host name -> distinct ids, in rank order
  std::vector<std::string> out(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    out[r] = ids[r].substr(0, ids[r].find('/'));
    auto& v = idsOfName[out[r]];
    if (std::find(v.begin(), v.end(), ids[r]) == v.end()) v.push_back(ids[r]);
  }
  for (size_t r = 0; r < ids.size(); ++r) {
    const auto& v = idsOfName[out[r]];
    if (v.size() > 1) out[r] += "#" + std::to_string(std::find(v.begin(), v.end(), ids[r]) - v.begin());
  }
  return out;
}

}  // namespace

AcclProcessGroup::AcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& opts)
    : ProcessGroup(rank, size, "accl", opts),
      store_(std::make_shared<PrefixStore>("accl", std::move(store))) {
  const Config& cfg = Config::get();
  settings::validate();
  algo_ = core::parseAlgoSpec(settings::algo.get());
  if (!settings::tuningFile.get().empty()) {
    try {
      model_.reset(new core::CostModel(core::CostModel::fromFile(settings::tuningFile.get())));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(context("") + "ACCL_TUNING_FILE: " + e.what());
    }
  }
  inlineBytes_ = static_cast<size_t>(settings::inlineBytes.get());
  bool shmOn = settings::transportOn("shm");
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
  // Each rank's host id, and after a newline its machine and CPUs
  // (machineText()): hosts made of one machine by namespaces or containers
  // share its cores.
  std::string hostId = settings::hostId.get().empty() ? defaultHostId() : settings::hostId.get();
  const std::string machine = core::machineText();
  store_->set("host/" + std::to_string(rank), toBytes(hostId + "\n" + machine));
  std::vector<std::string> ids(size), machines(size);
  int nicLocalRank = 0, nicLocalSize = 0;  // among the ranks of this machine (for the NIC)
  for (int r = 0; r < size; ++r) {
    store_->wait({"host/" + std::to_string(r)}, timeout());
    ids[r] = toString(store_->get("host/" + std::to_string(r)));
    size_t nl = ids[r].find('\n');
    if (nl != std::string::npos) {
      machines[r] = ids[r].substr(nl + 1);
      ids[r].resize(nl);
    }
    if (ids[r] == hostId) {
      if (r < rank) nicLocalRank++;
      nicLocalSize++;
    }
  }
  layout_ = core::Layout::fromHostIds(ids, rank, shmOn);
  const bool machineShared = core::machineOversubscribed(machine, machines);

  core::net::NetTransport::Options to;
  to.rank = rank;
  to.size = size;
  to.nstreams.resize(size, 1);
  for (int r = 0; r < size; ++r) to.nstreams[r] = layout_.hostOf[r] == layout_.myHost ? 1 : settings::socketNstreams.get();
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
  bool ibOn = settings::transportOn("ib");
  bool tcpOn = settings::transportOn("tcp");
  to.ibWanted = ibOn;
  to.ibRequired = ibOn && !tcpOn;
  to.shmWanted = shmOn;
  to.shmCma = settings::shmCma.get() != "off";
  to.shmCmaAlways = settings::shmCma.get() == "on";
  to.shmStream = settings::shmStreamBytes.get();
  {
    // Process-wide (copy.h): every group reads the same environment.
    int stream = settings::shmStreamBytes.get();
    if (stream == 0) internal::setStreamingMin(SIZE_MAX);
    else if (stream > 0) internal::setStreamingMin(static_cast<size_t>(stream));
  }
  to.unexpectedCacheBytes = static_cast<size_t>(settings::unexpectedCacheMb.get()) << 20;
  to.remote.resize(size);
  for (int r = 0; r < size; ++r) to.remote[r] = layout_.hostOf[r] != layout_.myHost;
  to.ib.device = nic.rdmaDevice;
  to.ib.hcaSpec = cfg.ibHca;
  to.ib.gidIndex = settings::ibGidIndex.get();
  to.ib.qpsPerPeer = settings::ibQpsPerPeer.get();
  to.ib.ackTimeout = settings::ibTimeout.get();
  to.ib.zcopyBytes = static_cast<size_t>(settings::ibZcopyBytes.get());
  to.ib.regCacheBytes = static_cast<size_t>(settings::ibRegCacheMb.get()) << 20;
  to.stallWarn = cfg.stallWarn;
  std::vector<std::string> hosts = hostLabels(ids);
  to.hosts = hosts;
  to.onStall = [this](const std::string& msg) {
    if (runningTrace_ && recorder()) recorder()->waiting(runningTrace_, msg);
  };
  net_.reset(new core::net::NetTransport(to));

  const std::vector<int>& mine = layout_.local();
  std::vector<int32_t> localPids;  // where the local ranks share CPUs: the point-to-point probe's
  if (mine.size() > 1) {  // shared memory on, and other ranks here
    core::ShmDomain::Options so;
    so.localRank = layout_.localRank;
    so.localSize = static_cast<int>(mine.size());
    so.ranks = mine;
    char name[96];
    snprintf(name, sizeof(name), "/accl-%016llx-h%d", static_cast<unsigned long long>(token_), layout_.myHost);
    so.segmentName = name;
    // The segment's collectives copy through its slots, but where single copy
    // is asked for (ACCL_SHM_CMA=on: every size from its thresholds) or, under
    // auto with a CPU per local rank, in the size bands where it measured
    // faster when the domain was made (shm.cc, kProbeBytes).
    const std::string& cma = settings::shmCma.get();
    so.cma = cma == "on" ? 1 : cma == "off" ? -1 : 0;
    so.stream = settings::shmStreamBytes.get();
    // Ranks that share cores (this host's, or with the other hosts of this
    // machine): a spinning waiter takes the core its peer needs, and a
    // single-copy message makes its sender wait for a hand-off.
    so.cpusShared = machineShared;
    so.store = store_;
    so.timeout = timeout();
    so.where = where;
    std::vector<int> peers;
    for (int r : mine)
      if (r != rank) peers.push_back(r);
    core::net::NetTransport* t = net_.get();
    so.checkFailure = [t, peers] { t->checkPeers(peers); };
    so.explainExit = [t, mine](int localPeer) { t->throwAbortOfExited(mine[localPeer], std::chrono::milliseconds(1000)); };
    so.onTimeout = [t](const std::vector<int>& missing) {
      t->throwTimeout("local ranks " + internal::join(missing) + " (shared memory)");
    };
    so.onBlocked = [t](const std::vector<int>& missing) {
      if (t->stallDue()) t->warnStall("local ranks " + internal::join(missing) + " (shared memory)");
    };
    auto* dom = new core::ShmDomain(so);
    host_.reset(dom);
    net_->setLocalRanksShareCpus(dom->oversubscribed(), dom->singleCopyEveryBandFrom());
    if (dom->oversubscribed()) localPids = dom->localPids();
  } else {
    host_ = core::makeSoloHost();
    net_->setLocalRanksShareCpus(machineShared);
  }
  queue_.reset(new internal::OpQueue("accl-coll", /*waiterRuns=*/true));
  prefix_ = context("");
  if (!localPids.empty()) probePointToPoint(mine, localPids);
  bool ib = false, tcp = false;
  for (int r = 0; r < size; ++r)
    if (layout_.hostOf[r] != layout_.myHost) (net_->overIb(r) ? ib : tcp) = true;
  transportName_ = transportName(host_->size() > 1, ib, tcp);
  algo_.rdmaBetweenHosts = ib;  // the fixed thresholds' link (select.cc)
  if (model_ && (ib || tcp) && model_->transport != (ib ? "ib" : "tcp"))
    ACCL_WARN("INIT", where << ": ACCL_TUNING_FILE " << settings::tuningFile.get() << " was calibrated over "
                            << model_->transport << ", but this group reaches other hosts over " << (ib ? "ib" : "tcp")
                            << ": its algorithm choices may be off (calibrate over this transport: accl-perf "
                               "--calibrate FILE)");
  if (FlightRecorder* rec = recorder()) {
    rec->setOwnStallWarnings();  // the transport's name the ranks
    rec->setHosts(std::move(hosts));
    core::net::NetTransport* t = net_.get();
    rec->setTrafficSource([t] { return t->traffic(); });
  }
  logSetup();
}

AcclProcessGroup::~AcclProcessGroup() {
  queue_.reset();  // finishes queued ops (each bounded by its deadline)
  if (FlightRecorder* rec = recorder()) rec->close();  // statistics, while the transport is there
  host_.reset();
  net_.reset();
}

void AcclProcessGroup::notePeerBytes(uint64_t traceId) {
  // Few peers (a ring's or a tree's): on the stack, into the recorder's
  // own ring, with no allocation.
  constexpr size_t kFew = FlightRecorder::kInlinePeers;
  core::net::NetTransport::OpBytes few[kFew];
  size_t n = net_->opTrafficInto(few, kFew);
  if (n == 0) return;
  if (n <= kFew) {
    PeerBytes p[kFew];
    for (size_t i = 0; i < n; ++i) p[i] = {few[i].rank, few[i].sent, few[i].received};
    recorder()->peerBytes(traceId, p, n);
    return;
  }
  std::vector<PeerBytes> v;
  for (const auto& b : net_->opTraffic()) v.push_back({b.rank, b.sent, b.received});
  recorder()->peerBytes(traceId, v);
}

void AcclProcessGroup::tracePointToPoint(int peer) {
  uint64_t id = issuingTraceId();
  if (!id) return;
  // Posted now; the transport moves it.
  recorder()->started(id, -1, "p2p", peer >= 0 && net_->overIb(peer) ? "ib" : peer >= 0 && net_->overShm(peer) ? "shm" : "tcp");
}

// ---------------------------------------------------------------- point-to-point probe

namespace {
// Where the host's ranks share CPUs, a point-to-point message through the
// rings costs two copies and a hand-off of the CPU at each end; by single
// copy, a system call and the kernel's pinning of the sender's pages. Which
// is faster at 16-32 KiB depends on the machine: 4 ranks on 2 cores, sendrecv
// against Open MPI's busbw, through the rings / by single copy: at 16-32 KiB
// 1.09-2.57 / 0.59-0.91 on a 2-core AMD EPYC VM, 0.60-0.97 / 0.93-1.03 on a
// 2-core Intel Xeon VM (docs/performance-history.md, "A point-to-point probe
// where ranks share CPUs"). Below 16 KiB the rings won on both, from 64 KiB
// single copy (ShmLink::kSingleCopyAutoMinSharedCpus).
constexpr size_t kP2pProbeBytes[] = {16u << 10, 32u << 10};
constexpr int kP2pProbeSizes = sizeof(kP2pProbeBytes) / sizeof(kP2pProbeBytes[0]);
constexpr int kP2pBatch = 8;  // exchanges per timed batch
constexpr int kP2pReps = 3;   // batches per size and way (the fastest counts)
// The probe's tag. No user's message can match it: every local rank has
// received every probe message before any leaves the probe (the agreement on
// the times comes after the last exchange), and no rank has posted a user
// op before that. (Not a negative tag: the API refuses those, and the op's
// description packs its tags as non-negative.)
constexpr int kP2pProbeTag = 0x7fff5032;
// A group made again by the same processes (a split, a group made anew)
// takes the verdict of the first: the local ranks' pids in local-rank order,
// and the smallest single-copy size (KiB).
struct KnownP2p {
  std::vector<int32_t> pids;
  double fromKiB;
};
std::mutex gP2pMu;
std::vector<KnownP2p> gP2p;
}  // namespace

void AcclProcessGroup::probePointToPoint(const std::vector<int>& local, const std::vector<int32_t>& pids) {
  int n = static_cast<int>(local.size()), me = layout_.localRank;
  auto deadline = core::deadlineAfter(timeout());
  core::OpDesc d{};
  d.op = 0xffc;
  auto agreeMax = [&](std::vector<double>& v) {
    host_->allreduce(v.data(), v.data(), v.size(), DataType::Float64, ReduceKind::Max, d, deadline);
  };
  double known = -1;
  {
    std::lock_guard<std::mutex> lk(gP2pMu);
    for (const auto& e : gP2p)
      if (e.pids == pids) known = e.fromKiB;
  }
  // Whether every local rank may probe (single copy allowed between all,
  // ACCL_SHM_CMA=auto), and whether all know the verdict already.
  std::vector<double> head = {net_->shmSingleCopyProbeable() ? 0.0 : 1.0, known, -known};
  agreeMax(head);
  if (head[0] > 0) return;
  auto apply = [&](double fromKiB) { net_->setShmSingleCopyMin(static_cast<size_t>(fromKiB) << 10); };
  if (head[1] >= 0 && head[1] == -head[2]) {
    apply(head[1]);
    p2pProbe_ = "point-to-point by single copy from " + internal::sizeText(head[1] * 1024) +
                " (the point-to-point probe of an earlier group of these processes)";
    return;
  }
  size_t before = net_->shmSingleCopyMin();
  auto began = core::Clock::now();
  size_t maxBytes = kP2pProbeBytes[kP2pProbeSizes - 1];
  std::vector<char> out(maxBytes, static_cast<char>(me + 1)), in(maxBytes);
  int to = local[(me + 1) % n], from = local[(me + n - 1) % n];
  auto exchange = [&](size_t bytes) {
    SendRecvOptions o;
    o.sendTag = o.recvTag = kP2pProbeTag;
    o.blocking = true;
    o.timeout = timeout();
    doSendRecv(Buffer(out.data(), bytes, DataType::Uint8), to, Buffer(in.data(), bytes, DataType::Uint8), from, o)
        ->wait();
  };
  // times[(rep * sizes + size) * 2 + way]: way 0 the rings, 1 single copy.
  std::vector<double> times(static_cast<size_t>(kP2pReps * kP2pProbeSizes * 2));
  for (int r = 0; r < kP2pReps; ++r)
    for (int s = 0; s < kP2pProbeSizes; ++s)
      for (int w = 0; w < 2; ++w) {
        int way = (r + w) % 2;  // alternately first
        net_->setShmSingleCopyMin(way ? kP2pProbeBytes[0] : core::net::ShmLink::kSingleCopyNever);
        exchange(kP2pProbeBytes[s]);  // the way's first message (a receive may still take the other)
        auto t0 = core::Clock::now();
        for (int i = 0; i < kP2pBatch; ++i) exchange(kP2pProbeBytes[s]);
        times[static_cast<size_t>((r * kP2pProbeSizes + s) * 2 + way)] =
            std::chrono::duration<double>(core::Clock::now() - t0).count();
      }
  // Each batch as long as its slowest rank's.
  agreeMax(times);
  double ratio[kP2pProbeSizes];
  for (int s = 0; s < kP2pProbeSizes; ++s) {
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < kP2pReps; ++r)
      for (int w = 0; w < 2; ++w) best[w] = std::min(best[w], times[static_cast<size_t>((r * kP2pProbeSizes + s) * 2 + w)]);
    ratio[s] = best[1] / best[0];
  }
  int first = kP2pProbeSizes;
  while (first > 0 && ratio[first - 1] < 1.0) --first;
  double fromKiB = first < kP2pProbeSizes ? static_cast<double>(kP2pProbeBytes[first] >> 10)
                                          : static_cast<double>(before >> 10);
  apply(fromKiB);
  {
    std::lock_guard<std::mutex> lk(gP2pMu);
    gP2p.push_back({pids, fromKiB});
  }
  std::ostringstream os;
  os << "point-to-point probe (single copy's time / the rings', " << n << " local ranks sharing CPUs):";
  for (int s = 0; s < kP2pProbeSizes; ++s) {
    char r[16];
    snprintf(r, sizeof(r), "%.2fx", ratio[s]);
    os << (s ? ", " : " ") << internal::sizeText(static_cast<double>(kP2pProbeBytes[s])) << " " << r;
  }
  char took[32];
  snprintf(took, sizeof(took), "%.1f ms", std::chrono::duration<double, std::milli>(core::Clock::now() - began).count());
  os << "; point-to-point by single copy from " << internal::sizeText(fromKiB * 1024) << " (the probe took " << took
     << ")";
  p2pProbe_ = os.str();
}

void AcclProcessGroup::logSetup() {
  if (!logEnabled(LogLevel::Info, "INIT")) return;
  std::vector<int> shmPeers, tcpPeers, ibPeers;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    (layout_.hostOf[r] == layout_.myHost ? shmPeers : net_->overIb(r) ? ibPeers : tcpPeers).push_back(r);
  }
  std::ostringstream os;
  os << "communicator" << (options().name.empty() ? "" : " '" + options().name + "'") << ": "
     << size() << " ranks on " << layout_.hosts << " host(s), " << host_->size()
     << " on this one; ";
  if (!shmPeers.empty())
    os << "shm (" << host_->describe() << ") with ranks " << internal::join(shmPeers) << "; ";
  if (!ibPeers.empty()) {
    os << "ib (" << net_->describeIb() << ") with ranks " << internal::join(ibPeers) << "; ";
  }
  if (!tcpPeers.empty())
    os << "tcp (" << net_->interfaceName() << " " << net_->address() << ", "
       << settings::socketNstreams.get() << " stream(s) per remote host) with ranks " << internal::join(tcpPeers) << "; ";
  if (!shmPeers.empty()) {
    std::vector<int> rings, tcp;
    for (int r : shmPeers) (net_->overShm(r) ? rings : tcp).push_back(r);
    if (!rings.empty())
      os << "point-to-point with ranks " << internal::join(rings) << " over " << net_->describeShm() << "; ";
    if (!tcp.empty()) os << "point-to-point with ranks " << internal::join(tcp) << " over tcp; ";
  }
  os << "inline ops up to " << inlineBytes_ << " bytes";
  ACCL_INFO("INIT", os.str());
  if (!p2pProbe_.empty()) ACCL_INFO("INIT", p2pProbe_);
  ACCL_INFO("INIT", "network: " << nicText_);
  ACCL_INFO("INIT", "algorithms: " << core::describeSelection(layout_, algo_, model_.get()) << " ("
                                   << (model_ ? "chosen by the cost model of " + model_->source()
                                              : std::string("fixed size thresholds; ACCL_TUNING_FILE lets a "
                                                            "calibrated cost model choose"))
                                   << ")");
}

Peers AcclProcessGroup::flat() {
  Peers g;
  g.t = net_.get();
  g.ranks.resize(size());
  for (int r = 0; r < size(); ++r) g.ranks[r] = r;
  g.me = rank();
  g.scratch = &scratch_;
  return g;
}

Peers AcclProcessGroup::members(const std::vector<int>& ranks) {
  Peers g;
  g.t = net_.get();
  g.ranks = ranks;
  g.me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
  g.scratch = &scratch_;
  return g;
}

template <typename Body>
int AcclProcessGroup::runOp(const OpDesc& d, std::chrono::milliseconds timeout, uint64_t traceId,
                            const Body& body) {
  const std::string& prefix = prefix_;
  // noteAlgo() records the start (the group runs one op at a time).
  runningTrace_ = traceId;
  runningSeq_ = d.seq;
  if (isBroken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(brokenMu_);
    throw RemoteError(prefix + core::describe(d) + ": the group is unusable after an earlier failure: " + broken_);
  }
  auto deadline = core::deadlineAfter(timeout);
  // On one host nothing of the op goes through the transport: it only
  // learns which op runs (for stall warnings and peers' queries), no lock.
  if (layout_.singleHost())
    net_->beginLocalOp(d, deadline, timeout);
  else
    net_->beginOp(d, deadline, timeout);
  // With the timeline or statistics on, the transports time this op's
  // waits for its peers (the timeline's "waiting for peers" span).
  struct TimedWaits {
    AcclProcessGroup* g;
    uint64_t id;
    FlightRecorder* rec;
    core::WaitTimes w;
    TimedWaits(AcclProcessGroup* pg, uint64_t traceId) : g(pg), id(traceId), rec(traceId ? pg->recorder() : nullptr) {
      if (!rec || !rec->timesOps()) {
        rec = nullptr;
        return;
      }
      g->host_->timeWaits(&w);
      g->net_->timeWaits(&w);
    }
    ~TimedWaits() {
      if (!rec) return;
      g->host_->timeWaits(nullptr);
      g->net_->timeWaits(nullptr);
      rec->waited(id, w.firstNs, w.lastNs, w.totalNs);
    }
  } timedWaits(this, traceId);
  // What the op moved per peer over the network (none within one host:
  // the test is inline, the copy a call).
  auto notePeers = [&] {
    if (traceId && !layout_.singleHost()) notePeerBytes(traceId);
  };
  // The op's scratch buffers above Scratch::kKeepMax go when it ends.
  struct TrimScratch {
    core::Scratch& s;
    ~TrimScratch() { s.trim(); }
  } trimScratch{scratch_};
  try {
    body(d, deadline);
  } catch (const std::exception& e) {
    notePeers();
    std::string msg = e.what();
    net_->endOp(msg);
    {
      std::lock_guard<std::mutex> lk(brokenMu_);
      if (broken_.empty()) broken_ = msg;
      isBroken_.store(true, std::memory_order_release);
    }
    rethrowWithPrefix(prefix);
  }
  notePeers();
  // On one host nothing of the op went through the transport: nothing to
  // clean up but the flag that an op runs (no lock on the latency path).
  if (!layout_.singleHost())
    net_->endOp();
  else
    net_->leaveOp();
  return -1;
}

template <typename Body>
std::shared_ptr<Work> AcclProcessGroup::submit(OpType op, size_t count, DataType t, ReduceKind r,
                                               int root, size_t bytes, std::chrono::milliseconds timeout,
                                               bool blocking, Body&& body) {
  OpDesc d;
  // Only collectives come here, issued in one order (the API's rule), so by
  // one thread at a time: no locked increment.
  d.seq = seq_.load(std::memory_order_relaxed);
  seq_.store(d.seq + 1, std::memory_order_relaxed);
  d.count = count;
  d.op = static_cast<uint16_t>(op);
  d.dtype = static_cast<uint8_t>(t);
  d.redop = static_cast<uint8_t>(r);
  d.root = root;
  // Cheap description, formatted when needed (the full one, with counts and
  // dtype, goes into errors).
  // The op's Work, made where it is needed (see runOrEnqueueMade).
  auto makeWork = [&] { return internal::makeWork(toString(op), d.seq); };
  ACCL_TRACE("COLL", "enqueue " << core::describe(d));
  uint64_t traceId = issuingTraceId();
  auto owning = [&] {
    return [this, d, timeout, traceId, body = std::forward<Body>(body)]() -> int {
      return runOp(d, timeout, traceId, body);
    };
  };
  // Small ops, and ops whose caller waits at once, run on the calling thread
  // when the group is idle (no thread hand-off, no copy of the op into a
  // closure, and no Work of their own when they succeed).
  if (bytes <= inlineBytes_ || blocking)
    return queue_->runOrEnqueueMade(
        makeWork, [&] { return runOp(d, timeout, traceId, body); }, owning);
  return queue_->enqueue(makeWork(), owning());
}

// ---------------------------------------------------------------- allreduce

void AcclProcessGroup::allreduceBody(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                                     const OpDesc& d, Clock::time_point deadline) {
  ReduceKind k = internal::elementwiseKind(op.kind);
  size_t es = dataTypeSize(t), bytes = count * es;
  Algo a = core::choose(Coll::Allreduce, bytes, layout_, algo_, model_.get());
  noteAlgo(a);
  if (a == Algo::Shm) {
    host_->allreduce(in, out, count, t, k, d, deadline);
  } else if (a == Algo::Hierarchical && layout_.uniform) {
    // Every local rank owns a slice: reduce-scatter on the host, one exchange
    // per slice between hosts (all local ranks talk to their peers on other
    // hosts at once), allgather on the host.
    auto counts = core::equalParts(count, host_->size());
    size_t lo = 0;
    for (int i = 0; i < layout_.localRank; ++i) lo += counts[i];
    char* slice = static_cast<char*>(out) + lo * es;
    size_t mine = counts[layout_.localRank];
    host_->reduceScatterv(in, slice, counts, t, k, d, deadline);
    Peers g = members(layout_.rail(layout_.localRank));
    if (core::chooseInterHost(Coll::Allreduce, mine * es, layout_.hosts, algo_, model_.get()) == Algo::Ring)
      algo::allreduceRing(g, slice, mine, t, k);
    else
      algo::allreduceRecursiveDoubling(g, slice, mine, t, k);
    host_->allgatherv(slice, out, scaledBytes(sizesA_, counts, es), d, deadline);
  } else if (a == Algo::Hierarchical) {
    // Uneven hosts: reduce to each host's first rank, exchange between
    // those, broadcast on each host.
    host_->reduce(in, out, count, t, k, 0, d, deadline);
    if (layout_.localRank == 0) {
      Peers g = members(layout_.leaders());
      if (core::chooseInterHost(Coll::Allreduce, bytes, layout_.hosts, algo_, model_.get()) == Algo::Ring)
        algo::allreduceRing(g, out, count, t, k);
      else
        algo::allreduceRecursiveDoubling(g, out, count, t, k);
    }
    host_->broadcast(out, bytes, 0, d, deadline);
  } else {
    // Out of place without a copy first: the first step reads `in`.
    if (a == Algo::Ring) algo::allreduceRing(flat(), in, out, count, t, k);
    else algo::allreduceRecursiveDoubling(flat(), in, out, count, t, k);
  }
  internal::finishReduce(op, out, count, t, size());
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
                  Algo a = core::choose(Coll::Broadcast, bytes, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) {
                    host_->broadcast(buf.data, bytes, root, d, dl);
                  } else if (a == Algo::Hierarchical) {
                    int rootHost = layout_.hostOf[root];
                    std::vector<int> reps = layout_.reps(root);
                    int myRep = reps[layout_.myHost];
                    if (myRep == rank()) {
                      Peers g = members(reps);
                      if (core::chooseInterHost(Coll::Broadcast, bytes, layout_.hosts, algo_, model_.get()) == Algo::Ring)
                        algo::broadcastRing(g, buf.data, bytes, rootHost);
                      else
                        algo::broadcastTree(g, buf.data, bytes, rootHost);
                    }
                    host_->broadcast(buf.data, bytes, layout_.localIndex(myRep), d, dl);
                  } else if (a == Algo::Ring) {
                    algo::broadcastRing(flat(), buf.data, bytes, root);
                  } else {
                    algo::broadcastTree(flat(), buf.data, bytes, root);
                  }
                });
}

std::shared_ptr<Work> AcclProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  size_t bytes = in.count * dataTypeSize(in.dtype);
  return submit(OpType::Reduce, in.count, in.dtype, o.op.kind, o.root, bytes, effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, op = o.op, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  ReduceKind k = internal::elementwiseKind(op.kind);
                  Algo a = core::choose(Coll::Reduce, bytes, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) {
                    host_->reduce(in.data, out.data, in.count, in.dtype, k, root, d, dl);
                  } else if (a == Algo::Hierarchical) {
                    int rootHost = layout_.hostOf[root];
                    std::vector<int> reps = layout_.reps(root);
                    int myRep = reps[layout_.myHost];
                    void* acc = out.data;
                    if (rank() != root) acc = scratch_.get(core::Scratch::kOpWhole, bytes);
                    host_->reduce(in.data, acc, in.count, in.dtype, k, layout_.localIndex(myRep), d, dl);
                    if (myRep == rank())
                      algo::reduceTree(members(reps), acc, acc, in.count, in.dtype, k, rootHost);
                  } else {
                    algo::reduceTree(flat(), in.data, out.data, in.count, in.dtype, k, root);
                  }
                  if (rank() == root) internal::finishReduce(op, out.data, in.count, in.dtype, size());
                });
}

// ---------------------------------------------------------------- gathers and scatters

void AcclProcessGroup::allgatherBody(Buffer in, Buffer out, const std::vector<size_t>& bytes, size_t total,
                                     const OpDesc& d, Clock::time_point dl) {
  size_t displ = 0;
  for (int r = 0; r < rank(); ++r) displ += bytes[r];
  char* o = static_cast<char*>(out.data);
  Algo a = core::choose(Coll::Allgather, total, layout_, algo_, model_.get());
  noteAlgo(a);
  if (a == Algo::Shm) return host_->allgatherv(in.data, out.data, bytes, d, dl);
  if (a == Algo::Hierarchical) return allgatherHierarchical(in.data, o, bytes, d, dl);
  if (o + displ != in.data && bytes[rank()]) std::memmove(o + displ, in.data, bytes[rank()]);
  if (a == Algo::Direct) algo::allgathervDirect(flat(), out.data, bytes);
  else algo::allgathervRing(flat(), out.data, bytes);
}

void AcclProcessGroup::allgatherHierarchical(const void* in, char* out, const std::vector<size_t>& bytes,
                                             const OpDesc& d, Clock::time_point dl) {
  // A rank's block crosses to each other host once (its rail carries it),
  // where the flat algorithms send it to every rank there: 2 hosts x 2
  // ranks, each rank's messages between hosts halve, and the ones within
  // the host become one step on the segment.
  const int H = layout_.hosts, L = static_cast<int>(layout_.local().size()), me = layout_.localRank;
  // What each local rank brings to the segment: its rail's blocks, in host order.
  const auto rb = layout_.railBlocks(bytes);
  size_t total = 0, mine = 0;
  for (int i = 0; i < L; ++i) (i < me ? mine : total) += rb.seg[i];
  total += mine;
  char* work = scratch_.get(core::Scratch::kOpWhole, total);
  char* own = work + mine;  // this rank's rail's blocks
  if (bytes[rank()]) std::memcpy(own + rb.at, in, bytes[rank()]);
  Peers g = members(layout_.rail(me));
  if (core::chooseInterHost(Coll::Allgather, rb.seg[me], H, algo_, model_.get()) == Algo::Ring)
    algo::allgathervRing(g, own, rb.mine);
  else
    algo::allgathervDirect(g, own, rb.mine);
  host_->allgatherv(own, work, rb.seg, d, dl);
  // Into rank order: `work` holds the blocks in rail order.
  std::vector<size_t> displ(bytes.size() + 1, 0);
  for (size_t r = 0; r < bytes.size(); ++r) displ[r + 1] = displ[r] + bytes[r];
  const char* from = work;
  for (int r : rb.order) {
    if (bytes[r]) std::memcpy(out + displ[r], from, bytes[r]);
    from += bytes[r];
  }
}

void AcclProcessGroup::reduceScatterHierarchical(const void* in, void* out, const std::vector<size_t>& counts,
                                                 DataType t, ReduceKind k, const OpDesc& d, Clock::time_point dl) {
  // The allgather's steps backwards: the host reduces on the segment, each
  // local rank getting what its rail needs, and the rails finish it between
  // hosts (each element crosses to another host once per host, not once per
  // rank there).
  const int H = layout_.hosts, me = layout_.localRank;
  const size_t es = dataTypeSize(t);
  std::vector<size_t> displ(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) displ[r + 1] = displ[r] + counts[r];
  const auto rb = layout_.railBlocks(counts);
  // The input in rail order.
  char* permuted = scratch_.get(core::Scratch::kOpWhole, displ.back() * es);
  char* to = permuted;
  for (int r : rb.order) {
    if (counts[r]) std::memcpy(to, static_cast<const char*>(in) + displ[r] * es, counts[r] * es);
    to += counts[r] * es;
  }
  char* mine = scratch_.get(core::Scratch::kTreeAcc, rb.seg[me] * es);
  host_->reduceScatterv(permuted, mine, rb.seg, t, k, d, dl);
  Peers g = members(layout_.rail(me));
  if (core::chooseInterHost(Coll::ReduceScatter, rb.seg[me] * es, H, algo_, model_.get()) == Algo::Ring)
    algo::reduceScattervRing(g, mine, rb.mine, t, k);
  else
    algo::allreduceRecursiveDoubling(g, mine, rb.seg[me], t, k);
  if (rb.mine[layout_.myHost]) std::memcpy(out, mine + rb.at * es, rb.mine[layout_.myHost] * es);
}

std::shared_ptr<Work> AcclProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  // As allgatherv with every count in.count; nothing allocated per op.
  size_t es = dataTypeSize(in.dtype), total = out.count * es, bytes = in.count * es;
  return submit(OpType::Allgatherv, out.count, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, total](const OpDesc& d, Clock::time_point dl) {
                  allgatherBody(in, out, uniformBytes(bytes), total, d, dl);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                     const AllgatherOptions& o) {
  size_t es = dataTypeSize(in.dtype), total = out.count * es;
  return submit(OpType::Allgatherv, out.count, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, counts, es, total](const OpDesc& d, Clock::time_point dl) {
                  allgatherBody(in, out, scaledBytes(sizesA_, counts, es), total, d, dl);
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
                  Algo a = core::choose(Coll::ReduceScatter, total, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) {
                    host_->reduceScatterv(in.data, out.data, counts, in.dtype, k, d, dl);
                  } else if (a == Algo::Hierarchical) {
                    reduceScatterHierarchical(in.data, out.data, counts, in.dtype, k, d, dl);
                  } else {
                    // Out of place into a scratch of the whole vector: the first
                    // step reads this rank's parts from the input.
                    char* work = scratch_.get(core::Scratch::kOpWhole, total);
                    if (a == Algo::RecursiveDoubling)
                      algo::allreduceRecursiveDoubling(flat(), in.data, work, in.count, in.dtype, k);
                    else
                      algo::reduceScattervRing(flat(), in.data, work, counts, in.dtype, k);
                    if (mine) std::memcpy(out.data, work + displ * es, mine * es);
                  }
                  internal::finishReduce(op, out.data, mine, in.dtype, size());
                });
}

void AcclProcessGroup::alltoallBody(Buffer in, const std::vector<size_t>& sb, Buffer out,
                                    const std::vector<size_t>& rb, size_t uniformBlock, const OpDesc& d,
                                    Clock::time_point dl) {
  if (layout_.singleHost()) {
    noteAlgo(Algo::Shm);
    return host_->alltoallv(in.data, sb, out.data, rb, d, dl);
  }
  // Along rails only where every rank knows every block's size (alltoall's
  // equal blocks): the segment step forwards blocks between other ranks.
  Algo a = uniformBlock == kNotUniform ? Algo::Direct
                                       : core::choose(Coll::Alltoall, uniformBlock * size(), layout_, algo_, model_.get());
  noteAlgo(a == Algo::Hierarchical ? a : Algo::Direct);
  if (a == Algo::Hierarchical) return alltoallHierarchical(in.data, out.data, uniformBlock, d, dl);
  const void* src = in.data;
  if (in.data == out.data) {  // in place: the input set aside first
    size_t n = 0;
    for (size_t b : sb) n += b;
    char* staged = scratch_.get(core::Scratch::kOpWhole, n);
    if (n) std::memcpy(staged, in.data, n);
    src = staged;
  }
  algo::alltoallvPairwise(flat(), src, sb, out.data, rb);
}

void AcclProcessGroup::alltoallHierarchical(const void* in, void* out, size_t b, const OpDesc& d,
                                            Clock::time_point dl) {
  // Rank (host h, local index i) sends its rail-mate on each other host h'
  // the blocks for all of h's ranks at once (one message per host where the
  // flat exchange sends one per rank there), then the host's ranks exchange
  // on the segment what their rails brought: local rank j gets, from each,
  // the blocks of that rank's rail for j.
  const auto& hr = layout_.hostRanks;
  const int H = layout_.hosts, L = static_cast<int>(layout_.local().size());
  const size_t whole = b * static_cast<size_t>(size()), hostBlock = b * static_cast<size_t>(L);
  const char* src = static_cast<const char*>(in);
  char* a = scratch_.get(core::Scratch::kOpWhole, whole);
  char* c = scratch_.get(core::Scratch::kTreeAcc, whole);
  // Host-major: the blocks for host h' in its local-rank order (each of the
  // rail exchange's blocks one piece).
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < L; ++j)
      if (b) std::memcpy(a + (static_cast<size_t>(h) * L + j) * b, src + static_cast<size_t>(hr[h][j]) * b, b);
  const std::vector<size_t> railSizes(H, hostBlock), segSizes(L, b * static_cast<size_t>(H));
  // c[h'][j]: from the rail-mate on h', for local rank j.
  algo::alltoallvPairwise(members(layout_.rail(layout_.localRank)), a, railSizes, c, railSizes);
  // a[j][h']: what goes to local rank j, in host order.
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < L; ++j)
      if (b) std::memcpy(a + (static_cast<size_t>(j) * H + h) * b, c + (static_cast<size_t>(h) * L + j) * b, b);
  // c[j][h']: from rank hr[h'][j].
  host_->alltoallv(a, segSizes, c, segSizes, d, dl);
  char* dst = static_cast<char*>(out);
  for (int j = 0; j < L; ++j)
    for (int h = 0; h < H; ++h)
      if (b) std::memcpy(dst + static_cast<size_t>(hr[h][j]) * b, c + (static_cast<size_t>(j) * H + h) * b, b);
}

std::shared_ptr<Work> AcclProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  // As alltoallv with every count in.count / size() both ways: one vector of
  // sizes for both, nothing allocated per op.
  size_t es = dataTypeSize(in.dtype), total = in.count * es, bytes = in.count / static_cast<size_t>(size()) * es;
  return submit(OpType::Alltoallv, 0, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, bytes](const OpDesc& d, Clock::time_point dl) {
                  const auto& b = uniformBytes(bytes);
                  alltoallBody(in, b, out, b, bytes, d, dl);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                                    const std::vector<size_t>& recvCounts,
                                                    const AlltoallOptions& o) {
  size_t es = dataTypeSize(in.dtype), total = in.count * es;
  return submit(OpType::Alltoallv, 0, in.dtype, ReduceKind::Sum, -1, total, effectiveTimeout(o), o.blocking,
                [this, in, out, sendCounts, recvCounts, es](const OpDesc& d, Clock::time_point dl) {
                  alltoallBody(in, scaledBytes(sizesA_, sendCounts, es), out, scaledBytes(sizesB_, recvCounts, es),
                               kNotUniform, d, dl);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  size_t es = dataTypeSize(in.dtype), bytes = in.count * es;
  return submit(OpType::Gather, in.count, in.dtype, ReduceKind::Sum, o.root, bytes * size(), effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  const auto& b = uniformBytes(bytes);
                  Algo a = core::choose(Coll::Gather, bytes, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) return host_->gatherv(in.data, out.data, b, root, d, dl);
                  if (a == Algo::Hierarchical) return gatherHierarchical(in.data, out.data, bytes, root, d, dl);
                  algo::gathervDirect(flat(), in.data, out.data, b, root);
                });
}

std::shared_ptr<Work> AcclProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  size_t es = dataTypeSize(out.dtype), bytes = out.count * es;
  return submit(OpType::Scatter, out.count, out.dtype, ReduceKind::Sum, o.root, bytes * size(), effectiveTimeout(o), o.blocking,
                [this, in, out, bytes, root = o.root](const OpDesc& d, Clock::time_point dl) {
                  const auto& b = uniformBytes(bytes);
                  Algo a = core::choose(Coll::Scatter, bytes, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) return host_->scatterv(in.data, out.data, b, root, d, dl);
                  if (a == Algo::Hierarchical) return scatterHierarchical(in.data, out.data, bytes, root, d, dl);
                  algo::scattervDirect(flat(), in.data, out.data, b, root);
                });
}

AcclProcessGroup::ViaHosts AcclProcessGroup::viaHosts(size_t block, int root) {
  ViaHosts v;
  const std::vector<int> reps = layout_.reps(root);
  v.reps = members(reps);
  v.myRep = reps[layout_.myHost];
  v.rootHost = layout_.hostOf[root];
  for (const auto& h : layout_.hostRanks) v.hostSizes.push_back(h.size() * block);
  v.local.assign(layout_.local().size(), block);
  for (int h = 0; h < layout_.myHost; ++h) v.at += v.hostSizes[h];
  // The root's buffer holds every host's blocks, its own host's at `at`; a
  // representative's, its host's.
  if (rank() == root) {
    v.all = scratch_.get(core::Scratch::kOpWhole, block * static_cast<size_t>(size()));
    v.mine = v.all + v.at;
  } else if (rank() == v.myRep) {
    v.mine = scratch_.get(core::Scratch::kOpWhole, v.hostSizes[layout_.myHost]);
  }
  return v;
}

void AcclProcessGroup::gatherHierarchical(const void* in, void* out, size_t b, int root, const OpDesc& d,
                                          Clock::time_point dl) {
  // Each host's ranks gather on the segment at their representative (the
  // root on its host), and the representatives send the root one message
  // per host: the root receives from each other host once, not once per
  // rank there. The root's buffer holds the blocks in host order.
  ViaHosts v = viaHosts(b, root);
  host_->gatherv(in, v.mine, v.local, layout_.localIndex(v.myRep), d, dl);
  if (rank() != v.myRep) return;
  algo::gathervDirect(v.reps, v.mine, v.all, v.hostSizes, v.rootHost);
  if (rank() != root) return;
  char* o = static_cast<char*>(out);
  const char* from = v.all;
  for (const auto& h : layout_.hostRanks)
    for (int r : h) {
      if (b) std::memcpy(o + static_cast<size_t>(r) * b, from, b);
      from += b;
    }
}

void AcclProcessGroup::scatterHierarchical(const void* in, void* out, size_t b, int root, const OpDesc& d,
                                           Clock::time_point dl) {
  // The gather's steps backwards: the root sends each other host's
  // representative the blocks of that host's ranks in one message, and the
  // representatives scatter them on the segment.
  ViaHosts v = viaHosts(b, root);
  if (rank() == root) {
    const char* i = static_cast<const char*>(in);
    char* to = v.all;
    for (const auto& h : layout_.hostRanks)
      for (int r : h) {
        if (b) std::memcpy(to, i + static_cast<size_t>(r) * b, b);
        to += b;
      }
  }
  if (rank() == v.myRep) algo::scattervDirect(v.reps, v.all, v.mine, v.hostSizes, v.rootHost);
  host_->scatterv(v.mine, out, v.local, layout_.localIndex(v.myRep), d, dl);
}

std::shared_ptr<Work> AcclProcessGroup::doBarrier(const BarrierOptions& o) {
  return submit(OpType::Barrier, 0, DataType::Uint8, ReduceKind::Sum, -1, 0, effectiveTimeout(o), o.blocking,
                [this](const OpDesc& d, Clock::time_point dl) {
                  Algo a = core::choose(Coll::Barrier, 0, layout_, algo_, model_.get());
                  noteAlgo(a);
                  if (a == Algo::Shm) {
                    host_->barrier(d, dl);
                  } else if (a == Algo::Hierarchical) {
                    host_->barrier(d, dl);
                    if (layout_.localRank == 0) algo::barrierDissemination(members(layout_.leaders()));
                    host_->barrier(d, dl);
                  } else {
                    algo::barrierDissemination(flat());
                  }
                });
}

// ---------------------------------------------------------------- point-to-point

// A point-to-point op's description, formatted only for a message (an
// error, a timeout): built on every op, it took about 0.25 us of each send
// and receive. args: this rank | size << 24 | send << 48, the peer
// (kAnySource: any), the tag, the bytes.
static std::string describePointToPoint(const std::array<int64_t, 4>& a) {
  int rank = static_cast<int>(a[0] & 0xffffff), size = static_cast<int>((a[0] >> 24) & 0xffffff);
  bool send = (a[0] >> 48) & 1;
  int peer = static_cast<int>(a[1]);
  std::string who = peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(peer);
  return errorContext(rank, size, "accl",
                      std::string(send ? "send to " : "recv from ") + who + " (tag " + std::to_string(a[2]) + ", " +
                          std::to_string(a[3]) + " bytes)");
}

std::shared_ptr<Work> AcclProcessGroup::pointToPointWork(bool send, int peer, int tag, size_t bytes) {
  int64_t me = static_cast<int64_t>(rank()) | static_cast<int64_t>(size()) << 24 | static_cast<int64_t>(send) << 48;
  auto work = internal::makeWork(&describePointToPoint,
                                 std::array<int64_t, 4>{me, peer, tag, static_cast<int64_t>(bytes)});
  tracePointToPoint(peer);
  return work;
}

// A sendrecv's description, as describePointToPoint's. args: this rank |
// size << 24, dst | (src + 1) << 32, sendTag | recvTag << 32, bytes sent.
static std::string describeSendRecv(const std::array<int64_t, 4>& a) {
  int rank = static_cast<int>(a[0] & 0xffffff), size = static_cast<int>((a[0] >> 24) & 0xffffff);
  int dst = static_cast<int>(a[1] & 0xffffffff), src = static_cast<int>(a[1] >> 32) - 1;
  int sendTag = static_cast<int>(a[2] & 0xffffffff), recvTag = static_cast<int>(a[2] >> 32);
  return errorContext(rank, size, "accl",
                      "sendrecv: send to rank " + std::to_string(dst) + " (tag " + std::to_string(sendTag) + ", " +
                          std::to_string(a[3]) + " bytes), recv from " +
                          (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) + " (tag " +
                          std::to_string(recvTag) + ")");
}

void AcclProcessGroup::addWaiterHook(Work& work, int peer, size_t bytes, bool blocking) {
  // Only for an op still running once posted: a small send into a
  // shared-memory ring, or a receive whose message had arrived, completed
  // while it was posted and is never waited for (the hook is a heap
  // allocation). No other thread has the Work yet but the transport, whose
  // completion does not touch the hook.
  if (work.doneForWait()) return;
  // A blocking op's caller waits now: it polls as the hook would, with no
  // hook to make and release (about 300 instructions of a small sendrecv).
  if (blocking && net_->pollForWaiter(work, peer, bytes)) return;
  if (auto hook = net_->waiterHook(peer, bytes)) work.setWaitHook(std::move(hook));
}

std::shared_ptr<Work> AcclProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  size_t bytes = buf.count * dataTypeSize(buf.dtype);
  auto work = pointToPointWork(true, dst, o.tag, bytes);
  net_->postTagged(true, dst, o.tag, buf.data, bytes, core::deadlineAfter(effectiveTimeout(o)), work);
  addWaiterHook(*work, dst, bytes, o.blocking);
  return work;
}

std::shared_ptr<Work> AcclProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  size_t bytes = buf.count * dataTypeSize(buf.dtype);
  auto work = pointToPointWork(false, src, o.tag, bytes);
  net_->postTagged(false, src, o.tag, buf.data, bytes, core::deadlineAfter(effectiveTimeout(o)), work);
  addWaiterHook(*work, src, bytes, o.blocking);
  return work;
}

// Between ranks of one host, a sendrecv's send goes before its receive up to
// this size (below). 2 ranks, time against MPI_Sendrecv with the receive
// first / the send first (and the receive reading the ring when posted): 8 B
// 1.41 / 1.18, 64 B 1.34 / 1.05, 16 KiB 0.39 / 0.27, 64 KiB 0.51 / 0.36; from
// 128 KiB alike. Over TCP the receive stays first: a message that comes before
// it is held and copied (2 namespace hosts, 512 B - 4 KiB: 10-20 % slower
// with the send first). So does a sendrecv that is not waited for at once:
// issued back to back, sends first fill the ring and their peers' messages
// come before the receives, to be held and copied (accl-perf's non-blocking
// sendrecv, 2-32 KiB: 3-7x as long).

static constexpr size_t kSendFirstMaxBytes = 64 << 10;

std::shared_ptr<Work> AcclProcessGroup::doSendRecv(Buffer sb, int dst, Buffer rb, int src, const SendRecvOptions& o) {
  size_t sbytes = sb.count * dataTypeSize(sb.dtype), rbytes = rb.count * dataTypeSize(rb.dtype);
  int64_t me = static_cast<int64_t>(rank()) | static_cast<int64_t>(size()) << 24;
  auto work = internal::makeWork(
      &describeSendRecv,
      std::array<int64_t, 4>{me, static_cast<int64_t>(dst) | static_cast<int64_t>(src + 1) << 32,
                             static_cast<int64_t>(o.sendTag) | static_cast<int64_t>(o.recvTag) << 32,
                             static_cast<int64_t>(sbytes)});
  tracePointToPoint(src >= 0 ? src : dst);
  work->setParts(2);
  auto deadline = core::deadlineAfter(effectiveTimeout(o));
  if (o.blocking && src >= 0 && net_->overShm(src) && net_->overShm(dst) &&
      (sbytes <= kSendFirstMaxBytes || net_->singleCopyTo(dst, sbytes))) {
    // A small send first: it is in the peer's ring (or on its way) before this
    // rank spends time on its receive, and the peer, doing the same, waits that
    // much less. The peer's message to this rank stays in the ring until this
    // rank posts the receive, which reads it then (NetTransport::postTagged):
    // one copy, as when the receive came first. A large message through the
    // ring is better landed in place as it streams in; one by single copy is
    // a descriptor, and goes first too: the receive posted after it may copy
    // the peer's message at once (it came while this rank was in its last
    // op), and a descriptor sent only after that copy kept the next rank
    // from copying meanwhile. 4 ranks bound two to each of 2 cores, every
    // peer on the other core, against Open MPI's busbw with the receive first
    // / the send first, alternating launches: 256 KiB 0.65-0.75 / 0.77-0.85,
    // 512 KiB 0.70-0.86 / 0.87-1.08, 2 MiB 0.68-0.91 / 0.92-1.28; unbound
    // within the noise; 2 ranks bound to a core each, 1-64 MiB, 0.86-1.24 /
    // 0.87-1.02 (docs/performance-history.md).
    net_->postSendRecv(true, dst, o.sendTag, sb.data, sbytes, src, o.recvTag, rb.data, rbytes, deadline, work);
  } else {
    // The receive first: a message that comes while the send goes out lands in place.
    net_->postSendRecv(false, dst, o.sendTag, sb.data, sbytes, src, o.recvTag, rb.data, rbytes, deadline, work);
  }
  addWaiterHook(*work, src, std::max(sbytes, rbytes), o.blocking);
  return work;
}

// ---------------------------------------------------------------- split

std::shared_ptr<ProcessGroup> AcclProcessGroup::doSplit(const std::vector<int>& ranks,
                                                        const ProcessGroupOptions& opts) {
  return splitAs<AcclProcessGroup>(ranks, opts, splits_++, store_);
}

ACCL_REGISTER_BACKEND("accl", AcclProcessGroup, [] {
#if ACCL_HAVE_IBVERBS
  return std::string(
      "ACCL's own: shared memory within a host, RDMA verbs (where a device is usable) or TCP between hosts "
      "(CPU buffers)");
#else
  return std::string("ACCL's own: shared memory within a host, TCP between hosts (built without verbs; CPU buffers)");
#endif
})

}  // namespace accl
