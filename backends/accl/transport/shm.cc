#include "transport/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <cerrno>
#include <climits>
#include <cstring>

#include "accl/errors.h"
#include "accl/internal/reduce_kernels.h"
#include "accl/logging.h"
#include "accl/internal/strings.h"
#include "transport/copy.h"

namespace accl {
namespace core {

namespace {
constexpr uint32_t kShmMagic = 0x53434341;  // "ACCS"
constexpr int kMaxLocal = 64;
// The most a waiter yields its core before it sleeps on the futex (and from
// then on runs its periodic checks).
constexpr auto kYieldFor = std::chrono::milliseconds(2);
// From these sizes ops read and write the peers' buffers (process_vm_readv /
// writev) instead of copying through the segment's slots: where every local
// rank has a CPU of its own, from 16 KiB (32 KiB for reduce); where local
// ranks share CPUs, from 64 KiB (the single-copy steps make each rank wait
// for its peers' reads, more hand-offs of the shared CPUs). Measured with
// accl-vs-mpi at 8-64 KiB, 2 ranks bound and unbound and 4 ranks on 2 cores
// (docs/performance-history.md, "The single-copy threshold").
constexpr size_t kCmaMinBytes = 16u << 10;
constexpr size_t kCmaMinReduceBytes = 32u << 10;
// (Between two local ranks a reduce kept the slots up to 256 KiB whatever the
// probe found, measured when the probe timed reduces together with
// alltoalls; the probe now times reduces apart, and its bands decide from
// 32 KiB as for more ranks: docs/performance-history.md, "A probe at 4 MiB,
// reduces probed apart, and point-to-point single copy from 16 and 64 KiB".)
constexpr size_t kCmaMinSharedCpuBytes = 64u << 10;
// ACCL_SHM_CMA=auto with a CPU per local rank: single copy against the
// slots, timed when the domain is made at each of these sizes; each decides
// the bands from just above the size before it up to twice its own, the
// first also [size / 2, size), the last every size above too. Below the
// first band the slots stay. Which of the two is faster changes with where
// this machine's cores sit: on one 2-core VM single copy took 0.5-0.8x the
// slots' time at 64-256 KiB in most launches and 1.4-1.9x in others, and the
// slots won at 1 MiB in most.
//
// Sizes above 2 MiB follow a probe of their own (4 MiB), not the 1 MiB
// verdict: the 1 MiB ratio did not tell which way larger ops run faster.
// Above 2 MiB the slots pipeline a slot at a time through the cache, where
// single copy pins every page and writes plainly; on one 2-core VM, in
// launches whose probe gave single copy 0.62-0.87x the slots' time at 1 MiB,
// allgather of 2-32 MiB ran faster through the slots (1.02-1.57 of Open MPI's
// busbw, against 0.96-1.04 by single copy), and on another, in launches whose
// probe gave 0.59-0.92x there, every rooted op, allgather and alltoall of
// 2-128 MiB ran faster by single copy (scatter of 2 MiB 0.63-0.65 of Open
// MPI's busbw through the slots, 1.46-1.70 by single copy; alltoall 0.73-0.89
// and 0.92-1.09) (docs/performance-history.md, "A probe at 4 MiB, reduces
// probed apart, and point-to-point single copy from 16 and 64 KiB").
constexpr size_t kProbeBytes[] = {64u << 10, 128u << 10, 256u << 10, 512u << 10, 1u << 20, 4u << 20};
constexpr size_t kNumProbes = sizeof(kProbeBytes) / sizeof(kProbeBytes[0]);
constexpr int kProbeOps = 2;   // broadcast-and-allgather pairs (or scatter pairs) per timed batch
constexpr int kProbeReps = 4;  // timed batches of each way (the best counts)
// Above 1 MiB a batch is one op (or pair) and three of each way are timed:
// an op of 4 MiB takes 0.1-0.7 ms here, long against the clock's noise, and
// this keeps the probe's added time at start-up near that of the sizes below.
constexpr size_t kProbeLargeBytes = 1u << 20;
constexpr int kProbeLargeReps = 3;
// Single copy takes a band where it took less than the slots' time. (A
// margin kept the slots at 256 KiB in a launch whose probe gave single copy
// 0.92x, where Open MPI, which reads by single copy there, was then 1.1-1.3x
// faster than the slots in four ops.)
constexpr double kSingleCopyWins = 1.0;
constexpr uint64_t kBandsUnknown = ~uint64_t(0);
constexpr size_t kSmallReduceBytes = 16u << 10;  // below this, every rank reduces the whole piece
// Between two local ranks, the other rank's input lands in the root's view
// in pieces of a round's bytes / kReducePieces (4 KiB multiples), not under
// kReducePieceMin, which the root reduces as they come.
constexpr size_t kReducePieces = 4;
constexpr size_t kReducePieceMin = 8u << 10;
// Below this, a single-copy reduce between two ranks is read and reduced by the root alone.
constexpr size_t kRootReadsAllBelowBytes = 64u << 10;
constexpr size_t kStreamChunk = 32u << 10;     // a reduction's chunks on their way into a slot (L1/L2-resident)
constexpr size_t kChunk = 256u << 10;           // cache-sized steps of single-copy reductions (L2-resident)
// Eager rooted ops: a rank that only sends (the root of a broadcast or a
// scatter, the others of a gather or a reduce) leaves its data in a cell of
// its own and returns; the receivers take it when they come. Each rank has
// kDepth cells (shm.h), one per round modulo kDepth, so a sender may run up
// to kDepth - 1 rounds ahead of the slowest rank (its credits).
constexpr size_t kCell = 8u << 10;  // a cell's bytes: the eager limit
// Eager ops of at most kBoxBytes (a gather's or a reduce's part, a
// broadcast's message, a scatter's parts together) go in the sender's box
// of the round instead: up to kBoxLines cache lines. The first holds the
// round's number, the sender's chain of that round and the first
// kBoxHeadBytes; each further line the round's number again and the next
// kBoxLineBytes. A receiver polls every line its bytes need at once, so
// their transfers from the sender's core overlap: through a cell it read the
// sender's arrival line (with the chain) first and the cell's lines after it,
// one transfer after another. The boxes of consecutive rounds lie side by side.
constexpr size_t kBoxLines = 4;
constexpr size_t kBoxHeadBytes = 48;
constexpr size_t kBoxLineBytes = 56;
constexpr size_t kBoxBytes = kBoxHeadBytes + (kBoxLines - 1) * kBoxLineBytes;  // 216
// The lines of a box that hold its first `bytes` bytes (the first always).
size_t boxLines(size_t bytes) {
  return bytes <= kBoxHeadBytes ? 1 : 1 + (bytes - kBoxHeadBytes + kBoxLineBytes - 1) / kBoxLineBytes;
}
// A broadcast through the slots publishes its progress every eighth of the
// slot's share, and at least every this many bytes.
constexpr size_t kFillPieceMin = 16u << 10;
// The run-time check of the slots' write way (ShmDomain::streamNow): ops of
// at least kRateMinBytes decide by this rank's rates of writing its slot
// (copy.h: WriteWay); the way not taken is tried now and then, but not
// where the ranks outnumber the cores (there a copy's time is mostly the
// time its core was away). There the choice stays plain, which is slower in
// some launches: 4 ranks on 2 cores, where plain writes into the slots ran
// slow, reduce and gather of 2 MiB took 1.6-2.2 and 0.26-0.74 ms with plain
// writes against 0.47-0.62 and 0.11-0.16 streamed (ACCL_SHM_STREAM_BYTES);
// in the others 0.26-0.40 and 0.07-0.11 plain against 0.57-0.76 and
// 0.14-0.16 streamed. A writer there runs its streamed writes at about the
// rate of its plain ones even where plain ones make the op twice as fast
// (the readers then take the bytes from memory), and in the slow state some
// plain writes still run fast: its own rates do not tell the two states
// apart. Two trials timed them there: by the fastest recent writes of each
// way, the way did not switch in the slow state; by each way's mean time
// per byte, it did, but reduce and alltoall ran 30-50 % slower in the fast
// state.
constexpr size_t kRateMinBytes = 64u << 10;
// Ctl::a2a's flags beside the largest chunk: the chunks are in the slot
// already; the buffers overlap (in place); in place with equal send and
// receive layouts (chunks swap pairwise).
constexpr uint64_t kSlotsWritten = uint64_t(1) << 63;
constexpr uint64_t kOverlap = uint64_t(1) << 62;
constexpr uint64_t kSwap = uint64_t(1) << 61;
constexpr uint64_t kA2aFlags = kSlotsWritten | kOverlap | kSwap;
constexpr size_t kSwapChunk = 1u << 20;  // the pieces of an in-place swap (the rank's tmp_)
// Ctl::filled: a slot's bytes (at most 1 MiB) below the round's number.
constexpr int kFillBits = 21;
constexpr uint64_t kFillMask = (uint64_t(1) << kFillBits) - 1;

// The running hash of a rank's op descriptors, round by round: equal chains
// at a round mean equal op sequences up to it.
uint64_t chainNext(uint64_t chain, const OpDesc& d) {
  uint64_t x = chain ^ (d.seq * 0x9e3779b97f4a7c15ULL) ^ (d.count + 0x632be59bd9b4e019ULL) ^
               (uint64_t(d.op) << 48 | uint64_t(d.dtype) << 40 | uint64_t(d.redop) << 32 | uint32_t(d.root));
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

long futexWait(std::atomic<uint32_t>* addr, uint32_t val, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, val, &ts, nullptr, 0);
}
void futexWakeAll(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Whether this process can take part in light arrivals (ShmDomain::light_):
// registered for the kernel's global expedited memory barrier, which a rank
// about to sleep then issues on every registered process's running threads
// (Linux 4.16 and later; a seccomp filter may refuse it). Once per process.
bool registerForBarriers() {
  static const bool ok = [] {
#ifdef __NR_membarrier
    long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) && (q & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
           syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

// A full memory barrier on every running thread of the registered processes
// (this host's local ranks). False if the kernel refused it.
bool barrierEverywhere() {
#ifdef __NR_membarrier
  return syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
#else
  return false;
#endif
}

size_t align64(size_t x) { return (x + 63) & ~size_t(63); }

// Splits n elements into p near-equal parts; part i is [lo, hi).
void part(size_t n, int p, int i, size_t* lo, size_t* hi) {
  size_t base = n / p, extra = n % p;
  *lo = i * base + std::min<size_t>(i, extra);
  *hi = *lo + base + (static_cast<size_t>(i) < extra ? 1 : 0);
}
}  // namespace

struct alignas(128) ShmDomain::Header {
  uint32_t magic;
  uint32_t nlocal;
  std::atomic<uint32_t> futex;
  std::atomic<uint32_t> sleepers;
};

struct alignas(128) ShmDomain::Ctl {
  // arrive and the chains of the last kShort rounds share one cache line: a
  // peer checking this rank's arrival at a round it has just reached gets
  // what it needs for the mismatch check in one transfer. Round k's entry is
  // at k % kShort. A peer that checks a round this rank has run past (an
  // eager op's receiver, up to kDepth - 1 rounds behind) reads the round's
  // entry of chainLong (at k % kDepth) instead. The descriptors are read only
  // to name a mismatch.
  std::atomic<uint64_t> arrive;
  std::atomic<uint64_t> chain[kShort];
  // The CPU this rank last arrived or waited on (-1: none yet), stored only
  // when it changes, in the line a waiting peer reads anyway: a peer that has
  // to wait and finds this rank late on its own CPU gives the CPU up at once
  // (stackedOnMe).
  std::atomic<int32_t> cpu;
  char pad0[64 - 8 - 8 * kShort - 4];
  std::atomic<uint64_t> chainLong[kDepth];
  OpDesc desc[kDepth];
  int32_t pid;
  int32_t cmaOk;
  int32_t barriersOk;  // registered for the global expedited barrier (registerForBarriers)
  // Single copy's bands per class of ops (ShmDomain::cmaBands_): this
  // rank's from an earlier domain of the same processes (kBandsUnknown:
  // none), then local rank 0's decision, with its time ratios (x 1e6) at
  // kProbeBytes.
  uint64_t cmaBands[ShmDomain::kCopyClasses];
  uint64_t probeRatio[ShmDomain::kCopyClasses][kNumProbes];
  // The same for the slots written with non-temporal stores (streamBands_).
  uint64_t streamBands[ShmDomain::kCopyClasses];
  uint64_t streamRatio[ShmDomain::kCopyClasses][kNumProbes];
  uint64_t ptrIn, ptrOut, aux;
  // alltoallv's layout word of round k at k % 2: the largest chunk this rank
  // sends, and its flags (kSlotsWritten when its chunks are in its slot already,
  // kOverlap, kSwap) (two
  // words: a rank that returns after the layout round writes the next op's
  // while its peers may still read this one's).
  uint64_t a2a[2];
  uint64_t offs[kMaxLocal];
  uint64_t cpus[16];  // the CPUs this rank may run on (a cpu_set_t's first 1024)
  // How far this rank has filled its slot of a round whose readers take it
  // piece by piece as it lands (broadcast): the round << kFillBits | bytes.
  // A line of its own: the readers poll it while this rank writes the slot.
  alignas(64) std::atomic<uint64_t> filled;
};

ShmDomain::Ctl& ShmDomain::ctl(int r) const {
  return reinterpret_cast<Ctl*>(static_cast<char*>(base_) + sizeof(Header))[r];
}

char* ShmDomain::slot(uint64_t round, int r) const {
  size_t dataOff = align64(sizeof(Header) + sizeof(Ctl) * o_.localSize);
  return static_cast<char*>(base_) + dataOff + ((round & 1) * o_.localSize + r) * slot_;
}

char* ShmDomain::cell(uint64_t round, int r) const {
  size_t cellOff = align64(sizeof(Header) + sizeof(Ctl) * o_.localSize) + 2 * o_.localSize * slot_;
  return static_cast<char*>(base_) + cellOff + (static_cast<size_t>(r) * kDepth + round % kDepth) * kCell;
}

struct alignas(64) ShmDomain::Box {
  std::atomic<uint64_t> round;  // the round whose bytes these are (published last)
  uint64_t chain;               // the sender's chain at that round
  char data[kBoxHeadBytes];
  struct alignas(64) Line {
    std::atomic<uint64_t> round;  // the round whose bytes this line holds (published after them)
    char data[kBoxLineBytes];
  } more[kBoxLines - 1];
  // Calls f(line's bytes, n, at) for each piece of the box's bytes
  // [off, off + n), `at` counting from off.
  template <class B, class F>
  static void pieces(B& b, size_t off, size_t n, F f) {
    for (size_t at = 0; at < n;) {
      size_t x = off + at, line = x < kBoxHeadBytes ? 0 : 1 + (x - kBoxHeadBytes) / kBoxLineBytes;
      size_t start = line == 0 ? 0 : kBoxHeadBytes + (line - 1) * kBoxLineBytes;
      size_t end = line == 0 ? kBoxHeadBytes : start + kBoxLineBytes;
      size_t m = std::min(n - at, end - x);
      f((line == 0 ? b.data : b.more[line - 1].data) + (x - start), m, at);
      at += m;
    }
  }
  void put(const void* src, size_t off, size_t n) {
    pieces(*this, off, n, [&](char* d, size_t m, size_t at) { std::memcpy(d, static_cast<const char*>(src) + at, m); });
  }
  void get(void* dst, size_t off, size_t n) const {
    pieces(*this, off, n, [&](const char* d, size_t m, size_t at) { std::memcpy(static_cast<char*>(dst) + at, d, m); });
  }
};
ShmDomain::Box& ShmDomain::box(uint64_t round, int r) const {
  static_assert(sizeof(Box) == 64 * kBoxLines, "a box is kBoxLines cache lines");
  // The boxes follow the cells (cell(0, 0) is the first of them).
  char* boxes = cell(0, 0) + static_cast<size_t>(o_.localSize) * kDepth * kCell;
  return reinterpret_cast<Box*>(boxes)[static_cast<size_t>(r) * kDepth + round % kDepth];
}

bool ShmDomain::singleCopyRooted(size_t total, size_t largest, int cls) const {
  // A gather's or a scatter's parts that fit the eager cells go eagerly unless
  // the whole is large enough for single copy where CPUs are shared too.
  return singleCopyFor(total, cmaMin_, cls) && (largest > kCell || total >= kCmaMinSharedCpuBytes);
}

ShmDomain::ShmDomain(Options o) : o_(std::move(o)) {
  int n = o_.localSize;
  if (n > kMaxLocal)
    throw InvalidArgument(o_.where + ": " + std::to_string(n) + " ranks on one host; the shm transport supports up to " +
                          std::to_string(kMaxLocal) + " (use ACCL_TRANSPORTS=tcp)");
  slot_ = n <= 4 ? (1u << 20) : n <= 16 ? (512u << 10) : (128u << 10);
  size_t dataOff = align64(sizeof(Header) + sizeof(Ctl) * n);
  mapBytes_ = dataOff + 2 * n * slot_ + static_cast<size_t>(n) * kDepth * (kCell + sizeof(Box));
  deadline_ = Clock::now() + o_.timeout;
  seen_.assign(static_cast<size_t>(n), 0);
  const std::string& name = o_.segmentName;
  int fd = -1;
  if (o_.localRank == 0) {
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw SystemError(o_.where + ": " + errnoMessage("cannot create shared memory " + name, errno));
    // Reserve the pages now: a sparse segment on a full /dev/shm would kill
    // the process with SIGBUS at the first touch of a missing page.
    int e = ftruncate(fd, static_cast<off_t>(mapBytes_)) != 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(mapBytes_));
    if (e != 0) {
      ::close(fd);
      shm_unlink(name.c_str());
      std::string space;
      struct statvfs vfs {};
      if (statvfs("/dev/shm", &vfs) == 0)
        space = "; /dev/shm has " + std::to_string(static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize >> 10) +
                " KiB free of " + std::to_string(static_cast<unsigned long long>(vfs.f_blocks) * vfs.f_frsize >> 10) + " KiB";
      throw SystemError(o_.where + ": cannot reserve " + std::to_string(mapBytes_ >> 10) + " KiB of shared memory for " +
                        std::to_string(n) + " ranks on this host (" + name + "): " + errnoMessage("reserving the pages", e) + space +
                        ". Give the container more (docker run --shm-size=1g, or --ipc=host), or run without "
                        "shared memory: ACCL_TRANSPORTS=tcp");
    }
  }
  if (o_.localRank == 0) {
    base_ = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (base_ == MAP_FAILED) {
      shm_unlink(name.c_str());
      throw SystemError(o_.where + ": " + errnoMessage("cannot map shared memory", e));
    }
    auto* h = new (base_) Header();
    h->magic = kShmMagic;
    h->nlocal = n;
    for (int r = 0; r < n; ++r) new (&ctl(r)) Ctl();
    o_.store->set(name + "/created", toBytes("1"));
  } else {
    o_.store->wait({name + "/created"}, o_.timeout);
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw SystemError(o_.where + ": " + errnoMessage("cannot open shared memory " + name, errno));
    base_ = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (base_ == MAP_FAILED) throw SystemError(o_.where + ": " + errnoMessage("cannot map shared memory", e));
    auto* h = static_cast<Header*>(base_);
    if (h->magic != kShmMagic || static_cast<int>(h->nlocal) != n)
      throw Internal(o_.where + ": shared memory " + name + " has an unexpected layout");
  }
  ctl(o_.localRank).pid = getpid();
  ctl(o_.localRank).cpu.store(-1, std::memory_order_relaxed);
  // The segment lives while mapped; unlink it once everyone has it open so
  // that nothing is left behind in /dev/shm, even after a crash.
  o_.store->set(name + "/opened/" + std::to_string(o_.localRank), toBytes("1"));
  if (o_.localRank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < n; ++r) keys.push_back(name + "/opened/" + std::to_string(r));
    try {
      o_.store->wait(keys, o_.timeout);
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
    shm_unlink(name.c_str());
  }
  probeCma();
  checkOversubscribed();
  if (o_.cpusShared) setOversubscribed();
  if (cma_ && o_.cma > 0) {
    cmaEvery_ = true;
    for (auto& b : cmaBands_) b = ~uint64_t(0);
  } else if (cma_) {
    measureSingleCopy();
  }
}

namespace {
// Single copy's bands as measured by an earlier domain of exactly these
// processes (a group split from another, made again, ...): the same cores,
// so no second measurement. Keyed by the local ranks' pids in rank order.
struct KnownBands {
  std::vector<int32_t> pids;
  uint64_t bands[ShmDomain::kCopyClasses];
  uint64_t stream[ShmDomain::kCopyClasses];
  std::vector<ShmDomain::Probe> probes;
};
std::mutex gBandsMu;
std::vector<KnownBands> gBands;
}  // namespace

std::vector<int32_t> ShmDomain::localPids() const {
  std::vector<int32_t> pids;
  for (int p = 0; p < o_.localSize; ++p) pids.push_back(ctl(p).pid);
  return pids;
}

size_t ShmDomain::singleCopyEveryBandFrom() const {
  if (!cma_ || cmaEvery_ || probes_.empty()) return SIZE_MAX;
  uint64_t m = cmaBands_[0];
  int b = 63 - __builtin_clzll(kProbeBytes[kNumProbes - 1]);
  if (!(m >> b & 1)) return SIZE_MAX;
  while (b > 0 && (m >> (b - 1) & 1)) --b;
  // Every band from the first: from the collectives' own threshold, below
  // the first band (2 ranks with a core each, sendrecv of 16 KiB: 0.81-0.83
  // of Open MPI's busbw through the rings, 1.06-1.09 by single copy; of 8
  // KiB 1.21-1.35 and 1.15-1.18).
  if (b <= 63 - __builtin_clzll(kProbeBytes[0]) - 1) return std::min(size_t(1) << b, kCmaMinBytes);
  return size_t(1) << b;
}

void ShmDomain::measureSingleCopy() {
  int n = o_.localSize, me = o_.localRank;
  std::vector<int32_t> pids = localPids();
  KnownBands known{pids, {kBandsUnknown, kBandsUnknown, kBandsUnknown, kBandsUnknown}, {0, 0, 0, 0}, {}};
  {
    std::lock_guard<std::mutex> lk(gBandsMu);
    for (const auto& e : gBands)
      if (e.pids == pids) known = e;
  }
  OpDesc d{};
  d.op = 0xffd;
  for (int c = 0; c < kCopyClasses; ++c) ctl(me).cmaBands[c] = known.bands[c];
  round(d);
  bool allKnow = known.bands[0] != kBandsUnknown;
  for (int p = 0; p < n; ++p)
    for (int c = 0; c < kCopyClasses; ++c) allKnow = allKnow && ctl(p).cmaBands[c] == known.bands[c];
  if (allKnow) {
    for (int c = 0; c < kCopyClasses; ++c) cmaBands_[c] = known.bands[c], streamBands_[c] = known.stream[c];
    probes_ = known.probes;
    return;
  }
  // Every rank runs the same ops (local rank 0's clock decides), each class
  // of ops on its own: broadcasts from local rank 0 and allgathers; scatters
  // from local rank 0; alltoalls and float sums reduced to local rank 0.
  // Each size three ways (the slots written plainly, the
  // slots written with non-temporal stores, single copy), in turns that
  // rotate which goes first, after one untimed batch of each (first touches
  // of the buffers, the kernel's first pins of their pages). The slots' time
  // is the faster of their two ways.
  Clock::time_point deadline = Clock::now() + o_.timeout;
  size_t largest = kProbeBytes[kNumProbes - 1];
  probing_ = true;  // each way as set below (streamNow)
  std::vector<char> buf(largest, 1), out(largest, 0), in(largest / static_cast<size_t>(n) + 64, 2);
  uint64_t bands[kCopyClasses] = {0, 0, 0, 0}, stream[kCopyClasses] = {0, 0, 0, 0};
  std::vector<Probe> probes;
  for (size_t i = 0; i < kNumProbes; ++i) {
    size_t per = (kProbeBytes[i] / static_cast<size_t>(n)) & ~size_t(63);
    std::vector<size_t> parts(static_cast<size_t>(n), per);
    size_t total = per * static_cast<size_t>(n);
    d.count = total;
    Probe pr{kProbeBytes[i], {0, 0, 0, 0}, {0, 0, 0, 0}};
    bool large = kProbeBytes[i] > kProbeLargeBytes;
    int ops = large ? 1 : kProbeOps, reps = large ? kProbeLargeReps : kProbeReps;
    for (int c = 0; c < kCopyClasses; ++c) {
      // way 0: the slots; 1: the slots, streamed; 2: single copy.
      auto batch = [&](int way) {
        cmaBands_[c] = way == 2 ? ~uint64_t(0) : 0;
        streamBands_[c] = way == 1 ? ~uint64_t(0) : 0;
        auto t0 = Clock::now();
        for (int k = 0; k < ops; ++k) {
          if (c == 0) {
            broadcast(buf.data(), total, 0, d, deadline);
            allgatherv(in.data(), out.data(), parts, d, deadline);
          } else if (c == kScatterClass) {
            scatterv(buf.data(), out.data(), parts, 0, d, deadline);
            scatterv(buf.data(), out.data(), parts, 0, d, deadline);
          } else if (c == kAlltoallClass) {
            alltoallv(buf.data(), parts, out.data(), parts, d, deadline);
            alltoallv(buf.data(), parts, out.data(), parts, d, deadline);
          } else {
            reduce(buf.data(), out.data(), total / sizeof(float), DataType::Float32, ReduceKind::Sum, 0, d, deadline);
            reduce(buf.data(), out.data(), total / sizeof(float), DataType::Float32, ReduceKind::Sum, 0, d, deadline);
          }
        }
        cmaBands_[c] = 0;
        streamBands_[c] = 0;
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      // Only under ACCL_SHM_STREAM_BYTES=auto (a value decides it), and not
      // for reduce, whose copies in do not take the probed way.
      bool tryStream = o_.stream < 0 && c != kReduceClass;
      for (int way = 0; way < 3; ++way)
        if (way != 1 || tryStream) batch(way);
      double best[3] = {1e300, 1e300, 1e300};
      for (int r = 0; r < reps; ++r)
        for (int j = 0; j < 3; ++j) {
          int way = (r + j) % 3;
          if (way != 1 || tryStream) best[way] = std::min(best[way], batch(way));
        }
      bool streamed = tryStream && best[1] < best[0];
      pr.streamRatio[c] = tryStream ? best[1] / best[0] : 0;
      pr.ratio[c] = best[2] / best[streamed ? 1 : 0];
      // The bits from just above the size before (the first size: its half)
      // up to the size's own power of two, [that, 2 x size); the last size
      // also every bit above.
      int b = 63 - __builtin_clzll(kProbeBytes[i]);
      int from = i == 0 ? b - 1 : 64 - __builtin_clzll(kProbeBytes[i - 1]);
      uint64_t band = (i + 1 == kNumProbes ? ~uint64_t(0) : (uint64_t(2) << b) - 1) & (~uint64_t(0) << from);
      if (pr.ratio[c] < kSingleCopyWins) bands[c] |= band;
      else if (streamed) stream[c] |= band;
    }
    probes.push_back(pr);
  }
  if (me == 0) {
    for (int c = 0; c < kCopyClasses; ++c) {
      ctl(0).cmaBands[c] = bands[c];
      ctl(0).streamBands[c] = stream[c];
      for (size_t i = 0; i < kNumProbes; ++i) {
        ctl(0).probeRatio[c][i] = static_cast<uint64_t>(probes[i].ratio[c] * 1e6);
        ctl(0).streamRatio[c][i] = static_cast<uint64_t>(probes[i].streamRatio[c] * 1e6);
      }
    }
  }
  probing_ = false;
  d.count = 0;
  round(d);
  for (int c = 0; c < kCopyClasses; ++c) {
    cmaBands_[c] = ctl(0).cmaBands[c];
    streamBands_[c] = ctl(0).streamBands[c];
    for (size_t i = 0; i < kNumProbes; ++i) {
      probes[i].ratio[c] = ctl(0).probeRatio[c][i] / 1e6;
      probes[i].streamRatio[c] = ctl(0).streamRatio[c][i] / 1e6;
    }
  }
  probes_ = probes;
  {
    std::lock_guard<std::mutex> lk(gBandsMu);
    KnownBands k{pids, {cmaBands_[0], cmaBands_[1], cmaBands_[2], cmaBands_[3]},
                 {streamBands_[0], streamBands_[1], streamBands_[2], streamBands_[3]}, probes_};
    bool found = false;
    for (auto& e : gBands)
      if (e.pids == pids) {
        e = k;
        found = true;
      }
    if (!found) gBands.push_back(k);
  }
  ACCL_INFO("INIT", o_.where << ": " << describe());
}

ShmDomain::~ShmDomain() {
  if (stackedWaits_)
    ACCL_INFO("COLL", o_.where << ": " << stackedWaits_ << " waits found a late local rank on this rank's CPU");
  if (base_ && base_ != MAP_FAILED) munmap(base_, mapBytes_);
}

void ShmDomain::probeCma() {
  OpDesc d{};
  d.op = 0xfff;
  // One word per process that the local peers read with process_vm_readv;
  // groups made at the same time by threads of one process all write it (the
  // same value: the pid, set here since a fork changes it).
  static std::atomic<uint64_t> probe{0};
  probe.store(0x5ca1ab1e00000000ull | static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
  bool ok = o_.cma >= 0;
  if (ok && o_.localSize > 1) {
    // Yama's ptrace_scope=1 only lets ancestors read a process; allow the local peers.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    ctl(o_.localRank).ptrIn = reinterpret_cast<uint64_t>(&probe);
    round(d);
    for (int p = 0; p < o_.localSize && ok; ++p) {
      if (p == o_.localRank) continue;
      uint64_t v = 0;
      iovec l{&v, sizeof(v)}, r{reinterpret_cast<void*>(ctl(p).ptrIn), sizeof(v)};
      ssize_t got = process_vm_readv(ctl(p).pid, &l, 1, &r, 1, 0);
      if (got != static_cast<ssize_t>(sizeof(v)) || v != (0x5ca1ab1e00000000ull | static_cast<uint64_t>(ctl(p).pid))) {
        ok = false;
        ACCL_INFO("INIT", o_.where << ": process_vm_readv from local rank " << p
                                   << " failed (" << (got < 0 ? errnoMessage("process_vm_readv", errno) : std::string("wrong data"))
                                   << "); copying through the shared segment");
      }
    }
    ctl(o_.localRank).cmaOk = ok ? 1 : 0;
    round(d);
    for (int p = 0; p < o_.localSize; ++p) ok = ok && ctl(p).cmaOk;
  }
  if (o_.localSize > 1 && !ok && o_.cma > 0)
    throw NotSupported(o_.where + ": ACCL_SHM_CMA=on but process_vm_readv between local ranks is not permitted "
                       "(ptrace restrictions or seccomp); use ACCL_SHM_CMA=auto");
  cma_ = ok && o_.localSize > 1;
}

void ShmDomain::checkOversubscribed() {
  if (o_.localSize < 2) return;
  OpDesc d{};
  d.op = 0xffe;
  // Fewer CPUs among all local ranks' affinity masks than local ranks: some
  // share a CPU (one rank's own mask says nothing: a launcher that binds each
  // rank to its own core leaves each a mask of one).
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) std::memset(&mine, 0xff, sizeof(mine));
  std::memcpy(ctl(o_.localRank).cpus, &mine, std::min(sizeof(mine), sizeof(Ctl::cpus)));
  ctl(o_.localRank).barriersOk = registerForBarriers() ? 1 : 0;
  round(d);
  // Light arrivals once every local rank can issue and receive the barrier
  // (each rank decides after this round's wait, before it waits on a light
  // arrival: the next round's).
  bool light = true;
  for (int p = 0; p < o_.localSize; ++p) light = light && ctl(p).barriersOk;
  light_ = light;
  cpu_set_t all;
  CPU_ZERO(&all);
  std::memcpy(&all, ctl(0).cpus, std::min(sizeof(all), sizeof(Ctl::cpus)));
  for (int p = 1; p < o_.localSize; ++p) {
    cpu_set_t theirs;
    CPU_ZERO(&theirs);
    std::memcpy(&theirs, ctl(p).cpus, std::min(sizeof(theirs), sizeof(Ctl::cpus)));
    CPU_OR(&all, &all, &theirs);
  }
  shareCpus(CPU_COUNT(&all) < o_.localSize);
  if (oversubscribed_)
    ACCL_INFO("INIT", o_.where << ": " << o_.localSize << " local ranks share " << CPU_COUNT(&all)
                               << " CPUs: waiting ranks yield their CPU instead of spinning");
}

void ShmDomain::shareCpus(bool shared) {
  oversubscribed_ = shared;
  cmaMin_ = shared ? kCmaMinSharedCpuBytes : kCmaMinBytes;
  cmaMinReduce_ = std::max(cmaMin_, kCmaMinReduceBytes);
}

void ShmDomain::setOversubscribed() {
  if (oversubscribed_) return;
  shareCpus(true);
  ACCL_INFO("INIT", o_.where << ": the ranks of this machine's hosts outnumber their CPUs: waiting ranks yield "
                                "their CPU instead of spinning");
}

template <typename F>
bool ShmDomain::stackedOnMe(const F& arrived) {
  // A spin on a CPU that a late peer waits to run on lasts its whole length
  // before the peer gets the CPU, at every hand-off: with 2 ranks moved onto
  // one CPU after the group was made, a 128 KiB allreduce took 132 us and an
  // 8 B one 53 us, against 29 and 2 where the group knew from the start
  // (bench/cpu_sharing.sh; docs/performance.md, "Two ranks on one CPU"). The CPU each rank arrived or waited on last
  // tells it: a round ago at most, unless the rank was moved while it waited.
  int cpu = core::noteCpu(ctl(o_.localRank).cpu, cpuNoted_);
  if (cpu < 0) return false;
  for (int p = 0; p < o_.localSize; ++p)
    if (p != o_.localRank && !arrived(p) && ctl(p).cpu.load(std::memory_order_relaxed) == cpu) {
      if (stackedWaits_++ == 0)
        ACCL_INFO("COLL", o_.where << ": local rank " << p << " (rank " << o_.ranks[p] << ") is late and was last on "
                                   << "this rank's CPU " << cpu << ": while ranks share a CPU, the one that waits "
                                   << "gives it up at once instead of spinning (binding each rank to cores of its "
                                   << "own avoids it, e.g. mpirun --bind-to core)");
      return true;
    }
  return false;
}

template <typename F>
void ShmDomain::waitFor(const F& arrived) {
  auto allIn = [&] {
    for (int p = 0; p < o_.localSize; ++p)
      if (p != o_.localRank && !arrived(p)) return false;
    return true;
  };
  if (allIn()) return;  // everyone is here: no wait, nothing to time
  WaitScope timed(waitTimes_);
  // With a core per rank, a short busy spin catches a peer that is a moment
  // behind. With more local ranks than cores, spinning holds the core the
  // late peer needs: give it up at once instead (as Open MPI does when
  // oversubscribed), and for longer before sleeping (a futex wake-up costs
  // tens of microseconds there). The same where the affinity masks leave a
  // core per rank but the scheduler has put a late peer on this rank's CPU
  // for now (woken there, or pinned there after the group was made).
  const bool yieldAtOnce = oversubscribed_ || stackedOnMe(arrived);
  if (!yieldAtOnce)
    for (int i = 0; i < 2000; ++i) {
      if (allIn()) return;
      cpuRelax();
    }
  // Bounded in time too: on a loaded host each yield can hand the core to
  // another process for a whole time slice (milliseconds), and 2000 of them
  // kept a waiter from its periodic checks below (a dead peer, the stall
  // warning, the deadline) for seconds.
  auto yieldFrom = Clock::now();
  for (int i = 0, n = yieldAtOnce ? 2000 : 20; i < n; ++i) {
    if (allIn()) return;
    sched_yield();
    if ((i & 7) == 7 && Clock::now() - yieldFrom > kYieldFor) break;
  }
  auto* h = static_cast<Header*>(base_);
  auto lastCheck = Clock::now();
  for (;;) {
    h->sleepers.fetch_add(1);
    // Against a light store (publish): the barrier runs on the
    // arriving rank's core too, so either its arrival is seen below or its
    // load of `sleepers` sees this one. Should the kernel refuse it, the
    // wait below still ends within its 5 ms to look again.
    if (light_) barrierEverywhere();
    uint32_t v = h->futex.load();
    if (allIn()) {
      h->sleepers.fetch_sub(1);
      return;
    }
    futexWait(&h->futex, v, 5);
    h->sleepers.fetch_sub(1);
    if (allIn()) return;
    auto now = Clock::now();
    if (now - lastCheck > std::chrono::milliseconds(50)) {
      lastCheck = now;
      if (o_.checkFailure) o_.checkFailure();
      for (int p = 0; p < o_.localSize; ++p)
        if (p != o_.localRank && !arrived(p) && kill(ctl(p).pid, 0) != 0 && errno == ESRCH) {
          if (o_.explainExit) o_.explainExit(p);
          throw RemoteError("rank " + std::to_string(o_.ranks[p]) + " (pid " + std::to_string(ctl(p).pid) +
                            ", same host) exited while this rank waited for it");
        }
      if (o_.onBlocked) {
        std::vector<int> missing;
        for (int p = 0; p < o_.localSize; ++p)
          if (p != o_.localRank && !arrived(p)) missing.push_back(o_.ranks[p]);
        o_.onBlocked(missing);
      }
    }
    if (now >= deadline_) {
      std::vector<int> missing;
      for (int p = 0; p < o_.localSize; ++p)
        if (p != o_.localRank && !arrived(p)) missing.push_back(o_.ranks[p]);
      if (o_.onTimeout) o_.onTimeout(missing);
      throw Timeout(o_.where + ": timed out waiting for local ranks");
    }
  }
}

void ShmDomain::arrive(const OpDesc& d) {
  uint64_t k = round_ + 1;
  Ctl& me = ctl(o_.localRank);
  chain_ = chainNext(chain_, d);
  hist_[k % kDepth] = {d, chain_};
  me.desc[k % kDepth] = d;
  me.chainLong[k % kDepth].store(chain_, std::memory_order_relaxed);
  me.chain[k % kShort].store(chain_, std::memory_order_relaxed);
  core::noteCpu(me.cpu, cpuNoted_);
  publish(me.arrive, k);
  round_ = k;
}

// Whether p's entries of round x (x <= round_, p arrived at x or later)
// match this rank's. p rewrites the round's entry of chainLong and desc at
// round x + kDepth, which it enters only once every rank, this one
// included, has arrived at x + 1 and after it arrived at x + kDepth - 1
// itself: for x == round_ they hold still; for an older x the copy is good
// if p had not gone past x + kDepth - 2 after it was read. The short ring's
// entry (in p's arrival line) is rewritten at round x + kShort, which p may
// reach while this rank is still at x (eager ops): good if p had not gone
// past x + kShort - 2 after it was read.
void ShmDomain::checkPeer(int p, uint64_t x) const {
  const Ctl& c = ctl(p);
  auto pastShort = [&] {
    std::atomic_thread_fence(std::memory_order_acquire);
    return c.arrive.load(std::memory_order_relaxed) + 2 > x + kShort;
  };
  // Whether p may have rewritten its entries of round y since they were read.
  auto overwritten = [&](uint64_t y) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return y < round_ && c.arrive.load(std::memory_order_relaxed) + 2 > y + kDepth;
  };
  uint64_t theirs = c.chain[x % kShort].load(std::memory_order_relaxed);
  if (pastShort()) {
    theirs = c.chainLong[x % kDepth].load(std::memory_order_relaxed);
    if (overwritten(x)) return;
  }
  if (theirs == hist_[x % kDepth].chain) return;
  // The chains differ from some round y <= x on: walk back through the rounds
  // both rings still hold to the first that differs, whose descriptors then
  // differ (a sender that checks only now and then names the op where the two
  // sides parted, not a later one).
  while (x > 1 && x - 1 + kDepth > round_ + 1) {
    uint64_t before = c.chainLong[(x - 1) % kDepth].load(std::memory_order_relaxed);
    if (overwritten(x - 1) || before == hist_[(x - 1) % kDepth].chain) break;
    --x;
  }
  const Hist& mine = hist_[x % kDepth];
  // Only now the descriptor (its own cache line: not read on the common path).
  OpDesc theirDesc = c.desc[x % kDepth];
  if (overwritten(x)) return;
  if (theirDesc != mine.desc)
    throw InvalidArgument("mismatched collectives: this rank called " + core::describe(mine.desc) + " but rank " +
                          std::to_string(o_.ranks[p]) + " called " + core::describe(theirDesc));
  // The same op here, another one before it that neither side waited on.
  throw InvalidArgument("mismatched collectives: this rank called " + core::describe(mine.desc) + ", and so did rank " +
                        std::to_string(o_.ranks[p]) + ", but the two called different ops before it (among the "
                        "rooted ops that the sending side does not wait for)");
}

void ShmDomain::waitAll() {
  uint64_t k = round_;
  if (o_.localSize > 1) waitFor([&](int p) { return ctl(p).arrive.load(std::memory_order_acquire) >= k; });
  for (int p = 0; p < o_.localSize; ++p)
    if (p != o_.localRank) {
      checkPeer(p, k);
      seen_[p] = std::max(seen_[p], k);
    }
}

void ShmDomain::waitRoot(int root) {
  uint64_t k = round_;
  if (root == o_.localRank) return;
  waitFor([&](int p) { return p != root || ctl(p).arrive.load(std::memory_order_acquire) >= k; });
  checkPeer(root, k);
  seen_[root] = std::max(seen_[root], k);
}

void ShmDomain::arriveBoxed(const OpDesc& d, size_t bytes) {
  uint64_t k = round_ + 1;
  Box& b = box(k, o_.localRank);
  for (size_t l = 1; l < boxLines(bytes); ++l) b.more[l - 1].round.store(k, std::memory_order_release);
  b.chain = chainNext(chain_, d);  // as arrive() makes it
  b.round.store(k, std::memory_order_release);
  arrive(d);
}

void ShmDomain::waitBoxed(int from, size_t bytes) {
  uint64_t k = round_;
  size_t lines = boxLines(bytes);
  // Every line is loaded on each pass (no early exit): their transfers overlap.
  auto boxed = [&](int p) {
    const Box& b = box(k, p);
    bool all = b.round.load(std::memory_order_acquire) == k;
    for (size_t l = 1; l < lines; ++l) all &= b.more[l - 1].round.load(std::memory_order_acquire) == k;
    return all;
  };
  // Its box, or its arrival without one (another op: the check below names it).
  waitFor([&](int p) {
    return (from >= 0 && p != from) || boxed(p) || ctl(p).arrive.load(std::memory_order_acquire) >= k;
  });
  for (int p = 0; p < o_.localSize; ++p) {
    if (p == o_.localRank || (from >= 0 && p != from)) continue;
    // The box's chain is p's at round k: what the arrival line's check
    // compares, without that line.
    if (!boxed(p) || box(k, p).chain != hist_[k % kDepth].chain) {
      checkPeer(p, k);  // throws: p's op at round k was another
      throw InvalidArgument("mismatched collectives: this rank called " + core::describe(hist_[k % kDepth].desc) +
                            " and rank " + std::to_string(o_.ranks[p]) +
                            " reached that round without its small message for it");
    }
    seen_[p] = std::max(seen_[p], k);
  }
}

void ShmDomain::round(const OpDesc& d) {
  arrive(d);
  waitAll();
}

void ShmDomain::begin(Clock::time_point deadline) {
  deadline_ = deadline;
  if (!lagging_) return;
  // Since an eager op, not every local rank may have arrived at this rank's
  // last round: this op's slots and published buffers are reused only once
  // all have (and any mismatch among the eager rounds shows here).
  waitAll();
  lagging_ = false;
}

void ShmDomain::beginEager(Clock::time_point deadline) {
  deadline_ = deadline;
  // The next round's cell and entries were last used kDepth rounds ago: every
  // rank must have arrived at the round after that one.
  uint64_t need = round_ + 2 > kDepth ? round_ + 2 - kDepth : 0;
  // The peers' arrival lines are read every kCheckEvery rounds, or sooner
  // when the arrivals seen last do not free the cell.
  bool look = round_ % kCheckEvery == 0;
  for (int p = 0; p < o_.localSize && !look; ++p) look = p != o_.localRank && seen_[p] < need;
  if (!look) {
    lagging_ = true;
    return;
  }
  if (o_.localSize > 1 && need > 0)
    waitFor([&](int p) { return ctl(p).arrive.load(std::memory_order_acquire) >= need; });
  // Compare with each peer as far as it has come (at most this rank's round):
  // a sender that never waits at a round learns of a mismatch here, at most
  // kCheckEvery rounds after the peer reached it.
  for (int p = 0; p < o_.localSize; ++p) {
    if (p == o_.localRank) continue;
    uint64_t a = ctl(p).arrive.load(std::memory_order_acquire);
    seen_[p] = std::max(seen_[p], a);
    uint64_t x = std::min(a, round_);
    if (x > 0 && x + kDepth > round_ + 1) checkPeer(p, x);
  }
  lagging_ = true;
}

void ShmDomain::cmaFailed(int peer, const char* what, int e) {
  auto exited = [this](int p) {
    if (o_.explainExit) o_.explainExit(p);  // a rank that failed on another's death, then left: name the cause
    return RemoteError("rank " + std::to_string(o_.ranks[p]) + " (pid " + std::to_string(ctl(p).pid) +
                       ", same host) exited during the op");
  };
  if (e == ESRCH || kill(ctl(peer).pid, 0) != 0) throw exited(peer);
  // A live peer whose buffer is gone has left the op because some rank failed;
  // that failure (a closed connection, an abort notice, an exited process)
  // reaches this rank within moments: report it rather than the symptom.
  auto until = Clock::now() + std::chrono::seconds(1);
  do {
    for (int p = 0; p < o_.localSize; ++p)
      if (p != o_.localRank && kill(ctl(p).pid, 0) != 0) throw exited(p);
    if (o_.checkFailure) o_.checkFailure();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (Clock::now() < until);
  throw SystemError(errnoMessage(std::string(what) + " rank " + std::to_string(o_.ranks[peer]) + " failed", e));
}

void ShmDomain::cmaRead(int peer, uint64_t remote, void* local, size_t len) {
  while (len > 0) {
    size_t n = std::min(len, size_t(1) << 30);
    iovec l{local, n}, r{reinterpret_cast<void*>(remote), n};
    ssize_t got = process_vm_readv(ctl(peer).pid, &l, 1, &r, 1, 0);
    if (got <= 0) cmaFailed(peer, "process_vm_readv from", errno);
    len -= got;
    remote += got;
    local = static_cast<char*>(local) + got;
  }
}

void ShmDomain::cmaWrite(int peer, const void* local, uint64_t remote, size_t len) {
  while (len > 0) {
    size_t n = std::min(len, size_t(1) << 30);
    iovec l{const_cast<void*>(local), n}, r{reinterpret_cast<void*>(remote), n};
    ssize_t got = process_vm_writev(ctl(peer).pid, &l, 1, &r, 1, 0);
    if (got <= 0) cmaFailed(peer, "process_vm_writev to", errno);
    len -= got;
    remote += got;
    local = static_cast<const char*>(local) + got;
  }
}

// dst[0..n) = reduction over local ranks (in rank order) of element range
// [off, off + n) of each rank's data: from the slots of `round` at slotOff,
// or from the ranks' published inputs (single copy).
void ShmDomain::reduceFromAll(char* dst, size_t off, size_t n, DataType t, ReduceKind k,
                              uint64_t rnd, bool fromSlots, size_t slotOff, const char* ownIn, bool stream,
                              char* alsoOut, size_t outTotal) {
  size_t es = dataTypeSize(t);
  if (n == 0) return;
  if (fromSlots) {
    auto src = [&](int p) -> const char* {
      return (ownIn && p == o_.localRank ? ownIn : slot(rnd, p) + slotOff) + off * es;
    };
    const char* s0 = src(0);
    if (o_.localSize == 1) {
      std::memmove(dst, s0, n * es);
      return;
    }
    if (!stream && !alsoOut) {
      internal::reduce(dst, s0, src(1), n, t, k);
      for (int p = 2; p < o_.localSize; ++p) internal::reduce(dst, dst, src(p), n, t, k);
      return;
    }
    // Into the slot with non-temporal stores: where the lines the peers read
    // come back to this core slowly, plain stores into them ran at a fraction
    // of the rate (the reductions' slowest launches, copy.h's streamWay).
    // Each chunk is reduced in cache, then streamed out. With plain stores
    // and a second destination, each chunk is reduced into the slot and
    // copied from there while in cache; with no slot (dst null), reduced in
    // cache and copied to alsoOut alone.
    size_t chunkElems = std::max<size_t>(1, kStreamChunk / es);
    bool viaTmp = stream || !dst;
    if (viaTmp && tmp_.size() < chunkElems * es) tmp_.resize(chunkElems * es);
    for (size_t c = 0; c < n; c += chunkElems) {
      size_t m = std::min(chunkElems, n - c), at = c * es;
      char* acc = viaTmp ? tmp_.data() : dst + at;
      internal::reduce(acc, s0 + at, src(1) + at, m, t, k);
      for (int p = 2; p < o_.localSize; ++p) internal::reduce(acc, acc, src(p) + at, m, t, k);
      if (dst && stream) internal::copyStreaming(dst + at, acc, m * es);
      if (alsoOut) internal::copyOut(alsoOut + at, acc, m * es, outTotal);
    }
    return;
  }
  // Single copy: own input first, then each peer's, in cache-sized chunks.
  size_t chunkElems = std::max<size_t>(1, kChunk / es);
  if (tmp_.size() < chunkElems * es) tmp_.resize(chunkElems * es);
  const char* own = reinterpret_cast<const char*>(ctl(o_.localRank).ptrIn);
  for (size_t c = 0; c < n; c += chunkElems) {
    size_t m = std::min(chunkElems, n - c);
    char* d = dst + c * es;
    // Own input first (in place, the destination is this rank's input); the
    // first peer's chunk is reduced with it straight into the destination,
    // without copying the own input there first.
    const char* acc = own + (off + c) * es;
    for (int q = 1; q < o_.localSize; ++q) {
      int p = (o_.localRank + q) % o_.localSize;
      cmaRead(p, ctl(p).ptrIn + (off + c) * es, tmp_.data(), m * es);
      internal::reduce(d, acc, tmp_.data(), m, t, k);
      acc = d;
    }
    if (acc != d) std::memmove(d, acc, m * es);
  }
}

bool ShmDomain::streamNow(size_t bytes, int cls, bool probed) {
  if (o_.stream >= 0 || probing_ || bytes < kRateMinBytes) return probed;
  return writeWay_[cls].choose(probed, !oversubscribed_);
}

void ShmDomain::copyIn(void* slot, const void* src, size_t n, bool stream, int cls) {
  if (o_.stream >= 0) internal::copyWay(slot, src, n, stream);
  else writeWay_[cls].copy(slot, src, n, stream);
}

void ShmDomain::copyInButOwnSlice(const char* src, size_t m, size_t es, bool whole, bool stream) {
  // A piece reduced slice by slice: this rank's slice is reduced by this rank
  // alone, which reads it from its input (reduceFromAll's `ownIn`), so only the
  // others' slices go into the slot. A small piece, which every rank reduces
  // whole, goes in whole. (`stream`: streamReducing's way for the piece;
  // the reductions were not timed by the probe.)
  if (m == 0) return;
  char* s = slot(round_ + 1, o_.localRank);
  if (whole) {
    copyIn(s, src, m * es, stream, kReduceClass);
    return;
  }
  size_t lo, hi;
  part(m, o_.localSize, o_.localRank, &lo, &hi);
  if (lo) copyIn(s, src, lo * es, stream, kReduceClass);
  if (hi < m) copyIn(s + hi * es, src + hi * es, (m - hi) * es, stream, kReduceClass);
}

void ShmDomain::allreduce(const void* in, void* out, size_t count, DataType t, ReduceKind k,
                          const OpDesc& d, Clock::time_point deadline) {
  begin(deadline);
  size_t es = dataTypeSize(t), bytes = count * es;
  int n = o_.localSize, me = o_.localRank;
  char* o = static_cast<char*>(out);
  if (n == 1) {
    if (in != out && bytes) std::memcpy(out, in, bytes);
    return;
  }
  if (singleCopyReducing(bytes)) {
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(in);
    ctl(me).ptrOut = reinterpret_cast<uint64_t>(out);
    round(d);
    // Reduce this rank's slice chunk by chunk and push each chunk, still in
    // cache, into every peer's output (only this rank reads or writes that
    // slice of the peers' buffers, so in-place is safe).
    size_t lo, hi;
    part(count, n, me, &lo, &hi);
    size_t chunkElems = std::max<size_t>(1, kChunk / es);
    for (size_t c = lo; c < hi; c += chunkElems) {
      size_t m = std::min(chunkElems, hi - c);
      reduceFromAll(o + c * es, c, m, t, k, 0, false, 0);
      for (int p = 0; p < n; ++p)
        if (p != me) cmaWrite(p, o + c * es, ctl(p).ptrOut + c * es, m * es);
    }
    round(d);
    return;
  }
  size_t per = slot_ / es;
  const char* i = static_cast<const char*>(in);
  size_t weight = outputWeight(bytes, 2 * bytes * static_cast<size_t>(n), in == out);
  for (size_t off = 0; off < count || (count == 0 && off == 0); off += per) {
    size_t m = std::min(per, count - off);
    bool small = m * es <= kSmallReduceBytes;
    bool stream = streamReducing(bytes);
    copyInButOwnSlice(i + off * es, m, es, small, stream);
    round(d);
    uint64_t r = round_;
    if (small) {
      reduceFromAll(o + off * es, 0, m, t, k, r, true, 0);
    } else {
      size_t lo, hi;
      part(m, n, me, &lo, &hi);
      // Reduce this rank's slice into its slot of the next round and its
      // output, then gather the others' slices.
      reduceFromAll(slot(r + 1, me) + lo * es, lo, hi - lo, t, k, r, true, 0, i + off * es, stream,
                    o + (off + lo) * es, weight);
      round(d);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        part(m, n, p, &lo, &hi);
        internal::copyOut(o + (off + lo) * es, slot(round_, p) + lo * es, (hi - lo) * es, weight);
      }
    }
    if (count == 0) break;
  }
}

void ShmDomain::reduce(const void* in, void* out, size_t count, DataType t, ReduceKind k, int root,
                       const OpDesc& d, Clock::time_point deadline) {
  size_t es = dataTypeSize(t), bytes = count * es;
  int n = o_.localSize, me = o_.localRank;
  if (n == 1) {
    if (in != out && bytes) std::memcpy(out, in, bytes);
    return;
  }
  if (singleCopyFor(bytes, cmaMinReduce_, kReduceClass)) {
    begin(deadline);
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(in);
    ctl(me).ptrOut = reinterpret_cast<uint64_t>(out);
    round(d);
    if (n == 2 && bytes < kRootReadsAllBelowBytes) {
      // Two ranks, a small reduce: the root reads the other's whole input
      // (one system call) and reduces it with its own; the other only waits
      // for it to finish reading (2 ranks with a core each, reduce of 32 KiB
      // against Open MPI's busbw: 1.17-1.22 so, 0.98-1.03 with each rank
      // reducing half, the other's half written to the root; alike at
      // 64 KiB, and half each is faster from 128 KiB).
      if (me == root) reduceFromAll(static_cast<char*>(out), 0, count, t, k, 0, false, 0);
      round(d);
      return;
    }
    size_t lo, hi;
    part(count, n, me, &lo, &hi);
    if (me == root) {
      reduceFromAll(static_cast<char*>(out) + lo * es, lo, hi - lo, t, k, 0, false, 0);
    } else {
      // This rank's slice, reduced in cache-sized chunks that go to the root
      // while still in cache (no slice-sized buffer, allocated and faulted in
      // on every op).
      size_t chunkElems = std::max<size_t>(1, kChunk / es);
      if (acc_.size() < std::min(chunkElems, hi - lo) * es) acc_.resize(std::min(chunkElems, hi - lo) * es);
      for (size_t c = lo; c < hi; c += chunkElems) {
        size_t m = std::min(chunkElems, hi - c);
        reduceFromAll(acc_.data(), c, m, t, k, 0, false, 0);
        cmaWrite(root, acc_.data(), ctl(root).ptrOut + c * es, m * es);
      }
    }
    round(d);
    return;
  }
  size_t per = slot_ / es;
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  if (bytes <= kBoxBytes) {
    // Eager, in the others' boxes of the round: the root reduces them with
    // its own input (copied first: `in` may be `out`) in rank order.
    beginEager(deadline);
    if (me != root) {
      box(round_ + 1, me).put(i, 0, bytes);
      arriveBoxed(d, bytes);
      return;
    }
    alignas(64) char own[kBoxBytes], a[kBoxBytes], b[kBoxBytes];
    if (bytes) std::memcpy(own, i, bytes);
    arrive(d);
    waitBoxed(-1, bytes);
    lagging_ = false;
    if (count) {
      // A part in the box's first line is reduced where it lies; a longer one
      // is gathered from its lines first.
      auto part = [&](int p, char* tmp) -> const char* {
        if (p == me) return own;
        if (bytes <= kBoxHeadBytes) return box(round_, p).data;
        box(round_, p).get(tmp, 0, bytes);
        return tmp;
      };
      internal::reduce(o, part(0, a), part(1, b), count, t, k);
      for (int p = 2; p < n; ++p) internal::reduce(o, o, part(p, a), count, t, k);
    }
    return;
  }
  if (bytes <= kCell) {
    // Eager: every rank leaves its input in its cell; the others return at
    // once, the root waits for all and reduces them in rank order.
    beginEager(deadline);
    if (bytes) std::memcpy(cell(round_ + 1, me), i, bytes);
    arrive(d);
    if (me != root) return;
    waitAll();
    lagging_ = false;
    if (count) {
      internal::reduce(o, cell(round_, 0), cell(round_, 1), count, t, k);
      for (int p = 2; p < n; ++p) internal::reduce(o, o, cell(round_, p), count, t, k);
    }
    return;
  }
  begin(deadline);
  if (n == 2) {
    // Two ranks: the other rank copies its input into its slot piece by
    // piece, publishing how far it got (fill), and the root reduces each
    // piece with its own input as it lands; a slot's worth per round. Before,
    // the root waited for the whole copy and then reduced it (up to 128 KiB),
    // or (above) each rank reduced half of the round's piece and the root
    // copied the other's half out, a second round and a third copy (2 ranks
    // with a core each, time against Open MPI's: docs/performance-history.md,
    // "A probe at 4 MiB, reduces probed apart, and point-to-point single copy
    // from 16 and 64 KiB"). The root arrives before it reads, so that a
    // mismatch is named (readAsFilled).
    size_t piece = std::max<size_t>(kReducePieceMin, (std::min(bytes, slot_) / kReducePieces + 4095) & ~size_t(4095));
    bool stream = me != root && streamReducing(bytes);
    for (size_t off = 0; off < bytes; off += slot_) {
      size_t m = std::min(slot_, bytes - off);
      if (me != root) {
        char* s = slot(round_ + 1, me);
        for (size_t x = 0; x < m; x += piece) {
          size_t y = std::min(m, x + piece);
          copyIn(s + x, i + off + x, y - x, stream, kReduceClass);
          fill(y);
        }
        round(d);
        continue;
      }
      arrive(d);
      const char* s = slot(round_, 1 - me);
      const char* own = i + off;
      char* to = o + off;
      takeAsFilled(1 - me, 0, m, [&](size_t a, size_t b) {
        // In rank order, as every other path reduces.
        internal::reduce(to + a, me == 0 ? own + a : s + a, me == 0 ? s + a : own + a, (b - a) / es, t, k);
      });
    }
    return;
  }
  size_t wholeMax = kSmallReduceBytes;
  // Every rank's input and the root's output.
  size_t weight = outputWeight(bytes, bytes * (static_cast<size_t>(n) + 1), in == out);
  for (size_t off = 0; off < count || (count == 0 && off == 0); off += per) {
    size_t m = std::min(per, count - off);
    bool small = m * es <= wholeMax;
    bool stream = streamReducing(bytes);
    copyInButOwnSlice(i + off * es, m, es, small, stream);
    round(d);
    uint64_t r = round_;
    if (small) {
      if (me == root) reduceFromAll(o + off * es, 0, m, t, k, r, true, 0);
    } else {
      size_t lo, hi;
      part(m, n, me, &lo, &hi);
      // The root's slice goes straight to its output: no one reads it from
      // the root's slot.
      if (me == root)
        reduceFromAll(nullptr, lo, hi - lo, t, k, r, true, 0, i + off * es, false, o + (off + lo) * es, weight);
      else
        reduceFromAll(slot(r + 1, me) + lo * es, lo, hi - lo, t, k, r, true, 0, i + off * es, stream);
      round(d);
      if (me == root)
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          part(m, n, p, &lo, &hi);
          internal::copyOut(o + (off + lo) * es, slot(round_, p) + lo * es, (hi - lo) * es, weight);
        }
    }
    if (count == 0) break;
  }
}

void ShmDomain::broadcast(void* buf, size_t bytes, int root, const OpDesc& d, Clock::time_point deadline) {
  int n = o_.localSize, me = o_.localRank;
  if (n == 1) return;
  char* b = static_cast<char*>(buf);
  if (singleCopyFor(bytes, cmaMin_)) {
    begin(deadline);
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(buf);
    round(d);
    // The others read the message from the root's buffer; the root, which
    // would otherwise wait, writes the last 1/n of it into each of them, so
    // that every core copies an equal share ((n-1)/n of the message) at once.
    size_t head = (bytes - bytes / static_cast<size_t>(n)) & ~size_t(4095);
    if (me == root) {
      for (int p = 0; p < n; ++p)
        if (p != me) cmaWrite(p, b + head, ctl(p).ptrIn + head, bytes - head);
    } else {
      cmaRead(root, ctl(root).ptrIn, b, head);
    }
    round(d);
    return;
  }
  if (bytes <= kBoxBytes) {
    // Eager, in the root's box of the round.
    beginEager(deadline);
    if (me == root) {
      box(round_ + 1, me).put(b, 0, bytes);
      arriveBoxed(d, bytes);
      return;
    }
    arrive(d);
    waitBoxed(root, bytes);
    box(round_, root).get(b, 0, bytes);
    return;
  }
  if (bytes <= kCell) {
    // Eager: the root leaves its message in its cell and returns; each other
    // rank takes it once the root has arrived, without waiting for the rest.
    beginEager(deadline);
    if (me == root) {
      if (bytes) std::memcpy(cell(round_ + 1, me), b, bytes);
      arrive(d);
      return;
    }
    arrive(d);
    waitRoot(root);
    if (bytes) std::memcpy(b, cell(round_, root), bytes);
    return;
  }
  // Through the slots, a slot's worth per round. The root publishes how far
  // it has filled its slot after every piece, and the others copy each piece
  // out as it lands: the copy out runs beside the copy in, one piece behind,
  // where it ran after it (a 256 KiB broadcast was two whole copies end to
  // end). The others arrive before they read: a rank that takes another for
  // the root (a mismatch) waits for a rank that is not filling, sees it
  // arrive, and the round's check names the mismatch.
  begin(deadline);
  size_t piece = std::max<size_t>(kFillPieceMin, ((bytes < slot_ ? bytes : slot_) / 8 + 4095) & ~size_t(4095));
  bool stream = me == root && streamNow(bytes, 0, streamFor(bytes));
  for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += slot_) {
    size_t m = std::min(slot_, bytes - off);
    if (me == root) {
      char* s = slot(round_ + 1, me);
      for (size_t x = 0; x < m; x += piece) {
        size_t y = std::min(m, x + piece);
        copyIn(s + x, b + off + x, y - x, stream, 0);
        fill(y);
      }
      round(d);
    } else {
      arrive(d);
      readAsFilled(root, 0, m, b + off, bytes);
    }
    if (bytes == 0) break;
  }
}

template <typename F>
void ShmDomain::takeAsFilled(int root, size_t start, size_t m, const F& take) {
  uint64_t k = round_;
  const Ctl& r = ctl(root);
  size_t got = 0;
  while (got < m) {
    size_t have = got;
    waitFor([&](int p) {
      if (p != root) return true;
      uint64_t f = r.filled.load(std::memory_order_acquire);
      size_t upTo = static_cast<size_t>(f & kFillMask);
      if ((f >> kFillBits) == k && upTo > start) have = std::min(upTo - start, m);
      return have > got || r.arrive.load(std::memory_order_acquire) >= k;
    });
    if (have <= got) break;  // the root arrived: its slot is full, or it runs another op
    take(got, have);
    got = have;
  }
  waitAll();
  if (got < m) take(got, m);
}

void ShmDomain::readAsFilled(int root, size_t start, size_t m, char* dst, size_t total) {
  const char* s = slot(round_, root) + start;
  takeAsFilled(root, start, m, [&](size_t a, size_t b) { internal::copyOut(dst + a, s + a, b - a, total); });
}

void ShmDomain::fill(size_t bytes) { publish(ctl(o_.localRank).filled, ((round_ + 1) << kFillBits) | bytes); }

void ShmDomain::publish(std::atomic<uint64_t>& line, uint64_t v) {
  // Sleepers register before they look at the lines again (waitFor): either
  // the load below sees them, or they see this store. Light (light_, the
  // ranks with a CPU each): the sleeper's barrier on this core orders the
  // store before the load; the store leaves the lines the op wrote (its
  // cell, its chain entries) to reach the peers as the core gets them out,
  // where a full fence waited for all of them on every op (2 ranks, 8
  // alternating launches, time against Open MPI's: scatter of 8 B 1.09 ->
  // 1.03 median, reduce of 128 B 0.83 -> 0.75). Where the ranks share CPUs
  // the store stays seq_cst (4 ranks on 2 cores ran no faster light, and
  // some launches slower); the sleeper's barrier pairs with either.
  bool light = light_ && !oversubscribed_;
  if (light) {
    line.store(v, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    line.store(v, std::memory_order_seq_cst);
  }
  auto* h = static_cast<Header*>(base_);
  if (h->sleepers.load(light ? std::memory_order_relaxed : std::memory_order_seq_cst) > 0) {
    h->futex.fetch_add(1);
    futexWakeAll(&h->futex);
  }
}

void ShmDomain::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes,
                           const OpDesc& d, Clock::time_point deadline) {
  begin(deadline);
  int n = o_.localSize, me = o_.localRank;
  const auto& displ = prefixSums(bytes, displA_);
  char* o = static_cast<char*>(out);
  bool ownApart = o + displ[me] != in && bytes[me];
  size_t maxb = *std::max_element(bytes.begin(), bytes.end());
  // Alone, or by single copy, this rank's part goes to its output first and
  // whole; through the slots, a slot's worth at a time (below).
  if (n == 1 || singleCopyFor(displ[n], cmaMin_)) {
    if (ownApart) std::memmove(o + displ[me], in, bytes[me]);
    if (n == 1) return;
    // The peers read this rank's part from its input, which nobody writes
    // during the op, not from the copy just made in its output: those lines
    // are dirty in this core's cache, and the peers' reads of them in the op
    // before had to be invalidated by that copy.
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(in);
    round(d);
    for (int p = 0; p < n; ++p)
      if (p != me && bytes[p]) cmaRead(p, ctl(p).ptrIn, o + displ[p], bytes[p]);
    round(d);
    return;
  }
  // Streamed only where this rank's rates call for it (or where set): in
  // launches whose probe streamed the broadcasts and allgathers it timed
  // together, allgathers of 512 KiB - 8 MiB ran at 0.73-1.05 of Open MPI's
  // busbw against 1.1-1.8 with plain writes.
  bool stream = streamNow(displ[n], 0, streamForSetting(displ[n]));
  // Every local rank's output, and its input where apart from it: the
  // output's other parts are not read by the op, in place or not.
  size_t weight = outputWeight(displ[n], displ[n] * static_cast<size_t>(n) + (ownApart ? displ[n] : 0), false);
  const char* mine = ownApart ? static_cast<const char*>(in) : o + displ[me];
  for (size_t off = 0; off < maxb || (maxb == 0 && off == 0); off += slot_) {
    if (off < bytes[me]) {
      // This rank's part, a slot's worth at a time: into the slot, then into
      // its place in the output while those lines are in cache (it was copied
      // whole first, then read again from the output for the slot).
      size_t len = std::min(slot_, bytes[me] - off);
      copyIn(slot(round_ + 1, me), mine + off, len, stream, 0);
      if (ownApart) internal::copyOut(o + displ[me] + off, mine + off, len, weight);
    }
    round(d);
    for (int p = 0; p < n; ++p)
      if (p != me && off < bytes[p])
        internal::copyOut(o + displ[p] + off, slot(round_, p), std::min(slot_, bytes[p] - off), weight);
    if (maxb == 0) break;
  }
}

void ShmDomain::reduceScatterv(const void* in, void* out, const std::vector<size_t>& counts,
                               DataType t, ReduceKind k, const OpDesc& d, Clock::time_point deadline) {
  begin(deadline);
  int n = o_.localSize, me = o_.localRank;
  size_t es = dataTypeSize(t);
  const auto& displ = prefixSums(counts, displA_);
  size_t total = displ[n];
  char* o = static_cast<char*>(out);
  if (n == 1) {
    if (in != out && counts[0]) std::memmove(out, in, counts[0] * es);
    return;
  }
  if (singleCopyReducing(total * es)) {
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(in);
    round(d);
    reduceFromAll(o, displ[me], counts[me], t, k, 0, false, 0);
    round(d);
    return;
  }
  size_t per = slot_ / es;
  const char* i = static_cast<const char*>(in);
  // This rank's own part stays out of its slot (only it reduces that part)
  // and is read from its input, unless the output is that part of the input
  // (in place), which the reduction writes before it reads the own data.
  bool inPlace = o == i + displ[me] * es;
  if (total > per) {
    // More than a slot: each round carries a piece of every rank's part (the
    // slot's n sections), so that all ranks reduce in every round. Rounds of
    // consecutive input (the loop below, which now runs one round) hold one
    // rank's part for several rounds, in which that rank reduces and the
    // others wait (2 ranks, 2 MiB: two rounds, one per rank; alternating
    // launches took 237-384 us that way and 85-157 us this way, against
    // 39-76 us for 1 MiB in one round).
    size_t q = std::max<size_t>(1, ((slot_ / static_cast<size_t>(n)) & ~size_t(63)) / es);
    size_t rounds = 0;
    for (int p = 0; p < n; ++p) rounds = std::max(rounds, (counts[p] + q - 1) / q);
    bool stream = streamReducing(total * es);
    for (size_t r = 0; r < rounds; ++r) {
      char* s = slot(round_ + 1, me);
      size_t at = r * q;
      for (int p = 0; p < n; ++p) {
        if (p == me && !inPlace) continue;
        size_t m = counts[p] > at ? std::min(q, counts[p] - at) : 0;
        if (m) copyIn(s + static_cast<size_t>(p) * q * es, i + (displ[p] + at) * es, m * es, stream, kReduceClass);
      }
      round(d);
      size_t m = counts[me] > at ? std::min(q, counts[me] - at) : 0;
      if (m)
        reduceFromAll(o + at * es, 0, m, t, k, round_, true, static_cast<size_t>(me) * q * es,
                      inPlace ? nullptr : i + (displ[me] + at) * es);
    }
    return;
  }
  // At most a slot: one round.
  for (size_t off = 0; off < total || (total == 0 && off == 0); off += per) {
    size_t m = std::min(per, total - off);
    bool stream = streamReducing(total * es);
    size_t lo = std::max(off, displ[me]), hi = std::min(off + m, displ[me + 1]);
    char* s = slot(round_ + 1, me);
    if (inPlace || lo >= hi) {
      if (m) copyIn(s, i + off * es, m * es, stream, kReduceClass);
    } else {
      if (lo > off) copyIn(s, i + off * es, (lo - off) * es, stream, kReduceClass);
      if (off + m > hi) copyIn(s + (hi - off) * es, i + hi * es, (off + m - hi) * es, stream, kReduceClass);
    }
    round(d);
    if (lo < hi)
      reduceFromAll(o + (lo - displ[me]) * es, lo - off, hi - lo, t, k, round_, true, 0, inPlace ? nullptr : i + off * es);
    if (total == 0) break;
  }
}

void ShmDomain::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                          const std::vector<size_t>& recvBytes, const OpDesc& d,
                          Clock::time_point deadline) {
  begin(deadline);
  int n = o_.localSize, me = o_.localRank;
  const auto& sd = prefixSums(sendBytes, displA_);
  const auto& rd = prefixSums(recvBytes, displB_);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  // Everyone publishes its layout first: offsets for single copy, the largest
  // chunk so that all ranks agree on the number of rounds.
  Ctl& c = ctl(me);
  c.ptrIn = reinterpret_cast<uint64_t>(in);
  for (int p = 0; p < n; ++p) c.offs[p] = sd[p];
  uint64_t mine = *std::max_element(sendBytes.begin(), sendBytes.end());
  // This rank's own chunk: copied straight across, unless the buffers overlap
  // (in place), where it is set aside first. In place with the same layout
  // for sending and receiving, it is where it belongs already, and each pair
  // of ranks swaps its two chunks (below).
  bool overlap = sd[n] && rd[n] && i < o + rd[n] && o < i + sd[n];
  bool swap = overlap && i == o && sendBytes == recvBytes;
  std::vector<char> own;
  if (overlap && !swap) own.assign(i + sd[me], i + sd[me] + sendBytes[me]);
  const char* ownSrc = overlap && !swap ? own.data() : i + sd[me];
  auto copyOwn = [&] {
    if (sendBytes[me] && o + rd[me] != ownSrc) std::memcpy(o + rd[me], ownSrc, sendBytes[me]);
  };
  if (n == 1) {
    copyOwn();
    return;
  }
  // Where this rank's chunks fit the slot and it will not be read by single
  // copy, they go into the slot with the layout: if every rank did so, the
  // op is done in that one round (small alltoalls: one round, not two).
  size_t q = (slot_ / n) & ~size_t(63);
  bool early = mine <= q && (!singleCopyFor(mine * n, cmaMin_, kAlltoallClass) || overlap);
  if (early) {
    char* s = slot(round_ + 1, me);
    bool stream = streamNow(mine * n, kAlltoallClass, streamFor(mine * n, kAlltoallClass));
    for (int p = 0; p < n; ++p)
      if (p != me && sendBytes[p]) copyIn(s + p * q, i + sd[p], sendBytes[p], stream, kAlltoallClass);
  }
  c.a2a[(round_ + 1) & 1] = mine | (early ? kSlotsWritten : 0) | (overlap ? kOverlap : 0) | (swap ? kSwap : 0);
  round(d);
  size_t maxb = 0;
  bool big = true, allEarly = true, anyOverlap = false, allSwap = true;
  for (int p = 0; p < n; ++p) {
    uint64_t w = ctl(p).a2a[round_ & 1];
    size_t b = static_cast<size_t>(w & ~kA2aFlags);
    maxb = std::max(maxb, b);
    big = big && singleCopyFor(b * n, cmaMin_, kAlltoallClass);
    allEarly = allEarly && (w & kSlotsWritten);
    anyOverlap = anyOverlap || (w & kOverlap);
    allSwap = allSwap && (w & kSwap);
  }
  if (allEarly) {
    // Every rank took the slots (one that would read by single copy did not
    // write early), and every chunk is whole in them.
    for (int p = 0; p < n; ++p)
      if (p != me && recvBytes[p]) internal::copyOut(o + rd[p], slot(round_, p) + me * q, recvBytes[p], rd[n]);
    copyOwn();
    return;
  }
  // Single copy reads the peers' inputs while they take in their outputs:
  // only where no rank is in place (the flags agree on every rank, so all
  // take the same path).
  if (cma_ && big && !anyOverlap) {
    for (int p = 0; p < n; ++p)
      if (p != me && recvBytes[p]) cmaRead(p, ctl(p).ptrIn + ctl(p).offs[me], o + rd[p], recvBytes[p]);
    copyOwn();
    round(d);
    return;
  }
  // Every rank in place with equal layouts: at step k rank p swaps chunks
  // with rank (k - p) mod n (each pair once over the n steps; the own chunk
  // stays), a piece at a time: read the partner's piece into tmp_, a round
  // (the partner has read this rank's piece), then copy it into place. No
  // copy of the whole input (a fresh buffer that size costs a page fault per
  // 4 KiB), and every rank runs the same rounds.
  if (cma_ && big && allSwap) {
    if (tmp_.size() < kSwapChunk) tmp_.resize(kSwapChunk);
    size_t pieces = (maxb + kSwapChunk - 1) / kSwapChunk;
    for (int k = 0; k < n; ++k) {
      if (n == 2 && k == 0) continue;  // both ranks paired with themselves
      int partner = ((k - me) % n + n) % n;
      for (size_t j = 0; j < pieces; ++j) {
        size_t off = j * kSwapChunk;
        size_t m = partner != me && off < recvBytes[partner] ? std::min(kSwapChunk, recvBytes[partner] - off) : 0;
        if (m) cmaRead(partner, ctl(partner).ptrIn + ctl(partner).offs[me] + off, tmp_.data(), m);
        round(d);
        if (m) internal::copyOut(o + rd[partner] + off, tmp_.data(), m, rd[n]);
      }
    }
    return;
  }
  // In place needs the whole input before any output lands: stage a copy.
  std::vector<char> staged;
  if (overlap) {
    staged.assign(i, i + sd[n]);
    i = staged.data();
  }
  // (maxb > 0 here: with nothing to send every rank wrote early.)
  bool stream = streamNow(maxb * n, kAlltoallClass, streamFor(maxb * n, kAlltoallClass));
  for (size_t off = 0; off < maxb; off += q) {
    char* s = slot(round_ + 1, me);
    for (int p = 0; p < n; ++p)  // (the own chunk is copied straight across, below)
      if (p != me && off < sendBytes[p])
        copyIn(s + p * q, i + sd[p] + off, std::min(q, sendBytes[p] - off), stream, kAlltoallClass);
    round(d);
    for (int p = 0; p < n; ++p)
      if (p != me && off < recvBytes[p])
        internal::copyOut(o + rd[p] + off, slot(round_, p) + me * q, std::min(q, recvBytes[p] - off), rd[n]);
  }
  copyOwn();
}

void ShmDomain::gatherv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
                        const OpDesc& d, Clock::time_point deadline) {
  int n = o_.localSize, me = o_.localRank;
  // As scatterv: no offsets table on the eager path.
  size_t total = 0, maxb = 0, mine = 0;
  for (int p = 0; p < n; ++p) {
    if (p == me) mine = total;
    total += bytes[p];
    maxb = std::max(maxb, bytes[p]);
  }
  char* o = static_cast<char*>(out);
  // Single copy where the probe's scatters took it: a rooted op whose root
  // moves every part, where broadcasts and allgathers (class 0) have every
  // rank copy. With 4 ranks on 2 cores, in launches whose probe kept the
  // slots for broadcasts and allgathers, gather of 1-32 MiB ran at 0.90-1.41
  // of Open MPI's busbw through the slots and 1.32-2.09 by single copy
  // (docs/performance-history.md, "Gather follows the scatters' probe").
  bool single = n > 1 && singleCopyRooted(total, maxb, kScatterClass);
  if (me == root && !single && o + mine != in && bytes[me]) std::memmove(o + mine, in, bytes[me]);
  if (n == 1) return;
  if (single) {
    begin(deadline);
    ctl(me).ptrOut = reinterpret_cast<uint64_t>(out);
    round(d);
    // Each other rank writes its part into the root's output while the root
    // copies its own: every core copies at once (the root reading the parts
    // copied them one after another).
    if (me == root) {
      if (o + mine != in && bytes[me]) std::memmove(o + mine, in, bytes[me]);
    } else if (bytes[me]) {
      cmaWrite(root, in, ctl(root).ptrOut + mine, bytes[me]);
    }
    round(d);
    return;
  }
  if (maxb <= kBoxBytes && maxb * static_cast<size_t>(n) == total) {
    // Eager, parts of one size in the others' boxes of the round.
    beginEager(deadline);
    if (me != root) {
      box(round_ + 1, me).put(in, 0, bytes[me]);
      arriveBoxed(d, bytes[me]);
      return;
    }
    arrive(d);
    waitBoxed(-1, maxb);
    lagging_ = false;
    for (int p = 0; p < n; ++p)
      if (p != me) box(round_, p).get(o + static_cast<size_t>(p) * maxb, 0, maxb);
    return;
  }
  if (maxb <= kCell) {
    // Eager: the others leave their part in their cells and return at once;
    // the root waits for all and copies.
    beginEager(deadline);
    if (me != root) {
      if (bytes[me]) std::memcpy(cell(round_ + 1, me), in, bytes[me]);
      arrive(d);
      return;
    }
    arrive(d);
    waitAll();
    lagging_ = false;
    size_t at = 0;
    for (int p = 0; p < n; at += bytes[p], ++p)
      if (p != me && bytes[p]) std::memcpy(o + at, cell(round_, p), bytes[p]);
    return;
  }
  begin(deadline);
  const auto& displ = prefixSums(bytes, displA_);
  bool stream = me != root && streamNow(total, 0, streamFor(total));
  for (size_t off = 0; off < maxb || (maxb == 0 && off == 0); off += slot_) {
    if (me != root && off < bytes[me])
      copyIn(slot(round_ + 1, me), static_cast<const char*>(in) + off, std::min(slot_, bytes[me] - off), stream, 0);
    round(d);
    if (me == root)
      for (int p = 0; p < n; ++p)
        if (p != me && off < bytes[p])
          internal::copyOut(o + displ[p] + off, slot(round_, p), std::min(slot_, bytes[p] - off), displ[n]);
    if (maxb == 0) break;
  }
}

void ShmDomain::scatterv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
                         const OpDesc& d, Clock::time_point deadline) {
  int n = o_.localSize, me = o_.localRank;
  // The sizes' sum, largest and this rank's offset in one pass: the eager
  // path needs no offsets table (building it was about 60 instructions of a
  // small scatter's 1,000 on each rank).
  size_t total = 0, maxb = 0, mine = 0;
  for (int p = 0; p < n; ++p) {
    if (p == me) mine = total;
    total += bytes[p];
    maxb = std::max(maxb, bytes[p]);
  }
  const char* i = static_cast<const char*>(in);
  bool single = n > 1 && singleCopyRooted(total, maxb, kScatterClass);
  if (me == root && !single && i + mine != out && bytes[me]) std::memmove(out, i + mine, bytes[me]);
  if (n == 1) return;
  if (single) {
    begin(deadline);
    ctl(me).ptrIn = reinterpret_cast<uint64_t>(in);
    round(d);
    // The root copies its own part while the others read theirs.
    if (me == root) {
      if (i + mine != out && bytes[me]) std::memmove(out, i + mine, bytes[me]);
    } else if (bytes[me]) {
      cmaRead(root, ctl(root).ptrIn + mine, out, bytes[me]);
    }
    round(d);
    return;
  }
  if (total <= kBoxBytes && maxb * static_cast<size_t>(n) == total) {
    // Eager, parts of one size in the root's box of the round, laid out as in
    // the input (the root's own part left out).
    beginEager(deadline);
    if (me == root) {
      Box& c = box(round_ + 1, me);
      for (int p = 0; p < n; ++p)
        if (p != me) c.put(i + static_cast<size_t>(p) * maxb, static_cast<size_t>(p) * maxb, maxb);
      arriveBoxed(d, total);
      return;
    }
    arrive(d);
    waitBoxed(root, total);
    box(round_, root).get(out, static_cast<size_t>(me) * maxb, maxb);
    return;
  }
  size_t qc = (kCell / n) & ~size_t(63);
  if (maxb <= qc) {
    // Eager: the root leaves every part in its cell and returns; each other
    // rank takes its part once the root has arrived.
    beginEager(deadline);
    if (me == root) {
      char* c = cell(round_ + 1, me);
      size_t at = 0;
      for (int p = 0; p < n; at += bytes[p], ++p)
        if (p != me && bytes[p]) std::memcpy(c + p * qc, i + at, bytes[p]);
      arrive(d);
      return;
    }
    arrive(d);
    waitRoot(root);
    if (bytes[me]) std::memcpy(out, cell(round_, root) + me * qc, bytes[me]);
    return;
  }
  // Through the slots, each rank's share of a slot per round. As in a
  // broadcast, the root publishes how far it has filled its slot (the parts
  // go in rank order, so a rank's part is ready up to that offset less the
  // part's start) after every piece, and each rank copies its part out as it
  // lands, beside the root's copy in (a 512 KiB scatter of 2 ranks was the
  // root's copy of the other half, then that rank's copy out, end to end).
  // The others arrive before they read, so that a mismatch is named (see
  // broadcast).
  begin(deadline);
  const auto& displ = prefixSums(bytes, displA_);
  size_t q = (slot_ / n) & ~size_t(63);
  size_t piece = std::max<size_t>(kFillPieceMin, (std::min(maxb, q) / 8 + 4095) & ~size_t(4095));
  char* o = static_cast<char*>(out);
  bool stream = me == root && streamNow(total, kScatterClass, streamFor(total, kScatterClass));
  for (size_t off = 0; off < maxb || (maxb == 0 && off == 0); off += q) {
    if (me == root) {  // (the root's own part went to its output above)
      char* s = slot(round_ + 1, me);
      for (int p = 0; p < n; ++p) {
        if (p == me || off >= bytes[p]) continue;
        size_t m = std::min(q, bytes[p] - off);
        for (size_t x = 0; x < m; x += piece) {
          size_t y = std::min(m, x + piece);
          copyIn(s + p * q + x, i + displ[p] + off + x, y - x, stream, kScatterClass);
          fill(p * q + y);
        }
      }
      round(d);
    } else {
      arrive(d);
      readAsFilled(root, me * q, off < bytes[me] ? std::min(q, bytes[me] - off) : 0, o + off, bytes[me]);
    }
    if (maxb == 0) break;
  }
}

std::string ShmDomain::describe() const {
  if (cma_ && cmaEvery_) return "single-copy process_vm_readv";
  std::string s = "copy through the segment";
  if (!singleCopy()) {
    if (!probes_.empty()) s += " (single copy was not faster at start-up; " + probeText() + ")";
  } else {
    // "; single-copy process_vm_readv for broadcast and allgather of A and
    // for gather and scatter of B and for alltoall of C and for reduce of D
    // (...)"
    static const char* const kNames[kCopyClasses] = {"broadcast and allgather", "gather and scatter", "alltoall",
                                                     "reduce"};
    s += "; single-copy process_vm_readv for " + classesText(cmaBands_, kNames, cmaMin_);
    s += " (faster at start-up; " + probeText() + ")";
  }
  if (o_.stream >= 0) {
    if (o_.stream > 0) s += "; slots written with non-temporal stores from " + internal::sizeText(o_.stream) + " (set)";
    return s;
  }
  if (probes_.empty()) return s;
  // "; slots written with non-temporal stores for ... (their time / plain
  // writes', broadcast+allgather | scatter | alltoall: 64 KiB 0.52x | 0.61x |
  // 0.90x, ...)" (reduce's copies in are not probed: no bands, no ratios).
  static const char* const kStreamed[kCopyClasses] = {"broadcast and gather", "scatter", "alltoall", "reduce"};
  std::string streamed = classesText(streamBands_, kStreamed, 1);
  s += "; slots written with non-temporal stores for " + (streamed.empty() ? "no size" : streamed);
  return s + " (" + probeText(true) + ")";
}

std::string ShmDomain::bandsText(uint64_t m, size_t min) const {
  std::string s;
  for (int b = 0; b < 64; ++b) {
    if (!((m >> b) & 1) || (b > 0 && ((m >> (b - 1)) & 1))) continue;
    int e = b;
    while (e < 63 && ((m >> (e + 1)) & 1)) ++e;
    if (!s.empty()) s += ", ";
    s += internal::sizeText(std::max(uint64_t(1) << b, uint64_t(min)));
    s += e == 63 ? " and up" : " - " + internal::sizeText(uint64_t(2) << e);
  }
  return s;
}

std::string ShmDomain::classesText(const uint64_t (&bands)[kCopyClasses], const char* const (&names)[kCopyClasses],
                                   size_t min) const {
  // "broadcast and allgather of A and for gather and scatter of B" ("": none)
  std::string s;
  for (int c = 0; c < kCopyClasses; ++c)
    if (bands[c]) s += std::string(s.empty() ? "" : " and for ") + names[c] + " of " + bandsText(bands[c], min);
  return s;
}

std::string ShmDomain::probeText(bool streamed) const {
  // "its time / the slots', broadcast+allgather | scatter | alltoall |
  // reduce: 64 KiB 0.64x | 0.70x | 0.90x | 0.95x, ..." (streamed: "their
  // time / plain writes', broadcast+allgather | scatter | alltoall: ..." with
  // the streamed writes' ratios)
  std::string s = streamed ? "their time / plain writes'" : "its time / the slots'";
  s += streamed ? ", broadcast+allgather | scatter | alltoall:" : ", broadcast+allgather | scatter | alltoall | reduce:";
  char b[160];
  for (size_t i = 0; i < probes_.size(); ++i) {
    const double* r = streamed ? probes_[i].streamRatio : probes_[i].ratio;
    int w = snprintf(b, sizeof(b), "%s %s %.2fx | %.2fx | %.2fx", i ? "," : "",
                     internal::sizeText(probes_[i].bytes).c_str(), r[0], r[kScatterClass], r[kAlltoallClass]);
    if (!streamed && w > 0 && static_cast<size_t>(w) < sizeof(b))
      snprintf(b + w, sizeof(b) - static_cast<size_t>(w), " | %.2fx", r[kReduceClass]);
    s += b;
  }
  return s;
}

void ShmDomain::barrier(const OpDesc& d, Clock::time_point deadline) {
  begin(deadline);
  round(d);
}

}  // namespace core
}  // namespace accl
