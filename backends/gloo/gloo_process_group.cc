#include "gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "accl/config.h"
#include "accl/internal/config_var.h"
#include "accl/internal/net.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/internal/work_pool.h"
#include "accl/logging.h"
#include "accl/trace.h"
#include "accl/registry.h"

namespace accl {

namespace {

// gloo's store interface over an accl::Store.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<accl::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto b = s_->get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    s_->wait(keys, t);
  }

 private:
  std::shared_ptr<accl::Store> s_;
};

template <size_t N>
struct Elem {
  uint8_t b[N];
};

// Calls f(Elem<size>{}) so that gloo's typed setters get the element size.
template <typename F>
void withElem(DataType t, F&& f) {
  switch (dataTypeSize(t)) {
    case 1: return f(Elem<1>{});
    case 2: return f(Elem<2>{});
    case 4: return f(Elem<4>{});
    case 8: return f(Elem<8>{});
  }
  throw Internal("unexpected element size");
}

template <typename E>
E* ptr(const Buffer& b) {
  return static_cast<E*>(b.data);
}

constexpr uint8_t kP2PSlotPrefix = 0x50;
char gZero[8];  // stands in for null pointers of empty buffers

void* dataOrDummy(const Buffer& b) { return b.data ? b.data : gZero; }

// Inside a catch block: the gloo failure being handled as an accl::Error.
// gloo reports a timeout and a lost peer alike as gloo::IoException (its
// timeout type is not in the gloo the distributions ship), so the kind comes
// from the type and the clock: an IoException once the op's deadline has
// passed is a Timeout, before it a RemoteError (the peer closed or failed).
// Other gloo exceptions are RemoteError; non-gloo ones keep their kind.
[[noreturn]] void rethrowAsAccl(const std::string& where, std::chrono::steady_clock::time_point deadline) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException&) {
    bool late = std::chrono::steady_clock::now() >= deadline;
    rethrowWithPrefix(where + ": ", late ? ErrorCode::Timeout : ErrorCode::RemoteError);
  } catch (const gloo::Exception&) {
    rethrowWithPrefix(where + ": ", ErrorCode::RemoteError);
  }
}

const config::Var<std::string> loopPolicyVar(
    "ACCL_GLOO_LOOP_POLICY", "gloo backend", config::oneOf({"batch", "inherit"}), "batch", nullptr,
    "Scheduling policy of the event-loop thread that gloo starts for each group. batch: SCHED_BATCH, with the "
    "weight (nice value) of the thread that creates the group, but a message that wakes the loop does not "
    "preempt the thread running on its core. gloo's loop polls a readable socket again at once while an op's "
    "caller holds that connection's lock; where the two share a core, a loop woken in the middle of the "
    "caller's send kept the caller, and the lock, off the core for the rest of its time slice (2 ranks on one "
    "core: 1.3-2.8 ms per allreduce of 8 B - 32 KiB, 0.15-0.42 ms with batch). inherit: the creating thread's policy, "
    "as gloo leaves it.");

// Runs fn with the calling thread's policy set to SCHED_BATCH where
// ACCL_GLOO_LOOP_POLICY says so, so that the threads fn starts (gloo's event
// loop: std::thread inherits its creator's policy) take it; the calling
// thread's own policy is restored whatever fn does.
template <class F>
auto withLoopPolicy(F&& fn) -> decltype(fn()) {
  struct Restore {
    bool set = false;
    int policy = SCHED_OTHER;
    sched_param param{};
    ~Restore() {
      if (set && sched_setscheduler(0, policy, &param) != 0)
        ACCL_WARN("INIT", "gloo: " << errnoMessage("restoring the thread's scheduling policy", errno));
    }
  } restore;
  // Only a thread of the ordinary policy is changed: a real-time or idle
  // caller's threads keep what it chose.
  if (loopPolicyVar.get() == "batch" && sched_getscheduler(0) == SCHED_OTHER &&
      sched_getparam(0, &restore.param) == 0) {
    sched_param p{};
    if (sched_setscheduler(0, SCHED_BATCH, &p) == 0)
      restore.set = true;
    else
      ACCL_INFO("INIT", "gloo: " << errnoMessage("SCHED_BATCH for the event loop", errno)
                                 << "; it keeps the creating thread's policy");
  }
  return fn();
}

std::shared_ptr<gloo::transport::Device> makeDevice() {
  const std::string& spec = Config::get().socketIfname;
  auto ifs = internal::selectInterfaces(spec);
  if (ifs.empty())
    throw InvalidArgument("accl gloo: no network interface matches ACCL_SOCKET_IFNAME='" + spec +
                          "'; accepted: prefixes of up interfaces with an address, ^ to exclude, = for exact names");
  gloo::transport::tcp::attr attr;
  attr.hostname = ifs[0].address;
  attr.ai_family = ifs[0].family;
  ACCL_INFO("NET", "gloo: using interface " << ifs[0].name << " (" << ifs[0].address << ")");
  return withLoopPolicy([&] { return gloo::transport::tcp::CreateDevice(attr); });
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& opts)
    : ProcessGroup(rank, size, "gloo", opts), store_(std::move(store)) {
  try {
    device_ = makeDevice();
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout());
    StoreAdapter adapter(store_);
    ctx->connectFullMesh(adapter, device_);
    context_ = ctx;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw RemoteError(context(std::string("connecting the group failed: ") + e.what()));
  }
  queue_.reset(new internal::OpQueue("accl-gloo", /*waiterRuns=*/true));
  p2pWaits_.reset(new WaitPool("accl-gloo-p2p"));
}

GlooProcessGroup::~GlooProcessGroup() {
  queue_.reset();
  p2pWaits_.reset();
}

std::shared_ptr<Work> GlooProcessGroup::enqueue(OpType op, size_t count, std::chrono::milliseconds timeout,
                                                bool blocking, std::function<int()> fn) {
  uint64_t seq = seq_++;
  ACCL_TRACE("COLL", "enqueue " << toString(op) << " #" << seq << " (" << count << " elements)");
  uint64_t traceId = issuingTraceId();
  // The op's Work, made where it is needed (see runOrEnqueueMade).
  auto makeWork = [&] { return internal::makeWork(toString(op), seq); };
  auto run = [this, op, count, fn = std::move(fn), timeout, traceId, seq]() -> int {
    if (traceId) recorder()->started(traceId, static_cast<int64_t>(seq), "gloo", "tcp");
    // gloo's deadline starts when the op does (its timeout is relative).
    auto deadline = std::chrono::steady_clock::now() + timeout;
    struct Trim {
      internal::KeptBuffer& b;
      ~Trim() { b.trim(); }
    } trim{scratch_};
    try {
      return fn();
    } catch (...) {
      rethrowAsAccl(context(std::string(toString(op)) + " #" + std::to_string(seq) + " (" + std::to_string(count) +
                            " elements)"),
                    deadline);
    }
  };
  // A caller that waits at once runs the op itself when the group is idle (no
  // thread hand-off), as does a thread that waits on the op next in line.
  if (blocking) return queue_->runOrEnqueueMade(makeWork, [&] { return run(); }, [&] { return std::move(run); });
  return queue_->enqueue(makeWork(), std::move(run));
}

void GlooProcessGroup::allreduceInPlace(Buffer buf, const ReduceOp& op, std::chrono::milliseconds timeout) {
  if (buf.count == 0) return;
  if (op.kind == ReduceKind::PremulSum) internal::scale(buf.data, buf.count, buf.dtype, op.scalar);
  if (size() > 1) {
    gloo::AllreduceOptions opts(context_);
    opts.setTimeout(timeout);
    DataType t = buf.dtype;
    ReduceKind k = internal::elementwiseKind(op.kind);
    opts.setReduceFunction([t, k](void* c, const void* a, const void* b, size_t n) {
      internal::reduce(c, a, b, n, t, k);
    });
    withElem(buf.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setOutput(ptr<E>(buf), buf.count);
    });
    gloo::allreduce(opts);
  }
  if (op.kind == ReduceKind::Avg) internal::scale(buf.data, buf.count, buf.dtype, 1.0 / size());
}

std::shared_ptr<Work> GlooProcessGroup::doAllreduce(Buffer in, Buffer out, const AllreduceOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Allreduce, in.count, timeout, o.blocking, [=] {
    if (in.data != out.data && in.count) std::memcpy(out.data, in.data, in.bytes());
    allreduceInPlace(out, o.op, timeout);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doBroadcast(Buffer buf, const BroadcastOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Broadcast, buf.count, timeout, o.blocking, [=] {
    if (buf.count == 0 || size() == 1) return -1;
    gloo::BroadcastOptions opts(context_);
    opts.setTimeout(timeout);
    opts.setRoot(o.root);
    withElem(buf.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setOutput(ptr<E>(buf), buf.count);
    });
    gloo::broadcast(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doReduce(Buffer in, Buffer out, const ReduceOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Reduce, in.count, timeout, o.blocking, [=] {
    if (in.count == 0) return -1;
    // gloo reduces in place and uses the buffer as scratch on every rank.
    Buffer work(scratch_.copyOf(in.data, in.bytes()), in.count, in.dtype);
    if (o.op.kind == ReduceKind::PremulSum) internal::scale(work.data, work.count, work.dtype, o.op.scalar);
    if (size() > 1) {
      gloo::ReduceOptions opts(context_);
      opts.setTimeout(timeout);
      opts.setRoot(o.root);
      DataType t = in.dtype;
      ReduceKind k = internal::elementwiseKind(o.op.kind);
      opts.setReduceFunction([t, k](void* c, const void* a, const void* b, size_t n) {
        internal::reduce(c, a, b, n, t, k);
      });
      withElem(in.dtype, [&](auto e) {
        using E = decltype(e);
        opts.setOutput(ptr<E>(work), work.count);
      });
      gloo::reduce(opts);
    }
    if (rank() == o.root) {
      if (o.op.kind == ReduceKind::Avg) internal::scale(work.data, work.count, work.dtype, 1.0 / size());
      std::memcpy(out.data, work.data, work.bytes());
    }
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doAllgather(Buffer in, Buffer out, const AllgatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Allgather, in.count, timeout, o.blocking, [=] {
    if (in.count == 0) return -1;
    Buffer mine = out.slice(static_cast<size_t>(rank()) * in.count, in.count);
    if (mine.data != in.data) std::memcpy(mine.data, in.data, in.bytes());
    if (size() == 1) return -1;
    gloo::AllgatherOptions opts(context_);
    opts.setTimeout(timeout);
    withElem(in.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setOutput(ptr<E>(out), out.count);  // in place: own chunk already there
    });
    gloo::allgather(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doAllgatherv(Buffer in, Buffer out, const std::vector<size_t>& counts,
                                                     const AllgatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Allgatherv, out.count, timeout, o.blocking, [=] {
    if (out.count == 0) return -1;
    if (size() == 1) {
      if (in.count && in.data != out.data) std::memcpy(out.data, in.data, in.bytes());
      return -1;
    }
    gloo::AllgathervOptions opts(context_);
    opts.setTimeout(timeout);
    withElem(in.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setInput(static_cast<E*>(dataOrDummy(in)), in.count);
      opts.setOutput(static_cast<E*>(out.data), counts);
    });
    gloo::allgatherv(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doReduceScatterv(Buffer in, Buffer out,
                                                         const std::vector<size_t>& counts,
                                                         const ReduceScatterOptions& o) {
  // gloo has no reduce-scatter for arbitrary types: allreduce a copy, keep our chunk.
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::ReduceScatterv, in.count, timeout, o.blocking, [=] {
    if (in.count == 0) return -1;
    Buffer all(scratch_.copyOf(in.data, in.bytes()), in.count, in.dtype);
    allreduceInPlace(all, o.op, timeout);
    size_t offset = std::accumulate(counts.begin(), counts.begin() + rank(), size_t{0});
    if (out.count) std::memcpy(out.data, all.slice(offset, out.count).data, out.bytes());
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doAlltoall(Buffer in, Buffer out, const AlltoallOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Alltoall, in.count, timeout, o.blocking, [=] {
    if (in.count == 0) return -1;
    Buffer src = in;
    if (in.overlaps(out)) src.data = scratch_.copyOf(in.data, in.bytes());  // in place: gloo needs distinct buffers
    if (size() == 1) {
      std::memcpy(out.data, src.data, in.bytes());
      return -1;
    }
    gloo::AlltoallOptions opts(context_);
    opts.setTimeout(timeout);
    withElem(in.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setInput(ptr<E>(src), src.count);
      opts.setOutput(ptr<E>(out), out.count);
    });
    gloo::alltoall(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doAlltoallv(Buffer in, const std::vector<size_t>& sendCounts,
                                                    Buffer out, const std::vector<size_t>& recvCounts,
                                                    const AlltoallOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Alltoallv, in.count, timeout, o.blocking, [=] {
    if (size() == 1) {
      if (in.count) std::memmove(out.data, in.data, in.bytes());
      return -1;
    }
    Buffer src = in;
    // In place: gloo writes the output while it still reads the input.
    if (in.overlaps(out)) src.data = scratch_.copyOf(in.data, in.bytes());
    gloo::AlltoallvOptions opts(context_);
    opts.setTimeout(timeout);
    withElem(in.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setInput(static_cast<E*>(dataOrDummy(src)), std::vector<int64_t>(sendCounts.begin(), sendCounts.end()));
      opts.setOutput(static_cast<E*>(dataOrDummy(out)), std::vector<int64_t>(recvCounts.begin(), recvCounts.end()));
    });
    gloo::alltoallv(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doGather(Buffer in, Buffer out, const GatherOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Gather, in.count, timeout, o.blocking, [=] {
    if (in.count == 0) return -1;
    if (size() == 1) {
      std::memcpy(out.data, in.data, in.bytes());
      return -1;
    }
    gloo::GatherOptions opts(context_);
    opts.setTimeout(timeout);
    opts.setRoot(o.root);
    withElem(in.dtype, [&](auto e) {
      using E = decltype(e);
      opts.setInput(ptr<E>(in), in.count);
      if (rank() == o.root) opts.setOutput(ptr<E>(out), out.count);
    });
    gloo::gather(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doScatter(Buffer in, Buffer out, const ScatterOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Scatter, out.count, timeout, o.blocking, [=] {
    if (out.count == 0) return -1;
    if (size() == 1) {
      std::memcpy(out.data, in.data, out.bytes());
      return -1;
    }
    gloo::ScatterOptions opts(context_);
    opts.setTimeout(timeout);
    opts.setRoot(o.root);
    withElem(out.dtype, [&](auto e) {
      using E = decltype(e);
      if (rank() == o.root) {
        std::vector<E*> ptrs;
        for (int r = 0; r < size(); ++r)
          ptrs.push_back(static_cast<E*>(in.slice(static_cast<size_t>(r) * out.count, out.count).data));
        opts.setInputs(ptrs, out.count);
      }
      opts.setOutput(ptr<E>(out), out.count);
    });
    gloo::scatter(opts);
    return -1;
  });
}

std::shared_ptr<Work> GlooProcessGroup::doBarrier(const BarrierOptions& o) {
  auto timeout = effectiveTimeout(o);
  return enqueue(OpType::Barrier, 0, timeout, o.blocking, [=] {
    if (size() == 1) return -1;
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
    return -1;
  });
}

// Point-to-point ops are posted at once (a send must not wait for earlier
// collectives, or send/recv pairs issued on both sides would deadlock); each
// one's completion is awaited by the thread that waits for it, or else on a
// pool thread of its own (wait_pool.h says why not in order on one thread).
std::shared_ptr<Work> GlooProcessGroup::doSend(Buffer buf, int dst, const SendOptions& o) {
  auto timeout = effectiveTimeout(o);
  // gloo refuses empty unbound buffers: back them with one byte, move none.
  std::shared_ptr<gloo::transport::UnboundBuffer> ub(
      context_->createUnboundBuffer(dataOrDummy(buf), std::max<size_t>(buf.bytes(), 1)).release());
  ub->send(dst, gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(o.tag)), 0, buf.bytes());
  std::string where = context("send to rank " + std::to_string(dst) + " tag " + std::to_string(o.tag) +
                              " (" + std::to_string(buf.count) + " elements)");
  auto work = internal::makeWork(where);
  p2pWaits_->submit(work, [ub, timeout, where]() -> int {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    try {
      ub->waitSend(timeout);
    } catch (...) {
      rethrowAsAccl(where, deadline);
    }
    return -1;
  });
  return work;
}

std::shared_ptr<Work> GlooProcessGroup::doRecv(Buffer buf, int src, const RecvOptions& o) {
  auto timeout = effectiveTimeout(o);
  std::shared_ptr<gloo::transport::UnboundBuffer> ub(
      context_->createUnboundBuffer(dataOrDummy(buf), std::max<size_t>(buf.bytes(), 1)).release());
  auto slot = gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(o.tag));
  if (src == kAnySource) {
    std::vector<int> srcs;
    for (int r = 0; r < size(); ++r)
      if (r != rank()) srcs.push_back(r);
    ub->recv(srcs, slot, 0, buf.bytes());
  } else {
    ub->recv(src, slot, 0, buf.bytes());
  }
  std::string where = context("recv from " + (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) +
                              " tag " + std::to_string(o.tag) + " (" + std::to_string(buf.count) + " elements)");
  auto work = internal::makeWork(where);
  p2pWaits_->submit(work, [ub, timeout, where]() -> int {
    int from = -1;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    try {
      ub->waitRecv(&from, timeout);
    } catch (...) {
      rethrowAsAccl(where, deadline);
    }
    return from;
  });
  return work;
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::doSplit(const std::vector<int>& ranks,
                                                        const ProcessGroupOptions& opts) {
  return splitAs<GlooProcessGroup>(ranks, opts, splits_++, store_);
}

ACCL_REGISTER_BACKEND("gloo", GlooProcessGroup, [] {
  return "gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) +
         " over TCP (CPU buffers)";
})

}  // namespace accl
