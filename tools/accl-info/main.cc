// accl-info: version, backends compiled in and usable here, configuration.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/cli.h"

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/registry.h"

namespace {

void printBackends() {
  std::printf("Backends (compiled in; usable on this host):\n");
  auto list = accl::listBackends();
  if (list.empty()) std::printf("  (none)\n");
  for (auto& b : list) {
    std::printf("  %-6s %-8s %s\n", b.name.c_str(), b.usable ? "usable" : "UNUSABLE",
                b.usable ? b.description.c_str() : b.reason.c_str());
    if (b.loaded) std::printf("  %-6s %-8s module %s\n", "", "", b.file.c_str());
  }
}

void printBuild() {
  std::printf("Build:\n");
  for (auto& [what, value] : accl::buildInfo()) std::printf("  %-17s %s\n", what.c_str(), value.c_str());
}

int printConfig() {
  accl::listBackends();  // loads every module, so that its variables are listed too
  std::string error;
  std::printf("Configuration (ACCL_* environment variables):\n");
  for (auto& e : accl::configTable()) {
    const char* set = std::getenv(e.name.c_str());
    std::string eff;
    try {
      eff = accl::configValue(e.name);
    } catch (const accl::Error& x) {
      eff = "(invalid)";
      error += std::string(error.empty() ? "" : "\n") + "error: " + x.what();
    }
    std::printf("  %-20s = %-24s %s\n", e.name.c_str(), eff.c_str(), set ? "(set)" : "(default)");
    std::printf("  %-20s   type %s, default %s; accepted: %s; read by %s\n", "", e.type.c_str(), e.defaultText.c_str(),
                e.accepted.c_str(), e.owner.c_str());
    std::printf("  %-20s   %s\n", "", e.meaning.c_str());
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  return 0;
}

void printMarkdown() {
  accl::listBackends();
  std::printf("| Variable | Type | Default | Accepted values | Read by | Meaning |\n|---|---|---|---|---|---|\n");
  for (auto& e : accl::configTable())
    std::printf("| `%s` | %s | %s | %s | %s | %s |\n", e.name.c_str(), e.type.c_str(), e.defaultText.c_str(),
                e.accepted.c_str(), e.owner.c_str(), e.meaning.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool config = false, backends = false, markdown = false;
  CLI::App app{"Prints the version, the build (transports, CUDA and NCCL versions), the backends with the file "
               "each module was loaded from, and the effective configuration (with no option: all of it).",
               "accl-info"};
  app.add_flag("--config", config, "every ACCL_* variable: name, type, default, effective value, meaning");
  app.add_flag("--backends", backends, "backends compiled in, and whether each is usable on this host");
  app.add_flag("--markdown", markdown, "print the configuration table as Markdown (docs/configuration.md)");
  if (int rc = accl_tools::parseCommandLine(app, argc, argv, "accl-info"); rc >= 0) return rc;
  if (markdown) {
    printMarkdown();
    return 0;
  }
  if (!config || backends) {
    std::printf("ACCL %s\n", accl::versionString());
    printBuild();
    printBackends();
  }
  if (!backends || config) return printConfig();
  return 0;
}
