#include "transport/wire.h"

#include <cstdint>

#include "accl/process_group.h"

namespace accl {
namespace core {

std::string validateHeader(const FrameHeader& h) {
  if (headerValid(h)) return "";
  if (h.magic != kWireMagic) return "bad magic number";
  if (h.version != kWireVersion)
    return "protocol version " + std::to_string(h.version) + " (this build speaks " +
           std::to_string(kWireVersion) + ")";
  auto t = static_cast<FrameType>(h.type);
  if (t != FrameType::Data && t != FrameType::Tagged && t != FrameType::Query &&
      t != FrameType::Reply && t != FrameType::Abort && t != FrameType::Farewell)
    return "unknown frame type " + std::to_string(h.type);
  if (h.total > kMaxMessageBytes) return "message length " + std::to_string(h.total) + " too large";
  if (h.len > h.total || h.offset > h.total - h.len) return "chunk outside its message";
  if ((t == FrameType::Query || t == FrameType::Reply) && h.total != 0) return "control frame with payload";
  if (t == FrameType::Abort && h.total > kMaxAbortBytes) return "abort reason too long";
  if (t == FrameType::Farewell && (h.total > kMaxFarewellBytes || h.total % 4 != 0 || h.len != h.total))
    return "malformed farewell (" + std::to_string(h.total) + " bytes; a uint32 per queue pair in one frame)";
  if (h.desc.op > static_cast<uint16_t>(OpType::Split) || h.desc.dtype >= kNumDataTypes ||
      h.desc.redop >= kNumReduceKinds)
    return "invalid op descriptor";
  return "malformed header";  // headerValid refused it for a reason not named above
}

std::string validateHello(const Hello& h, uint64_t token, int self, int size, const int* nstreams) {
  if (h.magic != kWireMagic || h.type != static_cast<uint8_t>(FrameType::Hello))
    return "not an accl connection (bad magic number)";
  if (h.version != kWireVersion)
    return "protocol version " + std::to_string(h.version) + ", this build speaks " + std::to_string(kWireVersion);
  if (h.token != token) return "job token does not match (a connection from another job)";
  if (h.idLen > kMaxHostIdBytes)
    return "host id length " + std::to_string(h.idLen) + " exceeds " + std::to_string(kMaxHostIdBytes);
  if (h.rank < 0 || h.rank >= size || h.rank <= self)
    return "invalid rank " + std::to_string(h.rank) + " (ranks " + std::to_string(self + 1) + ".." +
           std::to_string(size - 1) + " connect to this rank)";
  if (h.stream >= static_cast<uint8_t>(nstreams[h.rank] > 1 ? nstreams[h.rank] : 1))
    return "invalid stream " + std::to_string(h.stream);
  return "";
}

}  // namespace core
}  // namespace accl
