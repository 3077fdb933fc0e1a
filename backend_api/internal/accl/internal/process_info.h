// Facts about this process that logs, dumps and file names use.
#pragma once

#include <unistd.h>

#include <string>

namespace accl {
namespace internal {

// This host's name ("" when the kernel gives none).
inline std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// `pattern` with %h replaced by the host name, %p by the pid and, when
// rank >= 0, %r by the rank. *perProcess (may be null) says whether %p or %r
// was there, i.e. whether processes of one host get different names.
inline std::string expandPathPattern(const std::string& pattern, int rank, bool* perProcess) {
  std::string out;
  bool distinct = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char n = i + 1 < pattern.size() ? pattern[i + 1] : 0;
    if (pattern[i] == '%' && n == 'h') {
      out += hostName();
    } else if (pattern[i] == '%' && n == 'p') {
      out += std::to_string(getpid());
      distinct = true;
    } else if (pattern[i] == '%' && n == 'r' && rank >= 0) {
      out += std::to_string(rank);
      distinct = true;
    } else {
      out += pattern[i];
      continue;
    }
    ++i;
  }
  if (perProcess) *perProcess = distinct;
  return out;
}

}  // namespace internal
}  // namespace accl
