// Sums a vector over all ranks with the backend named on the command line.
//   accl-run -n 4 ./allreduce_example gloo
#include <cstdio>
#include <vector>

#include "accl/registry.h"

int main(int argc, char** argv) {
  const char* backend = argc > 1 ? argv[1] : "gloo";
  try {
    accl::Rendezvous rv = accl::rendezvousFromEnv();
    auto pg = accl::createProcessGroup(backend, rv.store, rv.rank, rv.size);
    std::vector<float> v(1000, static_cast<float>(pg->rank() + 1));
    pg->allreduce(accl::Buffer(v.data(), v.size(), accl::DataType::Float32))->wait();
    float want = pg->size() * (pg->size() + 1) / 2.0f;
    bool ok = v.front() == want && v.back() == want;
    std::printf("rank %d/%d: %s allreduce -> %g (%s)\n", pg->rank(), pg->size(), backend, v[0],
                ok ? "correct" : "WRONG");
    pg->barrier()->wait();
    return ok ? 0 : 1;
  } catch (const accl::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", accl::toString(e.code()), e.what());
    return 1;
  }
}
