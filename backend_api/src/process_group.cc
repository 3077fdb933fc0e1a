#include "accl/process_group.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <stdexcept>

#include "accl/config.h"
#include "accl/logging.h"
#include "accl/internal/diag_responder.h"
#include "accl/internal/trace_registry.h"
#include "accl/internal/work_pool.h"
#include "accl/trace.h"

namespace accl {

const char* toString(OpType op) {
  switch (op) {
    case OpType::Allreduce: return "allreduce";
    case OpType::Broadcast: return "broadcast";
    case OpType::Reduce: return "reduce";
    case OpType::Allgather: return "allgather";
    case OpType::Allgatherv: return "allgatherv";
    case OpType::ReduceScatter: return "reduce_scatter";
    case OpType::ReduceScatterv: return "reduce_scatterv";
    case OpType::Alltoall: return "alltoall";
    case OpType::Alltoallv: return "alltoallv";
    case OpType::Gather: return "gather";
    case OpType::Scatter: return "scatter";
    case OpType::Barrier: return "barrier";
    case OpType::Send: return "send";
    case OpType::Recv: return "recv";
    case OpType::Split: return "split";
    case OpType::SendRecv: return "sendrecv";
  }
  return "unknown";
}

ProcessGroup::ProcessGroup(int rank, int size, std::string backend, ProcessGroupOptions opts)
    : rank_(rank), size_(size), backend_(std::move(backend)), options_(std::move(opts)) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument(errorContext(-1, 0, backend_,
                                       "invalid rank " + std::to_string(rank) + " for size " +
                                           std::to_string(size) +
                                           "; accepted: size >= 1 and 0 <= rank < size"));
  timeout_ = options_.timeout.count() > 0 ? options_.timeout : Config::get().timeout;
  setLogRank(rank, size);
  if (options_.record && FlightRecorder::wanted()) {
    recorder_ = std::make_shared<FlightRecorder>(FlightRecorder::wantedCapacity(), options_.name, backend_, rank, size);
    if (Config::get().traceBuffer > 0) internal::registerRecorder(recorder_);
    active_.store(recorder_.get(), std::memory_order_relaxed);
  }
}

namespace {
// The trace id of the op this thread is issuing. Initial-exec: a plain
// %fs-relative access on every op instead of a call to __tls_get_addr (8
// bytes of the static TLS that glibc keeps for libraries loaded later).
__attribute__((tls_model("initial-exec"))) thread_local uint64_t tIssuing = 0;
}  // namespace

uint64_t ProcessGroup::issuingTraceId() { return tIssuing; }

namespace {
// The op's Work from `issue`, its failure to issue recorded as op `id`'s end.
template <typename Issue>
std::shared_ptr<Work> issueRecorded(FlightRecorder* rec, uint64_t id, Issue& issue) {
  try {
    return issue();
  } catch (...) {
    rec->finished(id, std::current_exception());
    throw;
  }
}
}  // namespace

template <typename Issue>
std::shared_ptr<Work> ProcessGroup::traced(OpType op, DataType t, uint64_t count, int root, int peer, uint64_t bytes,
                                           Issue&& issue) {
  FlightRecorder* rec = active_.load(std::memory_order_relaxed);
  if (!rec) return issue();
  uint64_t id = rec->begin(op, t, count, root, peer, bytes);
  struct Scope {
    uint64_t prev;
    explicit Scope(uint64_t id) : prev(tIssuing) { tIssuing = id; }
    ~Scope() { tIssuing = prev; }
  } scope(id);
  // Constructed in place and returned as it is (no move, no swap, no
  // destructor of an empty pointer on an 8-byte op's path).
  std::shared_ptr<Work> w = issueRecorded(rec, id, issue);
  // An op run while it was issued (small ops on the accl backend) ends here,
  // inline; others when they complete.
  if (w->succeededAtOnce())
    rec->succeeded(id);
  else
    w->setTrace(recorder_, id);
  return w;
}

ProcessGroup::~ProcessGroup() {
  internal::forgetDiagWatches(this);
  if (recorder_) recorder_->close();
}

std::shared_ptr<ProcessGroup> ProcessGroup::splitThroughStore(const std::vector<int>& ranks,
                                                              const ProcessGroupOptions& opts,
                                                              uint64_t splitId,
                                                              const std::shared_ptr<Store>& store,
                                                              const GroupMaker& make) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  std::string prefix = "split" + std::to_string(splitId);
  for (int r : ranks) prefix += "_" + std::to_string(r);
  ProcessGroupOptions o = opts;
  if (o.timeout.count() == 0) o.timeout = timeout_;
  return make(std::make_shared<PrefixStore>(prefix, store), static_cast<int>(it - ranks.begin()),
              static_cast<int>(ranks.size()), o);
}

std::string ProcessGroup::context(const std::string& what) const {
  return errorContext(rank_, size_, backend_, what);
}

void ProcessGroup::notSupported(OpType op, const std::string& why) const {
  throw NotSupported(context(std::string(toString(op)) + " is not supported by the " + backend_ +
                             " backend" + (why.empty() ? "" : ": " + why)));
}

void ProcessGroup::badBuffer(OpType op, const char* which, const Buffer& b) const {
  if (static_cast<int>(b.dtype) >= kNumDataTypes)
    throw InvalidArgument(context(std::string(toString(op)) + ": " + which +
                                  " has an invalid dtype code " +
                                  std::to_string(static_cast<int>(b.dtype))));
  if (!supportsDevice(b.device))
    throw NotSupported(context(std::string(toString(op)) + ": " + which + " is on device " +
                               toString(b.device) + ", which the " + backend_ +
                               " backend does not support"));
  if (b.data == nullptr && b.count > 0)
    throw InvalidArgument(context(std::string(toString(op)) + ": " + which +
                                  " is a null pointer with " + std::to_string(b.count) +
                                  " elements"));
  throw std::logic_error("accl: badBuffer called for a valid argument");
}

void ProcessGroup::badOverlap(OpType op, const Buffer& in, const Buffer& out, const char* form) const {
  auto i = reinterpret_cast<uintptr_t>(in.data), o = reinterpret_cast<uintptr_t>(out.data);
  std::string where = i >= o ? "starts " + std::to_string(i - o) + " bytes into the output"
                             : "ends " + std::to_string(i + in.bytes() - o) + " bytes into the output";
  throw InvalidArgument(context(std::string(toString(op)) + ": the input (" + std::to_string(in.bytes()) +
                                " bytes) and the output (" + std::to_string(out.bytes()) +
                                " bytes) overlap: the input " + where +
                                "; accepted: disjoint buffers, or in place: " + form));
}

void ProcessGroup::badReduction(OpType op, const ReduceOp& r, DataType t) const {
  if (static_cast<int>(r.kind) >= kNumReduceKinds)
    throw InvalidArgument(context(std::string(toString(op)) + ": invalid reduce op code " +
                                  std::to_string(static_cast<int>(r.kind))));
  if (!isValidReduction(r.kind, t)) {
    std::string accepted = isFloatingPoint(t) ? "sum, prod, min, max, avg, premul_sum"
                                              : "sum, prod, min, max, band, bor, bxor";
    throw InvalidArgument(context(std::string(toString(op)) + ": reduce op " + toString(r.kind) +
                                  " is not defined for dtype " + toString(t) +
                                  "; accepted for " + toString(t) + ": " + accepted));
  }
  throw std::logic_error("accl: badReduction called for a valid argument");
}

void ProcessGroup::badRoot(OpType op, int root) const {
  if (root < 0 || root >= size_)
    throw InvalidArgument(context(std::string(toString(op)) + ": invalid root " +
                                  std::to_string(root) + "; accepted: 0.." +
                                  std::to_string(size_ - 1)));
  throw std::logic_error("accl: badRoot called for a valid argument");
}

void ProcessGroup::badPeer(OpType op, int peer, bool allowAny) const {
  if (peer < 0 || peer >= size_)
    throw InvalidArgument(context(std::string(toString(op)) + ": invalid peer rank " +
                                  std::to_string(peer) + "; accepted: 0.." +
                                  std::to_string(size_ - 1) +
                                  (allowAny ? " or kAnySource (-1)" : "")));
  if (peer == rank_)
    throw InvalidArgument(context(std::string(toString(op)) + ": peer rank " +
                                  std::to_string(peer) +
                                  " is this rank; point-to-point needs another rank"));
  throw std::logic_error("accl: badPeer called for a valid argument");
}

void ProcessGroup::badCount(OpType op, const char* which, size_t got, size_t want,
                              const char* rule) const {
  if (got != want)
    throw InvalidArgument(context(std::string(toString(op)) + ": " + which + " has " +
                                  std::to_string(got) + " elements, expected " +
                                  std::to_string(want) + " (" + rule + ")"));
  throw std::logic_error("accl: badCount called for a valid argument");
}

void ProcessGroup::badCounts(OpType op, const char* which,
                               const std::vector<size_t>& counts) const {
  if (counts.size() != static_cast<size_t>(size_))
    throw InvalidArgument(context(std::string(toString(op)) + ": " + which + " has " +
                                  std::to_string(counts.size()) +
                                  " entries, expected one per rank (" + std::to_string(size_) +
                                  ")"));
  throw std::logic_error("accl: badCounts called for a valid argument");
}

void ProcessGroup::badSameDtype(OpType op, const Buffer& a, const Buffer& b) const {
  if (a.dtype != b.dtype)
    throw InvalidArgument(context(std::string(toString(op)) + ": input dtype " +
                                  toString(a.dtype) + " differs from output dtype " +
                                  toString(b.dtype)));
  if (!(a.device == b.device))
    throw InvalidArgument(context(std::string(toString(op)) + ": input on " +
                                  toString(a.device) + " but output on " + toString(b.device)));
  throw std::logic_error("accl: badSameDtype called for a valid argument");
}

static size_t sum(const std::vector<size_t>& v) {
  return std::accumulate(v.begin(), v.end(), size_t{0});
}

std::shared_ptr<Work> ProcessGroup::allreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  checkBuffer(OpType::Allreduce, "input", in);
  checkBuffer(OpType::Allreduce, "output", out);
  checkSameDtype(OpType::Allreduce, in, out);
  checkCount(OpType::Allreduce, "output", out.count, in.count, "same as input");
  checkOverlap(OpType::Allreduce, in, out, [&] { return in.data == out.data; }, "input.data == output.data");
  checkReduction(OpType::Allreduce, o.op, in.dtype);
  return traced(OpType::Allreduce, in.dtype, in.count, -1, -1, in.bytes(), [&] { return doAllreduce(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::broadcast(Buffer buf, const BroadcastOptions& o) {
  checkBuffer(OpType::Broadcast, "buffer", buf);
  checkRoot(OpType::Broadcast, o.root);
  return traced(OpType::Broadcast, buf.dtype, buf.count, o.root, -1, buf.bytes(), [&] { return doBroadcast(buf, o); });
}

std::shared_ptr<Work> ProcessGroup::reduce(Buffer in, Buffer out, const ReduceOptions& o) {
  checkRoot(OpType::Reduce, o.root);
  checkBuffer(OpType::Reduce, "input", in);
  checkReduction(OpType::Reduce, o.op, in.dtype);
  if (rank_ == o.root) {
    checkBuffer(OpType::Reduce, "output", out);
    checkSameDtype(OpType::Reduce, in, out);
    checkCount(OpType::Reduce, "output", out.count, in.count, "same as input on the root");
    checkOverlap(OpType::Reduce, in, out, [&] { return in.data == out.data; }, "input.data == output.data on the root");
  }
  return traced(OpType::Reduce, in.dtype, in.count, o.root, -1, in.bytes(), [&] { return doReduce(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::allgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  checkBuffer(OpType::Allgather, "input", in);
  checkBuffer(OpType::Allgather, "output", out);
  checkSameDtype(OpType::Allgather, in, out);
  checkCount(OpType::Allgather, "output", out.count, in.count * size_,
             "group size x input count");
  checkOverlap(OpType::Allgather, in, out,
               [&] { return in.data == static_cast<char*>(out.data) + static_cast<size_t>(rank_) * in.bytes(); },
               "the input is this rank's part of the output");
  return traced(OpType::Allgather, in.dtype, in.count, -1, -1, out.bytes(), [&] { return doAllgather(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::allgatherv(Buffer in, Buffer out,
                                               const std::vector<size_t>& counts,
                                               const AllgatherOptions& o) {
  checkBuffer(OpType::Allgatherv, "input", in);
  checkBuffer(OpType::Allgatherv, "output", out);
  checkSameDtype(OpType::Allgatherv, in, out);
  checkCounts(OpType::Allgatherv, "counts", counts);
  checkCount(OpType::Allgatherv, "input", in.count, counts[rank_], "counts[rank]");
  checkCount(OpType::Allgatherv, "output", out.count, sum(counts), "sum of counts");
  checkOverlap(OpType::Allgatherv, in, out,
               [&] { return in.data == static_cast<char*>(out.data) +
                              std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0}) * dataTypeSize(in.dtype); },
               "the input is this rank's part of the output");
  return traced(OpType::Allgatherv, in.dtype, out.count, -1, -1, out.bytes(),
                [&] { return doAllgatherv(in, out, counts, o); });
}

std::shared_ptr<Work> ProcessGroup::reduceScatter(Buffer in, Buffer out,
                                                  const ReduceScatterOptions& o) {
  checkBuffer(OpType::ReduceScatter, "input", in);
  checkBuffer(OpType::ReduceScatter, "output", out);
  checkSameDtype(OpType::ReduceScatter, in, out);
  checkCount(OpType::ReduceScatter, "input", in.count, out.count * size_,
             "group size x output count");
  checkOverlap(OpType::ReduceScatter, in, out,
               [&] { return out.data == static_cast<char*>(in.data) + static_cast<size_t>(rank_) * out.bytes(); },
               "the output is this rank's part of the input");
  checkReduction(OpType::ReduceScatter, o.op, in.dtype);
  return traced(OpType::ReduceScatter, in.dtype, in.count, -1, -1, in.bytes(), [&] { return doReduceScatter(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::reduceScatterv(Buffer in, Buffer out,
                                                   const std::vector<size_t>& counts,
                                                   const ReduceScatterOptions& o) {
  checkBuffer(OpType::ReduceScatterv, "input", in);
  checkBuffer(OpType::ReduceScatterv, "output", out);
  checkSameDtype(OpType::ReduceScatterv, in, out);
  checkCounts(OpType::ReduceScatterv, "counts", counts);
  checkCount(OpType::ReduceScatterv, "input", in.count, sum(counts), "sum of counts");
  checkCount(OpType::ReduceScatterv, "output", out.count, counts[rank_], "counts[rank]");
  checkOverlap(OpType::ReduceScatterv, in, out,
               [&] { return out.data == static_cast<char*>(in.data) +
                               std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0}) * dataTypeSize(in.dtype); },
               "the output is this rank's part of the input");
  checkReduction(OpType::ReduceScatterv, o.op, in.dtype);
  return traced(OpType::ReduceScatterv, in.dtype, in.count, -1, -1, in.bytes(),
                [&] { return doReduceScatterv(in, out, counts, o); });
}

std::shared_ptr<Work> ProcessGroup::alltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  checkBuffer(OpType::Alltoall, "input", in);
  checkBuffer(OpType::Alltoall, "output", out);
  checkSameDtype(OpType::Alltoall, in, out);
  checkCount(OpType::Alltoall, "output", out.count, in.count, "same as input");
  checkOverlap(OpType::Alltoall, in, out, [&] { return in.data == out.data; }, "input.data == output.data");
  if (in.count % size_ != 0)
    throw InvalidArgument(context("alltoall: input has " + std::to_string(in.count) +
                                  " elements, which is not a multiple of the group size " +
                                  std::to_string(size_)));
  return traced(OpType::Alltoall, in.dtype, in.count, -1, -1, in.bytes(), [&] { return doAlltoall(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::alltoallv(Buffer in, const std::vector<size_t>& sendCounts,
                                              Buffer out, const std::vector<size_t>& recvCounts,
                                              const AlltoallOptions& o) {
  checkBuffer(OpType::Alltoallv, "input", in);
  checkBuffer(OpType::Alltoallv, "output", out);
  checkSameDtype(OpType::Alltoallv, in, out);
  checkCounts(OpType::Alltoallv, "sendCounts", sendCounts);
  checkCounts(OpType::Alltoallv, "recvCounts", recvCounts);
  checkCount(OpType::Alltoallv, "input", in.count, sum(sendCounts), "sum of sendCounts");
  checkCount(OpType::Alltoallv, "output", out.count, sum(recvCounts), "sum of recvCounts");
  checkOverlap(OpType::Alltoallv, in, out, [&] { return in.data == out.data; }, "input.data == output.data");
  return traced(OpType::Alltoallv, in.dtype, in.count, -1, -1, in.bytes(),
                [&] { return doAlltoallv(in, sendCounts, out, recvCounts, o); });
}

std::shared_ptr<Work> ProcessGroup::gather(Buffer in, Buffer out, const GatherOptions& o) {
  checkRoot(OpType::Gather, o.root);
  checkBuffer(OpType::Gather, "input", in);
  if (rank_ == o.root) {
    checkBuffer(OpType::Gather, "output", out);
    checkSameDtype(OpType::Gather, in, out);
    checkCount(OpType::Gather, "output", out.count, in.count * size_,
               "group size x input count on the root");
    checkOverlap(OpType::Gather, in, out,
                 [&] { return in.data == static_cast<char*>(out.data) + static_cast<size_t>(rank_) * in.bytes(); },
                 "the input is the root's part of the output");
  }
  return traced(OpType::Gather, in.dtype, in.count, o.root, -1, in.bytes(), [&] { return doGather(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::scatter(Buffer in, Buffer out, const ScatterOptions& o) {
  checkRoot(OpType::Scatter, o.root);
  checkBuffer(OpType::Scatter, "output", out);
  if (rank_ == o.root) {
    checkBuffer(OpType::Scatter, "input", in);
    checkSameDtype(OpType::Scatter, in, out);
    checkCount(OpType::Scatter, "input", in.count, out.count * size_,
               "group size x output count on the root");
    checkOverlap(OpType::Scatter, in, out,
                 [&] { return out.data == static_cast<char*>(in.data) + static_cast<size_t>(rank_) * out.bytes(); },
                 "the output is the root's part of the input");
  }
  return traced(OpType::Scatter, out.dtype, out.count, o.root, -1, out.bytes(), [&] { return doScatter(in, out, o); });
}

std::shared_ptr<Work> ProcessGroup::barrier(const BarrierOptions& o) {
  return traced(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0, [&] { return doBarrier(o); });
}

std::shared_ptr<Work> ProcessGroup::send(Buffer buf, int dst, const SendOptions& o) {
  checkBuffer(OpType::Send, "buffer", buf);
  checkPeer(OpType::Send, dst, false);
  if (o.tag < 0) throw InvalidArgument(context("send: negative tag " + std::to_string(o.tag)));
  return traced(OpType::Send, buf.dtype, buf.count, -1, dst, buf.bytes(), [&] { return doSend(buf, dst, o); });
}

std::shared_ptr<Work> ProcessGroup::recv(Buffer buf, int src, const RecvOptions& o) {
  checkBuffer(OpType::Recv, "buffer", buf);
  checkPeer(OpType::Recv, src, true);
  if (o.tag < 0) throw InvalidArgument(context("recv: negative tag " + std::to_string(o.tag)));
  return traced(OpType::Recv, buf.dtype, buf.count, -1, src, buf.bytes(), [&] { return doRecv(buf, src, o); });
}

std::shared_ptr<Work> ProcessGroup::sendrecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                             const SendRecvOptions& o) {
  checkBuffer(OpType::SendRecv, "send buffer", sendBuf);
  checkBuffer(OpType::SendRecv, "receive buffer", recvBuf);
  checkPeer(OpType::SendRecv, dst, false);
  checkPeer(OpType::SendRecv, src, true);
  if (o.sendTag < 0 || o.recvTag < 0)
    throw InvalidArgument(context("sendrecv: negative tag (sendTag " + std::to_string(o.sendTag) + ", recvTag " +
                                  std::to_string(o.recvTag) + "); accepted: 0 or more"));
  if (__builtin_expect(sendBuf.overlaps(recvBuf), 0))
    throw InvalidArgument(context("sendrecv: the send buffer (" + std::to_string(sendBuf.bytes()) +
                                  " bytes) and the receive buffer (" + std::to_string(recvBuf.bytes()) +
                                  " bytes) overlap; accepted: disjoint buffers"));
  // Recorded as one op: the receive's peer (the send's where any rank may
  // send) and the bytes sent.
  return traced(OpType::SendRecv, sendBuf.dtype, sendBuf.count, -1, src == kAnySource ? dst : src, sendBuf.bytes(),
                [&] { return doSendRecv(sendBuf, dst, recvBuf, src, o); });
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::vector<int>& ranks,
                                                  const ProcessGroupOptions& opts) {
  if (ranks.empty()) throw InvalidArgument(context("split: the rank list is empty"));
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size_)
      throw InvalidArgument(context("split: rank " + std::to_string(r) +
                                    " is out of range; accepted: 0.." +
                                    std::to_string(size_ - 1)));
    if (!seen.insert(r).second)
      throw InvalidArgument(context("split: rank " + std::to_string(r) + " is listed twice"));
  }
  return doSplit(ranks, opts);
}

std::shared_ptr<Work> ProcessGroup::doAllreduce(Buffer, Buffer, const AllreduceOptions&) {
  notSupported(OpType::Allreduce);
}
std::shared_ptr<Work> ProcessGroup::doBroadcast(Buffer, const BroadcastOptions&) {
  notSupported(OpType::Broadcast);
}
std::shared_ptr<Work> ProcessGroup::doReduce(Buffer, Buffer, const ReduceOptions&) {
  notSupported(OpType::Reduce);
}
std::shared_ptr<Work> ProcessGroup::doAllgather(Buffer, Buffer, const AllgatherOptions&) {
  notSupported(OpType::Allgather);
}
std::shared_ptr<Work> ProcessGroup::doAllgatherv(Buffer, Buffer, const std::vector<size_t>&,
                                                 const AllgatherOptions&) {
  notSupported(OpType::Allgatherv);
}
std::shared_ptr<Work> ProcessGroup::doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) {
  return doReduceScatterv(in, out, std::vector<size_t>(static_cast<size_t>(size_), out.count), o);
}
std::shared_ptr<Work> ProcessGroup::doReduceScatterv(Buffer, Buffer, const std::vector<size_t>&,
                                                     const ReduceScatterOptions&) {
  notSupported(OpType::ReduceScatterv);
}
std::shared_ptr<Work> ProcessGroup::doAlltoall(Buffer, Buffer, const AlltoallOptions&) {
  notSupported(OpType::Alltoall);
}
std::shared_ptr<Work> ProcessGroup::doAlltoallv(Buffer, const std::vector<size_t>&, Buffer,
                                                const std::vector<size_t>&,
                                                const AlltoallOptions&) {
  notSupported(OpType::Alltoallv);
}
std::shared_ptr<Work> ProcessGroup::doGather(Buffer, Buffer, const GatherOptions&) {
  notSupported(OpType::Gather);
}
std::shared_ptr<Work> ProcessGroup::doScatter(Buffer, Buffer, const ScatterOptions&) {
  notSupported(OpType::Scatter);
}
std::shared_ptr<Work> ProcessGroup::doBarrier(const BarrierOptions&) {
  notSupported(OpType::Barrier);
}
std::shared_ptr<Work> ProcessGroup::doSend(Buffer, int, const SendOptions&) {
  notSupported(OpType::Send);
}
std::shared_ptr<Work> ProcessGroup::doRecv(Buffer, int, const RecvOptions&) {
  notSupported(OpType::Recv);
}
std::shared_ptr<Work> ProcessGroup::doSendRecv(Buffer sendBuf, int dst, Buffer recvBuf, int src,
                                               const SendRecvOptions& o) {
  RecvOptions ro;
  static_cast<OpOptions&>(ro) = o;
  ro.tag = o.recvTag;
  SendOptions so;
  static_cast<OpOptions&>(so) = o;
  so.tag = o.sendTag;
  // Neither half blocks its caller: the send must not wait before the
  // receive is posted, nor the receive before the send.
  ro.blocking = so.blocking = false;
  // If the send cannot be posted, the receive stays posted (no backend can
  // take one back) and completes by its deadline at the latest.
  auto rw = doRecv(recvBuf, src, ro);
  auto sw = doSend(sendBuf, dst, so);
  auto both = internal::makeWork(context("sendrecv: send to rank " + std::to_string(dst) + " tag " +
                                         std::to_string(o.sendTag) + ", recv from " +
                                         (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) +
                                         " tag " + std::to_string(o.recvTag)));
  both->setParts(2);
  // A waiter waits on each half (running it, where its backend lets a
  // waiter run a queued op); each half's completion completes its part.
  both->setWaitHook([rw, sw](Work&) {
    for (auto* w : {rw.get(), sw.get()}) {
      try {
        w->wait();
      } catch (...) {
      }
    }
  });
  for (auto* w : {rw.get(), sw.get()})
    w->onComplete([both](Work& half) { both->markCompleted(half.exception(), half.sourceRank()); });
  return both;
}

std::shared_ptr<ProcessGroup> ProcessGroup::doSplit(const std::vector<int>&,
                                                    const ProcessGroupOptions&) {
  notSupported(OpType::Split);
}

}  // namespace accl
