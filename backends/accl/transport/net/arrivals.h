// Arrival queries: when an op times out, this rank asks every peer which op
// it is in (Query frames over the sockets; Reply carries the peer's entered
// sequence number and op) and names those that did not arrive. Every call is
// made with the transport's lock held.
#pragma once

#include <chrono>
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
  void clear(int peer) { replies_[peer] = {0, OpDesc{}}; }
  // Reply from `peer`: `entered` is its seq + 1 of the op it is in (0: none
  // yet), `d` that op.
  void onReply(int peer, uint64_t entered, const OpDesc& d) { replies_[peer] = {entered + 1, d}; }
  bool answered(int peer) const { return replies_[peer].first != 0; }

  // The ranks that did not arrive at op `seq`, with why: no answer, not
  // started, still in an earlier op, or their link failed (peerFailed).
  std::vector<std::pair<int, std::string>> missing(uint64_t seq, int self,
                                                   const std::vector<std::string>& peerFailed) const;

  // "allreduce #5 (...) timed out after 300 ms; ranks that did not arrive: 1
  // (still in ...); ranks no longer connected: ...; this rank was waiting for ..."
  static std::string timeoutMessage(const OpDesc& d, std::chrono::milliseconds limit,
                                    const std::vector<std::pair<int, std::string>>& missing,
                                    const std::vector<std::string>& peerFailed, const std::string& waitingFor);

 private:
  std::vector<std::pair<uint64_t, OpDesc>> replies_;  // per peer: (entered + 1, desc); 0: no reply yet
};

}  // namespace net
}  // namespace core
}  // namespace accl
