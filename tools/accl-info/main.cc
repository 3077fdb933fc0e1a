// accl-info: version, backends compiled in and usable here, configuration.
#include "../common/version.h"
#include <cstdio>
#include <cstring>
#include <string>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/registry.h"

namespace {

void usage() {
  std::printf(
      "usage: accl-info [--config] [--backends] [--markdown] [--version]\n"
      "  (no option)  version, build (transports, CUDA and NCCL versions), backends with the\n"
      "               file each module was loaded from, and the effective configuration\n"
      "  --config     every ACCL_* variable: name, type, default, effective value, meaning\n"
      "  --backends   backends compiled in, and whether each is usable on this host\n"
      "  --markdown   print the configuration table as Markdown (docs/configuration.md)\n");
}

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
  const accl::Config* cfg = nullptr;
  std::string error;
  try {
    cfg = &accl::Config::get();
  } catch (const accl::Error& e) {
    error = e.what();
  }
  std::printf("Configuration (ACCL_* environment variables):\n");
  for (auto& e : accl::configTable()) {
    const char* set = std::getenv(e.name);
    std::string eff = cfg ? cfg->valueText(e.name) : "?";
    std::printf("  %-20s = %-24s %s\n", e.name, eff.c_str(), set ? "(set)" : "(default)");
    std::printf("  %-20s   type %s, default %s; accepted: %s\n", "", e.type, e.defaultText, e.accepted);
    std::printf("  %-20s   %s\n", "", e.meaning);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

void printMarkdown() {
  std::printf("| Variable | Type | Default | Accepted values | Meaning |\n|---|---|---|---|---|\n");
  for (auto& e : accl::configTable())
    std::printf("| `%s` | %s | %s | %s | %s |\n", e.name, e.type, e.defaultText, e.accepted, e.meaning);
}

}  // namespace

int main(int argc, char** argv) {
  if (accl_tools::printVersionIfAsked(argc, argv, "accl-info")) return 0;
  bool config = false, backends = false, markdown = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config")) config = true;
    else if (!std::strcmp(argv[i], "--backends")) backends = true;
    else if (!std::strcmp(argv[i], "--markdown")) markdown = true;
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "accl-info: unknown option '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
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
