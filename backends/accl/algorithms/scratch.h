// Scratch buffers of a group's collectives, kept from op to op
// (internal::KeptBuffer says why). The group runs one op at a time, so one
// set serves all its ops.
#pragma once

#include <cstddef>

#include "accl/internal/kept_buffer.h"

namespace accl {
namespace core {

class Scratch {
 public:
  // The buffers an op may hold at once, one per use.
  enum Slot { kOpWhole = 0, kTreeAcc = 1, kPieces = 2, kSlots = 3 };
  // A buffer that holds more than this is freed at the end of its op
  // (trim()), not kept: at most kSlots x kKeepMax stay between ops, and
  // only within the process's budget (ACCL_SCRATCH_KEEP_MB).
  static constexpr size_t kKeepMax = internal::KeptBuffer::kKeepMax;

  // A buffer of at least `bytes` in `slot`; its contents are undefined. A
  // larger request replaces the slot's buffer.
  char* get(Slot slot, size_t bytes) {
    used_ = true;
    return bufs_[slot].get(bytes);
  }
  // After an op: frees the buffers above kKeepMax or beyond the budget (no
  // look at them after an op that took none: most small ops).
  void trim() {
    if (!used_) return;
    used_ = false;
    for (auto& b : bufs_) b.trim();
  }
  size_t keptBytes() const {
    size_t n = 0;
    for (const auto& b : bufs_) n += b.capacity();
    return n;
  }

 private:
  internal::KeptBuffer bufs_[kSlots];
  bool used_ = false;  // get() was called since the last trim()
};

}  // namespace core
}  // namespace accl
