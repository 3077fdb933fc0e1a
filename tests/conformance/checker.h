// Conformance checks: run one collective on a ProcessGroup and compare every
// element against a reference this rank computes on its own from the
// deterministic inputs of all ranks. Backend-agnostic: any backend plugs in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accl/process_group.h"

namespace accl {
namespace conformance {

struct Case {
  OpType op = OpType::Allreduce;
  DataType dtype = DataType::Float32;
  ReduceOp reduce{};
  size_t count = 0;  // per-rank element count (chunk size for *gather/scatter/alltoall)
  int root = 0;
  bool inPlace = false;
  uint64_t seed = 1;
  std::string describe() const;
};

// Runs `c` on `pg` (collective: every rank of `pg` must call it with the same
// case) and returns what was wrong; empty when every element matched.
// OpType::Send is a ring of send/recv (tag from the seed).
std::vector<std::string> runCase(ProcessGroup& pg, const Case& c);

// The same in two steps, for ops left in flight: startCase fills the inputs
// and issues the op; finish() waits for it and checks every element (and that
// out-of-place inputs are unchanged). The case's buffers live until finish()
// has run and the PendingCase is gone. An op that threw when issued is
// reported by finish().
struct PendingCase {
  std::vector<std::shared_ptr<Work>> works;  // in flight (empty when issuing threw)
  std::function<std::vector<std::string>()> finish;
};
PendingCase startCase(ProcessGroup& pg, const Case& c);

// Point-to-point checks: a ring of send/recv, and recv from any source.
std::vector<std::string> runRing(ProcessGroup& pg, DataType t, size_t count, uint64_t seed);
std::vector<std::string> runAnySource(ProcessGroup& pg, DataType t, size_t count, uint64_t seed);
// ProcessGroup::sendrecv in a ring (send to the next rank, receive from the
// previous one), three rounds: every rank calls sendrecv (blocking); the odd ranks post a
// plain recv and send instead (each half must match them); the receive from
// any source (sourceRank() must name the previous rank), skipped where the
// backend says it cannot receive from any source.
std::vector<std::string> runSendRecv(ProcessGroup& pg, DataType t, size_t count, uint64_t seed);

// The counts every op is checked with: 0, 1, 7 and an odd count whose size
// exceeds 1 MiB for `t`.
std::vector<size_t> standardCounts(DataType t);
// The size of that odd count (1 MiB by default; CI's short runs take less).
void setLargeCountBytes(size_t bytes);
std::vector<ReduceKind> validReductions(DataType t);
std::vector<DataType> allDataTypes();

// Unit roundoff of a floating-point dtype: 2^-p (p = significand bits).
long double unitRoundoff(DataType t);

}  // namespace conformance
}  // namespace accl
