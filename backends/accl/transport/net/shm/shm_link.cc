#include "transport/net/shm/shm_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "accl/errors.h"
#include "accl/logging.h"
#include "transport/copy.h"
#include "transport/transport.h"
#include "transport/wire.h"

namespace accl {
namespace core {
namespace net {

namespace {

constexpr uint32_t kSegMagic = 0x50324c41;  // "AL2P"

// Link-private bits of FrameHeader::flags in the rings.
constexpr uint8_t kFlagRemote = 1;  // a single-copy descriptor: h.len bytes at the sender, RemoteDesc follows
constexpr uint8_t kFlagAck = 2;     // the reader is done with single-copy message h.key
constexpr size_t kPiece = size_t(4) << 20;  // copied per poll
constexpr uint64_t kSlots = 64;             // single-copy messages in flight per direction

// Slot states (slot = seq << 2 | state).
constexpr uint64_t kDone = 0, kPosted = 1, kReading = 2, kCancelled = 3;

struct RemoteDesc {
  uint64_t addr;  // of the message in the sender's address space
  uint64_t seq;
  char pad[48];
};
static_assert(sizeof(RemoteDesc) == 64, "layout");

// What the local peers read with process_vm_readv to see that they may: a
// random number per process and its pid (a fork changes it), so that a peer
// whose pid means another process where it reads (another pid namespace)
// never takes that process's memory for this one's.
std::atomic<uint64_t> probeWord{0};
uint64_t probeValue(uint32_t pid) {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32 | rd()) & ~uint64_t(0xffffffff);
  }();
  return nonce | pid;
}

struct SegHeader {
  uint32_t magic;
  uint32_t rings;
  uint64_t cap;
  uint64_t probeAddr;  // &probeWord in the owner's process
  uint32_t pid;
  uint32_t pad0;
  // Bit i: the owner can read the memory of the peer whose ring is index i
  // (set before the owner tells that peer it opened its segment).
  std::atomic<uint64_t> canRead;
  uint64_t probe;  // what probeAddr holds
  char pad1[16];
  // Threads of the owner that poll its rings while they wait (guests): while
  // there are any, writers ring no doorbell (a guest reads the frame).
  alignas(64) std::atomic<uint32_t> guests;
  char pad[60];
};
static_assert(sizeof(SegHeader) == 128, "layout");

size_t align64(size_t n) { return (n + 63) & ~size_t(63); }

std::string hex(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string segName(uint64_t token, int rank) { return "/accl-" + hex(token) + "-p" + std::to_string(rank); }
std::string bellPath(uint64_t token, int rank) { return "/dev/shm/accl-" + hex(token) + "-d" + std::to_string(rank); }

}  // namespace

// One direction between two ranks of a host: written by one, read by the
// other, in the reader's segment. Counters only grow; positions are them
// modulo the ring's size.
struct ShmLink::Ring {
  alignas(64) std::atomic<uint64_t> head{0};  // bytes published by the writer
  // The CPU the writer last wrote frames from (-1: none yet), stored only
  // when it changes, in the line the reader polls anyway: a waiter that finds
  // a writer on its own CPU yields instead of spinning (writerOnCpu).
  std::atomic<int32_t> writerCpu{-1};
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes the reader is done with
  // The reader waits for a doorbell; it starts so (its loop has not polled yet).
  alignas(64) std::atomic<uint32_t> readerAsleep{1};
  std::atomic<uint32_t> writerWaiting{0};              // the writer waits for space (its doorbell)
  // The writer's single-copy messages: seq << 2 | state (see kPosted).
  alignas(64) std::atomic<uint64_t> slots[kSlots] = {};
  char* data() { return reinterpret_cast<char*>(this) + sizeof(Ring); }
};
static_assert(sizeof(ShmLink::Ring) == 192 + 8 * kSlots, "layout");

namespace {

// Maps the pages of [addr, addr + len) into this process now. A ring's pages
// were otherwise mapped by a fault each on first use, in both processes:
// about 500 faults for a 2-rank group's 1 MiB rings, which made its first
// 10-20 ms of small messages up to 2x slower on a 2-core VM (docs/
// performance-history.md, "Small point-to-point messages: the clock, and a group's
// first milliseconds"). Best effort: a kernel before 5.14 has no
// MADV_POPULATE_WRITE and faults them in as before.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
void prefault(void* addr, size_t len) {
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  uintptr_t hi = (reinterpret_cast<uintptr_t>(addr) + len + page - 1) & ~(page - 1);
  (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
}

size_t segBytes(int rings, size_t cap) { return sizeof(SegHeader) + static_cast<size_t>(rings) * (sizeof(ShmLink::Ring) + cap); }

ShmLink::Ring* ringAt(void* seg, int index, size_t cap) {
  return reinterpret_cast<ShmLink::Ring*>(static_cast<char*>(seg) + sizeof(SegHeader) +
                                         static_cast<size_t>(index) * (sizeof(ShmLink::Ring) + cap));
}

}  // namespace

std::unique_ptr<ShmLink> ShmLink::connect(const Options& o, FrameSink* sink, std::string* why) {
  // The ranks of this host, ascending; a peer's ring in an owner's segment is
  // the peer's index among the owner's local peers.
  std::vector<int> locals;
  for (int r = 0; r < o.size; ++r)
    if (r == o.rank || (r < static_cast<int>(o.local.size()) && o.local[r])) locals.push_back(r);
  if (locals.size() < 2) {
    *why = "no other rank on this host";
    return nullptr;
  }
  auto indexIn = [&](int owner, int peer) {
    int i = 0;
    for (int r : locals) {
      if (r == peer) return i;
      if (r != owner) ++i;
    }
    return -1;
  };
  int rings = static_cast<int>(locals.size()) - 1;
  std::unique_ptr<ShmLink> l(new ShmLink());
  l->o_ = o;
  l->sink_ = sink;
  // Per host: n (n - 1) rings; 12 MiB for 4 ranks, 28 MiB for 8, 60 MiB for 16.
  l->cap_ = rings <= 3 ? (1u << 20) : rings <= 7 ? (512u << 10) : rings <= 15 ? (256u << 10) : (64u << 10);
  l->maxFrame_ = l->cap_ / 4;
  l->segBytes_ = segBytes(rings, l->cap_);
  l->out_.resize(o.size);
  l->serving_.reset(new std::atomic<bool>[o.size]);
  for (int p = 0; p < o.size; ++p) l->serving_[p].store(false, std::memory_order_relaxed);
  l->in_.resize(o.size);
  l->peerSegs_.assign(o.size, nullptr);
  auto remaining = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(o.deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1000));
  };

  // 1. This rank's segment (inbound rings, pages reserved now: a sparse
  // segment on a full /dev/shm would be SIGBUS at a first touch) and doorbell.
  const std::string seg = segName(o.token, o.rank), bell = bellPath(o.token, o.rank);
  std::string status = "ok";
  shm_unlink(seg.c_str());
  int fd = shm_open(seg.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    status = errnoMessage("cannot create shared memory " + seg, errno);
  } else {
    int e = ftruncate(fd, static_cast<off_t>(l->segBytes_)) != 0 ? errno
                                                                   : posix_fallocate(fd, 0, static_cast<off_t>(l->segBytes_));
    if (e != 0) {
      status = errnoMessage("cannot reserve " + std::to_string(l->segBytes_ >> 10) + " KiB of shared memory", e);
    } else {
      // Populated: this rank reads every ring of its segment (see prefault).
      void* p = mmap(nullptr, l->segBytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        status = errnoMessage("cannot map shared memory", errno);
      } else {
        l->seg_ = p;
        auto* h = new (p) SegHeader();
        h->guests.store(0, std::memory_order_relaxed);
        h->canRead.store(0, std::memory_order_relaxed);
        h->pid = static_cast<uint32_t>(getpid());
        if (o.cma) {
          h->probe = probeValue(h->pid);
          probeWord.store(h->probe, std::memory_order_relaxed);
          h->probeAddr = reinterpret_cast<uint64_t>(&probeWord);
          // Yama's ptrace_scope=1 only lets ancestors read a process; allow the local peers.
          prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        }
        h->rings = static_cast<uint32_t>(rings);
        h->cap = l->cap_;
        for (int i = 0; i < rings; ++i) new (ringAt(p, i, l->cap_)) Ring();
        std::atomic_thread_fence(std::memory_order_release);
        h->magic = kSegMagic;
      }
    }
    ::close(fd);
  }
  if (status == "ok") {
    unlink(bell.c_str());
    if (mkfifo(bell.c_str(), 0600) != 0) {
      status = errnoMessage("cannot make the doorbell " + bell, errno);
    } else {
      // Read and write: the FIFO never reads as closed while this rank holds it.
      l->bellFd_ = open(bell.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
      if (l->bellFd_ < 0) status = errnoMessage("cannot open the doorbell " + bell, errno);
    }
  }
  if (status != "ok") {
    shm_unlink(seg.c_str());
    unlink(bell.c_str());
  }
  o.store->set("p2p/" + std::to_string(o.rank), toBytes(status));

  // 2. The peers' segments: this rank writes into its ring there.
  std::string whyNot;
  for (int p : locals) {
    if (p == o.rank) continue;
    std::string key = "p2p/" + std::to_string(p);
    o.store->wait({key}, remaining());
    std::string theirs = toString(o.store->get(key));
    std::string bad;
    if (status != "ok") bad = "this rank's own: " + status;
    else if (theirs != "ok") bad = "rank " + std::to_string(p) + "'s: " + theirs;
    void* ps = nullptr;
    int pb = -1;
    if (bad.empty()) {
      int pf = shm_open(segName(o.token, p).c_str(), O_RDWR | O_CLOEXEC, 0600);
      if (pf < 0) {
        bad = errnoMessage("cannot open rank " + std::to_string(p) + "'s shared memory", errno);
      } else {
        ps = mmap(nullptr, l->segBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, pf, 0);
        ::close(pf);
        if (ps == MAP_FAILED) {
          ps = nullptr;
          bad = errnoMessage("cannot map rank " + std::to_string(p) + "'s shared memory", errno);
        } else {
          auto* h = static_cast<SegHeader*>(ps);
          if (h->magic != kSegMagic || h->rings != static_cast<uint32_t>(rings) || h->cap != l->cap_)
            bad = "rank " + std::to_string(p) + "'s shared memory has an unexpected layout";
        }
      }
      if (bad.empty()) {
        pb = open(bellPath(o.token, p).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (pb < 0) bad = errnoMessage("cannot open rank " + std::to_string(p) + "'s doorbell", errno);
      }
    }
    if (bad.empty()) {
      l->peerSegs_[p] = ps;
      l->out_[p].ring = ringAt(ps, indexIn(p, o.rank), l->cap_);
      prefault(l->out_[p].ring, sizeof(Ring) + l->cap_);
      l->out_[p].headMine = l->out_[p].ring->head.load(std::memory_order_relaxed);
      l->serving_[p].store(true, std::memory_order_relaxed);
      l->out_[p].bell = pb;
      l->in_[p].ring = ringAt(l->seg_, indexIn(o.rank, p), l->cap_);
      l->in_[p].bell = pb;
      // Can this rank read the peer's memory? The peer learns it from this
      // rank's header before it hears (below) that this rank is set up.
      auto* h = static_cast<SegHeader*>(ps);
      int mine = indexIn(o.rank, p);
      if (o.cma && h->probeAddr && mine < 64) {
        uint64_t v = 0;
        iovec lv{&v, sizeof(v)}, rv{reinterpret_cast<void*>(h->probeAddr), sizeof(v)};
        ssize_t got = process_vm_readv(static_cast<pid_t>(h->pid), &lv, 1, &rv, 1, 0);
        if (got == static_cast<ssize_t>(sizeof(v)) && v == h->probe) {
          l->in_[p].pid = static_cast<int>(h->pid);
          l->in_[p].canRead = true;
          static_cast<SegHeader*>(l->seg_)->canRead.fetch_or(uint64_t(1) << mine);
        } else {
          ACCL_INFO("INIT", o.where << ": process_vm_readv from rank " << p << " failed ("
                                    << (got < 0 ? errnoMessage("process_vm_readv", errno) : std::string("wrong data"))
                                    << "); point-to-point messages from it are copied through shared memory");
        }
      }
    } else {
      if (ps) munmap(ps, l->segBytes_);
      if (pb >= 0) ::close(pb);
      whyNot += (whyNot.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " + bad;
    }
    o.store->set("p2p/" + std::to_string(p) + "/by/" + std::to_string(o.rank), toBytes("1"));
  }

  // 3. Once every local peer had its go at them, nothing needs the names.
  if (status == "ok") {
    std::vector<std::string> keys;
    for (int p : locals)
      if (p != o.rank) keys.push_back("p2p/" + std::to_string(o.rank) + "/by/" + std::to_string(p));
    try {
      o.store->wait(keys, remaining());
    } catch (...) {
      shm_unlink(seg.c_str());
      unlink(bell.c_str());
      throw;
    }
    shm_unlink(seg.c_str());
    unlink(bell.c_str());
  }
  // Every local peer has probed this rank by now (it did so before saying
  // it opened this rank's segment).
  for (int p : locals) {
    if (p == o.rank || !l->out_[p].ring || !o.cma) continue;
    int theirs = indexIn(p, o.rank);
    l->out_[p].cma = theirs < 64 && (static_cast<SegHeader*>(l->peerSegs_[p])->canRead.load() >> theirs & 1);
  }
  *why = whyNot;
  bool any = false;
  for (int p = 0; p < o.size; ++p) any = any || l->out_[p].ring || l->in_[p].ring;
  if (!any) return nullptr;
  return l;
}

ShmLink::~ShmLink() {
  for (int p = 0; p < static_cast<int>(peerSegs_.size()); ++p) {
    if (peerSegs_[p]) munmap(peerSegs_[p], segBytes_);
    if (out_[p].bell >= 0) ::close(out_[p].bell);
  }
  if (seg_) munmap(seg_, segBytes_);
  if (bellFd_ >= 0) ::close(bellFd_);
}

void ShmLink::ring(int fd) {
  if (fd < 0) return;
  char b = 1;
  // EAGAIN: the FIFO is full of doorbells already; EPIPE cannot happen (the
  // owner holds its FIFO open for writing too).
  ssize_t n = ::write(fd, &b, 1);
  (void)n;
}

void ShmLink::onEvents(uint32_t) {
  char buf[256];
  while (::read(bellFd_, buf, sizeof(buf)) > 0) {
  }
}

void ShmLink::send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
                   const OutPtr& m, Route) {
  Out& o = out_[peer];
  // No upper limit: 2 ranks on 2 cores, sendrecv of 32-128 MiB took 1.1-1.7x
  // Open MPI's time by single copy against 1.3-2.2x through the ring (which
  // was the path above 16 MiB until 2026-11-27).
  if (o.cma && len >= singleCopyMin() && o.remoteOut < kSlots) {
    // One descriptor; the peer reads the buffer and acknowledges.
    if (m) m->framesLeft = 1;
    if (!o.ring) return;
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(type), kFlagRemote, key, 0, len, len, desc};
    f.data = buf;
    f.msg = m;
    f.seq = o.nextSeq++;
    ++o.remoteOut;
    o.queue.push_back(std::move(f));
    flush(peer);
    return;
  }
  size_t frames = len == 0 ? 1 : (len + maxFrame_ - 1) / maxFrame_;
  if (m) m->framesLeft = frames;
  if (!o.ring) return;  // dropped peer: as a closed connection, nothing goes out
  // One frame and nothing before it (a small message): straight into the
  // ring when it has room, without the queue's copy of the header and of
  // the owner's pointer.
  if (frames == 1 && sendNow(peer, type, key, desc, buf, len)) {
    if (m) sink_->onSent(m);
    return;
  }
  for (size_t off = 0, i = 0; i < frames; ++i, off += maxFrame_) {
    size_t n = std::min(maxFrame_, len - std::min(len, off));
    OutFrame f;
    f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, off, n, len, desc};
    f.data = buf + off;
    f.msg = m;
    o.queue.push_back(std::move(f));
  }
  flush(peer);
}

bool ShmLink::sendNow(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len) {
  Out& o = out_[peer];
  if (!o.ring || !o.queue.empty() || len > maxFrame_ || (o.cma && len >= singleCopyMin())) return false;
  FrameHeader h{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, 0, len, len, desc};
  return writeNow(peer, h, buf);
}

void ShmLink::putPayload(Out& o, char* data, uint64_t pos, const char* src, size_t n, uint64_t total) {
  if (n < internal::WriteWay::kMinTimedBytes || o_.stream == 0) {
    putAt(data, pos, src, n);
    return;
  }
  bool streamed = o_.stream > 0 ? total >= static_cast<uint64_t>(o_.stream)
                                : o.way.choose(false, tryWriteWays_.load(std::memory_order_relaxed));
  size_t at = pos & (cap_ - 1), first = std::min(n, cap_ - at);  // the ring wraps
  o.way.copy(data + at, src, first, streamed);
  if (n > first) o.way.copy(data, src + first, n - first, streamed);
}

void ShmLink::putAt(char* data, uint64_t pos, const char* src, size_t n) const {
  size_t at = pos & (cap_ - 1), first = std::min(n, cap_ - at);  // the ring wraps
  std::memcpy(data + at, src, first);
  if (n > first) std::memcpy(data, src + first, n - first);
}

bool ShmLink::writeNow(int peer, const FrameHeader& h, const char* buf) {
  Out& o = out_[peer];
  Ring* r = o.ring;
  size_t rec = sizeof(FrameHeader) + align64(h.len);
  uint64_t head = o.headMine;
  // The reader's tail as last seen: it only grows, so the room it shows is
  // there; the shared line is read again only when that room is too small
  // (reading it on every frame moved the line between the cores each time).
  if (cap_ - (head - o.tailSeen) < rec) {
    o.tailSeen = r->tail.load(std::memory_order_acquire);
    if (cap_ - (head - o.tailSeen) < rec) return false;  // queued: flush() waits for room
  }
  char* data = r->data();
  auto put = [&](uint64_t pos, const char* src, size_t n) { putAt(data, pos, src, n); };
  put(head, reinterpret_cast<const char*>(&h), sizeof(FrameHeader));
  if (h.len) putPayload(o, data, head + sizeof(FrameHeader), buf, h.len, h.total);
  noteCpu(r->writerCpu, o.cpuNoted);
  r->head.store(head + rec, std::memory_order_release);
  o.headMine = head + rec;
  ringIfAsleep(peer);
  return true;
}

bool ShmLink::writerOnCpu(int cpu) const {
  for (const In& i : in_)
    if (i.ring && i.ring->writerCpu.load(std::memory_order_relaxed) == cpu) return true;
  return false;
}

void ShmLink::ringIfAsleep(int peer) {
  // Either the reader sees the new head after saying it sleeps, or this
  // sees that it sleeps (a fence on each side).
  Ring* r = out_[peer].ring;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (r->readerAsleep.load(std::memory_order_relaxed) &&
      static_cast<SegHeader*>(peerSegs_[peer])->guests.load(std::memory_order_relaxed) == 0 &&
      r->readerAsleep.exchange(0))
    ring(out_[peer].bell);
}

bool ShmLink::flush(int peer) {
  Out& o = out_[peer];
  Ring* r = o.ring;
  if (!r || o.queue.empty()) return false;
  char* data = r->data();
  auto put = [&](uint64_t pos, const char* src, size_t n) { putAt(data, pos, src, n); };
  uint64_t head = o.headMine;
  uint64_t tail = o.tailSeen;  // read again below when the room it shows is too small
  bool any = false;
  // Pieces of large messages are written here, by the caller or the progress
  // thread: either is what a waiter for them waits on.
  noteCpu(r->writerCpu, o.cpuNoted);
  while (!o.queue.empty()) {
    OutFrame& f = o.queue.front();
    bool remote = f.hdr.flags & kFlagRemote;
    size_t rec = sizeof(FrameHeader) + (remote ? sizeof(RemoteDesc) : align64(f.hdr.len));
    if (cap_ - (head - tail) < rec) {
      tail = r->tail.load(std::memory_order_acquire);
      if (cap_ - (head - tail) < rec) {
        // Full: ask the reader to ring this rank's doorbell when it frees
        // space (whichever thread queued the frame, the progress thread
        // then writes the rest), unless it freed some meanwhile.
        r->writerWaiting.store(1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        tail = r->tail.load(std::memory_order_acquire);
        if (cap_ - (head - tail) < rec) break;
      }
    }
    put(head, reinterpret_cast<const char*>(&f.hdr), sizeof(FrameHeader));
    if (remote) {
      RemoteDesc d{};
      d.addr = reinterpret_cast<uint64_t>(f.data);
      d.seq = f.seq;
      put(head + sizeof(FrameHeader), reinterpret_cast<const char*>(&d), sizeof(d));
      r->slots[f.seq % kSlots].store(f.seq << 2 | kPosted, std::memory_order_relaxed);  // published by head
    } else if (f.hdr.len) {
      putPayload(o, data, head + sizeof(FrameHeader), f.data, f.hdr.len, f.hdr.total);
    }
    head += rec;
    r->head.store(head, std::memory_order_release);
    o.headMine = head;
    OutPtr m = std::move(f.msg);
    uint64_t seq = f.seq;
    o.queue.pop_front();
    any = true;
    if (remote) o.pending.push_back(Pending{seq, std::move(m)});  // sent when acknowledged
    else if (m) sink_->onSent(m);
  }
  o.tailSeen = tail;
  if (any) ringIfAsleep(peer);
  return any;
}

bool ShmLink::readFrom(int peer) {
  In& i = in_[peer];
  Ring* r = i.ring;
  if (!r || i.dead) return false;
  char* data = r->data();
  auto get = [&](uint64_t pos, char* dst, size_t n) {
    size_t at = pos & (cap_ - 1), first = std::min(n, cap_ - at);
    std::memcpy(dst, data + at, first);
    if (n > first) std::memcpy(dst + first, data, n - first);
  };
  uint64_t tail = r->tail.load(std::memory_order_relaxed);
  // The next frame's header and first payload line, asked for together
  // with the head: when a frame has come, its lines arrive from the
  // writer's core beside the head's instead of after it (2 ranks, 8 B
  // sendrecv: 0.91-0.99 -> 0.86-0.92 us).
  prefetchFrame(data, tail);
  uint64_t head = r->head.load(std::memory_order_acquire);
  bool any = false;
  for (int n = 0; tail != head && n < 64 && !i.dead; ++n) {
    std::string bad;
    FrameHeader h{};
    LandingPtr l;
    if (head - tail > cap_ || (head - tail) % 64 != 0) {
      bad = "ring counters out of range";
    } else {
      get(tail, reinterpret_cast<char*>(&h), sizeof(h));
      if (h.flags == kFlagAck || h.flags == kFlagRemote) {
        if (!headerValid(h)) {
          fail(peer, validateHeader(h));
          return true;
        }
        if (h.flags == kFlagAck) {
          if (!onAck(peer, h)) return true;
          tail += sizeof(FrameHeader);
        } else {
          if (sizeof(FrameHeader) + sizeof(RemoteDesc) > head - tail) {
            fail(peer, "single-copy descriptor beyond what the ring published");
            return true;
          }
          int done = readRemote(peer, h, tail);
          if (done < 0) return true;
          if (done == 2) break;  // left in the sender's memory for now
          if (done == 0) {  // the next piece at the next poll
            any = true;
            break;
          }
          tail += sizeof(FrameHeader) + sizeof(RemoteDesc);
        }
        r->tail.store(tail, std::memory_order_release);
        any = true;
        if (tail == head) head = r->head.load(std::memory_order_acquire);
        continue;
      }
      if (h.flags != 0) {
        fail(peer, "unknown frame flags " + std::to_string(h.flags));
        return true;
      }
      bool fits = h.len <= maxFrame_ && sizeof(FrameHeader) + align64(h.len) <= head - tail;
      // A whole message whose payload does not wrap: the sink may land it
      // from the ring in one step (a small message into a posted receive).
      size_t at = (tail + sizeof(FrameHeader)) & (cap_ - 1);
      if (fits && h.offset == 0 && h.len == h.total && at + h.len <= cap_ && headerValid(h) &&
          sink_->landWhole(peer, h, data + at)) {
        tail += sizeof(FrameHeader) + align64(h.len);
        r->tail.store(tail, std::memory_order_release);
        any = true;
        if (tail == head) head = r->head.load(std::memory_order_acquire);
        continue;
      }
      l = admitHeader(*sink_, peer, h,
                      fits ? "" : "frame of " + std::to_string(h.len) + " bytes beyond what the ring published", &bad);
    }
    if (!bad.empty()) {
      ACCL_WARN("NET", o_.where << ": refused frame from rank " << peer << " (shared memory): " << bad);
      i.dead = true;
      sink_->onPeerFailed(this, peer, "protocol error: " + bad);
      return true;
    }
    if (i.dead) return true;  // the sink dropped the peer meanwhile
    if (h.len && l && l->base) {
      // Into the destination with non-temporal stores where the whole
      // message is larger than the cache (copy.h).
      if (h.total >= internal::streamingMin()) {
        uint64_t pos = tail + sizeof(FrameHeader);
        size_t at = pos & (cap_ - 1), first = std::min<size_t>(h.len, cap_ - at);
        internal::copyStreaming(l->base + h.offset, data + at, first);
        if (h.len > first) internal::copyStreaming(l->base + h.offset + first, data, h.len - first);
      } else {
        get(tail + sizeof(FrameHeader), l->base + h.offset, h.len);
      }
    }
    tail += sizeof(FrameHeader) + align64(h.len);
    r->tail.store(tail, std::memory_order_release);
    sink_->onFrame(peer, h, l);
    any = true;
    if (tail == head) head = r->head.load(std::memory_order_acquire);
  }
  if (any) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (r->writerWaiting.load(std::memory_order_relaxed) && r->writerWaiting.exchange(0)) ring(i.bell);
  }
  return any;
}

void ShmLink::guestBegin() {
  if (!seg_) return;
  static_cast<SegHeader*>(seg_)->guests.fetch_add(1);  // seq_cst: before any read of a ring's head
}

void ShmLink::guestEnd(bool served) {
  if (!seg_) return;
  if (served) {
    // By the coarse clock: the loop stays lazy 6-10 ms after the last served waiter.
    lazyUntil_.store((coarseNow() + std::chrono::milliseconds(10)).time_since_epoch().count(),
                     std::memory_order_relaxed);
  } else if (lazyUntil_.load(std::memory_order_relaxed) != 0) {
    // This waiter sleeps now: its message must wake the loop.
    lazyUntil_.store(0);
    if (loopLazy_.load()) ring(bellFd_);
  }
  static_cast<SegHeader*>(seg_)->guests.fetch_sub(1);
  // A writer that saw this guest rang no doorbell: a frame it published
  // before this is seen here (a full fence on each side), one after it is
  // rung for. Wake the loop if it sleeps on such a frame.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p = 0; p < o_.size; ++p) {
    Ring* r = in_[p].ring;
    if (!r || in_[p].dead) continue;
    if (r->head.load(std::memory_order_acquire) != r->tail.load(std::memory_order_relaxed) &&
        r->readerAsleep.load(std::memory_order_relaxed) && r->readerAsleep.exchange(0)) {
      ring(bellFd_);
      return;
    }
  }
}

bool ShmLink::guestsActive() const {
  return seg_ && static_cast<const SegHeader*>(seg_)->guests.load(std::memory_order_relaxed) != 0;
}

void ShmLink::fail(int peer, const std::string& bad) {
  ACCL_WARN("NET", o_.where << ": refused frame from rank " << peer << " (shared memory): " << bad);
  in_[peer].dead = true;
  sink_->onPeerFailed(this, peer, "protocol error: " + bad);
}

void ShmLink::ack(int peer, uint64_t seq) {
  Out& o = out_[peer];
  if (!o.ring) return;
  OutFrame f;
  f.hdr = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Data), kFlagAck, seq, 0, 0, 0, OpDesc{}};
  o.queue.push_back(std::move(f));
  flush(peer);
}

bool ShmLink::onAck(int peer, const FrameHeader& h) {
  Out& o = out_[peer];
  // Acknowledgements come in the order the descriptors went; withdrawn ones
  // before this get none.
  while (!o.pending.empty() && o.pending.front().cancelled && o.pending.front().seq != h.key) {
    o.pending.pop_front();
    --o.remoteOut;
  }
  if (h.len != 0 || o.pending.empty() || o.pending.front().seq != h.key) {
    fail(peer, "acknowledgement of single-copy message " + std::to_string(h.key) + ", which is not in flight");
    return false;
  }
  OutPtr m = std::move(o.pending.front().msg);
  o.pending.pop_front();
  --o.remoteOut;
  if (m) sink_->onSent(m);
  return true;
}

int ShmLink::readRemote(int peer, const FrameHeader& h, uint64_t pos) {
  In& i = in_[peer];
  Ring* r = i.ring;
  RemoteDesc d;
  {
    uint64_t at = (pos + sizeof(FrameHeader)) & (cap_ - 1);  // a record never wraps inside 64 bytes
    std::memcpy(&d, r->data() + at, sizeof(d));
  }
  if (!i.canRead) {
    fail(peer, "single-copy descriptor from a rank whose memory this rank cannot read");
    return -1;
  }
  if (h.offset != 0 || h.len != h.total || h.len == 0 || i.remoteOff >= h.total) {
    fail(peer, "malformed single-copy descriptor (offset " + std::to_string(h.offset) + ", " +
                   std::to_string(h.len) + " of " + std::to_string(h.total) + " bytes)");
    return -1;
  }
  std::atomic<uint64_t>& slot = r->slots[d.seq % kSlots];
  uint64_t want = d.seq << 2 | kPosted;
  // No receive for it yet: left in the sender's memory a while (holdForReceiveNs).
  bool unread = i.remoteOff == 0 && slot.load(std::memory_order_relaxed) == want;
  if (unread && !draining_ && h.total >= deferMin_.load(std::memory_order_relaxed) &&
      static_cast<FrameType>(h.type) == FrameType::Tagged && !sink_->readNow(peer, h)) {
    Clock::rep now = Clock::now().time_since_epoch().count();
    if (i.deferUntil == 0) i.deferUntil = now + holdForReceiveNs(h.total), ++deferred_;
    if (now < i.deferUntil) return 2;
  }
  if (i.deferUntil != 0) i.deferUntil = 0, --deferred_;
  if (!slot.compare_exchange_strong(want, d.seq << 2 | kReading)) {
    if (want == (d.seq << 2 | kCancelled)) {  // withdrawn: skipped, unacknowledged
      i.remoteOff = 0;
      return 1;
    }
    fail(peer, "single-copy descriptor " + std::to_string(d.seq) + " that its sender does not hold");
    return -1;
  }
  FrameHeader piece = h;
  piece.flags = 0;
  piece.offset = i.remoteOff;
  piece.len = std::min<uint64_t>(kPiece, h.total - i.remoteOff);
  bool last = piece.offset + piece.len == h.total;
  std::string bad;
  LandingPtr l = admitHeader(*sink_, peer, piece, "", &bad);
  int err = 0;
  if (bad.empty() && !i.dead && l && l->base) {
    iovec lv{l->base + piece.offset, piece.len}, rv{reinterpret_cast<void*>(d.addr + piece.offset), piece.len};
    ssize_t got = process_vm_readv(i.pid, &lv, 1, &rv, 1, 0);
    if (got != static_cast<ssize_t>(piece.len)) err = got < 0 ? errno : EFAULT;
  }
  uint64_t reading = d.seq << 2 | kReading;
  if (!slot.compare_exchange_strong(reading, d.seq << 2 | (last ? kDone : kPosted))) {
    // The sender gave up waiting for this piece and withdrew the message:
    // what was read may not be its data. Nothing more of it is delivered.
    i.remoteOff = 0;
    return 1;
  }
  if (!bad.empty()) {
    fail(peer, bad);
    return -1;
  }
  if (i.dead) return -1;  // the sink dropped the peer meanwhile
  if (err == ESRCH) {
    i.dead = true;
    sink_->onPeerFailed(this, peer, "its process exited (single-copy read)");
    return -1;
  }
  if (err) {
    fail(peer, errnoMessage("process_vm_readv of " + std::to_string(piece.len) + " bytes of a single-copy message failed", err));
    return -1;
  }
  sink_->onFrame(peer, piece, l);
  if (i.dead) return -1;
  if (!last) {
    i.remoteOff += piece.len;
    return 0;
  }
  i.remoteOff = 0;
  ack(peer, d.seq);
  return 1;
}

bool ShmLink::poll() { return pollRings(true); }
bool ShmLink::pollAsGuest() { return pollRings(false); }

bool ShmLink::framesFrom(int peer) const {
  if (peer < 0 || peer >= o_.size) return false;
  const Ring* r = in_[peer].ring;
  if (!r) return false;
  uint64_t tail = r->tail.load(std::memory_order_relaxed);
  // A waiter spins here until the peer's frame comes: its lines are asked
  // for with the head's on every pass (as readFrom does), so that they come
  // beside it rather than after it once the frame is published (2 ranks,
  // sendrecv of 8 B against Open MPI's time, alternating launches: 1.41-1.51
  // -> 1.36-1.38, and 1.57-1.72 -> 1.43-1.57 where copies between the cores
  // ran slow).
  prefetchFrame(const_cast<Ring*>(r)->data(), tail);
  return r->head.load(std::memory_order_acquire) != tail;
}

bool ShmLink::pollRings(bool owner) {
  bool any = false;
  for (int p = 0; p < o_.size; ++p) {
    In& i = in_[p];
    if (!i.ring || i.dead) continue;
    if (owner && i.ring->readerAsleep.load(std::memory_order_relaxed))
      i.ring->readerAsleep.store(0, std::memory_order_relaxed);
    any = readFrom(p) || any;
  }
  for (int p = 0; p < o_.size; ++p) {
    Out& o = out_[p];
    if (!o.ring || o.queue.empty()) continue;
    if (owner && o.ring->writerWaiting.load(std::memory_order_relaxed))
      o.ring->writerWaiting.store(0, std::memory_order_relaxed);
    any = flush(p) || any;
  }
  return any;
}

bool ShmLink::arm(bool lazy) {
  // Against guestEnd(false): either that guest sees the loop lazy (and rings
  // it), or the loop sees it gave up (and asks for doorbells).
  loopLazy_.store(lazy);
  if (lazy && lazyUntil_.load() == 0) loopLazy_.store(lazy = false);
  for (int p = 0; p < o_.size; ++p) {
    if (!lazy && in_[p].ring && !in_[p].dead) in_[p].ring->readerAsleep.store(1, std::memory_order_relaxed);
    if (out_[p].ring && !out_[p].queue.empty()) out_[p].ring->writerWaiting.store(1, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p = 0; p < o_.size; ++p) {
    Ring* r = in_[p].ring;
    // A ring whose tail is a message left waiting is looked at again by its
    // deadline (deferredUntil), or when a receive is posted.
    if (r && !in_[p].dead && in_[p].deferUntil == 0 &&
        r->head.load(std::memory_order_acquire) != r->tail.load(std::memory_order_relaxed))
      return true;
    Out& o = out_[p];
    if (o.ring && !o.queue.empty()) {
      size_t rec = sizeof(FrameHeader) + align64(o.queue.front().hdr.len);
      if (cap_ - (o.ring->head.load(std::memory_order_relaxed) - o.ring->tail.load(std::memory_order_acquire)) >= rec)
        return true;
    }
  }
  return false;
}

void ShmLink::drain(int peer) {
  draining_ = true;
  for (int n = 0; n < 1 << 16 && readFrom(peer); ++n) {
  }
  draining_ = false;
}

Clock::rep ShmLink::deferredUntil() const {
  Clock::rep first = 0;
  for (int p = 0; deferred_ > 0 && p < o_.size; ++p)
    if (in_[p].ring && !in_[p].dead && in_[p].deferUntil != 0 && (first == 0 || in_[p].deferUntil < first))
      first = in_[p].deferUntil;
  return first;
}

bool ShmLink::readDeferred() {
  bool any = false;
  for (int p = 0; deferred_ > 0 && p < o_.size; ++p) {
    In& i = in_[p];
    if (i.deferUntil == 0) continue;
    if (!i.ring || i.dead) {  // its peer failed while a message waited: nothing will read it
      i.deferUntil = 0, --deferred_;
      continue;
    }
    any = readFrom(p) || any;
  }
  return any;
}

bool ShmLink::withdraw(const OutPtr& m) {
  for (auto& o : out_) {
    bool found = false, first = false;
    for (auto it = o.queue.begin(); it != o.queue.end();) {
      if (it->msg == m) {
        if (!found) first = it->hdr.offset == 0;
        found = true;
        if (it->hdr.flags & kFlagRemote) --o.remoteOut;
        it = o.queue.erase(it);
      } else {
        ++it;
      }
    }
    if (found) return first;  // frames go out in order: the first still here means none went
    for (auto& p : o.pending) {
      if (p.msg != m) continue;
      p.msg = nullptr;
      if (!o.ring) return false;  // the peer is gone
      std::atomic<uint64_t>& slot = o.ring->slots[p.seq % kSlots];
      // The reader copies a piece (4 MiB) at a time: wait out one in progress.
      auto until = Clock::now() + std::chrono::milliseconds(500);
      for (;;) {
        uint64_t want = p.seq << 2 | kPosted;
        if (slot.compare_exchange_strong(want, p.seq << 2 | kCancelled)) {
          p.cancelled = true;  // never read again; no acknowledgement comes
          return true;
        }
        if (want != (p.seq << 2 | kReading)) return false;  // read whole: its acknowledgement is on the way
        if (Clock::now() >= until) {
          // A reader stopped in the middle of a piece (a stopped process):
          // it will discard what it read.
          if (slot.compare_exchange_strong(want, p.seq << 2 | kCancelled)) {
            p.cancelled = true;
            return false;
          }
          continue;
        }
        std::this_thread::yield();
      }
    }
  }
  return true;
}

void ShmLink::writeRawForTest(int peer, const void* bytes, size_t len) {
  Ring* r = out_[peer].ring;
  if (!r) return;
  uint64_t head = r->head.load(std::memory_order_relaxed);
  size_t at = head & (cap_ - 1), first = std::min(len, cap_ - at);
  std::memcpy(r->data() + at, bytes, first);
  if (len > first) std::memcpy(r->data(), static_cast<const char*>(bytes) + first, len - first);
  r->head.store(head + len, std::memory_order_release);
  out_[peer].headMine = head + len;
}

void ShmLink::dropPeer(int peer) {
  out_[peer].queue.clear();
  out_[peer].pending.clear();
  out_[peer].remoteOut = 0;
  out_[peer].ring = nullptr;  // its segment stays mapped until the link goes
  serving_[peer].store(false, std::memory_order_relaxed);
  in_[peer].dead = true;
}

}  // namespace net
}  // namespace core
}  // namespace accl
