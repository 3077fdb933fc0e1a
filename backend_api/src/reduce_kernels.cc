#include "accl/internal/reduce_kernels.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <type_traits>

#include "accl/errors.h"
#include "accl/internal/half.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

// The element ops (reduce_kernels_impl.inc) are lambdas over SIMD vectors,
// inlined into their loops: no function passes such a vector by value
// across an ABI boundary, which is what -Wpsabi warns about.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace accl {
namespace internal {

namespace generic {
constexpr size_t kVectorBytes = 16;
#define ACCL_KERNELS_F16C 0
#include "reduce_kernels_impl.inc"
#undef ACCL_KERNELS_F16C
}  // namespace generic

// GCC only: its target pragma gives every function of the included kernels
// (lambdas and template instances too) AVX2 and F16C. Other compilers build
// the generic kernels alone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCL_KERNELS_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace avx2 {
constexpr size_t kVectorBytes = 32;
#define ACCL_KERNELS_F16C 1
#include "reduce_kernels_impl.inc"
#undef ACCL_KERNELS_F16C
}  // namespace avx2
#pragma GCC pop_options
#else
#define ACCL_KERNELS_AVX2 0
#endif

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t, DataType, ReduceKind);
using ScaleFn = void (*)(void*, size_t, DataType, double);

bool haveAvx2() {
#if ACCL_KERNELS_AVX2
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// A variant's two entry points; null where it is not built or the CPU lacks it.
struct Kernels {
  ReduceFn reduce = nullptr;
  ScaleFn scale = nullptr;
};

Kernels variant(const std::string& name) {
  if (name == "generic") return {generic::reduceImpl, generic::scaleImpl};
#if ACCL_KERNELS_AVX2
  if (name == "avx2" && haveAvx2()) return {avx2::reduceImpl, avx2::scaleImpl};
#endif
  return {};
}

// The widest variant this CPU runs, chosen once.
const Kernels& best() {
  static const Kernels k = haveAvx2() ? variant("avx2") : variant("generic");
  return k;
}

[[noreturn]] void unknownVariant(const std::string& name) {
  throw InvalidArgument("reduction kernels '" + name + "' are not built or not supported by this CPU");
}

void checkValid(DataType t, ReduceKind k) {
  if (!isValidReduction(k, t))
    throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not defined for " + toString(t));
}

}  // namespace

std::vector<std::string> reduceVariants() {
  std::vector<std::string> v = {"generic"};
  if (haveAvx2()) v.push_back("avx2");
  return v;
}

void reduceVariant(const std::string& name, void* out, const void* a, const void* b, size_t n, DataType t,
                   ReduceKind k) {
  ReduceFn f = variant(name).reduce;
  if (!f) unknownVariant(name);
  checkValid(t, k);
  f(out, a, b, n, t, k);
}

void reduce(void* out, const void* a, const void* b, size_t n, DataType t, ReduceKind k) {
  checkValid(t, k);
  best().reduce(out, a, b, n, t, k);
}

void scale(void* buf, size_t n, DataType t, double factor) { best().scale(buf, n, t, factor); }

void scaleVariant(const std::string& name, void* buf, size_t n, DataType t, double factor) {
  ScaleFn f = variant(name).scale;
  if (!f) unknownVariant(name);
  f(buf, n, t, factor);
}

}  // namespace internal
}  // namespace accl
