#include "mpi_process_group.h"

#include <sched.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "accl/internal/reduce_kernels.h"
#include "accl/logging.h"
#include "accl/registry.h"

namespace accl {

namespace {

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

// MPI counts are C ints.
int icount(size_t n, const std::string& what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw NotSupported(what + ": " + std::to_string(n) +
                       " elements exceed MPI's int count limit (2^31-1)");
  return static_cast<int>(n);
}

std::vector<int> icounts(const std::vector<size_t>& v, const std::string& what) {
  std::vector<int> out;
  for (auto n : v) out.push_back(icount(n, what));
  return out;
}

std::vector<int> displs(const std::vector<int>& counts, const std::string& what) {
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
  queue_.reset(new internal::OpQueue("accl-mpi"));
  p2pWaits_.reset(new internal::OpQueue("accl-mpi-p2p"));
}

MpiProcessGroup::~MpiProcessGroup() {
  queue_.reset();
  p2pWaits_.reset();
  std::lock_guard<std::mutex> b(brokenMu_);
  if (broken_.empty()) {
    auto lk = mpiLock();
    MPI_Comm_free(&comm_);
  }
}

MPI_Status MpiProcessGroup::wait(MPI_Request req, std::chrono::milliseconds timeout,
                                 const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MPI_Status st{};
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    {
      auto lk = mpiLock();
      check(MPI_Test(&req, &done, &st), what);
    }
    if (done) return st;
    if ((spins & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
      {
        std::lock_guard<std::mutex> b(brokenMu_);
        broken_ = what;
      }
      gAnyBroken = true;
      throw Timeout(what + ": timed out after " + std::to_string(timeout.count()) +
                    " ms; some rank did not take part (the MPI communicator is now unusable)");
    }
    if (spins > 1000) sched_yield();
  }
}

std::shared_ptr<Work> MpiProcessGroup::run(OpType op, size_t count, std::chrono::milliseconds,
                                           std::function<int()> body) {
  uint64_t seq = seq_++;
  std::string desc = std::string(toString(op)) + " #" + std::to_string(seq) + " (" +
                     std::to_string(count) + " elements)";
  ACCL_TRACE("COLL", "enqueue " << desc);
  return queue_->enqueue(desc, [this, body = std::move(body), desc]() -> int {
    {
      std::lock_guard<std::mutex> b(brokenMu_);
      if (!broken_.empty())
        throw RemoteError(context(desc + ": the group is unusable since " + broken_ + " timed out"));
    }
    return body();
  });
}

#define ACCL_MPI_CALL(call)                     \
  do {                                          \
    auto lk_ = mpiLock();                       \
    check((call), what);                        \
  } while (0)

void MpiProcessGroup::allreduceInPlace(Buffer buf, const ReduceOp& op, std::chrono::milliseconds timeout,
                                       const std::string& what) {
  if (op.kind == ReduceKind::PremulSum) internal::scale(buf.data, buf.count, buf.dtype, op.scalar);
  MPI_Request req;
  ACCL_MPI_CALL(MPI_Iallreduce(MPI_IN_PLACE, buf.data, icount(buf.count, what), mpiType(buf.dtype),
                               mpiOp(op.kind, buf.dtype), comm_, &req));
  wait(req, timeout, what);
  if (op.kind == ReduceKind::Avg) internal::scale(buf.data, buf.count, buf.dtype, 1.0 / size());
}

std::shared_ptr<Work> MpiProcessGroup::doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("allreduce");
  return run(OpType::Allreduce, in.count, timeout, [=] {
    if (in.data == out.data || o.op.kind == ReduceKind::PremulSum) {
      if (in.data != out.data && in.count) std::memcpy(out.data, in.data, in.bytes());
      allreduceInPlace(out, o.op, timeout, what);
      return -1;
    }
    // Out of place: MPI reads the input directly, no extra copy.
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Iallreduce(in.data, out.data, icount(in.count, what), mpiType(in.dtype),
                                 mpiOp(o.op.kind, in.dtype), comm_, &req));
    wait(req, timeout, what);
    if (o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doBroadcast(Buffer buf, const BroadcastOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("broadcast");
  return run(OpType::Broadcast, buf.count, timeout, [=] {
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ibcast(buf.data, icount(buf.count, what), mpiType(buf.dtype), o.root, comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("reduce");
  return run(OpType::Reduce, in.count, timeout, [=] {
    std::vector<char> scaled;
    const void* src = in.data;
    if (o.op.kind == ReduceKind::PremulSum && in.count) {
      scaled.assign(static_cast<char*>(in.data), static_cast<char*>(in.data) + in.bytes());
      internal::scale(scaled.data(), in.count, in.dtype, o.op.scalar);
      src = scaled.data();
    }
    bool root = rank() == o.root;
    if (root && src == out.data) src = MPI_IN_PLACE;
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ireduce(src, root ? out.data : nullptr, icount(in.count, what), mpiType(in.dtype),
                              mpiOp(o.op.kind, in.dtype), o.root, comm_, &req));
    wait(req, timeout, what);
    if (root && o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("allgather");
  return run(OpType::Allgather, in.count, timeout, [=] {
    bool inPlace = in.data == out.slice(static_cast<size_t>(rank()) * in.count, in.count).data;
    MPI_Request req;
    int n = icount(in.count, what);
    icount(out.count, what);
    ACCL_MPI_CALL(MPI_Iallgather(inPlace ? MPI_IN_PLACE : in.data, n, mpiType(in.dtype), out.data, n,
                                 mpiType(out.dtype), comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                    const AllgatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("allgatherv");
  return run(OpType::Allgatherv, out.count, timeout, [=] {
    auto c = icounts(counts, what);
    auto d = displs(c, what);
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Iallgatherv(in.data, c[static_cast<size_t>(rank())], mpiType(in.dtype), out.data,
                                  c.data(), d.data(), mpiType(out.dtype), comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doReduceScatterv(Buffer in, Buffer out,
                                                        const std::vector<size_t>& counts,
                                                        const ReduceScatterOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("reduce_scatter");
  return run(OpType::ReduceScatterv, in.count, timeout, [=] {
    // A scaled copy for premul_sum, and a copy when the output lies inside the input.
    std::vector<char> copy;
    const void* src = in.data;
    char* inBegin = static_cast<char*>(in.data);
    char* outPtr = static_cast<char*>(out.data);
    bool overlap = in.count && out.count && outPtr >= inBegin && outPtr < inBegin + in.bytes();
    if ((o.op.kind == ReduceKind::PremulSum || overlap) && in.count) {
      copy.assign(inBegin, inBegin + in.bytes());
      if (o.op.kind == ReduceKind::PremulSum) internal::scale(copy.data(), in.count, in.dtype, o.op.scalar);
      src = copy.data();
    }
    auto c = icounts(counts, what);
    icount(in.count, what);
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ireduce_scatter(src, out.data, c.data(), mpiType(in.dtype), mpiOp(o.op.kind, in.dtype),
                                      comm_, &req));
    wait(req, timeout, what);
    if (o.op.kind == ReduceKind::Avg) internal::scale(out.data, out.count, out.dtype, 1.0 / size());
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("alltoall");
  return run(OpType::Alltoall, in.count, timeout, [=] {
    int n = icount(in.count / static_cast<size_t>(size()), what);
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ialltoall(inPlaceOr(in, out), n, mpiType(in.dtype), out.data, n, mpiType(out.dtype),
                                comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts,
                                                   Buffer out, const std::vector<size_t>& recvCounts,
                                                   const AlltoallOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("alltoallv");
  return run(OpType::Alltoallv, in.count, timeout, [=] {
    auto sc = icounts(sendCounts, what), rc = icounts(recvCounts, what);
    auto sd = displs(sc, what), rd = displs(rc, what);
    std::vector<char> copy;
    const void* src = in.data;
    if (in.data == out.data && in.count) {
      copy.assign(static_cast<char*>(in.data), static_cast<char*>(in.data) + in.bytes());
      src = copy.data();
    }
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ialltoallv(src, sc.data(), sd.data(), mpiType(in.dtype), out.data, rc.data(), rd.data(),
                                 mpiType(out.dtype), comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("gather");
  return run(OpType::Gather, in.count, timeout, [=] {
    bool root = rank() == o.root;
    int n = icount(in.count, what);
    const void* src = in.data;
    if (root && in.data == out.slice(static_cast<size_t>(rank()) * in.count, in.count).data) src = MPI_IN_PLACE;
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Igather(src, n, mpiType(in.dtype), root ? out.data : nullptr, n, mpiType(in.dtype), o.root,
                              comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("scatter");
  return run(OpType::Scatter, out.count, timeout, [=] {
    bool root = rank() == o.root;
    int n = icount(out.count, what);
    void* dst = out.data;
    if (root && out.data == in.slice(static_cast<size_t>(rank()) * out.count, out.count).data) dst = MPI_IN_PLACE;
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Iscatter(root ? in.data : nullptr, n, mpiType(out.dtype), dst, n, mpiType(out.dtype), o.root,
                               comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doBarrier(const BarrierOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("barrier");
  return run(OpType::Barrier, 0, timeout, [=] {
    MPI_Request req;
    ACCL_MPI_CALL(MPI_Ibarrier(comm_, &req));
    wait(req, timeout, what);
    return -1;
  });
}

// Point-to-point ops are posted at once and awaited on a separate thread, so
// that a send does not wait behind earlier collectives.
std::shared_ptr<Work> MpiProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("send to rank " + std::to_string(dst) + " tag " + std::to_string(o.tag));
  MPI_Request req;
  ACCL_MPI_CALL(MPI_Isend(buf.data, icount(buf.count, what), mpiType(buf.dtype), dst, o.tag, comm_, &req));
  return p2pWaits_->enqueue(what, [=] {
    wait(req, timeout, what);
    return -1;
  });
}

std::shared_ptr<Work> MpiProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::string what = context("recv from " + (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) +
                             " tag " + std::to_string(o.tag));
  MPI_Request req;
  ACCL_MPI_CALL(MPI_Irecv(buf.data, icount(buf.count, what), mpiType(buf.dtype),
                          src == kAnySource ? MPI_ANY_SOURCE : src, o.tag, comm_, &req));
  return p2pWaits_->enqueue(what, [=] {
    MPI_Status st = wait(req, timeout, what);
    int got = 0;
    MPI_Get_count(&st, mpiType(buf.dtype), &got);
    if (static_cast<size_t>(got) != buf.count)
      throw InvalidArgument(what + ": received " + std::to_string(got) + " elements, expected " +
                            std::to_string(buf.count));
    return st.MPI_SOURCE;
  });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::doSplit(const std::vector<int>& ranks,
                                                       const ProcessGroupOptions& opts) {
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  bool member = it != ranks.end();
  MPI_Comm sub = MPI_COMM_NULL;
  std::string what = context("split");
  // MPI_Comm_split is collective on comm_: run it in order with the other ops.
  auto w = run(OpType::Split, ranks.size(), effectiveTimeout(OpOptions{}), [&] {
    ACCL_MPI_CALL(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED,
                                 member ? static_cast<int>(it - ranks.begin()) : 0, &sub));
    return -1;
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
