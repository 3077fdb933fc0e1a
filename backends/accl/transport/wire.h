// The accl backend's wire format (TCP). Every connection starts with a Hello
// that carries the job token derived from the rendezvous; every frame after it
// starts with a FrameHeader. Anything that does not parse is refused.
#pragma once

#include <cstdint>
#include <string>

#include "accl/process_group.h"
#include "transport/transport.h"

namespace accl {
namespace core {

constexpr uint32_t kWireMagic = 0x4c434341;  // "ACCL" little-endian
constexpr uint16_t kWireVersion = 1;
constexpr uint32_t kMaxHostIdBytes = 256;
constexpr uint64_t kMaxMessageBytes = 1ull << 42;
constexpr uint64_t kMaxAbortBytes = 4096;
constexpr uint64_t kMaxFarewellBytes = 256;  // a uint32 per queue pair

enum class FrameType : uint8_t {
  Hello = 1,
  Data = 2,    // collective message chunk: key = seq << 32 | step
  Tagged = 3,  // user send/recv: key = tag
  Query = 4,   // "which op are you in?": key = seq asked about
  Reply = 5,   // key = entered seq + 1 (0: none yet), desc = that op
  Abort = 6,   // the sender failed op key (seq); payload = reason
  // The sender closes its end (its process group is destroyed); payload =
  // how many data writes it received from the receiver over verbs, a uint32
  // per queue pair, so that writes whose acknowledgement was lost still count
  // as delivered. Sent over the socket, so it arrives before the socket's end.
  Farewell = 7,
};

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint8_t type;
  uint8_t stream;
  uint64_t token;
  int32_t rank;
  uint32_t idLen;  // bytes of host id that follow (<= kMaxHostIdBytes)
};
static_assert(sizeof(Hello) == 24, "wire format");

struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t type;
  uint8_t flags;
  uint64_t key;
  uint64_t offset;  // of this chunk within the message
  uint64_t len;     // payload bytes that follow
  uint64_t total;   // message bytes
  OpDesc desc;
};
static_assert(sizeof(FrameHeader) == 64, "wire format");

// Whether the header is well-formed: the checks of validateHeader, with no
// message to build (a frame's path; validateHeader says what is wrong).
inline bool headerValid(const FrameHeader& h) {
  auto t = static_cast<FrameType>(h.type);
  bool typeOk = t == FrameType::Data || t == FrameType::Tagged || t == FrameType::Query || t == FrameType::Reply ||
                t == FrameType::Abort || t == FrameType::Farewell;
  return h.magic == kWireMagic && h.version == kWireVersion && typeOk && h.total <= kMaxMessageBytes &&
         h.len <= h.total && h.offset <= h.total - h.len &&
         !((t == FrameType::Query || t == FrameType::Reply) && h.total != 0) &&
         !(t == FrameType::Abort && h.total > kMaxAbortBytes) &&
         !(t == FrameType::Farewell && (h.total > kMaxFarewellBytes || h.total % 4 != 0 || h.len != h.total)) &&
         h.desc.op <= static_cast<uint16_t>(OpType::Split) && h.desc.dtype < kNumDataTypes &&
         h.desc.redop < kNumReduceKinds;
}
// Empty string if the header is well-formed (headerValid), else what is
// wrong with it.
std::string validateHeader(const FrameHeader& h);
// Empty string if a Hello that rank `self` of `size` received may open stream
// h.stream from h.rank in the job with `token` (`nstreams`: streams per peer),
// else what is wrong with it. Duplicates are the receiver's to check.
std::string validateHello(const Hello& h, uint64_t token, int self, int size, const int* nstreams);

}  // namespace core
}  // namespace accl
