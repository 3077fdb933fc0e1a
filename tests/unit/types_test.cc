#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <cmath>
#include <vector>
#include <type_traits>
#include <limits>
#include <cstring>
#include <random>

#include "accl/errors.h"
#include "accl/internal/half.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/types.h"

using namespace accl;

TEST(Types, SizesAndNamesRoundTrip) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1};
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    EXPECT_EQ(dataTypeSize(t), sizes[i]) << toString(t);
    EXPECT_EQ(parseDataType(toString(t)), t);
  }
  for (int i = 0; i < kNumReduceKinds; ++i)
    EXPECT_EQ(parseReduceKind(toString(static_cast<ReduceKind>(i))), static_cast<ReduceKind>(i));
}

TEST(Types, UnknownNamesListWhatIsAccepted) {
  try {
    parseDataType("float8");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("float8"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos);
  }
  EXPECT_THROW(parseReduceKind("mean"), InvalidArgument);
}

TEST(Types, ReductionValidity) {
  EXPECT_TRUE(isValidReduction(ReduceKind::BXor, DataType::Int32));
  EXPECT_TRUE(isValidReduction(ReduceKind::BAnd, DataType::Bool));
  EXPECT_FALSE(isValidReduction(ReduceKind::BOr, DataType::Float32));
  EXPECT_FALSE(isValidReduction(ReduceKind::BAnd, DataType::BFloat16));
  EXPECT_TRUE(isValidReduction(ReduceKind::Avg, DataType::Float16));
  EXPECT_FALSE(isValidReduction(ReduceKind::Avg, DataType::Int64));
  EXPECT_FALSE(isValidReduction(ReduceKind::PremulSum, DataType::Uint8));
  for (int i = 0; i < kNumDataTypes; ++i)
    for (auto k : {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Min, ReduceKind::Max})
      EXPECT_TRUE(isValidReduction(k, static_cast<DataType>(i)));
}

// The library's conversions against the compiler's _Float16, exhaustively.
TEST(Half, HalfToFloatMatchesCompilerForAllBitPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = static_cast<uint16_t>(b);
    _Float16 ref;
    std::memcpy(&ref, &h, 2);
    float want = static_cast<float>(ref), got = internal::halfToFloat(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "bits " << b;
    }
  }
}

TEST(Half, FloatToHalfRoundsLikeCompiler) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = bits(rng);
    // Bias half the samples towards the half-precision range, subnormals included.
    if (i % 2) u = (u & 0x807fffffu) | ((100u + (u >> 23) % 45u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(internal::floatToHalf(f), want) << "float bits " << u;
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(internal::floatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(internal::floatToBf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(internal::floatToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(internal::bf16ToFloat(0xc000), -2.0f);
  EXPECT_TRUE(std::isnan(internal::bf16ToFloat(internal::floatToBf16(std::nanf("")))));
}

TEST(ReduceKernels, IntegersWrapAroundAndBitwise) {
  int8_t a[3] = {100, -128, 7}, b[3] = {100, -1, 3}, out[3];
  internal::reduce(out, a, b, 3, DataType::Int8, ReduceKind::Sum);
  EXPECT_EQ(out[0], static_cast<int8_t>(-56));
  EXPECT_EQ(out[1], static_cast<int8_t>(127));
  internal::reduce(out, a, b, 3, DataType::Int8, ReduceKind::BXor);
  EXPECT_EQ(out[2], 4);
  internal::reduce(out, a, b, 3, DataType::Int8, ReduceKind::Min);
  EXPECT_EQ(out[1], -128);
  uint64_t x[1] = {~0ull}, y[1] = {2};
  internal::reduce(x, x, y, 1, DataType::Uint64, ReduceKind::Prod);
  EXPECT_EQ(x[0], ~0ull - 1);
}

namespace {
// The element op by its definition, one element at a time: the reference
// for the vectorized kernels.
template <typename T>
T referenceOp(ReduceKind k, T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (k) {
      case ReduceKind::Sum: return x + y;
      case ReduceKind::Prod: return x * y;
      case ReduceKind::Min: return std::isnan(x) ? x : std::isnan(y) ? y : (y < x ? y : x);
      case ReduceKind::Max: return std::isnan(x) ? x : std::isnan(y) ? y : (y > x ? y : x);
      default: break;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (k) {
      case ReduceKind::Sum: return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
      case ReduceKind::Prod: return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
      case ReduceKind::Min: return y < x ? y : x;
      case ReduceKind::Max: return y > x ? y : x;
      case ReduceKind::BAnd: return static_cast<T>(x & y);
      case ReduceKind::BOr: return static_cast<T>(x | y);
      case ReduceKind::BXor: return static_cast<T>(x ^ y);
      default: break;
    }
  }
  ADD_FAILURE() << "no reference for " << toString(k);
  return T{};
}

template <typename T>
bool sameValue(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return a == b;
}

// Every length from 0 to 70 (the SIMD body and every tail) and a long one,
// out of place and with the output being either input, against the
// element-by-element reference: random values with NaNs, infinities,
// negative zeros and extremes mixed in.
template <typename T>
void checkKernel(DataType t, std::vector<ReduceKind> kinds) {
  std::mt19937_64 rng(1234 + static_cast<int>(t));
  auto draw = [&]() -> T {
    if constexpr (std::is_floating_point_v<T>) {
      switch (rng() % 12) {
        case 0: return std::numeric_limits<T>::quiet_NaN();
        case 1: return std::numeric_limits<T>::infinity();
        case 2: return -std::numeric_limits<T>::infinity();
        case 3: return T(-0.0);
        default: return static_cast<T>(std::uniform_real_distribution<double>(-100, 100)(rng));
      }
    } else {
      switch (rng() % 8) {
        case 0: return std::numeric_limits<T>::max();
        case 1: return std::numeric_limits<T>::min();
        default: return static_cast<T>(rng());
      }
    }
  };
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (ReduceKind k : kinds) {
    for (size_t n : lengths) {
      std::vector<T> a(n), b(n);
      for (size_t i = 0; i < n; ++i) a[i] = draw(), b[i] = draw();
      std::vector<T> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = referenceOp(k, a[i], b[i]);
      for (const std::string& variant : internal::reduceVariants())
        for (int alias = 0; alias < 3; ++alias) {
          std::vector<T> x = a, y = b, out(n, T(7));
          T* o = alias == 0 ? out.data() : alias == 1 ? x.data() : y.data();
          internal::reduceVariant(variant, o, x.data(), y.data(), n, t, k);
          for (size_t i = 0; i < n; ++i)
            if (!sameValue(o[i], want[i])) {
              ADD_FAILURE() << variant << " kernels: " << toString(t) << " " << toString(k) << " n=" << n
                            << " alias=" << alias << " element " << i << ": " << +o[i] << ", want " << +want[i] << " ("
                            << +a[i] << ", " << +b[i] << ")";
              return;
            }
        }
    }
  }
}
}  // namespace

TEST(ReduceKernels, EveryLengthAndAliasingMatchesTheElementByElementDefinition) {
  const std::vector<ReduceKind> ints = {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Min, ReduceKind::Max,
                                        ReduceKind::BAnd, ReduceKind::BOr, ReduceKind::BXor};
  const std::vector<ReduceKind> floats = {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Min, ReduceKind::Max};
  checkKernel<int8_t>(DataType::Int8, ints);
  checkKernel<uint8_t>(DataType::Uint8, ints);
  checkKernel<int32_t>(DataType::Int32, ints);
  checkKernel<uint32_t>(DataType::Uint32, ints);
  checkKernel<int64_t>(DataType::Int64, ints);
  checkKernel<uint64_t>(DataType::Uint64, ints);
  checkKernel<float>(DataType::Float32, floats);
  checkKernel<double>(DataType::Float64, floats);
}

// The 16-bit floats: every bit pattern of `a` against random partners (NaNs,
// infinities, subnormals and the largest values included), each op computed
// in float and rounded once, against half.h's element-by-element conversions.
// Bit-exact, except which NaN a NaN op NaN gives.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void check16(DataType t) {
  std::mt19937 rng(99 + static_cast<int>(t));
  const size_t n = 65536 + 37;  // every pattern, and a tail
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint16_t>(i);
    b[i] = static_cast<uint16_t>(rng());
  }
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Min, ReduceKind::Max}) {
    for (const std::string& variant : internal::reduceVariants())
      for (int alias = 0; alias < 3; ++alias) {
        std::vector<uint16_t> x = a, y = b, out(n, 7);
        uint16_t* o = alias == 0 ? out.data() : alias == 1 ? x.data() : y.data();
        internal::reduceVariant(variant, o, x.data(), y.data(), n, t, k);
        for (size_t i = 0; i < n; ++i) {
          uint16_t want = FromF(referenceOp<float>(k, ToF(a[i]), ToF(b[i])));
          // Any NaN is right where the reference gives one: which NaN comes
          // out of NaN op NaN depends on the order the compiler gives a
          // commutative op's operands, and the CPU's own conversions (F16C)
          // keep a NaN's payload where half.h's make it the canonical one.
          if (o[i] != want && !(std::isnan(ToF(o[i])) && std::isnan(ToF(want)))) {
            ADD_FAILURE() << variant << " kernels: " << toString(t) << " " << toString(k) << " alias=" << alias
                          << " element " << i << std::hex << ": 0x" << o[i] << ", want 0x" << want << " (0x" << a[i]
                          << ", 0x" << b[i] << ")";
            return;
          }
        }
      }
  }
}

TEST(ReduceKernels, VariantsAreListedAndAnUnknownOneIsRefused) {
  auto v = internal::reduceVariants();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "generic");
  float a = 1, b = 2, o = 0;
  EXPECT_THROW(internal::reduceVariant("sse9", &o, &a, &b, 1, DataType::Float32, ReduceKind::Sum), InvalidArgument);
  std::printf("reduction kernels on this CPU:");
  for (auto& s : v) std::printf(" %s", s.c_str());
  std::printf("\n");
}

TEST(ReduceKernels, SixteenBitFloatsMatchTheScalarConversionsForEveryBitPattern) {
  check16<internal::halfToFloat, internal::floatToHalf>(DataType::Float16);
  check16<internal::bf16ToFloat, internal::floatToBf16>(DataType::BFloat16);
}

// scale(): every variant, every length 0-70 and a long one, several
// factors, against the product computed in double and rounded to the dtype
// element by element (16-bit floats: through float, with half.h).
TEST(ReduceKernels, ScaleMatchesTheElementByElementProduct) {
  std::mt19937 rng(7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  const double factors[] = {1.0 / 3, 0.5, 1e-3, 7.0, -2.5};
  auto drawFloat = [&]() -> double {
    switch (rng() % 10) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return -std::numeric_limits<double>::infinity();
      case 2: return 1e-41;  // a float subnormal
      default: return std::uniform_real_distribution<double>(-7e4, 7e4)(rng);
    }
  };
  for (const std::string& variant : internal::reduceVariants())
    for (double f : factors)
      for (size_t n : lengths) {
        std::vector<float> x32(n), want32(n);
        std::vector<double> x64(n), want64(n);
        std::vector<uint16_t> xh(n), wanth(n), xb(n), wantb(n);
        for (size_t i = 0; i < n; ++i) {
          double v = drawFloat();
          x32[i] = static_cast<float>(v);
          want32[i] = static_cast<float>(static_cast<double>(x32[i]) * f);
          x64[i] = v;
          want64[i] = v * f;
          xh[i] = static_cast<uint16_t>(rng());
          wanth[i] = internal::floatToHalf(static_cast<float>(internal::halfToFloat(xh[i]) * f));
          xb[i] = static_cast<uint16_t>(rng());
          wantb[i] = internal::floatToBf16(static_cast<float>(internal::bf16ToFloat(xb[i]) * f));
        }
        internal::scaleVariant(variant, x32.data(), n, DataType::Float32, f);
        internal::scaleVariant(variant, x64.data(), n, DataType::Float64, f);
        internal::scaleVariant(variant, xh.data(), n, DataType::Float16, f);
        internal::scaleVariant(variant, xb.data(), n, DataType::BFloat16, f);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(sameValue(x32[i], want32[i])) << variant << " float32 x" << f << " n=" << n << " i=" << i;
          ASSERT_TRUE(sameValue(x64[i], want64[i])) << variant << " float64 x" << f << " n=" << n << " i=" << i;
          ASSERT_TRUE(xh[i] == wanth[i] || (std::isnan(internal::halfToFloat(xh[i])) &&
                                            std::isnan(internal::halfToFloat(wanth[i]))))
              << variant << " float16 x" << f << " n=" << n << " i=" << i << std::hex << ": 0x" << xh[i] << " want 0x"
              << wanth[i];
          ASSERT_TRUE(xb[i] == wantb[i] || (std::isnan(internal::bf16ToFloat(xb[i])) &&
                                            std::isnan(internal::bf16ToFloat(wantb[i]))))
              << variant << " bfloat16 x" << f << " n=" << n << " i=" << i << std::hex << ": 0x" << xb[i]
              << " want 0x" << wantb[i];
        }
      }
  float v = 1;
  EXPECT_THROW(internal::scale(&v, 1, DataType::Int32, 2.0), InvalidArgument);
}

TEST(ReduceKernels, FloatsAndBool) {
  float a[2] = {1.5f, std::nanf("")}, b[2] = {-2.0f, 1.0f}, out[2];
  internal::reduce(out, a, b, 2, DataType::Float32, ReduceKind::Max);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_TRUE(std::isnan(out[1])) << "NaN propagates";
  uint8_t p[3] = {1, 0, 1}, q[3] = {1, 1, 0}, r[3];
  internal::reduce(r, p, q, 3, DataType::Bool, ReduceKind::Sum);
  EXPECT_EQ(r[0] + r[1] + r[2], 3);
  internal::reduce(r, p, q, 3, DataType::Bool, ReduceKind::Prod);
  EXPECT_EQ(r[0] + r[1] + r[2], 1);
  uint16_t h[1] = {internal::floatToHalf(0.1f)}, k[1] = {internal::floatToHalf(0.2f)};
  internal::reduce(h, h, k, 1, DataType::Float16, ReduceKind::Sum);
  _Float16 ref = static_cast<_Float16>(static_cast<float>(static_cast<_Float16>(0.1f)) +
                                       static_cast<float>(static_cast<_Float16>(0.2f)));
  uint16_t want;
  std::memcpy(&want, &ref, 2);
  EXPECT_EQ(h[0], want);
  EXPECT_THROW(internal::reduce(out, a, b, 2, DataType::Float32, ReduceKind::BAnd), InvalidArgument);
}
