#include "accl/errors.h"

#include <cstring>
#include <string>

namespace accl {

const char* toString(ErrorCode c) {
  switch (c) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotSupported: return "NotSupported";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::RemoteError: return "RemoteError";
    case ErrorCode::SystemError: return "SystemError";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

std::string errorContext(int rank, int size, const std::string& backend, const std::string& what) {
  std::string s = "accl";
  if (rank >= 0) s += " rank " + std::to_string(rank) + "/" + std::to_string(size);
  if (!backend.empty()) s += " " + backend;
  return s + ": " + what;
}

std::string errnoMessage(const std::string& what, int err) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return what + ": " + text + " (errno " + std::to_string(err) + ")";
}

}  // namespace accl
