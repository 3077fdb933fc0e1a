// The accl-diag --store watch (diag_responder.cc) never owns a group: the
// last reference the user lets go of destroys the group there and then, on
// that thread, even while the watch queries the group's store every
// millisecond. (A watch that held the group during its query left the group's
// teardown to its own thread: late, or at exit never, or racing the process's
// static destructors.)
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "accl/config.h"
#include "accl/registry.h"
#include "accl/store.h"

using namespace accl;
using namespace std::chrono_literals;

namespace {

std::atomic<int> gDestroyed{0}, gDestroyedElsewhere{0};
std::thread::id gOwner;

struct Probe : ProcessGroup {
  Probe(std::shared_ptr<Store> s, int rank, int size, const ProcessGroupOptions& o)
      : ProcessGroup(rank, size, "diag-watch-probe", o), store(std::move(s)) {}
  ~Probe() override {
    if (std::this_thread::get_id() != gOwner) ++gDestroyedElsewhere;
    ++gDestroyed;
  }
  std::shared_ptr<Store> store;
};

constexpr char kFilter[] = "DiagWatch.AGroupIsDestroyedByItsLastOwnerNotByTheWatch";

}  // namespace

TEST(DiagWatch, AGroupIsDestroyedByItsLastOwnerNotByTheWatch) {
  if (Config::get().diagPoll != 1ms) {
    // The watch's period is read once per process: run this test again in a
    // new process with a 1 ms period.
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("ACCL_DIAG_POLL", "1ms", 1);
      std::string filter = std::string("--gtest_filter=") + kFilter;
      execl("/proc/self/exe", "diag_watch_child", filter.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the run with ACCL_DIAG_POLL=1ms failed (status " << st << ")";
    return;
  }
  registerBackendOf<Probe>("diag-watch-probe", [] { return std::string("a group that records its destruction"); });
  TcpStoreOptions so;
  so.isServer = true;
  auto store = std::make_shared<TcpStore>("127.0.0.1", so);
  gOwner = std::this_thread::get_id();
  for (int i = 0; i < 400; ++i) {
    auto pg = createProcessGroup("diag-watch-probe", store, 0, 1);
    std::this_thread::sleep_for(std::chrono::microseconds((i % 8) * 150));  // land anywhere in the 1 ms period
    int before = gDestroyed.load();
    pg.reset();
    ASSERT_EQ(gDestroyed.load(), before + 1)
        << "round " << i << ": the group outlived its last owner's reference (the watch held it)";
  }
  EXPECT_EQ(gDestroyedElsewhere.load(), 0) << "groups destroyed on another thread than their owner's";
}
