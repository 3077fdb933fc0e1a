// TcpStore's client: any reply frame a server (or an impostor) may send to
// each command. Malformed replies are accl::RemoteError, nothing else.
#include <cstdint>
#include <string>

#include "accl/errors.h"
#include "accl/internal/store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t cmd = static_cast<uint8_t>(1 + data[0] % 10);
  std::string reply(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    accl::detail::decodeStoreReply(cmd, reply);
  } catch (const accl::RemoteError&) {
  }
  return 0;
}
