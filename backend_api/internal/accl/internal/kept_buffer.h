// A scratch buffer kept from op to op. A buffer allocated for one op costs,
// the first time each 4 KiB page is touched, a page fault and a zeroed page
// (about 0.85 ms per MiB on the VMs measured, docs/performance-history.md): more
// than copying the bytes, and more than moving them over a fast link. A
// group that runs one op at a time keeps one per use. When the op ends
// (trim), a buffer is kept only if it holds at most kKeepMax and fits the
// process's budget (ACCL_SCRATCH_KEEP_MB), which every kept buffer of every
// group and backend counts against; the others are freed.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

namespace accl {
namespace internal {

// The process's account of kept scratch (kept_buffer.cc): takes `bytes`
// from the budget if they fit (false: they do not), or gives them back.
bool reserveKeptScratch(size_t bytes);
void releaseKeptScratch(size_t bytes);
// Bytes of scratch kept between ops, over the whole process.
size_t keptScratchBytes();

class KeptBuffer {
 public:
  // A buffer larger than this is freed by trim(), not kept.
  static constexpr size_t kKeepMax = size_t(64) << 20;

  KeptBuffer() = default;
  KeptBuffer(KeptBuffer&& o) noexcept : p_(std::move(o.p_)), cap_(o.cap_), counted_(o.counted_) {
    o.cap_ = o.counted_ = 0;
  }
  KeptBuffer& operator=(KeptBuffer&& o) noexcept {
    if (this != &o) {
      free();
      p_ = std::move(o.p_);
      cap_ = o.cap_;
      counted_ = o.counted_;
      o.cap_ = o.counted_ = 0;
    }
    return *this;
  }
  ~KeptBuffer() { free(); }

  // At least `bytes`; the contents are undefined. A larger request replaces
  // the buffer (the old one is freed first: never both at once).
  char* get(size_t bytes) {
    if (cap_ < bytes) {
      free();
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
  // After an op: keeps the buffer if it holds at most kKeepMax and fits the
  // process's budget (a buffer kept before is counted already), else frees it.
  void trim() {
    if (cap_ == counted_) return;  // nothing, or kept since an earlier op
    if (cap_ <= kKeepMax && reserveKeptScratch(cap_)) counted_ = cap_;
    else free();
  }
  size_t capacity() const { return cap_; }

 private:
  void free() {
    p_.reset();
    cap_ = 0;
    if (counted_) releaseKeptScratch(counted_);
    counted_ = 0;
  }

  std::unique_ptr<char[]> p_;
  size_t cap_ = 0;
  size_t counted_ = 0;  // bytes of the process's budget this buffer holds (cap_ or 0)
};

}  // namespace internal
}  // namespace accl
