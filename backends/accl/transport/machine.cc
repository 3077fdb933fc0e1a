#include "transport/machine.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "accl/internal/strings.h"

namespace accl {
namespace core {

std::string machineText() {
  std::string boot = accl::internal::readFirstLine("/proc/sys/kernel/random/boot_id");
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return boot + " ";
  std::string out = boot + " ";
  char word[24];
  for (int base = 0; base < CPU_SETSIZE; base += 64) {
    unsigned long long w = 0;
    for (int b = 0; b < 64; ++b)
      if (CPU_ISSET(base + b, &cpus)) w |= 1ull << b;
    snprintf(word, sizeof(word), "%s%llx", base ? "," : "", w);
    out += word;
  }
  return out;
}

int allowedCpuCount() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
}

namespace {
// Reads machineText()'s CPU words into `into` (ORed); false when malformed
// or empty (the affinity mask was not readable).
bool orCpus(const std::string& words, cpu_set_t& into) {
  std::istringstream in(words);
  std::string w;
  int base = 0;
  for (; std::getline(in, w, ',') && base < CPU_SETSIZE; base += 64) {
    char* end = nullptr;
    unsigned long long v = strtoull(w.c_str(), &end, 16);
    if (w.empty() || *end) return false;
    for (int b = 0; b < 64; ++b)
      if (v >> b & 1) CPU_SET(base + b, &into);
  }
  return base > 0;
}
}  // namespace

bool machineOversubscribed(const std::string& mine, const std::vector<std::string>& everyRank) {
  size_t sp = mine.find(' ');
  if (sp == std::string::npos || sp == 0) return false;
  const std::string boot = mine.substr(0, sp + 1);
  cpu_set_t all;
  CPU_ZERO(&all);
  int ranks = 0;
  for (const auto& t : everyRank) {
    if (t.compare(0, boot.size(), boot) != 0) continue;
    if (!orCpus(t.substr(boot.size()), all)) return false;
    ++ranks;
  }
  return ranks > CPU_COUNT(&all);
}

}  // namespace core
}  // namespace accl
