// Element types, reduction operators, devices and untyped buffer views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace accl {

enum class DataType : uint8_t {
  Int8,
  Uint8,
  Int32,
  Uint32,
  Int64,
  Uint64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Bool,
};
constexpr int kNumDataTypes = 11;

// Size of one element in bytes (InvalidArgument for a code that names no type).
[[noreturn]] void throwInvalidDataType(DataType t);
inline size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::Uint8:
    case DataType::Bool:
      return 1;
    case DataType::Float16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int32:
    case DataType::Uint32:
    case DataType::Float32:
      return 4;
    case DataType::Int64:
    case DataType::Uint64:
    case DataType::Float64:
      return 8;
  }
  throwInvalidDataType(t);
}
// "float32", "bfloat16", ...; parseDataType accepts these names and throws
// InvalidArgument listing them otherwise.
const char* toString(DataType t);
DataType parseDataType(const std::string& name);
bool isFloatingPoint(DataType t);
bool isInteger(DataType t);  // signed or unsigned integers, not bool

enum class ReduceKind : uint8_t {
  Sum,
  Prod,
  Min,
  Max,
  Avg,        // sum divided by the group size; floating-point types only
  PremulSum,  // each rank's input multiplied by `scalar`, then summed; floating-point only
  BAnd,       // bitwise ops: integer types and bool only
  BOr,
  BXor,
};
constexpr int kNumReduceKinds = 9;

struct ReduceOp {
  ReduceKind kind = ReduceKind::Sum;
  double scalar = 1.0;  // used by PremulSum only

  ReduceOp() = default;
  /* implicit */ ReduceOp(ReduceKind k) : kind(k) {}
  static ReduceOp premulSum(double s) {
    ReduceOp op(ReduceKind::PremulSum);
    op.scalar = s;
    return op;
  }
};

const char* toString(ReduceKind k);
ReduceKind parseReduceKind(const std::string& name);
// Whether `op` is defined for `t`. Bool: sum/max/bor = logical or,
// prod/min/band = logical and, bxor = logical xor; avg/premul_sum undefined.
bool isValidReduction(ReduceKind op, DataType t);

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1;  // CUDA ordinal; -1 for CPU

  static Device cpu() { return Device{}; }
  static Device cuda(int ordinal) { return Device{DeviceType::CUDA, ordinal}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
};
std::string toString(const Device& d);

// A non-owning view of `count` elements of `dtype` at `data` on `device`.
// The caller keeps the memory alive until the Work of the op using it completes.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  Device device{};

  Buffer() = default;
  Buffer(void* d, size_t n, DataType t, Device dev = Device{})
      : data(d), count(n), dtype(t), device(dev) {}
  size_t bytes() const { return count * dataTypeSize(dtype); }
  // View of elements [offset, offset + n).
  Buffer slice(size_t offset, size_t n) const {
    return Buffer(static_cast<char*>(data) + offset * dataTypeSize(dtype), n, dtype, device);
  }
  // Whether this and `o` share a byte (same device, both non-empty).
  bool overlaps(const Buffer& o) const {
    auto p = reinterpret_cast<uintptr_t>(data), q = reinterpret_cast<uintptr_t>(o.data);
    return bytes() && o.bytes() && device == o.device && p < q + o.bytes() && q < p + bytes();
  }
};

}  // namespace accl
