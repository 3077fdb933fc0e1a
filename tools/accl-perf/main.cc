// accl-perf: nccl-tests-style benchmark for every ACCL backend.
//   accl-run -n 2 accl-perf --backend gloo --op allreduce -b 8 -e 128M -f 2
#include "../common/version.h"
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accl/registry.h"

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

const char* kOps[] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
                      "alltoall",  "gather",    "scatter",        "sendrecv"};

[[noreturn]] void usage(int rc) {
  std::printf(
      "usage: accl-perf [options]    (run one process per rank: accl-run, mpirun, torchrun, srun)\n"
      "  --backend NAME     gloo | mpi | ... (accl-info --backends)      [gloo]\n"
      "  --op NAME          allreduce allgather reduce_scatter broadcast reduce alltoall\n"
      "                     gather scatter sendrecv                       [allreduce]\n"
      "  -b, --minbytes N   smallest size (K, M, G suffixes)              [8]\n"
      "  -e, --maxbytes N   largest size                                  [8M]\n"
      "  -f, --stepfactor F multiply the size by F each step              [2]\n"
      "  -i, --stepbytes N  add N bytes each step instead\n"
      "  -n, --iters N      timed iterations per size                     [20]\n"
      "  -w, --warmup_iters N  untimed iterations                         [5]\n"
      "  -c, --check 0|1    check results, count wrong elements           [1]\n"
      "  -z, --blocking 0|1 wait for each op before issuing the next      [0]\n"
      "  -a, --average 0|1|2|3  time of rank 0 | average | min | max     [1]\n"
      "  -d, --datatype T   int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64 [float32]\n"
      "  -o, --op_type OP   sum prod min max                              [sum]\n"
      "  -r, --root R       root of broadcast, reduce, gather, scatter    [0]\n"
      "  -J, --output_file F  also write the results as JSON to F\n"
      "  --device cpu|cuda  buffer device (cuda: one GPU per local rank)   [cpu]\n"
      "  --corrupt          damage one element on rank 0 before checking (tests the checker)\n"
      "Columns follow nccl-tests: algbw = size / time; busbw = algbw x factor (allreduce\n"
      "2(n-1)/n; allgather, reduce_scatter, alltoall, gather, scatter (n-1)/n; others 1).\n");
  std::exit(rc);
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024;
  else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024;
  else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024;
  else if (*end != '\0') {
    std::fprintf(stderr, "accl-perf: invalid size '%s'; accepted: a number with an optional K, M or G suffix\n", s);
    std::exit(2);
  }
  return static_cast<size_t>(v * mult);
}

double busFactor(const std::string& op, int n) {
  if (op == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall" || op == "gather" || op == "scatter")
    return n > 1 ? double(n - 1) / n : 0;
  return 1;
}

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
    case DataType::BFloat16: {  // exact for the small integers used here
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t b = static_cast<uint16_t>(u >> 16);
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

  // Sizes per op: `bytes` is the larger of the send and receive buffers, as in nccl-tests.
  void shapes(size_t bytes, size_t* inCount, size_t* outCount) const {
    size_t total = bytes / es;
    const std::string& op = a.op;
    if (op == "allgather" || op == "gather") {
      *inCount = total / n;
      *outCount = *inCount * n;
    } else if (op == "reduce_scatter" || op == "scatter") {
      *outCount = total / n;
      *inCount = *outCount * n;
    } else if (op == "alltoall") {
      *inCount = *outCount = total / n * n;
    } else {
      *inCount = *outCount = total;
    }
  }

  std::shared_ptr<Work> issue(size_t ic, size_t oc, bool inPlace) {
    Buffer bi(inP, ic, a.dtype, dev), bo(inPlace ? inP : outP, oc, a.dtype, dev);
    const std::string& op = a.op;
    if (op == "allreduce") {
      AllreduceOptions o;
      o.op = a.redop;
      return pg.allreduce(bi, bo, o);
    }
    if (op == "allgather") return pg.allgather(inPlace ? bo.slice(static_cast<size_t>(me) * ic, ic) : bi, inPlace ? Buffer(inP, oc, a.dtype, dev) : bo);
    if (op == "reduce_scatter") {
      ReduceScatterOptions o;
      o.op = a.redop;
      return pg.reduceScatter(bi, inPlace ? bi.slice(static_cast<size_t>(me) * oc, oc) : bo, o);
    }
    if (op == "broadcast") {
      BroadcastOptions o;
      o.root = a.root;
      return pg.broadcast(bi, o);  // in place by definition
    }
    if (op == "reduce") {
      ReduceOptions o;
      o.op = a.redop;
      o.root = a.root;
      return pg.reduce(bi, bo, o);
    }
    if (op == "alltoall") return pg.alltoall(bi, bo);
    if (op == "gather") {
      GatherOptions o;
      o.root = a.root;
      return pg.gather(bi, bo, o);
    }
    if (op == "scatter") {
      ScatterOptions o;
      o.root = a.root;
      return pg.scatter(bi, bo, o);
    }
    // sendrecv: ring exchange with both neighbours. Even ranks send first, odd
    // ranks receive first: with NCCL a send completes only once the peer has
    // posted its receive.
    if (me % 2 == 0) {
      auto ws = pg.send(bi, (me + 1) % n);
      auto wr = pg.recv(bo, (me + n - 1) % n);
      ws->wait();
      return wr;
    }
    auto wr = pg.recv(bo, (me + n - 1) % n);
    auto ws = pg.send(bi, (me + 1) % n);
    wr->wait();
    return ws;
  }

  // Fills inputs, runs once, compares with what the op must produce; returns wrong elements.
  size_t check(size_t ic, size_t oc, bool inPlace) {
    std::fill(out.begin(), out.end(), 0);
    auto fillIn = [&](int rank, size_t count, char* dst, size_t offset) {
      for (size_t i = 0; i < count; ++i) store(dst, offset + i, a.dtype, inputValue(rank, i, a.redop));
    };
    const std::string& op = a.op;
    if (op == "allgather" && inPlace) fillIn(me, ic, in.data(), static_cast<size_t>(me) * ic);
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
    auto red = [&](size_t i) {
      double acc = inputValue(0, i, a.redop);
      for (int r = 1; r < n; ++r) {
        double x = inputValue(r, i, a.redop);
        if (a.redop == ReduceKind::Sum) acc += x;
        else if (a.redop == ReduceKind::Prod) acc *= x;
        else if (a.redop == ReduceKind::Min) acc = std::min(acc, x);
        else acc = std::max(acc, x);
      }
      return acc;
    };
    const char* got = inPlace ? in.data() : out.data();
    size_t count = oc, gotOffset = 0;
    bool checkHere = true;
    if (op == "allreduce" || (op == "reduce" && me == a.root)) {
      for (size_t i = 0; i < oc; ++i) store(want.data(), i, a.dtype, red(i));
    } else if (op == "reduce_scatter") {
      for (size_t i = 0; i < oc; ++i) store(want.data(), i, a.dtype, red(static_cast<size_t>(me) * oc + i));
      if (inPlace) gotOffset = static_cast<size_t>(me) * oc;
    } else if (op == "allgather" || (op == "gather" && me == a.root)) {
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < ic; ++i) store(want.data(), r * ic + i, a.dtype, inputValue(r, i, a.redop));
    } else if (op == "broadcast") {
      for (size_t i = 0; i < oc; ++i) store(want.data(), i, a.dtype, inputValue(a.root, i, a.redop));
      got = in.data();
    } else if (op == "scatter") {
      for (size_t i = 0; i < oc; ++i) store(want.data(), i, a.dtype, inputValue(a.root, static_cast<size_t>(me) * oc + i, a.redop));
    } else if (op == "alltoall") {
      size_t c = oc / n;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < c; ++i) store(want.data(), r * c + i, a.dtype, inputValue(r, static_cast<size_t>(me) * c + i, a.redop));
    } else if (op == "sendrecv") {
      for (size_t i = 0; i < oc; ++i) store(want.data(), i, a.dtype, inputValue((me + n - 1) % n, i, a.redop));
    } else {
      checkHere = false;  // reduce / gather on non-root ranks: nothing to check
    }
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

  double combine(double t) {
    double v[1] = {t};
    if (a.average == 0) {
      BroadcastOptions o;
      pg.broadcast(Buffer(v, 1, DataType::Float64), o)->wait();
      return v[0];
    }
    AllreduceOptions o;
    o.op = a.average == 1 ? ReduceKind::Avg : a.average == 2 ? ReduceKind::Min : ReduceKind::Max;
    pg.allreduce(Buffer(v, 1, DataType::Float64), o)->wait();
    return v[0];
  }

  size_t sumWrong(size_t w) {
    uint64_t v = w;
    pg.allreduce(Buffer(&v, 1, DataType::Uint64))->wait();
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (accl_tools::printVersionIfAsked(argc, argv, "accl-perf")) return 0;
  Args a;
  static option longOpts[] = {{"backend", required_argument, nullptr, 'B'}, {"op", required_argument, nullptr, 'O'},
                              {"minbytes", required_argument, nullptr, 'b'}, {"maxbytes", required_argument, nullptr, 'e'},
                              {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
                              {"iters", required_argument, nullptr, 'n'}, {"warmup_iters", required_argument, nullptr, 'w'},
                              {"check", required_argument, nullptr, 'c'}, {"blocking", required_argument, nullptr, 'z'},
                              {"average", required_argument, nullptr, 'a'}, {"datatype", required_argument, nullptr, 'd'},
                              {"op_type", required_argument, nullptr, 'o'}, {"root", required_argument, nullptr, 'r'},
                              {"output_file", required_argument, nullptr, 'J'}, {"device", required_argument, nullptr, 'D'},
                              {"corrupt", no_argument, nullptr, 'X'}, {"help", no_argument, nullptr, 'h'},
                              {nullptr, 0, nullptr, 0}};
  int c;
  try {
    while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:z:a:d:o:r:J:h", longOpts, nullptr)) != -1) {
      switch (c) {
        case 'B': a.backend = optarg; break;
        case 'O': a.op = optarg; break;
        case 'b': a.minBytes = parseSize(optarg); break;
        case 'e': a.maxBytes = parseSize(optarg); break;
        case 'f': a.factor = std::atof(optarg); break;
        case 'i': a.stepBytes = parseSize(optarg); break;
        case 'n': a.iters = std::max(1, std::atoi(optarg)); break;
        case 'w': a.warmup = std::max(0, std::atoi(optarg)); break;
        case 'c': a.check = std::atoi(optarg) != 0; break;
        case 'z': a.blocking = std::atoi(optarg) != 0; break;
        case 'a': a.average = std::min(3, std::max(0, std::atoi(optarg))); break;
        case 'd': a.dtype = parseDataType(std::string(optarg) == "float" ? "float32" : std::string(optarg) == "double" ? "float64" : optarg); break;
        case 'o': a.redop = parseReduceKind(optarg); break;
        case 'r': a.root = std::atoi(optarg); break;
        case 'J': a.json = optarg; break;
        case 'D':
          if (std::string(optarg) == "cuda") {
#ifdef ACCL_PERF_CUDA
            a.cuda = true;
#else
            std::fprintf(stderr, "accl-perf: --device cuda: this build has no CUDA (built without the CUDA toolkit); accepted: cpu\n");
            return 2;
#endif
          } else if (std::string(optarg) != "cpu") {
            std::fprintf(stderr, "accl-perf: --device %s: accepted: cpu, cuda\n", optarg);
            return 2;
          }
          break;
        case 'X': a.corrupt = true; break;
        case 'h': usage(0);
        default: usage(2);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "accl-perf: %s\n", e.what());
    return 2;
  }
  if (std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return a.op == o; }) == std::end(kOps)) {
    std::fprintf(stderr, "accl-perf: unknown --op '%s'; accepted: allreduce allgather reduce_scatter broadcast reduce alltoall gather scatter sendrecv\n", a.op.c_str());
    return 2;
  }
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
    if (a.op == "sendrecv" && n < 2) {
      std::fprintf(stderr, "accl-perf: sendrecv needs at least 2 ranks\n");
      return 2;
    }
    Bench b{a, *pg, n, me, dataTypeSize(a.dtype), {}, {}, nullptr, nullptr, dev};
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
    bool root = a.op == "broadcast" || a.op == "reduce" || a.op == "gather" || a.op == "scatter";
    bool redop = a.op == "allreduce" || a.op == "reduce" || a.op == "reduce_scatter";
    // Ops whose API has one form only get one set of columns.
    bool hasInPlace = a.op != "sendrecv" && a.op != "gather" && a.op != "scatter" && a.op != "reduce" &&
                      a.op != "broadcast";
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
    std::string json = "{\"backend\":\"" + a.backend + "\",\"device\":\"" + (a.cuda ? "cuda" : "cpu") +
                       "\",\"op\":\"" + a.op + "\",\"ranks\":" + std::to_string(n) +
                       ",\"dtype\":\"" + toString(a.dtype) + "\",\"results\":[";
    double busSum = 0;
    int rows = 0;
    size_t totalWrong = 0;
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
      double f = busFactor(a.op, n);
      if (me == 0) {
        std::printf("%12zu %12zu %8s %6s %6d", shown, std::max(ic, oc), toString(a.dtype), redop ? toString(a.redop) : "none", root ? a.root : -1);
        json += std::string(rows ? "," : "") + "{\"size\":" + std::to_string(shown) + ",\"count\":" + std::to_string(std::max(ic, oc));
        for (int ip = 0; ip < (hasInPlace ? 2 : 1); ++ip) {
          double alg = shown / t[ip] / 1e9, bus = alg * f;
          std::printf(" %9.2f %8.2f %8.2f %6zu", t[ip] * 1e6, alg, bus, wrong[ip]);
          const char* key = ip ? "in_place" : "out_of_place";
          char buf[200];
          std::snprintf(buf, sizeof buf, ",\"%s\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%zu}", key, t[ip] * 1e6, alg, bus, wrong[ip]);
          json += buf;
          if (ip == 0) busSum += bus;
        }
        json += "}";
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
        char buf[100];
        std::snprintf(buf, sizeof buf, "],\"avg_busbw\":%.4f,\"wrong\":%zu}\n", rows ? busSum / rows : 0.0, totalWrong);
        json += buf;
        FILE* f = std::fopen(a.json.c_str(), "w");
        if (f) {
          std::fputs(json.c_str(), f);
          std::fclose(f);
        }
      }
      // With wrong results every rank exits non-zero, and a launcher may stop
      // rank 0 as soon as another rank exits: the summary must be out first.
      std::fflush(stdout);
    }
    pg->barrier()->wait();
    return totalWrong ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "accl-perf: %s\n", e.what());
    return 1;
  }
}
