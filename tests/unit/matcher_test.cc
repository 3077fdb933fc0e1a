// The network transport's matcher, driven through the FrameLink seam by a
// fake link: frames sent by one side are held on a fake wire and delivered
// to the receiving side in the order and cuts a test chooses (reversed
// chunks, as several streams give; a frame read in two parts, as a socket
// gives), with the same landing rules as the real links.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "transport/net/frame_link.h"
#include "transport/net/matcher.h"

using namespace accl::core;
using namespace accl::core::net;

namespace {

// A link with no wire: send() cuts a message in frames of `chunk` bytes and
// keeps copies of them until the test delivers them.
class FakeLink : public FrameLink {
 public:
  struct Frame {
    int from = 0;
    FrameHeader h{};
    std::vector<char> payload;
  };
  explicit FakeLink(int self, size_t chunk) : self_(self), chunk_(chunk) {}
  const char* name() const override { return "fake"; }
  bool serves(int) const override { return true; }
  void send(int, FrameType type, uint64_t key, const OpDesc& desc, const char* buf, size_t len, const OutPtr& m,
            Route) override {
    size_t frames = len == 0 ? 1 : (len + chunk_ - 1) / chunk_;
    if (m) m->framesLeft = frames;
    for (size_t i = 0; i < frames; ++i) {
      size_t off = i * chunk_, n = std::min(chunk_, len - std::min(len, off));
      Frame f;
      f.from = self_;
      f.h = FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(type), 0, key, off, n, len, desc};
      f.payload.assign(buf + off, buf + off + n);
      wire.push_back(std::move(f));
      if (m) m->frameSent();
    }
  }
  bool withdraw(const OutPtr&) override { return true; }
  void dropPeer(int) override {}
  std::deque<Frame> wire;

 private:
  int self_;
  size_t chunk_;
};

// The receiving side, wired to a matcher as NetTransport wires it.
struct Receiver : FrameSink {
  Matcher m;
  LandingPtr onHeader(int peer, const FrameHeader& h) override {
    return m.arrive(peer, h.type == static_cast<uint8_t>(FrameType::Tagged) ? Space::Tagged : Space::Op, h);
  }
  void onFrame(int, const FrameHeader& h, const LandingPtr& l) override {
    if (l) m.landed(h, static_cast<Inbound&>(*l));
  }
  void onSent(const OutPtr& o) override { o->frameSent(); }
  void onPeerFailed(FrameLink*, int, const std::string&) override {}

  // Delivers a frame; its payload lands in two reads cut at `cut`, with
  // `between` run in the middle (a socket reads the landing before each read).
  void deliver(const FakeLink::Frame& f, size_t cut = 0, const std::function<void()>& between = {}) {
    LandingPtr l = onHeader(f.from, f.h);
    size_t first = std::min(cut ? cut : f.payload.size(), f.payload.size());
    if (l && l->base && first) std::memcpy(l->base + f.h.offset, f.payload.data(), first);
    if (between) between();
    size_t rest = f.payload.size() - first;
    if (l && l->base && rest) std::memcpy(l->base + f.h.offset + first, f.payload.data() + first, rest);
    onFrame(f.from, f.h, l);
  }
};

std::vector<char> randomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (auto& c : v) c = static_cast<char>(rng());
  return v;
}

OpDesc op(uint64_t seq, uint64_t count) {
  OpDesc d;
  d.seq = seq;
  d.count = count;
  d.op = 1;
  d.dtype = 0;
  return d;
}

RequestPtr opRecv(int peer, uint64_t seq, uint32_t step, std::vector<char>& buf) {
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->space = Space::Op;
  r->key = (seq << 32) | step;
  r->buf = buf.data();
  r->len = buf.size();
  return r;
}

RequestPtr tagRecv(int peer, int tag, std::vector<char>& buf) {
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->space = Space::Tagged;
  r->key = static_cast<uint64_t>(static_cast<int64_t>(tag));
  r->buf = buf.data();
  r->len = buf.size();
  return r;
}

void sendOp(FakeLink& link, uint64_t seq, uint32_t step, const std::vector<char>& data) {
  link.send(0, FrameType::Data, (seq << 32) | step, op(seq, data.size()), data.data(), data.size(), nullptr,
            FrameLink::Route::Spread);
}

void sendTag(FakeLink& link, int tag, const std::vector<char>& data) {
  link.send(0, FrameType::Tagged, static_cast<uint64_t>(static_cast<int64_t>(tag)), OpDesc{}, data.data(),
            data.size(), nullptr, FrameLink::Route::Ordered);
}

}  // namespace

TEST(Matcher, ChunksInAnyOrderLandInThePostedReceive) {
  FakeLink link(1, 1000);
  Receiver rx;
  auto src = randomBytes(10500, 1);
  std::vector<char> dst(src.size(), 0);
  auto r = opRecv(1, 7, 3, dst);
  rx.m.post(r);
  sendOp(link, 7, 3, src);
  ASSERT_EQ(link.wire.size(), 11u);
  std::reverse(link.wire.begin(), link.wire.end());
  for (size_t i = 0; i < link.wire.size(); ++i) {
    EXPECT_FALSE(r->done) << "done before its last frame (frame " << i << ")";
    rx.deliver(link.wire[i]);
  }
  EXPECT_TRUE(r->done);
  EXPECT_EQ(r->failure, Failure::None);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rx.m.postedCount(), 0u);
  EXPECT_EQ(rx.m.heldCount(), 0u);
}

TEST(Matcher, AMessageThatArrivesFirstIsHeldAndCopiedWhenPosted) {
  FakeLink link(2, 4096);
  Receiver rx;
  auto src = randomBytes(9000, 2);
  sendOp(link, 1, 0, src);
  for (auto& f : link.wire) rx.deliver(f);
  EXPECT_EQ(rx.m.heldCount(), 1u);
  std::vector<char> dst(src.size(), 0);
  auto r = opRecv(2, 1, 0, dst);
  rx.m.post(r);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rx.m.heldCount(), 0u);
}

TEST(Matcher, AReceivePostedWhileItsMessageArrivesCompletesWithTheLastFrame) {
  FakeLink link(1, 1024);
  Receiver rx;
  auto src = randomBytes(8 * 1024, 3);
  sendOp(link, 2, 5, src);
  for (size_t i = 0; i < 4; ++i) rx.deliver(link.wire[i]);
  std::vector<char> dst(src.size(), 0);
  auto r = opRecv(1, 2, 5, dst);
  rx.m.post(r);
  EXPECT_FALSE(r->done);
  for (size_t i = 4; i < link.wire.size(); ++i) rx.deliver(link.wire[i]);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rx.m.heldCount(), 0u);
}

// Posted while its message arrives, out of order and in the middle of a
// frame's reads: what came before is copied once, and every later byte lands
// straight in the receive's buffer (the held copy is not used again).
TEST(Matcher, AReceivePostedMidMessageTakesTheRestStraightIntoItsBuffer) {
  FakeLink link(1, 1000);
  Receiver rx;
  auto src = randomBytes(10 * 1000 + 321, 4);
  sendOp(link, 3, 1, src);
  std::reverse(link.wire.begin(), link.wire.end());  // as several streams give
  rx.deliver(link.wire[0]);
  rx.deliver(link.wire[1]);
  std::vector<char> dst(src.size(), 0);
  auto r = opRecv(1, 3, 1, dst);
  // The third frame: its first 300 bytes are read into the held copy, the
  // receive is posted, then the rest of the frame is read.
  rx.deliver(link.wire[2], 300, [&] {
    rx.m.post(r);
    EXPECT_FALSE(r->done);
    EXPECT_EQ(rx.m.heldCount(), 0u);
  });
  for (size_t i = 3; i < link.wire.size(); ++i) {
    const auto& f = link.wire[i];
    LandingPtr l = rx.onHeader(f.from, f.h);
    ASSERT_TRUE(l);
    EXPECT_EQ(l->base, dst.data()) << "frame " << i << " does not land in the receive's buffer";
    std::memcpy(l->base + f.h.offset, f.payload.data(), f.payload.size());
    EXPECT_FALSE(r->done);
    rx.onFrame(f.from, f.h, l);
  }
  EXPECT_TRUE(r->done);
  EXPECT_EQ(r->failure, Failure::None);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rx.m.heldCount(), 0u);
  EXPECT_EQ(rx.m.postedCount(), 0u);
}

// Big held messages reuse the buffers of earlier ones (a larger one for a
// smaller message, several at once, one taken mid-message): every receive
// gets its own message's bytes.
TEST(Matcher, HeldMessagesThatReuseEarlierBuffersKeepTheirBytes) {
  FakeLink link(1, 64 << 10);
  Receiver rx;
  const size_t sizes[] = {1 << 20, 700 << 10, 1 << 20, 300 << 10, 2 << 20, 1 << 20};
  for (unsigned round = 0; round < 2; ++round) {
    std::vector<std::vector<char>> src, dst;
    for (unsigned i = 0; i < 6; ++i) {
      src.push_back(randomBytes(sizes[i], 10 * round + i));
      dst.emplace_back(sizes[i], 0);
      sendOp(link, 20 + round, i, src.back());
    }
    // Messages 0-4 arrive whole before their receives; message 5 half.
    size_t halfOf5 = link.wire.size() - (sizes[5] / (64 << 10)) / 2;
    for (size_t i = 0; i < halfOf5; ++i) rx.deliver(link.wire[i]);
    std::vector<RequestPtr> rs;
    for (unsigned i = 0; i < 6; ++i) {
      rs.push_back(opRecv(1, 20 + round, i, dst[i]));
      rx.m.post(rs.back());
    }
    for (size_t i = halfOf5; i < link.wire.size(); ++i) rx.deliver(link.wire[i]);
    link.wire.clear();
    for (unsigned i = 0; i < 6; ++i) {
      EXPECT_TRUE(rs[i]->done) << "round " << round << ", message " << i;
      EXPECT_EQ(dst[i], src[i]) << "round " << round << ", message " << i;
    }
    EXPECT_EQ(rx.m.heldCount(), 0u);
  }
}

TEST(Matcher, OpStepsMatchOnlyTheirPeerAndKey) {
  FakeLink from1(1, 64), from2(2, 64);
  Receiver rx;
  auto a = randomBytes(100, 4), b = randomBytes(100, 5);
  std::vector<char> d1(100), d2(100);
  auto r1 = opRecv(1, 3, 0, d1), r2 = opRecv(2, 3, 0, d2);
  rx.m.post(r1);
  rx.m.post(r2);
  sendOp(from2, 3, 0, b);
  sendOp(from1, 3, 1, a);  // another step: held
  for (auto& f : from2.wire) rx.deliver(f);
  for (auto& f : from1.wire) rx.deliver(f);
  EXPECT_TRUE(r2->done);
  EXPECT_EQ(d2, b);
  EXPECT_FALSE(r1->done);
  EXPECT_EQ(rx.m.heldCount(), 1u);
}

TEST(Matcher, TaggedReceivesMatchInPostingOrderAndAnySourceTakesTheFirstArrival) {
  FakeLink from1(1, 1 << 20), from2(2, 1 << 20);
  Receiver rx;
  auto a = randomBytes(32, 6), b = randomBytes(32, 7), c = randomBytes(32, 8);
  std::vector<char> anyBuf(32), twoBuf(32), oneBuf(32);
  auto any = tagRecv(-1, 5, anyBuf), two = tagRecv(2, 5, twoBuf);
  rx.m.post(any);
  rx.m.post(two);
  sendTag(from2, 5, a);
  rx.deliver(from2.wire.back());
  EXPECT_TRUE(any->done);
  EXPECT_EQ(any->source, 2);
  EXPECT_EQ(anyBuf, a);
  EXPECT_FALSE(two->done);
  sendTag(from1, 5, b);  // rank 1's message: the open receive wants rank 2, so it is held
  rx.deliver(from1.wire.back());
  EXPECT_FALSE(two->done);
  EXPECT_EQ(rx.m.heldCount(), 1u);
  sendTag(from2, 5, c);
  rx.deliver(from2.wire.back());
  EXPECT_TRUE(two->done);
  EXPECT_EQ(twoBuf, c);
  auto one = tagRecv(1, 5, oneBuf);
  rx.m.post(one);
  EXPECT_TRUE(one->done);
  EXPECT_EQ(one->source, 1);
  EXPECT_EQ(oneBuf, b);
}

// What the shared-memory link asks before it reads a single-copy message
// (NetTransport::readNow): whether a posted receive would take a new
// message, and whether messages from that rank are held already.
TEST(Matcher, TellsWhetherAReceiveWaitsForANewMessageAndWhetherARanksMessagesAreHeld) {
  FakeLink from1(1, 1 << 20), from2(2, 1 << 20);
  Receiver rx;
  std::vector<char> anyBuf(32), oneBuf(32), opBuf(32);
  EXPECT_FALSE(rx.m.hasPosted(1, Space::Tagged, 5));
  rx.m.post(tagRecv(1, 5, oneBuf));
  EXPECT_TRUE(rx.m.hasPosted(1, Space::Tagged, 5));
  EXPECT_FALSE(rx.m.hasPosted(1, Space::Tagged, 6)) << "another tag";
  EXPECT_FALSE(rx.m.hasPosted(2, Space::Tagged, 5)) << "another rank";
  EXPECT_FALSE(rx.m.hasPosted(1, Space::Op, 5)) << "an op's step is not a tagged message";
  rx.m.post(tagRecv(-1, 6, anyBuf));
  EXPECT_TRUE(rx.m.hasPosted(2, Space::Tagged, 6)) << "a receive from any rank";
  rx.m.post(opRecv(2, 3, 0, opBuf));
  EXPECT_TRUE(rx.m.hasPosted(2, Space::Op, (uint64_t(3) << 32) | 0));
  EXPECT_FALSE(rx.m.holds(2, Space::Tagged));
  sendTag(from2, 9, randomBytes(32, 9));  // no receive for tag 9: held
  rx.deliver(from2.wire.back());
  EXPECT_TRUE(rx.m.holds(2, Space::Tagged));
  EXPECT_FALSE(rx.m.holds(1, Space::Tagged));
  EXPECT_FALSE(rx.m.holds(2, Space::Op));
  std::vector<char> nineBuf(32);
  rx.m.post(tagRecv(2, 9, nineBuf));  // takes it
  EXPECT_FALSE(rx.m.holds(2, Space::Tagged));
}

TEST(Matcher, TaggedMessagesInSeveralFramesKeepTheirOrder) {
  FakeLink link(1, 100);
  Receiver rx;
  auto first = randomBytes(250, 9), second = randomBytes(250, 10);
  sendTag(link, 9, first);
  sendTag(link, 9, second);
  std::vector<char> b1(250), b2(250);
  auto r1 = tagRecv(1, 9, b1);
  rx.m.post(r1);
  for (auto& f : link.wire) rx.deliver(f);  // in order, as one channel carries them
  auto r2 = tagRecv(1, 9, b2);
  rx.m.post(r2);
  EXPECT_TRUE(r1->done && r2->done);
  EXPECT_EQ(b1, first);
  EXPECT_EQ(b2, second);
}

TEST(Matcher, AContinuationFrameWithoutItsMessageIsAProtocolError) {
  FakeLink link(1, 100);
  Receiver rx;
  sendTag(link, 1, randomBytes(300, 11));
  EXPECT_THROW(rx.deliver(link.wire[1]), ProtocolError);
}

TEST(Matcher, AFrameThatContradictsItsMessageLengthIsAProtocolError) {
  FakeLink link(1, 100);
  Receiver rx;
  sendOp(link, 1, 0, randomBytes(300, 12));
  rx.deliver(link.wire[0]);
  FakeLink::Frame bad = link.wire[1];
  bad.h.total = 5000;
  EXPECT_THROW(rx.deliver(bad), ProtocolError);
}

TEST(Matcher, ASizeMismatchFailsTheReceiveAndNothingIsWritten) {
  for (bool postFirst : {true, false}) {
    SCOPED_TRACE(postFirst ? "posted first" : "held first");
    FakeLink link(1, 100);
    Receiver rx;
    std::vector<char> dst(100, 'x');
    auto r = opRecv(1, 4, 2, dst);
    if (postFirst) rx.m.post(r);
    sendOp(link, 4, 2, randomBytes(300, 13));
    for (auto& f : link.wire) rx.deliver(f);
    if (!postFirst) rx.m.post(r);
    EXPECT_TRUE(r->done);
    EXPECT_EQ(r->failure, Failure::Mismatch);
    EXPECT_NE(r->error.find("rank 1 sends 300 bytes for step 2"), std::string::npos) << r->error;
    EXPECT_NE(r->error.find("this rank expects 100"), std::string::npos) << r->error;
    EXPECT_EQ(dst, std::vector<char>(100, 'x'));
  }
}

TEST(Matcher, AWithdrawnReceiveIsNeverWrittenAgainEvenInTheMiddleOfAFrame) {
  FakeLink link(1, 1000);
  Receiver rx;
  std::vector<char> dst(3000, 'x');
  auto r = opRecv(1, 6, 0, dst);
  rx.m.post(r);
  auto src = randomBytes(3000, 14);
  sendOp(link, 6, 0, src);
  rx.deliver(link.wire[0]);
  rx.deliver(link.wire[1], 400, [&] {
    r->fail(Failure::Remote, "the op failed");
    rx.m.withdraw(r);
  });
  rx.deliver(link.wire[2]);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 1400, dst.begin()));
  EXPECT_EQ(std::vector<char>(dst.begin() + 1400, dst.end()), std::vector<char>(1600, 'x'));
  EXPECT_EQ(r->failure, Failure::Remote);
}

// A receive that took over a held message mid-arrival, then withdrawn: the
// rest of the message goes nowhere, neither to its buffer nor anywhere else.
TEST(Matcher, AReceiveThatTookOverAHeldMessageIsNeverWrittenAfterItsWithdrawal) {
  FakeLink link(1, 1000);
  Receiver rx;
  auto src = randomBytes(4000, 15);
  sendOp(link, 8, 2, src);
  rx.deliver(link.wire[0]);
  std::vector<char> dst(4000, 'x');
  auto r = opRecv(1, 8, 2, dst);
  rx.m.post(r);  // takes over: frame 0 copied, the rest would land in dst
  rx.deliver(link.wire[1], 300, [&] {
    r->fail(Failure::Remote, "the op failed");
    rx.m.withdraw(r);
  });
  rx.deliver(link.wire[2]);
  rx.deliver(link.wire[3]);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 1300, dst.begin()));
  EXPECT_EQ(std::vector<char>(dst.begin() + 1300, dst.end()), std::vector<char>(2700, 'x'));
  EXPECT_EQ(r->failure, Failure::Remote);
  EXPECT_EQ(rx.m.heldCount(), 0u);
}

TEST(Matcher, ZeroLengthMessagesCompleteWithTheirHeader) {
  FakeLink link(1, 100);
  Receiver rx;
  std::vector<char> none;
  auto posted = opRecv(1, 1, 0, none);
  rx.m.post(posted);
  sendOp(link, 1, 0, none);
  sendOp(link, 1, 1, none);
  for (auto& f : link.wire) rx.deliver(f);
  EXPECT_TRUE(posted->done);
  auto late = opRecv(1, 1, 1, none);
  rx.m.post(late);
  EXPECT_TRUE(late->done);
  EXPECT_EQ(late->failure, Failure::None);
}

TEST(Matcher, EndedOpsAreForgottenAndHeldOnesSweptByTheNextOp) {
  FakeLink link(1, 100);
  Receiver rx;
  std::vector<char> dst(300);
  auto r = opRecv(1, 1, 0, dst);
  rx.m.post(r);
  sendOp(link, 1, 0, randomBytes(300, 15));
  sendOp(link, 2, 0, randomBytes(50, 16));
  sendOp(link, 3, 0, randomBytes(50, 17));
  rx.deliver(link.wire[0]);  // op 1 partly received
  for (size_t i = 3; i < link.wire.size(); ++i) rx.deliver(link.wire[i]);
  rx.m.forgetOpsUpTo(1);
  EXPECT_EQ(rx.m.postedCount(), 0u);
  std::vector<uint64_t> seen;
  rx.m.sweepHeldOps([&](const Inbound& u) {
    seen.push_back(u.key >> 32);
    return (u.key >> 32) < 3;
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(rx.m.heldCount(), 1u);
  std::vector<char> three(50);
  auto r3 = opRecv(1, 3, 0, three);
  rx.m.post(r3);
  EXPECT_TRUE(r3->done);
}

namespace {
// A message of `n` bytes that arrives whole before its receive, then is
// received and checked: its held buffer is released to the spares.
void heldThenReceived(FakeLink& link, Receiver& rx, uint64_t seq, size_t n, unsigned seed) {
  auto src = randomBytes(n, seed);
  std::vector<char> dst(n, 0);
  sendOp(link, seq, 0, src);
  for (auto& f : link.wire) rx.deliver(f);
  link.wire.clear();
  ASSERT_EQ(rx.m.heldCount(), 1u) << "the message of " << n << " bytes was not held";
  auto r = opRecv(1, seq, 0, dst);
  rx.m.post(r);
  ASSERT_TRUE(r->done);
  ASSERT_EQ(dst, src) << n << " bytes";
}
}  // namespace

TEST(Matcher, AKeptBufferIsReusedByTheNextHeldMessage) {
  FakeLink link(1, 64 << 10);
  Receiver rx;
  size_t base = Matcher::processSpareBytes();
  heldThenReceived(link, rx, 1, 1 << 20, 1);
  EXPECT_EQ(rx.m.spareBytes(), size_t(1) << 20);
  EXPECT_EQ(Matcher::processSpareBytes(), base + (1 << 20));
  // The next held message of at most that size takes the kept buffer while
  // it is held, and gives it back when received.
  auto src = randomBytes(900 << 10, 2);
  sendOp(link, 2, 0, src);
  for (auto& f : link.wire) rx.deliver(f);
  link.wire.clear();
  EXPECT_EQ(rx.m.spareBytes(), 0u);
  EXPECT_EQ(Matcher::processSpareBytes(), base);
  std::vector<char> dst(src.size(), 0);
  auto r = opRecv(1, 2, 0, dst);
  rx.m.post(r);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(rx.m.spareBytes(), size_t(1) << 20);  // the same buffer, its whole size
  // Small buffers are never kept.
  heldThenReceived(link, rx, 3, 100 << 10, 3);
  EXPECT_EQ(rx.m.spareBytes(), size_t(1) << 20);
}

TEST(Matcher, KeptBuffersStayWithinTheProcessBudgetOverEveryMatcher) {
  size_t base = Matcher::processSpareBytes();
  const size_t limit = base + (3 << 20);
  const size_t MiB = 1 << 20;
  // Two matchers of one process (two groups), both given the budget. Each
  // step holds and receives a message of `bytes` in one of them, then checks
  // what that matcher keeps and what the process keeps.
  struct Two {
    FakeLink link{1, 64 << 10};
    Receiver a, b;
    explicit Two(size_t limit) {
      a.m.setSpareLimit(limit);
      b.m.setSpareLimit(limit);
    }
    void step(Receiver& r, uint64_t seq, size_t bytes, size_t keeps, size_t processKeeps) {
      heldThenReceived(link, r, seq, bytes, static_cast<unsigned>(seq));
      EXPECT_EQ(r.m.spareBytes(), keeps) << "after message " << seq;
      EXPECT_EQ(Matcher::processSpareBytes(), processKeeps) << "after message " << seq;
    }
  };
  {
    Two t(limit);
    // a keeps its two largest (1 and 2 MiB); a third, smaller one is freed.
    t.step(t.a, 1, MiB, MiB, base + MiB);
    t.step(t.a, 2, 2 * MiB, 3 * MiB, limit);
    t.step(t.a, 3, MiB / 2, 3 * MiB, limit);
    // b is over the budget that a filled: nothing kept, the bytes still right.
    t.step(t.b, 4, MiB, 0, limit);
    // A larger one in a replaces its smaller spare only within the budget:
    // 2 + 3 MiB is over it, so a keeps what it had and the 3 MiB is freed;
    // 1.5 MiB would replace the 1 MiB spare, but 2 + 1.5 MiB is over too.
    t.step(t.a, 5, 3 * MiB, 3 * MiB, limit);
    t.step(t.a, 6, 3 * MiB / 2, 3 * MiB, limit);
  }
  EXPECT_EQ(Matcher::processSpareBytes(), base);
  {
    Two t(limit);
    // The second 1 MiB message reuses the kept buffer; a 2 MiB one is kept
    // beside it (1 + 2 MiB fits).
    t.step(t.a, 1, MiB, MiB, base + MiB);
    t.step(t.a, 2, MiB, MiB, base + MiB);
    t.step(t.a, 3, 2 * MiB, 3 * MiB, limit);
    t.step(t.b, 4, MiB, 0, limit);
  }
  // a's matcher is gone: its share is free for another.
  {
    Two t(limit);
    t.step(t.b, 6, MiB, MiB, base + MiB);
  }
  // Destroyed matchers give their share back.
  EXPECT_EQ(Matcher::processSpareBytes(), base);
}

TEST(Matcher, ABudgetOfZeroKeepsNothing) {
  FakeLink link(1, 64 << 10);
  Receiver rx;
  rx.m.setSpareLimit(0);
  size_t base = Matcher::processSpareBytes();
  for (unsigned i = 0; i < 3; ++i) heldThenReceived(link, rx, 1 + i, (1 + i) << 20, i);
  EXPECT_EQ(rx.m.spareBytes(), 0u);
  EXPECT_EQ(Matcher::processSpareBytes(), base);
}

// The shared-memory link offers a frame that is a whole message to
// arriveWhole first (NetTransport::landWhole): it lands in one step only
// where arrive() would land it straight in a posted receive; anything else
// is left, unchanged, to arrive() and landed().
TEST(Matcher, AWholeMessageLandsInOneStepOnlyWhereArriveWouldLandItStraight) {
  FakeLink from1(1, 1 << 20), from2(2, 1 << 20);
  Receiver rx;
  auto whole = [&](const FakeLink::Frame& f) {
    return rx.m.arriveWhole(f.from, f.h.type == static_cast<uint8_t>(FrameType::Tagged) ? Space::Tagged : Space::Op,
                            f.h, f.payload.data());
  };
  // Posting order and any source, as arrive(): the oldest matching receive.
  auto a = randomBytes(48, 21), b = randomBytes(48, 22);
  std::vector<char> anyBuf(48, 'x'), oneBuf(48, 'x');
  auto any = tagRecv(-1, 3, anyBuf), one = tagRecv(1, 3, oneBuf);
  rx.m.post(any);
  rx.m.post(one);
  sendTag(from1, 3, a);
  EXPECT_TRUE(whole(from1.wire.back()));
  EXPECT_TRUE(any->done);
  EXPECT_EQ(any->failure, Failure::None);
  EXPECT_EQ(any->source, 1);
  EXPECT_EQ(anyBuf, a);
  EXPECT_FALSE(one->done);
  sendTag(from1, 3, b);
  EXPECT_TRUE(whole(from1.wire.back()));
  EXPECT_TRUE(one->done);
  EXPECT_EQ(oneBuf, b);
  EXPECT_EQ(rx.m.postedCount(), 0u);
  EXPECT_EQ(rx.m.heldCount(), 0u);

  // No receive for it: refused, and arrive() then holds it for the next one.
  auto c = randomBytes(16, 23);
  sendTag(from2, 4, c);
  EXPECT_FALSE(whole(from2.wire.back()));
  EXPECT_EQ(rx.m.heldCount(), 0u);
  rx.deliver(from2.wire.back());
  EXPECT_EQ(rx.m.heldCount(), 1u);
  std::vector<char> cBuf(16, 'x');
  auto rc = tagRecv(2, 4, cBuf);
  rx.m.post(rc);
  EXPECT_TRUE(rc->done);
  EXPECT_EQ(cBuf, c);

  // A receive of another size: refused, untouched; arrive() fails it on the size.
  std::vector<char> small(8, 'x');
  auto rs = tagRecv(2, 6, small);
  rx.m.post(rs);
  sendTag(from2, 6, randomBytes(24, 24));
  EXPECT_FALSE(whole(from2.wire.back()));
  EXPECT_FALSE(rs->done);
  EXPECT_EQ(rx.m.postedCount(), 1u);
  rx.deliver(from2.wire.back());
  EXPECT_TRUE(rs->done);
  EXPECT_EQ(rs->failure, Failure::Mismatch);
  EXPECT_EQ(small, std::vector<char>(8, 'x'));

  // A frame of a message in several frames is never whole: refused.
  FakeLink chunked(1, 100);
  std::vector<char> big(250, 'x');
  auto rb = opRecv(1, 9, 0, big);
  rx.m.post(rb);
  auto d = randomBytes(250, 25);
  sendOp(chunked, 9, 0, d);
  ASSERT_EQ(chunked.wire.size(), 3u);
  for (auto& f : chunked.wire) {
    EXPECT_FALSE(whole(f));
    rx.deliver(f);
  }
  EXPECT_TRUE(rb->done);
  EXPECT_EQ(big, d);

  // An op step of one frame, by peer and key only.
  auto e = randomBytes(40, 26);
  std::vector<char> eBuf(40, 'x'), otherPeer(40, 'x');
  auto re = opRecv(2, 10, 1, eBuf), ro = opRecv(1, 10, 1, otherPeer);
  rx.m.post(ro);
  rx.m.post(re);
  FakeLink op2(2, 1 << 20);
  sendOp(op2, 10, 1, e);
  EXPECT_TRUE(whole(op2.wire.back()));
  EXPECT_TRUE(re->done);
  EXPECT_EQ(eBuf, e);
  EXPECT_FALSE(ro->done);
  EXPECT_EQ(otherPeer, std::vector<char>(40, 'x'));

  // Zero bytes: completes with its header.
  std::vector<char> none;
  auto rz = tagRecv(1, 8, none);
  rx.m.post(rz);
  sendTag(from1, 8, none);
  EXPECT_TRUE(whole(from1.wire.back()));
  EXPECT_TRUE(rz->done);
}
