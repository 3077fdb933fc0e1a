// Notice of memory leaving the process's address space, for the verbs
// registration cache: a registration pins the pages it was made on, so a
// buffer freed and allocated again at the same address would be sent from the
// old pages unless its registration is dropped when the memory goes.
//
// The events come from UCX's memory hooks (libucm, loaded at run time with
// libucs): they patch munmap, mremap, madvise, brk/sbrk, shmdt and mmap over
// a mapping (MAP_FIXED) in the C library itself, so frees inside glibc (a
// large free() is an internal munmap) are seen too. Open MPI and UCX keep
// their own registration caches coherent the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace accl {
namespace core {
namespace ib {

class UnmapHook {
 public:
  // Called before [start, end) is unmapped (or its pages are dropped), in the
  // thread doing it, possibly inside malloc/free: it must not allocate, free,
  // take a lock that code which allocates may hold, or block.
  using Fn = void (*)(void* arg, uintptr_t start, uintptr_t end);

  // Installs `fn(arg, ...)`; null with *why when the hooks are unavailable
  // (no libucm, or it could not patch this process). Removing it (the
  // destructor) waits for running calls of it to return.
  static std::unique_ptr<UnmapHook> install(Fn fn, void* arg, std::string* why);
  ~UnmapHook();

  UnmapHook(const UnmapHook&) = delete;
  UnmapHook& operator=(const UnmapHook&) = delete;

 private:
  friend struct UnmapHookAccess;
  UnmapHook() = default;
  Fn fn_ = nullptr;
  void* arg_ = nullptr;
};

}  // namespace ib
}  // namespace core
}  // namespace accl
