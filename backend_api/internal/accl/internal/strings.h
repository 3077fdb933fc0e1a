// Small string and file helpers shared by the libraries of the SDK.
#pragma once

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// `s` without leading and trailing blanks (space, tab, CR, LF).
inline std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// The pieces of `s` between the separators `sep`, in order. Empty pieces are
// kept ("a,,b" gives 3) unless `skipEmpty`; "" gives one empty piece, or
// none with `skipEmpty`.
inline std::vector<std::string> split(const std::string& s, char sep, bool skipEmpty = false) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    std::string piece = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!skipEmpty || !piece.empty()) out.push_back(std::move(piece));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The items of `r` written with operator<<, separated by `sep`.
template <typename Range>
std::string join(const Range& r, const std::string& sep = ",") {
  std::ostringstream os;
  bool first = true;
  for (const auto& x : r) {
    if (!first) os << sep;
    os << x;
    first = false;
  }
  return os.str();
}

// A byte count in binary units: "512 B", "64 KiB", "1.5 MiB".
inline std::string sizeText(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), b == std::floor(b) ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

}  // namespace internal
}  // namespace accl
