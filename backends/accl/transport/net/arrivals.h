// Arrival queries: when an op stalls or times out, this rank asks every peer
// which op it is in (Query frames over the sockets; Reply carries the peer's
// entered sequence number, whether it is still in that op, and the op) and
// names those that did not arrive. Every call is made with the transport's
// lock held.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace accl {
namespace core {
namespace net {

class Arrivals {
 public:
  explicit Arrivals(int size) : replies_(size) {}

  // Forget the replies of an earlier query to `peer`.
  void clear(int peer) { replies_[peer] = Reply{}; }
  // The Reply's key: the entered value (seq + 1 of the op this rank entered
  // last; 0: none yet), with kActive set while it is still in that op.
  static constexpr uint64_t kActive = 1ull << 63;
  static uint64_t replyKey(uint64_t entered, bool active) { return entered | (active ? kActive : 0); }

  // Reply from `peer`: `key` as replyKey made it, `d` the peer's op.
  void onReply(int peer, uint64_t key, const OpDesc& d) { replies_[peer] = {(key & ~kActive) + 1, d, (key & kActive) != 0}; }
  bool answered(int peer) const { return replies_[peer].entered != 0; }

  // The ranks that did not arrive at op `seq`, with why: no answer, not
  // started, still in an earlier op, done with it but not in this one yet, or
  // their link failed (peerFailed). `hosts` (may be empty) labels the ranks.
  std::vector<std::pair<int, std::string>> missing(uint64_t seq, int self, const std::vector<std::string>& peerFailed,
                                                   const std::vector<std::string>& hosts) const;

  // "allreduce #5 (...) timed out after 300 ms; ranks that did not arrive: 1
  // (host-b; still in ...); ranks no longer connected: ...; this rank was waiting for ..."
  static std::string timeoutMessage(const OpDesc& d, std::chrono::milliseconds limit,
                                    const std::vector<std::pair<int, std::string>>& missing,
                                    const std::vector<std::string>& peerFailed, const std::string& waitingFor);
  // "allreduce #5 (...) has waited 60 s for other ranks (deadline in 1740 s);
  // ranks that did not arrive: ...; this rank waits for ..."
  static std::string stallMessage(const OpDesc& d, std::chrono::milliseconds waited, std::chrono::milliseconds left,
                                  const std::vector<std::pair<int, std::string>>& missing,
                                  const std::vector<std::string>& peerFailed, const std::string& waitingFor);

 private:
  struct Reply {
    uint64_t entered = 0;  // the peer's entered value + 1; 0: no reply yet
    OpDesc desc{};
    bool active = false;
  };
  std::vector<Reply> replies_;
};

}  // namespace net
}  // namespace core
}  // namespace accl
