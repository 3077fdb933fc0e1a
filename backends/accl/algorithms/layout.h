// Where the ranks of a group are: which host each rank is on, and the lists
// of ranks the hierarchical algorithms talk to (host leaders, the
// representatives of a rooted op, the rails of a uniform layout).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace accl {
namespace core {

struct Layout {
  int size = 1;
  int hosts = 1;
  int maxLocal = 1;     // most ranks on one host
  bool uniform = true;  // every host has the same number of ranks
  bool shm = true;      // shared memory enabled (ACCL_TRANSPORTS)
  bool singleHost() const { return hosts == 1 && shm; }
  bool hierarchical() const { return shm && hosts > 1 && maxLocal > 1; }

  // Filled by fromHostIds (the selection tests build the counts alone).
  int rank = 0;
  std::vector<int> hostOf;                  // host index of each rank
  std::vector<std::vector<int>> hostRanks;  // ranks of each host, ascending
  int myHost = 0;
  int localRank = 0;  // this rank's index on its host

  // The ranks of this rank's host, ascending.
  const std::vector<int>& local() const { return hostRanks[myHost]; }
  // The index of group rank `r` among the ranks of its host.
  int localIndex(int r) const;
  // The first rank of every host, in host order.
  std::vector<int> leaders() const;
  // One rank per host for an op rooted at `root`: root on its host, the
  // first rank on the others.
  std::vector<int> reps(int root) const;
  // The ranks with local index `i` on every host (uniform layouts): the
  // ranks that exchange slice `i` in the hierarchical allreduce.
  std::vector<int> rail(int i) const;

  // An op's blocks (sizes[r] for rank r) seen along the rails of a uniform
  // layout, as the hierarchical allgather and reduce-scatter lay them out.
  struct RailBlocks {
    std::vector<int> order;    // the ranks in rail order: rail 0's in host order, then rail 1's, ...
    std::vector<size_t> seg;   // seg[i]: the blocks of rail i together
    std::vector<size_t> mine;  // mine[h]: the block of this rank's rail-mate on host h
    size_t at = 0;             // where this rank's own block starts within its rail's blocks
  };
  RailBlocks railBlocks(const std::vector<size_t>& sizes) const;

  // Builds the layout from every rank's host id (ranks with the same id share
  // a host). With shared memory off every rank counts as its own host.
  static Layout fromHostIds(const std::vector<std::string>& ids, int rank, bool shm);
};

}  // namespace core
}  // namespace accl
