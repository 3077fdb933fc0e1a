// The shared-memory link alone, two ranks as two threads of one process and
// a sink that records what arrives: frames intact and in order through many
// wrap-arounds of a ring (messages larger than the ring included), with and
// without single copy (process_vm_readv of the sender's buffer), frames a
// broken writer publishes refused with a protocol error that fails only that
// peer, the doorbell that wakes a sleeping reader, and withdrawal.
#include <gtest/gtest.h>

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "accl/process_group.h"
#include "accl/store.h"
#include "transport/copy.h"
#include "transport/net/shm/shm_link.h"
#include "transport/wire.h"

using namespace accl;
using namespace accl::core;
using namespace accl::core::net;

namespace {

struct Into : Landing {
  explicit Into(size_t n) : bytes(n) { base = bytes.data(); }
  std::vector<char> bytes;
};

// Reassembles messages by key; records failures.
struct Sink : FrameSink {
  std::map<uint64_t, std::shared_ptr<Into>> open;
  std::vector<std::pair<uint64_t, std::vector<char>>> done;  // (key, message) in completion order
  std::vector<std::string> failed;
  size_t sent = 0;
  std::map<uint64_t, size_t> got;
  bool posted = true;  // readNow(): whether a receive waits for each message
  size_t asked = 0;    // how often the link asked
  Clock::time_point firstAsk{}, firstHeader{};  // since the test last cleared them
  bool readNow(int, const FrameHeader&) override {
    if (!asked++ || firstAsk == Clock::time_point{}) firstAsk = Clock::now();
    return posted;
  }
  LandingPtr onHeader(int, const FrameHeader& h) override {
    if (firstHeader == Clock::time_point{}) firstHeader = Clock::now();
    auto& l = open[h.key];
    if (!l) l = std::make_shared<Into>(h.total);
    return l;
  }
  void onFrame(int, const FrameHeader& h, const LandingPtr&) override {
    if ((got[h.key] += h.len) == h.total) {
      done.push_back({h.key, open[h.key]->bytes});
      open.erase(h.key);
      got.erase(h.key);
    }
  }
  void onSent(const OutPtr& m) override {
    ++sent;
    m->frameSent();
  }
  void onPeerFailed(FrameLink*, int peer, const std::string& why) override {
    failed.push_back("rank " + std::to_string(peer) + ": " + why);
  }
};

struct PairOfLinks {
  Sink sink[2];
  std::unique_ptr<ShmLink> link[2];
  std::string why[2];
  explicit PairOfLinks(bool cma = true, long long stream = -1, bool tryWays = false) {
    auto store = std::make_shared<HashStore>();
    // Names the segments: unique across test processes that run at once.
    static uint64_t token = static_cast<uint64_t>(getpid()) << 32;
    ++token;
    auto make = [&](int r) {
      ShmLink::Options o;
      o.rank = r;
      o.size = 2;
      o.local = {r == 1, r == 0};
      o.token = token;
      o.store = store;
      o.deadline = Clock::now() + std::chrono::seconds(20);
      o.where = "shm test rank " + std::to_string(r);
      o.cma = cma;
      o.stream = stream;
      link[r] = ShmLink::connect(o, &sink[r], &why[r]);
      if (link[r]) link[r]->setTryWriteWays(tryWays);
    };
    std::thread t([&] { make(1); });
    make(0);
    t.join();
  }
  // Runs both links until `until` holds (or 20000 rounds).
  template <typename F>
  bool pump(F until) {
    for (int i = 0; i < 20000; ++i) {
      if (until()) return true;
      link[0]->poll();
      link[1]->poll();
    }
    return until();
  }
};

OpDesc desc() {
  OpDesc d{};
  d.op = static_cast<uint16_t>(OpType::Send);
  return d;
}

}  // namespace

class ShmLinkCopies : public ::testing::TestWithParam<bool> {};

static void framesArriveIntact(bool cma, size_t one, long long stream = -1, bool tryWays = false);

// At both single-copy thresholds (ranks with a CPU each, ranks sharing CPUs).
TEST_P(ShmLinkCopies, FramesArriveIntactAndInOrderThroughManyWrapArounds) {
  for (size_t one : {ShmLink::kSingleCopyMinOwnCpus, ShmLink::kSingleCopyMinSharedCpus}) {
    SCOPED_TRACE("single copy from " + std::to_string(one) + " bytes");
    framesArriveIntact(GetParam(), one);
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  }
}

static void framesArriveIntact(bool cma, size_t one, long long stream, bool tryWays) {
  PairOfLinks p(cma, stream, tryWays);
  ASSERT_TRUE(p.link[0] && p.link[1]) << p.why[0] << " / " << p.why[1];
  EXPECT_TRUE(p.link[0]->serves(1) && p.link[1]->serves(0));
  if (!cma) {
    EXPECT_FALSE(p.link[0]->singleCopyTo(1));
  }
  bool single = p.link[0]->singleCopyTo(1);
  if (cma && !single) GTEST_SKIP() << "process_vm_readv is not allowed here: the copy path only";
  p.link[0]->setSingleCopyMin(one);
  ASSERT_EQ(p.link[0]->singleCopyMin(), one);
  const size_t ring = p.link[0]->ringBytes();
  ASSERT_GT(ring / 4, one) << "the test needs single-copy sizes that fit one frame of the ring";
  // Sizes around the frame size and beyond the ring: empty, odd, several frames.
  std::vector<size_t> sizes = {0,         1,       63,      64,  65,  ring / 4 - 64, ring / 4, ring / 4 + 1, ring,
                               3 * ring + 17, 4096, one - 1, one, one + 1, 9 * ring + 3};
  std::vector<std::vector<char>> msgs;
  for (size_t i = 0; i < 90; ++i) {
    std::vector<char> m(sizes[i % sizes.size()]);
    for (size_t j = 0; j < m.size(); ++j) m[j] = static_cast<char>(i * 31 + j * 7);
    msgs.push_back(std::move(m));
  }
  std::vector<OutPtr> outs;
  for (size_t i = 0; i < msgs.size(); ++i) {
    outs.push_back(std::make_shared<OutMessage>());
    p.link[0]->send(1, FrameType::Tagged, i, desc(), msgs[i].data(), msgs[i].size(), outs.back(),
                    FrameLink::Route::Ordered);
  }
  // A single-copy send is done when the reader acknowledges it.
  auto allSent = [&] {
    for (auto& o : outs)
      if (o->framesLeft) return false;
    return true;
  };
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == msgs.size() && allSent(); }))
      << p.sink[1].done.size() << " of " << msgs.size() << " messages arrived";
  for (size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_EQ(p.sink[1].done[i].first, i) << "out of order";
    EXPECT_TRUE(p.sink[1].done[i].second == msgs[i]) << "message " << i << " of " << msgs[i].size() << " bytes differs";
  }
  for (auto& o : outs) EXPECT_EQ(o->framesLeft, 0u);
  EXPECT_TRUE(p.sink[0].failed.empty() && p.sink[1].failed.empty());
  // Single copy: one frame (the descriptor) per large message, so far fewer
  // onSent calls than frames of the copy path.
  size_t frames = 0;
  for (auto& m : msgs)
    frames += single && m.size() >= one ? 1 : m.empty() ? 1 : (m.size() + ring / 4 - 1) / (ring / 4);
  EXPECT_EQ(p.sink[0].sent, frames);
  if (!single) return;
  // The threshold itself: a message just below it goes into the ring and is
  // sent at once, before the reader looks; one of `one` bytes waits for the
  // reader to copy it from this process and acknowledge it.
  std::vector<char> below(one - 1, 'b'), at(one, 'a');
  auto mBelow = std::make_shared<OutMessage>(), mAt = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 1000, desc(), below.data(), below.size(), mBelow, FrameLink::Route::Ordered);
  EXPECT_EQ(mBelow->framesLeft, 0u) << "a message of " << below.size() << " bytes was not written into the ring";
  p.link[0]->send(1, FrameType::Tagged, 1001, desc(), at.data(), at.size(), mAt, FrameLink::Route::Ordered);
  EXPECT_EQ(mAt->framesLeft, 1u) << "a message of " << at.size() << " bytes did not wait for its reader";
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == msgs.size() + 2 && mAt->framesLeft == 0; }));
  EXPECT_TRUE(p.sink[1].done[msgs.size()].second == below);
  EXPECT_TRUE(p.sink[1].done[msgs.size() + 1].second == at);
}

// Payloads written into the ring and copied out of it with non-temporal
// stores (copy.h), as ACCL_SHM_STREAM_BYTES=1 sets (the writes from 16 KiB);
// and both ways in turn, as under auto with a CPU per rank (the way not
// taken is tried every 100 ms, so a few payloads take it here).
TEST(ShmLink, FramesWrittenAndCopiedOutWithNonTemporalStoresArriveIntact) {
  size_t before = internal::streamingMin();
  internal::setStreamingMin(1);
  framesArriveIntact(false, ShmLink::kSingleCopyMinOwnCpus, 1);
  internal::setStreamingMin(before);
  if (::testing::Test::HasFatalFailure()) return;
  framesArriveIntact(false, ShmLink::kSingleCopyMinOwnCpus, -1, true);
}

INSTANTIATE_TEST_SUITE_P(ShmLink, ShmLinkCopies, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "single_copy" : "through_the_ring"; });

// A single-copy message that no receive wants yet stays in its sender's
// memory (the frames behind it wait too), until a receive is posted or its
// time (deferNs) is up; then it is read, and its send completes.
TEST(ShmLink, ASingleCopyMessageWithoutAReceiveWaitsInItsSendersMemoryForABoundedTime) {
  PairOfLinks p;
  ASSERT_TRUE(p.link[0] && p.link[1]) << p.why[0] << " / " << p.why[1];
  if (!p.link[0]->singleCopyTo(1)) GTEST_SKIP() << "process_vm_readv is not allowed here";
  EXPECT_EQ(holdForReceiveNs(size_t(4) << 20), 2000000);  // its size at 2 GB/s, at most 2 ms
  EXPECT_EQ(holdForReceiveNs(size_t(16) << 10), 20000);    // and at least 20 us
  const size_t big = size_t(256) << 10;
  std::vector<char> a(big, 'a'), b(100, 'b');
  Sink& in = p.sink[1];
  // A receive posted while it waits: the first look leaves it (and the
  // frame behind it) unread, the send open; the post reads both, in order.
  in.posted = false;
  auto ma = std::make_shared<OutMessage>(), mb = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 1, desc(), a.data(), a.size(), ma, FrameLink::Route::Ordered);
  p.link[0]->send(1, FrameType::Tagged, 2, desc(), b.data(), b.size(), mb, FrameLink::Route::Ordered);
  EXPECT_FALSE(p.link[1]->poll());
  EXPECT_EQ(in.asked, 1u);
  EXPECT_TRUE(in.done.empty()) << "a message no receive wanted was read at once";
  EXPECT_EQ(ma->framesLeft, 1u);
  EXPECT_GT(p.link[1]->deferredUntil(), 0);
  EXPECT_TRUE(p.link[1]->deferring());
  in.posted = true;
  EXPECT_TRUE(p.link[1]->readDeferred());
  ASSERT_EQ(in.done.size(), 2u);
  EXPECT_EQ(in.done[0].first, 1u);
  EXPECT_TRUE(in.done[0].second == a);
  EXPECT_EQ(in.done[1].first, 2u);
  EXPECT_FALSE(p.link[1]->deferring());
  EXPECT_EQ(p.link[1]->deferredUntil(), 0);
  ASSERT_TRUE(p.pump([&] { return ma->framesLeft == 0; })) << "the send was never acknowledged";
  // No receive ever: read once its time is up (counted from the first
  // look), not before.
  in.posted = false;
  in.firstAsk = in.firstHeader = Clock::time_point{};
  auto mc = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 3, desc(), a.data(), a.size(), mc, FrameLink::Route::Ordered);
  auto until = Clock::now() + std::chrono::seconds(10);
  while (in.done.size() < 3 && Clock::now() < until) p.link[1]->poll();
  ASSERT_EQ(in.done.size(), 3u);
  EXPECT_GE(in.firstHeader - in.firstAsk, std::chrono::nanoseconds(holdForReceiveNs(big)))
      << "read before its time was up";
  EXPECT_TRUE(in.done[2].second == a);
  ASSERT_TRUE(p.pump([&] { return mc->framesLeft == 0; })) << "the send was never acknowledged";
  // Below the link's deferral size (ranks with a CPU each: 64 KiB), read at once.
  p.link[1]->setDeferMin(ShmLink::kDeferMinOwnCpus);
  std::vector<char> small(ShmLink::kDeferMinOwnCpus - 64, 's');
  auto ms = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 4, desc(), small.data(), small.size(), ms, FrameLink::Route::Ordered);
  ASSERT_EQ(ms->framesLeft, 1u) << "not sent by single copy";
  EXPECT_TRUE(p.link[1]->poll());
  ASSERT_EQ(in.done.size(), 4u) << "a message below the deferral size waited";
  EXPECT_TRUE(in.done[3].second == small);
  EXPECT_TRUE(p.sink[0].failed.empty() && in.failed.empty());
}

TEST(ShmLink, AMalformedFrameFailsItsWriterWithAProtocolErrorAndNothingElse) {
  PairOfLinks p;
  ASSERT_TRUE(p.link[0] && p.link[1]);
  // A frame with a bad magic number, then one that claims more than was published.
  FrameHeader h{};
  p.link[0]->writeRawForTest(1, &h, sizeof(h));
  ASSERT_TRUE(p.pump([&] { return !p.sink[1].failed.empty(); }));
  EXPECT_NE(p.sink[1].failed[0].find("rank 0: protocol error: bad magic number"), std::string::npos)
      << p.sink[1].failed[0];
  EXPECT_TRUE(p.sink[1].done.empty());

  PairOfLinks q;
  ASSERT_TRUE(q.link[0] && q.link[1]);
  FrameHeader big{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Tagged), 0, 1, 0, 4096, 4096, desc()};
  q.link[0]->writeRawForTest(1, &big, sizeof(big));  // header only: its 4096 bytes never published
  ASSERT_TRUE(q.pump([&] { return !q.sink[1].failed.empty(); }));
  EXPECT_NE(q.sink[1].failed[0].find("beyond what the ring published"), std::string::npos) << q.sink[1].failed[0];
  // The reader stays usable the other way: rank 1 still sends to rank 0.
  char m[100];
  std::memset(m, 5, sizeof(m));
  q.link[1]->send(0, FrameType::Tagged, 9, desc(), m, sizeof(m), std::make_shared<OutMessage>(), FrameLink::Route::Ordered);
  ASSERT_TRUE(q.pump([&] { return q.sink[0].done.size() == 1; }));
  EXPECT_EQ(q.sink[0].done[0].second, std::vector<char>(m, m + sizeof(m)));
}

TEST(ShmLink, ASleepingReaderIsWokenByItsDoorbellAndAFullRingWakesItsWriter) {
  PairOfLinks p(false);  // a message larger than the ring goes through it
  ASSERT_TRUE(p.link[0] && p.link[1]);
  auto readable = [](int fd, int ms) {
    pollfd f{fd, POLLIN, 0};
    return ::poll(&f, 1, ms) == 1;
  };
  p.link[1]->poll();
  EXPECT_FALSE(p.link[1]->arm()) << "nothing to read: the reader may sleep";
  p.link[1]->onEvents(EPOLLIN);  // drains doorbells rung before
  EXPECT_FALSE(readable(p.link[1]->doorbellFd(), 0));
  char small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  p.link[0]->send(1, FrameType::Tagged, 1, desc(), small, sizeof(small), nullptr, FrameLink::Route::Ordered);
  EXPECT_TRUE(readable(p.link[1]->doorbellFd(), 1000)) << "the writer did not ring the sleeping reader";
  p.link[1]->onEvents(EPOLLIN);
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == 1; }));

  // More than the ring holds, with the reader not reading: the writer queues
  // the rest; when the reader frees space it rings the writer.
  std::vector<char> big(3 * p.link[0]->ringBytes());
  auto m = std::make_shared<OutMessage>();
  p.link[0]->onEvents(EPOLLIN);
  p.link[0]->send(1, FrameType::Tagged, 2, desc(), big.data(), big.size(), m, FrameLink::Route::Ordered);
  EXPECT_GT(m->framesLeft, 0u) << "the whole message fit: the test needs it larger than the ring";
  EXPECT_FALSE(readable(p.link[0]->doorbellFd(), 0));
  p.link[1]->poll();  // reads what fits, frees the ring
  EXPECT_TRUE(readable(p.link[0]->doorbellFd(), 1000)) << "the reader did not ring the waiting writer";
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == 2; }));
  EXPECT_EQ(m->framesLeft, 0u);
}

TEST(ShmLink, WithdrawTellsWhetherAnyFrameWasWritten) {
  PairOfLinks p(false);
  ASSERT_TRUE(p.link[0] && p.link[1]);
  std::vector<char> big(3 * p.link[0]->ringBytes());
  auto a = std::make_shared<OutMessage>(), b = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 1, desc(), big.data(), big.size(), a, FrameLink::Route::Ordered);
  p.link[0]->send(1, FrameType::Tagged, 2, desc(), big.data(), big.size(), b, FrameLink::Route::Ordered);
  EXPECT_FALSE(p.link[0]->withdraw(a)) << "part of a was written: the receiver must discard the rest";
  EXPECT_TRUE(p.link[0]->withdraw(b)) << "nothing of b was written";
  EXPECT_TRUE(p.link[0]->withdraw(std::make_shared<OutMessage>())) << "a message this link never had";
}

// The reader knows which CPU its peer last wrote from (a waiter on that CPU
// yields instead of spinning, NetTransport::progressForWaiter): none before
// the first frame, then the writing thread's CPU, following it when it moves.
TEST(ShmLink, TheReaderKnowsTheCpuItsPeerLastWroteFrom) {
  PairOfLinks p(false);
  ASSERT_TRUE(p.link[0] && p.link[1]);
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  for (int c : cpus) EXPECT_FALSE(p.link[1]->writerOnCpu(c)) << "nothing written yet, CPU " << c;
  char byte = 7;
  for (int round = 0; round < 4; ++round) {
    int cpu = cpus[round % cpus.size()];
    std::thread w([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
      auto m = std::make_shared<OutMessage>();
      p.link[0]->send(1, FrameType::Tagged, round, desc(), &byte, 1, m, FrameLink::Route::Ordered);
    });
    w.join();
    EXPECT_TRUE(p.link[1]->writerOnCpu(cpu)) << "round " << round;
    for (int c : cpus) {
      if (c == cpu) continue;
      EXPECT_FALSE(p.link[1]->writerOnCpu(c)) << "round " << round << ", CPU " << c;
    }
    EXPECT_FALSE(p.link[0]->writerOnCpu(cpu)) << "rank 1 wrote nothing";
    ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == static_cast<size_t>(round + 1); }));
  }
}

// A single-copy message withdrawn before the reader took it is never read
// (the reader skips it, no failure); one the reader took is acknowledged
// without fault after its withdrawal; the link goes on.
TEST(ShmLink, AWithdrawnSingleCopyMessageIsNeverRead) {
  PairOfLinks p;
  ASSERT_TRUE(p.link[0] && p.link[1]);
  if (!p.link[0]->singleCopyTo(1)) GTEST_SKIP() << "process_vm_readv is not allowed here";
  std::vector<char> a(p.link[0]->singleCopyMin() * 4, 'a'), b(a.size(), 'b'), c(a.size(), 'c');
  auto ma = std::make_shared<OutMessage>(), mb = std::make_shared<OutMessage>(), mc = std::make_shared<OutMessage>();
  p.link[0]->send(1, FrameType::Tagged, 1, desc(), a.data(), a.size(), ma, FrameLink::Route::Ordered);
  p.link[0]->send(1, FrameType::Tagged, 2, desc(), b.data(), b.size(), mb, FrameLink::Route::Ordered);
  EXPECT_TRUE(p.link[0]->withdraw(ma)) << "a was not read yet";
  std::fill(a.begin(), a.end(), 'X');  // the buffer is the caller's again
  p.link[1]->poll();                   // skips a, reads b, acknowledges b
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == 1; }));
  EXPECT_EQ(p.sink[1].done[0].first, 2u);
  EXPECT_TRUE(p.sink[1].done[0].second == std::vector<char>(b.size(), 'b'));
  EXPECT_FALSE(p.link[0]->withdraw(mb)) << "b was read";
  p.link[0]->send(1, FrameType::Tagged, 3, desc(), c.data(), c.size(), mc, FrameLink::Route::Ordered);
  ASSERT_TRUE(p.pump([&] { return p.sink[1].done.size() == 2 && mc->framesLeft == 0; }));
  EXPECT_EQ(p.sink[1].done[1].first, 3u);
  EXPECT_TRUE(p.sink[1].done[1].second == c);
  EXPECT_EQ(ma->framesLeft, 1u) << "a withdrawn message is not reported sent";
  EXPECT_TRUE(p.sink[0].failed.empty() && p.sink[1].failed.empty())
      << (p.sink[0].failed.empty() ? p.sink[1].failed[0] : p.sink[0].failed[0]);
}

// Descriptors a broken writer publishes: a bad address, a sequence number
// its sender does not hold, unknown flags, and a descriptor to a reader that
// never agreed to single copy: each fails that writer with a protocol error.
TEST(ShmLink, AMalformedSingleCopyDescriptorFailsItsWriter) {
  struct Case {
    bool cma;
    uint8_t flags;
    uint64_t addr, seq;
    const char* want;
  };
  std::vector<char> real(ShmLink::kSingleCopyMinSharedCpus, 7);
  const Case cases[] = {
      {true, 1, 0, 0, "process_vm_readv"},  // the sender's buffer is unmapped
      {true, 1, reinterpret_cast<uint64_t>(real.data()), 5, "does not hold"},  // no posted slot
      {true, 0x40, 0, 0, "unknown frame flags"},
      {false, 1, reinterpret_cast<uint64_t>(real.data()), 0, "cannot read"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    PairOfLinks p(c.cma);
    ASSERT_TRUE(p.link[0] && p.link[1]);
    if (c.cma && !p.link[0]->singleCopyTo(1)) GTEST_SKIP() << "process_vm_readv is not allowed here";
    struct {
      FrameHeader h;
      uint64_t addr, seq;
      char pad[48];
    } f{};
    f.h = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Tagged), c.flags, 1, 0,
                      real.size(), real.size(), desc()};
    f.addr = c.addr;
    f.seq = c.seq;
    if (c.want == std::string("process_vm_readv")) {
      // A real descriptor whose buffer is unmapped before the reader reads it.
      size_t n = p.link[0]->singleCopyMin();
      void* gone = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(gone, MAP_FAILED);
      p.link[0]->send(1, FrameType::Tagged, 9, desc(), static_cast<char*>(gone), n, std::make_shared<OutMessage>(),
                      FrameLink::Route::Ordered);
      munmap(gone, n);
    } else {
      p.link[0]->writeRawForTest(1, &f, sizeof(f));
    }
    ASSERT_TRUE(p.pump([&] { return !p.sink[1].failed.empty(); }));
    EXPECT_NE(p.sink[1].failed[0].find(c.want), std::string::npos) << p.sink[1].failed[0];
    EXPECT_TRUE(p.sink[1].done.empty());
  }
}
