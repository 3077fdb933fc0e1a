// Element-wise reduction kernels for every (dtype, op) pair, CPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "accl/types.h"

namespace accl {
namespace internal {

// out[i] = a[i] op b[i] for i < count. `out` may alias `a` or `b`.
// `kind` must be Sum, Prod, Min, Max, BAnd, BOr or BXor (Avg and PremulSum are
// Sum plus scale()); throws InvalidArgument for undefined (dtype, op) pairs.
// Runs the widest kernels this CPU has (on x86-64: AVX2 with F16C where
// present, else SSE2).
void reduce(void* out, const void* a, const void* b, size_t count, DataType t, ReduceKind kind);

// The kernel variants this CPU runs ("generic", and "avx2" where built and
// supported), and reduce() with one of them (tests compare them).
std::vector<std::string> reduceVariants();
void reduceVariant(const std::string& variant, void* out, const void* a, const void* b, size_t count, DataType t,
                   ReduceKind kind);

// buf[i] = buf[i] * factor (floating-point types only), computed in double
// and rounded to the dtype (16-bit ones through float).
void scale(void* buf, size_t count, DataType t, double factor);
void scaleVariant(const std::string& variant, void* buf, size_t count, DataType t, double factor);

// The element-wise op a backend should run for `op`: Avg and PremulSum reduce with Sum.
inline ReduceKind elementwiseKind(ReduceKind op) {
  return (op == ReduceKind::Avg || op == ReduceKind::PremulSum) ? ReduceKind::Sum : op;
}

// Completes a Sum (elementwiseKind) reduction of `op` over `groupSize` ranks:
// divides by groupSize for Avg, multiplies by op.scalar for PremulSum (the
// sum of scalar * x is scalar times the sum of x); nothing for other kinds.
inline void finishReduce(const ReduceOp& op, void* out, size_t count, DataType t, int groupSize) {
  if (op.kind == ReduceKind::Avg) scale(out, count, t, 1.0 / groupSize);
  else if (op.kind == ReduceKind::PremulSum) scale(out, count, t, op.scalar);
}

}  // namespace internal
}  // namespace accl
