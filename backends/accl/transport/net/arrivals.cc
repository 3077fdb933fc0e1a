#include "transport/net/arrivals.h"

namespace accl {
namespace core {
namespace net {

std::vector<std::pair<int, std::string>> Arrivals::missing(uint64_t seq, int self,
                                                           const std::vector<std::string>& peerFailed) const {
  std::vector<std::pair<int, std::string>> out;
  for (int p = 0; p < static_cast<int>(replies_.size()); ++p) {
    if (p == self) continue;
    if (!peerFailed[p].empty()) {
      out.push_back({p, peerFailed[p]});
    } else if (replies_[p].first == 0) {
      out.push_back({p, "no answer"});
    } else {
      uint64_t entered = replies_[p].first - 1;  // the peer's entered value: seq + 1
      if (entered < seq + 1)
        out.push_back({p, entered == 0 ? "has not started any op" : "still in " + describe(replies_[p].second)});
    }
  }
  return out;
}

std::string Arrivals::timeoutMessage(const OpDesc& d, std::chrono::milliseconds limit,
                                     const std::vector<std::pair<int, std::string>>& missing,
                                     const std::vector<std::string>& peerFailed, const std::string& waitingFor) {
  std::string msg = describe(d) + " timed out after " + std::to_string(limit.count()) + " ms";
  // Ranks whose connection is gone cannot say where they are: listed apart.
  std::string absent, gone;
  for (auto& m : missing) {
    std::string& to = peerFailed[m.first].empty() ? absent : gone;
    to += (to.empty() ? "" : ", ") + std::to_string(m.first) + " (" + m.second + ")";
  }
  msg += absent.empty() ? "; every rank still connected entered the op" : "; ranks that did not arrive: " + absent;
  if (!gone.empty()) msg += "; ranks no longer connected: " + gone;
  if (!waitingFor.empty()) msg += "; this rank was waiting for " + waitingFor;
  return msg;
}

}  // namespace net
}  // namespace core
}  // namespace accl
