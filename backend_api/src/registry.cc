#include "accl/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/diag_responder.h"
#include "accl/internal/strings.h"
#include "accl/logging.h"

#ifndef ACCL_BUILT_BACKENDS
#define ACCL_BUILT_BACKENDS ""
#endif
#ifndef ACCL_VERSION
#define ACCL_VERSION "0.0.0"
#endif

namespace accl {

namespace {

struct Registry {
  std::recursive_mutex mu;
  std::map<std::string, BackendInfo> backends;
  std::map<std::string, std::string> loadErrors;
  std::map<std::string, std::string> files;  // module files loaded, by backend
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: modules register from static init
  return *r;
}

std::string libDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&versionString), &info) && info.dli_fname) {
    std::string p = info.dli_fname;
    auto slash = p.rfind('/');
    if (slash != std::string::npos) return p.substr(0, slash);
  }
  return ".";
}

// Where backend modules are looked for: beside libaccl (a build tree, the
// wheel), its accl/ folder (installed packages keep modules out of the
// linker's path), then ACCL_PLUGIN_PATH.
std::vector<std::string> searchDirs() {
  std::vector<std::string> dirs{libDir(), libDir() + "/accl"};
  std::string path;
  try {
    path = Config::get().pluginPath;
  } catch (...) {
  }
  for (auto& d : internal::split(path, ':', /*skipEmpty=*/true)) dirs.push_back(d);
  return dirs;
}

// Tries to load libaccl-backend-<name>.so; the module registers itself.
bool loadModule(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lk(r.mu);
  if (r.backends.count(name)) return true;
  std::string errors;
  std::vector<std::string> dirs = searchDirs();
  for (auto& dir : dirs) {
    std::string file = dir + "/libaccl-backend-" + name + ".so";
    // RTLD_GLOBAL: MPI libraries load their own components and need global symbols.
    void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h) {
      if (r.backends.count(name)) {
        r.files[name] = file;
        ACCL_INFO("INIT", "loaded backend module " << file);
        return true;
      }
      errors += file + " loaded but did not register backend '" + name + "'; ";
    } else {
      const char* e = dlerror();
      std::string msg = e ? e : "unknown error";
      if (msg.find("No such file") == std::string::npos) errors += msg + "; ";
    }
  }
  if (errors.empty())
    errors = "libaccl-backend-" + name + ".so is in none of " + internal::join(dirs, ", ") +
             " (installed packages: libaccl0-" + name + "; ACCL_PLUGIN_PATH adds folders)";
  r.loadErrors[name] = errors;
  return false;
}

}  // namespace

const char* versionString() { return ACCL_VERSION; }

std::vector<std::pair<std::string, std::string>> buildInfo() {
  return {
      {"verbs transport", ACCL_BUILD_VERBS},
      {"UCX memory hooks", ACCL_BUILD_UCM},
      {"CUDA", ACCL_BUILD_CUDA},
      {"NCCL", ACCL_BUILD_NCCL},
#if defined(__clang__)
      {"compiler", "clang " __clang_version__},
#else
      {"compiler", "g++ " __VERSION__},
#endif
  };
}

std::vector<std::string> builtBackends() { return internal::split(ACCL_BUILT_BACKENDS, ',', /*skipEmpty=*/true); }

void registerBackend(BackendInfo info) {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lk(r.mu);
  r.backends.emplace(info.name, std::move(info));
}

std::shared_ptr<ProcessGroup> createProcessGroup(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank, int size,
                                                 const ProcessGroupOptions& opts) {
  Config::get();  // reports invalid ACCL_* values before anything else
  logConfigNotes();  // unknown ACCL_* names, variables of other libraries followed
  BackendInfo info;
  {
    Registry& r = registry();
    std::lock_guard<std::recursive_mutex> lk(r.mu);
    if (!loadModule(backend)) {
      std::vector<std::string> names = builtBackends();
      bool known = std::find(names.begin(), names.end(), backend) != names.end();
      for (auto& [n, i] : r.backends)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      if (!known)
        throw InvalidArgument("accl: unknown backend '" + backend +
                              "'; available in this build: " + (names.empty() ? "none" : internal::join(names, ", ")));
      throw NotSupported("accl: backend '" + backend + "' is built but its module could not be loaded: " +
                         r.loadErrors[backend]);
    }
    info = r.backends.at(backend);
  }
  std::string why;
  if (info.usable && !info.usable(&why))
    throw NotSupported("accl: backend '" + backend + "' cannot run on this host: " + why);
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("accl: invalid rank " + std::to_string(rank) + " for world size " +
                          std::to_string(size) + "; accepted: size >= 1 and 0 <= rank < size");
  if (!store && backend != "mpi")
    throw InvalidArgument("accl: backend '" + backend + "' needs a rendezvous store (got null)");
  auto pg = info.factory(store, rank, size, opts);
  internal::watchForDiagRequests(store, pg);
  ACCL_INFO("INIT", "created " << backend << " process group rank " << rank << "/" << size
                               << (opts.name.empty() ? "" : " '" + opts.name + "'"));
  return pg;
}

std::vector<BackendStatus> listBackends() {
  std::vector<BackendStatus> out;
  for (auto& name : builtBackends()) {
    BackendStatus s;
    s.name = name;
    s.loaded = loadModule(name);
    Registry& r = registry();
    std::lock_guard<std::recursive_mutex> lk(r.mu);
    if (!s.loaded) {
      s.reason = "module not loadable: " + r.loadErrors[name];
    } else {
      auto& info = r.backends.at(name);
      s.description = info.description;
      s.usable = !info.usable || info.usable(&s.reason);
      s.file = r.files.count(name) ? r.files[name] : "(linked in)";
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace accl
