// TcpStore's wire handling without sockets, for the fuzz harnesses and tests
// (tests/fuzz): the same code the server and the client run.
#pragma once

#include <cstdint>
#include <string>

namespace accl {
namespace detail {

// The server's handling of one client's byte stream (delivered in small
// pieces); returns what the server would send back. Never throws.
std::string serveStoreBytes(const std::string& stream, const std::string& secret);
// "" if the 12-byte reply header `hdr` is well-formed and its body at most
// maxBody bytes (stored in *len), else what is wrong.
std::string checkReplyHeader(const char* hdr, size_t maxBody, uint32_t* len);
// The client's decoding of a whole reply frame to command `cmd`; throws
// accl::RemoteError when it is malformed.
void decodeStoreReply(uint8_t cmd, const std::string& reply);

}  // namespace detail
}  // namespace accl
