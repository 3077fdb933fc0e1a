#include "transport/net/ibverbs/mem_events.h"

#include <dlfcn.h>
#include <signal.h>

#include <cstdint>
#include <cstring>
#include <mutex>

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

#ifdef ACCL_HAVE_UCM
#include <ucm/api/ucm.h>
#endif

namespace accl {
namespace core {
namespace ib {

#ifdef ACCL_HAVE_UCM
namespace {
using SetFn = ucs_status_t (*)(int, int, ucm_event_callback_t, void*);
using UnsetFn = void (*)(int, ucm_event_callback_t, void*);

struct Ucm {
  SetFn set = nullptr;
  UnsetFn unset = nullptr;
  std::string error;
};

// Loading libucs runs UCX's initialisation, which installs its own handlers
// for SIGSEGV, SIGBUS, SIGILL, SIGFPE (UCX_HANDLE_ERRORS) in the process. A
// communication library must not change how the user's process (a torch
// job, say) handles signals: every disposition is put back as it was.
void* dlopenKeepingSignals(const char* name) {
  struct sigaction before[NSIG];
  bool saved[NSIG] = {};
  for (int s = 1; s < NSIG; ++s) saved[s] = sigaction(s, nullptr, &before[s]) == 0;
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction now;
    if (!saved[s] || sigaction(s, nullptr, &now) != 0) continue;
    // (glibc adds SA_RESTORER to whatever it installs: not a change.)
    if (now.sa_handler != before[s].sa_handler ||
        ((now.sa_flags ^ before[s].sa_flags) & ~SA_RESTORER) != 0 ||
        std::memcmp(&now.sa_mask, &before[s].sa_mask, sizeof(now.sa_mask)) != 0)
      sigaction(s, &before[s], nullptr);
  }
  return h;
}

const Ucm& ucm() {
  static Ucm u;
  static std::once_flag once;
  std::call_once(once, [] {
    // libucm resolves symbols of libucs (its module loader), so libucs is
    // loaded, which brings libucm in as its dependency. Neither is unloaded.
    void* h = dlopenKeepingSignals("libucs.so.0");
    if (!h) {
      const char* e = dlerror();
      u.error = std::string("UCX's libucs.so.0 and libucm.so.0 cannot be loaded (") + (e ? e : "?") +
                "); install libucx0 (Open MPI depends on it)";
      return;
    }
    u.set = reinterpret_cast<SetFn>(dlsym(h, "ucm_set_event_handler"));
    u.unset = reinterpret_cast<UnsetFn>(dlsym(h, "ucm_unset_event_handler"));
    if (!u.set || !u.unset) {
      u.set = nullptr;
      u.error = "libucm.so.0 lacks ucm_set_event_handler";
    }
  });
  return u;
}
}  // namespace
#endif

struct UnmapHookAccess {
#ifdef ACCL_HAVE_UCM
  static void callback(ucm_event_type_t type, ucm_event_t* ev, void* self) {
    if (type != UCM_EVENT_VM_UNMAPPED) return;
    auto* h = static_cast<UnmapHook*>(self);
    auto start = reinterpret_cast<uintptr_t>(ev->vm_unmapped.address);
    h->fn_(h->arg_, start, start + ev->vm_unmapped.size);
  }
#endif
};

std::unique_ptr<UnmapHook> UnmapHook::install(Fn fn, void* arg, std::string* why) {
#ifdef ACCL_HAVE_UCM
  const Ucm& u = ucm();
  if (!u.set) {
    *why = u.error;
    return nullptr;
  }
  std::unique_ptr<UnmapHook> h(new UnmapHook);
  h->fn_ = fn;
  h->arg_ = arg;
  // Priority -1: before the memory goes (UCM calls unmap handlers first anyway).
  ucs_status_t st = u.set(UCM_EVENT_VM_UNMAPPED, -1, &UnmapHookAccess::callback, h.get());
  if (st != UCS_OK) {
    *why = "UCX's memory hooks could not be installed in this process (ucm_set_event_handler: status " +
           std::to_string(static_cast<int>(st)) + "; see UCX_MEM_* settings)";
    return nullptr;
  }
  return h;
#else
  (void)fn;
  (void)arg;
  *why = "this build has no memory hooks (UCX's ucm/api/ucm.h, package libucx-dev, was missing at build time)";
  return nullptr;
#endif
}

UnmapHook::~UnmapHook() {
#ifdef ACCL_HAVE_UCM
  // UCM removes a handler under the write side of the lock its dispatch
  // holds for reading: no call of it runs once this returns.
  ucm().unset(UCM_EVENT_VM_UNMAPPED, &UnmapHookAccess::callback, this);
#endif
}

}  // namespace ib
}  // namespace core
}  // namespace accl
