// A send or receive of the network transport: of an op's step (a collective
// message, matched by exact key) or of the user's point-to-point API
// (matched by tag, in order of posting, any source allowed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/net/frame_link.h"

namespace accl {
namespace core {
namespace net {

enum class Space : uint8_t {
  Op,      // key = seq << 32 | step
  Tagged,  // key = the tag, sign-extended
};

// How a request failed. Remote becomes accl::RemoteError, Mismatch
// InvalidArgument ("mismatched collectives" / sizes that differ).
enum class Failure : uint8_t { None, Remote, Mismatch };

struct Request : OutMessage {
  bool isSend = false;
  int peer = -1;  // -1: any source (tagged receive)
  Space space = Space::Op;
  uint64_t key = 0;
  char* buf = nullptr;
  size_t len = 0;
  bool done = false;
  int source = -1;  // of a tagged receive: who sent what it got
  Failure failure = Failure::None;
  std::string error;

  // Marks the request done and failed; a request that is done already (it
  // completed, or failed first) is left as it is and false returned.
  bool fail(Failure f, std::string why) {
    if (done) return false;
    done = true;
    failure = f;
    error = std::move(why);
    return true;
  }
  void frameSent() override {
    if (!done && framesLeft > 0 && --framesLeft == 0) done = true;
  }
};
using RequestPtr = std::shared_ptr<Request>;

}  // namespace net
}  // namespace core
}  // namespace accl
