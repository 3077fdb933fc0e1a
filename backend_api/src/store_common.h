// Helpers shared by the store implementations.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "accl/errors.h"
#include "accl/store.h"

namespace accl {
namespace detail {

inline std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size() && i < 8; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > 8) s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s + "]";
}

inline std::string waitTimeoutMessage(const std::string& store, const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) {
  return "accl " + store + ": timed out after " + std::to_string(timeout.count()) +
         " ms waiting for keys " + joinKeys(keys);
}

inline int64_t parseCounter(const std::string& key, const Bytes& v) {
  std::string s(v.begin(), v.end());
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0')
    throw InvalidArgument("accl store: add() on key '" + key +
                          "' whose value is not an integer written by add()");
  return x;
}

// The value add(key, delta) stores: the counter (0 when absent) plus delta;
// InvalidArgument when that leaves int64.
inline int64_t addCounter(const std::string& key, const Bytes* current, int64_t delta) {
  int64_t base = current ? parseCounter(key, *current) : 0, out;
  if (__builtin_add_overflow(base, delta, &out))
    throw InvalidArgument("accl store: add(" + key + ", " + std::to_string(delta) + ") on " + std::to_string(base) +
                          " leaves the range of a 64-bit integer");
  return out;
}

}  // namespace detail
}  // namespace accl
