// accl-perf: nccl-tests-style benchmark for every ACCL backend.
//   accl-run -n 2 accl-perf --backend gloo --op allreduce -b 8 -e 128M -f 2
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "calibrate.h"
#include "predict.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "accl/registry.h"
#include "accl/internal/bus_factor.h"
#include "accl/internal/half.h"

#ifdef ACCL_PERF_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace accl;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string backend = "gloo";
  std::string op = "allreduce";
  size_t minBytes = 8, maxBytes = 8 << 20;
  double factor = 2;
  size_t stepBytes = 0;
  int iters = 20, warmup = 5;
  bool check = true;
  bool blocking = false;
  int average = 1;  // 0 rank 0, 1 avg, 2 min, 3 max
  DataType dtype = DataType::Float32;
  ReduceKind redop = ReduceKind::Sum;
  int root = 0;
  std::string json;
  bool corrupt = false;  // test hook: damage one element on rank 0 before checking
  bool cuda = false;     // --device cuda: buffers in device memory
};

// Device memory for --device cuda. Inputs are filled and results checked in
// host memory; the copies are outside the timed loop.
#ifdef ACCL_PERF_CUDA
void cudaOrDie(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "accl-perf: --device cuda: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(2);
}
int cudaSetup() {
  int n = 0;
  cudaOrDie(cudaGetDeviceCount(&n), "no usable CUDA device (cudaGetDeviceCount)");
  if (n == 0) {
    std::fprintf(stderr, "accl-perf: --device cuda: no CUDA device is visible\n");
    std::exit(2);
  }
  // One GPU per local rank, as nccl-tests with one GPU per process.
  const char* lr = std::getenv("LOCAL_RANK");
  if (!lr) lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) lr = std::getenv("SLURM_LOCALID");
  int dev = (lr ? std::atoi(lr) : 0) % n;
  cudaOrDie(cudaSetDevice(dev), "cudaSetDevice");
  return dev;
}
char* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  cudaOrDie(cudaMalloc(&p, bytes), "cudaMalloc");
  return static_cast<char*>(p);
}
void toDevice(char* d, const std::vector<char>& h) { cudaOrDie(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy"); }
void toHost(std::vector<char>& h, const char* d) { cudaOrDie(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost), "cudaMemcpy"); }
#endif

// Small integer-valued inputs: sums, products, min and max are exact in every dtype.
double inputValue(int rank, size_t i, ReduceKind op) {
  if (op == ReduceKind::Prod) return (rank + i) % 3 == 0 ? 2 : 1;
  return double((rank * 3 + i) % 7) + 1;
}

void store(void* p, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DataType::Uint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DataType::Uint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(static_cast<int64_t>(v)); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::Uint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
    case DataType::Float16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2);
      break;
    }
    case DataType::BFloat16: {
      uint16_t b = accl::internal::floatToBf16(static_cast<float>(v));
      std::memcpy(static_cast<char*>(p) + 2 * i, &b, 2);
      break;
    }
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
    case DataType::Bool: static_cast<uint8_t*>(p)[i] = v != 0; break;
  }
}

struct Bench {
  Args a;
  ProcessGroup& pg;
  int n, me;
  size_t es;
  std::vector<char> in, out;  // host buffers (the op's buffers with --device cpu)
  char* inP = nullptr;        // the op's buffers
  char* outP = nullptr;
  Device dev{};
  char* scratch = nullptr;  // device memory of combine() and sumWrong() with --device cuda

  const struct OpSpec* spec = nullptr;  // the op under test (kOps)

  // The reduction over all ranks of element i's inputs.
  double reduced(size_t i) const {
    double acc = inputValue(0, i, a.redop);
    for (int r = 1; r < n; ++r) {
      double x = inputValue(r, i, a.redop);
      if (a.redop == ReduceKind::Sum) acc += x;
      else if (a.redop == ReduceKind::Prod) acc *= x;
      else if (a.redop == ReduceKind::Min) acc = std::min(acc, x);
      else acc = std::max(acc, x);
    }
    return acc;
  }
  void put(std::vector<char>& buf, size_t i, double v) const { store(buf.data(), i, a.dtype, v); }
  // Every rank's `count` inputs, in rank order (what a gather produces).
  void putEveryInput(std::vector<char>& buf, size_t count) const {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) put(buf, r * count + i, inputValue(r, i, a.redop));
  }

  void shapes(size_t bytes, size_t* inCount, size_t* outCount) const;
  bool inputAtRankSlot() const;  // an in-place input sits at this rank's slot of the output
  std::shared_ptr<Work> issue(size_t ic, size_t oc, bool inPlace);

  // Fills inputs, runs once, compares with what the op must produce; returns wrong elements.
  size_t check(size_t ic, size_t oc, bool inPlace) {
    std::fill(out.begin(), out.end(), 0);
    auto fillIn = [&](int rank, size_t count, char* dst, size_t offset) {
      for (size_t i = 0; i < count; ++i) store(dst, offset + i, a.dtype, inputValue(rank, i, a.redop));
    };
    if (inPlace && inputAtRankSlot()) fillIn(me, ic, in.data(), static_cast<size_t>(me) * ic);
    else fillIn(me, ic, in.data(), 0);
#ifdef ACCL_PERF_CUDA
    if (a.cuda) {
      toDevice(inP, in);
      toDevice(outP, out);
    }
#endif
    issue(ic, oc, inPlace)->wait();
#ifdef ACCL_PERF_CUDA
    if (a.cuda) {
      toHost(in, inP);
      toHost(out, outP);
    }
#endif
    std::vector<char> want((std::max(ic, oc) + 1) * es);
    const char* got = inPlace ? in.data() : out.data();
    size_t count = oc, gotOffset = 0;
    bool checkHere = expect(ic, oc, inPlace, want, &got, &gotOffset);
    if (!checkHere) return 0;
    if (a.corrupt && me == 0 && count > 0) {
      char* g = const_cast<char*>(got) + gotOffset * es;
      g[0] ^= 0x5;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i)
      if (std::memcmp(got + (gotOffset + i) * es, want.data() + i * es, es) != 0) ++wrong;
    return wrong;
  }

  // Writes what this rank must hold after the op into `want` and says where
  // to find it; false where this rank receives nothing.
  bool expect(size_t ic, size_t oc, bool inPlace, std::vector<char>& want, const char** got, size_t* gotOffset) const;

  // Seconds per op on this rank.
  double time(size_t ic, size_t oc, bool inPlace) {
    for (int i = 0; i < a.warmup; ++i) issue(ic, oc, inPlace)->wait();
    pg.barrier()->wait();
    auto t0 = Clock::now();
    std::vector<std::shared_ptr<Work>> pending;
    for (int i = 0; i < a.iters; ++i) {
      auto w = issue(ic, oc, inPlace);
      if (a.blocking) w->wait();
      else pending.push_back(w);
    }
    for (auto& w : pending) w->wait();
    return std::chrono::duration<double>(Clock::now() - t0).count() / a.iters;
  }

  // The times and error counts are combined over the ranks by the group under
  // test, in the memory its ops take: a device-only backend (nccl) refuses
  // host buffers, so with --device cuda the 8 bytes go through device memory.
  void small(void* v, DataType t, const std::function<std::shared_ptr<Work>(Buffer)>& op) {
#ifdef ACCL_PERF_CUDA
    if (a.cuda) {
      if (!scratch) scratch = deviceAlloc(8);
      cudaOrDie(cudaMemcpy(scratch, v, 8, cudaMemcpyHostToDevice), "cudaMemcpy");
      op(Buffer(scratch, 1, t, dev))->wait();
      cudaOrDie(cudaMemcpy(v, scratch, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
      return;
    }
#endif
    op(Buffer(v, 1, t))->wait();
  }

  double combine(double t) {
    double v = t;
    if (a.average == 0) {
      small(&v, DataType::Float64, [&](Buffer b) { return pg.broadcast(b, BroadcastOptions{}); });
      return v;
    }
    AllreduceOptions o;
    o.op = a.average == 1 ? ReduceKind::Avg : a.average == 2 ? ReduceKind::Min : ReduceKind::Max;
    small(&v, DataType::Float64, [&](Buffer b) { return pg.allreduce(b, o); });
    return v;
  }

  size_t sumWrong(size_t w) {
    uint64_t v = w;
    small(&v, DataType::Uint64, [&](Buffer b) { return pg.allreduce(b); });
    return v;
  }
};

// One entry per op, as nccl-tests' testColl: name, bus factor, buffer shapes,
// how to issue it and what each rank must hold afterwards.
struct OpSpec {
  const char* name;
  enum Shape { Same, Gathered, Scattered, Exchanged } shape;  // how counts follow from the size
  enum InPlaceInput { AtStart, AtRankSlot } inPlaceInput;     // where an in-place input sits
  bool rooted, reduces, inPlaceForm;                          // takes -r, takes -o, has an in-place form
  OpType type;                                                // its busbw factor (internal::busFactor)
  std::shared_ptr<Work> (*issue)(Bench& b, Buffer in, Buffer out, size_t ic, size_t oc, bool inPlace);
  // Fills `want` with this rank's result; may point `got` at the input and
  // move `gotOffset`. False: nothing to check on this rank.
  bool (*expect)(const Bench& b, size_t ic, size_t oc, bool inPlace, std::vector<char>& want, const char** got,
                 size_t* gotOffset);
};

const OpSpec kOps[] = {
    {"allreduce", OpSpec::Same, OpSpec::AtStart, false, true, true, OpType::Allreduce,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) {
       AllreduceOptions o;
       o.op = b.a.redop;
       return b.pg.allreduce(in, out, o);
     },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char**, size_t*) {
       for (size_t i = 0; i < oc; ++i) b.put(want, i, b.reduced(i));
       return true;
     }},
    {"allgather", OpSpec::Gathered, OpSpec::AtRankSlot, false, false, true, OpType::Allgather,
     [](Bench& b, Buffer in, Buffer out, size_t ic, size_t, bool inPlace) {
       return b.pg.allgather(inPlace ? out.slice(static_cast<size_t>(b.me) * ic, ic) : in, out);
     },
     [](const Bench& b, size_t ic, size_t, bool, std::vector<char>& want, const char**, size_t*) {
       b.putEveryInput(want, ic);
       return true;
     }},
    {"reduce_scatter", OpSpec::Scattered, OpSpec::AtStart, false, true, true, OpType::ReduceScatter,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t oc, bool inPlace) {
       ReduceScatterOptions o;
       o.op = b.a.redop;
       return b.pg.reduceScatter(in, inPlace ? in.slice(static_cast<size_t>(b.me) * oc, oc) : out, o);
     },
     [](const Bench& b, size_t, size_t oc, bool inPlace, std::vector<char>& want, const char**, size_t* gotOffset) {
       for (size_t i = 0; i < oc; ++i) b.put(want, i, b.reduced(static_cast<size_t>(b.me) * oc + i));
       if (inPlace) *gotOffset = static_cast<size_t>(b.me) * oc;
       return true;
     }},
    {"broadcast", OpSpec::Same, OpSpec::AtStart, true, false, false, OpType::Broadcast,
     [](Bench& b, Buffer in, Buffer, size_t, size_t, bool) {
       BroadcastOptions o;
       o.root = b.a.root;
       return b.pg.broadcast(in, o);  // in place by definition
     },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char** got, size_t*) {
       for (size_t i = 0; i < oc; ++i) b.put(want, i, inputValue(b.a.root, i, b.a.redop));
       *got = b.in.data();
       return true;
     }},
    {"reduce", OpSpec::Same, OpSpec::AtStart, true, true, false, OpType::Reduce,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) {
       ReduceOptions o;
       o.op = b.a.redop;
       o.root = b.a.root;
       return b.pg.reduce(in, out, o);
     },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char**, size_t*) {
       if (b.me != b.a.root) return false;
       for (size_t i = 0; i < oc; ++i) b.put(want, i, b.reduced(i));
       return true;
     }},
    {"alltoall", OpSpec::Exchanged, OpSpec::AtStart, false, false, true, OpType::Alltoall,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) { return b.pg.alltoall(in, out); },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char**, size_t*) {
       size_t c = oc / b.n;
       for (int r = 0; r < b.n; ++r)
         for (size_t i = 0; i < c; ++i) b.put(want, r * c + i, inputValue(r, static_cast<size_t>(b.me) * c + i, b.a.redop));
       return true;
     }},
    {"gather", OpSpec::Gathered, OpSpec::AtStart, true, false, false, OpType::Gather,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) {
       GatherOptions o;
       o.root = b.a.root;
       return b.pg.gather(in, out, o);
     },
     [](const Bench& b, size_t ic, size_t, bool, std::vector<char>& want, const char**, size_t*) {
       if (b.me != b.a.root) return false;
       b.putEveryInput(want, ic);
       return true;
     }},
    {"scatter", OpSpec::Scattered, OpSpec::AtStart, true, false, false, OpType::Scatter,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) {
       ScatterOptions o;
       o.root = b.a.root;
       return b.pg.scatter(in, out, o);
     },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char**, size_t*) {
       for (size_t i = 0; i < oc; ++i)
         b.put(want, i, inputValue(b.a.root, static_cast<size_t>(b.me) * oc + i, b.a.redop));
       return true;
     }},
    // A ring exchange with both neighbours in one op (ProcessGroup::sendrecv):
    // send to the next rank, receive from the previous one.
    {"sendrecv", OpSpec::Same, OpSpec::AtStart, false, false, false, OpType::Send,
     [](Bench& b, Buffer in, Buffer out, size_t, size_t, bool) {
       return b.pg.sendrecv(in, (b.me + 1) % b.n, out, (b.me + b.n - 1) % b.n);
     },
     [](const Bench& b, size_t, size_t oc, bool, std::vector<char>& want, const char**, size_t*) {
       for (size_t i = 0; i < oc; ++i) b.put(want, i, inputValue((b.me + b.n - 1) % b.n, i, b.a.redop));
       return true;
     }},
};

const OpSpec* findOp(const std::string& name) {
  for (const auto& o : kOps)
    if (name == o.name) return &o;
  return nullptr;
}

// Sizes per op: `bytes` is the larger of the send and receive buffers, as in nccl-tests.
void Bench::shapes(size_t bytes, size_t* inCount, size_t* outCount) const {
  size_t total = bytes / es;
  switch (spec->shape) {
    case OpSpec::Gathered: *inCount = total / n, *outCount = *inCount * n; break;
    case OpSpec::Scattered: *outCount = total / n, *inCount = *outCount * n; break;
    case OpSpec::Exchanged: *inCount = *outCount = total / n * n; break;
    default: *inCount = *outCount = total; break;  // Same
  }
}

bool Bench::inputAtRankSlot() const { return spec->inPlaceInput == OpSpec::AtRankSlot; }

std::shared_ptr<Work> Bench::issue(size_t ic, size_t oc, bool inPlace) {
  Buffer bi(inP, ic, a.dtype, dev), bo(inPlace ? inP : outP, oc, a.dtype, dev);
  return spec->issue(*this, bi, bo, ic, oc, inPlace);
}

bool Bench::expect(size_t ic, size_t oc, bool inPlace, std::vector<char>& want, const char** got,
                   size_t* gotOffset) const {
  return spec->expect(*this, ic, oc, inPlace, want, got, gotOffset);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::string dtype = "float32", redop = "sum", device = "cpu";
  std::vector<std::string> opNames;
  for (const auto& o : kOps) opNames.push_back(o.name);
  CLI::App app{"accl-perf: nccl-tests style bandwidth and correctness of one op over a range of sizes. Run one "
               "process per rank (accl-run, mpirun, torchrun, srun).\n"
               "Columns follow nccl-tests: algbw = size / time; busbw = algbw x factor (allreduce 2(n-1)/n; "
               "allgather, reduce_scatter, alltoall, gather, scatter (n-1)/n; others 1).",
               "accl-perf"};
  app.add_option("--backend", a.backend, "gloo | mpi | ... (accl-info --backends)")->capture_default_str();
  app.add_option("--op", a.op, "the op")->check(CLI::IsMember(opNames))->capture_default_str();
  auto sizes = CLI::AsSizeValue(false);  // K, M, G = powers of 1024
  app.add_option("-b,--minbytes", a.minBytes, "smallest size (K, M, G suffixes)")->transform(sizes)->capture_default_str();
  app.add_option("-e,--maxbytes", a.maxBytes, "largest size")->transform(sizes)->capture_default_str();
  app.add_option("-f,--stepfactor", a.factor, "multiply the size by F each step (> 1)")->capture_default_str();
  app.add_option("-i,--stepbytes", a.stepBytes, "add N bytes each step instead")->transform(sizes);
  app.add_option("-n,--iters", a.iters, "timed iterations per size")->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("-w,--warmup_iters", a.warmup, "untimed iterations")->check(CLI::Range(0, 1 << 30))->capture_default_str();
  app.add_option("-c,--check", a.check, "check results, count wrong elements (0|1)")->capture_default_str();
  app.add_option("-z,--blocking", a.blocking, "wait for each op before issuing the next (0|1)")->capture_default_str();
  app.add_option("-a,--average", a.average, "time of rank 0 (0), average (1), min (2), max (3) over ranks")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("-d,--datatype", dtype,
                 "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 (float) float64 (double)")
      ->capture_default_str();
  app.add_option("-o,--op_type", redop, "sum prod min max")
      ->check(CLI::IsMember({"sum", "prod", "min", "max"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("-r,--root", a.root, "root of broadcast, reduce, gather, scatter")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-J,--output_file", a.json, "also write the results as JSON to this file")->type_name("FILE");
  app.add_option("--device", device, "buffer device (cuda: one GPU per local rank)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--corrupt", a.corrupt, "damage one element on rank 0 before checking (tests the checker)");
  accl_perf::CalibrateArgs cal;
  app.add_option("--calibrate", cal.file,
                 "instead of an op: measure the cost model's parameters of the link between rank 0 and "
                 "--calibrate-peer (latency, bandwidth, per-message overhead; reduction rate) and write them to "
                 "FILE, the tuning file the accl backend reads from ACCL_TUNING_FILE")
      ->type_name("FILE");
  app.add_option("--calibrate-peer", cal.peer, "the rank rank 0 measures with (default: the last; put it on "
                                                "another host to calibrate the link between hosts)");
  app.add_option("--calibrate-transport", cal.transport, "the link the calibration crosses, recorded in the file")
      ->check(CLI::IsMember({"tcp", "ib"}))
      ->capture_default_str();
  accl_perf::PredictArgs pred;
  auto* predOpt = app.add_option("--predict", pred.topology,
                                 "instead of running: predict collective times and the data-parallel step overhead "
                                 "on --nodes nodes from the cost model (--tuning) and a node's topology file (NCCL "
                                 "or hwloc XML), or 'host' for the calibrated model as it is (validation here)")
                      ->type_name("TOPOLOGY");
  app.add_option("--nodes", pred.nodes, "--predict: node counts, N (1, 2, 4, ... N) or a list 1,2,3")
      ->capture_default_str()
      ->needs(predOpt);
  app.add_option("--tuning", pred.tuning, "--predict: the tuning file (default: ACCL_TUNING_FILE; none: defaults)")
      ->type_name("FILE")
      ->needs(predOpt);
  app.add_option("--nic-gbps", pred.nicGbps, "--predict: speed of one NIC in Gbit/s (where the file has none)")
      ->check(CLI::PositiveNumber)
      ->needs(predOpt);
  app.add_option("--net-transport", pred.transport, "--predict: the transport between nodes (default: ib where "
                                                     "the NICs have RDMA, else tcp)")
      ->check(CLI::IsMember({"ib", "tcp"}))
      ->needs(predOpt);
  app.add_option("--intra-gbs", pred.intraGBs, "--predict: bus bandwidth of a ring within a node in GB/s "
                                                "(default: from the topology)")
      ->check(CLI::PositiveNumber)
      ->needs(predOpt);
  app.add_option("--ranks-per-node", pred.ranksPerNode, "--predict: ranks per node (default: one per GPU, else 1)")
      ->check(CLI::Range(1, 4096))
      ->needs(predOpt);
  app.add_option("--predict-ops", pred.ops, "--predict: ops to predict (allreduce, allgather, reduce_scatter)")
      ->capture_default_str()
      ->needs(predOpt);
  app.add_option("--step-ms", pred.stepMs, "--predict: compute time of one training step on one GPU, for the "
                                            "speedup column")
      ->check(CLI::PositiveNumber)
      ->needs(predOpt);
  app.add_option("--params", pred.params, "--predict: parameters whose gradients are allreduced (default: "
                                           "BERT-Large with its pretraining heads)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(predOpt);
  app.add_option("--bucket", pred.bucketBytes, "--predict: DDP bucket size")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(predOpt);
  if (int rc = accl_tools::parseCommandLine(app, argc, argv, "accl-perf"); rc >= 0) return rc;
  try {
    a.dtype = parseDataType(dtype == "float" ? "float32" : dtype == "double" ? "float64" : dtype);
    a.redop = parseReduceKind(redop);
  } catch (const Error& e) {
    std::fprintf(stderr, "accl-perf: %s\n", e.what());
    return 2;
  }
  if (device == "cuda") {
#ifdef ACCL_PERF_CUDA
    a.cuda = true;
#else
    std::fprintf(stderr, "accl-perf: --device cuda: this build has no CUDA (built without the CUDA toolkit); accepted: cpu\n");
    return 2;
#endif
  }
  if (!pred.topology.empty()) return accl_perf::predict(pred, a.minBytes, a.maxBytes, a.factor, a.json);
  const OpSpec* spec = findOp(a.op);  // --op accepts only the table's names
  if (a.redop != ReduceKind::Sum && a.redop != ReduceKind::Prod && a.redop != ReduceKind::Min && a.redop != ReduceKind::Max) {
    std::fprintf(stderr, "accl-perf: -o %s: accepted: sum, prod, min, max\n", toString(a.redop));
    return 2;
  }
  if (a.factor <= 1 && a.stepBytes == 0) {
    std::fprintf(stderr, "accl-perf: -f must be > 1 (or give -i)\n");
    return 2;
  }
  Device dev{};
#ifdef ACCL_PERF_CUDA
  if (a.cuda) dev = Device::cuda(cudaSetup());  // before the group: NCCL binds to the current device
#endif
  try {
    Rendezvous rv = rendezvousFromEnv();
    auto pg = createProcessGroup(a.backend, std::make_shared<PrefixStore>("accl-perf", rv.store), rv.rank, rv.size);
    int n = pg->size(), me = pg->rank();
    if (!cal.file.empty()) return accl_perf::calibrate(*pg, cal);
    if (a.op == "sendrecv" && n < 2) {
      std::fprintf(stderr, "accl-perf: sendrecv needs at least 2 ranks\n");
      return 2;
    }
    Bench b{a, *pg, n, me, dataTypeSize(a.dtype), {}, {}, nullptr, nullptr, dev, nullptr, spec};
    b.in.resize(a.maxBytes + 64);
    b.out.resize(a.maxBytes + 64);
    b.inP = b.in.data();
    b.outP = b.out.data();
#ifdef ACCL_PERF_CUDA
    if (a.cuda) {
      b.inP = deviceAlloc(b.in.size());
      b.outP = deviceAlloc(b.out.size());
    }
#endif
    bool root = spec->rooted, redop = spec->reduces;
    // Ops whose API has one form only get one set of columns.
    bool hasInPlace = spec->inPlaceForm;
    if (me == 0) {
      std::printf("# accl-perf: %s, backend %s, %d ranks, %s buffers, %s, iters %d, warmup %d, %s, time = %s over ranks\n",
                  a.op.c_str(), a.backend.c_str(), n, a.cuda ? "cuda" : "cpu", toString(a.dtype), a.iters, a.warmup,
                  a.blocking ? "blocking" : "non-blocking", a.average == 0 ? "rank 0" : a.average == 1 ? "avg" : a.average == 2 ? "min" : "max");
      std::printf("#%64s%30s\n", hasInPlace ? "out-of-place" : "", hasInPlace ? "in-place" : "");
      std::string h1 = "#       size        count     type  redop   root", h2 = "#        (B)   (elements)                      ";
      for (int ip = 0; ip < (hasInPlace ? 2 : 1); ++ip) {
        h1 += "      time    algbw    busbw #wrong";
        h2 += "      (us)   (GB/s)   (GB/s)       ";
      }
      std::printf("%s\n%s\n", h1.c_str(), h2.c_str());
    }
    nlohmann::ordered_json json = {{"backend", a.backend}, {"device", a.cuda ? "cuda" : "cpu"}, {"op", a.op},
                                   {"ranks", n}, {"dtype", toString(a.dtype)}, {"results", nlohmann::json::array()}};
    double busSum = 0;
    int rows = 0;
    size_t totalWrong = 0;
    bool jsonFailed = false;
    for (size_t bytes = a.minBytes; bytes <= a.maxBytes;
         bytes = a.stepBytes ? bytes + a.stepBytes : std::max(bytes + 1, static_cast<size_t>(bytes * a.factor))) {
      size_t ic, oc;
      b.shapes(bytes, &ic, &oc);
      size_t shown = std::max(ic, oc) * b.es;
      double t[2] = {0, 0};
      size_t wrong[2] = {0, 0};
      for (int ip = 0; ip < (hasInPlace ? 2 : 1); ++ip) {
        if (a.check) wrong[ip] = b.sumWrong(b.check(ic, oc, ip));
        t[ip] = b.combine(b.time(ic, oc, ip));
        totalWrong += wrong[ip];
      }
      double f = internal::busFactor(spec->type, n);
      if (me == 0) {
        std::printf("%12zu %12zu %8s %6s %6d", shown, std::max(ic, oc), toString(a.dtype), redop ? toString(a.redop) : "none", root ? a.root : -1);
        nlohmann::ordered_json row = {{"size", shown}, {"count", std::max(ic, oc)}};
        for (int ip = 0; ip < (hasInPlace ? 2 : 1); ++ip) {
          double alg = shown / t[ip] / 1e9, bus = alg * f;
          std::printf(" %9.2f %8.2f %8.2f %6zu", t[ip] * 1e6, alg, bus, wrong[ip]);
          row[ip ? "in_place" : "out_of_place"] = {
              {"time_us", t[ip] * 1e6}, {"algbw", alg}, {"busbw", bus}, {"wrong", wrong[ip]}};
          if (ip == 0) busSum += bus;
        }
        json["results"].push_back(std::move(row));
        std::printf("\n");
        std::fflush(stdout);
      }
      ++rows;
      if (bytes >= a.maxBytes) break;
    }
    if (me == 0) {
      std::printf("# Out of bounds values : %zu %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %g\n", rows ? busSum / rows : 0.0);
      if (!a.json.empty()) {
        json["avg_busbw"] = rows ? busSum / rows : 0.0;
        json["wrong"] = totalWrong;
        std::ofstream f(a.json);
        f << json.dump(1) << "\n";
        if (!f.flush()) {
          std::fprintf(stderr, "accl-perf: cannot write -J %s: %s\n", a.json.c_str(), std::strerror(errno));
          jsonFailed = true;
        }
      }
      // With wrong results every rank exits non-zero, and a launcher may stop
      // rank 0 as soon as another rank exits: the summary must be out first.
      std::fflush(stdout);
    }
    pg->barrier()->wait();
    return totalWrong ? 1 : jsonFailed ? 2 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "accl-perf: %s\n", e.what());
    return 1;
  }
}
