// Loading UCX's memory hooks (libucs + libucm, for the verbs registration
// cache) must leave the process's signal handling as it was: UCX installs its
// own SIGSEGV/SIGBUS/SIGILL/SIGFPE handlers when libucs loads, which would
// take over crash reporting in a user's (torch) process. Its own executable:
// the check needs a process where libucs was not loaded yet.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <string>

#include "transport/ibverbs/mem_events.h"

using accl::core::ib::UnmapHook;

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

namespace {
void noop(void*, uintptr_t, uintptr_t) {}
void userHandler(int) {}

std::string describe(int s, const struct sigaction& a) {
  return std::string(strsignal(s)) + ": handler " +
         (a.sa_handler == SIG_DFL ? "default" : a.sa_handler == SIG_IGN ? "ignore" : "a function") +
         ", flags " + std::to_string(a.sa_flags);
}
}  // namespace

TEST(UcmSignals, InstallingTheMemoryHooksChangesNoSignalDisposition) {
  ASSERT_EQ(dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD), nullptr) << "libucs is loaded already";
  // A user's own handler must survive too (torch and Python install some).
  struct sigaction mine {};
  mine.sa_handler = userHandler;
  sigaction(SIGUSR2, &mine, nullptr);
  struct sigaction before[NSIG];
  bool known[NSIG] = {};  // (glibc refuses its own internal signals)
  for (int s = 1; s < NSIG; ++s) known[s] = sigaction(s, nullptr, &before[s]) == 0;

  std::string why;
  auto hook = UnmapHook::install(&noop, nullptr, &why);
  if (!hook) GTEST_SKIP() << "UCX's memory hooks are unavailable here: " << why;
  ASSERT_NE(dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD), nullptr) << "the hooks did not load libucs";

  for (int s = 1; s < NSIG; ++s) {
    struct sigaction now;
    if (!known[s] || sigaction(s, nullptr, &now) != 0) continue;
    // SA_RESTORER is glibc's own flag on whatever it installs.
    EXPECT_TRUE(now.sa_handler == before[s].sa_handler &&
                ((now.sa_flags ^ before[s].sa_flags) & ~SA_RESTORER) == 0)
        << "changed by loading UCX: " << describe(s, before[s]) << " -> " << describe(s, now);
  }
  hook.reset();
}
