// Rank-prefixed logging controlled by ACCL_DEBUG / ACCL_DEBUG_SUBSYS.
#pragma once

#include <sstream>
#include <string>

#include "accl/config.h"

namespace accl {

// Whether messages of `level` for `subsys` are printed.
bool logEnabled(LogLevel level, const char* subsys);
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
    if (::accl::logEnabled(::accl::LogLevel::level, subsys)) {         \
      std::ostringstream accl_log_os_;                                 \
      accl_log_os_ << expr;                                            \
      ::accl::logLine(::accl::LogLevel::level, subsys, accl_log_os_.str()); \
    }                                                                  \
  } while (0)
#define ACCL_WARN(subsys, expr) ACCL_LOG(Warn, subsys, expr)
#define ACCL_INFO(subsys, expr) ACCL_LOG(Info, subsys, expr)
#define ACCL_TRACE(subsys, expr) ACCL_LOG(Trace, subsys, expr)
