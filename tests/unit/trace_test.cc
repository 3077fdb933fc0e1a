// The flight recorder's ring and its dump, against hand-made entries.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "accl/internal/trace_registry.h"

#include "accl/trace.h"

using namespace accl;

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

TEST(FlightRecorder, KeepsTheLastOpsWithTheirStatesInOrder) {
  FlightRecorder rec(3, "g", "accl", 1, 4);
  EXPECT_EQ(rec.capacity(), 4u);  // rounded up to a power of two
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(rec.begin(OpType::Allreduce, DataType::Float32, 10 + i, -1, -1, 40));
  EXPECT_EQ(ids, (std::vector<uint64_t>{2, 4, 6, 8, 10, 12}));  // collectives: even ids
  rec.started(ids[2], 7, "ring", "tcp");
  rec.finished(ids[2], nullptr);
  rec.started(ids[3], -1, nullptr, "shm+tcp");
  rec.finished(ids[3], std::make_exception_ptr(InvalidArgument("bad count")));
  rec.finished(ids[0], nullptr);  // overwritten already: ignored
  rec.waiting(ids[4], "has waited 60 s");
  auto e = rec.entries();
  ASSERT_EQ(e.size(), 4u);  // the last four, oldest first
  EXPECT_EQ(e[0].id, ids[2]);
  EXPECT_EQ(e[0].count, 12u);
  EXPECT_EQ(e[0].coll, 2);
  EXPECT_EQ(e[0].state, OpState::Done);
  EXPECT_EQ(e[0].seq, 7);
  EXPECT_EQ(e[0].algorithm, "ring");
  EXPECT_EQ(e[0].transport, "tcp");
  EXPECT_GT(e[0].startedUs, 0);
  EXPECT_GE(e[0].finishedUs, e[0].startedUs);
  EXPECT_GE(e[0].startedUs, e[0].queuedUs);
  EXPECT_EQ(e[1].state, OpState::Failed);
  EXPECT_EQ(e[1].transport, "shm+tcp");
  EXPECT_EQ(e[1].seq, -1);
  EXPECT_EQ(e[1].error, "bad count");
  EXPECT_EQ(e[2].state, OpState::Waiting);
  EXPECT_EQ(e[2].note, "has waited 60 s");
  EXPECT_EQ(e[3].state, OpState::Queued);
  EXPECT_EQ(e[3].startedUs, 0);
  // The first failure is kept apart, whatever the ring holds later.
  for (int i = 0; i < 8; ++i) rec.finished(rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0), nullptr);
  EXPECT_EQ(rec.firstFailure().id, ids[3]);
  EXPECT_EQ(rec.firstFailure().error, "bad count");
}

TEST(FlightRecorder, AReusedSlotShowsNothingOfItsFormerOp) {
  // begin() writes only an op's own fields; its later phases (start, end)
  // are published by tags that name the op, its texts (error, stall note)
  // by the op's id beside them. A newer op in the same slot must show none
  // of the former op's.
  FlightRecorder rec(2, "g", "accl", 0, 2);  // the last two ops of each kind
  ASSERT_EQ(rec.capacity(), 2u);
  uint64_t a = rec.begin(OpType::Allreduce, DataType::Float32, 4, -1, -1, 16);
  rec.started(a, 9, "ring", "tcp");
  rec.waiting(a, "a has waited 60 s");
  rec.finished(a, std::make_exception_ptr(RemoteError("a failed")));
  uint64_t b = rec.begin(OpType::Send, DataType::Int8, 1, -1, 70000, 1);
  // A point-to-point op takes none of the collectives' slots: a is still held.
  ASSERT_EQ(rec.entries().size(), 2u);
  EXPECT_EQ(rec.entries()[0].id, a);
  rec.finished(rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0), nullptr);
  uint64_t c = rec.begin(OpType::Broadcast, DataType::Int64, 3, 1, -1, 24);  // a's slot
  EXPECT_EQ(c, a + 4);
  ASSERT_EQ(rec.entries().size(), 3u);  // the barrier, b and c
  auto entry = [&rec](uint64_t id) {
    for (auto& x : rec.entries())
      if (x.id == id) return x;
    ADD_FAILURE() << "no entry for op " << id;
    return TraceEntry{};
  };
  TraceEntry eb = entry(b), ec = entry(c);
  EXPECT_EQ(eb.op, OpType::Send);
  EXPECT_EQ(eb.dtype, DataType::Int8);
  EXPECT_EQ(eb.peer, 70000);
  EXPECT_EQ(eb.root, -1);
  EXPECT_EQ(eb.coll, -1);
  EXPECT_EQ(ec.op, OpType::Broadcast);
  EXPECT_EQ(ec.dtype, DataType::Int64);
  EXPECT_EQ(ec.count, 3u);
  EXPECT_EQ(ec.bytes, 24u);
  EXPECT_EQ(ec.root, 1);
  EXPECT_EQ(ec.peer, -1);
  EXPECT_EQ(ec.coll, 2);
  EXPECT_EQ(ec.state, OpState::Queued);
  EXPECT_EQ(ec.seq, -1);
  EXPECT_EQ(ec.algorithm, "");
  EXPECT_EQ(ec.transport, "");
  EXPECT_EQ(ec.startedUs, 0);
  EXPECT_EQ(ec.finishedUs, 0);
  EXPECT_EQ(ec.error, "");
  EXPECT_EQ(ec.note, "");
  EXPECT_EQ(rec.firstFailure().error, "a failed");  // kept apart
  // updateStart() starts an op the first time; a second call replaces what
  // it is given and keeps the first start (20 ms later: five ticks of the
  // coarse clock; each read of the entries converts to wall time afresh,
  // which may move a time by a microsecond).
  rec.updateStart(c, -1, "shm", "shm");
  int64_t firstStart = entry(c).startedUs;
  EXPECT_GT(firstStart, 0);
  EXPECT_EQ(entry(c).algorithm, "shm");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  rec.updateStart(c, 4, nullptr, nullptr);
  ec = entry(c);
  EXPECT_EQ(ec.state, OpState::Started);
  EXPECT_EQ(ec.seq, 4);
  EXPECT_EQ(ec.algorithm, "shm");
  EXPECT_LT(std::llabs(ec.startedUs - firstStart), 5000);
  // An op that ends without a start of its own started when it ended; a
  // stall warning that comes after the end keeps its text, not its state.
  rec.finished(b, nullptr);
  rec.waiting(b, "late warning");
  eb = entry(b);
  EXPECT_EQ(eb.state, OpState::Done);
  EXPECT_EQ(eb.startedUs, eb.finishedUs);
  EXPECT_EQ(eb.note, "late warning");
}

TEST(FlightRecorder, PointToPointOpsFromOtherThreadsKeepIdsAndSlotsOfTheirOwn) {
  // Collectives take their ids by a plain increment (one issuer at a time,
  // the API's rule); point-to-point ops, from any thread, by an atomic one.
  // Issued at once from three threads, every op gets an id no other op has,
  // and the ring ends with the last ops of each kind.
  FlightRecorder rec(64, "g", "accl", 0, 2);
  constexpr int kOps = 20000;
  std::vector<uint64_t> ids[3];
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        uint64_t id = t == 0 ? rec.begin(OpType::Allreduce, DataType::Float32, i, -1, -1, 4)
                             : rec.begin(t == 1 ? OpType::Send : OpType::Recv, DataType::Float32, i, -1, 1, 4);
        rec.finished(id, nullptr);
        ids[t].push_back(id);
      }
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "two ops got one id";
  for (int i = 0; i < kOps; ++i) ASSERT_EQ(ids[0][i], 2u * (i + 1)) << "collective " << i;
  auto e = rec.entries();
  size_t colls = 0, p2p = 0;
  for (const auto& x : e) {
    EXPECT_EQ(x.state, OpState::Done);
    if (x.op == OpType::Allreduce) {
      ++colls;
      EXPECT_EQ(x.id % 2, 0u);
      EXPECT_EQ(x.coll, static_cast<int64_t>(x.id / 2) - 1);
      EXPECT_GE(x.count, static_cast<uint64_t>(kOps - 64));
    } else {
      ++p2p;
      EXPECT_EQ(x.id % 2, 1u);
      EXPECT_EQ(x.coll, -1);
    }
  }
  EXPECT_EQ(colls, 64u);
  EXPECT_EQ(p2p, 64u);
}

TEST(FlightRecorder, ReadersGetConsistentEntriesWhileOpsAreRecorded) {
  // One thread records ops (seq = id, so that a torn copy shows) while this
  // one reads the ring: every entry read is whole. The writer yields now and
  // then: at full speed (~20 ns an op) it would overwrite every slot before
  // the reader got to it, and the reader would see nothing.
  FlightRecorder rec(256, "g", "accl", 0, 2);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> recorded{0};
  std::thread writer([&] {
    while (!stop.load()) {
      uint64_t id = rec.begin(OpType::Send, DataType::Uint8, 0, -1, 1, 0);
      rec.started(id, static_cast<int64_t>(id), "p2p", "tcp");
      rec.finished(id, nullptr);
      if (++recorded % 8 == 0) std::this_thread::yield();
    }
  });
  size_t seen = 0, torn = 0;
  for (int i = 0; i < 2000 || recorded.load() < 1000; ++i)
    for (const auto& e : rec.entries()) {
      ++seen;
      if (e.seq >= 0 && static_cast<uint64_t>(e.seq) != e.id) ++torn;
    }
  stop = true;
  writer.join();
  EXPECT_GT(seen, 0u);
  EXPECT_EQ(torn, 0u);
}

TEST(FlightRecorder, PerPeerBytesOfFewAndOfManyPeersAreKeptUntilTheirSlotIsReused) {
  // Up to kInlinePeers peers go to the ring beside the slots, more to the
  // op's texts; either way an entry shows its own op's peers, in order, and
  // a newer op in the same slot shows none of the former op's.
  FlightRecorder rec(2, "g", "accl", 0, 8);
  constexpr size_t kFew = FlightRecorder::kInlinePeers;
  auto peersOf = [](int first, size_t n, uint64_t scale) {
    std::vector<PeerBytes> v;
    for (size_t i = 0; i < n; ++i)
      v.push_back({first + static_cast<int>(i), scale * (i + 1), scale * (i + 1) + 7});
    return v;
  };
  auto entry = [&rec](uint64_t id) {
    for (auto& x : rec.entries())
      if (x.id == id) return x;
    ADD_FAILURE() << "no entry for op " << id;
    return TraceEntry{};
  };
  auto same = [](const std::vector<PeerBytes>& a, const std::vector<PeerBytes>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].rank != b[i].rank || a[i].sent != b[i].sent || a[i].received != b[i].received) return false;
    return true;
  };
  uint64_t few = rec.begin(OpType::Allreduce, DataType::Float32, 4, -1, -1, 16);
  uint64_t many = rec.begin(OpType::Alltoall, DataType::Float32, 4, -1, -1, 16);
  auto fewPeers = peersOf(1, kFew, 100), manyPeers = peersOf(1, kFew + 3, 1000);
  rec.peerBytes(few, fewPeers);
  rec.peerBytes(many, manyPeers);
  rec.finished(few, nullptr);
  rec.finished(many, nullptr);
  EXPECT_TRUE(same(entry(few).peers, fewPeers));
  EXPECT_TRUE(same(entry(many).peers, manyPeers));
  // The next two collectives take the same slots, the first with none of
  // its own, the second with one peer.
  uint64_t a = rec.begin(OpType::Broadcast, DataType::Float32, 4, 0, -1, 16);
  uint64_t b = rec.begin(OpType::Broadcast, DataType::Float32, 4, 0, -1, 16);
  ASSERT_EQ(a, few + 4);
  ASSERT_EQ(b, many + 4);
  auto onePeer = peersOf(5, 1, 3);
  rec.peerBytes(b, onePeer);
  EXPECT_TRUE(entry(a).peers.empty());
  EXPECT_TRUE(same(entry(b).peers, onePeer));
  // A stale call for an op that has left the ring is dropped.
  rec.peerBytes(few, fewPeers);
  EXPECT_TRUE(entry(a).peers.empty());
}

TEST(FlightRecorder, ReadersGetWholePerPeerBytesWhileOpsRecordThem) {
  // A writer records collectives whose peers all carry the op's id (rank
  // = id % 1000, sent = id, received = 2 id) while this thread reads: a
  // torn copy (a field of one op beside a field of another) shows.
  // Every field is an atomic, so TSan has nothing to report; its runs are
  // slower, so they take fewer rounds.
  const int kRounds = kThreadSanitizer ? 20000 : 200000;
  FlightRecorder rec(4, "g", "accl", 0, 8);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> recorded{0};
  std::thread writer([&] {
    while (!stop.load()) {
      uint64_t id = rec.begin(OpType::Allreduce, DataType::Float32, 1, -1, -1, 4);
      size_t n = 1 + id % FlightRecorder::kInlinePeers;
      std::vector<PeerBytes> v(n, PeerBytes{static_cast<int>(id % 1000), id, 2 * id});
      rec.peerBytes(id, v);
      rec.finished(id, nullptr);
      ++recorded;
    }
  });
  size_t seen = 0, torn = 0;
  for (int i = 0; i < kRounds || recorded.load() < static_cast<uint64_t>(kRounds); ++i)
    for (const auto& e : rec.entries()) {
      if (e.peers.empty()) continue;
      ++seen;
      bool whole = e.peers.size() == 1 + e.id % FlightRecorder::kInlinePeers;
      for (const auto& p : e.peers)
        whole = whole && p.rank == static_cast<int>(e.id % 1000) && p.sent == e.id && p.received == 2 * e.id;
      torn += !whole;
    }
  stop = true;
  writer.join();
  EXPECT_GT(seen, 0u);
  EXPECT_EQ(torn, 0u);
}

TEST(FlightRecorder, DumpHoldsEveryLiveGroupAsJson) {
  auto a = std::make_shared<FlightRecorder>(8, "first", "gloo", 0, 2);
  auto b = std::make_shared<FlightRecorder>(8, "second", "accl", 1, 3);
  internal::registerRecorder(a);
  internal::registerRecorder(b);
  uint64_t id = a->begin(OpType::Send, DataType::Int32, 5, -1, 1, 20);
  a->finished(id, nullptr);
  b->begin(OpType::Broadcast, DataType::Float64, 3, 2, -1, 24);
  std::string path = dumpTraces("unit test");
  ASSERT_FALSE(path.empty());
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["format"], "accl-trace/1");
  EXPECT_EQ(j["reason"], "unit test");
  EXPECT_EQ(j["pid"], static_cast<long>(getpid()));
  int seen = 0;
  for (auto& g : j["groups"]) {
    if (g["name"] == "first") {
      ++seen;
      EXPECT_EQ(g["backend"], "gloo");
      ASSERT_EQ(g["entries"].size(), 1u);
      EXPECT_EQ(g["entries"][0]["op"], "send");
      EXPECT_EQ(g["entries"][0]["peer"], 1);
      EXPECT_EQ(g["entries"][0]["state"], "done");
      EXPECT_EQ(g["entries"][0]["bytes"], 20);
    }
    if (g["name"] == "second") {
      ++seen;
      EXPECT_EQ(g["rank"], 1);
      EXPECT_EQ(g["size"], 3);
      EXPECT_EQ(g["entries"][0]["op"], "broadcast");
      EXPECT_EQ(g["entries"][0]["root"], 2);
      EXPECT_EQ(g["entries"][0]["state"], "queued");
      EXPECT_EQ(g["entries"][0]["dtype"], "float64");
    }
  }
  EXPECT_EQ(seen, 2);
  // A group that is gone is no longer dumped.
  b.reset();
  std::ifstream f2(dumpTraces("again"));
  nlohmann::json j2 = nlohmann::json::parse(f2);
  for (auto& g : j2["groups"]) EXPECT_NE(g["name"], "second");
  std::remove(path.c_str());
}

// A stall warning, a failure and SIGUSR1 may dump from three threads at once
// (seen in the soft-RoCE guest: a stall dump and a SIGUSR1 dump interleaved
// in one file, which then held one JSON document and the tail of another).
// Every file that a dump leaves must be one whole document.
TEST(FlightRecorder, ConcurrentDumpsLeaveWholeFiles) {
  auto rec = std::make_shared<FlightRecorder>(64, "concurrent", "accl", 0, 2);
  internal::registerRecorder(rec);
  for (int i = 0; i < 64; ++i) rec->finished(rec->begin(OpType::Allreduce, DataType::Float32, 8, -1, -1, 32), nullptr);
  std::atomic<int> torn{0}, written{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // Reasons of different lengths: documents of different sizes.
      std::string reason = "thread " + std::to_string(t) + std::string(static_cast<size_t>(t) * 400, 'x');
      for (int i = 0; i < 100; ++i) {
        std::string path = dumpTraces(reason);
        if (path.empty()) continue;
        ++written;
        std::ifstream f(path);
        try {
          nlohmann::json doc = nlohmann::json::parse(f);
          if (!doc.is_object()) ++torn;
        } catch (const nlohmann::json::exception&) {
          ++torn;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(written.load(), 400);
  EXPECT_EQ(torn.load(), 0) << "dump files that were not one JSON document";
  rec.reset();
  std::remove(dumpTraces("last").c_str());
}

// The always-on recorder dates ops by a ticker's copy of the coarse clock.
// Its times must follow real time while it ticks, after it parked in an idle
// process, and in a forked child (which has no ticker until its first op).
TEST(FlightRecorder, OpTimesFollowTheClockThroughTickerParkingAndFork) {
  using std::chrono::milliseconds;
  internal::setTraceTickerParkAfter(10);  // parks after 10-40 ms without ops
  FlightRecorder rec(16, "g", "accl", 0, 1);
  auto queuedUs = [&](uint64_t id) {
    for (const auto& e : rec.entries())
      if (e.id == id) return e.queuedUs;
    return int64_t(-1);
  };
  auto wallNowUs = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // The clock's resolution (1-4 ms), one tick of lag, and the ticker's
  // wake-ups late on a loaded machine; a clock that stood still would be off
  // by the whole sleep (100-600 ms).
  const int64_t slackUs = 50000;
  uint64_t a = rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0);
  int64_t ta = queuedUs(a);
  EXPECT_LE(std::llabs(ta - wallNowUs()), slackUs);
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_TRUE(internal::traceTickerParked()) << "no op for 600 ms: the ticker should have parked";
  uint64_t b = rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0);
  EXPECT_FALSE(internal::traceTickerParked()) << "an op wakes the ticker";
  int64_t tb = queuedUs(b);
  EXPECT_GE(tb - ta, 600000 - slackUs);
  EXPECT_LE(std::llabs(tb - wallNowUs()), slackUs);
  // Ticking: ops a few ms apart, none long enough to park it.
  int64_t prev = tb;
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
    uint64_t c = rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0);
    int64_t tc = queuedUs(c);
    EXPECT_GE(tc, prev - 2);  // each entries() converts to wall time anew: +-1 us
    EXPECT_LE(std::llabs(tc - wallNowUs()), slackUs) << "op " << i << " while ticking";
    prev = tc;
  }
  std::this_thread::sleep_for(milliseconds(20));
  if (kThreadSanitizer) {
    // TSan stops a forked child of a multi-threaded process that starts a thread.
    internal::setTraceTickerParkAfter(1000);
    GTEST_SKIP() << "the fork part: ThreadSanitizer does not support threads started after fork";
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: no ticker runs here
    std::this_thread::sleep_for(milliseconds(200));
    uint64_t d = rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0);
    int64_t td = queuedUs(d);
    std::this_thread::sleep_for(milliseconds(100));
    uint64_t e = rec.begin(OpType::Barrier, DataType::Uint8, 0, -1, -1, 0);
    int64_t te = queuedUs(e);
    bool ok = td - prev >= 200000 - slackUs && std::llabs(td - wallNowUs()) <= 100000 + slackUs &&
              te - td >= 100000 - slackUs && std::llabs(te - wallNowUs()) <= slackUs;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the forked child's op times did not follow the clock";
  internal::setTraceTickerParkAfter(1000);
}

// Ops of one group may be issued from several threads at once: each gets its
// own id and slot, and the ring holds all of them.
TEST(FlightRecorder, OpsIssuedFromSeveralThreadsAtOnceGetDistinctIds) {
  constexpr int kThreads = 4, kOps = 5000;
  FlightRecorder rec(kThreads * kOps, "g", "accl", 0, 2);
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ready++;
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kOps; ++i) {
        uint64_t id = rec.begin(OpType::Send, DataType::Uint8, static_cast<uint64_t>(t), -1, 1, 0);
        rec.finished(id, nullptr);
        got[static_cast<size_t>(t)].push_back(id);
      }
    });
  for (auto& th : ts) th.join();
  std::set<uint64_t> ids;
  for (auto& v : got) ids.insert(v.begin(), v.end());
  EXPECT_EQ(ids.size(), size_t(kThreads * kOps)) << "two ops got one id";
  auto e = rec.entries();
  ASSERT_EQ(e.size(), size_t(kThreads * kOps));
  std::vector<int> perThread(kThreads);
  for (const auto& x : e) {
    EXPECT_EQ(x.state, OpState::Done);
    ASSERT_LT(x.count, uint64_t(kThreads));
    perThread[x.count]++;
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(perThread[static_cast<size_t>(t)], kOps) << "thread " << t;
}
