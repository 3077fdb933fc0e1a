// Typed errors. Every failure of the public API is thrown as a subclass of
// accl::Error; code() tells which kind without RTTI.
#pragma once

#include <stdexcept>
#include <string>

namespace accl {

enum class ErrorCode {
  InvalidArgument,  // the caller passed something wrong; nothing was started
  NotSupported,     // the backend has no form of this op / dtype / device
  Timeout,          // a deadline passed; says what was waited for
  RemoteError,      // a peer failed, vanished or sent something invalid
  SystemError,      // an OS or library call failed (errno / library code in the message)
  Internal,         // a bug in ACCL
};
const char* toString(ErrorCode c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

#define ACCL_DEFINE_ERROR(Name)                                                \
  class Name : public Error {                                                  \
   public:                                                                     \
    explicit Name(const std::string& msg) : Error(ErrorCode::Name, msg) {}     \
  };
ACCL_DEFINE_ERROR(InvalidArgument)
ACCL_DEFINE_ERROR(NotSupported)
ACCL_DEFINE_ERROR(Timeout)
ACCL_DEFINE_ERROR(RemoteError)
ACCL_DEFINE_ERROR(SystemError)
ACCL_DEFINE_ERROR(Internal)
#undef ACCL_DEFINE_ERROR

// Throws the subclass of Error that `code` names, with message `msg`.
[[noreturn]] void throwError(ErrorCode code, const std::string& msg);

// Inside a catch block: rethrows the exception being handled with `prefix`
// before its message. An accl::Error keeps its kind; another std::exception
// becomes `other` (Internal unless the caller knows better); anything else
// becomes Internal.
[[noreturn]] void rethrowWithPrefix(const std::string& prefix, ErrorCode other = ErrorCode::Internal);

// Formats "accl rank R/N <backend>: <what>" (rank < 0 leaves the rank out).
std::string errorContext(int rank, int size, const std::string& backend, const std::string& what);

// "<what>: <strerror(err)> (errno E)"
std::string errnoMessage(const std::string& what, int err);

}  // namespace accl
