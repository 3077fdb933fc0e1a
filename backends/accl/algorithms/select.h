// Algorithm selection: by op, message size, rank count and host layout;
// ACCL_ALGO overrides it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/layout.h"

namespace accl {
namespace core {

enum class Algo : uint8_t { Auto, Shm, Ring, RecursiveDoubling, Tree, Direct, Hierarchical };
enum class Coll : uint8_t {
  Allreduce,
  Broadcast,
  Reduce,
  Allgather,
  ReduceScatter,
  Alltoall,
  Gather,
  Scatter,
  Barrier,
};
constexpr int kNumColls = 9;

// The algorithm's name (a static string; inline: the flight recorder keeps it per op).
inline const char* toString(Algo a) {
  static constexpr const char* kNames[] = {"auto", "shm", "ring", "recursive_doubling", "tree", "direct",
                                           "hierarchical"};
  return static_cast<unsigned>(a) < sizeof(kNames) / sizeof(kNames[0]) ? kNames[static_cast<unsigned>(a)] : "?";
}
const char* toString(Coll c);

class CostModel;

struct AlgoOverrides {
  std::array<Algo, kNumColls> algo{};
  // What the fixed size thresholds take the link between hosts for: the
  // backend sets it where its group reaches other hosts over verbs (false:
  // TCP). Not from ACCL_ALGO.
  bool rdmaBetweenHosts = false;
};

// Parses ACCL_ALGO ("allreduce:ring;broadcast:tree"); throws InvalidArgument
// naming the variable, the bad part and what is accepted.
AlgoOverrides parseAlgoSpec(const std::string& spec);

// Above this many bytes (the whole vector) an allgather goes flat (the
// ring) even where hosts have as many ranks: along rails it copies the
// whole vector twice more, through the segment and into rank order (2
// namespace hosts x 2 ranks on 2 cores, 128 MiB: 2.3x the ring's time;
// 1-16 MiB: as fast or faster).
constexpr size_t kHierarchicalAllgatherMax = size_t(16) << 20;
// Above this many bytes (all a rank sends) an alltoall goes flat: along
// rails each block also crosses the segment and is copied three times more
// (2 namespace hosts x 2 ranks on 2 cores, forced both ways in 2 runs: along
// rails 0.3 of the flat exchange's time at 128 B - 32 KiB, 0.34-0.87 at
// 64-128 KiB, 0.81-1.09 at 256 KiB, 1.1-1.3 at 512 KiB, 1.4-2.4 at 1-4 MiB).
constexpr size_t kHierarchicalAlltoallMax = size_t(256) << 10;
// Above this many bytes (one rank's block) a scatter goes flat: through one
// rank per host, each block crosses the segment once more after its host's
// message. 2 namespace hosts x 2 ranks, forced both ways (accl time / Open
// MPI's): scatter 0.71-1.26 through the hosts' ranks against 1.00-1.83
// direct at 16 B - 8 KiB blocks; at 512 KiB blocks direct was faster. A
// gather through them was slower at blocks up to 1 KiB (6.7-13 us against
// 2.9-9.3 us: the host's representative waits for its local ranks before it
// sends, where each rank sent at once), as fast at 8 KiB, faster at 64 KiB:
// it goes through them only where ACCL_ALGO says gather:hier.
constexpr size_t kHierarchicalGatherMax = size_t(64) << 10;

// Whether `c` with `bytes` (as choose() counts them) goes through the hosts'
// ranks by default where some host has several ranks (uniform: every host
// has as many, which the ops along rails need), within the bounds above.
// choose() and the cost model's plan both ask this.
bool hierarchicalByDefault(Coll c, size_t bytes, bool uniform);

// The algorithm for `c` with `bytes` of payload per rank (total for
// allgather/reduce_scatter/alltoall). Returns Shm for single-host groups.
// Between hosts, ACCL_ALGO's choice first; then, given a cost model (a
// tuning file), the algorithm it predicts fastest; else fixed size thresholds.
Algo choose(Coll c, size_t bytes, const Layout& l, const AlgoOverrides& o, const CostModel* m = nullptr);
// The algorithm of an exchange among `hosts` ranks over the network (for
// hierarchical ops, one rank per host); `hostCount`: the hosts they are on,
// for the cost model (0: one rank per host).
Algo chooseInterHost(Coll c, size_t bytes, int hosts, const AlgoOverrides& o, const CostModel* m = nullptr,
                     int hostCount = 0);

// One line per op: which algorithm each size range gets (logged at INFO).
std::string describeSelection(const Layout& l, const AlgoOverrides& o, const CostModel* m = nullptr);

}  // namespace core
}  // namespace accl
