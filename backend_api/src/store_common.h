// Helpers shared by the store implementations.
#pragma once

#include <chrono>
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

}  // namespace detail
}  // namespace accl
