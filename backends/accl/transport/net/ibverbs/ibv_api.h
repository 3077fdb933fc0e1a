// libibverbs, loaded at run time: the accl backend runs unchanged on hosts
// without it. Only the library's exported functions are looked up here; the
// fast-path calls (post_send, post_recv, poll_cq, req_notify_cq) are inline in
// <infiniband/verbs.h> and go through the device context's own ops table.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace accl {
namespace core {
namespace ib {

struct Api {
  ibv_device** (*getDeviceList)(int*) = nullptr;
  void (*freeDeviceList)(ibv_device**) = nullptr;
  const char* (*getDeviceName)(ibv_device*) = nullptr;
  ibv_context* (*openDevice)(ibv_device*) = nullptr;
  int (*closeDevice)(ibv_context*) = nullptr;
  int (*queryDevice)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*allocPd)(ibv_context*) = nullptr;
  int (*deallocPd)(ibv_pd*) = nullptr;
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*deregMr)(ibv_mr*) = nullptr;
  ibv_comp_channel* (*createCompChannel)(ibv_context*) = nullptr;
  int (*destroyCompChannel)(ibv_comp_channel*) = nullptr;
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroyCq)(ibv_cq*) = nullptr;
  int (*getCqEvent)(ibv_comp_channel*, ibv_cq**, void**) = nullptr;
  void (*ackCqEvents)(ibv_cq*, unsigned int) = nullptr;
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroyQp)(ibv_qp*) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status) = nullptr;
  int (*forkInit)() = nullptr;
};

// The process's libibverbs (dlopen'd once). Null with *why set when it cannot
// be loaded or lacks a function.
const Api* api(std::string* why);

// The same, with the error as text for messages: "" when loaded.
std::string loadError();

}  // namespace ib
}  // namespace core
}  // namespace accl
