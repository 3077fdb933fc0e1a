#include "process_group_accl.h"

#include <Python.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/diag_responder.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"
#include "accl/registry.h"

namespace torch_accl {

namespace {

// torch dtype -> ACCL dtype, and how many ACCL elements one torch element is
// (complex numbers travel as pairs of reals).
struct Mapped {
  accl::DataType dtype;
  int64_t factor = 1;
  bool complex = false;
};

[[noreturn]] void refuseDtype(const at::Tensor& t, const char* what) {
  throw accl::InvalidArgument(std::string(what) + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                              ", which ACCL does not carry; accepted: int8, uint8, int32, int64, "
                              "float16, bfloat16, float32, float64, bool, complex64, complex128"
#if ACCL_TORCH_HAS_UINT32
                              ", uint32, uint64"
#endif
  );
}

Mapped mapDtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kChar: return {accl::DataType::Int8};
    case at::kByte: return {accl::DataType::Uint8};
    case at::kInt: return {accl::DataType::Int32};
    case at::kLong: return {accl::DataType::Int64};
    case at::kHalf: return {accl::DataType::Float16};
    case at::kBFloat16: return {accl::DataType::BFloat16};
    case at::kFloat: return {accl::DataType::Float32};
    case at::kDouble: return {accl::DataType::Float64};
    case at::kBool: return {accl::DataType::Bool};
    case at::kComplexFloat: return {accl::DataType::Float32, 2, true};
    case at::kComplexDouble: return {accl::DataType::Float64, 2, true};
#if ACCL_TORCH_HAS_UINT32
    case at::kUInt32: return {accl::DataType::Uint32};
    case at::kUInt64: return {accl::DataType::Uint64};
#endif
    default: refuseDtype(t, what);
  }
}

accl::ReduceOp mapReduce(const c10d::ReduceOp& op, const at::Tensor& t) {
  using R = c10d::ReduceOp;
  bool complex = t.is_complex();
  auto kind = static_cast<R::RedOpType>(op);
  if (complex && kind != R::SUM && kind != R::AVG && kind != R::PREMUL_SUM)
    throw accl::InvalidArgument("reduce op " + std::to_string(static_cast<int>(kind)) +
                                " is not defined for complex tensors; accepted: SUM, AVG, PREMUL_SUM");
  switch (kind) {
    case R::SUM: return accl::ReduceKind::Sum;
    case R::AVG: return accl::ReduceKind::Avg;
    case R::PRODUCT: return accl::ReduceKind::Prod;
    case R::MIN: return accl::ReduceKind::Min;
    case R::MAX: return accl::ReduceKind::Max;
    case R::BAND: return accl::ReduceKind::BAnd;
    case R::BOR: return accl::ReduceKind::BOr;
    case R::BXOR: return accl::ReduceKind::BXor;
    case R::PREMUL_SUM: {
      // torch keeps the factor in a supplement (a double or a one-element tensor).
      bool found = false;
      double f = compat::preMulSumFactor(op, &found);
      if (!found) throw accl::InvalidArgument("PREMUL_SUM without a factor");
      return accl::ReduceOp::premulSum(f);
    }
    default:
      throw accl::InvalidArgument("unknown reduce op " + std::to_string(static_cast<int>(kind)) +
                                  "; accepted: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM");
  }
}

// Tensors the SDK backend can use in place, and staging copies for the rest
// (non-contiguous tensors; device tensors the backend cannot address), copied
// back into the caller's tensors when the op completes.
class Staging {
 public:
  explicit Staging(const accl::ProcessGroup& pg) : pg_(pg) {}

  accl::Device deviceOf(const at::Tensor& t) const {
    if (t.is_cuda()) return accl::Device::cuda(t.device().index());
    return accl::Device::cpu();
  }
  // `out`: the op writes the tensor (copy back after completion).
  accl::Buffer buffer(const at::Tensor& t, bool out, const char* what) {
    auto m = mapDtype(t, what);
    at::Tensor use = t;
    bool direct = t.is_contiguous() && pg_.supportsDevice(deviceOf(t));
    if (!direct) {
      use = pg_.supportsDevice(deviceOf(t)) ? t.contiguous() : toHost(t);
      if (use.data_ptr() == t.data_ptr()) use = use.clone();
      if (out) back_.emplace_back(t, use);
    }
    keep_.push_back(use);
    return accl::Buffer(use.data_ptr(), static_cast<size_t>(use.numel() * m.factor), m.dtype,
                        direct ? deviceOf(t) : accl::Device::cpu());
  }
  // A new contiguous buffer of `numel` elements like `like` (for lists the op
  // needs flat), on a device the backend addresses.
  at::Tensor flat(const at::Tensor& like, int64_t numel) {
    auto opts = like.options();
    if (!pg_.supportsDevice(deviceOf(like))) opts = opts.device(at::kCPU).pinned_memory(like.is_cuda());
    at::Tensor f = at::empty({numel}, opts);
    keep_.push_back(f);
    return f;
  }
  accl::Buffer bufferOfFlat(const at::Tensor& f, const char* what) {
    auto m = mapDtype(f, what);
    return accl::Buffer(f.data_ptr(), static_cast<size_t>(f.numel() * m.factor), m.dtype, deviceOf(f));
  }
  // A contiguous host copy of `t`. A device tensor is copied into page-locked
  // memory from torch's caching host allocator (reused across ops, as for
  // torch's own pinned tensors): the DMA engine copies it at the link's rate
  // both ways, where pageable memory goes through the driver's bounce buffer
  // at a fraction of it. The copies run on the current stream and return
  // once done (non_blocking false), as the collective reads the host copy
  // at once and the caller's tensor holds the result when the op completes.
  static at::Tensor toHost(const at::Tensor& t) {
    if (!t.is_cuda()) return t.contiguous();
    at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    h.copy_(t);
    return h;
  }
  // Work after completion: copy staged outputs back (on the completing
  // thread, under the stream and grad mode AcclWork::onDone sets).
  void copyBack() {
    for (auto& p : back_) p.first.copy_(p.second.view(p.first.sizes()));
  }

 private:
  const accl::ProcessGroup& pg_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;
  std::vector<at::Tensor> keep_;
};

void requireOne(const std::vector<at::Tensor>& ts, const char* op) {
  if (ts.size() != 1)
    throw accl::InvalidArgument(std::string(op) + ": expected one tensor per process, got " +
                                std::to_string(ts.size()));
}

void requireSameKind(const at::Tensor& a, const at::Tensor& b, const char* op) {
  if (a.scalar_type() != b.scalar_type())
    throw accl::InvalidArgument(std::string(op) + ": tensors have different dtypes (" +
                                std::string(c10::toString(a.scalar_type())) + " and " +
                                std::string(c10::toString(b.scalar_type())) + ")");
}

#if ACCL_TORCH_HAS_COALESCING
// Lists of the *_tensor_coalesced ops: pair i has one dtype, and the larger
// side (outputs of an allgather, inputs of a reduce-scatter) holds group size
// times the other's elements.
void requireGroupSizedPairs(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                            bool outputsLarger, int size, const char* op) {
  if (outputs.size() != inputs.size())
    throw accl::InvalidArgument(std::string(op) + ": " + std::to_string(inputs.size()) + " inputs but " +
                                std::to_string(outputs.size()) + " outputs");
  const auto& big = outputsLarger ? outputs : inputs;
  const auto& small = outputsLarger ? inputs : outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireSameKind(inputs[i], outputs[i], op);
    if (big[i].numel() != small[i].numel() * size)
      throw accl::InvalidArgument(std::string(op) + ": " + (outputsLarger ? "output " : "input ") +
                                  std::to_string(i) + " has " + std::to_string(big[i].numel()) +
                                  " elements, expected " + std::to_string(small[i].numel() * size) + " (" +
                                  (outputsLarger ? "input" : "output") + " elements x group size)");
  }
}
#endif

// Lists of tensors travel as one flat buffer, in list order.
void pack(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t at = 0;
  for (auto& t : ts) {
    flat.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
    at += t.numel();
  }
}
void unpack(const at::Tensor& flat, std::vector<at::Tensor>& ts) {
  int64_t at = 0;
  for (auto& t : ts) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

int64_t elementsPerRow(const at::Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
}

// ACCL's error as the exception torch users catch, with ACCL's message: bad
// arguments are RuntimeError, failures of the communication DistBackendError
// (where torch has it). Anything else passes unchanged.
std::exception_ptr toTorchError(std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const accl::InvalidArgument& e) {
    return compat::torchError(e.what(), false);
  } catch (const accl::NotSupported& e) {
    return compat::torchError(e.what(), false);
  } catch (const accl::Error& e) {
    return compat::torchError(e.what(), true);
  } catch (const c10::Error&) {
    return err;
  } catch (const std::exception& e) {
    return compat::torchError(e.what(), false);
  } catch (...) {
    return err;
  }
}

// Runs `f`; ACCL's errors leave it as toTorchError says.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const accl::Error&) {
    std::rethrow_exception(toTorchError(std::current_exception()));
  }
}

// "accl:all_reduce": the name torch.profiler shows, with torch.distributed's
// op names (as torch's gloo shows "gloo:all_reduce").
const char* profilingTitle(c10d::OpType type) {
  using T = c10d::OpType;
  switch (type) {
    case T::BROADCAST: return "accl:broadcast";
    case T::ALLREDUCE: return "accl:all_reduce";
    case T::ALLREDUCE_COALESCED: return "accl:all_reduce_coalesced";
    case T::REDUCE: return "accl:reduce";
    case T::ALLGATHER: return "accl:all_gather";
    case T::_ALLGATHER_BASE: return "accl:all_gather_into_tensor";
    case T::ALLGATHER_COALESCED: return "accl:all_gather_coalesced";
    case T::GATHER: return "accl:gather";
    case T::SCATTER: return "accl:scatter";
    case T::REDUCE_SCATTER: return "accl:reduce_scatter";
    case T::_REDUCE_SCATTER_BASE: return "accl:reduce_scatter_tensor";
    case T::ALLTOALL_BASE: return "accl:all_to_all_single";
    case T::ALLTOALL: return "accl:all_to_all";
    case T::SEND: return "accl:send";
    case T::RECV: return "accl:recv";
    case T::RECVANYSOURCE: return "accl:recv_any_source";
    case T::BARRIER: return "accl:barrier";
#if ACCL_TORCH_HAS_COALESCING
    case T::COALESCED: return "accl:coalesced";
#endif
    default: return "accl:op";
  }
}

}  // namespace

// ---------------------------------------------------------------- completions

namespace {

// The threads that complete accl ops (a group's worker, a transport's thread)
// hold a torch Work, and through it tensors that may own Python objects,
// until their callback returns. Letting go of the last such tensor takes the
// GIL, and a thread that takes the GIL while the interpreter shuts down is
// ended by Python in the middle of a destructor: std::terminate. So at exit
// (prepareExit, from an atexit hook) completions stop touching torch objects
// and the ones under way are waited for, with the GIL released.
struct Completions {
  std::atomic<int> active{0};
  std::atomic<bool> exiting{false};
  std::mutex mu;
  std::condition_variable cv;
};

Completions& completions() {
  static Completions* c = new Completions;  // never destroyed: used while the process exits
  return *c;
}

// Runs body(work) for a completion callback that holds `self`, then lets go of
// `self` here, before the callback object is destroyed by whoever ran it. Once
// the process is exiting, neither: the Work and its tensors are left to the
// end of the process (as torch leaves Python objects it can no longer free).
template <typename F>
void completeHolding(c10::intrusive_ptr<AcclWork>& self, F&& body) {
  Completions& c = completions();
  c.active.fetch_add(1);
  auto me = std::move(self);
  if (!c.exiting.load()) {
    body(*me);
    me.reset();
  } else {
    (void)me.release();
  }
  if (c.active.fetch_sub(1) == 1 && c.exiting.load()) {
    std::lock_guard<std::mutex> lk(c.mu);
    c.cv.notify_all();
  }
}

}  // namespace

void prepareExit(std::chrono::milliseconds wait) {
  Completions& c = completions();
  c.exiting.store(true);
  std::unique_lock<std::mutex> lk(c.mu);
  c.cv.wait_for(lk, wait, [&] { return c.active.load() == 0; });
}

// ---------------------------------------------------------------- Work

AcclWork::AcclWork(int rank, c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
                   std::vector<at::Tensor> outputs, c10::optional<c10::Stream> stream)
    : c10d::Work(rank, type, title, inputs), outputs_(std::move(outputs)), stream_(stream) {}

AcclWork::~AcclWork() = default;

void AcclWork::start(std::vector<std::shared_ptr<accl::Work>> works, std::function<void()> finish) {
  finish_ = std::move(finish);
  // Ops that completed as they were issued (a blocking or small op run on
  // this thread: the common case) finish this Work here, as their callbacks
  // would at once, without registering any.
  bool allDone = true;
  for (auto& w : works) allDone = allDone && w->isCompleted();
  if (allDone) {
    std::exception_ptr err;
    int src = -1;
    for (auto& w : works) {
      if (!err) err = w->exception();
      if (w->sourceRank() >= 0) src = w->sourceRank();
    }
    onDone(err, src);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    works_ = works;
  }
  // The last accl op to complete finishes the torch op, on the thread that
  // completes it. The accl ops hold this Work (through their callbacks) until
  // then, not the other way round.
  struct Shared {
    std::atomic<size_t> left;
    std::mutex mu;
    std::exception_ptr err;
    int src = -1;
  };
  auto sh = std::make_shared<Shared>();
  sh->left = works.size();
  auto self = c10::intrusive_ptr<AcclWork>::unsafe_reclaim_from_nonowning(this);
  for (auto& w : works)
    w->onComplete([self, sh](accl::Work& done) mutable {
      completeHolding(self, [&](AcclWork& me) {
        {
          std::lock_guard<std::mutex> lk(sh->mu);
          if (!sh->err) sh->err = done.exception();
          if (done.sourceRank() >= 0) sh->src = done.sourceRank();
        }
        if (--sh->left == 0) me.onDone(sh->err, sh->src);
      });
    });
}

#if ACCL_TORCH_HAS_COALESCING
void AcclWork::startAfter(const std::vector<c10::intrusive_ptr<AcclWork>>& parts) {
  if (parts.empty()) {
    onDone(nullptr, -1);
    return;
  }
  struct Shared {
    std::atomic<size_t> left;
    std::mutex mu;
    std::exception_ptr err;
  };
  auto sh = std::make_shared<Shared>();
  sh->left = parts.size();
  auto self = c10::intrusive_ptr<AcclWork>::unsafe_reclaim_from_nonowning(this);
  for (auto& p : parts)
    p->getFuture()->addCallback([self, sh](c10::ivalue::Future& f) mutable {
      completeHolding(self, [&](AcclWork& me) {
        if (f.hasError()) {
          std::lock_guard<std::mutex> lk(sh->mu);
          if (!sh->err) sh->err = f.exception_ptr();
        }
        if (--sh->left == 0) me.onDone(sh->err, -1);
      });
    });
}
#endif

void AcclWork::onDone(std::exception_ptr err, int src) {
  // Staged results go back on the stream that was current when the op was
  // issued (this thread's own would be the default stream), without autograd
  // (outputs may be leaves that require grad).
  c10::OptionalStreamGuard onUserStream(stream_);
  at::NoGradGuard noGrad;
  if (!err && finish_) {
    try {
      finish_();
    } catch (...) {
      err = std::current_exception();
    }
  }
  finish_ = nullptr;  // releases the staged tensors
  if (err) err = toTorchError(err);
  if (recordFunctionEndCallback_) {  // the profiler's record of this op ends here
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = err;
    source_ = src;
    done_ = true;
    works_.clear();  // their callbacks hold this Work: no cycle once done
    future = future_;  // made before this point: completed here; after: where it is made
  }
  cv_.notify_all();
  if (future) completeFuture(*future, err);
}

void AcclWork::completeFuture(c10::ivalue::Future& f, const std::exception_ptr& err) {
  // Outside mu_: the future runs its callbacks here, which may call this Work.
  if (err) f.setError(err);
  else f.markCompleted(c10::IValue(outputs_));
}

bool AcclWork::isCompleted() {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}
bool AcclWork::isSuccess() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ && !error_;
}
std::exception_ptr AcclWork::exception() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}
int AcclWork::sourceRank() const {
  std::lock_guard<std::mutex> lk(mu_);
  return source_;
}
std::vector<at::Tensor> AcclWork::result() { return outputs_; }

void AcclWork::runHere() {
  std::vector<std::shared_ptr<accl::Work>> works;
  {
    std::lock_guard<std::mutex> lk(mu_);
    works = works_;
  }
  for (auto& w : works) {
    try {
      w->wait();
    } catch (...) {  // the error reaches this Work through onDone
    }
  }
}

bool AcclWork::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) runHere();
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout.count() > 0) {
    if (!cv_.wait_for(lk, timeout, [&] { return done_; }))
      TORCH_CHECK(false, "accl: wait() timed out after ", timeout.count(),
                  " ms (the op keeps running until its own deadline)");
  } else {
    cv_.wait(lk, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void AcclWork::abort() { TORCH_CHECK(false, "accl: aborting a single op is not supported"); }

c10::intrusive_ptr<c10::ivalue::Future> AcclWork::getFuture() {
  // Made on the first call, not with every op (most ops are waited on and
  // never asked for one). Exactly one side completes it: onDone, when the
  // future existed as the op finished; else the call that makes it.
  c10::intrusive_ptr<c10::ivalue::Future> f;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (future_) return future_;
    // A future of device tensors knows their device, so that then() callbacks
    // and wait() on it are ordered after the copy back on the user's stream.
    std::vector<c10::Device> devices;
    if (stream_) devices.push_back(stream_->device());
    static const c10::TypePtr kTensorList = c10::ListType::create(c10::TensorType::get());
    future_ = c10::make_intrusive<c10::ivalue::Future>(kTensorList, devices);
    if (!done_) return future_;
    f = future_;
    err = error_;
  }
  completeFuture(*f, err);
  return f;
}

// ---------------------------------------------------------------- store

void TorchStore::set(const std::string& key, const accl::Bytes& value) { s_->set(key, value); }
accl::Bytes TorchStore::get(const std::string& key) { return s_->get(key); }
int64_t TorchStore::add(const std::string& key, int64_t delta) { return s_->add(key, delta); }
accl::Bytes TorchStore::compareSet(const std::string& key, const accl::Bytes& expected, const accl::Bytes& desired) {
  return s_->compareSet(key, expected, desired);
}
bool TorchStore::check(const std::vector<std::string>& keys) { return s_->check(keys); }
void TorchStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    s_->wait(keys, timeout);
  } catch (const std::exception& e) {
    throw accl::Timeout("store wait for " + accl::internal::join(keys, ", ") + " failed: " + e.what());
  }
}
bool TorchStore::deleteKey(const std::string& key) { return s_->deleteKey(key); }
int64_t TorchStore::numKeys() { return s_->getNumKeys(); }

// ---------------------------------------------------------------- group

ProcessGroupACCL::ProcessGroupACCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::vector<int64_t> globalRanks,
                                   std::string groupName)
    : C10dBase(rank, size), globalRanks_(std::move(globalRanks)), timeout_(timeout) {
  guarded([&] {
    accl::ProcessGroupOptions o;
    o.timeout = timeout;
    o.name = groupName.empty() ? "torch" : "torch:" + groupName;
    auto st = std::make_shared<TorchStore>(store);
    st->setTimeout(timeout);
    store_ = st;
    pg_ = accl::createProcessGroup(accl::Config::get().torchBackend, st, rank, size, o);
    watchForDiag(store);
    return 0;
  });
}

namespace {
// torch's TCPStore under a group's store (its prefixes peeled), or null: the
// store of the job's MASTER_ADDR:MASTER_PORT, which accl-diag can reach.
c10::intrusive_ptr<c10d::Store> tcpStoreUnder(c10::intrusive_ptr<c10d::Store> s) {
  while (auto* p = dynamic_cast<c10d::PrefixStore*>(s.get())) s = p->getUnderlyingStore();
  if (dynamic_cast<c10d::TCPStore*>(s.get())) return s;
  return {};
}
}  // namespace

void ProcessGroupACCL::watchForDiag(const c10::intrusive_ptr<c10d::Store>& store) {
  // One watch per process, by its first group: every group of a torch job
  // shares the store's root, and a process's answer holds all its groups. A
  // C++ TCPStore only (safe from another thread, no GIL): not stores written
  // in Python.
  static std::atomic<bool> watching{false};
  if (watching.load()) return;
  auto base = tcpStoreUnder(store);
  if (!base || watching.exchange(true)) return;
  auto st = std::make_shared<TorchStore>(base);
  st->setTimeout(std::chrono::seconds(30));
  diagStore_ = st;
  accl::internal::watchForeignStoreForDiagRequests(
      st, pg_, globalRanks_.empty() ? getRank() : static_cast<int>(globalRanks_[static_cast<size_t>(getRank())]),
      "torch's TCPStore");
}

ProcessGroupACCL::~ProcessGroupACCL() {
  // torch lets go of a group from Python, holding the GIL. The ops still
  // queued finish here, and the threads that complete them may need the GIL
  // to let go of tensors: hold it meanwhile and that is a deadlock.
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
  cudaPg_.reset();
  pg_.reset();
  if (saved) PyEval_RestoreThread(saved);
}

c10::intrusive_ptr<C10dBase> ProcessGroupACCL::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupACCL>(store, rank, size, timeout);
}

// ---------------------------------------------------------------- CUDA tensors

void ProcessGroupACCL::decideCuda() {
  if (cudaDecided_) return;
  cudaDecided_ = true;
  if (pg_->supportsDevice(accl::Device::cuda(0))) {
    cudaPath_ = "direct";
    cudaWhy_ = "ACCL's " + pg_->backendName() + " backend addresses device memory";
    return;
  }
  const std::string& mode = accl::Config::get().torchCuda;
  if (mode == "stage") {
    cudaPath_ = "stage";
    cudaWhy_ = "ACCL_TORCH_CUDA=stage";
    return;
  }
  std::string reason = "ACCL was built without it";
  for (auto& b : accl::listBackends()) {
    if (b.name != "nccl") continue;
    if (b.usable) {
      cudaPath_ = "nccl";
      cudaWhy_ = "ACCL's nccl backend is usable";
      return;
    }
    reason = b.reason;
  }
  if (mode == "nccl")
    throw accl::NotSupported("ACCL_TORCH_CUDA=nccl, but ACCL's nccl backend is not usable here: " + reason +
                             "; accepted here: ACCL_TORCH_CUDA=stage (device tensors copied through host "
                             "memory) or auto");
  cudaPath_ = "stage";
  cudaWhy_ = "ACCL's nccl backend is not usable here: " + reason;
}

std::string ProcessGroupACCL::cudaPath() {
  std::lock_guard<std::mutex> lk(cudaMu_);
  decideCuda();
  return cudaPath_ + " (" + cudaWhy_ + ")";
}

void ProcessGroupACCL::sdkAllreduce(const at::Tensor& t, bool runInline) {
  TORCH_CHECK(t.is_cpu() && t.is_contiguous() && t.scalar_type() == at::kFloat,
              "sdk_all_reduce: a contiguous CPU float32 tensor is accepted, got ", t.toString());
  guarded([&] {
    accl::AllreduceOptions o;
    o.blocking = runInline;
    pg_->allreduce(accl::Buffer(t.data_ptr(), static_cast<size_t>(t.numel()), accl::DataType::Float32), o)->wait();
    return 0;
  });
}

ProcessGroupACCL::Route ProcessGroupACCL::route(const std::vector<at::Tensor>& tensors) {
  const at::Tensor* dev = nullptr;
  for (auto& t : tensors)
    if (t.defined() && !t.is_cpu()) {
      dev = &t;
      break;
    }
  if (!dev) return {pg_.get(), nullptr, c10::nullopt};
  // The stream current for the tensor's device now: the op is ordered after
  // it, and staged results are copied back on it.
  c10::impl::VirtualGuardImpl impl(dev->device().type());
  c10::Stream user = impl.getStream(dev->device());
  std::lock_guard<std::mutex> lk(cudaMu_);
  decideCuda();
  if (cudaPath_ == "direct") return {pg_.get(), compat::nativeStream(user), user};
  if (cudaPath_ == "nccl") {
    if (!cudaPg_) {
      // Created by every rank at its first op on device tensors, on the
      // group's own store under "cuda/".
      accl::ProcessGroupOptions o;
      o.timeout = timeout_;
      o.name = pg_->options().name + ":cuda";
      cudaPg_ = accl::createProcessGroup("nccl", std::make_shared<accl::PrefixStore>("cuda/", store_), getRank(),
                                         getSize(), o);
      ACCL_INFO("TORCH", "torch_accl: device tensors of group '" << o.name << "' go to ACCL's nccl backend");
    }
    return {cudaPg_.get(), compat::nativeStream(user), user};
  }
  static std::once_flag warned;
  std::call_once(warned, [&] {
    ACCL_WARN("TORCH", "torch_accl: device tensors are staged through host memory (copied to the host, run by "
                           "ACCL's " << pg_->backendName() << " backend, copied back), which is much slower than "
                           "a device path: " << cudaWhy_
                           << ". ACCL_TORCH_CUDA=nccl sends them to ACCL's nccl backend where it is usable.");
  });
  return {pg_.get(), nullptr, user};
}

// What an op's body works with: the group and stream route() chose for the
// op's tensors, the staging of its tensors, and what it fills: the accl ops
// it issued (`works`) and what runs on completion before staged outputs are
// copied back (`after`).
struct ProcessGroupACCL::OpContext {
  accl::ProcessGroup* pg;
  void* stream;
  bool blocking;
  std::shared_ptr<Staging> stage;
  std::vector<std::shared_ptr<accl::Work>> works;
  std::function<void()> after;

  // Every accl op of this torch op: its deadline (torch's unset timeout is
  // negative, which the group reads as its own), stream and blocking.
  void setOptions(accl::OpOptions& o, std::chrono::milliseconds timeout) const {
    o.timeout = timeout;
    o.stream = stream;
    o.blocking = blocking;
  }
};

// Collectives count towards the group's sequence number; while coalescing,
// the op's Work is also kept for endCoalescing. A call torch marks
// synchronous (async_op=False, torch >= 2.7) runs here and now, on the
// calling thread, as the SDK's own blocking calls do.
template <typename Body>
c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::issue(c10d::OpType type, bool collective, bool async,
                                                       const std::vector<at::Tensor>& outputs, Body&& body) {
  return guarded([&]() -> c10::intrusive_ptr<c10d::Work> {
    Route r = route(outputs);
    // The title makes c10d::Work start a profiler record (an allocation and
    // the profiler's callback lookup per op): given only while some callback
    // (torch.profiler, record_function observers) is registered.
    auto work = c10::make_intrusive<AcclWork>(getRank(), type, at::hasCallbacks() ? profilingTitle(type) : nullptr,
                                              outputs, outputs, r.userStream);
    OpContext ctx{r.pg, r.stream, !async && !coalescing_, std::make_shared<Staging>(*r.pg), {}, {}};
    body(ctx);
    work->start(std::move(ctx.works), [stage = ctx.stage, after = std::move(ctx.after)] {
      if (after) after();
      stage->copyBack();
    });
    if (collective) ++collectives_;
    if (coalescing_) coalesced_.push_back(work);
    else if (ctx.blocking) work->runHere();
    return work;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  return issue(c10d::OpType::BROADCAST, true, compat::isAsync(opts), tensors, [&](OpContext& ctx) {
    requireOne(tensors, "broadcast");
    accl::BroadcastOptions o;
    o.root = static_cast<int>(opts.rootRank);
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->broadcast(ctx.stage->buffer(tensors[0], true, "broadcast tensor"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  return issue(c10d::OpType::ALLREDUCE, true, compat::isAsync(opts), tensors, [&](OpContext& ctx) {
    requireOne(tensors, "all_reduce");
    accl::AllreduceOptions o;
    o.op = mapReduce(opts.reduceOp, tensors[0]);
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->allreduce(ctx.stage->buffer(tensors[0], true, "all_reduce tensor"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  return issue(c10d::OpType::ALLREDUCE_COALESCED, true, compat::isAsync(opts), tensors, [&](OpContext& ctx) {
    if (tensors.empty()) throw accl::InvalidArgument("all_reduce_coalesced: no tensors");
    // One op over the tensors packed together (they share a dtype).
    int64_t total = 0;
    for (auto& t : tensors) {
      requireSameKind(tensors[0], t, "all_reduce_coalesced");
      total += t.numel();
    }
    at::Tensor flat = ctx.stage->flat(tensors[0], total);
    pack(flat, tensors);
    accl::AllreduceOptions o;
    o.op = mapReduce(opts.reduceOp, tensors[0]);
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->allreduce(ctx.stage->bufferOfFlat(flat, "all_reduce_coalesced tensor"), o));
    auto outs = tensors;
    ctx.after = [flat, outs]() mutable { unpack(flat, outs); };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  return issue(c10d::OpType::REDUCE, true, compat::isAsync(opts), tensors, [&](OpContext& ctx) {
    requireOne(tensors, "reduce");
    accl::ReduceOptions o;
    o.op = mapReduce(opts.reduceOp, tensors[0]);
    o.root = static_cast<int>(opts.rootRank);
    ctx.setOptions(o, opts.timeout);
    auto b = ctx.stage->buffer(tensors[0], true, "reduce tensor");
    ctx.works.push_back(ctx.pg->reduce(b, b, o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> flatOuts;
  for (auto& l : outputs) flatOuts.insert(flatOuts.end(), l.begin(), l.end());
  return issue(c10d::OpType::ALLGATHER, true, compat::isAsync(opts), flatOuts, [&](OpContext& ctx) {
    requireOne(inputs, "all_gather");
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize())
      throw accl::InvalidArgument("all_gather: expected one output list of " + std::to_string(getSize()) +
                                  " tensors");
    const at::Tensor& in = inputs[0];
    for (auto& t : outputs[0]) {
      requireSameKind(in, t, "all_gather");
      if (t.numel() != in.numel())
        throw accl::InvalidArgument("all_gather: output tensors must have the input's " +
                                    std::to_string(in.numel()) + " elements, one has " + std::to_string(t.numel()));
    }
    at::Tensor flat = ctx.stage->flat(in, in.numel() * getSize());
    accl::AllgatherOptions o;
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->allgather(ctx.stage->buffer(in, false, "all_gather input"),
                                   ctx.stage->bufferOfFlat(flat, "all_gather output"), o));
    auto outs = outputs[0];
    ctx.after = [flat, outs]() mutable { unpack(flat, outs); };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  return issue(c10d::OpType::_ALLGATHER_BASE, true, compat::isAsync(opts), std::vector<at::Tensor>{output}, [&](OpContext& ctx) {
    requireSameKind(input, output, "all_gather_into_tensor");
    if (output.numel() != input.numel() * getSize())
      throw accl::InvalidArgument("all_gather_into_tensor: output has " + std::to_string(output.numel()) +
                                  " elements, expected " + std::to_string(input.numel() * getSize()) +
                                  " (input elements x group size)");
    accl::AllgatherOptions o;
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->allgather(ctx.stage->buffer(input, false, "all_gather_into_tensor input"),
                                   ctx.stage->buffer(output, true, "all_gather_into_tensor output"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> flatOuts;
  for (auto& l : outputLists) flatOuts.insert(flatOuts.end(), l.begin(), l.end());
  return issue(c10d::OpType::ALLGATHER_COALESCED, true, compat::isAsync(opts), flatOuts, [&](OpContext& ctx) {
    // outputLists[r][i] receives rank r's inputs[i]: one allgather per input.
    if (static_cast<int>(outputLists.size()) != getSize())
      throw accl::InvalidArgument("all_gather_coalesced: expected " + std::to_string(getSize()) + " output lists");
    std::vector<std::pair<at::Tensor, size_t>> flats;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& in = inputs[i];
      at::Tensor flat = ctx.stage->flat(in, in.numel() * getSize());
      accl::AllgatherOptions o;
      ctx.setOptions(o, opts.timeout);
      ctx.works.push_back(ctx.pg->allgather(ctx.stage->buffer(in, false, "all_gather_coalesced input"),
                                     ctx.stage->bufferOfFlat(flat, "all_gather_coalesced output"), o));
      flats.emplace_back(flat, i);
    }
    auto outs = outputLists;
    ctx.after = [flats, outs]() mutable {
      for (auto& [flat, i] : flats) {
        int64_t n = flat.numel() / static_cast<int64_t>(outs.size());
        for (size_t r = 0; r < outs.size(); ++r)
          outs[r].at(i).copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r][i].sizes()));
      }
    };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> flatOuts;
  for (auto& l : outputs) flatOuts.insert(flatOuts.end(), l.begin(), l.end());
  return issue(c10d::OpType::GATHER, true, compat::isAsync(opts), flatOuts, [&](OpContext& ctx) {
    requireOne(inputs, "gather");
    const at::Tensor& in = inputs[0];
    int root = static_cast<int>(opts.rootRank);
    bool isRoot = getRank() == root;
    if (isRoot && (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()))
      throw accl::InvalidArgument("gather: the root needs one output list of " + std::to_string(getSize()) +
                                  " tensors");
    if (!isRoot && !(outputs.empty() || (outputs.size() == 1 && outputs[0].empty())))
      throw accl::InvalidArgument("gather: only the root (rank " + std::to_string(root) +
                                  ") passes output tensors");
    at::Tensor flat = ctx.stage->flat(in, isRoot ? in.numel() * getSize() : 0);
    accl::GatherOptions o;
    o.root = root;
    ctx.setOptions(o, opts.timeout);
    auto ob = ctx.stage->bufferOfFlat(flat, "gather output");
    if (!isRoot) ob = accl::Buffer(nullptr, 0, ob.dtype, ob.device);
    ctx.works.push_back(ctx.pg->gather(ctx.stage->buffer(in, false, "gather input"), ob, o));
    if (isRoot) {
      auto outs = outputs[0];
      ctx.after = [flat, outs]() mutable { unpack(flat, outs); };
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  return issue(c10d::OpType::SCATTER, true, compat::isAsync(opts), outputs, [&](OpContext& ctx) {
    requireOne(outputs, "scatter");
    const at::Tensor& out = outputs[0];
    int root = static_cast<int>(opts.rootRank);
    bool isRoot = getRank() == root;
    if (isRoot && (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize()))
      throw accl::InvalidArgument("scatter: the root needs one input list of " + std::to_string(getSize()) +
                                  " tensors");
    at::Tensor flat = ctx.stage->flat(out, isRoot ? out.numel() * getSize() : 0);
    if (isRoot) {
      for (int r = 0; r < getSize(); ++r) {
        const at::Tensor& t = inputs[0][static_cast<size_t>(r)];
        requireSameKind(out, t, "scatter");
        if (t.numel() != out.numel())
          throw accl::InvalidArgument("scatter: input tensors must have the output's " +
                                      std::to_string(out.numel()) + " elements");
      }
      pack(flat, inputs[0]);
    }
    accl::ScatterOptions o;
    o.root = root;
    ctx.setOptions(o, opts.timeout);
    auto ib = ctx.stage->bufferOfFlat(flat, "scatter input");
    if (!isRoot) ib = accl::Buffer(nullptr, 0, ib.dtype, ib.device);
    ctx.works.push_back(ctx.pg->scatter(ib, ctx.stage->buffer(out, true, "scatter output"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  return issue(c10d::OpType::REDUCE_SCATTER, true, compat::isAsync(opts), outputs, [&](OpContext& ctx) {
    requireOne(outputs, "reduce_scatter");
    const at::Tensor& out = outputs[0];
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize())
      throw accl::InvalidArgument("reduce_scatter: expected one input list of " + std::to_string(getSize()) +
                                  " tensors");
    at::Tensor flat = ctx.stage->flat(out, out.numel() * getSize());
    for (int r = 0; r < getSize(); ++r) {
      const at::Tensor& t = inputs[0][static_cast<size_t>(r)];
      requireSameKind(out, t, "reduce_scatter");
      if (t.numel() != out.numel())
        throw accl::InvalidArgument("reduce_scatter: input tensors must have the output's " +
                                    std::to_string(out.numel()) + " elements");
    }
    pack(flat, inputs[0]);
    accl::ReduceScatterOptions o;
    o.op = mapReduce(opts.reduceOp, out);
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->reduceScatter(ctx.stage->bufferOfFlat(flat, "reduce_scatter input"),
                                       ctx.stage->buffer(out, true, "reduce_scatter output"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, true, compat::isAsync(opts), std::vector<at::Tensor>{output}, [&](OpContext& ctx) {
    requireSameKind(input, output, "reduce_scatter_tensor");
    if (input.numel() != output.numel() * getSize())
      throw accl::InvalidArgument("reduce_scatter_tensor: input has " + std::to_string(input.numel()) +
                                  " elements, expected " + std::to_string(output.numel() * getSize()) +
                                  " (output elements x group size)");
    accl::ReduceScatterOptions o;
    o.op = mapReduce(opts.reduceOp, output);
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->reduceScatter(ctx.stage->buffer(input, false, "reduce_scatter_tensor input"),
                                       ctx.stage->buffer(output, true, "reduce_scatter_tensor output"), o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  return issue(c10d::OpType::ALLTOALL_BASE, true, compat::isAsync(opts), std::vector<at::Tensor>{output}, [&](OpContext& ctx) {
    requireSameKind(input, output, "all_to_all_single");
    accl::AlltoallOptions o;
    ctx.setOptions(o, opts.timeout);
    auto in = ctx.stage->buffer(input, false, "all_to_all_single input");
    auto out = ctx.stage->buffer(output, true, "all_to_all_single output");
    if (outputSplits.empty() && inputSplits.empty()) {
      if (input.numel() != output.numel())
        throw accl::InvalidArgument("all_to_all_single: input and output sizes differ (" +
                                    std::to_string(input.numel()) + " vs " + std::to_string(output.numel()) + ")");
      ctx.works.push_back(ctx.pg->alltoall(in, out, o));
    } else {
      // Splits count rows along dim 0; an empty list means equal splits.
      auto counts = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what) {
        std::vector<size_t> c(static_cast<size_t>(getSize()));
        int64_t row = elementsPerRow(t) * mapDtype(t, what).factor;
        if (splits.empty()) {
          if (t.dim() == 0 || t.size(0) % getSize() != 0)
            throw accl::InvalidArgument(std::string("all_to_all_single: ") + what + " dim 0 (" +
                                        std::to_string(t.dim() ? t.size(0) : 0) +
                                        ") is not divisible by the group size " + std::to_string(getSize()));
          for (auto& x : c) x = static_cast<size_t>(t.size(0) / getSize() * row);
          return c;
        }
        if (static_cast<int>(splits.size()) != getSize())
          throw accl::InvalidArgument(std::string("all_to_all_single: ") + what + " splits have " +
                                      std::to_string(splits.size()) + " entries, expected " +
                                      std::to_string(getSize()));
        int64_t sum = 0;
        for (size_t i = 0; i < c.size(); ++i) {
          if (splits[i] < 0) throw accl::InvalidArgument("all_to_all_single: negative split size");
          c[i] = static_cast<size_t>(splits[i] * row);
          sum += splits[i];
        }
        if (t.dim() == 0 || sum != t.size(0))
          throw accl::InvalidArgument(std::string("all_to_all_single: ") + what + " splits sum to " +
                                      std::to_string(sum) + ", but dim 0 is " +
                                      std::to_string(t.dim() ? t.size(0) : 0));
        return c;
      };
      auto sc = counts(inputSplits, input, "input");
      auto rc = counts(outputSplits, output, "output");
      ctx.works.push_back(ctx.pg->alltoallv(in, sc, out, rc, o));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  return issue(c10d::OpType::ALLTOALL, true, compat::isAsync(opts), outputs, [&](OpContext& ctx) {
    if (static_cast<int>(inputs.size()) != getSize() || static_cast<int>(outputs.size()) != getSize())
      throw accl::InvalidArgument("all_to_all: expected " + std::to_string(getSize()) +
                                  " input and output tensors");
    int64_t st = 0, rt = 0;
    std::vector<size_t> sc, rc;
    int64_t f = mapDtype(inputs[0], "all_to_all input").factor;
    for (int r = 0; r < getSize(); ++r) {
      requireSameKind(inputs[0], inputs[static_cast<size_t>(r)], "all_to_all");
      requireSameKind(inputs[0], outputs[static_cast<size_t>(r)], "all_to_all");
      sc.push_back(static_cast<size_t>(inputs[static_cast<size_t>(r)].numel() * f));
      rc.push_back(static_cast<size_t>(outputs[static_cast<size_t>(r)].numel() * f));
      st += inputs[static_cast<size_t>(r)].numel();
      rt += outputs[static_cast<size_t>(r)].numel();
    }
    at::Tensor sflat = ctx.stage->flat(inputs[0], st), rflat = ctx.stage->flat(outputs[0], rt);
    pack(sflat, inputs);
    accl::AlltoallOptions o;
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->alltoallv(ctx.stage->bufferOfFlat(sflat, "all_to_all input"), sc,
                                   ctx.stage->bufferOfFlat(rflat, "all_to_all output"), rc, o));
    auto outs = outputs;
    ctx.after = [rflat, outs]() mutable { unpack(rflat, outs); };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return issue(c10d::OpType::SEND, false, true, tensors, [&](OpContext& ctx) {
    requireOne(tensors, "send");
    accl::SendOptions o;
    o.tag = tag;
    ctx.setOptions(o, timeout_);
    ctx.works.push_back(ctx.pg->send(ctx.stage->buffer(tensors[0], false, "send tensor"), dstRank, o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return issue(c10d::OpType::RECV, false, true, tensors, [&](OpContext& ctx) {
    requireOne(tensors, "recv");
    accl::RecvOptions o;
    o.tag = tag;
    ctx.setOptions(o, timeout_);
    ctx.works.push_back(ctx.pg->recv(ctx.stage->buffer(tensors[0], true, "recv tensor"), srcRank, o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return issue(c10d::OpType::RECVANYSOURCE, false, true, tensors, [&](OpContext& ctx) {
    requireOne(tensors, "recv");
    accl::RecvOptions o;
    o.tag = tag;
    ctx.setOptions(o, timeout_);
    ctx.works.push_back(ctx.pg->recv(ctx.stage->buffer(tensors[0], true, "recv tensor"), accl::kAnySource, o));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::barrier(const c10d::BarrierOptions& opts) {
  return issue(c10d::OpType::BARRIER, true, compat::isAsync(opts), std::vector<at::Tensor>{}, [&](OpContext& ctx) {
    accl::BarrierOptions o;
    ctx.setOptions(o, opts.timeout);
    ctx.works.push_back(ctx.pg->barrier(o));
  });
}

// Tag of monitoredBarrier's messages; user tags below it are untouched.
constexpr int kMonitoredTag = std::numeric_limits<int>::max() - 1;

void ProcessGroupACCL::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  guarded([&] {
    auto timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
    auto until = std::chrono::steady_clock::now() + timeout;
    const int64_t call = ++monitoredBarriers_;
    auto token = at::empty({1}, at::kLong);
    const accl::Buffer tokenBuf(token.data_ptr(), 1, accl::DataType::Int64);
    // Receives from `peer` until a token of this call arrives (one of an
    // earlier, failed call is skipped); accl::Timeout when `until` passes.
    auto receiveThisCall = [&](int peer) {
      do {
        accl::RecvOptions ro;
        ro.tag = kMonitoredTag;
        ro.timeout = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  until - std::chrono::steady_clock::now()),
                              std::chrono::milliseconds(1));
        pg_->recv(tokenBuf, peer, ro)->wait();
      } while (token.item<int64_t>() < call);
    };
    accl::SendOptions so;
    so.tag = kMonitoredTag;
    so.timeout = timeout;
    if (getRank() != 0) {
      token.fill_(call);
      pg_->send(tokenBuf, 0, so)->wait();
      try {
        receiveThisCall(0);  // rank 0 answers once every rank arrived
      } catch (const accl::Timeout&) {
        throw accl::Timeout("monitored_barrier: rank " + std::to_string(getRank()) +
                            " was not released by rank 0 within " + std::to_string(timeout.count()) +
                            " ms (rank 0 names the ranks that did not arrive)");
      }
      return 0;
    }
    // Rank 0: every rank within the same deadline.
    std::vector<int> missing;
    std::string causes;
    for (int r = 1; r < getSize(); ++r) {
      try {
        receiveThisCall(r);
        continue;
      } catch (const accl::Timeout&) {
      } catch (const accl::Error& e) {
        causes += "; rank " + std::to_string(r) + ": " + e.what();
      }
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
    if (!missing.empty()) {
      std::string who;
      for (int r : missing) {
        who += (who.empty() ? "" : ", ") + std::to_string(r);
        if (!globalRanks_.empty() && globalRanks_[static_cast<size_t>(r)] != r)
          who += " (global rank " + std::to_string(globalRanks_[static_cast<size_t>(r)]) + ")";
      }
      throw accl::Timeout(std::string(missing.size() == 1 ? "Rank " : "Ranks ") + who +
                          " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms" +
                          (waitAllRanks ? "" : " (the first rank found; wait_all_ranks=True lists all)") + causes);
    }
    token.fill_(call);
    std::vector<std::shared_ptr<accl::Work>> acks;
    for (int r = 1; r < getSize(); ++r) acks.push_back(pg_->send(tokenBuf, r, so));
    for (auto& w : acks) w->wait();
    return 0;
  });
}

// ---------------------------------------------------------------- split (torch >= 2.8)
#if ACCL_TORCH_HAS_SPLIT

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupACCL::getBackendOptions() {
  auto o = c10::make_intrusive<c10d::Backend::Options>("accl", timeout_);
  o->global_ranks_in_group.assign(globalRanks_.begin(), globalRanks_.end());
  return o;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupACCL::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                         const std::vector<int>& ranks,
                                                         const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  return guarded([&]() -> c10::intrusive_ptr<c10d::Backend> {
    auto at = std::find(ranks.begin(), ranks.end(), getRank());
    if (at == ranks.end()) return nullptr;
    std::vector<int64_t> global;
    for (int r : ranks) {
      if (r < 0 || r >= getSize())
        throw accl::InvalidArgument("split: rank " + std::to_string(r) + " is not in this group of " +
                                    std::to_string(getSize()));
      global.push_back(globalRanks_.empty() ? r : globalRanks_[static_cast<size_t>(r)]);
    }
    auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
    std::string name = opts ? opts->group_name : std::string();
    // torch's splitGroup asks every device type's backend for its split; this
    // one Backend serves cpu and cuda, and some torch versions ask it twice.
    // The second ask gets the group the first one made.
    std::string key = name + "/";
    for (int r : ranks) key += std::to_string(r) + ",";
    std::lock_guard<std::mutex> lk(splitMu_);
    for (auto it = splits_.begin(); it != splits_.end();) {
      auto alive = it->second.lock();
      if (!alive) {
        it = splits_.erase(it);
        continue;
      }
      if (it->first == key) return alive;
      ++it;
    }
    // torch hands every split the same store prefix (the new group's name):
    // one more level keeps sibling splits of one name apart.
    auto own = c10::make_intrusive<c10d::PrefixStore>("accl-split/" + key, store);
    auto child = c10::make_intrusive<ProcessGroupACCL>(own, static_cast<int>(at - ranks.begin()),
                                                       static_cast<int>(ranks.size()), timeout, std::move(global),
                                                       name);
    splits_.emplace_back(key, c10::weak_intrusive_ptr<ProcessGroupACCL>(child));
    return child;
  });
}

#endif  // ACCL_TORCH_HAS_SPLIT

// ---------------------------------------------------------------- coalescing (torch >= 2.1)
#if ACCL_TORCH_HAS_COALESCING

void ProcessGroupACCL::startCoalescing() {
  TORCH_CHECK(!coalescing_, "accl: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "accl: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto parts = std::move(coalesced_);
  coalesced_.clear();
  std::vector<at::Tensor> outs;
  for (auto& w : parts)
    for (auto& t : w->result()) outs.push_back(t);
  auto work = c10::make_intrusive<AcclWork>(getRank(), c10d::OpType::COALESCED,
                                            profilingTitle(c10d::OpType::COALESCED), outs, outs);
  work->startAfter(parts);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return issue(c10d::OpType::COALESCED, true, compat::isAsync(opts), outputs, [&](OpContext& ctx) {
    requireGroupSizedPairs(inputs, outputs, true, getSize(), "all_gather_into_tensor_coalesced");
    for (size_t i = 0; i < inputs.size(); ++i) {
      accl::AllgatherOptions o;
      ctx.setOptions(o, opts.timeout);
      ctx.works.push_back(ctx.pg->allgather(ctx.stage->buffer(inputs[i], false, "all_gather_into_tensor_coalesced input"),
                                     ctx.stage->buffer(outputs[i], true, "all_gather_into_tensor_coalesced output"), o));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupACCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  return issue(c10d::OpType::COALESCED, true, compat::isAsync(opts), outputs, [&](OpContext& ctx) {
    requireGroupSizedPairs(inputs, outputs, false, getSize(), "reduce_scatter_tensor_coalesced");
    for (size_t i = 0; i < inputs.size(); ++i) {
      accl::ReduceScatterOptions o;
      o.op = mapReduce(opts.reduceOp, outputs[i]);
      ctx.setOptions(o, opts.timeout);
      ctx.works.push_back(ctx.pg->reduceScatter(ctx.stage->buffer(inputs[i], false, "reduce_scatter_tensor_coalesced input"),
                                         ctx.stage->buffer(outputs[i], true, "reduce_scatter_tensor_coalesced output"),
                                         o));
    }
  });
}

#endif  // ACCL_TORCH_HAS_COALESCING

// ---------------------------------------------------------------- sequence numbers

void ProcessGroupACCL::setSequenceNumberForGroup() {}  // every rank starts at 0 and counts collectives

uint64_t ProcessGroupACCL::getSequenceNumberForGroup() { return collectives_.load(); }

}  // namespace torch_accl
