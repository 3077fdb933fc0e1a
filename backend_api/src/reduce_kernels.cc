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

// 16-bit floats: each element op is computed in float and rounded once (to
// nearest even), four elements per step in SIMD registers: the conversions
// below are the vector forms of half.h's, checked against them by the tests.
typedef uint16_t V4u16 __attribute__((vector_size(8)));
typedef uint32_t V4u32 __attribute__((vector_size(16)));
typedef int32_t V4i32 __attribute__((vector_size(16)));
typedef float V4f __attribute__((vector_size(16)));

struct Bf16 {
  static float toFloat(uint16_t h) { return bf16ToFloat(h); }
  static uint16_t fromFloat(float f) { return floatToBf16(f); }
  static V4f toFloat(V4u16 h) { return (V4f)(__builtin_convertvector(h, V4u32) << 16); }
  static V4u16 fromFloat(V4f f) {
    V4u32 u = (V4u32)f;
    V4u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    V4u32 quiet = (u >> 16) | 0x40u;  // NaN stays NaN (quiet)
    return __builtin_convertvector(pick((V4i32)((u & 0x7fffffffu) > 0x7f800000u), quiet, rounded), V4u16);
  }
};

struct Half {
  static float toFloat(uint16_t h) { return halfToFloat(h); }
  static uint16_t fromFloat(float f) { return floatToHalf(f); }
  // Exponent and mantissa moved into float's places and rebiased; infinities
  // and NaNs get float's top exponent; zeros and subnormals become 2^-14 +
  // m * 2^-24 minus 2^-14, in normal floats only (exact, and unaffected by
  // flush-to-zero modes).
  static V4f toFloat(V4u16 h16) {
    V4u32 h = __builtin_convertvector(h16, V4u32);
    V4u32 sign = (h & 0x8000u) << 16;
    V4u32 o = (h & 0x7fffu) << 13;
    V4u32 exp = o & (0x7c00u << 13);
    o += (127u - 15u) << 23;
    o = pick((V4i32)(exp == (0x7c00u << 13)), o + ((128u - 16u) << 23), o);
    V4f sub = (V4f)(o + (1u << 23)) - (V4f)(V4u32{} + (113u << 23));
    o = pick((V4i32)(exp == 0u), (V4u32)sub, o);
    return (V4f)(o | sign);
  }
  // Overflow (from 65520 up) gives infinity and NaN a quiet NaN, both with
  // the sign; values below 2^-14 are rounded by adding 0.5 (the FPU rounds to
  // nearest even); others round their mantissa to nearest even by hand.
  static V4u16 fromFloat(V4f f) {
    V4u32 u = (V4u32)f;
    V4u32 sign = (u & 0x80000000u) >> 16;
    u &= 0x7fffffffu;
    V4u32 big = pick((V4i32)(u > 0x7f800000u), V4u32{} + 0x7e00u, V4u32{} + 0x7c00u);
    V4u32 sub = (V4u32)((V4f)u + (V4f)(V4u32{} + (126u << 23))) - (126u << 23);
    V4u32 normal = (u + ((15u - 127u) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    V4u32 r = pick((V4i32)(u < (113u << 23)), sub, normal);
    r = pick((V4i32)(u >= ((127u + 16u) << 23)), big, r);
    return __builtin_convertvector(r | sign, V4u16);
  }
};

template <typename C, typename F>
void apply16(void* out, const void* a, const void* b, size_t n, F f) {
  auto* o = static_cast<char*>(out);
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V4u16 xv, yv;
    std::memcpy(&xv, x + i * 2, 8);
    std::memcpy(&yv, y + i * 2, 8);
    V4u16 r = C::fromFloat(f(C::toFloat(xv), C::toFloat(yv)));
    std::memcpy(o + i * 2, &r, 8);
  }
  for (; i < n; ++i) {
    uint16_t xv, yv;
    std::memcpy(&xv, x + i * 2, 2);
    std::memcpy(&yv, y + i * 2, 2);
    uint16_t r = C::fromFloat(f(C::toFloat(xv), C::toFloat(yv)));
    std::memcpy(o + i * 2, &r, 2);
  }
}

template <typename C>
void reduce16(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return apply16<C>(out, a, b, n, [](auto x, auto y) { return x + y; });
    case ReduceKind::Prod: return apply16<C>(out, a, b, n, [](auto x, auto y) { return x * y; });
    case ReduceKind::Min:
      return apply16<C>(out, a, b, n, [](auto x, auto y) { return pick((x < y) | (x != x), x, y); });
    case ReduceKind::Max:
      return apply16<C>(out, a, b, n, [](auto x, auto y) { return pick((x > y) | (x != x), x, y); });
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not defined for floating-point data");
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
    case DataType::Float16: return reduce16<Half>(out, a, b, n, k);
    case DataType::BFloat16: return reduce16<Bf16>(out, a, b, n, k);
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
