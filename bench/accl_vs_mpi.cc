// Same run, same processes, same buffers: Open MPI's own collectives against
// an ACCL backend's, op by op and size by size, interleaved, best of several
// repetitions each, so that the ratios hold on a shared, noisy machine.
//   mpirun -n 2 accl-vs-mpi [--backend accl] [--op all] [--min 8] [--max 128M] [--factor 2] [--reps 3] [--iters N]
//                           [--per-rank] [--usage]
// Ranks on several hosts: pass MASTER_ADDR/MASTER_PORT (-x) for the ACCL store.
//
// Sizes and bus bandwidth follow nccl-tests: `bytes` is the op's size (allgather:
// the gathered output, reduce_scatter and alltoall: the whole input, gather and
// scatter: the root's whole buffer, sendrecv: one message); busbw = algbw x
// 2(n-1)/n (allreduce), (n-1)/n (allgather, reduce_scatter, alltoall, gather,
// scatter) or 1 (broadcast, reduce, sendrecv). Both sides make blocking calls:
// MPI_Allreduce, ... against ACCL's op with OpOptions::blocking, waited at once.
// Float32 sum; inputs are multiples of 1/4 below 16, so every sum is exact and
// ACCL's results must equal MPI's bit for bit (column `wrong`).
// Prints one row per op and size; exits 1 if any result differs.
#include <mpi.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "accl/process_group.h"
#include "accl/registry.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const std::vector<std::string> kOps = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
                                       "alltoall",  "gather",    "scatter",        "sendrecv"};
// Named only, not in "all": sendrecv_pair is sendrecv's exchange as a recv and
// a send with a Work each, against the same MPI_Sendrecv (what one op saves).
const std::vector<std::string> kExtraOps = {"sendrecv_pair"};
bool isSendRecv(const std::string& op) { return op == "sendrecv" || op == "sendrecv_pair"; }

// busbw / algbw, as nccl-tests.
double busFactor(const std::string& op, int n) {
  if (n == 1) return 1;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast" || op == "reduce" || isSendRecv(op)) return 1;
  return double(n - 1) / n;
}

// Elements of the op's `bytes` that each rank contributes (the unit of the
// MPI and ACCL calls): the per-rank chunk for the ops whose size is the whole.
size_t chunkCount(const std::string& op, size_t bytes, int n) {
  size_t c = bytes / 4;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall" || op == "gather" || op == "scatter")
    c /= static_cast<size_t>(n);
  return c;
}

// What a timed loop cost the host (--usage): the processes' CPU time and
// context switches (getrusage: every thread of the process, progress threads
// included), and the share of the host's CPU time spent idle (/proc/stat).
struct Usage {
  double user = 0, sys = 0, vcsw = 0, ivcsw = 0, busy = 0, idle = 0;
  static Usage now() {
    Usage u;
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    u.user = r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec;
    u.sys = r.ru_stime.tv_sec * 1e6 + r.ru_stime.tv_usec;
    u.vcsw = static_cast<double>(r.ru_nvcsw);
    u.ivcsw = static_cast<double>(r.ru_nivcsw);
    if (FILE* f = std::fopen("/proc/stat", "r")) {
      unsigned long long v[8] = {};
      if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                      &v[6], &v[7]) == 8) {
        u.busy = static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
        u.idle = static_cast<double>(v[3] + v[4]);
      }
      std::fclose(f);
    }
    return u;
  }
};

struct Buffers {
  std::vector<float> in, outMpi, outAccl;
};

// One op at one size, both ways: `mpi()` and `accl()` run it once each,
// into outMpi and outAccl.
struct Case {
  std::function<void()> mpi, accl;
  size_t resultCount = 0;  // elements of the result on this rank to compare (0: none)
};

Case makeCase(const std::string& op, size_t c, accl::ProcessGroup& pg, Buffers& b, MPI_Comm comm) {
  using accl::Buffer;
  using accl::DataType;
  int n = pg.size(), r = pg.rank(), root = 0;
  int ic = static_cast<int>(c);
  float* in = b.in.data();
  float* om = b.outMpi.data();
  float* oa = b.outAccl.data();
  auto F = [](float* p, size_t k) { return Buffer(p, k, DataType::Float32); };
  Case k;
  if (op == "allreduce") {
    accl::AllreduceOptions o;
    o.blocking = true;
    k.mpi = [=] { MPI_Allreduce(in, om, ic, MPI_FLOAT, MPI_SUM, comm); };
    k.accl = [=, &pg] { pg.allreduce(F(in, c), F(oa, c), o)->wait(); };
    k.resultCount = c;
  } else if (op == "allgather") {
    accl::AllgatherOptions o;
    o.blocking = true;
    k.mpi = [=] { MPI_Allgather(in, ic, MPI_FLOAT, om, ic, MPI_FLOAT, comm); };
    k.accl = [=, &pg] { pg.allgather(F(in, c), F(oa, c * n), o)->wait(); };
    k.resultCount = c * n;
  } else if (op == "reduce_scatter") {
    accl::ReduceScatterOptions o;
    o.blocking = true;
    auto counts = std::make_shared<std::vector<int>>(n, ic);
    k.mpi = [=] { MPI_Reduce_scatter(in, om, counts->data(), MPI_FLOAT, MPI_SUM, comm); };
    k.accl = [=, &pg] { pg.reduceScatter(F(in, c * n), F(oa, c), o)->wait(); };
    k.resultCount = c;
  } else if (op == "broadcast") {
    accl::BroadcastOptions o;
    o.blocking = true;
    o.root = root;
    // The root sends its input (which a broadcast leaves as it is); the others receive.
    bool isRoot = r == root;
    k.mpi = [=] { MPI_Bcast(isRoot ? in : om, ic, MPI_FLOAT, root, comm); };
    k.accl = [=, &pg] { pg.broadcast(F(isRoot ? in : oa, c), o)->wait(); };
    k.resultCount = isRoot ? 0 : c;
  } else if (op == "reduce") {
    accl::ReduceOptions o;
    o.blocking = true;
    o.root = root;
    k.mpi = [=] { MPI_Reduce(in, om, ic, MPI_FLOAT, MPI_SUM, root, comm); };
    k.accl = [=, &pg] { pg.reduce(F(in, c), F(oa, c), o)->wait(); };
    k.resultCount = r == root ? c : 0;
  } else if (op == "alltoall") {
    accl::AlltoallOptions o;
    o.blocking = true;
    k.mpi = [=] { MPI_Alltoall(in, ic, MPI_FLOAT, om, ic, MPI_FLOAT, comm); };
    k.accl = [=, &pg] { pg.alltoall(F(in, c * n), F(oa, c * n), o)->wait(); };
    k.resultCount = c * n;
  } else if (op == "gather") {
    accl::GatherOptions o;
    o.blocking = true;
    o.root = root;
    k.mpi = [=] { MPI_Gather(in, ic, MPI_FLOAT, om, ic, MPI_FLOAT, root, comm); };
    k.accl = [=, &pg] { pg.gather(F(in, c), r == root ? F(oa, c * n) : F(nullptr, 0), o)->wait(); };
    k.resultCount = r == root ? c * n : 0;
  } else if (op == "scatter") {
    accl::ScatterOptions o;
    o.blocking = true;
    o.root = root;
    k.mpi = [=] { MPI_Scatter(in, ic, MPI_FLOAT, om, ic, MPI_FLOAT, root, comm); };
    k.accl = [=, &pg] { pg.scatter(r == root ? F(in, c * n) : F(nullptr, 0), F(oa, c), o)->wait(); };
    k.resultCount = c;
  } else if (isSendRecv(op)) {
    // A ring, as nccl-tests' sendrecv: send to rank + 1, receive from rank - 1.
    int to = (r + 1) % n, from = (r + n - 1) % n;
    k.mpi = [=] { MPI_Sendrecv(in, ic, MPI_FLOAT, to, 7, om, ic, MPI_FLOAT, from, 7, comm, MPI_STATUS_IGNORE); };
    if (op == "sendrecv") {
      k.accl = [=, &pg] {
        accl::SendRecvOptions o;
        o.sendTag = o.recvTag = 7;
        o.blocking = true;
        pg.sendrecv(F(in, c), to, F(oa, c), from, o)->wait();
      };
    } else {
      k.accl = [=, &pg] {
        accl::SendOptions so;
        accl::RecvOptions ro;
        so.tag = ro.tag = 7;
        auto rw = pg.recv(F(oa, c), from, ro);
        auto sw = pg.send(F(in, c), to, so);
        sw->wait();
        rw->wait();
      };
    }
    k.resultCount = c;
  }
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  // As the mpi backend itself asks for (its blocking collectives need it).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string backend = "accl", opList = "all";
  size_t minb = 8, maxb = 128u << 20;
  double factor = 2;
  int reps = 3, fixedIters = 0;
  CLI::App app{"Open MPI's collectives against an ACCL backend's, same processes and buffers"};
  app.add_option("--backend", backend, "ACCL backend")->check(CLI::IsMember({"accl", "gloo", "mpi"}));
  app.add_option("--op", opList, "comma-separated ops, or all: allreduce, allgather, reduce_scatter, broadcast, "
                                 "reduce, alltoall, gather, scatter, sendrecv; also sendrecv_pair (the same exchange "
                                 "as a recv and a send, not in all)");
  app.add_option("--min", minb, "smallest size in bytes")->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(size_t(4), size_t(1) << 31));
  app.add_option("--max", maxb, "largest size in bytes")->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(size_t(4), size_t(1) << 31));
  app.add_option("--factor", factor, "size multiplier")->check(CLI::Range(1.01, 1024.0));
  app.add_option("--reps", reps, "repetitions (the best counts)")->check(CLI::Range(1, 100));
  app.add_option("--iters", fixedIters, "ops timed per repetition (default: 128 MiB's worth, 5 to 2000; more for "
                                        "a profile or to see a size past its warm-up)")
      ->check(CLI::Range(1, 100000000));
  bool usage = false;
  app.add_flag("--usage", usage, "also print what each timed loop cost: user and system CPU time and voluntary "
                                 "and involuntary context switches per op (summed over the ranks' processes, "
                                 "progress threads included), and the host's idle share of CPU time meanwhile");
  bool perRank = false;
  app.add_flag("--per-rank", perRank, "also print each rank's time of every repetition (rank 0 gathers them), "
                                     "for ops whose ranks' times differ (a root that runs ahead)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = rank == 0 ? app.exit(e) : (e.get_exit_code() ? 2 : 0);
    MPI_Finalize();
    return rc;
  }
  std::vector<std::string> ops;
  if (opList == "all") {
    ops = kOps;
  } else {
    size_t p = 0;
    while (p <= opList.size()) {
      size_t q = opList.find(',', p);
      std::string o = opList.substr(p, q == std::string::npos ? std::string::npos : q - p);
      if (std::find(kOps.begin(), kOps.end(), o) == kOps.end() &&
          std::find(kExtraOps.begin(), kExtraOps.end(), o) == kExtraOps.end()) {
        if (rank == 0) std::fprintf(stderr, "accl-vs-mpi: unknown op '%s'; accepted: all or a list of allreduce, "
                                            "allgather, reduce_scatter, broadcast, reduce, alltoall, gather, "
                                            "scatter, sendrecv, sendrecv_pair\n", o.c_str());
        MPI_Finalize();
        return 2;
      }
      ops.push_back(o);
      if (q == std::string::npos) break;
      p = q + 1;
    }
  }
  if (size < 2) ops.erase(std::remove_if(ops.begin(), ops.end(), isSendRecv), ops.end());

  std::shared_ptr<accl::ProcessGroup> pg;
  try {
    auto rv = accl::rendezvousFromEnv();
    pg = accl::createProcessGroup(backend, rv.store, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl-vs-mpi: %s\n(run it under mpirun: mpirun -n 2 accl-vs-mpi ...)\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  // Largest buffer: the op's whole size (allgather output, alltoall, ...).
  size_t n = maxb / 4 + static_cast<size_t>(size);
  Buffers b;
  b.in.resize(n);
  b.outMpi.assign(n, 0);
  b.outAccl.assign(n, 0);
  for (size_t i = 0; i < n; ++i) b.in[i] = static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 64) * 0.25f;
  if (rank == 0) {
    std::printf("# float32 sum, %d ranks, ACCL %s backend vs %s, same processes and buffers, blocking calls, "
                "best of %d; thread level %d\n",
                size, backend.c_str(), "Open MPI's own MPI_* collectives", reps, provided);
    std::printf("# %-14s %12s %11s %11s %8s %10s %10s %8s %6s\n", "op", "bytes", "mpi_us", "accl_us", "t_ratio",
                "mpi_busbw", "accl_busbw", "bw_ratio", "wrong");
  }
  int allOk = 1;
  for (const auto& op : ops) {
    for (double fb = static_cast<double>(minb); fb <= static_cast<double>(maxb) * 1.0000001; fb *= factor) {
      size_t bytes = static_cast<size_t>(fb + 0.5) / 4 * 4;
      size_t c = chunkCount(op, bytes, size);
      if (c == 0) continue;
      Case k = makeCase(op, c, *pg, b, comm);
      int iters = fixedIters ? fixedIters
                             : static_cast<int>(std::min<size_t>(2000, std::max<size_t>(5, (size_t(1) << 27) / bytes)));
      double best[2] = {1e30, 1e30};
      for (int rp = 0; rp < reps; ++rp) {
        // Alternate which side goes first, so that neither always follows the other.
        for (int side = 0; side < 2; ++side) {
          int which = (rp + side) % 2;  // 0: MPI, 1: ACCL
          auto& fn = which == 0 ? k.mpi : k.accl;
          for (int w = 0; w < 3; ++w) fn();
          MPI_Barrier(comm);
          Usage u0 = usage ? Usage::now() : Usage{};
          double t0 = now();
          for (int i = 0; i < iters; ++i) fn();
          double t = (now() - t0) / iters, sum = 0;
          if (usage) {
            Usage u1 = Usage::now();
            double mine[4] = {u1.user - u0.user, u1.sys - u0.sys, u1.vcsw - u0.vcsw, u1.ivcsw - u0.ivcsw}, all[4];
            MPI_Reduce(mine, all, 4, MPI_DOUBLE, MPI_SUM, 0, comm);
            double dIdle = u1.idle - u0.idle, dAll = dIdle + u1.busy - u0.busy;
            if (rank == 0)
              std::printf("#   usage %-14s %12zu %-4s rep %d: idle %.1f %%, per op (all ranks): user %.2f us, sys %.2f "
                          "us, vcsw %.2f, ivcsw %.2f\n",
                          op.c_str(), bytes, which == 0 ? "mpi" : "accl", rp, dAll > 0 ? 100.0 * dIdle / dAll : 0.0,
                          all[0] / iters, all[1] / iters, all[2] / iters, all[3] / iters);
          }
          MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
          if (perRank) {
            std::vector<double> all(static_cast<size_t>(size));
            MPI_Gather(&t, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, comm);
            if (rank == 0) {
              std::printf("#   per rank %-14s %12zu %-4s rep %d:", op.c_str(), bytes, which == 0 ? "mpi" : "accl", rp);
              for (double x : all) std::printf(" %.2f", x * 1e6);
              std::printf(" us\n");
            }
          }
          best[which] = std::min(best[which], sum / size);
        }
      }
      long wrong = 0;
      for (size_t i = 0; i < k.resultCount; ++i) wrong += b.outMpi[i] != b.outAccl[i];
      long wrongAll = 0;
      MPI_Allreduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, comm);
      if (wrongAll) allOk = 0;
      if (rank == 0) {
        double f = busFactor(op, size);
        double bwM = bytes / best[0] / 1e9 * f, bwA = bytes / best[1] / 1e9 * f;
        std::printf("  %-14s %12zu %11.2f %11.2f %8.2f %10.3f %10.3f %8.2f %6ld\n", op.c_str(), bytes,
                    best[0] * 1e6, best[1] * 1e6, best[1] / best[0], bwM, bwA, bwA / bwM, wrongAll);
        std::fflush(stdout);
      }
    }
  }
  pg->barrier()->wait();
  pg.reset();
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return allOk ? 0 : 1;
}
