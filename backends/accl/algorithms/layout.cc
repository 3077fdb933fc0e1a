#include "algorithms/layout.h"

#include <algorithm>

namespace accl {
namespace core {

int Layout::localIndex(int r) const {
  const auto& h = hostRanks[hostOf[r]];
  return static_cast<int>(std::find(h.begin(), h.end(), r) - h.begin());
}

std::vector<int> Layout::leaders() const {
  std::vector<int> v;
  for (const auto& h : hostRanks) v.push_back(h[0]);
  return v;
}

std::vector<int> Layout::reps(int root) const {
  std::vector<int> v;
  for (size_t h = 0; h < hostRanks.size(); ++h)
    v.push_back(static_cast<int>(h) == hostOf[root] ? root : hostRanks[h][0]);
  return v;
}

std::vector<int> Layout::rail(int i) const {
  std::vector<int> v;
  for (const auto& h : hostRanks) v.push_back(h[i]);
  return v;
}

Layout::RailBlocks Layout::railBlocks(const std::vector<size_t>& sizes) const {
  const int L = static_cast<int>(local().size());
  RailBlocks b;
  b.seg.assign(L, 0);
  b.mine.resize(hosts);
  for (int i = 0; i < L; ++i)
    for (int h = 0; h < hosts; ++h) {
      int r = hostRanks[h][i];
      b.order.push_back(r);
      b.seg[i] += sizes[r];
    }
  for (int h = 0; h < hosts; ++h) b.mine[h] = sizes[hostRanks[h][localRank]];
  for (int h = 0; h < myHost; ++h) b.at += b.mine[h];
  return b;
}

Layout Layout::fromHostIds(const std::vector<std::string>& ids, int rank, bool shm) {
  Layout l;
  l.size = static_cast<int>(ids.size());
  l.rank = rank;
  l.shm = shm;
  l.hostOf.resize(ids.size());
  std::vector<std::string> hosts;
  for (int r = 0; r < l.size; ++r) {
    // Without shared memory every rank is a host of its own.
    std::string id = shm ? ids[r] : ids[r] + "/rank" + std::to_string(r);
    auto it = std::find(hosts.begin(), hosts.end(), id);
    l.hostOf[r] = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(id);
      l.hostRanks.emplace_back();
    }
    l.hostRanks[l.hostOf[r]].push_back(r);
  }
  l.hosts = static_cast<int>(hosts.size());
  l.maxLocal = 0;
  for (const auto& h : l.hostRanks) {
    l.maxLocal = std::max<int>(l.maxLocal, static_cast<int>(h.size()));
    l.uniform = l.uniform && h.size() == l.hostRanks[0].size();
  }
  l.myHost = l.hostOf[rank];
  l.localRank = l.localIndex(rank);
  return l;
}

}  // namespace core
}  // namespace accl
