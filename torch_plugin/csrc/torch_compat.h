// Every difference between the torch versions torch_accl builds against
// (1.13 … 2.x), in one place. The rest of the adapter is version-free.
#pragma once

#include <torch/version.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#define ACCL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if ACCL_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace torch_accl {
namespace compat {

// torch 2.x separates the user-facing ProcessGroup from per-device Backends;
// a plugin is a Backend. torch 1.13's plugin is the ProcessGroup itself.
#if ACCL_TORCH_AT_LEAST(2, 0)
using Base = c10d::Backend;
#else
using Base = c10d::ProcessGroup;
#endif

// Coalescing (startCoalescing/endCoalescing), the *_tensor_coalesced ops and
// group sequence numbers are virtual in torch >= 2.1's Backend.
#define ACCL_TORCH_HAS_COALESCING ACCL_TORCH_AT_LEAST(2, 1)
// supportsCoalescing() (torch asks before using endCoalescing's Work).
#define ACCL_TORCH_HAS_SUPPORTS_COALESCING ACCL_TORCH_AT_LEAST(2, 4)
// Unsigned 32/64-bit tensors.
#define ACCL_TORCH_HAS_UINT32 ACCL_TORCH_AT_LEAST(2, 3)
// Backend::split and getBackendOptions (torch.distributed.split_group, and
// new_group / init_device_mesh after init_process_group(device_id=...)).
#define ACCL_TORCH_HAS_SPLIT ACCL_TORCH_AT_LEAST(2, 8)

// Whether torch asked for an asynchronous op: the options' asyncOp where they
// have it (torch >= 2.7 sets it from async_op), else true.
template <typename O, typename = void>
struct HasAsyncOp : std::false_type {};
template <typename O>
struct HasAsyncOp<O, std::void_t<decltype(std::declval<const O&>().asyncOp)>> : std::true_type {};
template <typename O>
bool isAsync(const O& o) {
  if constexpr (HasAsyncOp<O>::value) return o.asyncOp;
  else return true;
}

// The PREMUL_SUM factor: a vector of tensors in 1.13, one tensor (or a
// double) in 2.x.
inline double preMulSumFactor(const c10d::ReduceOp& op, bool* found) {
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  *found = s != nullptr;
  if (!s) return 0;
#if ACCL_TORCH_AT_LEAST(2, 0)
  if (s->tensor_factor.defined()) return s->tensor_factor.item<double>();
#else
  if (!s->tensor_factors.empty()) return s->tensor_factors[0].item<double>();
#endif
  return s->double_factor;
}

// The native handle (a cudaStream_t) of a device stream, which ACCL's CUDA
// ops are ordered after. torch < 2.3 has no device-generic accessor: nullptr,
// the legacy default stream.
inline void* nativeStream(const c10::Stream& s) {
#if ACCL_TORCH_AT_LEAST(2, 3)
  return s.native_handle();
#else
  (void)s;
  return nullptr;
#endif
}

// The exception torch users catch for `msg`. A failure of the communication
// (a peer gone, a timeout, a system error) is torch.distributed.DistBackendError
// where torch has it (>= 2.1; a RuntimeError), as with torch's own backends;
// anything else (bad arguments) is a RuntimeError.
inline std::exception_ptr torchError(const std::string& msg, bool communication) {
  c10::SourceLocation here{"torch_accl", __FILE__, static_cast<uint32_t>(__LINE__)};
#if ACCL_TORCH_AT_LEAST(2, 1)
  if (communication) return std::make_exception_ptr(c10::DistBackendError(here, msg));
#else
  (void)communication;
#endif
  return std::make_exception_ptr(c10::Error(here, msg));
}

}  // namespace compat
}  // namespace torch_accl
