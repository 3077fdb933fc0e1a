/* Anchor: Open MPI's own MPI_Allreduce (float32 sum), timed like accl-perf.
 * mpirun -n 2 mpi_allreduce_bench MINBYTES MAXBYTES FACTOR ITERS WARMUP
 * Prints one line per size: bytes time_us algbw_GBs busbw_GBs (rank 0). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t minb = argc > 1 ? strtoull(argv[1], 0, 10) : 8, maxb = argc > 2 ? strtoull(argv[2], 0, 10) : 1 << 20;
  double factor = argc > 3 ? atof(argv[3]) : 2;
  int iters = argc > 4 ? atoi(argv[4]) : 20, warmup = argc > 5 ? atoi(argv[5]) : 5;
  float* buf = malloc(maxb + 64);
  float* out = malloc(maxb + 64);
  for (size_t i = 0; i < maxb / 4; ++i) buf[i] = 1.0f;
  for (size_t b = minb; b <= maxb; b = (size_t)(b * factor)) {
    int count = (int)(b / 4);
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, avg;
    MPI_Allreduce(&t, &avg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    avg /= size;
    if (rank == 0) {
      double alg = (double)(count * 4) / avg / 1e9;
      printf("%zu %.3f %.4f %.4f\n", (size_t)count * 4, avg * 1e6, alg, alg * 2.0 * (size - 1) / size);
      fflush(stdout);
    }
    if (b * factor <= b) break;
  }
  free(buf);
  free(out);
  MPI_Finalize();
  return 0;
}
