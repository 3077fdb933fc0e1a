// A scratch buffer kept from op to op. A buffer allocated for one op costs,
// the first time each 4 KiB page is touched, a page fault and a zeroed page
// (about 0.85 ms per MiB on the VMs measured, docs/performance.md): more
// than copying the bytes, and more than moving them over a fast link. A
// group that runs one op at a time keeps one per use and frees the large
// ones when the op ends (trim), so what stays between ops is bounded.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

namespace accl {
namespace internal {

class KeptBuffer {
 public:
  // A buffer of at least this size is freed by trim(), not kept.
  static constexpr size_t kKeepMax = size_t(64) << 20;

  // At least `bytes`; the contents are undefined. A larger request replaces
  // the buffer (the old one is freed first: never both at once).
  char* get(size_t bytes) {
    if (cap_ < bytes) {
      p_.reset();
      p_.reset(new char[bytes]);  // not value-initialised: pages are touched as bytes land
      cap_ = bytes;
    }
    return p_.get();
  }
  // A copy of `bytes` bytes at `src` in the buffer.
  char* copyOf(const void* src, size_t bytes) {
    char* p = get(bytes);
    std::memcpy(p, src, bytes);
    return p;
  }
  // After an op: frees the buffer if it holds more than kKeepMax.
  void trim() {
    if (cap_ > kKeepMax) {
      p_.reset();
      cap_ = 0;
    }
  }
  size_t capacity() const { return cap_; }

 private:
  std::unique_ptr<char[]> p_;
  size_t cap_ = 0;
};

}  // namespace internal
}  // namespace accl
