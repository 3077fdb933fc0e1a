// --version for every ACCL tool: the tool, the ACCL release and what the
// build was compiled with (the same lines accl-info prints).
#pragma once

#include <cstdio>

#include "accl/registry.h"

namespace accl_tools {

inline void printVersion(const char* tool) {
  std::printf("%s (ACCL) %s\n", tool, accl::versionString());
  for (auto& [what, value] : accl::buildInfo()) std::printf("  %-17s %s\n", what.c_str(), value.c_str());
}

}  // namespace accl_tools
