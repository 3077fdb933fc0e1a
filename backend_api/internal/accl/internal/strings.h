// Small string and file helpers shared by the libraries of the SDK.
#pragma once

#include <fstream>
#include <string>

namespace accl {
namespace internal {

// The first line of a (small, usually sysfs or procfs) file; "" when it
// cannot be read.
inline std::string readFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace internal
}  // namespace accl
