// The process's list of flight recorders (accl/trace.h), which dumpTraces()
// writes; ProcessGroup registers its own.
#pragma once

#include <memory>

#include "accl/trace.h"

namespace accl {
namespace internal {

// Adds `r` (kept as a weak reference) and, the first time, sets up the
// SIGUSR1 dump where SIGUSR1 has no handler yet.
void registerRecorder(const std::shared_ptr<FlightRecorder>& r);

}  // namespace internal
}  // namespace accl
