// The process's list of flight recorders (accl/trace.h), which dumpTraces()
// writes; ProcessGroup registers its own.
#pragma once

#include <memory>
#include <string>

#include "accl/trace.h"

namespace accl {
namespace internal {

// Adds `r` (kept as a weak reference) and, the first time, sets up the
// SIGUSR1 dump where SIGUSR1 has no handler yet.
void registerRecorder(const std::shared_ptr<FlightRecorder>& r);

// The recorder's clock (trace.cc): whether its ticker is parked (no op for
// a while; the next op reads the clock and wakes it), and after how many
// idle ticks it parks (default 1000, i.e. 1-4 s). For tests.
bool traceTickerParked();

// The flight recorder dump of this process (the file dumpTraces() writes) as
// text, each group's last `maxEntries` ops (0: all); "" when no recorder is live.
std::string traceDumpJson(const std::string& reason, size_t maxEntries, int indent);
void setTraceTickerParkAfter(int ticks);

}  // namespace internal
}  // namespace accl
