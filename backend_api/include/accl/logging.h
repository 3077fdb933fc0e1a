// Rank-prefixed logging controlled by ACCL_DEBUG / ACCL_DEBUG_SUBSYS.
#pragma once

#include <atomic>
#include <sstream>
#include <string>

#include "accl/config.h"

namespace accl {

// Whether messages of `level` for `subsys` are printed.
bool logEnabled(LogLevel level, const char* subsys);
namespace internal {
// The most verbose level that can print: Trace until logEnabled() has read
// the configuration, then ACCL_DEBUG's (at least Warn). Lets ACCL_LOG skip
// the call for trace lines on every op.
extern std::atomic<int> logCeiling;
}  // namespace internal
inline bool logMayPrint(LogLevel level) {
  return static_cast<int>(level) <= internal::logCeiling.load(std::memory_order_relaxed);
}
// Prints one line
//   "<UTC time, ms> <host>:<pid>:<tid> [rank R/N] ACCL <LEVEL> <subsys>: <msg>"
// to stderr (or ACCL_DEBUG_FILE). Before the first group the rank is the
// launcher's (RANK), marked "(launcher)"; without one it is left out.
// Thread-safe; lines never interleave.
void logLine(LogLevel level, const char* subsys, const std::string& msg);
// The prefix of a log line, up to the rank (for other line-oriented outputs).
std::string logPrefix();
// Sets the rank shown in the prefix (the first communicator's global rank).
void setLogRank(int rank, int size);

}  // namespace accl

#define ACCL_LOG(level, subsys, expr)                                  \
  do {                                                                 \
    if (::accl::logMayPrint(::accl::LogLevel::level) &&               \
        ::accl::logEnabled(::accl::LogLevel::level, subsys)) {         \
      std::ostringstream accl_log_os_;                                 \
      accl_log_os_ << expr;                                            \
      ::accl::logLine(::accl::LogLevel::level, subsys, accl_log_os_.str()); \
    }                                                                  \
  } while (0)
#define ACCL_WARN(subsys, expr) ACCL_LOG(Warn, subsys, expr)
#define ACCL_INFO(subsys, expr) ACCL_LOG(Info, subsys, expr)
#define ACCL_TRACE(subsys, expr) ACCL_LOG(Trace, subsys, expr)
