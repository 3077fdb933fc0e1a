// Exchanges BYTES between rank r and rank r + size/2 (local rank i of the
// first half of the hosts with local rank i of the second half), so that each
// local rank's traffic crosses hosts on its own. nic_rails_test.sh reads the
// interfaces' counters around it to see which NIC carried which rank.
//   accl-run -n 4 --netns A,B rail_pairs BYTES
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "accl/registry.h"

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (32u << 20);
  try {
    accl::Rendezvous rv = accl::rendezvousFromEnv();
    auto pg = accl::createProcessGroup("accl", rv.store, rv.rank, rv.size);
    int n = pg->size(), r = pg->rank();
    if (n % 2) throw accl::InvalidArgument("rail_pairs needs an even number of ranks");
    int peer = (r + n / 2) % n;
    size_t count = bytes / 4;
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(i * 7 + static_cast<size_t>(r));
    auto s = pg->send(accl::Buffer(out.data(), count, accl::DataType::Int32), peer);
    auto q = pg->recv(accl::Buffer(in.data(), count, accl::DataType::Int32), peer);
    s->wait();
    q->wait();
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) bad += in[i] != static_cast<int32_t>(i * 7 + static_cast<size_t>(peer));
    std::printf("rank %d <-> %d: %zu bytes, %s\n", r, peer, bytes, bad ? "WRONG" : "correct");
    pg->barrier()->wait();
    return bad ? 1 : 0;
  } catch (const accl::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", accl::toString(e.code()), e.what());
    return 1;
  }
}
