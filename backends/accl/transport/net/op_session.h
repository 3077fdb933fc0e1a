// The op a network transport is in, and how it failed. An op session runs
// from beginOp to endOp; its requests, the mismatch and late-data findings,
// and the aborts that peers sent are kept here, and check() turns the first
// of them into the exception the op fails with. Every call is made with the
// transport's lock held, except entered() (atomic: it answers peers' queries)
// and leave() (see there).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "transport/net/request.h"
#include "transport/transport.h"

namespace accl {
namespace core {
namespace net {

class OpSession {
 public:
  explicit OpSession(int size) : aborts_(size) {}

  void begin(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout);
  // The op left this rank; `ok` adds it to the completed ops.
  void end(bool ok);
  // The op left this rank having used nothing of the transport (an op of a
  // group on one host, which runs in the shared segment): only the flag that
  // a collective runs goes down, without the lock. Until then the progress
  // thread treated the rank as inside a collective and left point-to-point
  // waiters no lazy rounds (2 ranks on 2 cores: sendrecv after any
  // collective took 1.5-3x the time it took before one).
  void leave() { active_.store(false, std::memory_order_relaxed); }

  const OpDesc& current() const { return cur_; }
  bool active() const { return active_.load(std::memory_order_relaxed); }
  Clock::time_point deadline() const { return deadline_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // seq + 1 of the op this rank entered last (0: none yet).
  uint64_t entered() const { return entered_.load(); }
  bool anyFailed() const { return anyFailed_; }

  // Whether data for op `seq` belongs to an op this rank has left.
  bool isPast(uint64_t seq) const {
    return seq < cur_.seq || (seq == cur_.seq && !active() && entered_.load() > seq);
  }
  // `peer` sent data for `theirs` at this op's sequence number.
  void noteDesc(int peer, const OpDesc& theirs);
  // `peer` sent data for an op this rank completed: it called something else.
  void noteLate(int peer, const OpDesc& theirs);
  // `peer` failed op `seq` and says why.
  void noteAbort(int peer, uint64_t seq, std::string why) { aborts_[peer] = {seq + 1, std::move(why)}; }

  std::vector<RequestPtr>& requests() { return reqs_; }
  bool allDone() const;

  // Throws the op's first failure: mismatch (InvalidArgument), a peer's
  // abort of this or an earlier op, a failed request (RemoteError or
  // InvalidArgument), or a failed peer among `peers` (peerFailed[p] non-empty).
  void check(const std::vector<std::string>& peerFailed, const std::vector<int>& peers) const;

 private:
  OpDesc cur_{};
  std::atomic<bool> active_{false};
  Clock::time_point deadline_{};
  std::chrono::milliseconds timeout_{0};
  std::atomic<uint64_t> entered_{0};
  std::vector<RequestPtr> reqs_;
  std::string mismatch_;
  // Ops this rank completed (newest last, a few kept) and whether any op
  // failed: data that arrives for a completed op means a peer called
  // something else (e.g. both ranks of a broadcast think they are the root).
  std::deque<OpDesc> completed_;
  bool anyFailed_ = false;
  std::string late_;
  std::vector<std::pair<uint64_t, std::string>> aborts_;  // per peer: (seq + 1, reason)
};

}  // namespace net
}  // namespace core
}  // namespace accl
