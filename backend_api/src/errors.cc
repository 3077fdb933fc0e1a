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

void throwError(ErrorCode code, const std::string& msg) {
  switch (code) {
    case ErrorCode::InvalidArgument: throw InvalidArgument(msg);
    case ErrorCode::NotSupported: throw NotSupported(msg);
    case ErrorCode::Timeout: throw Timeout(msg);
    case ErrorCode::RemoteError: throw RemoteError(msg);
    case ErrorCode::SystemError: throw SystemError(msg);
    case ErrorCode::Internal: break;
  }
  throw Internal(msg);
}

void rethrowWithPrefix(const std::string& prefix, ErrorCode other) {
  try {
    throw;
  } catch (const Error& e) {
    throwError(e.code(), prefix + e.what());
  } catch (const std::exception& e) {
    throwError(other, prefix + e.what());
  } catch (...) {
    throw Internal(prefix + "an exception that is not a std::exception");
  }
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
