// The tools' command lines, declared with CLI11: typed options with ranges,
// generated --help, and one way to report a usage error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>

#include "version.h"

namespace accl_tools {

// Adds --version to `app` and parses argv. Returns -1 when the tool goes on,
// otherwise its exit status: 0 after --help or --version, 2 after a usage
// error (printed as "<tool>: <what was wrong>" with a pointer to --help).
inline int parseCommandLine(CLI::App& app, int argc, char** argv, const char* tool) {
  bool version = false;
  app.add_flag("--version", version, "print the version and what the build was compiled with, and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", tool, e.what(), tool);
    return 2;
  }
  if (version) {
    printVersion(tool);
    return 0;
  }
  return -1;
}

}  // namespace accl_tools
