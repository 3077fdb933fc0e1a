// The flight recorder: every process group keeps its last ACCL_TRACE_BUFFER
// collectives and as many point-to-point ops (default 1000; 0 turns it off)
// in a ring, with when each was queued,
// started and finished, its algorithm and transport, and how it failed. The
// rings of all groups of a process are written as one JSON file
// (ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json) when an op times out or fails,
// on SIGUSR1, and when dumpTraces() is called; accl-diag reads them.
//
// The same record feeds the timeline (ACCL_TIMELINE: Chrome trace events,
// one span per op) and the statistics (ACCL_STATS: a table per op and size
// printed when the group is destroyed).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "accl/process_group.h"

namespace accl {

enum class OpState : uint8_t { Queued, Started, Waiting, Done, Failed };
const char* toString(OpState s);

// The payload one op moved to and from one peer (backends with their own
// network transport, for ops that went through it).
struct PeerBytes {
  int rank = -1;
  uint64_t sent = 0, received = 0;
};

struct TraceEntry {
  uint64_t id = 0;         // the op's number in its group: collectives 2, 4, 6, ... (id / 2 - 1 is
                           // coll), point-to-point ops 1, 3, 5, ...; each kind in the order issued
  int64_t seq = -1;        // the backend's collective sequence number where it has one
  int64_t coll = -1;       // the group's collective number (from 0; -1 for send/recv): equal on
                           // every rank for the same call, whatever the backend
  OpType op = OpType::Barrier;
  DataType dtype = DataType::Uint8;
  uint64_t count = 0;
  int root = -1;           // rooted collectives
  int peer = -1;           // send / recv (-1: any source)
  uint64_t bytes = 0;      // this rank's payload
  std::string algorithm;   // as the backend chose it ("ring", "shm", ...)
  std::string transport;   // "shm", "tcp", "ib", "shm+tcp", ...
  OpState state = OpState::Queued;
  int64_t queuedUs = 0;    // wall-clock microseconds since the epoch; 0: not yet
  int64_t startedUs = 0;
  int64_t finishedUs = 0;
  int64_t waitedUs = 0;    // time spent waiting for peers (timed with ACCL_TIMELINE or ACCL_STATS; 0 otherwise)
  std::string error;       // the failure's message
  std::string note;        // the last stall warning (state Waiting)
  std::vector<PeerBytes> peers;  // what the op moved per peer over the network (accl backend; empty: none)
};

// What this rank exchanged with one peer (backends with their own transport).
struct PeerTraffic {
  int rank = -1;
  uint64_t bytesSent = 0, bytesReceived = 0;
  int64_t receiveBusyUs = 0;  // time during which data from the peer was arriving
  uint64_t bytesTimed = 0;    // of bytesReceived, what receiveBusyUs covers (frames of 16 KiB and up)
  uint64_t bytesHeld = 0;     // of bytesReceived, what came before its receive: held, copied once more
  int64_t idleMs = -1;        // since the last data from the peer; -1: none yet
};

class FlightRecorder {
 public:
  // Reads ACCL_TRACE_BUFFER (failures dump only when it is > 0), ACCL_STATS
  // and ACCL_TIMELINE.
  FlightRecorder(size_t capacity, std::string group, std::string backend, int rank, int size);
  ~FlightRecorder();
  // Whether any of the recorder's uses is on (ACCL_TRACE_BUFFER > 0,
  // ACCL_STATS, ACCL_TIMELINE), and how many ops its ring should keep.
  static bool wanted();
  static size_t wantedCapacity();

  // A new op; returns its id. The three calls of an op's life (begin,
  // started, finished) are inline: on the common path they are plain stores
  // into the op's slot, no call, no lock and no load from the slot (the
  // flight recorder is on by default, so an 8-byte op pays for it).
  __attribute__((always_inline)) uint64_t begin(OpType op, DataType dtype, uint64_t count, int root, int peer,
                                                uint64_t bytes) {
    uint64_t id;
    if (__builtin_expect(!isPointToPoint(op), 1)) {
      // Collectives of a group are issued in one order (the API's rule), so
      // no two threads issue them at once: a plain increment, no locked
      // instruction (a locked add drains the store buffer: it alone cost
      // more than the rest of the recorder on an 8-byte allreduce).
      id = nextCollId_.load(kRelaxed);
      nextCollId_.store(id + 2, kRelaxed);  // the op's collective number is id / 2 - 1
    } else {
      // Point-to-point ops may be issued by any thread, beside collectives.
      id = nextP2pId_.fetch_add(2, kRelaxed);
    }
    int64_t now = opNow();
    Slot& s = slotOf(id);
    s.ver.store(2 * id + 1, kRelaxed);  // odd: being written
    std::atomic_thread_fence(std::memory_order_release);
    s.meta.store(packMeta(op, dtype), kRelaxed);
    s.count.store(count, kRelaxed);
    s.bytes.store(bytes, kRelaxed);
    s.ranks.store(static_cast<uint32_t>(root) | (static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32), kRelaxed);
    s.queuedNs.store(now, kRelaxed);
    s.ver.store(2 * id + 2, std::memory_order_release);
    // The next op's slot, into this core's cache while the op runs: a ring of
    // thousands of slots is out of L1 by the time it comes round.
    const Slot* n = &slotOf(id + 1);
    __builtin_prefetch(n, 1);
    __builtin_prefetch(reinterpret_cast<const char*>(n) + 64, 1);
    return id;
  }
  // The backend started running op `id`, as `algorithm` over `transport`
  // (both string literals or other strings that live as long as the
  // program, or nullptr: only the pointers are kept); `seq` is its
  // collective sequence number (-1: none). Once per op: plain stores, no
  // test of the slot (a backend that may start an op more than once calls
  // updateStart()). A load from the slot here, right before the op's first
  // stores to the shared segment, cost 4-13 % of a 1 KiB allreduce on one
  // host, where the stores alone cost nothing measurable.
  __attribute__((always_inline)) void started(uint64_t id, int64_t seq, const char* algorithm,
                                              const char* transport) {
    Slot& s = slotOf(id);
    s.startedNs.store(phaseNow(), kRelaxed);
    s.seq.store(seq, kRelaxed);
    s.algorithm.store(algorithm, kRelaxed);
    s.transport.store(transport, kRelaxed);
    // Release: a reader that sees the tag sees the fields.
    s.startedId.store(id, std::memory_order_release);
  }
  // The same for a call that may come again for the same op: the first one
  // starts it, later ones replace what they are given (seq >= 0, non-null
  // names) and keep the first start time.
  void updateStart(uint64_t id, int64_t seq, const char* algorithm, const char* transport);
  // Op `id` completed; the group's first failed op also writes the dump
  // (when ACCL_TRACE_BUFFER > 0).
  __attribute__((always_inline)) void finished(uint64_t id, const std::exception_ptr& error) {
    if (__builtin_expect(error != nullptr, 0)) return finishedSlow(id, error);
    succeeded(id);
  }
  // The same for an op that succeeded (no exception_ptr to build and test).
  __attribute__((always_inline)) void succeeded(uint64_t id) {
    if (__builtin_expect(precise_, 0)) return finishedSlow(id, nullptr);
    Slot& s = slotOf(id);
    s.finishedNs.store(phaseNow(), kRelaxed);
    s.endedId.store(id, std::memory_order_release);
  }
  // Where op `id` waited for its peers (steady_clock ns: the first wait's
  // start, the last wait's end, their sum); backends report it when
  // timesOps() (the timeline shows it as a span).
  void waited(uint64_t id, int64_t firstNs, int64_t lastNs, int64_t totalNs);
  // Whether ops are timed precisely (ACCL_STATS or ACCL_TIMELINE): then a
  // backend's waits are worth timing.
  bool timesOps() const { return precise_; }
  // What op `id` moved to and from each peer over the network. A
  // collective with at most kInlinePeers peers keeps them in a ring beside
  // its slot (no allocation or lock on the op's path: the map node and the
  // vectors were 2-3 % of a small broadcast's samples between hosts); more
  // peers, and point-to-point ops, go with the op's texts.
  static constexpr size_t kInlinePeers = 4;
  void peerBytes(uint64_t id, const PeerBytes* peers, size_t n);
  void peerBytes(uint64_t id, const std::vector<PeerBytes>& peers) { peerBytes(id, peers.data(), peers.size()); }
  // Op `id` has waited long for other ranks; `why` is the stall warning.
  // The first warning of an op also writes the dump (ACCL_TRACE_BUFFER > 0).
  void waiting(uint64_t id, const std::string& why);
  // The backend logs its own stall warnings for collectives (the accl
  // backend's name the ranks); otherwise, and for point-to-point ops, the
  // process's watchdog warns for this group's ops.
  void setOwnStallWarnings() { ownStallWarnings_.store(true); }
  // The watchdog's check (about every second): warns when this group's
  // oldest unfinished op has waited ACCL_STALL_WARN, 2x, 4x, ... that long.
  void checkStall(std::chrono::milliseconds warnAfter);

  // Set by the backend: a name for each rank's host, and where the per-peer
  // traffic comes from (called when a dump or the statistics are written;
  // detached by close()).
  void setHosts(std::vector<std::string> hosts);
  void setTrafficSource(std::function<std::vector<PeerTraffic>()> source);
  std::vector<std::string> hosts() const;
  std::vector<PeerTraffic> traffic() const;
  // The group is going away: prints the statistics (ACCL_STATS), closes
  // this group's part of the timeline, and detaches the traffic source.
  // Called by the backend's destructor while its transport still exists;
  // again (no-op) by ~ProcessGroup.
  void close();
  // The statistics table as close() prints it ("" when ACCL_STATS is off or
  // nothing ran).
  std::string statsTable() const;

  // The entries still in the ring, oldest first.
  std::vector<TraceEntry> entries() const;
  // The first op of this group that failed (id 0: none). Kept apart: once a
  // group failed, every later op fails at once and would push it out of the ring.
  TraceEntry firstFailure() const;
  const std::string& group() const { return group_; }
  const std::string& backend() const { return backend_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // How many ops of each kind the ring keeps: the last capacity()
  // collectives and, beside them, the last capacity() point-to-point ops.
  size_t capacity() const { return capacity_; }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  // One op as the ring keeps it. begin() fills the first cache line inside a
  // version counter that is odd while it writes (a seqlock: readers copy the
  // slot without a lock and retry when the version moved); the version is
  // 2 * id + 2 once written, so it names the op. The later phases write their
  // own fields in the second line, then publish them with a release store of
  // the op's id in their tag (startedId, endedId): a field whose tag is not
  // the slot's op is a former op's and is not read. The op's path only
  // stores (no load from the slot, no locked instruction). The watchdog's
  // and the failure paths' flags (waiting, waited) live in `meta`, which
  // only they change after begin(). Texts (error, stall note) and per-peer
  // bytes live in texts_, by op id, with the id in textId. Only when more
  // ops are in flight than the ring holds can an old op's phase and a new
  // op's begin write one slot at once: that entry may then mix the two ops
  // (every field stays valid; no memory is at risk).
  static constexpr uint64_t kWaitingBit = uint64_t(1) << 24;  // a stall warning (state Waiting)
  static constexpr uint64_t kWaitedBit = uint64_t(2) << 24;   // waitTotalNs
  static constexpr uint64_t kFailedTag = uint64_t(1) << 63;   // in endedId: the op failed
  static uint64_t packMeta(OpType op, DataType dtype) {
    return uint64_t(static_cast<uint8_t>(op)) | uint64_t(static_cast<uint8_t>(dtype)) << 8;
  }
  struct alignas(64) Slot {  // two cache lines
    // begin()'s line
    std::atomic<uint64_t> ver{0};   // 2 * id + 2 (odd: being written; 0: never used)
    std::atomic<uint64_t> meta{0};  // op, dtype, flags (packMeta, kWaitingBit, kWaitedBit)
    std::atomic<uint64_t> count{0}, bytes{0};
    std::atomic<uint64_t> ranks{0};  // root (low 32 bits), peer (high), as int32
    std::atomic<int64_t> queuedNs{0};  // CLOCK_MONOTONIC, like the other times
    std::atomic<uint64_t> textId{0};   // the op whose texts_ entry exists (0: none)
    // the later phases'
    std::atomic<int64_t> startedNs{0}, seq{-1};
    std::atomic<const char*> algorithm{nullptr};
    std::atomic<const char*> transport{nullptr};
    std::atomic<int64_t> finishedNs{0};
    std::atomic<int64_t> waitTotalNs{0};
    std::atomic<uint64_t> startedId{0};  // the op whose start the fields above hold
    std::atomic<uint64_t> endedId{0};    // the op that finished (| kFailedTag: failed)
  };
  static_assert(sizeof(Slot) == 128, "a slot is two cache lines");
  // The op a version word names (0: none, or being written: odd).
  static uint64_t idOfVersion(uint64_t v) { return (v & 1) || v == 0 ? 0 : v / 2 - 1; }
  // The op a slot holds (0: none, or being written).
  static uint64_t idOf(const Slot& s) { return idOfVersion(s.ver.load(kRelaxed)); }
  struct Texts {
    std::string error, note;
    std::vector<PeerBytes> peers;
  };
  // A consistent copy of a slot (times still monotonic ns).
  struct Copy {
    uint64_t id = 0;
    int64_t seq = -1, coll = -1;
    OpType op = OpType::Barrier;
    DataType dtype = DataType::Uint8;
    OpState state = OpState::Queued;
    uint64_t count = 0, bytes = 0;
    int root = -1, peer = -1;
    const char* algorithm = nullptr;
    const char* transport = nullptr;
    int64_t queuedNs = 0, startedNs = 0, finishedNs = 0;
    int64_t waitTotalNs = 0;
    std::string error, note;
    std::vector<PeerBytes> peers;
  };
  Slot& slotOf(uint64_t id) { return ring_[id & mask_]; }
  // A collective's per-peer bytes (kInlinePeers at most), published as a
  // sequence lock: `id` is 0 while written, then the op's id.
  struct PeerSlot {
    std::atomic<uint64_t> id{0};
    std::atomic<uint32_t> n{0};
    struct Entry {
      std::atomic<int32_t> rank{-1};
      std::atomic<uint64_t> sent{0}, received{0};
    } e[kInlinePeers];
  };
  // The collective's entry (even ids); made the first time an op has peers
  // (a group within one host never has).
  PeerSlot& peerSlotOf(PeerSlot* ring, uint64_t id) const { return ring[(id >> 1) & (capacity_ - 1)]; }
  PeerSlot* makePeerRing();
  Copy read(const Slot& s) const;  // with the texts
  // The op clock: the ticker's copy of the coarse clock (a load), or the
  // precise clock where statistics or the timeline time each op (then tick_
  // is a word that stays 0, so one test covers both).
  int64_t opNow() {
    int64_t t = tick_->load(kRelaxed);
    if (__builtin_expect(t == 0, 0)) return nowSlow();
    if (!tickUsed_->load(kRelaxed)) tickUsed_->store(true, kRelaxed);
    return t;
  }
  // The same clock for an op's later phases: begin() already told the
  // ticker that ops read it.
  int64_t phaseNow() {
    int64_t t = tick_->load(kRelaxed);
    if (__builtin_expect(t == 0, 0)) return nowSlow();
    return t;
  }
  int64_t nowSlow();
  // Texts of op `id` (under textMu_): its entry, made when missing; entries
  // of ops the ring no longer holds go.
  Texts& textsOf(Slot& s, uint64_t id);
  void finishedSlow(uint64_t id, const std::exception_ptr& error);
  void account(const Copy& c);     // timeline and statistics of a finished op

  // The ring's slots: a power of two, 2 * capacity_. An op's slot is its id
  // masked, so collectives (even ids) take the even slots and point-to-point
  // ops (odd ids) the odd ones: a flood of either never pushes the other out.
  size_t capacity_;  // ops of each kind kept (a power of two)
  size_t slots_;     // 2 * capacity_
  size_t mask_;      // slots_ - 1
  std::unique_ptr<Slot[]> ring_;
  std::unique_ptr<PeerSlot[]> peerOwned_;    // under textMu_
  std::atomic<PeerSlot*> peerRing_{nullptr};  // peerOwned_, once made
  std::atomic<uint64_t> nextCollId_{2};  // the next collective's id (written by the issuing thread only)
  std::atomic<uint64_t> nextP2pId_{1};   // the next point-to-point op's id (any thread)
  // The ids of each kind the ring may hold, oldest first: [first, next) by 2
  // (kind 0: collectives, 1: point-to-point).
  void heldIds(int kind, uint64_t& first, uint64_t& next) const;
  mutable std::mutex textMu_;  // texts_, firstFailure_
  std::map<uint64_t, Texts> texts_[2];  // by op id, per kind (id & 1)
  Copy firstFailure_;  // id 0: none yet
  mutable std::mutex metaMu_;  // hosts_, trafficSource_, closed_
  std::string group_, backend_;
  int rank_, size_;
  std::vector<std::string> hosts_;
  std::function<std::vector<PeerTraffic>()> trafficSource_;
  bool closed_ = false;
  struct Stats;  // trace.cc
  mutable std::mutex statsMu_;
  std::unique_ptr<Stats> stats_;  // null unless ACCL_STATS
  int timelineTid_ = -1;          // this group's row in the timeline; -1: ACCL_TIMELINE off
  bool dumps_ = false;            // ACCL_TRACE_BUFFER > 0: failures write the dump
  bool precise_ = false;          // statistics or timeline: every op timed with the precise clock
  const std::atomic<int64_t>* tick_;  // the ticker's clock word (0: parked; always 0 when precise_)
  std::atomic<bool>* tickUsed_;       // set by an op that read it since the last tick
  std::atomic<bool> ownStallWarnings_{false};
  std::atomic<uint64_t> stallDumped_{0};  // the last op whose stall wrote the dump
  uint64_t stallOp_ = 0;                  // the watchdog's: the op it warned for, and when next
  int64_t stallNextNs_ = 0;
};

// Writes the flight recorders of every live group of this process to
// ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json (replacing an earlier dump),
// saying why (`reason`). Returns the file's path; "" when tracing is off or
// the file could not be written (logged).
std::string dumpTraces(const std::string& reason);

}  // namespace accl
