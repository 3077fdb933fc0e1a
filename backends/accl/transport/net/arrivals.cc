#include "transport/net/arrivals.h"

#include <cstdint>
#include <cstdio>

namespace accl {
namespace core {
namespace net {

std::vector<std::pair<int, std::string>> Arrivals::missing(uint64_t seq, int self, const std::vector<std::string>& peerFailed,
                                                           const std::vector<std::string>& hosts) const {
  std::vector<std::pair<int, std::string>> out;
  for (int p = 0; p < static_cast<int>(replies_.size()); ++p) {
    if (p == self) continue;
    std::string why;
    const Reply& r = replies_[p];
    if (!peerFailed[p].empty()) {
      why = peerFailed[p];
    } else if (r.entered == 0) {
      why = "no answer: the process is stopped, hung in a signal handler, or its network is down";
    } else {
      uint64_t entered = r.entered - 1;  // the peer's entered value: seq + 1
      if (entered >= seq + 1) continue;
      if (entered == 0) why = "has not started any op";
      else if (r.active) why = "still in " + describe(r.desc);
      else why = "finished " + describe(r.desc) + " and has not called the next op";
    }
    if (p < static_cast<int>(hosts.size()) && !hosts[p].empty()) why = "host " + hosts[p] + ": " + why;
    out.push_back({p, why});
  }
  return out;
}

namespace {
// "; ranks that did not arrive: ...; ranks no longer connected: ..."
std::string listMissing(const std::vector<std::pair<int, std::string>>& missing,
                        const std::vector<std::string>& peerFailed) {
  // Ranks whose connection is gone cannot say where they are: listed apart.
  std::string absent, gone;
  for (auto& m : missing) {
    std::string& to = peerFailed[m.first].empty() ? absent : gone;
    to += (to.empty() ? "" : ", ") + std::to_string(m.first) + " (" + m.second + ")";
  }
  std::string msg = absent.empty() ? "; every rank still connected entered the op" : "; ranks that did not arrive: " + absent;
  if (!gone.empty()) msg += "; ranks no longer connected: " + gone;
  return msg;
}
}  // namespace

std::string Arrivals::stallMessage(const OpDesc& d, std::chrono::milliseconds waited, std::chrono::milliseconds left,
                                   const std::vector<std::pair<int, std::string>>& missing,
                                   const std::vector<std::string>& peerFailed, const std::string& waitingFor) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.1f s", waited.count() / 1000.0);
  std::string msg = describe(d) + " has waited " + buf + " for other ranks (ACCL_TIMEOUT ends it in " +
                    std::to_string((left.count() + 999) / 1000) + " s)";
  msg += listMissing(missing, peerFailed);
  if (!waitingFor.empty()) msg += "; this rank waits for " + waitingFor;
  return msg;
}

std::string Arrivals::timeoutMessage(const OpDesc& d, std::chrono::milliseconds limit,
                                     const std::vector<std::pair<int, std::string>>& missing,
                                     const std::vector<std::string>& peerFailed, const std::string& waitingFor) {
  std::string msg = describe(d) + " timed out after " + std::to_string(limit.count()) + " ms";
  msg += listMissing(missing, peerFailed);
  if (!waitingFor.empty()) msg += "; this rank was waiting for " + waitingFor;
  return msg;
}

}  // namespace net
}  // namespace core
}  // namespace accl
