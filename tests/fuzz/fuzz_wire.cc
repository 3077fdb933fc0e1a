// The accl backend's wire parsers: the Hello a listener reads first, then
// frame headers (validated before a payload length is trusted), as a byte
// stream from a peer would present them.
#include <cstdint>
#include <cstring>
#include <string>

#include "transport/wire.h"

using namespace accl::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int nstreams[4] = {2, 2, 2, 2};
  const uint64_t token = 0x1122334455667788ull;
  size_t off = 0;
  if (size < sizeof(Hello)) return 0;
  Hello h;
  std::memcpy(&h, data, sizeof(h));
  off += sizeof(h);
  std::string why = validateHello(h, token, 0, 4, nstreams);
  if (!why.empty()) return 0;
  off += h.idLen;  // the host id is opaque bytes
  while (off + sizeof(FrameHeader) <= size) {
    FrameHeader f;
    std::memcpy(&f, data + off, sizeof(f));
    off += sizeof(f);
    bool valid = validateHeader(f).empty();
    if (valid != headerValid(f)) __builtin_trap();  // the quick check and the described one disagree
    if (!valid) return 0;  // the connection is dropped
    std::string d = describe(f.desc);
    if (d.empty()) __builtin_trap();
    if (f.len > size - off) return 0;  // waits for more bytes
    off += static_cast<size_t>(f.len);
  }
  return 0;
}
