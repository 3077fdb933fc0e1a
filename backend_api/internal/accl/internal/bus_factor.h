// The bus bandwidth factor of an op on n ranks, as nccl-tests defines it: the
// share of the op's bytes that crosses each rank's link (busbw = algbw x this).
// accl-perf's busbw column and the ACCL_STATS table both use it.
#pragma once

#include "accl/process_group.h"

namespace accl {
namespace internal {

inline double busFactor(OpType op, int n) {
  switch (op) {
    case OpType::Allreduce: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case OpType::Allgather:
    case OpType::Allgatherv:
    case OpType::ReduceScatter:
    case OpType::ReduceScatterv:
    case OpType::Alltoall:
    case OpType::Alltoallv:
    case OpType::Gather:
    case OpType::Scatter: return n > 1 ? double(n - 1) / n : 0;
    case OpType::Barrier: return 0;
    default: return 1;  // broadcast, reduce, send/recv
  }
}

}  // namespace internal
}  // namespace accl
