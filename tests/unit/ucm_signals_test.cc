// Loading UCX's memory hooks (libucs + libucm, for the verbs registration
// cache) must leave the process's signal handling as it was: UCX installs its
// own SIGSEGV/SIGBUS/SIGILL/SIGFPE handlers when libucs loads, which would
// take over crash reporting in a user's (torch) process. Its own executable:
// the check needs a process where libucs was not loaded yet.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "signal_snapshot.h"
#include "transport/net/ibverbs/mem_events.h"

using accl::core::ib::UnmapHook;

namespace {
void noop(void*, uintptr_t, uintptr_t) {}
void userHandler(int) {}
}  // namespace

TEST(UcmSignals, InstallingTheMemoryHooksChangesNoSignalDisposition) {
  ASSERT_EQ(dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD), nullptr) << "libucs is loaded already";
  // A user's own handler must survive too (torch and Python install some).
  struct sigaction mine {};
  mine.sa_handler = userHandler;
  sigaction(SIGUSR2, &mine, nullptr);
  SignalSnapshot before;

  std::string why;
  auto hook = UnmapHook::install(&noop, nullptr, &why);
  if (!hook) GTEST_SKIP() << "UCX's memory hooks are unavailable here: " << why;
  ASSERT_NE(dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD), nullptr) << "the hooks did not load libucs";

  for (auto& c : before.changed()) ADD_FAILURE() << "changed by loading UCX: " << c;
  hook.reset();
}
