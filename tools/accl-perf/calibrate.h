// accl-perf --calibrate: the cost model's parameters, measured.
#pragma once

#include <string>

#include "accl/process_group.h"

namespace accl_perf {

struct CalibrateArgs {
  std::string file;              // the tuning file to write
  int peer = -1;                 // rank 0 measures with this rank (-1: the last)
  std::string transport = "tcp"; // the link the measurement crosses, as recorded
};

// Every rank calls it; rank 0 writes the file. Returns the exit status.
int calibrate(accl::ProcessGroup& pg, const CalibrateArgs& a);

}  // namespace accl_perf
