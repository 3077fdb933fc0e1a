// Shared-memory collectives among the ranks of one host (a HostGroup of two
// or more ranks). All ranks map one segment; an op proceeds in rounds (each
// rank publishes, then waits until every local rank has arrived). Small
// rooted ops are eager: the side that only sends leaves its data in a cell
// and returns, up to kDepth - 1 rounds ahead of the slowest rank. Data moves
// either through the segment's slots (two copies) or, where the kernel
// allows, straight from the peer's buffer with process_vm_readv (one copy).
// Each rank reduces its own slice of the vector from every input; the slices
// are then gathered.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accl/store.h"
#include "accl/types.h"
#include "transport/copy.h"
#include "transport/host_group.h"

namespace accl {
namespace core {

class ShmDomain : public HostGroup {
 public:
  struct Options {
    int localRank = 0;
    int localSize = 1;
    std::vector<int> ranks;   // group rank of each local rank (for messages)
    std::string segmentName;  // unique per communicator and host
    int cma = 0;              // ACCL_SHM_CMA: 0 auto (measured), 1 required, -1 off
    // ACCL_SHM_STREAM_BYTES: -1 auto (slots written with non-temporal stores
    // in the bands measured faster), 0 never, else every op of that many
    // bytes and more (copy.h).
    long long stream = -1;
    // The ranks share cores with other hosts' ranks of this machine (its
    // namespaces or containers): waits yield, and auto measures nothing.
    bool cpusShared = false;
    std::shared_ptr<Store> store;
    std::chrono::milliseconds timeout{30000};
    // Called while waiting: throws if a peer failed (dead rank, abort, mismatch).
    std::function<void()> checkFailure;
    // Called when local rank `localPeer` has exited during an op, before that
    // exit is reported: throws the failure the peer announced before it left
    // (a rank that failed on a third rank's death sends an abort notice, then
    // exits), so the cause is named rather than a rank that left because of
    // it. Returns if the peer announced nothing (may be empty).
    std::function<void(int localPeer)> explainExit;
    // Called when the deadline passed; throws accl::Timeout. Gets the local
    // ranks that had not arrived.
    std::function<void(const std::vector<int>&)> onTimeout;
    // Called about every 50 ms while a wait blocks (may be empty), with the
    // local ranks not yet arrived: for stall warnings.
    std::function<void(const std::vector<int>&)> onBlocked;
    std::string where;
  };
  explicit ShmDomain(Options o);
  ~ShmDomain();

  int rank() const override { return o_.localRank; }
  int size() const override { return o_.localSize; }
  // The classes of ops whose single-copy bands are measured apart:
  // broadcast and allgather (timed with broadcasts and allgathers), the
  // rooted gather and scatter (timed with scatters), alltoall (timed with
  // alltoalls: each rank reads a share of every peer's slot, which in some
  // launches of ranks sharing CPUs ran 3x slower than broadcasts and
  // scatters told), and
  // reduce (timed with reduces: between two ranks the root reduces the
  // other's input as it lands in the slot, faster than the copies the others
  // time, and faster than single copy at some sizes where alltoall was not).
  static constexpr int kCopyClasses = 4;
  static constexpr int kScatterClass = 1;
  // The ways of writing into the slots are timed per class too (WriteWay;
  // the reductions' copies in under kReduceClass, not probed: their way
  // follows ACCL_SHM_STREAM_BYTES and their own rates).
  static constexpr int kAlltoallClass = 2;
  static constexpr int kReduceClass = 3;
  static constexpr int kWayClasses = 4;
  // Whether any collective goes by single copy (process_vm_readv).
  bool singleCopy() const {
    return cma_ && (cmaBands_[0] | cmaBands_[1] | cmaBands_[2] | cmaBands_[3]) != 0;
  }
  // Under ACCL_SHM_CMA=auto: single copy's time
  // over the segment's slots', per class, at each probed size, as measured
  // when the domain was made; empty when nothing was measured.
  struct Probe {
    size_t bytes;
    double ratio[kCopyClasses];
    // The slots written with non-temporal stores: their time over plain
    // writes' (the slots' time above is the faster of the two).
    double streamRatio[kCopyClasses];
  };
  // Fewer CPUs among the local ranks' affinity masks than local ranks.
  bool oversubscribed() const { return oversubscribed_; }
  // The local ranks' process ids, in local-rank order.
  std::vector<int32_t> localPids() const;
  // Under ACCL_SHM_CMA=auto: where the probe found single copy faster than
  // the slots for broadcasts and allgathers in every band from some size up
  // to the largest (4 MiB and above; point-to-point takes it for every size
  // above), that size (16 KiB where that is every band); else SIZE_MAX
  // (nothing measured, or the slots won at 4 MiB).
  // A launch whose copies through shared memory run slow (on a 2-core VM, 9 of 60 launches
  // bound to a core each: single copy took 0.13-0.36x the slots' time in
  // every band) has the point-to-point rings slow too (sendrecv at 0.16-0.25
  // of Open MPI's busbw), and the group sends its local peers' messages by
  // single copy from there (NetTransport::setLocalRanksShareCpus; 0.78-1.00).
  size_t singleCopyEveryBandFrom() const;
  std::string describe() const override;

  // The ops of HostGroup (its contract applies).
  void allreduce(const void* in, void* out, size_t count, DataType t, ReduceKind k,
                 const OpDesc& d, Clock::time_point deadline) override;
  void reduce(const void* in, void* out, size_t count, DataType t, ReduceKind k, int root,
              const OpDesc& d, Clock::time_point deadline) override;
  void broadcast(void* buf, size_t bytes, int root, const OpDesc& d, Clock::time_point deadline) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const OpDesc& d,
                  Clock::time_point deadline) override;
  void reduceScatterv(const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                      ReduceKind k, const OpDesc& d, Clock::time_point deadline) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes, const OpDesc& d, Clock::time_point deadline) override;
  void gatherv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
               const OpDesc& d, Clock::time_point deadline) override;
  void scatterv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
                const OpDesc& d, Clock::time_point deadline) override;
  void barrier(const OpDesc& d, Clock::time_point deadline) override;

 private:
  static constexpr int kDepth = 32;  // rounds of eager cells (shm.cc)
  static constexpr int kShort = 4;   // rounds whose chains sit in the arrival line (shm.cc)
  // The running op's offsets per rank (ops run one at a time): reused, so
  // that a small gather or alltoall allocates nothing.
  std::vector<size_t> displA_, displB_;
  struct Ctl;
  struct Header;
  Ctl& ctl(int r) const;
  char* slot(uint64_t round, int r) const;
  // Publishes this rank's arrival at the next round, then waits for all.
  void round(const OpDesc& d);
  // The parts of a round: publish the arrival (descriptor d), wait for every
  // local rank's or for one rank's (checking their descriptors).
  void arrive(const OpDesc& d);
  void waitAll();
  void waitRoot(int root);
  // Eager ops of a few bytes (shm.cc, kBoxBytes): this rank's box of round
  // k, whose first `bytes` bytes it writes before arriveBoxed, which
  // publishes the box's lines that hold them and then arrives as arrive()
  // does; waitBoxed waits for the boxes of round_ from `from` (-1: every
  // other rank), each line that holds their first `bytes` bytes, and checks
  // their chains.
  struct Box;
  Box& box(uint64_t round, int r) const;
  void arriveBoxed(const OpDesc& d, size_t bytes);
  void waitBoxed(int from, size_t bytes);
  // Stores v into one of this rank's lines that waiting peers poll (its
  // arrival, its fill level), and wakes them if they sleep.
  void publish(std::atomic<uint64_t>& line, uint64_t v);
  // Publishes that this rank's slot of the next round holds its first
  // `bytes` bytes (the readers of a broadcast take them as they land).
  void fill(size_t bytes);
  // A reader of a round this rank has arrived at: copies bytes [start,
  // start + m) of `root`'s slot into dst as the root's fill() passes them,
  // then waits for every local rank (the round's check) and copies what is
  // left (the root arrived without publishing: a full slot, or a mismatch).
  // total: the output's size (copy.h)
  void readAsFilled(int root, size_t start, size_t m, char* dst, size_t total);
  // The same walk with `take(from, to)` for each run of bytes [from, to) of
  // [0, m) as it lands (readAsFilled copies it; a two-rank reduce's root
  // reduces it with its own input).
  template <typename F>
  void takeAsFilled(int root, size_t start, size_t m, const F& take);
  // Throws if local rank p's ops up to round x differ from this rank's,
  // naming the first round among the last kDepth where they differ.
  void checkPeer(int p, uint64_t x) const;
  // Every op starts here: sets its deadline and, after an eager op, waits
  // until all local ranks have arrived at this rank's last round.
  void begin(Clock::time_point deadline);
  // An eager op starts here instead: waits only until the round's cell is
  // free (every rank at most kDepth - 2 rounds behind), then leaves this
  // rank lagging.
  void beginEager(Clock::time_point deadline);
  char* cell(uint64_t round, int r) const;
  template <typename F>
  void waitFor(const F& arrived);
  // Notes the CPU this rank waits on; true if a peer that has not arrived
  // (by `arrived`) last arrived or waited on the same CPU.
  template <typename F>
  bool stackedOnMe(const F& arrived);
  void cmaRead(int peer, uint64_t remote, void* local, size_t len);
  void cmaWrite(int peer, const void* local, uint64_t remote, size_t len);
  // Throws the error a failed process_vm_readv/writev stands for: the peer or
  // another local rank exited, another rank's failure (RemoteError), or errno.
  [[noreturn]] void cmaFailed(int peer, const char* what, int e);
  void probeCma();
  // ACCL_SHM_CMA=auto: times each class's ops
  // (broadcast with allgather; scatter) at kProbeBytes both ways (local rank
  // 0's clock, the two alternating), and sets each class's size bands where
  // single copy is faster; a group of the same processes reuses the result.
  void measureSingleCopy();
  // The probes' ratios, as describe() gives them: single copy's over the
  // slots', or (streamed) the slots streamed over written plainly.
  std::string probeText(bool streamed = false) const;
  // The classes with bands in `bands`, each as "NAME of BANDS", joined by
  // " and for " ("" where none has any).
  std::string classesText(const uint64_t (&bands)[kCopyClasses], const char* const (&names)[kCopyClasses],
                          size_t min) const;
  // The bands of `m` as byte ranges, from `min`: "32 KiB - 512 KiB, ...".
  std::string bandsText(uint64_t m, size_t min) const;
  // Whether a collective of class `cls` that moves `bytes` in all (reduce:
  // cmaMinReduce_) goes by single copy: allowed, from the threshold, and in
  // a band that takes it (ACCL_SHM_CMA=on: every band; auto: the measured
  // ones).
  bool singleCopyFor(size_t bytes, size_t min, int cls = 0) const {
    return cma_ && bytes >= min && ((cmaBands_[cls] >> (63 - __builtin_clzll(bytes))) & 1);
  }
  // Whether the group's probe found an op of class `cls` that moves `bytes`
  // faster with its slots written with non-temporal stores (streamBands_; or
  // ACCL_SHM_STREAM_BYTES set): the readers then take the bytes from memory
  // rather than from the writer's cache, which was faster at 64-256 KiB on
  // one VM, and at every size in its launches whose copies between cores ran
  // slow. streamNow decides each op, with this rank's measured rates.
  bool streamFor(size_t bytes, int cls = 0) const {
    if (o_.stream >= 0) return streamForSetting(bytes);
    return bytes && ((streamBands_[cls] >> (63 - __builtin_clzll(bytes))) & 1);
  }
  // ACCL_SHM_STREAM_BYTES set: whether an op of `bytes` streams.
  bool streamForSetting(size_t bytes) const { return o_.stream > 0 && bytes >= static_cast<size_t>(o_.stream); }
  // The size an op's copies into its output compare with the streaming
  // threshold (internal::copyOut's `total`): its output's `bytes`, but under
  // auto, out of place, the bytes of the op's inputs and outputs on all
  // local ranks together (`footprint`): where those exceed the cache, the
  // output's lines are not in it, and plain stores read each one from memory
  // first (2 ranks, allreduce out of place, 16 MiB: 5.2-6.7 GB/s busbw plainly,
  // 7.9-8.3 streamed). In place an allreduce or a reduce has just read those
  // lines itself, and plain stores find them in the cache (streamed there, 8
  // and 16 MiB ran slower; docs/performance-history.md, "A reduction's own
  // slice straight to the output").
  size_t outputWeight(size_t bytes, size_t footprint, bool inPlace) const {
    return o_.stream >= 0 || inPlace ? bytes : std::max(bytes, footprint);
  }
  // The way this rank writes its slot for an op of way class `cls` moving
  // `bytes`: `probed` (streamFor's, or streamForSetting's for the classes the
  // probe does not time), but with non-temporal stores where this rank's
  // plain writes of the class have lately run at under half the rate of its
  // streamed ones, and the other way now and then (copy.h, WriteWay).
  bool streamNow(size_t bytes, int cls, bool probed);
  // Into this rank's slot, with non-temporal stores where `stream`; timed
  // into this rank's rates of writing its slot for class `cls` (copy.h).
  void copyIn(void* slot, const void* src, size_t n, bool stream, int cls);
  // Allreduce and reduce_scatter: single copy only where asked for
  // (ACCL_SHM_CMA=on); auto keeps the segment, whose own-slice reads beat it.
  bool singleCopyReducing(size_t bytes) const { return cma_ && cmaEvery_ && bytes >= cmaMin_; }
  // Sets oversubscribed_ from every local rank's affinity mask (one round),
  // and with it the single-copy thresholds.
  void checkOversubscribed();
  // Whether a gather (cls 0) or scatter (kScatterClass) of `total` bytes,
  // `largest` from one rank, goes by single copy.
  bool singleCopyRooted(size_t total, size_t largest, int cls) const;
  // Reduces elements [off, off + n) of every local rank's data into dst, in
  // rank order: from the slots of `round` (fromSlots; this rank's own from
  // `ownIn` instead where given: its input, laid out as its slot, whose slice
  // it did not copy there), or by single copy from the published inputs.
  // `stream` (fromSlots only): dst is this rank's slot, which its peers
  // read next; the result goes there with non-temporal stores, reduced a
  // cache-sized chunk at a time into tmp_ first. `alsoOut` (fromSlots
  // only): each chunk also goes there while in cache, this rank's slice of
  // an output of `outTotal` bytes (internal::copyOut), so the rank does not
  // read its own result back from its slot; with dst null, only there.
  void reduceFromAll(char* dst, size_t off, size_t n, DataType t, ReduceKind k,
                     uint64_t round, bool fromSlots, size_t slotOff, const char* ownIn = nullptr,
                     bool stream = false, char* alsoOut = nullptr, size_t outTotal = 0);
  // Whether a reduction of `total` bytes writes its slot's next piece with
  // non-temporal stores (the setting's way, or this rank's rates). Asked
  // once per piece, for its copy in and its reduced slice alike: the way
  // not taken is tried once per WriteWay::kExplore, on one piece (a whole
  // large op tried the slower way cost its runs 3-6 %).
  bool streamReducing(size_t total) { return streamNow(total, kReduceClass, streamForSetting(total)); }
  // Copies a piece of m elements (es bytes each) into this rank's slot of the
  // next round: whole, or all but this rank's slice (part(m, n, rank)); with
  // non-temporal stores where `stream`.
  void copyInButOwnSlice(const char* src, size_t m, size_t es, bool whole, bool stream);
  // Sets oversubscribed_ and the single-copy thresholds that follow from it.
  void shareCpus(bool shared);
  // Options::cpusShared: the local ranks share cores all the same (with the
  // ranks of other hosts of this machine): waits yield at once, as when
  // oversubscribed().
  void setOversubscribed();

  Options o_;
  void* base_ = nullptr;
  size_t mapBytes_ = 0;
  size_t slot_ = 0;
  bool cma_ = false;       // process_vm_readv works between the local ranks, and is not off
  bool cmaEvery_ = false;  // ACCL_SHM_CMA=on
  // Per class, bit b: single copy for collectives of [2^b, 2^(b+1)) bytes
  // (with cma_ and the thresholds below).
  uint64_t cmaBands_[kCopyClasses] = {0, 0, 0, 0};
  // Per class, bit b: the slots of such collectives are written with
  // non-temporal stores (measured with single copy's bands; never where
  // nothing was measured).
  uint64_t streamBands_[kCopyClasses] = {0, 0, 0, 0};
  bool probing_ = false;  // measureSingleCopy sets each way itself
  internal::WriteWay writeWay_[kWayClasses];
  std::vector<Probe> probes_;
  // Every local rank can issue and take the kernel's global barrier: while
  // the ranks have a CPU each, arrivals are light (their store is not
  // followed by a full fence), and a rank about to sleep issues that
  // barrier on the others' cores instead (waitFor, publish).
  bool light_ = false;
  // Waits that found a late peer on this rank's CPU (stackedOnMe).
  uint64_t stackedWaits_ = 0;
  int cpuNoted_ = -1;  // this rank's Ctl::cpu as it last stored it (core::noteCpu)
  bool oversubscribed_ = false;  // fewer CPUs among the local ranks' affinity masks than local ranks
  size_t cmaMin_ = 64u << 10;        // single copy from this size (shm.cc: kCmaMin*)
  size_t cmaMinReduce_ = 64u << 10;  // the same for reduce
  // A sender of eager ops reads its peers' arrival lines (which each peer
  // writes every round: a cache-line transfer, about 0.1 us of an 8-byte op)
  // only every kCheckEvery rounds, or when the last arrival it saw of a peer
  // does not free the next cell.
  static constexpr int kCheckEvery = 8;
  // Also raised by this rank's waits (waitAll, waitRoot), so that a rank
  // that has just received does not read the lines again at its next eager op.
  std::vector<uint64_t> seen_;  // per local rank: the last arrival read (a lower bound of the peer's round)
  uint64_t round_ = 0;       // the last round this rank arrived at
  uint64_t chain_ = 0;       // the running hash of this rank's descriptors up to round_
  struct Hist {
    OpDesc desc;
    uint64_t chain = 0;
  } hist_[kDepth];           // the last rounds' (at round % kDepth)
  bool lagging_ = false;     // returned from round_ without every local rank's arrival
  Clock::time_point deadline_{};
  std::vector<char> tmp_;
  std::vector<char> acc_;  // reduce: a non-root rank's reduced chunk on its way to the root
};

}  // namespace core
}  // namespace accl
