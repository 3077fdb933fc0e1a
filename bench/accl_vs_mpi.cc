// Same run, same buffers: Open MPI's MPI_Allreduce against an ACCL backend's
// allreduce (float32 sum), interleaved size by size, best of several
// repetitions each, so that the ratio is robust on a shared machine.
//   mpirun -n 2 accl-vs-mpi [--backend accl] [--min 8] [--max 134217728] [--reps 3]
// Ranks on several hosts: pass MASTER_ADDR/MASTER_PORT (-x) for the ACCL store.
// Prints one row per size: time and busbw of both, and the ratios.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accl/process_group.h"
#include "accl/registry.h"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string backend = "accl";
  size_t minb = 8, maxb = 128u << 20;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--backend") backend = argv[i + 1];
    else if (a == "--min") minb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--max") maxb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      if (rank == 0) std::fprintf(stderr, "usage: accl-vs-mpi [--backend NAME] [--min B] [--max B] [--reps N]\n");
      MPI_Finalize();
      return 2;
    }
  }
  std::shared_ptr<accl::ProcessGroup> pg;
  try {
    auto rv = accl::rendezvousFromEnv();
    pg = accl::createProcessGroup(backend, rv.store, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl-vs-mpi: %s\n(run it under mpirun: mpirun -n 2 accl-vs-mpi ...)\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  size_t n = maxb / 4;
  std::vector<float> in(n), outM(n), outA(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 7 + rank * 13) % 64) * 0.25f;
  if (rank == 0) {
    std::printf("# float32 sum allreduce, %d ranks, %s vs Open MPI MPI_Allreduce, same buffers, best of %d\n",
                size, backend.c_str(), reps);
    std::printf("# %12s %11s %11s %8s %10s %10s %8s %6s\n", "bytes", "mpi_us", "accl_us", "t_ratio",
                "mpi_busbw", "accl_busbw", "bw_ratio", "wrong");
  }
  double factor = 2.0 * (size - 1) / size;
  if (size == 1) factor = 1;
  int allOk = 1;
  for (size_t b = minb; b <= maxb; b *= 2) {
    int count = static_cast<int>(b / 4);
    int iters = static_cast<int>(std::min<size_t>(2000, std::max<size_t>(5, (size_t(1) << 27) / b)));
    double bestM = 1e30, bestA = 1e30;
    for (int r = 0; r < reps; ++r) {
      for (int w = 0; w < 3; ++w) MPI_Allreduce(in.data(), outM.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(in.data(), outM.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double tm = (now() - t0) / iters;
      accl::Buffer bi(in.data(), count, accl::DataType::Float32), bo(outA.data(), count, accl::DataType::Float32);
      for (int w = 0; w < 3; ++w) pg->allreduce(bi, bo)->wait();
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      for (int i = 0; i < iters; ++i) pg->allreduce(bi, bo)->wait();
      double ta = (now() - t0) / iters;
      double t[2] = {tm, ta}, avg[2];
      MPI_Allreduce(t, avg, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bestM = std::min(bestM, avg[0] / size);
      bestA = std::min(bestA, avg[1] / size);
    }
    // Inputs are multiples of 1/4 below 16: sums are exact, results must be equal.
    long wrong = 0;
    for (int i = 0; i < count; ++i) wrong += outM[i] != outA[i];
    long wrongAll = 0;
    MPI_Allreduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (wrongAll) allOk = 0;
    if (rank == 0) {
      double bwM = b / bestM / 1e9 * factor, bwA = b / bestA / 1e9 * factor;
      std::printf("  %12zu %11.2f %11.2f %8.2f %10.3f %10.3f %8.2f %6ld\n", b, bestM * 1e6, bestA * 1e6,
                  bestA / bestM, bwM, bwA, bwA / bwM, wrongAll);
      std::fflush(stdout);
    }
  }
  pg->barrier()->wait();
  pg.reset();
  MPI_Finalize();
  return allOk ? 0 : 1;
}
