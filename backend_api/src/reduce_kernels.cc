#include "accl/internal/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "accl/errors.h"
#include "accl/internal/half.h"

namespace accl {
namespace internal {

namespace {

template <typename T, typename F>
void apply(void* out, const void* a, const void* b, size_t n, F f) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

// Integers: sum and prod wrap modulo 2^bits (computed unsigned, no UB).
template <typename T>
void reduceInt(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  using U = std::make_unsigned_t<T>;
  switch (k) {
    case ReduceKind::Sum:
      return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(U(x) + U(y)); });
    case ReduceKind::Prod:
      return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(U(x) * U(y)); });
    case ReduceKind::Min: return apply<T>(out, a, b, n, [](T x, T y) { return std::min(x, y); });
    case ReduceKind::Max: return apply<T>(out, a, b, n, [](T x, T y) { return std::max(x, y); });
    case ReduceKind::BAnd: return apply<T>(out, a, b, n, [](T x, T y) { return T(x & y); });
    case ReduceKind::BOr: return apply<T>(out, a, b, n, [](T x, T y) { return T(x | y); });
    case ReduceKind::BXor: return apply<T>(out, a, b, n, [](T x, T y) { return T(x ^ y); });
    default: break;
  }
  throw InvalidArgument(std::string("reduce op ") + toString(k) + " is not element-wise");
}

template <typename T>
void reduceFloat(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return apply<T>(out, a, b, n, [](T x, T y) { return x + y; });
    case ReduceKind::Prod: return apply<T>(out, a, b, n, [](T x, T y) { return x * y; });
    // NaN propagates, as in NCCL and torch.
    case ReduceKind::Min:
      return apply<T>(out, a, b, n, [](T x, T y) { return (x < y || std::isnan(x)) ? x : y; });
    case ReduceKind::Max:
      return apply<T>(out, a, b, n, [](T x, T y) { return (x > y || std::isnan(x)) ? x : y; });
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
  auto f = [&](auto op) {
    apply<uint8_t>(out, a, b, n, [op](uint8_t x, uint8_t y) {
      return static_cast<uint8_t>(op(x != 0, y != 0) ? 1 : 0);
    });
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
