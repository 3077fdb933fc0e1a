// TcpStore's server: any byte stream a client may send, with and without a
// shared secret. The server must answer or refuse, never crash or loop.
#include <cstdint>
#include <string>

#include "accl/internal/store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string secret = (data[0] & 1) ? "fuzz-secret" : "";
  accl::detail::serveStoreBytes(stream, secret);
  return 0;
}
