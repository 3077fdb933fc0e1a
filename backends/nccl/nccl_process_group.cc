#include "nccl_process_group.h"

#include <sched.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "accl/logging.h"
#include "accl/internal/half.h"
#include "accl/registry.h"

namespace accl {

namespace {

using Clock = std::chrono::steady_clock;

std::string cudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Number of CUDA devices, or an explanation of why there are none.
int deviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = "no usable CUDA device (cudaGetDeviceCount: " + cudaText(e) + "); the nccl backend runs on GPU hosts";
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible; the nccl backend runs on GPU hosts";
  return n;
}

std::string ncclVersionText() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

ncclDataType_t ncclType(DataType t) {
  switch (t) {
    case DataType::Int8: return ncclInt8;
    case DataType::Uint8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::Uint32: return ncclUint32;
    case DataType::Int64: return ncclInt64;
    case DataType::Uint64: return ncclUint64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Bool: return ncclUint8;  // 0/1 bytes: or = max, and = min
  }
  throw Internal("unmapped dtype");
}

bool isFloat(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}

// The reduction NCCL runs for `op` on `t`, or why there is none (empty = supported).
std::string unsupported(const ReduceOp& op, DataType t) {
  switch (op.kind) {
    case ReduceKind::Sum:
    case ReduceKind::Prod:
    case ReduceKind::Min:
    case ReduceKind::Max: return "";
    case ReduceKind::Avg:
    case ReduceKind::PremulSum:
      return isFloat(t) ? "" : std::string(toString(op.kind)) + " of " + toString(t) +
                                   " (NCCL averages and pre-multiplies floating-point types only: float16, bfloat16, float32, float64)";
    case ReduceKind::BAnd:
    case ReduceKind::BOr:
    case ReduceKind::BXor:
      if (t == DataType::Bool && op.kind != ReduceKind::BXor) return "";
      return std::string(toString(op.kind)) + " (NCCL has no bitwise reductions; accepted: sum, prod, min, max, avg, premul_sum)";
  }
  return "this reduction";
}

size_t bytesOf(size_t count, DataType t) { return count * dataTypeSize(t); }
char* at(const Buffer& b, size_t elements) { return static_cast<char*>(b.data) + bytesOf(elements, b.dtype); }

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts)
    : ProcessGroup(rank, size, "nccl", opts), store_(std::make_shared<PrefixStore>("nccl", std::move(store))) {
  std::string why;
  if (deviceCount(&why) == 0) throw NotSupported(context(why));
  queue_.reset(new internal::OpQueue("accl-nccl"));
}

NcclProcessGroup::~NcclProcessGroup() {
  queue_.reset();  // finishes queued ops (each bounded by its deadline)
  if (device_ >= 0) cudaSetDevice(device_);
  if (comm_) {
    if (broken_.empty()) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  if (stream_) cudaStreamDestroy(stream_);
  if (done_) cudaEventDestroy(done_);
  if (scratch_) cudaFree(scratch_);
}

void NcclProcessGroup::fail(const std::string& what, const std::string& why, bool timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = what;
  }
  // Aborting unblocks NCCL's kernels and proxy threads; the group is unusable after.
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  std::string msg = what + ": " + why + " (the NCCL communicator was aborted; the group is unusable)";
  if (timeout) throw Timeout(msg);
  throw RemoteError(msg);
}

void NcclProcessGroup::check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string detail = comm_ ? ncclGetLastError(comm_) : "";
  std::string why = std::string("NCCL error: ") + ncclGetErrorString(r) + (detail.empty() ? "" : " (" + detail + ")");
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) throw InvalidArgument(what + ": " + why);
  fail(what, why, false);
}

void NcclProcessGroup::settle(const std::string& what, Clock::time_point deadline) {
  for (unsigned spins = 0;; ++spins) {
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(comm_, &st);
    if (st == ncclSuccess) return;
    if (st != ncclInProgress) check(st, what);
    if (Clock::now() > deadline) fail(what, "timed out waiting for NCCL; some rank did not take part", true);
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else sched_yield();
  }
}

void NcclProcessGroup::ensureComm(Clock::time_point deadline) {
  if (comm_) return;
  std::string what = context("creating the NCCL communicator");
  if (device_ < 0) {
    int d = 0;
    cudaGetDevice(&d);
    std::lock_guard<std::mutex> lock(mu_);
    device_ = d;
  }
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) throw SystemError(what + ": cudaSetDevice(" + std::to_string(device_) + "): " + cudaText(e));
  ncclUniqueId id;
  if (rank() == 0) {
    check(ncclGetUniqueId(&id), what);
    store_->set("uid", std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    store_->wait({"uid"}, std::max(left, std::chrono::milliseconds(1)));
    auto v = store_->get("uid");
    if (v.size() != sizeof(id.internal)) throw Internal(what + ": malformed NCCL unique id in the store");
    std::memcpy(id.internal, v.data(), v.size());
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // so that a rank that never joins costs a timeout, not a hang
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank(), &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    comm_ = nullptr;
    throw RemoteError(what + ": NCCL error: " + ncclGetErrorString(r));
  }
  try {
    settle(what, deadline);
  } catch (const InvalidArgument& err) {
    // NCCL refuses a communicator with two ranks on one GPU; say what to do.
    std::string m = err.what();
    if (m.find("Duplicate GPU") == std::string::npos) throw;
    throw InvalidArgument(m + "; NCCL takes one rank per GPU: give each rank a device of its own "
                              "(torch.cuda.set_device(LOCAL_RANK), or CUDA_VISIBLE_DEVICES per rank), or "
                              "run fewer ranks on this host");
  }
  if ((e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming)) != cudaSuccess ||
      (e = cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(int))) != cudaSuccess)
    throw SystemError(what + ": " + cudaText(e));
  ACCL_INFO("INIT", "nccl " << ncclVersionText() << ": communicator of " << size() << " ranks on cuda:" << device_
                            << (options().name.empty() ? "" : " ('" + options().name + "')"));
}

ncclRedOp_t NcclProcessGroup::redOp(const ReduceOp& op, DataType t, bool* created) {
  *created = false;
  bool b = t == DataType::Bool;
  switch (op.kind) {
    case ReduceKind::Sum: return b ? ncclMax : ncclSum;
    case ReduceKind::Prod: return b ? ncclMin : ncclProd;
    case ReduceKind::Min:
    case ReduceKind::BAnd: return ncclMin;
    case ReduceKind::Max:
    case ReduceKind::BOr: return ncclMax;
    case ReduceKind::Avg: return ncclAvg;
    case ReduceKind::PremulSum: {
      // The scalar in the buffer's own type, read when the op is enqueued.
      alignas(8) unsigned char s[8] = {0};
      if (t == DataType::Float64) {
        double v = op.scalar;
        std::memcpy(s, &v, 8);
      } else if (t == DataType::Float32) {
        float v = static_cast<float>(op.scalar);
        std::memcpy(s, &v, 4);
      } else if (t == DataType::Float16) {
        _Float16 v = static_cast<_Float16>(op.scalar);
        std::memcpy(s, &v, 2);
      } else {  // bfloat16
        uint16_t h = internal::floatToBf16(static_cast<float>(op.scalar));
        std::memcpy(s, &h, 2);
      }
      ncclRedOp_t r;
      check(ncclRedOpCreatePreMulSum(&r, s, ncclType(t), ncclScalarHostImmediate, comm_), context("premul_sum"));
      *created = true;
      return r;
    }
    default: break;
  }
  throw Internal("unmapped reduce op");
}

std::shared_ptr<Work> NcclProcessGroup::run(OpType op, size_t count, const Device& device, const OpOptions& o,
                                            Launch launch) {
  auto timeout = effectiveTimeout(o);
  int dev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device.type == DeviceType::CUDA) {
      if (device_ < 0) device_ = device.index;
      else if (device.index != device_)
        throw InvalidArgument(context(std::string(toString(op)) + ": buffers on cuda:" + std::to_string(device.index) +
                                      ", but this group runs on cuda:" + std::to_string(device_) +
                                      " (the device of its first op); one group serves one device"));
    }
    dev = device_;
  }
  std::string what = context(std::string(toString(op)) + " #" + std::to_string(seq_++) + " (" +
                             std::to_string(count) + " elements)");
  // The op starts after what the caller queued on its stream so far: an event
  // recorded now, on the caller's thread (not when the worker gets to it).
  std::shared_ptr<CUevent_st> before;
  if (dev >= 0) {
    int was = -1;
    cudaGetDevice(&was);
    cudaSetDevice(dev);
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      before.reset(ev, [](cudaEvent_t x) { cudaEventDestroy(x); });
      e = cudaEventRecord(ev, o.stream ? static_cast<cudaStream_t>(o.stream) : cudaStreamLegacy);
    }
    if (was >= 0) cudaSetDevice(was);
    if (e != cudaSuccess) throw SystemError(what + ": recording the caller's stream: " + cudaText(e));
  }
  return queue_->enqueue(what, [this, what, timeout, before, launch = std::move(launch)]() -> int {
    auto deadline = Clock::now() + timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.empty()) throw RemoteError(what + ": the group is unusable since " + broken_ + " failed");
    }
    ensureComm(deadline);
    cudaSetDevice(device_);
    cudaError_t e = cudaSuccess;
    if (before) e = cudaStreamWaitEvent(stream_, before.get(), 0);
    if (e != cudaSuccess) throw SystemError(what + ": " + cudaText(e));
    launch(what);
    settle(what, deadline);
    if ((e = cudaEventRecord(done_, stream_)) != cudaSuccess) throw SystemError(what + ": " + cudaText(e));
    for (unsigned spins = 0;; ++spins) {
      e = cudaEventQuery(done_);
      if (e == cudaSuccess) return -1;
      if (e != cudaErrorNotReady) fail(what, "CUDA error " + cudaText(e), false);
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress) check(st, what);
      if (Clock::now() > deadline)
        fail(what, "timed out after " + std::to_string(timeout.count()) + " ms; some rank did not take part or died", true);
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
      else sched_yield();
    }
  });
}

std::shared_ptr<Work> NcclProcessGroup::doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  if (auto why = unsupported(o.op, in.dtype); !why.empty()) notSupported(OpType::Allreduce, why);
  return run(OpType::Allreduce, in.count, in.device, o, [=](const std::string& what) {
    bool created;
    ncclRedOp_t op = redOp(o.op, in.dtype, &created);
    check(ncclAllReduce(in.data, out.data, in.count, ncclType(in.dtype), op, comm_, stream_), what);
    if (created) ncclRedOpDestroy(op, comm_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doBroadcast(Buffer buf, const BroadcastOptions& o) {
  return run(OpType::Broadcast, buf.count, buf.device, o, [=](const std::string& what) {
    check(ncclBroadcast(buf.data, buf.data, buf.count, ncclType(buf.dtype), o.root, comm_, stream_), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  if (auto why = unsupported(o.op, in.dtype); !why.empty()) notSupported(OpType::Reduce, why);
  return run(OpType::Reduce, in.count, in.device, o, [=](const std::string& what) {
    bool created;
    ncclRedOp_t op = redOp(o.op, in.dtype, &created);
    void* recv = rank() == o.root || out.data ? out.data : in.data;
    check(ncclReduce(in.data, recv, in.count, ncclType(in.dtype), op, o.root, comm_, stream_), what);
    if (created) ncclRedOpDestroy(op, comm_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  return run(OpType::Allgather, in.count, in.device, o, [=](const std::string& what) {
    check(ncclAllGather(in.data, out.data, in.count, ncclType(in.dtype), comm_, stream_), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                     const AllgatherOptions& o) {
  return run(OpType::Allgatherv, out.count, in.device, o, [=](const std::string& what) {
    // One broadcast per rank, fused into one launch.
    check(ncclGroupStart(), what);
    size_t off = 0;
    for (int r = 0; r < size(); ++r) {
      char* dst = at(out, off);
      const void* src = r == rank() ? in.data : dst;
      check(ncclBroadcast(src, dst, counts[static_cast<size_t>(r)], ncclType(in.dtype), r, comm_, stream_), what);
      off += counts[static_cast<size_t>(r)];
    }
    check(ncclGroupEnd(), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doReduceScatter(Buffer in, Buffer out, const ReduceScatterOptions& o) {
  if (auto why = unsupported(o.op, in.dtype); !why.empty()) notSupported(OpType::ReduceScatter, why);
  return run(OpType::ReduceScatter, in.count, in.device, o, [=](const std::string& what) {
    bool created;
    ncclRedOp_t op = redOp(o.op, in.dtype, &created);
    check(ncclReduceScatter(in.data, out.data, out.count, ncclType(in.dtype), op, comm_, stream_), what);
    if (created) ncclRedOpDestroy(op, comm_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doReduceScatterv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                         const ReduceScatterOptions& o) {
  if (auto why = unsupported(o.op, in.dtype); !why.empty()) notSupported(OpType::ReduceScatterv, why);
  return run(OpType::ReduceScatterv, in.count, in.device, o, [=](const std::string& what) {
    bool created;
    ncclRedOp_t op = redOp(o.op, in.dtype, &created);
    // One reduce per rank (rank r is the root of chunk r), fused into one launch.
    check(ncclGroupStart(), what);
    size_t off = 0;
    for (int r = 0; r < size(); ++r) {
      size_t c = counts[static_cast<size_t>(r)];
      void* recv = r == rank() ? out.data : at(in, off);
      check(ncclReduce(at(in, off), recv, c, ncclType(in.dtype), op, r, comm_, stream_), what);
      off += c;
    }
    check(ncclGroupEnd(), what);
    if (created) ncclRedOpDestroy(op, comm_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  std::vector<size_t> c(static_cast<size_t>(size()), in.count / static_cast<size_t>(size()));
  return doAlltoallv(in, c, out, c, o);
}

std::shared_ptr<Work> NcclProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts, Buffer out,
                                                    const std::vector<size_t>& recvCounts, const AlltoallOptions& o) {
  return run(OpType::Alltoallv, in.count, in.device, o, [=](const std::string& what) {
    const char* src = static_cast<const char*>(in.data);
    void* copy = nullptr;
    if (in.data == out.data && in.count) {  // in place: send from a copy
      cudaError_t e = cudaMallocAsync(&copy, in.bytes(), stream_);
      if (e == cudaSuccess) e = cudaMemcpyAsync(copy, in.data, in.bytes(), cudaMemcpyDeviceToDevice, stream_);
      if (e != cudaSuccess) throw SystemError(what + ": staging the in-place input: " + cudaText(e));
      src = static_cast<const char*>(copy);
    }
    ncclDataType_t t = ncclType(in.dtype);
    size_t es = dataTypeSize(in.dtype), so = 0, ro = 0;
    check(ncclGroupStart(), what);
    for (int r = 0; r < size(); ++r) {
      size_t sc = sendCounts[static_cast<size_t>(r)], rc = recvCounts[static_cast<size_t>(r)];
      if (sc) check(ncclSend(src + so * es, sc, t, r, comm_, stream_), what);
      if (rc) check(ncclRecv(at(out, ro), rc, t, r, comm_, stream_), what);
      so += sc;
      ro += rc;
    }
    check(ncclGroupEnd(), what);
    if (copy) cudaFreeAsync(copy, stream_);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  return run(OpType::Gather, in.count, in.device, o, [=](const std::string& what) {
    ncclDataType_t t = ncclType(in.dtype);
    size_t c = in.count;
    check(ncclGroupStart(), what);
    if (rank() == o.root) {
      for (int r = 0; r < size(); ++r) {
        char* dst = at(out, static_cast<size_t>(r) * c);
        if (r == rank()) {
          if (dst != in.data && c) cudaMemcpyAsync(dst, in.data, in.bytes(), cudaMemcpyDeviceToDevice, stream_);
        } else if (c) {
          check(ncclRecv(dst, c, t, r, comm_, stream_), what);
        }
      }
    } else if (c) {
      check(ncclSend(in.data, c, t, o.root, comm_, stream_), what);
    }
    check(ncclGroupEnd(), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  return run(OpType::Scatter, out.count, out.device, o, [=](const std::string& what) {
    ncclDataType_t t = ncclType(out.dtype);
    size_t c = out.count;
    check(ncclGroupStart(), what);
    if (rank() == o.root) {
      for (int r = 0; r < size(); ++r) {
        char* src = at(in, static_cast<size_t>(r) * c);
        if (r == rank()) {
          if (src != out.data && c) cudaMemcpyAsync(out.data, src, out.bytes(), cudaMemcpyDeviceToDevice, stream_);
        } else if (c) {
          check(ncclSend(src, c, t, r, comm_, stream_), what);
        }
      }
    } else if (c) {
      check(ncclRecv(out.data, c, t, o.root, comm_, stream_), what);
    }
    check(ncclGroupEnd(), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doBarrier(const BarrierOptions& o) {
  return run(OpType::Barrier, 0, Device{}, o, [=](const std::string& what) {
    check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  if (o.tag != 0) notSupported(OpType::Send, "tag " + std::to_string(o.tag) + " (NCCL matches point-to-point by order only; accepted: tag 0)");
  return run(OpType::Send, buf.count, buf.device, o, [=](const std::string& what) {
    check(ncclSend(buf.data, buf.count, ncclType(buf.dtype), dst, comm_, stream_), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  if (src == kAnySource) notSupported(OpType::Recv, "receiving from any source (NCCL needs the peer's rank)");
  if (o.tag != 0) notSupported(OpType::Recv, "tag " + std::to_string(o.tag) + " (NCCL matches point-to-point by order only; accepted: tag 0)");
  return run(OpType::Recv, buf.count, buf.device, o, [=](const std::string& what) {
    check(ncclRecv(buf.data, buf.count, ncclType(buf.dtype), src, comm_, stream_), what);
  });
}

std::shared_ptr<Work> NcclProcessGroup::doSendRecv(Buffer sb, int dst, Buffer rb, int src, const SendRecvOptions& o) {
  if (src == kAnySource) notSupported(OpType::SendRecv, "receiving from any source (NCCL needs the peer's rank)");
  if (o.sendTag != 0 || o.recvTag != 0)
    notSupported(OpType::SendRecv, "tags " + std::to_string(o.sendTag) + "/" + std::to_string(o.recvTag) +
                                       " (NCCL matches point-to-point by order only; accepted: tag 0)");
  if (!(sb.device == rb.device))
    throw InvalidArgument(context("sendrecv: the send buffer is on " + toString(sb.device) +
                                  " but the receive buffer on " + toString(rb.device) + "; accepted: one device"));
  // One NCCL group: the send does not wait for the peer's receive before
  // this rank's receive is posted.
  return run(OpType::SendRecv, rb.count, rb.device, o, [=](const std::string& what) {
    check(ncclGroupStart(), what);
    check(ncclSend(sb.data, sb.count, ncclType(sb.dtype), dst, comm_, stream_), what);
    check(ncclRecv(rb.data, rb.count, ncclType(rb.dtype), src, comm_, stream_), what);
    check(ncclGroupEnd(), what);
  });
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::doSplit(const std::vector<int>& ranks,
                                                        const ProcessGroupOptions& opts) {
  return splitAs<NcclProcessGroup>(ranks, opts, splits_++, store_);
}

ACCL_REGISTER_BACKEND(
    "nccl", NcclProcessGroup, [] { return "NCCL " + ncclVersionText() + " (CUDA buffers)"; },
    [](std::string* why) { return deviceCount(why) > 0; })

}  // namespace accl
