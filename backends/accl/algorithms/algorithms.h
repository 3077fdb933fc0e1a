// Collective algorithms over point-to-point messages (transport-independent).
// Each works on a Peers view (index space 0..size-1) and on raw bytes; steps
// are numbered from 0 within the view's stepBase. Reductions take elementwise
// kinds only; Avg and PremulSum scaling is the caller's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "accl/types.h"
#include "transport/transport.h"

namespace accl {
namespace core {
namespace algo {

// Allreduce in place. Ring: reduce-scatter then allgather, 2(p-1) steps, each
// moving 1/p of the data (bandwidth-optimal). Recursive doubling: log2(p)
// steps of the whole vector, plus one step each way for the ranks beyond the
// largest power of two (latency-optimal). Both give bitwise-identical results
// on every rank.
// Out of place (`in` may be `buf`): the first step reads this rank's data
// from `in` and writes its reduction into `buf`, so no copy precedes them.
// The ring's first allgather step runs inside its last reduction step: each
// piece of this rank's block goes on to the right neighbour once reduced.
void allreduceRing(const Peers& g, const void* in, void* buf, size_t count, DataType t, ReduceKind k);
void allreduceRecursiveDoubling(const Peers& g, const void* in, void* buf, size_t count, DataType t, ReduceKind k);
inline void allreduceRing(const Peers& g, void* buf, size_t count, DataType t, ReduceKind k) {
  allreduceRing(g, buf, buf, count, t, k);
}
inline void allreduceRecursiveDoubling(const Peers& g, void* buf, size_t count, DataType t, ReduceKind k) {
  allreduceRecursiveDoubling(g, buf, buf, count, t, k);
}
// Binomial tree (log2 p steps) and pipelined chain (for large messages).
void broadcastTree(const Peers& g, void* buf, size_t bytes, int root);
void broadcastRing(const Peers& g, void* buf, size_t bytes, int root);
// The chain's piece size for a message of `bytes` (the cost model counts its steps).
inline size_t broadcastRingPiece(size_t bytes) { return std::max<size_t>(256u << 10, (bytes + 15) / 16); }
// The piece size of a reduction step of `bytes` (elements of `es` bytes):
// steps from 1 MiB go in pieces of bytes / 8, 256 KiB to 1 MiB, so that the
// reduction of one piece overlaps the transfer of the next; smaller steps go
// whole (the returned size is then at least `bytes`). Pieces of at most 1 MiB
// are reduced while the received piece is still in cache: between two
// namespace hosts, a 64-128 MiB ring allreduce reached 0.95 of iperf3's rate
// each way with them (median of 6 paired cells), 0.92 with 2 MiB and 0.87-0.92
// with 4 MiB; reduce_scatter and reduce of 16-128 MiB ran 1.1-1.4x faster.
inline size_t exchangePiece(size_t bytes, size_t es) {
  if (bytes < (1u << 20)) return std::max<size_t>(bytes, es);
  size_t p = std::min<size_t>(1u << 20, std::max<size_t>(256u << 10, bytes / 8));
  return p - p % es;
}
// Binomial tree reduction to root; out is written at root only.
void reduceTree(const Peers& g, const void* in, void* out, size_t count, DataType t, ReduceKind k,
                int root);
// out holds every rank's block (bytes[r]) in rank order; this rank's block is
// already in place. Ring: p-1 steps to the right neighbour; direct: one step,
// everyone to everyone.
void allgathervRing(const Peers& g, void* out, const std::vector<size_t>& bytes);
void allgathervDirect(const Peers& g, void* out, const std::vector<size_t>& bytes);
// in holds sum(counts) elements (this rank's contribution); out, of the same
// size, is scratch (it may be in): on return, this rank's block of out holds
// the reduction.
void reduceScattervRing(const Peers& g, const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                        ReduceKind k);
inline void reduceScattervRing(const Peers& g, void* work, const std::vector<size_t>& counts, DataType t,
                               ReduceKind k) {
  reduceScattervRing(g, work, work, counts, t, k);
}
// Pairwise exchange in p-1 steps. in and out must not overlap. Where no
// block is above kAlltoallOneRoundBytes, the steps go at once: every receive
// posted, then every send, one wait (one latency instead of p-1).
constexpr size_t kAlltoallOneRoundBytes = size_t(32) << 10;
void alltoallvPairwise(const Peers& g, const void* in, const std::vector<size_t>& sendBytes, void* out,
                       const std::vector<size_t>& recvBytes);
void gathervDirect(const Peers& g, const void* in, void* out, const std::vector<size_t>& bytes, int root);
void scattervDirect(const Peers& g, const void* in, void* out, const std::vector<size_t>& bytes, int root);
// Dissemination barrier: ceil(log2 p) steps of empty messages.
void barrierDissemination(const Peers& g);

}  // namespace algo
}  // namespace core
}  // namespace accl
