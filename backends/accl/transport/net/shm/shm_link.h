// The shared-memory link: frames to the peers on this host through rings in
// shared memory, for the network transport's point-to-point messages and
// the steps of its collectives between ranks of one host (the segment of
// ShmDomain runs the host-local collectives; this link carries what the
// network transport would otherwise send over TCP loopback).
//
// Each rank owns one segment with an inbound ring per local peer (single
// producer, single consumer); a frame is a FrameHeader and up to a quarter
// of a ring of payload, written whole and then published by the ring's head,
// so a reader never sees part of a frame, also from a writer that died. A
// rank whose progress thread goes to sleep says so in its rings; a writer
// that finds that flag rings the reader's doorbell, a FIFO in /dev/shm that
// the reader's event loop watches (and the other way round when a writer
// waits for space). A frame that is a whole message is offered to the
// sink's landWhole where it lies, so that a small message lands in its
// posted receive in one step; one written whole at once (sendNow) needs no
// record on the sender's side. The socket link still carries set-up and control frames,
// and its closing still tells this rank that a local peer is gone; the peer's
// ring is read to its end before the peer is failed.
//
// Single copy: a message of singleCopyMin() bytes or more (8 KiB where the
// host's ranks each have a CPU of their own, 16 KiB where they share CPUs)
// to a peer that may read this process's memory (process_vm_readv, probed
// at set-up; ACCL_SHM_CMA=off turns it off) goes as one descriptor frame in
// the ring, with the address
// of the sender's buffer; the reader copies it straight into the receive
// buffer, 4 MiB per poll, and acknowledges it through its own ring, which
// completes the send. A slot per descriptor in the ring's header says
// whether the reader is copying, so that a withdrawn send is never read
// after withdraw() returns (it waits out a piece being copied). A message
// that no receive wants yet is left in the sender's memory a while
// (holdForReceiveNs), so that a receive posted meanwhile takes it in one copy.
//
// Set-up is collective among the ranks of a host; a rank that cannot make its
// segment (no /dev/shm space, no FIFO support) publishes why, and its peers
// send to it over TCP. Segment and FIFO are unlinked once every local peer
// has opened them: nothing is left in /dev/shm, even after a crash.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/copy.h"
#include "accl/store.h"
#include "transport/net/event_loop.h"
#include "transport/net/frame_link.h"

namespace accl {
namespace core {
namespace net {

class ShmLink : public FrameLink, public EventHandler {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::vector<bool> local;  // local[p]: rank p is on this host (not this rank)
    uint64_t token = 0;       // the communicator's; names the segments
    std::shared_ptr<Store> store;
    Clock::time_point deadline;
    std::string where;
    bool cma = true;  // single copy where the peers may read this process
    // ACCL_SHM_STREAM_BYTES: -1 auto (payloads written with non-temporal
    // stores where this rank's plain writes run slow: copy.h, WriteWay), 0
    // never, else those of messages of at least that many bytes.
    long long stream = -1;
  };
  // Null when no local peer can be served; *why then (or for the peers that
  // cannot) says why. Throws Timeout if local peers never publish.
  static std::unique_ptr<ShmLink> connect(const Options& o, FrameSink* sink, std::string* why);
  ~ShmLink() override;

  int doorbellFd() const { return bellFd_; }
  size_t ringBytes() const { return cap_; }

  const char* name() const override { return "shm"; }
  // Any thread, lock or not (a point-to-point op asks before it takes the
  // transport's lock): a flag of its own, not the ring pointer dropPeer clears.
  bool serves(int peer) const override { return serving_[peer].load(std::memory_order_relaxed); }
  void send(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len,
            const OutPtr& m, Route route) override;
  bool sendNow(int peer, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len) override;
  bool withdraw(const OutPtr& m) override;
  void dropPeer(int peer) override;
  bool poll() override;
  bool arm() override { return arm(false); }
  // lazy: the loop will look again within a millisecond; no doorbell for
  // frames to read (see guestsServed).
  bool arm(bool lazy);
  // poll() for a thread other than the progress loop (a waiter on a
  // point-to-point op): reads and flushes alike, but leaves the loop's
  // asleep/waiting flags alone, so that a loop that armed them and sleeps
  // still gets its doorbell when the next frame comes.
  bool pollAsGuest();
  // Whether a local peer last wrote frames to this rank from CPU `cpu` (a
  // waiter on that CPU that spins keeps the peer from it).
  bool writerOnCpu(int cpu) const;
  // Around a guest's polls: while one polls, writers to this rank ring no
  // doorbell; the end wakes the loop for a frame that came meanwhile.
  // `served`: the guest got what it waited for (else it gives up and sleeps:
  // the loop must then get doorbells again, and is woken to re-arm).
  void guestBegin();
  void guestEnd(bool served);
  bool guestsActive() const;
  // Whether guests were served lately (10 ms): the loop may then sleep
  // without doorbells for frames, at most a millisecond at a time.
  bool guestsServed(Clock::time_point now) const {
    return now.time_since_epoch().count() < lazyUntil_.load(std::memory_order_relaxed);
  }
  void onEvents(uint32_t) override;  // the doorbell: drained; the loop then polls
  // Reads what `peer` wrote to this rank up to now (before it is failed).
  void drain(int peer);
  // A single-copy point-to-point message that arrives before its receive is
  // posted stays in its sender's memory for holdForReceiveNs (frame_link.h),
  // from this size (an op's steps are received as the op runs: never left).
  // Where the host's ranks have a CPU each, a receiver is seldom far
  // behind, and below 64 KiB the wait cost more than the copy it saves (2
  // ranks, sendrecv of 16 KiB: 1.15-1.17x Open MPI's time without it,
  // 1.26-1.34x with it); where they share CPUs, from any size (4 ranks on 2
  // cores, 16 KiB: 1.42-1.82x without, 1.30-1.38x with).
  static constexpr size_t kDeferMinOwnCpus = size_t(64) << 10;
  static constexpr size_t kDeferMinSharedCpus = 0;
  void setDeferMin(size_t bytes) { deferMin_.store(bytes, std::memory_order_relaxed); }
  // When the first such message left waiting should be read anyway (Clock
  // ns; 0: none waits). The loop does not sleep past it.
  Clock::rep deferredUntil() const;
  // A receive was posted: reads the messages left waiting that it (or any
  // receive) now takes. True if frames moved.
  bool readDeferred();
  // Also read without the transport's lock (the progress loop's lazy look).
  bool deferring() const { return deferred_.load(std::memory_order_relaxed) > 0; }
  // A receive from `peer` was posted: reads what that peer wrote so far (a
  // small message sent before this receive then lands in it now, and the
  // receive needs no waiting). True if frames moved. With the transport's lock.
  bool readPeer(int peer) { return peer >= 0 && peer < o_.size && readFrom(peer); }
  // Whether the ring from `peer` holds frames not yet read. Without the
  // transport's lock (the ring is this rank's for the link's life): a
  // waiter looks before it takes the lock.
  bool framesFrom(int peer) const;

  struct Ring;  // shared-memory layout (shm_link.cc)
  // For tests that play a broken peer: writes `bytes` raw into the ring to
  // `peer` and publishes them (as a writer that ignores the format would).
  void writeRawForTest(int peer, const void* bytes, size_t len);
  // Whether messages to `peer` of at least singleCopyMin() bytes are read by
  // the peer from this process's memory.
  bool singleCopyTo(int peer) const { return out_[peer].cma; }
  // From this size a message goes by single copy (where the peer allows it).
  // Below, it is copied into the ring and out of it: at 8-64 KiB (2 ranks
  // with a core each, sendrecv) that took 1.15-2.5x Open MPI's time, single
  // copy 1.0-1.17x; where ranks share CPUs the ring still wins at 8 KiB.
  // The threshold is the sender's alone: the reader takes a descriptor of
  // any size.
  static constexpr size_t kSingleCopyMinOwnCpus = size_t(8) << 10;
  static constexpr size_t kSingleCopyMinSharedCpus = size_t(16) << 10;
  // Those are ACCL_SHM_CMA=on's. The default (auto) copies smaller messages
  // through the ring, which stays in cache, and reads larger ones by single
  // copy, whose kernel pins every 4 KiB page it reads (4 MiB here: 14.5 GB/s
  // against 61 GB/s for a plain copy). Sendrecv against Open MPI's busbw,
  // ring (auto before) and single copy (on) alternating, 4 launches each:
  // - 2 ranks with a CPU each: at 256-512 KiB the ring 1.02-1.48, single copy
  //   0.83-0.97; at 1-2 MiB 0.93-1.08 and 0.91-1.13; from 4 MiB the ring
  //   0.45-1.11 (most cells 0.6-0.95), single copy 0.74-1.13 (most 0.93-1.07).
  //   Bound to a core each, some launches also ran the ring at 0.12-0.18 of
  //   Open MPI at 1-4 MiB, never single copy: every copy through shared
  //   memory ran slow there (ShmDomain::singleCopyEveryBandFrom).
  // - 4 ranks on 2 cores: at 16-32 KiB the ring 1.09-2.57, single copy
  //   0.59-0.91; at 64-128 KiB 0.22-1.16 and 0.65-0.93; from 256 KiB the ring
  //   0.26-1.36 (a writer waits for its reader's turn on a CPU at every
  //   ring's worth), single copy 0.67-1.14 (most 0.8-1.0). On another 2-core
  //   VM (2 launches each way): at 32 KiB the ring 0.63-0.86, single copy
  //   1.01; at 64-128 KiB 0.30-0.58 and 0.94-1.02. Single copy takes 64 KiB
  //   and up, where it was the steadier on both; at 16-32 KiB, where the two
  //   machines disagreed, the group times both ways when it is made
  //   (AcclProcessGroup::probePointToPoint) and may lower it.
  static constexpr size_t kSingleCopyAutoMinOwnCpus = size_t(1) << 20;
  static constexpr size_t kSingleCopyAutoMinSharedCpus = size_t(64) << 10;
  static constexpr size_t kSingleCopyNever = SIZE_MAX;
  size_t singleCopyMin() const { return singleCopyMin_.load(std::memory_order_relaxed); }
  // The group sets it once it knows whether its local ranks share CPUs.
  void setSingleCopyMin(size_t bytes) { singleCopyMin_.store(bytes, std::memory_order_relaxed); }
  // The group sets it once it knows that its local ranks have a CPU each:
  // only then are a payload's two ways of writing tried in turn (where the
  // ranks share CPUs a copy's time is mostly the time its core was away).
  void setTryWriteWays(bool on) { tryWriteWays_.store(on, std::memory_order_relaxed); }

 private:
  bool pollRings(bool owner);
  ShmLink() = default;
  // Writes one frame (header and `buf`) into the ring to `peer` if it has
  // room (false: it has not, nothing written), and rings the reader if it sleeps.
  bool writeNow(int peer, const FrameHeader& h, const char* buf);
  // Copies n bytes to ring position `pos` of the ring data at `data`.
  void putAt(char* data, uint64_t pos, const char* src, size_t n) const;
  // Asks for the lines of the frame header at ring position `pos` and of
  // the payload line after it.
  void prefetchFrame(const char* data, uint64_t pos) const {
    __builtin_prefetch(data + (pos & (cap_ - 1)));
    __builtin_prefetch(data + ((pos + 64) & (cap_ - 1)));
  }

  void ringIfAsleep(int peer);
  struct OutFrame {
    FrameHeader hdr{};
    const char* data = nullptr;
    OutPtr msg;
    uint64_t seq = 0;  // a single-copy descriptor's (hdr.flags)
  };
  struct Pending {  // a single-copy message written, not yet acknowledged
    uint64_t seq;
    OutPtr msg;
    bool cancelled = false;  // withdrawn before the reader took it: no acknowledgement comes
  };
  struct Out {  // to one peer: its ring in the peer's segment, the frames waiting for space
    Ring* ring = nullptr;
    int bell = -1;
    uint64_t tailSeen = 0;  // the ring's tail as this writer last read it
    // The ring's head and writerCpu as this writer (their only one) last
    // wrote them: the line they share is polled by the reader, and reading it
    // back here waited for it on every frame (2 ranks with a core each,
    // sendrecv 8-32 B against Open MPI's time, alternating launches:
    // 1.23-1.49 -> 1.01-1.17 with the head kept here).
    uint64_t headMine = 0;
    int cpuNoted = -1;
    std::deque<OutFrame> queue;
    bool cma = false;        // the peer reads single-copy messages from this process
    uint64_t nextSeq = 0;    // of single-copy messages
    size_t remoteOut = 0;    // single-copy messages queued or pending
    std::deque<Pending> pending;
    internal::WriteWay way;  // how payloads are written into this ring
  };
  // The same for a frame's payload, of a message of `total` bytes, to `o`'s
  // peer: plainly or with non-temporal stores (Out::way).
  void putPayload(Out& o, char* data, uint64_t pos, const char* src, size_t n, uint64_t total);
  struct In {  // from one peer: its ring in this rank's segment
    Ring* ring = nullptr;
    int bell = -1;  // the peer's doorbell (space freed)
    bool dead = false;
    int pid = 0;             // the peer's process, for single-copy reads
    bool canRead = false;    // the probe read its memory
    uint64_t remoteOff = 0;  // bytes of the single-copy message at the tail done
    // The single-copy message at the tail, which no receive wants yet, is
    // left in its sender's memory until then (Clock ns; 0: none is).
    Clock::rep deferUntil = 0;
  };
  // The single-copy message whose descriptor is at `pos` of the ring from
  // `peer`: copies its next piece. 1: done (acknowledged or skipped, the
  // descriptor may go); 0: more to copy; -1: the peer was failed; 2: left
  // in the sender's memory for now (no receive wants it yet: holdForReceiveNs).
  int readRemote(int peer, const FrameHeader& h, uint64_t pos);
  void ack(int peer, uint64_t seq);
  bool onAck(int peer, const FrameHeader& h);  // false: the peer was failed
  void fail(int peer, const std::string& bad);
  // Writes queued frames to `peer` while they fit; true if any was written.
  bool flush(int peer);
  bool readFrom(int peer);
  void ring(int fd);

  Options o_;
  FrameSink* sink_ = nullptr;
  std::atomic<size_t> singleCopyMin_{kSingleCopyMinSharedCpus};
  std::atomic<bool> tryWriteWays_{false};
  std::atomic<Clock::rep> lazyUntil_{0};
  std::atomic<bool> loopLazy_{false};  // the loop sleeps without doorbells
  size_t cap_ = 0;       // bytes of each ring's data (a power of two)
  size_t maxFrame_ = 0;  // payload bytes of one frame
  void* seg_ = nullptr;  // this rank's segment (inbound rings)
  size_t segBytes_ = 0;
  std::vector<void*> peerSegs_;  // mapped segments of the peers (outbound rings)
  int bellFd_ = -1;              // this rank's doorbell (read end, also held open for writing)
  std::vector<Out> out_;
  std::unique_ptr<std::atomic<bool>[]> serving_;  // per peer: out_[p].ring is set (serves())
  std::vector<In> in_;
  std::atomic<size_t> deferMin_{kDeferMinSharedCpus};  // as singleCopyMin_, until the group says
  std::atomic<int> deferred_{0};  // rings whose tail is a message left waiting (In::deferUntil)
  bool draining_ = false;  // drain(): everything is read now
};

}  // namespace net
}  // namespace core
}  // namespace accl
