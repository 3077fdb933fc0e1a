// The verbs data path (ib::QpMesh) between two meshes of one process, over the
// host's first ACTIVE RDMA port. Without one (no rdma-core, no device, a
// kernel without RDMA) the device tests skip and say why; tests/rdma runs them
// inside a soft-RoCE guest.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include <sys/mman.h>

#include "accl/errors.h"
#include "accl/store.h"
#include "transport/net/ibverbs/qp_mesh.h"

using namespace accl;
using namespace accl::core;
using namespace std::chrono_literals;

namespace {

std::string whyUnusable() {
  try {
    ib::choosePort(ib::Settings{});
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#define REQUIRE_RDMA()                                                          \
  do {                                                                          \
    std::string why_ = whyUnusable();                                           \
    if (!why_.empty()) GTEST_SKIP() << "no usable RDMA port here: " << why_;    \
  } while (0)

struct Side {
  std::unique_ptr<ib::QpMesh> link;
  std::vector<std::pair<FrameHeader, std::string>> got;
  int sent = 0;
  std::string failed;
  std::string why;
  std::vector<bool> usable;
};

ib::QpMesh::Callbacks callbacks(Side& s) {
  ib::QpMesh::Callbacks cb;
  cb.deliver = [&s](int, int, const FrameHeader& h, const char* p) { s.got.push_back({h, std::string(p, h.len)}); };
  cb.sent = [&s](const std::shared_ptr<void>&) { ++s.sent; };
  cb.fail = [&s](int, const std::string& why) { if (s.failed.empty()) s.failed = why; };
  return cb;
}

// Connects two links (ranks 0 and 1) through one store, in two threads.
void connectPair(Side& a, Side& b, const ib::Settings& settings) {
  auto store = std::make_shared<HashStore>();
  auto one = [&](int rank, Side& s) {
    ib::QpMesh::Options o;
    o.rank = rank;
    o.size = 2;
    o.peers = {rank == 1, rank == 0};
    o.required = true;
    o.settings = settings;
    o.timeout = 20s;
    o.store = store;
    o.where = "verbs test rank " + std::to_string(rank);
    s.link = ib::QpMesh::connect(o, callbacks(s), &s.usable, &s.why);
  };
  std::thread t([&] { one(1, b); });
  one(0, a);
  t.join();
  ASSERT_TRUE(a.link) << a.why;
  ASSERT_TRUE(b.link) << b.why;
  ASSERT_TRUE(a.usable[1] && b.usable[0]);
}

std::string pattern(int rank, int i, size_t len) {
  std::string s(len, '\0');
  for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>((rank * 131 + i * 7 + k * 13) & 0xff);
  return s;
}

FrameHeader frame(uint64_t key, size_t len) {
  return FrameHeader{kWireMagic, kWireVersion, static_cast<uint8_t>(FrameType::Data), 0, key, 0, len, len, OpDesc{}};
}

}  // namespace

TEST(IbGid, PrefersTheIpv4MappedRoceV2Entry) {
  using T = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ib::pickGidIndex(T{{"fe80::1", "RoCE v2"}, {"::ffff:10.0.0.1", "IB/RoCE v1"}, {"::ffff:10.0.0.1", "RoCE v2"}}), 2);
  EXPECT_EQ(ib::pickGidIndex(T{{"fe80::1", "RoCE v2"}, {"", ""}, {"::ffff:10.0.0.1", "IB/RoCE v1"}}), 2);
  EXPECT_EQ(ib::pickGidIndex(T{{"fe80::1", "RoCE v2"}, {"", ""}}), -1);  // no IPv4 address on the netdev
  EXPECT_EQ(ib::pickGidIndex(T{}), -1);
}

TEST(IbDevice, ChoosingAPortEitherSucceedsOrSaysWhy) {
  try {
    ib::PortInfo p = ib::choosePort(ib::Settings{});
    EXPECT_FALSE(p.device.empty());
    EXPECT_GE(p.port, 1);
    EXPECT_GT(p.activeMtu, 0);
    if (p.ethernet) {
      EXPECT_EQ(p.gidText.rfind("::ffff:", 0), 0u) << p.describe();
    }
  } catch (const NotSupported& e) {
    std::string w = e.what();
    // One of the documented reasons, never an empty or generic message.
    EXPECT_TRUE(w.find("libibverbs.so.1 cannot be loaded") != std::string::npos ||
                w.find("ibv_get_device_list failed") != std::string::npos ||
                w.find("no RDMA device") != std::string::npos || w.find("no usable RDMA port") != std::string::npos)
        << w;
  }
}

TEST(IbDevice, AnHcaSpecThatExcludesEveryDeviceSaysSo) {
  REQUIRE_RDMA();
  ib::Settings s;
  s.hcaSpec = "=no_such_device";
  try {
    ib::choosePort(s);
    FAIL() << "a port was chosen although ACCL_IB_HCA excludes every device";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("excluded by ACCL_IB_HCA==no_such_device"), std::string::npos) << e.what();
  }
}

TEST(IbLink, FramesArriveIntactAndInOrderThroughCreditsAndInline) {
  REQUIRE_RDMA();
  ib::Settings st;
  st.chunkBytes = 8192;
  st.slots = 8;  // far fewer slots than frames: credits must flow back
  Side a, b;
  connectPair(a, b, st);
  if (HasFatalFailure()) return;
  const int nA = 300, nB = 3;
  std::vector<size_t> sizes = {0, 1, 100, 4096, 8192};
  std::vector<std::string> payA, payB;
  for (int i = 0; i < nA; ++i) payA.push_back(pattern(0, i, sizes[i % sizes.size()]));
  for (int i = 0; i < nB; ++i) payB.push_back(pattern(1, i, sizes[(i + 2) % sizes.size()]));
  std::atomic<bool> ok{true};
  auto run = [&](Side& s, int rank, const std::vector<std::string>& pay, size_t expect) {
    for (size_t i = 0; i < pay.size(); ++i)
      s.link->post(1 - rank, 0, frame(i, pay[i].size()), pay[i].data(), std::make_shared<int>(0));
    auto until = std::chrono::steady_clock::now() + 60s;
    while ((s.got.size() < expect || s.sent < static_cast<int>(pay.size())) && s.failed.empty() &&
           std::chrono::steady_clock::now() < until)
      if (!s.link->progress()) std::this_thread::yield();
    // Let the last credit-only writes complete before the peer goes away.
    s.link->drain(2000ms);
    if (s.got.size() != expect || s.sent != static_cast<int>(pay.size())) ok = false;
  };
  std::thread t([&] { run(b, 1, payB, nA); });
  run(a, 0, payA, nB);
  t.join();
  ASSERT_TRUE(ok) << "a got " << a.got.size() << "/" << nB << " sent " << a.sent << "; b got " << b.got.size()
                  << "/" << nA << " sent " << b.sent << "; failures: " << a.failed << " | " << b.failed;
  for (int i = 0; i < nA; ++i) {
    ASSERT_EQ(b.got[i].first.key, static_cast<uint64_t>(i)) << "out of order";
    ASSERT_EQ(b.got[i].second, payA[i]) << "frame " << i << " corrupted";
  }
  for (int i = 0; i < nB; ++i) ASSERT_EQ(a.got[i].second, payB[i]);
  EXPECT_GT(a.link->stats().inlined, 0u) << "no frame went inline (limit " << a.link->inlineLimit() << ")";
  EXPECT_GT(a.link->stats().waitsForCredit, 0u) << "300 frames into 8 slots never waited for a credit";
  EXPECT_GT(b.link->stats().creditWrites, 0u) << "the receiver never returned credits on its own";
}

// A peer that closes its end says how many writes it received (its
// farewell): those complete at once, also when their acknowledgement never
// comes (lost, and the peer gone), and no write it did not confirm does; the
// real completions that follow report nothing twice.
TEST(IbLink, AFarewellCompletesTheWritesThePeerReceivedAndOnlyThose) {
  REQUIRE_RDMA();
  Side a, b;
  connectPair(a, b, ib::Settings{});
  if (HasFatalFailure()) return;
  std::vector<std::string> pay = {pattern(0, 0, 100), pattern(0, 1, 5000), pattern(0, 2, 1)};
  for (size_t i = 0; i < pay.size(); ++i)
    a.link->post(1, 0, frame(i, pay[i].size()), pay[i].data(), std::make_shared<int>(0));
  auto until = std::chrono::steady_clock::now() + 20s;
  while (b.got.size() < pay.size() && b.failed.empty() && std::chrono::steady_clock::now() < until)
    if (!b.link->progress()) std::this_thread::yield();
  ASSERT_EQ(b.got.size(), pay.size()) << b.failed;
  std::vector<uint32_t> n = b.link->receivedCounts(0);
  ASSERT_EQ(n.size(), static_cast<size_t>(b.link->qps()));
  EXPECT_EQ(n[0], pay.size());
  // a has polled nothing: its writes are in flight as far as it knows.
  EXPECT_EQ(a.sent, 0);
  std::vector<uint32_t> fewer = n;
  fewer[0] -= 1;
  EXPECT_EQ(a.link->confirmReceived(1, fewer), 2u);
  EXPECT_EQ(a.sent, 2);
  EXPECT_EQ(a.link->confirmReceived(1, n), 1u);
  EXPECT_EQ(a.sent, 3);
  EXPECT_EQ(a.link->confirmReceived(1, n), 0u);
  a.link->drain(5000ms);  // the acknowledgements did come here: nothing is reported twice
  EXPECT_EQ(a.sent, 3);
  EXPECT_EQ(a.link->stats().confirmedByFarewell, 3u);
  EXPECT_TRUE(a.failed.empty()) << a.failed;
}

TEST(IbLink, APeerThatDisappearsFailsTheQueuePairWithinTheTimeout) {
  REQUIRE_RDMA();
  ib::Settings st;
  st.ackTimeout = 14;  // ~67 ms per try, 7 retries
  Side a, b;
  connectPair(a, b, st);
  if (HasFatalFailure()) return;
  b.link.reset();  // its QPs are gone, as when the process is killed
  std::string big(100000, 'x');
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) a.link->post(1, 0, frame(i, 8192), big.data(), std::make_shared<int>(0));
  while (a.failed.empty() && std::chrono::steady_clock::now() - t0 < 30s)
    if (!a.link->progress()) std::this_thread::sleep_for(1ms);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(a.failed.empty()) << "no failure after " << s << " s";
  EXPECT_NE(a.failed.find("RDMA write"), std::string::npos) << a.failed;
  EXPECT_LT(s, 30.0);
  std::printf("peer gone -> '%s' after %.2f s\n", a.failed.c_str(), s);
}

// Zero-copy writes come from the caller's registered buffer: the
// registration is reused while the buffer lives, and memory unmapped and
// mapped again at the same address is registered anew, so the receiver gets
// the new contents, not the pages the first registration pinned.
TEST(IbLink, ZeroCopyWritesReuseRegistrationsAndFollowFreedMemory) {
  REQUIRE_RDMA();
  ib::Settings st;
  st.chunkBytes = 64 << 10;
  st.zcopyBytes = 4096;
  Side a, b;
  connectPair(a, b, st);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(a.link->regCache()) << a.link->sendMode();
  const size_t bytes = 1 << 20, chunk = st.chunkBytes;
  const int frames = static_cast<int>(bytes / chunk);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  char* buf = static_cast<char*>(p);
  auto round = [&](int r) -> std::string {
    std::string want = pattern(0, r, bytes);
    std::memcpy(buf, want.data(), bytes);
    b.got.clear();
    int sent0 = a.sent;
    for (int i = 0; i < frames; ++i) {
      FrameHeader h = frame(static_cast<uint64_t>(r), chunk);
      h.offset = i * chunk;
      h.total = bytes;
      a.link->post(1, 0, h, buf + i * chunk, std::make_shared<int>(0), buf, bytes);
    }
    auto until = std::chrono::steady_clock::now() + 60s;
    while ((a.sent - sent0 < frames || static_cast<int>(b.got.size()) < frames) && a.failed.empty() &&
           b.failed.empty() && std::chrono::steady_clock::now() < until) {
      bool x = a.link->progress();
      bool y = b.link->progress();
      if (!x && !y) std::this_thread::yield();
    }
    if (static_cast<int>(b.got.size()) != frames)
      return "round " + std::to_string(r) + ": " + std::to_string(b.got.size()) + " frames arrived; " + a.failed +
             b.failed;
    std::string got;
    for (auto& f : b.got) got += f.second;
    return got == want ? "" : "round " + std::to_string(r) + ": the data differs from the buffer's";
  };
  ASSERT_EQ(round(1), "");
  ASSERT_EQ(round(2), "");  // the same buffer again: no new registration
  const auto& cs = a.link->regCache()->stats();
  EXPECT_EQ(cs.registrations, 1u);
  EXPECT_EQ(cs.hits, static_cast<uint64_t>(2 * frames - 1));
  EXPECT_EQ(a.link->stats().zcopy, static_cast<uint64_t>(2 * frames));
  // Freed and allocated again at the same address, with other contents.
  ASSERT_EQ(munmap(buf, bytes), 0);
  EXPECT_EQ(cs.invalidations.load(), 1u);
  p = mmap(buf, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(p, static_cast<void*>(buf));
  ASSERT_EQ(round(3), "") << "a stale registration sent the freed pages";
  EXPECT_EQ(cs.registrations, 2u);
  EXPECT_EQ(cs.deregistrations, 1u);
  // Small payloads are still copied through the staging ring.
  uint64_t copied = a.link->stats().copied;
  std::string small = pattern(0, 9, 1000);
  a.link->post(1, 0, frame(99, small.size()), small.data(), std::make_shared<int>(0));
  auto until = std::chrono::steady_clock::now() + 20s;
  b.got.clear();
  while (b.got.empty() && std::chrono::steady_clock::now() < until) {
    a.link->progress();
    b.link->progress();
  }
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].second, small);
  EXPECT_EQ(a.link->stats().copied, copied + 1) << "a 1000-byte payload was not copied";
  a.link->drain(2000ms);
  b.link->drain(2000ms);
  munmap(buf, bytes);
}
