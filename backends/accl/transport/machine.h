// The machine a rank runs on, as the ranks tell each other at start: which
// ranks share one kernel (and so its CPUs) across the hosts that network
// namespaces or containers make of one machine.
#pragma once

#include <string>
#include <vector>

namespace accl {
namespace core {

// This process's machine and CPUs: the kernel's boot id (namespaces and
// containers of one machine share it, and its CPUs), a space, and the CPUs
// its affinity mask allows, as comma-separated hex words of 64 CPUs each.
std::string machineText();
// How many CPUs the calling thread's affinity mask allows (the process's,
// unless the thread was bound apart; 0 where it cannot be read).
int allowedCpuCount();
// Whether the ranks whose machineText() names the same machine as `mine`
// outnumber the CPUs their affinity masks allow together: they then share
// cores, whatever hosts they count as. A text without a boot id shares with
// nothing; a malformed one anywhere gives false (no sharing assumed).
bool machineOversubscribed(const std::string& mine, const std::vector<std::string>& everyRank);

}  // namespace core
}  // namespace accl
