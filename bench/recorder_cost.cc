// The cost of the flight recorder, side by side in the same processes and
// the same group: one group of all ranks takes turns running blocks of the
// same op on the same buffers with its recording on and paused
// (ProcessGroup::setRecording; paused, an op is issued as in a group made
// with record = false). One group for both sides: two groups differ in where
// their shared-memory segments lie, which on some machines moves a small
// op's time by more than the recorder does. Blocks start after a barrier; a
// block's time is its slowest rank's. The ratio on/off of each round (a block
// of each) is printed as the median over rounds with its spread, so that the
// machine's drift, which an A/B of two runs sees as noise, cancels out.
//   accl-run -n 2 accl-recorder-cost [--backend accl] [--sizes 8,4096] [--rounds 61] [--control]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "accl/config.h"
#include "accl/process_group.h"
#include "accl/registry.h"
#include "accl/trace.h"

namespace {

using Clock = std::chrono::steady_clock;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t i = static_cast<size_t>(pos);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (v[i + 1] - v[i]) * (pos - static_cast<double>(i));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accl-recorder-cost: an op's time with the flight recorder on against off, same processes"};
  std::string backend = "accl";
  std::vector<size_t> sizes = {8};
  int rounds = 61;
  double blockMs = 3.0;
  bool control = false;
  app.add_option("--backend", backend, "backend of both groups")->capture_default_str();
  app.add_option("--sizes", sizes, "allreduce sizes in bytes (float32; multiples of 4)")->delimiter(',');
  app.add_option("--rounds", rounds, "rounds per size (a block of each group per round)")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  app.add_option("--block-ms", blockMs, "length of one block")->check(CLI::Range(0.1, 1000.0))->capture_default_str();
  app.add_flag("--control", control,
               "both sides run with the recording paused (an A/A run: the on/off ratio it prints is the bench's own bias)");
  CLI11_PARSE(app, argc, argv);
  for (size_t s : sizes)
    if (s == 0 || s % 4) {
      std::fprintf(stderr, "accl-recorder-cost: --sizes: %zu is not a positive multiple of 4 (float32)\n", s);
      return 2;
    }
  try {
    auto rv = accl::rendezvousFromEnv();
    auto world = accl::createProcessGroup(backend, rv.store, rv.rank, rv.size);
    std::vector<int> all(static_cast<size_t>(world->size()));
    for (int r = 0; r < world->size(); ++r) all[static_cast<size_t>(r)] = r;
    accl::ProcessGroupOptions opts;
    opts.name = "recorder-cost";
    auto g = world->split(all, opts);
    const int n = world->size(), me = world->rank();
    if (!g->recorder()) {
      if (me == 0)
        std::fprintf(stderr, "accl-recorder-cost: the recorder is off in this environment (ACCL_TRACE_BUFFER=0 and "
                             "no ACCL_STATS or ACCL_TIMELINE): nothing to compare\n");
      return 2;
    }
    auto record = [&](bool on) { g->setRecording(on && !control); };
    if (me == 0) {
      const accl::Config& c = accl::Config::get();
      std::printf("# allreduce float32 sum, %d ranks, %s backend; recorder: %s%d%s%s; %d rounds of "
                  "%.1f ms blocks per size\n",
                  n, backend.c_str(), control ? "paused on both sides (--control), ACCL_TRACE_BUFFER=" : "ACCL_TRACE_BUFFER=",
                  c.traceBuffer, c.stats ? ", ACCL_STATS=1" : "", c.timeline.empty() ? "" : ", ACCL_TIMELINE", rounds,
                  blockMs);
      std::printf("# %10s %10s %10s %8s %8s %8s %6s\n", "bytes", "off_us", "on_us", "on/off", "p10", "p90", "wrong");
    }
    double slowest = 0;  // for the max over ranks
    auto maxOverRanks = [&](double v) {
      slowest = v;
      accl::AllreduceOptions o;
      o.op = accl::ReduceKind::Max;
      o.blocking = true;
      world->allreduce(accl::Buffer(&slowest, 1, accl::DataType::Float64), o)->wait();
      return slowest;
    };
    for (size_t bytes : sizes) {
      size_t count = bytes / 4;
      std::vector<float> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(me + 1);
      const float want = static_cast<float>(n * (n + 1) / 2);
      long wrong = 0;
      accl::AllreduceOptions o;
      o.blocking = true;
      auto run = [&](accl::ProcessGroup& g, int iters) {
        for (int i = 0; i < iters; ++i)
          g.allreduce(accl::Buffer(in.data(), count, accl::DataType::Float32),
                      accl::Buffer(out.data(), count, accl::DataType::Float32), o)
              ->wait();
        for (size_t i = 0; i < count; i += std::max<size_t>(1, count / 16))
          if (out[i] != want) ++wrong;
      };
      // Iterations per block: from a warm-up timed with the recording on,
      // agreed on by all ranks (the largest estimate).
      record(true);
      run(*g, 200);
      record(false);
      run(*g, 200);
      record(true);
      auto t0 = Clock::now();
      run(*g, 200);
      double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 200;
      double perOp = maxOverRanks(us);
      int iters = std::max(1, static_cast<int>(blockMs * 1000.0 / std::max(perOp, 1e-3)));
      std::vector<double> tOff, tOn, ratio;
      for (int r = 0; r < rounds; ++r) {
        double t[2];
        for (int k = 0; k < 2; ++k) {
          int which = (r + k) % 2;  // who runs first alternates
          record(which == 1);
          world->barrier()->wait();
          auto b0 = Clock::now();
          run(*g, iters);
          t[which] = std::chrono::duration<double, std::micro>(Clock::now() - b0).count() / iters;
        }
        double a = maxOverRanks(t[0]), b = maxOverRanks(t[1]);
        tOff.push_back(a);
        tOn.push_back(b);
        ratio.push_back(b / a);
      }
      double wrongAll = maxOverRanks(static_cast<double>(wrong));
      if (me == 0)
        std::printf("  %10zu %10.3f %10.3f %8.3f %8.3f %8.3f %6.0f\n", bytes, quantile(tOff, 0.5), quantile(tOn, 0.5),
                    quantile(ratio, 0.5), quantile(ratio, 0.1), quantile(ratio, 0.9), wrongAll);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accl-recorder-cost: %s\n", e.what());
    return 1;
  }
  return 0;
}
