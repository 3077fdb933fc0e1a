// The element-wise reduction kernels' throughput, per variant the CPU runs
// (generic: 16-byte vectors; avx2: 32-byte vectors with F16C), beside a
// plain element-by-element loop over the same buffers (what the kernels
// replace: half.h's scalar conversions for the 16-bit floats), in one run.
// In place (out = a, as the shared-memory path runs) on a buffer that fits in
// L2 and one that does not. GB/s of the output vector.
//   accl-reduce-bench [--ops sum,max] [--small 256K] [--large 64M] [--seconds 0.3]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "accl/internal/half.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/types.h"

namespace {

using namespace accl;

// The plain loop: one element at a time, 16-bit floats through half.h.
template <typename T>
void plainLoop(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  if (k == ReduceKind::Sum)
    for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(x[i] + y[i]);
  else
    for (size_t i = 0; i < n; ++i) o[i] = x[i] > y[i] ? x[i] : y[i];
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void plainLoop16(void* out, const void* a, const void* b, size_t n, ReduceKind k) {
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    float p = ToF(x[i]), q = ToF(y[i]);
    o[i] = FromF(k == ReduceKind::Sum ? p + q : (p > q ? p : q));
  }
}

void plain(void* out, const void* a, const void* b, size_t n, DataType t, ReduceKind k) {
  switch (t) {
    case DataType::Float32: return plainLoop<float>(out, a, b, n, k);
    case DataType::Float64: return plainLoop<double>(out, a, b, n, k);
    case DataType::Int32: return plainLoop<int32_t>(out, a, b, n, k);
    case DataType::Float16: return plainLoop16<internal::halfToFloat, internal::floatToHalf>(out, a, b, n, k);
    case DataType::BFloat16: return plainLoop16<internal::bf16ToFloat, internal::floatToBf16>(out, a, b, n, k);
    default: break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accl-reduce-bench: the reduction kernels' GB/s per variant, beside a plain loop"};
  std::vector<std::string> ops = {"sum", "max"};
  std::vector<std::string> dtypes = {"float32", "bfloat16", "float16", "float64", "int32"};
  size_t small = 256 << 10, large = 64 << 20;
  double seconds = 0.3;
  app.add_option("--ops", ops, "sum, max")->delimiter(',');
  app.add_option("--dtypes", dtypes, "float32, bfloat16, float16, float64, int32")->delimiter(',');
  app.add_option("--small", small, "bytes of the cache-resident case")->transform(CLI::AsSizeValue(false));
  app.add_option("--large", large, "bytes of the memory-bound case")->transform(CLI::AsSizeValue(false));
  app.add_option("--seconds", seconds, "time per cell")->check(CLI::Range(0.01, 100.0));
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> variants = internal::reduceVariants();
  std::printf("# in-place reductions (out = a), GB/s of the output; kernels: plain loop");
  for (auto& v : variants) std::printf(", %s", v.c_str());
  std::printf("\n# %-9s %-4s %10s %10s", "dtype", "op", "bytes", "plain");
  for (auto& v : variants) std::printf(" %10s %8s", v.c_str(), "x plain");
  std::printf("\n");
  for (const std::string& dn : dtypes) {
    DataType t;
    try {
      t = parseDataType(dn);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "accl-reduce-bench: --dtypes: %s\n", e.what());
      return 2;
    }
    for (const std::string& on : ops) {
      if (on != "sum" && on != "max") {
        std::fprintf(stderr, "accl-reduce-bench: --ops: '%s' is not sum or max\n", on.c_str());
        return 2;
      }
      ReduceKind k = on == "sum" ? ReduceKind::Sum : ReduceKind::Max;
      for (size_t bytes : {small, large}) {
        size_t n = bytes / dataTypeSize(t);
        std::vector<uint8_t> a(n * dataTypeSize(t)), b(a.size());
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7), b[i] = static_cast<uint8_t>(i * 13);
        auto rate = [&](auto&& run) {
          run();  // warm
          int reps = 0;
          auto t0 = std::chrono::steady_clock::now();
          double s = 0;
          do {
            run();
            ++reps;
            s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          } while (s < seconds);
          return static_cast<double>(bytes) * reps / s / 1e9;
        };
        // The values drift as the buffer is reduced into repeatedly; reset
        // them between cells so every kernel sees the same kind of data.
        std::vector<uint8_t> a0 = a;
        double base = rate([&] { plain(a.data(), a.data(), b.data(), n, t, k); });
        std::printf("  %-9s %-4s %10zu %10.2f", dn.c_str(), on.c_str(), bytes, base);
        for (auto& v : variants) {
          a = a0;
          double r = rate([&] { internal::reduceVariant(v, a.data(), a.data(), b.data(), n, t, k); });
          std::printf(" %10.2f %8.2f", r, r / base);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
