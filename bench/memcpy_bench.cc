// The physical limit of shared-memory collectives on this host: memcpy
// bandwidth with 1 and 2 threads. Prints "threads bytes GB/s" lines.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t{64} << 20);
  int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  for (int threads : {1, 2}) {
    std::vector<std::vector<char>> src(threads, std::vector<char>(bytes, 1)), dst(threads, std::vector<char>(bytes, 0));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { std::memcpy(dst[t].data(), src[t].data(), bytes); });
      for (auto& t : ts) t.join();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%d %zu %.3f\n", threads, bytes, threads * bytes / best / 1e9);
  }
  return 0;
}
