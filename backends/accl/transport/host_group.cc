#include "transport/host_group.h"

#include <cstring>

namespace accl {
namespace core {

namespace {

// Moves `bytes` from in to out unless they are the same place.
void place(void* out, const void* in, size_t bytes) {
  if (out && in != out && bytes) std::memmove(out, in, bytes);
}

// One local rank: every reduction is the identity, every exchange a copy of
// this rank's own part.
class SoloHost : public HostGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return ""; }

  void allreduce(const void* in, void* out, size_t count, DataType t, ReduceKind, const OpDesc&,
                 Clock::time_point) override {
    place(out, in, count * dataTypeSize(t));
  }
  void reduce(const void* in, void* out, size_t count, DataType t, ReduceKind, int, const OpDesc&,
              Clock::time_point) override {
    place(out, in, count * dataTypeSize(t));
  }
  void broadcast(void*, size_t, int, const OpDesc&, Clock::time_point) override {}
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const OpDesc&,
                  Clock::time_point) override {
    place(out, in, bytes.at(0));
  }
  void reduceScatterv(const void* in, void* out, const std::vector<size_t>& counts, DataType t, ReduceKind,
                      const OpDesc&, Clock::time_point) override {
    place(out, in, counts.at(0) * dataTypeSize(t));
  }
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out, const std::vector<size_t>&,
                 const OpDesc&, Clock::time_point) override {
    place(out, in, sendBytes.at(0));
  }
  void gatherv(const void* in, void* out, const std::vector<size_t>& bytes, int, const OpDesc&,
               Clock::time_point) override {
    place(out, in, bytes.at(0));
  }
  void scatterv(const void* in, void* out, const std::vector<size_t>& bytes, int, const OpDesc&,
                Clock::time_point) override {
    place(out, in, bytes.at(0));
  }
  void barrier(const OpDesc&, Clock::time_point) override {}
};

}  // namespace

std::unique_ptr<HostGroup> makeSoloHost() { return std::unique_ptr<HostGroup>(new SoloHost()); }

}  // namespace core
}  // namespace accl
