#include "accl/internal/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accl/errors.h"
#include "accl/internal/half.h"

// The element ops below are lambdas over 64-byte vectors, always inlined
// into apply(): no function passes such a vector by value across an ABI
// boundary, which is what -Wpsabi warns about.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace accl {
namespace internal {

namespace {

// x where `m` holds, else y: on single elements a plain choice; on vectors
// (m: a lane mask of all ones or zeros) a bitwise blend, which the compiler
// keeps in SIMD registers (a vector ?: on floats becomes lane-by-lane
// branches).
template <typename M, typename V>
inline V pick(M m, V x, V y) {
  if constexpr (std::is_arithmetic_v<V>) {
    return m ? x : y;
  } else {
    return (V)(((M)x & m) | ((M)y & ~m));
  }
}

// out[i] = f(a[i], b[i]). `f` is generic: it is called on vectors of one
// cache line of elements (GCC's vector extension, which the compiler maps to
// the target's SIMD registers: 4 float lanes per instruction with SSE2) and
// on single elements for the tail. Each line of `a` and `b` is loaded before
// its result is stored, so `out` may be `a` or `b`. (A plain loop over the
// three pointers stays scalar at -O2: the compiler would need alias checks.)
constexpr size_t kVectorBytes = 16;
template <typename T, typename F>
void apply(void* out, const void* a, const void* b, size_t n, F f) {
  typedef T Line __attribute__((vector_size(kVectorBytes)));
  constexpr size_t kLanes = kVectorBytes / sizeof(T);
  auto* o = static_cast<char*>(out);
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Line xv, yv;
    std::memcpy(&xv, x + i * sizeof(T), sizeof(Line));
    std::memcpy(&yv, y + i * sizeof(T), sizeof(Line));
    Line r = f(xv, yv);
    std::memcpy(o + i * sizeof(T), &r, sizeof(Line));
  }
  for (; i < n; ++i) {
    T xv, yv;
    std::memcpy(&xv, x + i * sizeof(T), sizeof(T));
    std::memcpy(&yv, y + i * sizeof(T), sizeof(T));
    T r = f(xv, yv);
    std::memcpy(o + i * sizeof(T), &r, sizeof(T));
  }
}

// Integers: sum, prod and the bitwise ops are computed on the unsigned type
// (they wrap modulo 2^bits, no UB; the bits are the signed result's); min and
// max compare as the type itself.
template <typename T>
void reduceInt(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  using U = std::make_unsigned_t<T>;
  switch (k) {
    case ReduceKind::Sum: return apply<U>(out, a, b, n, [](auto x, auto y) { return x + y; });
    case ReduceKind::Prod: return apply<U>(out, a, b, n, [](auto x, auto y) { return x * y; });
    case ReduceKind::Min: return apply<T>(out, a, b, n, [](auto x, auto y) { return pick(x < y, x, y); });
    case ReduceKind::Max: return apply<T>(out, a, b, n, [](auto x, auto y) { return pick(x > y, x, y); });
    case ReduceKind::BAnd: return apply<U>(out, a, b, n, [](auto x, auto y) { return x & y; });
    case ReduceKind::BOr: return apply<U>(out, a, b, n, [](auto x, auto y) { return x | y; });
    case ReduceKind::BXor: return apply<U>(out, a, b, n, [](auto x, auto y) { return x ^ y; });
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not element-wise");
}

template <typename T>
void reduceFloat(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return apply<T>(out, a, b, n, [](auto x, auto y) { return x + y; });
    case ReduceKind::Prod: return apply<T>(out, a, b, n, [](auto x, auto y) { return x * y; });
    // NaN propagates, as in NCCL and torch (x != x: x is NaN; y's NaN wins
    // when x is not less).
    case ReduceKind::Min:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return pick((x < y) | (x != x), x, y); });
    case ReduceKind::Max:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return pick((x > y) | (x != x), x, y); });
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + toString(k) +
                        " is not defined for floating-point data");
}

// 16-bit floats: each element op is computed in float and rounded once.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void reduce16(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  constexpr size_t kBlock = 256;
  float fx[kBlock], fy[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) {
      fx[i] = ToF(x[base + i]);
      fy[i] = ToF(y[base + i]);
    }
    reduceFloat<float>(fx, fx, fy, m, k);
    for (size_t i = 0; i < m; ++i) o[base + i] = FromF(fx[i]);
  }
}

void reduceBool(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  auto f = [&](auto op) {  // element by element (rare; not vectorized)
    auto* o = static_cast<uint8_t*>(out);
    auto* x = static_cast<const uint8_t*>(a);
    auto* y = static_cast<const uint8_t*>(b);
    for (size_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(op(x[i] != 0, y[i] != 0) ? 1 : 0);
  };
  switch (k) {
    case ReduceKind::Sum:
    case ReduceKind::Max:
    case ReduceKind::BOr: return f([](bool x, bool y) { return x || y; });
    case ReduceKind::Prod:
    case ReduceKind::Min:
    case ReduceKind::BAnd: return f([](bool x, bool y) { return x && y; });
    case ReduceKind::BXor: return f([](bool x, bool y) { return x != y; });
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not defined for bool");
}

}  // namespace

void reduce(void* out, const void* a, const void* b, size_t n, DataType t, ReduceKind k) {
  if (!isValidReduction(k, t))
    throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not defined for " +
                          toString(t));
  switch (t) {
    case DataType::Int8: return reduceInt<int8_t>(out, a, b, n, k);
    case DataType::Uint8: return reduceInt<uint8_t>(out, a, b, n, k);
    case DataType::Int32: return reduceInt<int32_t>(out, a, b, n, k);
    case DataType::Uint32: return reduceInt<uint32_t>(out, a, b, n, k);
    case DataType::Int64: return reduceInt<int64_t>(out, a, b, n, k);
    case DataType::Uint64: return reduceInt<uint64_t>(out, a, b, n, k);
    case DataType::Float16: return reduce16<halfToFloat, floatToHalf>(out, a, b, n, k);
    case DataType::BFloat16: return reduce16<bf16ToFloat, floatToBf16>(out, a, b, n, k);
    case DataType::Float32: return reduceFloat<float>(out, a, b, n, k);
    case DataType::Float64: return reduceFloat<double>(out, a, b, n, k);
    case DataType::Bool: return reduceBool(out, a, b, n, k);
  }
  throw InvalidArgument("invalid data type");
}

void scale(void* buf, size_t n, DataType t, double factor) {
  switch (t) {
    case DataType::Float16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i)
        p[i] = floatToHalf(static_cast<float>(halfToFloat(p[i]) * factor));
      return;
    }
    case DataType::BFloat16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i)
        p[i] = floatToBf16(static_cast<float>(bf16ToFloat(p[i]) * factor));
      return;
    }
    case DataType::Float32: {
      auto* p = static_cast<float*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] * factor);
      return;
    }
    case DataType::Float64: {
      auto* p = static_cast<double*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] *= factor;
      return;
    }
    default: break;
  }
  throw InvalidArgument(std::string("scaling is not defined for dtype ") + toString(t));
}

}  // namespace internal
}  // namespace accl
