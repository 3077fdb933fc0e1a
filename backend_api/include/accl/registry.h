// Backend discovery: createProcessGroup("accl" | "nccl" | "mpi" | "gloo", ...).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accl/process_group.h"

namespace accl {

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(
    std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts)>;

struct BackendInfo {
  std::string name;
  std::string description;
  // Whether it can run on this host now; when false, `reason` says why.
  std::function<bool(std::string* reason)> usable;
  BackendFactory factory;
};

// Registers a backend (backend modules do this from a static initializer).
// Registering a name twice keeps the first registration.
void registerBackend(BackendInfo info);

// Registers backend `name`, whose groups are `G(store, rank, size, opts)`
// unless `factory` says otherwise. `describe` runs once, at registration (it
// may ask the vendor library for its version); `usable`, when given, says
// whether the backend can run on this host. Returns true (for the macro).
template <typename G>
bool registerBackendOf(const std::string& name, const std::function<std::string()>& describe,
                       std::function<bool(std::string* reason)> usable = {}, BackendFactory factory = {}) {
  BackendInfo info;
  info.name = name;
  info.description = describe();
  info.usable = std::move(usable);
  info.factory = std::move(factory);
  if constexpr (std::is_constructible_v<G, std::shared_ptr<Store>, int, int, const ProcessGroupOptions&>) {
    if (!info.factory)
      info.factory = [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& opts) {
        return std::make_shared<G>(std::move(store), rank, size, opts);
      };
  }
  registerBackend(std::move(info));
  return true;
}

// In a backend's .cc: registers it when its module loads, e.g.
//   ACCL_REGISTER_BACKEND("gloo", GlooProcessGroup, [] { return std::string("gloo over TCP"); })
#define ACCL_REGISTER_BACKEND(NAME, GROUP, ...) \
  namespace {                                 \
  const bool acclBackendRegistered = ::accl::registerBackendOf<GROUP>(NAME, __VA_ARGS__); \
  }

// Creates a group of `size` ranks; this process is `rank`. Blocks until all
// ranks have joined through `store` (or the timeout passes). Backends built as
// modules (libaccl-backend-<name>.so) are loaded on first use from the
// directory of libaccl, then ACCL_PLUGIN_PATH. Unknown names throw
// InvalidArgument listing the known ones; a known but unusable backend throws
// NotSupported saying why.
std::shared_ptr<ProcessGroup> createProcessGroup(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank, int size,
                                                 const ProcessGroupOptions& opts = {});

// Backends this build knows about (compiled in or loadable), with usability.
struct BackendStatus {
  std::string name;
  std::string description;
  bool loaded = false;  // the module loaded
  bool usable = false;
  std::string reason;  // why not loaded / not usable
  std::string file;    // the module's file, where it was loaded from
};
std::vector<BackendStatus> listBackends();

// The names of backends compiled into this build (ACCL_WITH_* options).
std::vector<std::string> builtBackends();

const char* versionString();
// What this build was compiled with, as (what, value) lines for accl-info
// and --version: transports, CUDA and NCCL versions, hooks.
std::vector<std::pair<std::string, std::string>> buildInfo();

}  // namespace accl
