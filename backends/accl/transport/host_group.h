// The seam between the backend and the ranks of one host. Every rank has a
// host group, one rank included, so the backend issues the same calls
// whatever the layout: `ShmDomain` (shared memory, two or more local ranks)
// and `SoloHost` (this rank alone: the ops are copies or nothing) implement it.
//
// Contract, for every op:
// - all local ranks call it with the same descriptor `d` (the enclosing
//   op's), in the same order, and it returns by `deadline` or throws
//   (accl::Timeout naming the local ranks missing, RemoteError when a peer
//   failed);
// - buffers are host memory; `out` may equal `in` where stated;
// - reductions take element-wise kinds only (Sum, Prod, Min, Max, BAnd,
//   BOr, BXor): Avg and PremulSum are the caller's scaling.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "accl/types.h"
#include "transport/transport.h"

namespace accl {
namespace core {

class HostGroup {
 public:
  virtual ~HostGroup() = default;

  virtual int rank() const = 0;  // this rank's index among the local ranks
  virtual int size() const = 0;  // ranks on this host
  // How data moves between local ranks (INFO log), "" when there are none.
  virtual std::string describe() const = 0;

  // out = reduction of every local rank's in. In place when in == out.
  virtual void allreduce(const void* in, void* out, size_t count, DataType t, ReduceKind k,
                         const OpDesc& d, Clock::time_point deadline) = 0;
  // Only root's `out` is written (others may pass nullptr).
  virtual void reduce(const void* in, void* out, size_t count, DataType t, ReduceKind k, int root,
                      const OpDesc& d, Clock::time_point deadline) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root, const OpDesc& d, Clock::time_point deadline) = 0;
  // Local rank j contributes bytes[j]; out holds them concatenated in
  // local-rank order. In place when in == out + this rank's offset.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const OpDesc& d,
                          Clock::time_point deadline) = 0;
  // in holds sum(counts) elements; local rank j keeps the reduction of its range.
  virtual void reduceScatterv(const void* in, void* out, const std::vector<size_t>& counts, DataType t,
                              ReduceKind k, const OpDesc& d, Clock::time_point deadline) = 0;
  // sendBytes[j] bytes (contiguous, in local-rank order) go to local rank j.
  virtual void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                         const std::vector<size_t>& recvBytes, const OpDesc& d, Clock::time_point deadline) = 0;
  // Root receives bytes[j] from each local rank j, concatenated.
  virtual void gatherv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
                       const OpDesc& d, Clock::time_point deadline) = 0;
  // Root's in holds bytes[j] for each local rank j, concatenated.
  virtual void scatterv(const void* in, void* out, const std::vector<size_t>& bytes, int root,
                        const OpDesc& d, Clock::time_point deadline) = 0;
  virtual void barrier(const OpDesc& d, Clock::time_point deadline) = 0;
  // Where waits for the other local ranks add their time (nullptr: they do
  // not look at the clock).
  void timeWaits(WaitTimes* w) { waitTimes_ = w; }

 protected:
  WaitTimes* waitTimes_ = nullptr;
};

// The host group of a rank alone on its host (or with shared memory off).
std::unique_ptr<HostGroup> makeSoloHost();

}  // namespace core
}  // namespace accl
