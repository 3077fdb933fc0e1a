// The flight recorder's ring and its dump, against hand-made entries.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "accl/internal/trace_registry.h"

#include "accl/trace.h"

using namespace accl;

TEST(FlightRecorder, KeepsTheLastOpsWithTheirStatesInOrder) {
  FlightRecorder rec(3, "g", "accl", 1, 4);
  EXPECT_EQ(rec.capacity(), 4u);  // rounded up to a power of two
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(rec.begin(OpType::Allreduce, DataType::Float32, 10 + i, -1, -1, 40));
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  rec.started(ids[2], 7, "ring", "tcp");
  rec.finished(ids[2], nullptr);
  rec.started(ids[3], -1, nullptr, "shm+tcp");
  rec.finished(ids[3], std::make_exception_ptr(InvalidArgument("bad count")));
  rec.finished(ids[0], nullptr);  // overwritten already: ignored
  rec.waiting(ids[4], "has waited 60 s");
  auto e = rec.entries();
  ASSERT_EQ(e.size(), 4u);  // the last four, oldest first
  EXPECT_EQ(e[0].id, 3u);
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
  EXPECT_EQ(rec.firstFailure().id, 4u);
  EXPECT_EQ(rec.firstFailure().error, "bad count");
}

TEST(FlightRecorder, ReadersGetConsistentEntriesWhileOpsAreRecorded) {
  // One thread records ops (seq = id, so that a torn copy shows) while this
  // one reads the ring: every entry read is whole.
  FlightRecorder rec(64, "g", "accl", 0, 2);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> recorded{0};
  std::thread writer([&] {
    while (!stop.load()) {
      uint64_t id = rec.begin(OpType::Send, DataType::Uint8, 0, -1, 1, 0);
      rec.started(id, static_cast<int64_t>(id), "p2p", "tcp");
      rec.finished(id, nullptr);
      recorded++;
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
