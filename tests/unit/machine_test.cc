// Which ranks share a machine's CPUs across the hosts that namespaces or
// containers make of it (transport/machine.h).
#include <gtest/gtest.h>

#include <sched.h>

#include <pthread.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/machine.h"

using accl::core::allowedCpuCount;
using accl::core::machineOversubscribed;
using accl::core::machineText;

TEST(Machine, ThisProcessNamesItsBootIdAndEveryCpuItMayRunOn) {
  std::string t = machineText();
  size_t sp = t.find(' ');
  ASSERT_NE(sp, std::string::npos) << t;
  if (sp == 0) GTEST_SKIP() << "/proc/sys/kernel/random/boot_id is not readable here";
  EXPECT_EQ(sp, 36u) << "a boot id is a UUID: " << t;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  // The words read back give the same CPUs, counted independently.
  int counted = 0;
  size_t pos = sp + 1;
  for (int base = 0; pos <= t.size(); base += 64) {
    size_t comma = t.find(',', pos);
    unsigned long long w = std::stoull(t.substr(pos, comma - pos), nullptr, 16);
    for (int b = 0; b < 64; ++b)
      if (w >> b & 1) {
        EXPECT_TRUE(CPU_ISSET(base + b, &cpus)) << "CPU " << base + b << " is not in the mask";
        ++counted;
      }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  EXPECT_EQ(counted, CPU_COUNT(&cpus));
  // One rank alone never outnumbers its CPUs (it may run on at least one).
  EXPECT_FALSE(machineOversubscribed(t, {t}));
}

TEST(Machine, RanksOfOneMachineOutnumberTheUnionOfTheirCpus) {
  const std::string a = "11111111-2222-3333-4444-555555555555 ";
  const std::string b = "99999999-2222-3333-4444-555555555555 ";
  // Two CPUs (0 and 1), ranks on two namespace hosts of machine a.
  std::vector<std::string> two = {a + "3", a + "3", a + "3", a + "3"};
  EXPECT_TRUE(machineOversubscribed(two[0], two));  // 4 ranks, 2 CPUs
  EXPECT_FALSE(machineOversubscribed(two[0], {a + "3", a + "3"}));
  // Disjoint masks add up: CPUs 0-1 and 2-3 for four ranks.
  EXPECT_FALSE(machineOversubscribed(a + "3", {a + "3", a + "3", a + "c", a + "c"}));
  // Ranks of another machine do not count, whatever their masks.
  EXPECT_FALSE(machineOversubscribed(a + "3", {a + "3", a + "3", b + "1", b + "1", b + "1"}));
  EXPECT_TRUE(machineOversubscribed(b + "1", {a + "3", a + "3", b + "1", b + "1", b + "1"}));
  // CPUs beyond the first 64: the second word.
  EXPECT_FALSE(machineOversubscribed(a + "1,1", {a + "1,1", a + "1,1"}));
  EXPECT_TRUE(machineOversubscribed(a + "0,1", {a + "0,1", a + "0,1"}));
  // Unreadable or malformed: no sharing assumed.
  EXPECT_FALSE(machineOversubscribed(" 3", {" 3", " 3", " 3"}));
  EXPECT_FALSE(machineOversubscribed(a, {a, a, a}));  // no CPU words
  EXPECT_FALSE(machineOversubscribed(a + "3", {a + "3", a + "3", a + "zz"}));
  EXPECT_FALSE(machineOversubscribed("", {"", ""}));
}

// The progress thread's lazy look backs off where the rank may run on no more
// CPUs than its host has ranks (NetTransport): the count is the calling
// thread's mask, as the kernel lists it, and one CPU for a thread bound to it.
TEST(Machine, AllowedCpuCountIsTheAffinityMasksCount) {
  int listed = 0;
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    // "0-3,8,10-11": each range counts hi - lo + 1.
    std::string list = line.substr(line.find(':') + 1);
    size_t pos = 0;
    while (pos < list.size()) {
      size_t comma = list.find(',', pos);
      std::string part = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      size_t dash = part.find('-');
      int lo = std::stoi(part), hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      listed += hi - lo + 1;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (listed == 0) GTEST_SKIP() << "/proc/thread-self/status lists no Cpus_allowed_list here";
  EXPECT_EQ(allowedCpuCount(), listed);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  int bound = -1;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0) bound = allowedCpuCount();
  });
  t.join();
  EXPECT_EQ(bound, 1) << "a thread bound to CPU " << first;
}
