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
  // What begin() does but for the findings of the op before (requests, a
  // mismatch), for an op that moves nothing through the transport (a group
  // on one host: its ops run in the shared segment), called without the
  // lock: such an op makes no requests, and no data frame of an op comes for
  // it, so only the fields that other threads read are shared, and those are
  // atomic (active, entered, the published descriptor).
  void beginLocal(const OpDesc& d, Clock::time_point deadline, std::chrono::milliseconds timeout) {
    cur_ = d;
    publish(d);
    active_.store(true, std::memory_order_relaxed);
    deadline_ = deadline;
    timeout_ = timeout;
    entered_.store(d.seq + 1);
  }
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
  // The current op's descriptor for any thread, lock or not (what replies to
  // peers carry): a consistent copy.
  OpDesc published() const {
    for (;;) {
      uint64_t v = pubVer_.load(std::memory_order_acquire);
      uint64_t w0 = pub_[0].load(std::memory_order_relaxed), w1 = pub_[1].load(std::memory_order_relaxed),
               w2 = pub_[2].load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if ((v & 1) || pubVer_.load(std::memory_order_relaxed) != v) continue;
      OpDesc d;
      d.seq = w0;
      d.count = w1;
      d.op = static_cast<uint16_t>(w2);
      d.dtype = static_cast<uint8_t>(w2 >> 16);
      d.redop = static_cast<uint8_t>(w2 >> 24);
      d.root = static_cast<int32_t>(static_cast<uint32_t>(w2 >> 32));
      return d;
    }
  }
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
  const std::vector<RequestPtr>& requests() const { return reqs_; }
  bool allDone() const { return firstDone(reqs_.size()); }
  // Whether the first `n` requests are done.
  bool firstDone(size_t n) const;

  // Throws the op's first failure: mismatch (InvalidArgument), a peer's
  // abort of this or an earlier op, a failed request (RemoteError or
  // InvalidArgument), or a failed peer among `peers` (peerFailed[p] non-empty).
  void check(const std::vector<std::string>& peerFailed, const std::vector<int>& peers) const;

 private:
  // Written only by the thread that runs the op (a seqlock: pubVer_ odd
  // while the words change).
  void publish(const OpDesc& d) {
    uint64_t v = pubVer_.load(std::memory_order_relaxed);
    pubVer_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    pub_[0].store(d.seq, std::memory_order_relaxed);
    pub_[1].store(d.count, std::memory_order_relaxed);
    pub_[2].store(uint64_t(d.op) | uint64_t(d.dtype) << 16 | uint64_t(d.redop) << 24 |
                      uint64_t(static_cast<uint32_t>(d.root)) << 32,
                  std::memory_order_relaxed);
    pubVer_.store(v + 2, std::memory_order_release);
  }

  OpDesc cur_{};
  std::atomic<uint64_t> pubVer_{0};
  std::atomic<uint64_t> pub_[3] = {{0}, {0}, {uint64_t(0xffffffff) << 32}};  // root -1
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
