// --version for every ACCL tool: the tool, the ACCL release and what the
// build was compiled with (the same lines accl-info prints).
#pragma once

#include <cstdio>
#include <cstring>

#include "accl/registry.h"

namespace accl_tools {

// Prints the version and returns true when argv holds --version.
inline bool printVersionIfAsked(int argc, char** argv, const char* tool) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") != 0) continue;
    std::printf("%s (ACCL) %s\n", tool, accl::versionString());
    for (auto& [what, value] : accl::buildInfo()) std::printf("  %-17s %s\n", what.c_str(), value.c_str());
    return true;
  }
  return false;
}

}  // namespace accl_tools
