#include "accl/types.h"

#include <string>

#include "accl/errors.h"
#include "accl/internal/strings.h"

namespace accl {

namespace {
const char* const kTypeNames[kNumDataTypes] = {"int8",     "uint8",   "int32",   "uint32",
                                               "int64",    "uint64",  "float16", "bfloat16",
                                               "float32",  "float64", "bool"};
const char* const kReduceNames[kNumReduceKinds] = {"sum", "prod",       "min",  "max", "avg",
                                                   "premul_sum", "band", "bor", "bxor"};

template <size_t N>
std::string joinNames(const char* const (&names)[N]) {
  return internal::join(names, ", ");
}
}  // namespace

void throwInvalidDataType(DataType t) {
  throw InvalidArgument("invalid data type code " + std::to_string(static_cast<int>(t)));
}

const char* toString(DataType t) {
  auto i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? kTypeNames[i] : "invalid";
}

DataType parseDataType(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i)
    if (name == kTypeNames[i]) return static_cast<DataType>(i);
  throw InvalidArgument("unknown data type '" + name + "'; accepted: " + joinNames(kTypeNames));
}

bool isFloatingPoint(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}

bool isInteger(DataType t) { return !isFloatingPoint(t) && t != DataType::Bool; }

const char* toString(ReduceKind k) {
  auto i = static_cast<int>(k);
  return i >= 0 && i < kNumReduceKinds ? kReduceNames[i] : "invalid";
}

ReduceKind parseReduceKind(const std::string& name) {
  for (int i = 0; i < kNumReduceKinds; ++i)
    if (name == kReduceNames[i]) return static_cast<ReduceKind>(i);
  throw InvalidArgument("unknown reduce op '" + name + "'; accepted: " + joinNames(kReduceNames));
}

bool isValidReduction(ReduceKind op, DataType t) {
  switch (op) {
    case ReduceKind::Sum:
    case ReduceKind::Prod:
    case ReduceKind::Min:
    case ReduceKind::Max:
      return true;
    case ReduceKind::Avg:
    case ReduceKind::PremulSum:
      return isFloatingPoint(t);
    case ReduceKind::BAnd:
    case ReduceKind::BOr:
    case ReduceKind::BXor:
      return !isFloatingPoint(t);
  }
  return false;
}

std::string toString(const Device& d) {
  if (d.type == DeviceType::CPU) return "cpu";
  return "cuda:" + std::to_string(d.index);
}

}  // namespace accl
