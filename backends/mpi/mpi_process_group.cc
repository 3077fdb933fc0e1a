#include "mpi_process_group.h"

#include <pthread.h>
#include <sched.h>

#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "accl/internal/config_var.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/internal/work_pool.h"
#include "accl/logging.h"
#include "accl/registry.h"
#include "accl/trace.h"

namespace accl {

namespace {

const config::Var<int> blockingBytesVar(
    "ACCL_MPI_BLOCKING_BYTES", "mpi backend", config::intRange(0, 1L << 30), 65536, nullptr,
    "Collectives of at most this many bytes run on the calling thread when the group is idle and, with MPI at "
    "MPI_THREAD_MULTIPLE, call MPI's blocking function (MPI_Allreduce, ...: Open MPI's coll/tuned, 2-4x faster "
    "than the non-blocking MPI_Iallreduce for small messages); larger ones, alltoallv, and every op below "
    "MPI_THREAD_MULTIPLE call the non-blocking one and poll it against the op's deadline. MPI cannot interrupt a "
    "blocking call: when one outlives its op's timeout, a guard thread names the op and aborts the job "
    "(MPI_Abort). 0: every collective is non-blocking, and a timeout is an accl::Timeout the caller can catch. "
    "Set it alike on every rank (a blocking collective does not match a non-blocking one).");

// MPI may be used from several threads only with MPI_THREAD_MULTIPLE; with a
// lower level every MPI call is serialized through this mutex.
std::mutex gMpiMu;
bool gNeedLock = false;
bool gWeInitialized = false;
std::atomic<bool> gAnyBroken{false};

std::unique_lock<std::mutex> mpiLock() {
  return gNeedLock ? std::unique_lock<std::mutex>(gMpiMu) : std::unique_lock<std::mutex>();
}

std::string mpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw RemoteError(what + ": MPI error: " + mpiError(rc));
}

void ensureInitialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    int provided = MPI_THREAD_SINGLE;
    if (!inited) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      gWeInitialized = true;
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        // After a timed-out collective, MPI_Finalize could block forever.
        if (!fin && !gAnyBroken) MPI_Finalize();
      });
    } else {
      MPI_Query_thread(&provided);
    }
    gNeedLock = provided < MPI_THREAD_MULTIPLE;
    // Errors come back as return codes, not as an abort of the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ACCL_INFO("INIT", "mpi: thread level " << provided << (gNeedLock ? " (calls serialized)" : ""));
  });
}

MPI_Datatype mpiType(DataType t) {
  switch (t) {
    case DataType::Int8: return MPI_INT8_T;
    case DataType::Uint8: return MPI_UINT8_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Uint32: return MPI_UINT32_T;
    case DataType::Int64: return MPI_INT64_T;
    case DataType::Uint64: return MPI_UINT64_T;
    case DataType::Float16:
    case DataType::BFloat16: return MPI_UINT16_T;  // reduced with our own ops
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Bool: return MPI_C_BOOL;
  }
  throw Internal("unmapped dtype");
}

template <DataType T, ReduceKind K>
void userOp(void* in, void* inout, int* len, MPI_Datatype*) {
  internal::reduce(inout, in, inout, static_cast<size_t>(*len), T, K);
}

// Our own MPI ops for (dtype, op) pairs MPI lacks (16-bit floats) or gets
// wrong: Open MPI 4.1's AVX op component saturates 8-bit integer sums and
// products on long vectors instead of wrapping around.
template <DataType T>
MPI_Op ownOp(ReduceKind k) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&userOp<T, ReduceKind::Sum>, 1, &ops[0]);
    MPI_Op_create(&userOp<T, ReduceKind::Prod>, 1, &ops[1]);
    MPI_Op_create(&userOp<T, ReduceKind::Min>, 1, &ops[2]);
    MPI_Op_create(&userOp<T, ReduceKind::Max>, 1, &ops[3]);
  });
  return ops[static_cast<int>(k)];
}

// The MPI op for the element-wise part of `kind` on `t`.
MPI_Op mpiOp(ReduceKind kind, DataType t) {
  ReduceKind k = internal::elementwiseKind(kind);
  if (t == DataType::Float16) return ownOp<DataType::Float16>(k);
  if (t == DataType::BFloat16) return ownOp<DataType::BFloat16>(k);
  if (t == DataType::Int8 && (k == ReduceKind::Sum || k == ReduceKind::Prod)) return ownOp<DataType::Int8>(k);
  if (t == DataType::Uint8 && (k == ReduceKind::Sum || k == ReduceKind::Prod)) return ownOp<DataType::Uint8>(k);
  if (t == DataType::Bool) {
    switch (k) {
      case ReduceKind::Sum:
      case ReduceKind::Max:
      case ReduceKind::BOr: return MPI_LOR;
      case ReduceKind::Prod:
      case ReduceKind::Min:
      case ReduceKind::BAnd: return MPI_LAND;
      case ReduceKind::BXor: return MPI_LXOR;
      default: break;
    }
  }
  switch (k) {
    case ReduceKind::Sum: return MPI_SUM;
    case ReduceKind::Prod: return MPI_PROD;
    case ReduceKind::Min: return MPI_MIN;
    case ReduceKind::Max: return MPI_MAX;
    case ReduceKind::BAnd: return MPI_BAND;
    case ReduceKind::BOr: return MPI_BOR;
    case ReduceKind::BXor: return MPI_BXOR;
    default: break;
  }
  throw Internal("unmapped reduce op");
}

// MPI counts are C ints. `what()` names the op, called only for the error.
template <typename What>
int icount(size_t n, What&& what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw NotSupported(what() + ": " + std::to_string(n) + " elements exceed MPI's int count limit (2^31-1)");
  return static_cast<int>(n);
}

// An MPI error code as RemoteError; `what()` is called only for an error.
template <typename What>
void checkLazy(int rc, What&& what) {
  if (rc != MPI_SUCCESS) check(rc, what());
}

// `what()` makes the error's text, only when there is an error.
template <typename What>
std::vector<int> icounts(const std::vector<size_t>& v, What&& what) {
  std::vector<int> out;
  out.reserve(v.size());
  for (auto n : v) out.push_back(icount(n, what));
  return out;
}

template <typename What>
std::vector<int> displs(const std::vector<int>& counts, What&& what) {
  std::vector<int> d(counts.size());
  size_t acc = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = icount(acc, what);
    acc += static_cast<size_t>(counts[i]);
  }
  return d;
}

void* inPlaceOr(const Buffer& in, const Buffer& out) {
  return in.data == out.data ? MPI_IN_PLACE : in.data;
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, const ProcessGroupOptions& opts)
    : ProcessGroup(
          [comm] {
            int r;
            MPI_Comm_rank(comm, &r);
            return r;
          }(),
          [comm] {
            int s;
            MPI_Comm_size(comm, &s);
            return s;
          }(),
          "mpi", opts) {
  {
    auto lk = mpiLock();
    check(MPI_Comm_dup(comm, &comm_), context("MPI_Comm_dup"));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  // Where MPI serializes calls (below MPI_THREAD_MULTIPLE), a blocking call
  // would hold the lock that every other MPI call of the process needs (a
  // send posted behind it could not go out): such ops still run on the
  // calling thread, but through the non-blocking call.
  inlineBytes_ = static_cast<size_t>(blockingBytesVar.get());
  blockingBytes_ = gNeedLock ? 0 : inlineBytes_;
  if (gNeedLock && inlineBytes_ > 0)
    ACCL_INFO("INIT", "mpi: MPI was initialized below MPI_THREAD_MULTIPLE: collectives use MPI's non-blocking "
                      "calls (MPI_Init_thread with MPI_THREAD_MULTIPLE enables the blocking ones)");
  // waiterRuns: a thread that waits on the op next in line runs it itself (no hand-off).
  queue_.reset(new internal::OpQueue("accl-mpi", /*waiterRuns=*/true));
  p2pThread_ = std::thread([this] { p2pLoop(); });
  pthread_setname_np(p2pThread_.native_handle(), "accl-mpi-p2p");
  if (blockingBytes_ > 0) guard_ = std::thread([this] { guardLoop(); });
}

MpiProcessGroup::~MpiProcessGroup() {
  queue_.reset();
  // Point-to-point requests still pending finish first (each is bounded by its deadline).
  {
    std::lock_guard<std::mutex> lk(p2pMu_);
    p2pStop_ = true;
  }
  p2pCv_.notify_all();
  p2pThread_.join();
  if (guard_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(guardMu_);
      guardStop_ = true;
    }
    guardCv_.notify_all();
    guard_.join();
  }
  std::lock_guard<std::mutex> b(brokenMu_);
  if (broken_.empty()) {
    auto lk = mpiLock();
    MPI_Comm_free(&comm_);
  }
}

int MpiProcessGroup::countOf(size_t n, const Call& c) const {
  return icount(n, [&] { return describe(c); });
}

std::string MpiProcessGroup::describe(const Call& c) const {
  return context(std::string(toString(c.op)) + " #" + std::to_string(c.seq) + " (" + std::to_string(c.count) +
                 " elements)");
}

template <typename What>
MPI_Status MpiProcessGroup::wait(MPI_Request req, std::chrono::milliseconds timeout, What&& what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MPI_Status st{};
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    {
      auto lk = mpiLock();
      checkLazy(MPI_Test(&req, &done, &st), what);
    }
    if (done) return st;
    if ((spins & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
      std::string w = what();
      {
        std::lock_guard<std::mutex> b(brokenMu_);
        broken_ = w;
        isBroken_.store(true, std::memory_order_release);
      }
      gAnyBroken = true;
      throw Timeout(w + ": timed out after " + std::to_string(timeout.count()) +
                    " ms; some rank did not take part (the MPI communicator is now unusable)");
    }
    if (spins > 1000) sched_yield();
  }
}

namespace {
// The guard's clock: CLOCK_MONOTONIC_COARSE (a few ms of resolution, a
// fraction of the precise clock's cost on the latency path); the guard looks
// every 100 ms anyway.
int64_t steadyNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

template <typename Blocking, typename Start>
void MpiProcessGroup::collective(const Call& c, const char* mpiName, Blocking&& blocking, Start&& start) {
  if (c.blocking) {
    guardSeq_.store(c.seq, std::memory_order_relaxed);
    guardCount_.store(c.count, std::memory_order_relaxed);
    guardTraceId_.store(c.traceId, std::memory_order_relaxed);
    guardTimeoutMs_.store(c.timeout.count(), std::memory_order_relaxed);
    guardOp_.store(static_cast<int>(c.op), std::memory_order_relaxed);
    guardMpiName_.store(mpiName, std::memory_order_relaxed);
    guardActive_.store(c.seq + 1, std::memory_order_release);
    int rc = blocking();
    guardActive_.store(0, std::memory_order_release);
    if (rc != MPI_SUCCESS) throw RemoteError(describe(c) + ": " + mpiName + ": MPI error: " + mpiError(rc));
    return;
  }
  MPI_Request req;
  {
    auto lk = mpiLock();
    int rc = start(&req);
    if (rc != MPI_SUCCESS) throw RemoteError(describe(c) + ": " + mpiName + ": MPI error: " + mpiError(rc));
  }
  wait(req, c.timeout, [&] { return describe(c); });
}

void MpiProcessGroup::guardLoop() {
  std::unique_lock<std::mutex> lk(guardMu_);
  uint64_t seen = 0;  // the call the guard is timing, and since when it has seen it
  int64_t since = 0;
  while (!guardStop_) {
    // Checked 10 times a second, from the first tick that sees a call: the
    // abort comes 0-0.2 s after its deadline.
    guardCv_.wait_for(lk, std::chrono::milliseconds(100));
    uint64_t active = guardActive_.load(std::memory_order_acquire);
    if (guardStop_ || active == 0) {
      seen = 0;
      continue;
    }
    if (active != seen) {
      seen = active;
      since = steadyNs();
      continue;
    }
    if (steadyNs() - since < guardTimeoutMs_.load(std::memory_order_relaxed) * 1000000) continue;
    Call c{};
    c.seq = guardSeq_.load(std::memory_order_relaxed);
    c.count = guardCount_.load(std::memory_order_relaxed);
    c.traceId = guardTraceId_.load(std::memory_order_relaxed);
    c.timeout = std::chrono::milliseconds(guardTimeoutMs_.load(std::memory_order_relaxed));
    c.op = static_cast<OpType>(guardOp_.load(std::memory_order_relaxed));
    const char* mpiName = guardMpiName_.load(std::memory_order_relaxed);
    if (guardActive_.load(std::memory_order_acquire) != active || c.seq + 1 != active)
      continue;  // that call has ended (a torn copy): look again at the next tick
    std::string msg = describe(c) + ": timed out after " + std::to_string(c.timeout.count()) + " ms in " +
                      mpiName +
                      "; some rank did not take part. MPI cannot interrupt a blocking call, so the job is "
                      "aborted (MPI_Abort, exit status 3). With ACCL_MPI_BLOCKING_BYTES=0 every collective is non-blocking "
                      "and a timeout is an accl::Timeout the caller can catch instead";
    {
      std::lock_guard<std::mutex> b(brokenMu_);
      broken_ = msg;
      isBroken_.store(true, std::memory_order_release);
    }
    gAnyBroken = true;
    ACCL_WARN("COLL", msg);
    // The flight recorder keeps the failure and writes its dump (ACCL_TRACE_DIR).
    if (recorder() && c.traceId) recorder()->finished(c.traceId, std::make_exception_ptr(Timeout(msg)));
    // Exit status 3 (mpirun passes it on): the guard's abort, told apart from
    // a rank that failed by itself.
    MPI_Abort(comm_, 3);
    std::_Exit(3);  // MPI_Abort does not return; in case it does
  }
}

template <typename Body>
int MpiProcessGroup::runCall(const Call& c, const Body& body) {
  if (isBroken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> b(brokenMu_);
    throw RemoteError(describe(c) + ": the group is unusable since " + broken_);
  }
  body(c);
  // Not after a failure: a timed-out request may still use the scratch (the
  // group is unusable then, and the buffer stays until it goes).
  scratch_.trim();
  return -1;
}

template <typename Body>
std::shared_ptr<Work> MpiProcessGroup::submit(OpType op, size_t count, size_t bytes, const OpOptions& o,
                                              Body&& body) {
  Call c{};
  c.op = op;
  c.count = count;
  // Collectives (and splits) only: a group's collectives are issued in one
  // order, so by one thread at a time; no locked increment.
  c.seq = collSeq_.load(std::memory_order_relaxed);
  collSeq_.store(c.seq + 1, std::memory_order_relaxed);
  c.traceId = issuingTraceId();
  c.timeout = effectiveTimeout(o);
  // Every rank decides alike (a blocking collective does not match a
  // non-blocking one): `bytes` is the same on every rank.
  c.blocking = blockingBytes_ > 0 && bytes <= blockingBytes_;
  ACCL_TRACE("COLL", "enqueue " << toString(op) << " #" << c.seq << " (" << count << " elements)");
  // The op's Work, made where it is needed (see runOrEnqueueMade).
  auto makeWork = [&] { return internal::makeWork(toString(op), c.seq); };
  auto owning = [&] {
    return [this, c, body = std::forward<Body>(body)]() -> int { return runCall(c, body); };
  };
  // A blocking collective would hold the worker thread as long as the calling
  // one; run it here when the group is idle (no thread hand-off, and no copy
  // of the call into a closure).
  if (bytes <= inlineBytes_ || o.blocking)
    return queue_->runOrEnqueueMade(makeWork, [&] { return runCall(c, body); }, owning);
  return queue_->enqueue(makeWork(), owning());
}

void MpiProcessGroup::allreduceInPlace(Buffer buf, const ReduceOp& op, const Call& c) {
  if (op.kind == ReduceKind::PremulSum) internal::scale(buf.data, buf.count, buf.dtype, op.scalar);
  int n = countOf(buf.count, c);
  MPI_Datatype t = mpiType(buf.dtype);
  MPI_Op mop = mpiOp(op.kind, buf.dtype);
  collective(
      c, "MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, buf.data, n, t, mop, comm_); },
      [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, buf.data, n, t, mop, comm_, r); });
  if (op.kind == ReduceKind::Avg) internal::scale(buf.data, buf.count, buf.dtype, 1.0 / size());
}

std::shared_ptr<Work> MpiProcessGroup::doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  return submit(OpType::Allreduce, in.count, in.bytes(), o, [=](const Call& c) {
    if (in.data == out.data || o.op.kind == ReduceKind::PremulSum) {
      if (in.data != out.data && in.count) std::memcpy(out.data, in.data, in.bytes());
      allreduceInPlace(out, o.op, c);
      return;
    }
    // Out of place: MPI reads the input directly, no extra copy.
    int n = countOf(in.count, c);
    MPI_Datatype t = mpiType(in.dtype);
    MPI_Op mop = mpiOp(o.op.kind, in.dtype);
    collective(
        c, "MPI_Allreduce", [&] { return MPI_Allreduce(in.data, out.data, n, t, mop, comm_); },
        [&](MPI_Request* r) { return MPI_Iallreduce(in.data, out.data, n, t, mop, comm_, r); });
    if (o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
  });
}

std::shared_ptr<Work> MpiProcessGroup::doBroadcast(Buffer buf, const BroadcastOptions& o) {
  return submit(OpType::Broadcast, buf.count, buf.bytes(), o, [=](const Call& c) {
    int n = countOf(buf.count, c);
    MPI_Datatype t = mpiType(buf.dtype);
    collective(
        c, "MPI_Bcast", [&] { return MPI_Bcast(buf.data, n, t, o.root, comm_); },
        [&](MPI_Request* r) { return MPI_Ibcast(buf.data, n, t, o.root, comm_, r); });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  return submit(OpType::Reduce, in.count, in.bytes(), o, [=](const Call& c) {
    const void* src = in.data;
    if (o.op.kind == ReduceKind::PremulSum && in.count) {
      char* scaled = scratch_.copyOf(in.data, in.bytes());
      internal::scale(scaled, in.count, in.dtype, o.op.scalar);
      src = scaled;
    }
    bool root = rank() == o.root;
    if (root && src == out.data) src = MPI_IN_PLACE;
    void* dst = root ? out.data : nullptr;
    int n = countOf(in.count, c);
    MPI_Datatype t = mpiType(in.dtype);
    MPI_Op mop = mpiOp(o.op.kind, in.dtype);
    collective(
        c, "MPI_Reduce", [&] { return MPI_Reduce(src, dst, n, t, mop, o.root, comm_); },
        [&](MPI_Request* r) { return MPI_Ireduce(src, dst, n, t, mop, o.root, comm_, r); });
    if (root && o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  return submit(OpType::Allgather, in.count, out.bytes(), o, [=](const Call& c) {
    bool inPlace = in.data == out.slice(static_cast<size_t>(rank()) * in.count, in.count).data;
    int n = countOf(in.count, c);
    countOf(out.count, c);
    const void* src = inPlace ? MPI_IN_PLACE : in.data;
    MPI_Datatype t = mpiType(in.dtype);
    collective(
        c, "MPI_Allgather", [&] { return MPI_Allgather(src, n, t, out.data, n, t, comm_); },
        [&](MPI_Request* r) { return MPI_Iallgather(src, n, t, out.data, n, t, comm_, r); });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                    const AllgatherOptions& o) {
  return submit(OpType::Allgatherv, out.count, out.bytes(), o, [=](const Call& c) {
    auto what = [&] { return describe(c); };
    auto cnt = icounts(counts, what);
    auto d = displs(cnt, what);
    int n = cnt[static_cast<size_t>(rank())];
    MPI_Datatype t = mpiType(in.dtype);
    collective(
        c, "MPI_Allgatherv",
        [&] { return MPI_Allgatherv(in.data, n, t, out.data, cnt.data(), d.data(), t, comm_); },
        [&](MPI_Request* r) { return MPI_Iallgatherv(in.data, n, t, out.data, cnt.data(), d.data(), t, comm_, r); });
  });
}

namespace {
// A reduce_scatter's send buffer: the input, or a copy of it (into `scratch`)
// scaled for premul_sum or taken because the output lies inside the input.
const void* reduceScatterSource(const Buffer& in, const Buffer& out, const ReduceOp& op,
                                internal::KeptBuffer& scratch) {
  // The front-end accepts only one overlap: the output is this rank's part of the input.
  if ((op.kind != ReduceKind::PremulSum && !in.overlaps(out)) || !in.count) return in.data;
  char* copy = scratch.copyOf(in.data, in.bytes());
  if (op.kind == ReduceKind::PremulSum) internal::scale(copy, in.count, in.dtype, op.scalar);
  return copy;
}
}  // namespace

// Equal parts: MPI_Reduce_scatter_block, with no count arrays to build per op
// (the v form below builds two).
std::shared_ptr<Work> MpiProcessGroup::doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) {
  return submit(OpType::ReduceScatter, in.count, in.bytes(), o, [=](const Call& c) {
    const void* src = reduceScatterSource(in, out, o.op, scratch_);
    int n = countOf(out.count, c);
    countOf(in.count, c);
    MPI_Datatype t = mpiType(in.dtype);
    MPI_Op mop = mpiOp(o.op.kind, in.dtype);
    collective(
        c, "MPI_Reduce_scatter_block", [&] { return MPI_Reduce_scatter_block(src, out.data, n, t, mop, comm_); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(src, out.data, n, t, mop, comm_, r); });
    if (o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
  });
}

std::shared_ptr<Work> MpiProcessGroup::doReduceScatterv(Buffer in, Buffer out,
                                                        const std::vector<size_t>& counts,
                                                        const ReduceScatterOptions& o) {
  return submit(OpType::ReduceScatterv, in.count, in.bytes(), o, [=](const Call& c) {
    const void* src = reduceScatterSource(in, out, o.op, scratch_);
    auto cnt = icounts(counts, [&] { return describe(c); });
    countOf(in.count, c);
    MPI_Datatype t = mpiType(in.dtype);
    MPI_Op mop = mpiOp(o.op.kind, in.dtype);
    collective(
        c, "MPI_Reduce_scatter", [&] { return MPI_Reduce_scatter(src, out.data, cnt.data(), t, mop, comm_); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter(src, out.data, cnt.data(), t, mop, comm_, r); });
    if (o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  return submit(OpType::Alltoall, in.count, in.bytes(), o, [=](const Call& c) {
    int n = countOf(in.count / static_cast<size_t>(size()), c);
    const void* src = inPlaceOr(in, out);
    MPI_Datatype t = mpiType(in.dtype);
    collective(
        c, "MPI_Alltoall", [&] { return MPI_Alltoall(src, n, t, out.data, n, t, comm_); },
        [&](MPI_Request* r) { return MPI_Ialltoall(src, n, t, out.data, n, t, comm_, r); });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts,
                                                   Buffer out, const std::vector<size_t>& recvCounts,
                                                   const AlltoallOptions& o) {
  // Buffer sizes differ between ranks, and every rank must choose the same
  // (blocking or not) call: alltoallv is always non-blocking.
  return submit(OpType::Alltoallv, in.count, SIZE_MAX, o, [=](const Call& c) {
    auto what = [&] { return describe(c); };
    auto sc = icounts(sendCounts, what), rc = icounts(recvCounts, what);
    auto sd = displs(sc, what), rd = displs(rc, what);
    const void* src = in.data;
    if (in.data == out.data && in.count) src = scratch_.copyOf(in.data, in.bytes());
    MPI_Datatype t = mpiType(in.dtype);
    collective(
        c, "MPI_Alltoallv",
        [&] { return MPI_Alltoallv(src, sc.data(), sd.data(), t, out.data, rc.data(), rd.data(), t, comm_); },
        [&](MPI_Request* r) {
          return MPI_Ialltoallv(src, sc.data(), sd.data(), t, out.data, rc.data(), rd.data(), t, comm_, r);
        });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  return submit(OpType::Gather, in.count, in.bytes() * static_cast<size_t>(size()), o, [=](const Call& c) {
    bool root = rank() == o.root;
    int n = countOf(in.count, c);
    const void* src = in.data;
    if (root && in.data == out.slice(static_cast<size_t>(rank()) * in.count, in.count).data) src = MPI_IN_PLACE;
    void* dst = root ? out.data : nullptr;
    MPI_Datatype t = mpiType(in.dtype);
    collective(
        c, "MPI_Gather", [&] { return MPI_Gather(src, n, t, dst, n, t, o.root, comm_); },
        [&](MPI_Request* r) { return MPI_Igather(src, n, t, dst, n, t, o.root, comm_, r); });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  return submit(OpType::Scatter, out.count, out.bytes() * static_cast<size_t>(size()), o, [=](const Call& c) {
    bool root = rank() == o.root;
    int n = countOf(out.count, c);
    void* dst = out.data;
    if (root && out.data == in.slice(static_cast<size_t>(rank()) * out.count, out.count).data) dst = MPI_IN_PLACE;
    const void* src = root ? in.data : nullptr;
    MPI_Datatype t = mpiType(out.dtype);
    collective(
        c, "MPI_Scatter", [&] { return MPI_Scatter(src, n, t, dst, n, t, o.root, comm_); },
        [&](MPI_Request* r) { return MPI_Iscatter(src, n, t, dst, n, t, o.root, comm_, r); });
  });
}

std::shared_ptr<Work> MpiProcessGroup::doBarrier(const BarrierOptions& o) {
  return submit(OpType::Barrier, 0, 0, o, [=](const Call& c) {
    collective(
        c, "MPI_Barrier", [&] { return MPI_Barrier(comm_); },
        [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  });
}

// Point-to-point ops are posted at once, not behind earlier collectives. One
// that completes at once (an eager send) returns a completed Work; any other
// is polled by the thread that waits on its Work, and by the progress thread
// while none does (pendP2p).
std::shared_ptr<Work> MpiProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  auto timeout = effectiveTimeout(o);
  PendingP2p q;  // the op's record; on the heap only if it is left pending
  q.peer = dst;
  q.tag = o.tag;
  auto what = [&] { return describeP2p(q); };
  if (isBroken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> b(brokenMu_);
    throw RemoteError(what() + ": the group is unusable since " + broken_);
  }
  int done = 0;
  {
    auto lk = mpiLock();
    int n = icount(buf.count, what);
    checkLazy(MPI_Isend(buf.data, n, mpiType(buf.dtype), dst, o.tag, comm_, &q.req[0]), what);
    checkLazy(MPI_Test(&q.req[0], &done, MPI_STATUS_IGNORE), what);
  }
  uint64_t seq = p2pSeq_++;
  // Sent at once (an eager send): the thread's completed Work, as an op the
  // op queue runs at once (no source rank to report).
  if (done) return internal::completedWork();
  auto work = internal::makeWork("send", seq);
  if (o.blocking) {
    waitHere(q, work, timeout);
    return work;
  }
  return pendP2p(std::move(work), q, timeout);
}

std::shared_ptr<Work> MpiProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  auto timeout = effectiveTimeout(o);
  PendingP2p q;
  recvRecord(q, buf, src, o.tag);
  auto what = [&] { return describeP2p(q); };
  if (isBroken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> b(brokenMu_);
    throw RemoteError(what() + ": the group is unusable since " + broken_);
  }
  MPI_Status st{};
  int done = 0;
  {
    auto lk = mpiLock();
    int n = icount(buf.count, what);
    checkLazy(MPI_Irecv(buf.data, n, mpiType(buf.dtype), src == kAnySource ? MPI_ANY_SOURCE : src, o.tag, comm_,
                        &q.req[0]),
              what);
    checkLazy(MPI_Test(&q.req[0], &done, &st), what);
  }
  auto work = internal::makeWork("recv", p2pSeq_++);
  if (done) {
    try {
      work->completeUnshared(nullptr, recvSource(st, buf.dtype, buf.count, src, o.tag));
    } catch (...) {
      work->completeUnshared(std::current_exception(), -1);
    }
    return work;
  }
  if (o.blocking) {
    waitHere(q, work, timeout);
    return work;
  }
  return pendP2p(std::move(work), q, timeout);
}

void MpiProcessGroup::recvRecord(P2pRecord& p, Buffer buf, int src, int tag) {
  p.isRecv = true;
  p.peer = src;
  p.tag = tag;
  p.count = buf.count;
  p.dtype = buf.dtype;
}

std::shared_ptr<Work> MpiProcessGroup::doSendRecv(Buffer sb, int dst, Buffer rb, int src, const SendRecvOptions& o) {
  auto timeout = effectiveTimeout(o);
  PendingP2p q;
  recvRecord(q, rb, src, o.recvTag);
  q.sendPeer = dst;
  q.sendTag = o.sendTag;
  q.nreq = 2;
  auto what = [&] { return describeP2p(q); };
  if (isBroken_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> b(brokenMu_);
    throw RemoteError(what() + ": the group is unusable since " + broken_);
  }
  MPI_Status st[2];
  int done = 0;
  {
    auto lk = mpiLock();
    int rn = icount(rb.count, what), sn = icount(sb.count, what);
    checkLazy(MPI_Irecv(rb.data, rn, mpiType(rb.dtype), src == kAnySource ? MPI_ANY_SOURCE : src, o.recvTag, comm_,
                        &q.req[0]),
              what);
    int rc = MPI_Isend(sb.data, sn, mpiType(sb.dtype), dst, o.sendTag, comm_, &q.req[1]);
    if (rc != MPI_SUCCESS) {
      // Not left posted into the caller's buffer, which the failed call hands back.
      MPI_Cancel(&q.req[0]);
      MPI_Request_free(&q.req[0]);
      checkLazy(rc, what);
    }
    checkLazy(MPI_Testall(2, q.req, &done, st), what);
  }
  auto work = internal::makeWork("sendrecv", p2pSeq_++);
  if (done) {
    try {
      work->completeUnshared(nullptr, recvSource(st[0], rb.dtype, rb.count, src, o.recvTag));
    } catch (...) {
      work->completeUnshared(std::current_exception(), -1);
    }
    return work;
  }
  if (o.blocking) {
    waitHere(q, work, timeout);
    return work;
  }
  return pendP2p(std::move(work), q, timeout);
}

void MpiProcessGroup::waitHere(PendingP2p& q, const std::shared_ptr<Work>& work, std::chrono::milliseconds timeout) {
  q.g = this;
  q.work = work;
  q.timeout = timeout;
  q.unshared = true;
  // The clock is read first after 256 tests (a small exchange has mostly
  // ended by then, with no clock read at all), and every 256 tests from
  // then on: the deadline counts from that first read.
  for (unsigned spins = 0;; ++spins) {
    bool clock = (spins & 255) == 255;
    if (clock && spins == 255) {
      q.deadline = std::chrono::steady_clock::now() + timeout;
      clock = false;
    }
    if (testP2p(q, clock)) return;
    if (spins > 1000) sched_yield();
  }
}

namespace {
// How long a new request is left to its waiter before the progress thread
// polls it too (its poll would take the core that the waiter or the peer
// needs: 2 ranks on 2 cores, sendrecv 512 B - 32 KiB took 2.3-4x raw MPI's
// time while a queue's worker polled beside the waiter); how often the
// progress thread looks while requests come (no wake-up per op); how long
// it goes on looking after the last one before it sleeps until the next.
constexpr auto kP2pHeadStart = std::chrono::microseconds(100);
constexpr auto kP2pTick = std::chrono::milliseconds(1);
constexpr auto kP2pLinger = std::chrono::milliseconds(100);
}  // namespace

std::shared_ptr<Work> MpiProcessGroup::pendP2p(std::shared_ptr<Work> work, const P2pRecord& q,
                                               std::chrono::milliseconds timeout) {
  auto p = std::allocate_shared<PendingP2p>(internal::WorkAllocator<PendingP2p>{});
  static_cast<P2pRecord&>(*p) = q;
  p->g = this;
  p->work = work;
  p->posted = std::chrono::steady_clock::now();
  p->deadline = p->posted + timeout;
  p->timeout = timeout;
  // The waiter polls the request itself until it finished; while the
  // progress thread holds it for a test, the waiter waits for its turn.
  // (The hook keeps `p`: 16 bytes, inside the std::function.)
  work->setWaitHook([p](Work&) {
    PendingP2p& q = *p;
    while (!q.finished.load(std::memory_order_acquire)) {
      if (q.claimed.exchange(true, std::memory_order_acquire)) {
        sched_yield();
        continue;
      }
      // The clock every 256 tests; finished is the last thing testP2p
      // writes (the group may go once every request finished).
      for (unsigned spins = 0; !q.finished.load(std::memory_order_relaxed); ++spins) {
        if (q.g->testP2p(q, (spins & 255) == 255)) break;
        if (spins > 1000) sched_yield();
      }
      q.claimed.store(false, std::memory_order_release);
    }
  });
  bool wake;
  {
    std::lock_guard<std::mutex> lk(p2pMu_);
    p2p_.push_back(std::move(p));
    wake = p2pIdle_;
  }
  if (wake) p2pCv_.notify_one();
  return work;
}

std::string MpiProcessGroup::describeP2p(bool isRecv, int peer, int tag) const {
  if (!isRecv) return context("send to rank " + std::to_string(peer) + " tag " + std::to_string(tag));
  return context("recv from " + (peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(peer)) +
                 " tag " + std::to_string(tag));
}

std::string MpiProcessGroup::describeP2p(const P2pRecord& p) const {
  std::string recv = describeP2p(p.isRecv, p.peer, p.tag);
  if (p.nreq < 2) return recv;
  return context("sendrecv: send to rank " + std::to_string(p.sendPeer) + " tag " + std::to_string(p.sendTag) +
                 ", recv from " + (p.peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(p.peer)) +
                 " tag " + std::to_string(p.tag));
}

int MpiProcessGroup::recvSource(const MPI_Status& st, DataType dtype, size_t count, int src, int tag) const {
  int got = 0;
  MPI_Get_count(&st, mpiType(dtype), &got);
  if (static_cast<size_t>(got) != count)
    throw InvalidArgument(describeP2p(true, src, tag) + ": received " + std::to_string(got) + " elements, expected " +
                          std::to_string(count));
  return st.MPI_SOURCE;
}

bool MpiProcessGroup::testP2p(PendingP2p& p, bool clock) {
  if (p.finished.load(std::memory_order_relaxed)) return true;
  int done = 0, rc;
  MPI_Status st[2]{};
  {
    auto lk = mpiLock();
    rc = p.nreq == 1 ? MPI_Test(&p.req[0], &done, &st[0]) : MPI_Testall(p.nreq, p.req, &done, st);
  }
  std::exception_ptr error;
  int src = -1;
  if (rc != MPI_SUCCESS) {
    error = std::make_exception_ptr(RemoteError(describeP2p(p) + ": MPI error: " + mpiError(rc)));
  } else if (done) {
    if (p.isRecv) {
      try {
        src = recvSource(st[0], p.dtype, p.count, p.peer, p.tag);
      } catch (...) {
        error = std::current_exception();
      }
    }
  } else if (clock && std::chrono::steady_clock::now() > p.deadline) {
    std::string w = describeP2p(p);
    {
      std::lock_guard<std::mutex> b(brokenMu_);
      broken_ = w;
      isBroken_.store(true, std::memory_order_release);
    }
    gAnyBroken = true;
    error = std::make_exception_ptr(Timeout(w + ": timed out after " + std::to_string(p.timeout.count()) +
                                            " ms; some rank did not take part (the MPI communicator is now unusable)"));
  } else {
    return false;
  }
  std::shared_ptr<Work> w = std::move(p.work);
  if (p.unshared) w->completeUnshared(std::move(error), src);
  else w->markCompleted(std::move(error), src);
  p.finished.store(true, std::memory_order_release);
  return true;
}

void MpiProcessGroup::p2pLoop() {
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<PendingP2p>> due;
  std::unique_lock<std::mutex> lk(p2pMu_);
  auto lingerUntil = Clock::now() + kP2pLinger;
  for (;;) {
    p2p_.erase(std::remove_if(p2p_.begin(), p2p_.end(),
                              [](const std::shared_ptr<PendingP2p>& p) { return p->finished.load(std::memory_order_acquire); }),
               p2p_.end());
    auto now = Clock::now();
    if (p2p_.empty()) {
      if (p2pStop_) return;
      if (now < lingerUntil) {
        p2pCv_.wait_until(lk, std::min(lingerUntil, now + kP2pTick));
        continue;
      }
      p2pIdle_ = true;
      p2pCv_.wait(lk, [&] { return p2pStop_ || !p2p_.empty(); });
      p2pIdle_ = false;
      lingerUntil = Clock::now() + kP2pLinger;
      continue;
    }
    lingerUntil = now + kP2pLinger;
    // Due: requests past their head start (all of them once the group stops).
    auto next = now + kP2pTick;
    for (auto& p : p2p_) {
      if (p2pStop_ || now >= p->posted + kP2pHeadStart) due.push_back(p);
      else next = std::min(next, p->posted + kP2pHeadStart);
    }
    if (due.empty()) {
      p2pCv_.wait_until(lk, next);
      continue;
    }
    lk.unlock();
    bool polled = false;
    for (unsigned spins = 0; spins < 64; ++spins) {
      bool open = false;
      for (auto& p : due) {
        if (p->finished.load(std::memory_order_acquire) || p->claimed.exchange(true, std::memory_order_acquire))
          continue;
        polled = true;
        if (!testP2p(*p, spins == 0)) open = true;
        p->claimed.store(false, std::memory_order_release);
      }
      if (!open) break;
    }
    due.clear();
    lk.lock();
    // Requests that a waiter polls are its own: then look again next tick.
    if (!polled) p2pCv_.wait_until(lk, Clock::now() + kP2pTick);
    else if (!p2pStop_) {
      lk.unlock();
      sched_yield();
      lk.lock();
    }
  }
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::doSplit(const std::vector<int>& ranks,
                                                       const ProcessGroupOptions& opts) {
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  bool member = it != ranks.end();
  MPI_Comm sub = MPI_COMM_NULL;
  std::string what = context("split");
  // MPI_Comm_split is collective on comm_: run it in order with the other ops.
  OpOptions so;
  so.blocking = true;
  auto w = submit(OpType::Split, ranks.size(), SIZE_MAX, so, [&](const Call&) {
    auto lk = mpiLock();
    check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, member ? static_cast<int>(it - ranks.begin()) : 0, &sub),
          what);
  });
  w->wait();
  if (!member) return nullptr;
  ProcessGroupOptions o = opts;
  if (o.timeout.count() == 0) o.timeout = timeout();
  auto pg = std::make_shared<MpiProcessGroup>(sub, o);
  auto lk = mpiLock();
  MPI_Comm_free(&sub);
  return pg;
}

namespace {
std::string describeMpi() {
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string libName(lib, static_cast<size_t>(len));
  libName = libName.substr(0, libName.find(','));
  return libName + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ", CPU buffers)";
}

// The ranks come from mpirun: MPI_COMM_WORLD, which must agree with the caller's.
std::shared_ptr<ProcessGroup> makeMpiGroup(std::shared_ptr<Store>, int rank, int size, const ProcessGroupOptions& opts) {
  ensureInitialized();
  int r, s;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  if (r != rank || s != size)
    throw InvalidArgument("accl mpi: rank " + std::to_string(rank) + "/" + std::to_string(size) +
                          " differs from MPI_COMM_WORLD's " + std::to_string(r) + "/" + std::to_string(s) +
                          "; the mpi backend takes its ranks from mpirun (launch with mpirun -n " +
                          std::to_string(size) + ")");
  return std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, opts);
}
}  // namespace

ACCL_REGISTER_BACKEND("mpi", MpiProcessGroup, describeMpi, {}, makeMpiGroup)

}  // namespace accl
