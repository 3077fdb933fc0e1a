// accl-perf --calibrate FILE: measures the cost model's parameters of the
// link between rank 0 and a peer (send/recv through the group under test)
// and writes them as the tuning file the accl backend reads
// (ACCL_TUNING_FILE).
#include "calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "accl/errors.h"
#include "algorithms/cost_model.h"

namespace accl_perf {

using Clock = std::chrono::steady_clock;
using accl::Buffer;
using accl::DataType;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One-way time (us) of `bytes` between rank 0 and `peer`: the best of
// `reps` blocks of `iters` round trips, halved. Other ranks only take part
// in the barriers.
double pingPong(accl::ProcessGroup& pg, int peer, std::vector<char>& buf, size_t bytes, int iters, int reps) {
  int me = pg.rank();
  Buffer b(buf.data(), bytes, DataType::Uint8);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (me == 0) {
        pg.send(b, peer, accl::SendOptions{})->wait();
        pg.recv(b, peer, accl::RecvOptions{})->wait();
      } else if (me == peer) {
        pg.recv(b, 0, accl::RecvOptions{})->wait();
        pg.send(b, 0, accl::SendOptions{})->wait();
      }
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters / 2 * 1e6);
  }
  return best;
}

// Time (us) of an exchange of `bytes` each way between rank 0 and `peer`
// (both send and receive at once, as the steps of ring and recursive
// doubling do): the best of `reps` blocks of `iters`.
double exchange(accl::ProcessGroup& pg, int peer, std::vector<char>& out, std::vector<char>& in, size_t bytes,
                int iters, int reps) {
  int me = pg.rank();
  int other = me == 0 ? peer : 0;
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (me != 0 && me != peer) continue;
      auto rw = pg.recv(Buffer(in.data(), bytes, DataType::Uint8), other, accl::RecvOptions{});
      pg.send(Buffer(out.data(), bytes, DataType::Uint8), other, accl::SendOptions{})->wait();
      rw->wait();
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters * 1e6);
  }
  return best;
}

// Time (us) for rank 0 to have `k` 8-byte messages to `peer` acknowledged
// (all posted at once, then one reply): the per-message overhead is the
// growth with k.
double burst(accl::ProcessGroup& pg, int peer, int k, int iters, int reps) {
  int me = pg.rank();
  std::vector<uint64_t> v(static_cast<size_t>(k) + 1);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      std::vector<std::shared_ptr<accl::Work>> w;
      if (me == 0) {
        for (int j = 0; j < k; ++j) w.push_back(pg.send(Buffer(&v[static_cast<size_t>(j)], 1, DataType::Uint64), peer, accl::SendOptions{}));
        for (auto& x : w) x->wait();
        pg.recv(Buffer(&v[static_cast<size_t>(k)], 1, DataType::Uint64), peer, accl::RecvOptions{})->wait();
      } else if (me == peer) {
        for (int j = 0; j < k; ++j) w.push_back(pg.recv(Buffer(&v[static_cast<size_t>(j)], 1, DataType::Uint64), 0, accl::RecvOptions{}));
        for (auto& x : w) x->wait();
        pg.send(Buffer(&v[static_cast<size_t>(k)], 1, DataType::Uint64), 0, accl::SendOptions{})->wait();
      }
    }
    best = std::min(best, seconds(t0, Clock::now()) / iters * 1e6);
  }
  return best;
}

// Reduction time per byte (us) of a float32 sum on this core, out of cache
// (16 MiB inputs): two reads and a write per element, as the backend's
// reduction kernels do.
double reduceRate() {
  const size_t n = 4u << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double best = 1e300;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    for (size_t i = 0; i < n; ++i) pa[i] += pb[i];
    best = std::min(best, seconds(t0, Clock::now()));
  }
  if (a[n / 2] < 3.0f) std::fprintf(stderr, "accl-perf: --calibrate: the reduction loop went wrong\n");
  return best * 1e6 / static_cast<double>(n * sizeof(float));
}

}  // namespace

int calibrate(accl::ProcessGroup& pg, const CalibrateArgs& a) {
  int n = pg.size(), me = pg.rank();
  int peer = a.peer < 0 ? n - 1 : a.peer;
  if (n < 2 || peer <= 0 || peer >= n) {
    if (me == 0)
      std::fprintf(stderr, "accl-perf: --calibrate needs at least 2 ranks and a peer in 1..%d (got %d of %d ranks)\n",
                   n - 1, peer, n);
    return 2;
  }
  // Sizes from one small frame to several chunks: the latency from the
  // smallest, the bandwidth from a least-squares line through the large ones.
  std::vector<size_t> sizes = {8, 1024, 65536, 1u << 20, 4u << 20, 16u << 20};
  std::vector<char> buf(sizes.back()), buf2(sizes.back());
  std::vector<double> t, x;
  for (size_t s : sizes) {
    int iters = s <= 65536 ? 200 : s <= (1u << 20) ? 20 : 5;
    pingPong(pg, peer, buf, s, 3, 1);  // warm-up
    t.push_back(pingPong(pg, peer, buf, s, iters, 5));
    x.push_back(exchange(pg, peer, buf, buf2, s, iters, 5));
  }
  double b1 = burst(pg, peer, 1, 100, 5), b16 = burst(pg, peer, 16, 100, 5);
  double gamma = reduceRate();
  if (me != 0) {
    pg.barrier()->wait();
    return 0;
  }
  // Bandwidth: slope of the exchange's time over the sizes >= 1 MiB (least
  // squares). The collectives' steps send and receive at once, and a link
  // (or the CPUs that drive TCP) may not carry both directions at the
  // one-way rate.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < (1u << 20)) continue;
    double xs = static_cast<double>(sizes[i]), y = x[i];
    sx += xs, sy += y, sxx += xs * xs, sxy += xs * y, ++m;
  }
  double beta = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  if (!(beta > 0)) beta = x.back() / static_cast<double>(sizes.back());  // noise: the largest size alone
  accl::core::CostModel model;
  model.transport = a.transport;
  auto& l = model.link();
  l.alphaUs = t.front();
  l.betaUsPerB = beta;
  l.gammaUsPerB = gamma;
  l.overheadUs = std::max(0.0, (b16 - b1) / 15);
  nlohmann::json j = nlohmann::json::parse(model.toJson());
  nlohmann::json meas = nlohmann::json::array();
  for (size_t i = 0; i < sizes.size(); ++i)
    meas.push_back({{"bytes", sizes[i]}, {"one_way_us", t[i]}, {"exchange_us", x[i]}});
  j["measured"] = {{"backend", pg.backendName()},
                   {"ranks", n},
                   {"between_ranks", {0, peer}},
                   {"ping_pong", meas},
                   {"burst_us", {{"1", b1}, {"16", b16}}},
                   {"method", "alpha: one-way time of 8 B (half a round trip, best of 5 blocks); beta: least-squares "
                              "slope over 1-16 MiB of the time of an exchange (both ranks send and receive at once); gamma: float32 sum of 16 MiB on one core; "
                              "overhead: growth of a burst of 16 8-byte sends over 1, per message"}};
  std::ofstream f(a.file);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "accl-perf: --calibrate: cannot write %s\n", a.file.c_str());
    pg.barrier()->wait();
    return 1;
  }
  std::printf("# calibration of the link between ranks 0 and %d (%s backend, recorded as %s)\n", peer,
              pg.backendName().c_str(), a.transport.c_str());
  std::printf("#      bytes  one-way us  exchange us   model us\n");
  for (size_t i = 0; i < sizes.size(); ++i)
    std::printf("%12zu  %10.2f  %11.2f %10.2f\n", sizes[i], t[i], x[i],
                l.alphaUs + static_cast<double>(sizes[i]) * l.betaUsPerB);
  std::printf("alpha %.2f us, bandwidth %.3f GB/s, reduction %.3f GB/s, per-message overhead %.2f us\n", l.alphaUs,
              1e-3 / l.betaUsPerB, 1e-3 / l.gammaUsPerB, l.overheadUs);
  std::printf("wrote %s: ACCL_TUNING_FILE=%s lets the accl backend choose by this model; accl-info --plan shows "
              "its choices\n",
              a.file.c_str(), a.file.c_str());
  pg.barrier()->wait();
  return 0;
}

}  // namespace accl_perf
