// The network transport's contract at the algorithm seam, with two
// transports of one process: once wait() has thrown, nothing reads or writes
// the buffers of the op's sends and receives (an algorithm frees its scratch
// while the error unwinds). Over sockets everywhere; over verbs where an RDMA
// port is ACTIVE (tests/rdma runs it inside a soft-RoCE guest).
#include <gtest/gtest.h>

#include <unistd.h>

#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "accl/errors.h"
#include "accl/internal/net.h"
#include "accl/process_group.h"
#include "accl/store.h"
#include "signal_snapshot.h"
#include "transport/net/ibverbs/qp_mesh.h"
#include "transport/net/net_transport.h"

using namespace accl;
using namespace accl::core;
using namespace std::chrono_literals;

namespace {

std::string whyNoRdma() {
#ifdef ACCL_HAVE_IBVERBS
  try {
    ib::choosePort(ib::Settings{});
    return "";
  } catch (const Error& e) {
    return e.what();
  }
#else
  return "this build has no verbs support";
#endif
}

// Two transports (ranks 0 and 1) connected through one store, as two hosts.
struct Pair {
  std::unique_ptr<net::NetTransport> t[2];
};

// link: "tcp" and "ib" as two hosts; "shm": as two ranks of one host (the
// shared-memory link carries the data); "shm_cma": the same, with single copy
// from the link's threshold (ACCL_SHM_CMA=on), where process_vm_readv works.
void connect(Pair& p, const std::string& link) {
  bool ib = link == "ib", cma = link == "shm_cma", shm = link == "shm" || cma;
  // Creating the transports (over verbs: UCX's memory hooks load) changes no
  // signal disposition of the process (SA_RESTORER is glibc's own flag).
  SignalSnapshot before;
  auto store = std::make_shared<HashStore>();
  // Names the shared-memory segments: unique across test processes that run at once.
  static uint64_t next = static_cast<uint64_t>(getpid()) << 32;
  uint64_t token = ++next;
  auto make = [&](int rank) {
    net::NetTransport::Options o;
    o.rank = rank;
    o.size = 2;
    o.nstreams = {1, 1};
    o.token = token;
    const char* ifs = getenv("ACCL_SOCKET_IFNAME");
    o.ifSpec = ifs ? ifs : "lo";
    o.timeout = 20s;
    o.store = store;
    o.where = "net test rank " + std::to_string(rank);
    o.ibWanted = o.ibRequired = ib;
    o.remote = {!shm && rank != 0, !shm && rank != 1};
    o.shmCmaAlways = cma;
    p.t[rank] = std::make_unique<net::NetTransport>(o);
  };
  std::thread other([&] { make(1); });
  make(0);
  other.join();
  if (ib) {
    ASSERT_TRUE(p.t[0]->overIb(1) && p.t[1]->overIb(0)) << p.t[0]->whyNotIb();
  }
  if (shm) {
    ASSERT_TRUE(p.t[0]->overShm(1) && p.t[1]->overShm(0)) << p.t[0]->whyNotShm();
  } else {
    ASSERT_FALSE(p.t[0]->overShm(1) || p.t[1]->overShm(0)) << "two hosts must not share memory";
  }
  for (auto& c : before.changed()) ADD_FAILURE() << "changed by creating the transport: " << c;
}

OpDesc op(uint64_t seq, size_t count) {
  OpDesc d;
  d.seq = seq;
  d.count = count;
  d.op = static_cast<uint16_t>(OpType::Allreduce);
  d.dtype = static_cast<uint8_t>(DataType::Uint8);
  return d;
}

class NetTransport : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "ib") {
      std::string why = whyNoRdma();
      if (!why.empty()) GTEST_SKIP() << "no usable RDMA port here: " << why;
    }
  }
};

}  // namespace

TEST_P(NetTransport, NothingLandsInAReceiveBufferAfterItsWaitThrew) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  // 8 MiB: many verbs chunks and socket reads, so data arrives well after
  // the wait failed.
  const size_t len = 8u << 20;
  void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* buf = static_cast<unsigned char*>(mem);
  std::memset(buf, 0xAB, len);

  // Rank 0 receives for op #1, but rank 1 sends only after rank 0's wait
  // has timed out (as a scratch buffer of an algorithm whose op failed).
  auto d = op(1, len);
  p.t[0]->beginOp(d, Clock::now() + 300ms, 300ms);
  p.t[0]->recv(1, 0, buf, len);
  EXPECT_THROW(p.t[0]->wait(), Timeout);

  std::vector<unsigned char> src(len, 0x11);
  p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
  p.t[1]->send(0, 0, src.data(), len);
  EXPECT_NO_THROW(p.t[1]->wait());
  p.t[1]->endOp();
  std::this_thread::sleep_for(500ms);  // rank 0's progress thread has seen all of it

  size_t touched = 0;
  for (size_t i = 0; i < len; ++i) touched += buf[i] != 0xAB;
  EXPECT_EQ(touched, 0u) << "bytes written into the receive buffer after its wait() threw";
  // Freeing it now must be harmless (before, a late verbs frame was copied
  // into freed scratch: SIGSEGV).
  munmap(mem, len);
  p.t[0]->endOp("the op failed");
  std::this_thread::sleep_for(100ms);
}

// waitFirst(n): the first n requests of the op are complete when it returns,
// the later ones still move (a pipeline posts its next receives early), and
// a wait() after it completes the rest and starts the count again.
TEST_P(NetTransport, WaitFirstReturnsOnceTheEarlierRequestsAreDoneWhileTheLaterStillMove) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  const size_t len = 1u << 20;
  std::vector<unsigned char> src0(len, 0x21), src1(len, 0x43), a(len, 0), b(len, 0);
  auto d = op(1, len);
  p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
  p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
  p.t[0]->recv(1, 0, a.data(), len);
  p.t[0]->recv(1, 1, b.data(), len);
  EXPECT_EQ(p.t[0]->posted(), 2u);
  p.t[1]->send(0, 0, src0.data(), len);
  ASSERT_NO_THROW(p.t[0]->waitFirst(1));  // step 1 is not even sent yet
  EXPECT_TRUE(a == src0) << "the first receive is not complete";
  EXPECT_EQ(std::count(b.begin(), b.end(), 0), static_cast<long>(len)) << "the second receive got data never sent";
  EXPECT_EQ(p.t[0]->posted(), 2u) << "waitFirst forgot the requests still pending";
  p.t[1]->send(0, 1, src1.data(), len);
  ASSERT_NO_THROW(p.t[1]->wait());
  ASSERT_NO_THROW(p.t[0]->waitFirst(5));  // more than were posted: a wait()
  EXPECT_TRUE(b == src1);
  EXPECT_EQ(p.t[0]->posted(), 0u);
  p.t[0]->endOp();
  p.t[1]->endOp();
  // A waitFirst on a receive whose data never comes fails as wait() does.
  auto d2 = op(2, len);
  p.t[0]->beginOp(d2, Clock::now() + 300ms, 300ms);
  p.t[0]->recv(1, 0, a.data(), len);
  p.t[0]->recv(1, 1, b.data(), len);
  EXPECT_THROW(p.t[0]->waitFirst(1), Timeout);
  p.t[0]->endOp("the op failed");
  std::this_thread::sleep_for(100ms);
}

TEST_P(NetTransport, APeerThatFinishesAndExitsDoesNotFailItsLastMessage) {
  // Rank 0 sends, completes and is destroyed at once (its process exits):
  // rank 1 must still get the message, though the end of rank 0's sockets
  // may reach it before the verbs completions of the data. Many rounds: the
  // order of the two is a race.
  const size_t len = 1u << 20;
  std::vector<unsigned char> src(len), dst(len);
  for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  for (int round = 0; round < 25; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Pair p;
    connect(p, GetParam());
    ASSERT_FALSE(HasFatalFailure());
    std::fill(dst.begin(), dst.end(), 0);
    auto d = op(1, len);
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->recv(0, 0, dst.data(), len);
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[0]->send(1, 0, src.data(), len);
    p.t[0]->wait();
    p.t[0]->endOp();
    p.t[0].reset();
    EXPECT_NO_THROW(p.t[1]->wait());
    p.t[1]->endOp();
    EXPECT_TRUE(dst == src);
  }
}

// A point-to-point op of rank `from` with the other rank of `p`, as the
// process group posts it (with the waiter's poll where the link has one).
static std::shared_ptr<Work> postTaggedWork(Pair& p, int from, bool send, void* buf, size_t len, int tag) {
  auto w = std::make_shared<Work>("p2p test");
  if (auto h = p.t[from]->waiterHook(1 - from, len)) w->setWaitHook(h);
  p.t[from]->postTagged(send, 1 - from, tag, buf, len, Clock::now() + 20s, w);
  return w;
}

// A thread waiting on a point-to-point message polls the shared-memory link,
// or a small message's socket, itself (waiterHook; not over verbs). Its messages arrive intact,
// and a transport destroyed while threads wait leaves their Works failed,
// never crashed into: many rounds, since the waiter's poll and the
// destructor race. Half the rounds send after the waiter's poll gave up: the
// progress thread, asleep, must still get the doorbell.
TEST_P(NetTransport, AWaiterThatPollsGetsItsMessagesAndSurvivesTheTransportsEnd) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  // The rings for any source or a named peer; a named peer's socket for a
  // small message; never verbs, nor a large message over TCP.
  bool rings = GetParam() == "shm" || GetParam() == "shm_cma", tcp = GetParam() == "tcp";
  ASSERT_EQ(static_cast<bool>(p.t[0]->waiterHook(1)), rings || tcp);
  ASSERT_EQ(static_cast<bool>(p.t[0]->waiterHook(1, size_t(1) << 20)), rings);
  ASSERT_EQ(static_cast<bool>(p.t[0]->waiterHook(-1)), rings);
  auto tagged = [&](int from, bool send, void* buf, size_t len, int tag) {
    return postTaggedWork(p, from, send, buf, len, tag);
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<int> src(1 + round * 37 % 5000, round), dst(src.size(), -1);
    auto r = tagged(0, false, dst.data(), dst.size() * sizeof(int), round);
    std::thread waiter([&] { EXPECT_NO_THROW(r->wait()); });
    if (round % 2) std::this_thread::sleep_for(std::chrono::microseconds(150));  // past the poll: asleep
    auto s = tagged(1, true, src.data(), src.size() * sizeof(int), round);
    EXPECT_NO_THROW(s->wait());
    waiter.join();
    ASSERT_EQ(dst, src) << "round " << round;
  }
  for (int round = 0; round < 20; ++round) {
    Pair q;
    connect(q, GetParam());
    ASSERT_FALSE(HasFatalFailure());
    std::vector<char> buf(64);
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) {
      auto w = std::make_shared<Work>("p2p test");
      if (auto h = q.t[0]->waiterHook(1)) w->setWaitHook(h);
      q.t[0]->postTagged(false, 1, i, buf.data(), buf.size(), Clock::now() + 20s, w);
      waiters.emplace_back([w] { EXPECT_THROW(w->wait(), RemoteError); });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(round * 10));
    q.t[0].reset();  // the receives fail: the process group was destroyed
    for (auto& t : waiters) t.join();
  }
}

// While waiters get their messages by polling (the progress thread then
// neither spins nor takes doorbells, and looks every millisecond), what no
// one waits for still arrives on its own, and a waiter whose message comes
// after its poll gave up still gets it: rounds of quick exchanges (which put
// the loop in that mode), then a receive nobody waits on, then a late send.
TEST_P(NetTransport, MessagesNoOneWaitsForStillArriveWhileWaitersPoll) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  auto tagged = [&](int from, bool send, void* buf, size_t len, int tag) {
    return postTaggedWork(p, from, send, buf, len, tag);
  };
  for (int round = 0; round < 30; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (int i = 0; i < 50; ++i) {
      int a = round * 100 + i, b = -1;
      auto r = tagged(1, false, &b, sizeof(b), i);
      auto s = tagged(0, true, &a, sizeof(a), i);
      s->wait();
      r->wait();
      ASSERT_EQ(b, a);
    }
    std::vector<int> src(1 + round * 997 % 100000, round), dst(src.size(), -1);
    auto r = tagged(1, false, dst.data(), dst.size() * sizeof(int), 1000);
    auto s = tagged(0, true, src.data(), src.size() * sizeof(int), 1000);
    if (round % 2 == 0) {
      // Nobody waits on the receive: it completes all the same.
      auto until = Clock::now() + 10s;
      while (!r->isCompleted() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
      ASSERT_TRUE(r->isCompleted());
      EXPECT_NO_THROW(s->wait());
    } else {
      // The send comes after the waiter's poll gave up.
      auto late = tagged(1, false, dst.data(), dst.size() * sizeof(int), 1001);
      std::thread waiter([&] { EXPECT_NO_THROW(late->wait()); });
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      auto s2 = tagged(0, true, src.data(), src.size() * sizeof(int), 1001);
      waiter.join();
      EXPECT_NO_THROW(s2->wait());
      EXPECT_NO_THROW(s->wait());
      EXPECT_NO_THROW(r->wait());
    }
    ASSERT_EQ(dst, src);
  }
}

// A send never waits long for its receive, whatever its size: over the
// shared-memory link a large message with no receive posted stays in the
// sender's memory (over TCP: in the socket's buffers) only a bounded while
// (holdForReceiveNs, at most 2 ms), then is held, and the send completes. A receive posted later takes it intact,
// and so does one posted while it waits (read once, straight into it). A
// small message behind a waiting one, taken first, arrives too.
TEST_P(NetTransport, ASendCompletesBeforeItsReceiveIsPostedAndTheMessageArrivesIntact) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  auto tagged = [&](int from, bool send, void* buf, size_t len, int tag) {
    return postTaggedWork(p, from, send, buf, len, tag);
  };
  for (size_t bytes : {size_t(16) << 10, size_t(256) << 10, size_t(4) << 20, size_t(16) << 20}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    std::vector<char> src(bytes), dst(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 13 + bytes);
    // No receive: the send completes all the same (the receiving rank's
    // progress thread holds the message).
    auto t0 = Clock::now();
    auto s = tagged(0, true, src.data(), bytes, 1);
    ASSERT_NO_THROW(s->wait());
    double sendMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    EXPECT_LT(sendMs, 5000.0) << "the send waited for its receive";
    auto r = tagged(1, false, dst.data(), bytes, 1);
    ASSERT_NO_THROW(r->wait());
    EXPECT_TRUE(dst == src) << "a held message differs";
    // The receive is posted just after the message came (within its wait
    // in the sender's memory, or just after it: either way intact).
    std::fill(dst.begin(), dst.end(), 0);
    s = tagged(0, true, src.data(), bytes, 2);
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    r = tagged(1, false, dst.data(), bytes, 2);
    ASSERT_NO_THROW(r->wait());
    ASSERT_NO_THROW(s->wait());
    EXPECT_TRUE(dst == src) << "a message received while it waited differs";
    // A small message behind one that waits, received first.
    std::fill(dst.begin(), dst.end(), 0);
    int small = 42, got = 0;
    s = tagged(0, true, src.data(), bytes, 3);
    auto s2 = tagged(0, true, &small, sizeof(small), 4);
    auto r2 = tagged(1, false, &got, sizeof(got), 4);
    ASSERT_NO_THROW(r2->wait());
    EXPECT_EQ(got, 42);
    r = tagged(1, false, dst.data(), bytes, 3);
    ASSERT_NO_THROW(r->wait());
    ASSERT_NO_THROW(s->wait());
    ASSERT_NO_THROW(s2->wait());
    EXPECT_TRUE(dst == src) << "a message received after a later one differs";
  }
}

// Small messages that came before their receives (a local peer's lie in
// its ring, where a receive posted with nothing pending takes its message
// straight from it) are received in the order they were sent per tag,
// behind a message of another tag that the same read holds, and one of
// another size than its receive fails that receive alone (the next one of
// its tag still arrives).
TEST_P(NetTransport, SmallMessagesThatCameFirstKeepTheirOrderPerTagAndASizeMismatchFailsOnlyItsReceive) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  int32_t b = 2, a = 1, c = 3, e = 5;
  int64_t d = 4;
  std::vector<std::shared_ptr<Work>> sends;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    sends.clear();
    sends.push_back(postTaggedWork(p, 0, true, &b, sizeof(b), 6));
    sends.push_back(postTaggedWork(p, 0, true, &a, sizeof(a), 5));
    sends.push_back(postTaggedWork(p, 0, true, &c, sizeof(c), 5));
    sends.push_back(postTaggedWork(p, 0, true, &d, sizeof(d), 5));
    sends.push_back(postTaggedWork(p, 0, true, &e, sizeof(e), 5));
    for (auto& w : sends) ASSERT_NO_THROW(w->wait());
    // Every message has come (in the ring, or held by the progress thread)
    // before any receive; half the rounds give them time to be read first.
    if (round % 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    int32_t got = 0;
    auto r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 1) << "the first message of tag 5";
    EXPECT_EQ(r->sourceRank(), 0);
    got = 0;
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 3) << "the second message of tag 5";
    got = 0;
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 6);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 2) << "the message of tag 6, sent first";
    got = -1;
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    try {
      r->wait();
      ADD_FAILURE() << "a 4-byte receive took the 8-byte message";
    } catch (const InvalidArgument& ex) {
      EXPECT_NE(std::string(ex.what()).find("8"), std::string::npos) << ex.what();
    }
    EXPECT_EQ(got, -1) << "the failed receive's buffer was written";
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 5) << "the message behind the mismatched one";
    // A message that the receiving rank's progress thread read and holds
    // (given 20 ms) comes before one of its tag still in the ring, whose
    // receive is posted as soon as it is sent.
    int32_t first = 7, second = 8;
    ASSERT_NO_THROW(postTaggedWork(p, 0, true, &first, sizeof(first), 5)->wait());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_NO_THROW(postTaggedWork(p, 0, true, &second, sizeof(second), 5)->wait());
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 7) << "a held message of tag 5 was passed by a later one";
    r = postTaggedWork(p, 1, false, &got, sizeof(got), 5);
    ASSERT_NO_THROW(r->wait());
    EXPECT_EQ(got, 8);
  }
}

// A sendrecv's two parts as the accl backend posts them (postSendRecv), the
// caller waiting at once; the Work completes with both.
static std::shared_ptr<Work> sendRecvWork(Pair& p, int from, bool sendFirst, const void* sb, void* rb, size_t len,
                                          int tag) {
  auto w = std::make_shared<Work>("sendrecv test");
  w->setParts(2);
  if (auto h = p.t[from]->waiterHook(1 - from, len)) w->setWaitHook(h);
  p.t[from]->postSendRecv(sendFirst, 1 - from, tag, sb, len, 1 - from, tag, rb, len, Clock::now() + 20s, w);
  return w;
}

static void spinFor(std::chrono::microseconds d) {
  auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

// A small sendrecv between ranks of one host sends first, then waits for its
// peer's message in the ring for a few microseconds before it makes a
// request for it. Whether that message is there at once, comes during that
// wait, after it (the request takes it) or was read and held before (behind
// an earlier one of its tag), each receive gets its own message in order of
// sending; one of the wrong size fails only its sendrecv, and leaves the
// buffer as it was. Over sockets and verbs the same calls post the receive
// the usual way. Where the ranks share cores, the wait in the ring gives the
// core up between looks (the second test): the same orders hold.
static void sendRecvOrders(Pair& p) {
  const std::chrono::microseconds delays[] = {0us, 1us, 3us, 10us, 40us, 300us};
  // Both ranks' threads start each round together (a spinning barrier), one
  // of them late by a delay.
  constexpr int kRounds = 240;
  std::atomic<int> go{-1}, done0{-1};
  int64_t gotA[kRounds], gotB[kRounds];
  int src0[kRounds], src1[kRounds];
  std::thread peer([&] {
    for (int round = 0; round < kRounds; ++round) {
      while (go.load() < round) {
      }
      if (round % 12 < 6) spinFor(delays[round % 6]);
      int64_t a = 1000 + round;
      gotA[round] = -1;
      auto w = sendRecvWork(p, 0, true, &a, &gotA[round], sizeof(a), round);
      EXPECT_NO_THROW(w->wait());
      src0[round] = w->sourceRank();
      done0.store(round);
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    go.store(round);
    if (round % 12 >= 6) spinFor(delays[round % 6]);
    int64_t b = 2000 + round;
    gotB[round] = -1;
    auto w = sendRecvWork(p, 1, true, &b, &gotB[round], sizeof(b), round);
    EXPECT_NO_THROW(w->wait());
    src1[round] = w->sourceRank();
    while (done0.load() < round) {
    }
    EXPECT_EQ(gotA[round], b);
    EXPECT_EQ(gotB[round], 1000 + round);
    EXPECT_EQ(src0[round], 1);
    EXPECT_EQ(src1[round], 0);
  }
  peer.join();
  // Rank 0 sends two messages of a tag before rank 1's sendrecvs of it (the
  // first read and held by rank 1's progress thread in half the rounds, or
  // by the first sendrecv's wait behind its own message), then the third
  // during them.
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("held, round " + std::to_string(round));
    int tag = 1000 + round;
    int32_t m1 = 1, m2 = 2, m3 = 3, back = 9, got[3] = {-1, -1, -1}, echo[3] = {-1, -1, -1};
    ASSERT_NO_THROW(postTaggedWork(p, 0, true, &m1, sizeof(m1), tag)->wait());
    if (round % 2) std::this_thread::sleep_for(5ms);
    ASSERT_NO_THROW(postTaggedWork(p, 0, true, &m2, sizeof(m2), tag)->wait());
    std::thread peer([&] {
      spinFor(delays[round % 6]);
      ASSERT_NO_THROW(postTaggedWork(p, 0, true, &m3, sizeof(m3), tag)->wait());
      for (auto& e : echo) ASSERT_NO_THROW(postTaggedWork(p, 0, false, &e, sizeof(e), tag)->wait());
    });
    for (auto& g : got) ASSERT_NO_THROW(sendRecvWork(p, 1, true, &back, &g, sizeof(back), tag)->wait());
    peer.join();
    EXPECT_EQ(got[0], 1);
    EXPECT_EQ(got[1], 2);
    EXPECT_EQ(got[2], 3);
    for (auto e : echo) EXPECT_EQ(e, 9);
  }
  // A message of the wrong size that comes while the sendrecv waits.
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("mismatch, round " + std::to_string(round));
    int tag = 5000 + round;
    int64_t wrong = 77;
    int32_t right = 78, back = 5, got = -1, echo[2] = {-1, -1};
    std::thread peer([&] {
      spinFor(delays[round % 6]);
      ASSERT_NO_THROW(postTaggedWork(p, 0, true, &wrong, sizeof(wrong), tag)->wait());
      ASSERT_NO_THROW(postTaggedWork(p, 0, true, &right, sizeof(right), tag)->wait());
      for (auto& e : echo) ASSERT_NO_THROW(postTaggedWork(p, 0, false, &e, sizeof(e), tag)->wait());
    });
    auto w = sendRecvWork(p, 1, true, &back, &got, sizeof(got), tag);
    try {
      w->wait();
      ADD_FAILURE() << "a 4-byte receive took the 8-byte message";
    } catch (const InvalidArgument& ex) {
      EXPECT_NE(std::string(ex.what()).find("8"), std::string::npos) << ex.what();
    }
    EXPECT_EQ(got, -1) << "the failed receive's buffer was written";
    ASSERT_NO_THROW(sendRecvWork(p, 1, true, &back, &got, sizeof(got), tag)->wait());
    peer.join();
    EXPECT_EQ(got, 78) << "the message behind the mismatched one";
    EXPECT_EQ(echo[0], 5) << "the failed sendrecv's send still went";
    EXPECT_EQ(echo[1], 5);
  }
}

TEST_P(NetTransport, SendRecvsGetTheirMessagesInOrderWhetherTheyComeAtOnceDuringTheWaitLaterOrWereHeld) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  sendRecvOrders(p);
}

TEST_P(NetTransport, SendRecvsGetTheirMessagesInOrderWhereTheRanksShareCores) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  for (auto& t : p.t) t->setLocalRanksShareCpus(true);
  sendRecvOrders(p);
}

// The receive rate per peer (ACCL_STATS, accl-diag's slowest link) is the
// bytes of the timed frames (16 KiB and up) over the time they were arriving:
// small messages count as received but are not timed (that took two precise
// clock reads per message), so a peer that sent only small ones shows no rate.
TEST_P(NetTransport, OnlyFramesOf16KiBAndUpAreTimedForTheReceiveRate) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  auto exchange = [&](size_t bytes, int tag) {
    std::vector<char> src(bytes, 7), dst(bytes, 0);
    auto r = postTaggedWork(p, 0, false, dst.data(), bytes, tag);
    auto s = postTaggedWork(p, 1, true, src.data(), bytes, tag);
    ASSERT_NO_THROW(s->wait());
    ASSERT_NO_THROW(r->wait());
    EXPECT_TRUE(dst == src);
  };
  for (int i = 0; i < 100; ++i) exchange(64, i);
  ASSERT_FALSE(HasFailure());
  PeerTraffic small = p.t[0]->traffic()[1];
  EXPECT_EQ(small.bytesReceived, 100u * 64u);
  EXPECT_EQ(small.bytesTimed, 0u);
  EXPECT_EQ(small.receiveBusyUs, 0);
  EXPECT_GE(small.idleMs, 0) << "the peer was heard from";
  constexpr size_t kBig = size_t(4) << 20;
  exchange(kBig, 1000);
  PeerTraffic both = p.t[0]->traffic()[1];
  EXPECT_EQ(both.bytesReceived, 100u * 64u + kBig);
  // Every frame of the large message is 16 KiB or more, save perhaps its last.
  EXPECT_GE(both.bytesTimed, kBig - (size_t(16) << 10));
  EXPECT_LE(both.bytesTimed, kBig);
  EXPECT_GT(both.receiveBusyUs, 0);
}

// An op's waiter on a small message reads its peer's socket itself while
// the socket wakes no one (NetTransport::pollForOpWaiter), and the progress
// thread gets the socket back when the poll ends: messages sent at once,
// during the poll (200 us), and after it all arrive intact, as do messages
// above the poll's size (64 KiB) among them. Over TCP the waiter read some of
// them itself; over the other links none goes that way. A timeout that
// strikes during the poll still hears from the peer (its answer to the
// query comes over the same socket).
TEST_P(NetTransport, AnOpsWaiterReadsSmallMessagesItselfAndTheLoopGetsTheSocketBack) {
  Pair p;
  connect(p, GetParam());
  ASSERT_FALSE(HasFatalFailure());
  const int delaysUs[] = {0, 50, 150, 400, 3000};
  uint64_t seq = 1;
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int delay = delaysUs[round % 5];
    size_t len = round % 6 == 5 ? (size_t(256) << 10) : 1 + round * 97 % 4096;
    std::vector<unsigned char> src(len), dst(len, 0), back(len, 0);
    for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 31 + round + 1);
    auto d = op(seq++, len);
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[0]->recv(1, 0, dst.data(), len);
    p.t[1]->recv(0, 1, back.data(), len);
    std::thread peer([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      p.t[1]->send(0, 0, src.data(), len);
      EXPECT_NO_THROW(p.t[1]->wait());
    });
    EXPECT_NO_THROW(p.t[0]->wait());
    // And back: the first rank's message goes the other way while the peer waits.
    p.t[0]->send(1, 1, dst.data(), len);
    EXPECT_NO_THROW(p.t[0]->wait());
    peer.join();
    p.t[0]->endOp();
    p.t[1]->endOp();
    ASSERT_TRUE(dst == src);
    ASSERT_TRUE(back == src);
  }
  uint64_t byWaiters = p.t[0]->framesReadByWaiters() + p.t[1]->framesReadByWaiters();
  if (GetParam() == "tcp")
    EXPECT_GT(byWaiters, 0u) << "no waiter read its socket itself";
  else
    EXPECT_EQ(byWaiters, 0u) << "frames over " << GetParam() << " counted as read from a socket";
  // A timeout during the poll, and one after it: the peer (which has not
  // entered the op) answers the query.
  for (auto limit : {std::chrono::microseconds(100), std::chrono::microseconds(300000)}) {
    auto d = op(seq++, 8);
    std::vector<char> buf(8);
    p.t[0]->beginOp(d, Clock::now() + limit, std::chrono::duration_cast<std::chrono::milliseconds>(limit));
    p.t[0]->recv(1, 0, buf.data(), buf.size());
    try {
      p.t[0]->wait();
      ADD_FAILURE() << "the wait did not time out";
    } catch (const Timeout& e) {
      EXPECT_NE(std::string(e.what()).find("finished"), std::string::npos)
          << "the peer's answer to the query did not arrive: " << e.what();
    }
    p.t[0]->endOp("the op failed");
  }
}

// Over TCP, an op's waiter that polled its peer's socket and got its message
// leaves the socket polled for a while (SocketLink::linger): the next op's
// waiter polls it again, and no byte sent meanwhile wakes the progress
// thread. Nothing may be lost or stuck that way: a message that comes while
// no op is posted is read by the loop once the time is up; a point-to-point
// receive whose Work no one polls, and an op's receive above the poll's
// size, are served by the loop as usual.
TEST(NetTransportTcp, ASocketLeftPolledAfterAnOpLosesNothingAndHoldsNothingUp) {
  Pair p;
  connect(p, "tcp");
  ASSERT_FALSE(HasFatalFailure());
  // Both ranks' threads share this process's cores: the waiter gives its
  // core up between polls (a spinning waiter could keep the sending thread
  // off its core until the poll ends).
  for (auto& t : p.t) t->setLocalRanksShareCpus(true);
  uint64_t seq = 1;
  // One op whose waiter polls: rank 1 waits first, rank 0 sends a little
  // later. Returns whether rank 1's socket was left lingering by it.
  auto polledOp = [&](size_t len) {
    std::vector<unsigned char> src(len), dst(len, 0);
    for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 13 + seq);
    auto d = op(seq++, len);
    uint64_t before = p.t[1]->holding().socketsLingered;
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->recv(0, 0, dst.data(), len);
    // The send comes ~30 us after rank 1 begins to wait, well within its
    // poll (200 us) unless the machine is loaded (then the loop reads it).
    // The sending thread is running before: its start is not in that time.
    std::atomic<bool> ready{false}, waiting{false};
    std::thread peer([&] {
      ready = true;
      while (!waiting.load()) std::this_thread::yield();
      auto at = Clock::now() + 30us;
      while (Clock::now() < at) std::this_thread::yield();
      p.t[0]->send(1, 0, src.data(), len);
      EXPECT_NO_THROW(p.t[0]->wait());
    });
    while (!ready.load()) std::this_thread::yield();
    waiting = true;
    EXPECT_NO_THROW(p.t[1]->wait());
    peer.join();
    p.t[0]->endOp();
    p.t[1]->endOp();
    EXPECT_TRUE(dst == src);
    return p.t[1]->holding().socketsLingered > before;
  };
  auto lingeringOp = [&] {
    for (int i = 0; i < 50; ++i)
      if (polledOp(64)) return true;
    return false;
  };
  // 1. A message of the next op, sent while no op is posted on rank 1: the
  // loop reads (and holds) it.
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_TRUE(lingeringOp()) << "no waiter left its socket lingering in 50 ops";
    std::vector<unsigned char> src(300), dst(300, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i + round);
    auto d = op(seq++, src.size());
    auto before = p.t[1]->holding();
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[0]->send(1, 0, src.data(), src.size());
    ASSERT_NO_THROW(p.t[0]->wait());
    p.t[0]->endOp();
    auto until = Clock::now() + 10s;
    while (p.t[1]->holding().messagesHeld == before.messagesHeld && Clock::now() < until)
      std::this_thread::sleep_for(100us);
    ASSERT_GT(p.t[1]->holding().messagesHeld, before.messagesHeld) << "the message stayed in the socket";
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->recv(0, 0, dst.data(), dst.size());
    ASSERT_NO_THROW(p.t[1]->wait());
    p.t[1]->endOp();
    EXPECT_TRUE(dst == src);
  }
  // 2. A point-to-point receive whose Work has no waiter's poll, and no one
  // waiting: the loop completes it.
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("p2p round " + std::to_string(round));
    ASSERT_TRUE(lingeringOp());
    uint64_t got = 0, sent = 0x1234500 + round;
    auto r = std::make_shared<Work>("p2p test, no hook");
    p.t[1]->postTagged(false, 0, 9, &got, sizeof(got), Clock::now() + 20s, r);
    auto s = postTaggedWork(p, 0, true, &sent, sizeof(sent), 9);
    auto until = Clock::now() + 10s;
    while (!r->isCompleted() && Clock::now() < until) std::this_thread::sleep_for(100us);
    ASSERT_TRUE(r->isCompleted()) << "the receive was not served";
    EXPECT_EQ(got, sent);
    EXPECT_NO_THROW(s->wait());
  }
  // 3. An op's receive above the poll's size (its waiter sleeps): it lands.
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("large round " + std::to_string(round));
    ASSERT_TRUE(lingeringOp());
    polledOp(size_t(256) << 10);  // the poll is for 64 KiB and less
  }
}

// Over TCP, a large op step that comes before its receive (here: before the
// receiving rank even began the op, as when its peer runs ahead) is left in
// the socket's buffers, and the receive posted while it waits takes it with
// no held copy. Each round watches for the frame to be left waiting, then
// posts; a round where the receive came too late (the wait is up to 2 ms:
// a loaded machine) is retried, and at least one of 20 must show it.
TEST(NetTransportTcp, ALargeStepThatComesBeforeItsReceiveWaitsInItsSocketAndLandsWithNoHeldCopy) {
  Pair p;
  connect(p, "tcp");
  ASSERT_FALSE(HasFatalFailure());
  const size_t len = size_t(4) << 20;
  std::vector<unsigned char> src(len), dst(len);
  int direct = 0;
  uint64_t heldBytes = 0;  // what ACCL_STATS shows as received before its receive
  for (uint64_t seq = 1; seq <= 20 && direct == 0; ++seq) {
    SCOPED_TRACE("op " + std::to_string(seq));
    for (size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 7 + seq);
    std::fill(dst.begin(), dst.end(), 0);
    auto d = op(seq, len);
    auto before = p.t[1]->holding();
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[0]->send(1, 0, src.data(), len);
    auto until = Clock::now() + 10s;
    net::NetTransport::Holding now;
    do {
      now = p.t[1]->holding();
    } while (now.framesLeftInSocket == before.framesLeftInSocket && now.messagesHeld == before.messagesHeld &&
             Clock::now() < until);
    ASSERT_TRUE(now.framesLeftInSocket > before.framesLeftInSocket || now.messagesHeld > before.messagesHeld)
        << "the frame never arrived";
    EXPECT_LE(now.framesLeftInSocket, before.framesLeftInSocket + 1) << "one frame of 4 MiB, left once";
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->recv(0, 0, dst.data(), len);
    ASSERT_NO_THROW(p.t[1]->wait());
    ASSERT_NO_THROW(p.t[0]->wait());
    p.t[0]->endOp();
    p.t[1]->endOp();
    EXPECT_TRUE(dst == src) << "a step left in its socket arrived changed";
    auto after = p.t[1]->holding();
    if (now.framesLeftInSocket > before.framesLeftInSocket && after.messagesHeld == before.messagesHeld) {
      ++direct;
      EXPECT_EQ(p.t[1]->traffic()[0].bytesHeld, heldBytes) << "bytes counted as held where none was";
    }
    heldBytes = p.t[1]->traffic()[0].bytesHeld;
  }
  EXPECT_GT(direct, 0) << "in no round was the step left in its socket and taken by its receive without a held copy";
  // Below SocketLink::kDeferMin a step is read at once (and held).
  auto before = p.t[1]->holding();
  std::vector<unsigned char> small(net::SocketLink::kDeferMin - 1, 5), got(small.size());
  auto d = op(100, small.size());
  p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
  p.t[0]->send(1, 0, small.data(), small.size());
  ASSERT_NO_THROW(p.t[0]->wait());
  auto until = Clock::now() + 10s;
  while (p.t[1]->holding().messagesHeld == before.messagesHeld && Clock::now() < until) std::this_thread::yield();
  EXPECT_EQ(p.t[1]->holding().framesLeftInSocket, before.framesLeftInSocket);
  p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
  p.t[1]->recv(0, 0, got.data(), got.size());
  ASSERT_NO_THROW(p.t[1]->wait());
  p.t[0]->endOp();
  p.t[1]->endOp();
  EXPECT_TRUE(got == small);
  EXPECT_EQ(p.t[1]->traffic()[0].bytesHeld, heldBytes + small.size()) << "a held message's bytes were not counted";
}

// A receive from the peer already waits for another message, which may come
// behind the large one on the same connection: the large one is read at once
// (held), not left in its socket, so the waiting receive is not held up.
TEST(NetTransportTcp, ALargeMessageIsNotLeftInItsSocketWhileAReceiveFromItsPeerWaitsForAnother) {
  Pair p;
  connect(p, "tcp");
  ASSERT_FALSE(HasFatalFailure());
  const size_t len = size_t(4) << 20;
  std::vector<char> big(len), got(len, 0);
  for (size_t i = 0; i < len; ++i) big[i] = static_cast<char>(i * 11 + 3);
  int small = 7, smallGot = 0;
  auto before = p.t[1]->holding();
  auto rSmall = postTaggedWork(p, 1, false, &smallGot, sizeof(smallGot), 2);
  auto sBig = postTaggedWork(p, 0, true, big.data(), len, 1);
  auto sSmall = postTaggedWork(p, 0, true, &small, sizeof(small), 2);
  ASSERT_NO_THROW(rSmall->wait());
  EXPECT_EQ(smallGot, 7);
  auto mid = p.t[1]->holding();
  EXPECT_EQ(mid.framesLeftInSocket, before.framesLeftInSocket) << "left in its socket while a receive waited behind it";
  EXPECT_EQ(mid.messagesHeld, before.messagesHeld + 1);
  auto rBig = postTaggedWork(p, 1, false, got.data(), len, 1);
  ASSERT_NO_THROW(rBig->wait());
  ASSERT_NO_THROW(sBig->wait());
  ASSERT_NO_THROW(sSmall->wait());
  EXPECT_TRUE(got == big);
}

// A receiver that lags: a message of its peer is held already (it came
// before its receive) when a large step of the next op arrives. Over TCP
// that step is still left in its socket from kLagDeferMin (not held: a root
// that runs ahead would otherwise have every message copied twice); a step
// smaller than that is held (its copy is cheap). Every receive,
// posted later, get their bytes intact and in order. The frame is left in
// its socket as its header is read, before any time limit, so the first
// change seen is deterministic.
TEST(NetTransportTcp, ALargeStepIsLeftInItsSocketEvenWhileAnEarlierMessageOfItsPeerIsHeldButASmallerOneIsNot) {
  Pair p;
  connect(p, "tcp");
  ASSERT_FALSE(HasFatalFailure());
  std::vector<unsigned char> small(100), smallGot(small.size(), 0);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<unsigned char>(i * 3 + 1);
  const size_t len = size_t(4) << 20;
  std::vector<unsigned char> big(len), bigGot(len, 0);
  for (size_t i = 0; i < len; ++i) big[i] = static_cast<unsigned char>(i * 13 + 5);
  auto before = p.t[1]->holding();
  // Op 1, a small step: read at once and held (rank 1 has not begun it).
  auto d1 = op(1, small.size());
  p.t[0]->beginOp(d1, Clock::now() + 20s, 20s);
  p.t[0]->send(1, 0, small.data(), small.size());
  ASSERT_NO_THROW(p.t[0]->wait());
  p.t[0]->endOp();
  auto until = Clock::now() + 10s;
  while (p.t[1]->holding().messagesHeld == before.messagesHeld && Clock::now() < until) std::this_thread::yield();
  auto mid = p.t[1]->holding();
  ASSERT_EQ(mid.messagesHeld, before.messagesHeld + 1) << "the small step was not held";
  // Op 2, a large step, while op 1's message is held.
  auto d2 = op(2, len);
  p.t[0]->beginOp(d2, Clock::now() + 20s, 20s);
  p.t[0]->send(1, 0, big.data(), len);
  net::NetTransport::Holding now;
  do {
    now = p.t[1]->holding();
  } while (now.framesLeftInSocket == mid.framesLeftInSocket && now.messagesHeld == mid.messagesHeld &&
           Clock::now() < until);
  EXPECT_EQ(now.framesLeftInSocket, mid.framesLeftInSocket + 1)
      << "the large step was not left in its socket while an earlier message of its peer was held";
  // Rank 1 catches up: op 1 from its held copy, op 2 from the socket.
  p.t[1]->beginOp(d1, Clock::now() + 20s, 20s);
  p.t[1]->recv(0, 0, smallGot.data(), smallGot.size());
  ASSERT_NO_THROW(p.t[1]->wait());
  p.t[1]->endOp();
  p.t[1]->beginOp(d2, Clock::now() + 20s, 20s);
  p.t[1]->recv(0, 0, bigGot.data(), len);
  ASSERT_NO_THROW(p.t[1]->wait());
  ASSERT_NO_THROW(p.t[0]->wait());
  p.t[0]->endOp();
  p.t[1]->endOp();
  EXPECT_TRUE(smallGot == small) << "the held step arrived changed";
  EXPECT_TRUE(bigGot == big) << "the step left in its socket arrived changed";

  // Below kLagDeferMin (but above SocketLink::kDeferMin, which applies when
  // nothing is held) a step behind a held one is read at once and held.
  const size_t mlen = net::NetTransport::kLagDeferMin - 4096;
  ASSERT_GE(mlen, net::SocketLink::kDeferMin);
  std::vector<unsigned char> mediumA(mlen), mediumB(mlen), gotA(mlen, 0), gotB(mlen, 0);
  for (size_t i = 0; i < mlen; ++i) mediumA[i] = static_cast<unsigned char>(i * 5 + 2), mediumB[i] = static_cast<unsigned char>(i * 9 + 4);
  auto d3 = op(3, small.size()), d4 = op(4, mlen), d5 = op(5, mlen);
  auto b3 = p.t[1]->holding();
  p.t[0]->beginOp(d3, Clock::now() + 20s, 20s);
  p.t[0]->send(1, 0, small.data(), small.size());
  ASSERT_NO_THROW(p.t[0]->wait());
  p.t[0]->endOp();
  until = Clock::now() + 10s;
  while (p.t[1]->holding().messagesHeld == b3.messagesHeld && Clock::now() < until) std::this_thread::yield();
  auto m3 = p.t[1]->holding();
  ASSERT_EQ(m3.messagesHeld, b3.messagesHeld + 1) << "the small step was not held";
  for (auto [d, buf] : {std::make_pair(d4, &mediumA), std::make_pair(d5, &mediumB)}) {
    p.t[0]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[0]->send(1, 0, buf->data(), mlen);
    ASSERT_NO_THROW(p.t[0]->wait());
    p.t[0]->endOp();
  }
  while (p.t[1]->holding().messagesHeld < m3.messagesHeld + 2 &&
         p.t[1]->holding().framesLeftInSocket == m3.framesLeftInSocket && Clock::now() < until)
    std::this_thread::yield();
  auto m5 = p.t[1]->holding();
  EXPECT_EQ(m5.framesLeftInSocket, m3.framesLeftInSocket) << "a step below kLagDeferMin waited in its socket";
  EXPECT_EQ(m5.messagesHeld, m3.messagesHeld + 2);
  for (auto [d, buf] : {std::make_pair(d3, &smallGot), std::make_pair(d4, &gotA), std::make_pair(d5, &gotB)}) {
    p.t[1]->beginOp(d, Clock::now() + 20s, 20s);
    p.t[1]->recv(0, 0, buf->data(), buf->size());
    ASSERT_NO_THROW(p.t[1]->wait());
    p.t[1]->endOp();
  }
  EXPECT_TRUE(smallGot == small && gotA == mediumA && gotB == mediumB) << "held steps arrived changed";
}

// Small messages are read through their connection's buffer
// (SocketLink::kReadAhead): a header and its payload in one recv call, and
// several messages in one where they came back to back. Every size around
// the buffer's (a header or a payload cut at its end, one bigger than it
// read straight into its receive) arrives intact and in order.
TEST(NetTransportTcp, SmallMessagesAreReadThroughABufferAndArriveIntact) {
  Pair p;
  connect(p, "tcp");
  ASSERT_FALSE(HasFatalFailure());
  const size_t ra = net::SocketLink::kReadAhead;
  std::vector<size_t> sizes;
  for (size_t s : {size_t(0), size_t(1), size_t(8), size_t(60), size_t(100), ra - 100, ra - 64, ra - 1, ra, ra + 1,
                   ra + 37, 2 * ra + 5, size_t(3000)})
    sizes.push_back(s);
  const int n = 400;
  std::vector<std::vector<char>> out(n), in(n);
  std::vector<std::shared_ptr<Work>> sends;
  for (int i = 0; i < n; ++i) {
    out[i].resize(i < 200 ? 8 : sizes[i % sizes.size()]);
    for (size_t j = 0; j < out[i].size(); ++j) out[i][j] = static_cast<char>(i * 31 + j * 7 + 1);
    in[i].assign(out[i].size(), 0);
    sends.push_back(postTaggedWork(p, 0, true, out[i].data(), out[i].size(), 9));
  }
  for (auto& w : sends) ASSERT_NO_THROW(w->wait());
  for (int i = 0; i < n; ++i) {
    auto r = postTaggedWork(p, 1, false, in[i].data(), in[i].size(), 9);
    ASSERT_NO_THROW(r->wait());
    ASSERT_TRUE(in[i] == out[i]) << "message " << i << " of " << in[i].size() << " bytes arrived changed";
  }
  // Since the link was made (its set-up reads are not counted). Without the
  // buffer a message takes two reads, its header and then its payload
  // (790-880 here); through it, 320-380.
  uint64_t reads = p.t[1]->holding().socketReads;
  EXPECT_LT(reads, uint64_t(3 * n / 2)) << "the receiving side made " << reads << " recv calls for " << n << " messages";
}

// A store that holds an address where nothing listens (a rank that exited,
// an earlier job's file store): set-up fails within seconds, naming the rank
// and the address, instead of retrying until its timeout.
TEST(NetTransportTcp, SetUpFailsSoonWhenAPeersPublishedAddressRefusesConnections) {
  auto store = std::make_shared<HashStore>();
  int port = 0;
  int fd = internal::listenOn("127.0.0.1", 0, &port);
  ::close(fd);
  store->set("tcp/0", toBytes("127.0.0.1 " + std::to_string(port)));
  net::NetTransport::Options o;
  o.rank = 1;
  o.size = 2;
  o.nstreams = {1, 1};
  o.token = 99;
  o.ifSpec = "lo";
  o.timeout = 120s;
  o.store = store;
  o.where = "net test rank 1";
  o.remote = {true, false};
  auto t0 = Clock::now();
  try {
    net::NetTransport t(o);
    ADD_FAILURE() << "set-up succeeded against an address where nothing listens";
  } catch (const RemoteError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0 published 127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("earlier job"), std::string::npos) << m;
  }
  EXPECT_LT(Clock::now() - t0, 60s) << "set-up waited for its timeout";
}

INSTANTIATE_TEST_SUITE_P(Links, NetTransport, ::testing::Values("tcp", "ib", "shm", "shm_cma"),
                         [](const auto& info) { return info.param; });
