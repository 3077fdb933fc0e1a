// Scratch buffers of a group's collectives, kept from op to op: a buffer
// allocated for one op costs, the first time each 4 KiB page is touched, a
// page fault and a zeroed page (about 0.85 ms per MiB on the VMs measured,
// docs/performance.md), more than moving the bytes over a fast link. The
// group runs one op at a time, so one set serves all its ops.
#pragma once

#include <cstddef>
#include <memory>

namespace accl {
namespace core {

class Scratch {
 public:
  // The buffers an op may hold at once, one per use.
  enum Slot { kOpWhole = 0, kTreeAcc = 1, kPieces = 2, kSlots = 3 };
  // A buffer that holds more than this is freed at the end of its op
  // (trim()), not kept: at most kSlots x kKeepMax stay between ops.
  static constexpr size_t kKeepMax = size_t(64) << 20;

  // A buffer of at least `bytes` in `slot`; its contents are undefined. A
  // larger request replaces the slot's buffer.
  char* get(Slot slot, size_t bytes) {
    Buf& b = bufs_[slot];
    if (b.cap < bytes) {
      b.p.reset();  // before the new one: never both at once
      b.p.reset(new char[bytes]);  // not value-initialised: pages are touched as bytes land
      b.cap = bytes;
    }
    return b.p.get();
  }
  // After an op: frees the buffers above kKeepMax.
  void trim() {
    for (Buf& b : bufs_)
      if (b.cap > kKeepMax) {
        b.p.reset();
        b.cap = 0;
      }
  }
  size_t keptBytes() const {
    size_t n = 0;
    for (const Buf& b : bufs_) n += b.cap;
    return n;
  }

 private:
  struct Buf {
    std::unique_ptr<char[]> p;
    size_t cap = 0;
  } bufs_[kSlots];
};

}  // namespace core
}  // namespace accl
