// The flight recorder: every process group keeps its last ACCL_TRACE_BUFFER
// ops (default 2000; 0 turns it off) in a ring, with when each was queued,
// started and finished, its algorithm and transport, and how it failed. The
// rings of all groups of a process are written as one JSON file
// (ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json) when an op times out or fails,
// on SIGUSR1, and when dumpTraces() is called; accl-diag reads them.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "accl/process_group.h"

namespace accl {

enum class OpState : uint8_t { Queued, Started, Done, Failed };
const char* toString(OpState s);

struct TraceEntry {
  uint64_t id = 0;         // the group's op counter (every op, point-to-point included), from 1
  int64_t seq = -1;        // the backend's collective sequence number where it has one
  OpType op = OpType::Barrier;
  DataType dtype = DataType::Uint8;
  uint64_t count = 0;
  int root = -1;           // rooted collectives
  int peer = -1;           // send / recv (-1: any source)
  uint64_t bytes = 0;      // this rank's payload
  std::string algorithm;   // as the backend chose it ("ring", "shm", ...)
  std::string transport;   // "shm", "tcp", "ib", "shm+tcp", ...
  OpState state = OpState::Queued;
  int64_t queuedUs = 0;    // wall-clock microseconds since the epoch; 0: not yet
  int64_t startedUs = 0;
  int64_t finishedUs = 0;
  std::string error;       // the failure's message
};

class FlightRecorder {
 public:
  FlightRecorder(size_t capacity, std::string group, std::string backend, int rank, int size);

  // A new op; returns its id.
  uint64_t begin(OpType op, DataType dtype, uint64_t count, int root, int peer, uint64_t bytes);
  // The backend started running op `id`, as `algorithm` over `transport`
  // (both static strings or nullptr; at most 15 characters of the transport
  // are kept); `seq` is its collective sequence number (-1: none).
  void started(uint64_t id, int64_t seq, const char* algorithm, const char* transport);
  // Op `id` completed; a Timeout or RemoteError also writes the dump
  // (at most once every 10 s per process).
  void finished(uint64_t id, const std::exception_ptr& error);

  // The entries still in the ring, oldest first.
  std::vector<TraceEntry> entries() const;
  const std::string& group() const { return group_; }
  const std::string& backend() const { return backend_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t capacity() const { return ring_.size(); }

 private:
  // One op as the ring keeps it: fixed-size fields and steady-clock times,
  // so that recording allocates nothing.
  struct Slot {
    uint64_t id = 0;
    int64_t seq = -1;
    OpType op = OpType::Barrier;
    DataType dtype = DataType::Uint8;
    OpState state = OpState::Queued;
    uint64_t count = 0, bytes = 0;
    int root = -1, peer = -1;
    const char* algorithm = nullptr;
    char transport[16] = {0};
    int64_t queuedNs = 0, startedNs = 0, finishedNs = 0;  // steady clock
    std::string error;
  };
  Slot* find(uint64_t id);  // under mu_; nullptr once overwritten

  mutable std::mutex mu_;
  std::vector<Slot> ring_;
  uint64_t next_ = 1;
  std::string group_, backend_;
  int rank_, size_;
};

// Writes the flight recorders of every live group of this process to
// ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json (replacing an earlier dump),
// saying why (`reason`). Returns the file's path; "" when tracing is off or
// the file could not be written (logged).
std::string dumpTraces(const std::string& reason);

}  // namespace accl
