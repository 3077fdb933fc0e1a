#include "algorithms/algorithms.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "accl/internal/reduce_kernels.h"
#include "algorithms/scratch.h"

namespace accl {
namespace core {
namespace algo {

namespace {

int mod(int a, int p) { return ((a % p) + p) % p; }

// A buffer from the group's scratch (kept between ops), or this call's own
// where the Peers have none.
struct ScratchBuf {
  std::unique_ptr<char[]> own;
  char* p = nullptr;
  ScratchBuf() = default;
  ScratchBuf(const Peers& g, Scratch::Slot slot, size_t bytes) { take(g, slot, bytes); }
  char* take(const Peers& g, Scratch::Slot slot, size_t bytes) {
    if (!bytes) return p = nullptr;
    if (g.scratch) {
      p = g.scratch->get(slot, bytes);
    } else {
      own.reset(new char[bytes]);
      p = own.get();
    }
    return p;
  }
};

// A step of a reduction: sends `sendBytes` from `send` to peer `to` (unless
// `to` is -1), receives `count` elements from peer `from` and
// reduces them with `mine` into `acc` (acc = theirs op mine when
// `theirsFirst`, else mine op theirs: the same operand order on both sides
// gives identical bits; `mine` is `acc` in place, or the caller's input at
// an out-of-place op's first step). A large message goes in pieces (ids
// step + (piece << 16)) cut by exchangePiece() of its own size, so that
// sender and receiver cut it alike. Each piece received lands in one of
// three scratch slots (kAhead + 2), and while the transport moves the next
// piece this thread reduces the last. Receives are posted a piece ahead of
// sends: the peer sends piece i + 1 only once it has this rank's piece i,
// which is sent after the receive of piece i + 1 was posted, so no piece
// comes before its receive (it would be held and copied) unless the peer
// entered the op first.
// `send` may overlap `acc` where piece i of both is the same range (the
// exchange of recursive doubling): piece i has been sent when its reduction
// starts.
// How many pieces of `piece` bytes a message of `bytes` goes in (an empty
// message is one frame).
size_t pieceCount(size_t bytes, size_t piece) { return bytes ? (bytes + piece - 1) / piece : 1; }

// The first allgather step of a ring allreduce, run inside its last
// reduction step: each piece, once reduced, goes on to `to` at once (ids
// step + (piece << 16), cut as the reduction's pieces), and the peer `from`'s
// reduced block comes in the same way, into `in` (`inBytes`). The link then
// carries the allgather while the reduction still runs, instead of idling
// while the last piece is reduced and the allgather's first message starts.
struct Onward {
  int to = -1;
  int from = -1;
  uint32_t step = 0;
  char* in = nullptr;
  size_t inBytes = 0;
};

void sendRecvReduce(const Peers& g, uint32_t step, int to, const char* send, size_t sendBytes, int from,
                    const char* mine, char* acc, size_t count, DataType t, ReduceKind k, bool theirsFirst,
                    const Onward* on = nullptr) {
  size_t es = dataTypeSize(t), bytes = count * es;
  size_t pieceR = exchangePiece(bytes, es), pieceS = exchangePiece(sendBytes, es);
  size_t nRecv = pieceCount(bytes, pieceR);
  size_t nSend = to < 0 ? 0 : pieceCount(sendBytes, pieceS);
  size_t n = std::max(nRecv, nSend);
  // Sends in flight beyond the piece waited for: 1. Two and three measured no
  // better between namespace hosts (allreduce 1-64 MiB, 3 alternating rounds).
  constexpr size_t kAhead = 1;
  size_t slots = std::min<size_t>(nRecv, kAhead + 2);
  ScratchBuf tmp(g, Scratch::kPieces, nRecv > 1 ? slots * pieceR : bytes);
  // What was posted up to piece i's send (piece i and what came before), for
  // the pieces still to be waited for: i .. i + kAhead (no allocation per step).
  // With an onward step every wait is for a mark: the onward receives posted
  // so far are waited for only once the peer has had the pieces it reduces
  // before sending them (a wait for everything could wait for a piece the
  // peer sends only after this rank's next reduction).
  size_t marks[kAhead + 1] = {};
  auto postRecv = [&](size_t i) {
    if (i < nRecv)
      g.recv(from, step + static_cast<uint32_t>(i << 16), tmp.p + (i % slots) * pieceR,
             std::min(pieceR, bytes - i * pieceR));
  };
  auto postSend = [&](size_t i) {
    if (i < nSend)
      g.send(to, step + static_cast<uint32_t>(i << 16), send + i * pieceS, std::min(pieceS, sendBytes - i * pieceS));
    if ((n > 1 || on) && i < n) marks[i % (kAhead + 1)] = g.mark();
  };
  size_t pieceOn = on ? exchangePiece(on->inBytes, es) : 0;
  size_t nOn = on ? pieceCount(on->inBytes, pieceOn) : 0;
  auto postOnward = [&](size_t j) {
    if (j < nOn)
      g.recv(on->from, on->step + static_cast<uint32_t>(j << 16), on->in + j * pieceOn,
             std::min(pieceOn, on->inBytes - j * pieceOn));
  };
  postRecv(0);
  for (size_t i = 0; i < kAhead; ++i) {
    postSend(i);
    postRecv(i + 1);
  }
  postOnward(0);
  for (size_t i = 0; i < n; ++i) {
    // Piece i has arrived (and left); the next moves while it is reduced.
    if (i + 1 < n) {
      g.waitFor(marks[i % (kAhead + 1)]);
      postSend(i + kAhead);
      postRecv(i + kAhead + 1);  // into the slot of piece i - 1, reduced before
      postOnward(i + 1);
    } else if (on) {
      g.waitFor(marks[i % (kAhead + 1)]);
    } else {
      g.wait();
    }
    if (i < nRecv && bytes) {
      size_t lo = i * pieceR, len = std::min(pieceR, bytes - lo);
      char* a = acc + lo;
      const char* m = mine + lo;
      const char* theirs = tmp.p + (i % slots) * pieceR;
      if (theirsFirst) internal::reduce(a, theirs, m, len / es, t, k);
      else internal::reduce(a, m, theirs, len / es, t, k);
    }
    if (on && i < nRecv)
      g.send(on->to, on->step + static_cast<uint32_t>(i << 16), acc + i * pieceR,
             std::min(pieceR, bytes - i * pieceR));
  }
  if (on) {
    for (size_t j = n; j < nOn; ++j) postOnward(j);  // where the peer's block has more pieces
    g.wait();
  }
}

// Sends `bytes` to peer `to` cut as sendRecvReduce's receiver cuts them.
void sendInPieces(const Peers& g, uint32_t step, int to, const char* buf, size_t bytes, size_t es) {
  size_t piece = exchangePiece(bytes, es);
  size_t n = pieceCount(bytes, piece);
  for (size_t i = 0; i < n; ++i)
    g.send(to, step + static_cast<uint32_t>(i << 16), buf + i * piece, std::min(piece, bytes - i * piece));
  g.wait();
}

}  // namespace

namespace {

// The ring's reduction steps; the last one carries `last` (an onward step), if given.
void reduceScatterRingSteps(const Peers& g, const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                            ReduceKind k, const Onward* last) {
  int p = g.size(), me = g.me;
  size_t es = dataTypeSize(t);
  auto d = prefixSums(counts);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  int right = mod(me + 1, p), left = mod(me - 1, p);
  // Step s reduces block me - s - 2, which this rank has not touched before:
  // its own part comes from `in`; what it sends after the first step is the
  // block it reduced into `out` the step before. The last step reduces block me.
  for (int s = 0; s < p - 1; ++s) {
    int sendBlk = mod(me - s - 1, p), recvBlk = mod(me - s - 2, p);
    const char* src = (s == 0 ? i : o) + d[sendBlk] * es;
    sendRecvReduce(g, s, right, src, counts[sendBlk] * es, left, i + d[recvBlk] * es, o + d[recvBlk] * es,
                   counts[recvBlk], t, k, false, s == p - 2 ? last : nullptr);
  }
}

// The ring allgather's steps from `first` on (at step s block me - s goes to the
// right neighbour and block me - s - 1 comes from the left one).
void allgatherRingSteps(const Peers& g, void* out, const std::vector<size_t>& bytes, int first) {
  int p = g.size(), me = g.me;
  auto d = prefixSums(bytes);
  char* o = static_cast<char*>(out);
  int right = mod(me + 1, p), left = mod(me - 1, p);
  for (int s = first; s < p - 1; ++s) {
    int sendBlk = mod(me - s, p), recvBlk = mod(me - s - 1, p);
    g.recv(left, s, o + d[recvBlk], bytes[recvBlk]);
    g.send(right, s, o + d[sendBlk], bytes[sendBlk]);
    g.wait();
  }
}

}  // namespace

void reduceScattervRing(const Peers& g, const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                        ReduceKind k) {
  if (g.size() == 1) {
    if (in != out && counts[0]) std::memcpy(out, in, counts[0] * dataTypeSize(t));
    return;
  }
  reduceScatterRingSteps(g, in, out, counts, t, k, nullptr);
}

void allgathervRing(const Peers& g, void* out, const std::vector<size_t>& bytes) {
  if (g.size() == 1) return;
  allgatherRingSteps(g, out, bytes, 0);
}

void allgathervDirect(const Peers& g, void* out, const std::vector<size_t>& bytes) {
  int p = g.size(), me = g.me;
  auto d = prefixSums(bytes);
  char* o = static_cast<char*>(out);
  // Every receive is posted before the first send, so that no block comes
  // before its receive (it would be held and copied).
  for (int q = 1; q < p; ++q) {
    int from = mod(me - q, p);
    g.recv(from, 0, o + d[from], bytes[from]);
  }
  for (int q = 1; q < p; ++q) g.send(mod(me + q, p), 0, o + d[me], bytes[me]);
  if (p > 1) g.wait();
}

void allreduceRing(const Peers& g, const void* in, void* buf, size_t count, DataType t, ReduceKind k) {
  int p = g.size(), me = g.me;
  if (p == 1) {
    if (in != buf && count) std::memcpy(buf, in, count * dataTypeSize(t));
    return;
  }
  auto counts = equalParts(count, p);
  size_t es = dataTypeSize(t);
  std::vector<size_t> bytes(p);
  for (int i = 0; i < p; ++i) bytes[i] = counts[i] * es;
  // The allgather's steps follow the reduction's (step ids from p). Its first
  // step (this rank's reduced block to the right, the left's from the left)
  // runs inside the last reduction step, piece by piece.
  auto d = prefixSums(counts);
  int left = mod(me - 1, p);
  Onward on;
  on.to = mod(me + 1, p);
  on.from = left;
  on.step = static_cast<uint32_t>(p);
  on.in = static_cast<char*>(buf) + d[left] * es;
  on.inBytes = bytes[left];
  reduceScatterRingSteps(g, in, buf, counts, t, k, &on);
  Peers g2 = g;
  g2.stepBase += p;
  allgatherRingSteps(g2, buf, bytes, 1);
}

void allreduceRecursiveDoubling(const Peers& g, const void* in, void* buf, size_t count, DataType t, ReduceKind k) {
  int p = g.size(), me = g.me;
  size_t es = dataTypeSize(t), bytes = count * es;
  char* b = static_cast<char*>(buf);
  // This rank's data: the input until its first reduction, then `buf`.
  const char* cur = static_cast<const char*>(in);
  if (p == 1) {
    if (cur != b && bytes) std::memcpy(b, cur, bytes);
    return;
  }
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  int rem = p - pof2;
  // Steps: 0 folds the ranks beyond the power of two into their neighbours,
  // 1..log2(pof2) exchange, kUnfold sends the result back to the folded ranks.
  constexpr uint32_t kUnfold = 64;
  uint32_t step = 0;
  int newRank;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      sendInPieces(g, step, me + 1, cur, bytes, es);
      newRank = -1;
    } else {
      // Lower rank's data first, as the partner would order it.
      sendRecvReduce(g, step, -1, nullptr, 0, me - 1, cur, b, count, t, k, true);
      cur = b;
      newRank = me / 2;
    }
  } else {
    newRank = me - rem;
  }
  ++step;
  if (newRank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      int pn = newRank ^ mask;
      int partner = pn < rem ? pn * 2 + 1 : pn + rem;
      // Same operand order on both sides (lower rank first): identical bits.
      sendRecvReduce(g, step, partner, cur, bytes, partner, cur, b, count, t, k, partner < me);
      cur = b;
    }
  }
  if (me < 2 * rem) {
    if (me % 2 == 1) g.send(me - 1, kUnfold, b, bytes);
    else g.recv(me + 1, kUnfold, b, bytes);
    g.wait();
  }
}

void broadcastTree(const Peers& g, void* buf, size_t bytes, int root) {
  int p = g.size(), me = g.me;
  if (p == 1) return;
  int v = mod(me - root, p);
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      g.recv(mod(v - mask + root, p), 0, buf, bytes);
      g.wait();
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  while (mask > 0) {
    if (v + mask < p) g.send(mod(v + mask + root, p), 0, buf, bytes);
    mask >>= 1;
  }
  g.wait();
}

void broadcastRing(const Peers& g, void* buf, size_t bytes, int root) {
  int p = g.size(), me = g.me;
  if (p == 1) return;
  int v = mod(me - root, p);
  size_t piece = broadcastRingPiece(bytes);
  char* b = static_cast<char*>(buf);
  int next = mod(me + 1, p), prev = mod(me - 1, p);
  size_t n = pieceCount(bytes, piece);
  auto len = [&](size_t i) { return std::min(piece, bytes - i * piece); };
  // Every piece's receive is posted first (each lands in its own place in
  // `buf`), so that a piece coming while the one before is forwarded lands
  // in place rather than being held and copied.
  size_t base = g.mark();
  if (v > 0)
    for (size_t i = 0; i < n; ++i) g.recv(prev, static_cast<uint32_t>(i), b + i * piece, len(i));
  for (size_t i = 0; i < n; ++i) {
    if (v > 0) g.waitFor(base + i + 1);  // pieces 0..i have arrived (their receives came first)
    if (v < p - 1) g.send(next, static_cast<uint32_t>(i), b + i * piece, len(i));
  }
  g.wait();
}

void reduceTree(const Peers& g, const void* in, void* out, size_t count, DataType t, ReduceKind k,
                int root) {
  int p = g.size(), me = g.me;
  size_t es = dataTypeSize(t), bytes = count * es;
  // `mine`: this rank's partial result so far (its input until a child's data
  // is reduced into `acc`: the output at the root, else a scratch buffer,
  // taken only by a rank with children). Children's data comes in pieces, each
  // reduced while the next arrives; a leaf sends its input as it is.
  const char* mine = static_cast<const char*>(in);
  char* acc = me == root ? static_cast<char*>(out) : nullptr;
  ScratchBuf accBuf;
  if (p == 1) {
    if (acc != mine && bytes) std::memmove(acc, mine, bytes);
    return;
  }
  int v = mod(me - root, p);
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      sendInPieces(g, mask, mod(v - mask + root, p), mine, bytes, es);
      return;
    }
    if (v + mask < p) {
      if (!acc) acc = accBuf.take(g, Scratch::kTreeAcc, bytes);
      sendRecvReduce(g, mask, -1, nullptr, 0, mod(v + mask + root, p), mine, acc, count, t, k, false);
      mine = acc;
    }
  }
}

void alltoallvPairwise(const Peers& g, const void* in, const std::vector<size_t>& sendBytes, void* out,
                       const std::vector<size_t>& recvBytes) {
  int p = g.size(), me = g.me;
  auto sd = prefixSums(sendBytes), rd = prefixSums(recvBytes);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  if (sendBytes[me]) std::memcpy(o + rd[me], i + sd[me], sendBytes[me]);
  // Small blocks in one round: the receives first (no block comes before
  // its receive, to be held and copied), then the sends in the steps'
  // order. Ranks of an alltoallv may differ in this: a message matches its
  // receive by the step's id either way, and one that comes before its
  // receive is held.
  size_t largest = 0;
  for (int r = 0; r < p; ++r) largest = std::max({largest, sendBytes[r], recvBytes[r]});
  if (largest <= kAlltoallOneRoundBytes) {
    for (int s = 1; s < p; ++s) {
      int from = mod(me - s, p);
      g.recv(from, s, o + rd[from], recvBytes[from]);
    }
    for (int s = 1; s < p; ++s) {
      int to = mod(me + s, p);
      g.send(to, s, i + sd[to], sendBytes[to]);
    }
    if (p > 1) g.wait();
    return;
  }
  for (int s = 1; s < p; ++s) {
    int to = mod(me + s, p), from = mod(me - s, p);
    g.recv(from, s, o + rd[from], recvBytes[from]);
    g.send(to, s, i + sd[to], sendBytes[to]);
    g.wait();
  }
}

void gathervDirect(const Peers& g, const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  int p = g.size(), me = g.me;
  auto d = prefixSums(bytes);
  if (me == root) {
    char* o = static_cast<char*>(out);
    if (o + d[me] != in && bytes[me]) std::memmove(o + d[me], in, bytes[me]);
    for (int r = 0; r < p; ++r)
      if (r != me) g.recv(r, 0, o + d[r], bytes[r]);
  } else {
    g.send(root, 0, in, bytes[me]);
  }
  if (p > 1) g.wait();
}

void scattervDirect(const Peers& g, const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  int p = g.size(), me = g.me;
  auto d = prefixSums(bytes);
  if (me == root) {
    const char* i = static_cast<const char*>(in);
    if (i + d[me] != out && bytes[me]) std::memmove(out, i + d[me], bytes[me]);
    for (int r = 0; r < p; ++r)
      if (r != me) g.send(r, 0, i + d[r], bytes[r]);
  } else {
    g.recv(root, 0, out, bytes[me]);
  }
  if (p > 1) g.wait();
}

void barrierDissemination(const Peers& g) {
  int p = g.size(), me = g.me;
  uint32_t step = 0;
  for (int k = 1; k < p; k <<= 1, ++step) {
    g.send(mod(me + k, p), step, nullptr, 0);
    g.recv(mod(me - k, p), step, nullptr, 0);
    g.wait();
  }
}

}  // namespace algo
}  // namespace core
}  // namespace accl
