#include "transport/net/ibverbs/ibv_api.h"

#include <dlfcn.h>

#include <mutex>

namespace accl {
namespace core {
namespace ib {

namespace {
Api g_api;
bool g_loaded = false;
std::string g_error;

template <typename F>
bool sym(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (!*out) g_error = std::string("libibverbs.so.1 lacks ") + name;
  return *out != nullptr;
}

void load() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    g_error = std::string("libibverbs.so.1 cannot be loaded (") + (e ? e : "?") +
              "); install rdma-core's libibverbs1 and the provider for the NIC (ibverbs-providers)";
    return;
  }
  Api a;
  bool ok = sym(h, "ibv_get_device_list", &a.getDeviceList) && sym(h, "ibv_free_device_list", &a.freeDeviceList) &&
            sym(h, "ibv_get_device_name", &a.getDeviceName) && sym(h, "ibv_open_device", &a.openDevice) &&
            sym(h, "ibv_close_device", &a.closeDevice) && sym(h, "ibv_query_device", &a.queryDevice) &&
            sym(h, "ibv_query_port", &a.queryPort) && sym(h, "ibv_query_gid", &a.queryGid) &&
            sym(h, "ibv_alloc_pd", &a.allocPd) && sym(h, "ibv_dealloc_pd", &a.deallocPd) &&
            sym(h, "ibv_reg_mr", &a.regMr) && sym(h, "ibv_dereg_mr", &a.deregMr) &&
            sym(h, "ibv_create_comp_channel", &a.createCompChannel) &&
            sym(h, "ibv_destroy_comp_channel", &a.destroyCompChannel) && sym(h, "ibv_create_cq", &a.createCq) &&
            sym(h, "ibv_destroy_cq", &a.destroyCq) && sym(h, "ibv_get_cq_event", &a.getCqEvent) &&
            sym(h, "ibv_ack_cq_events", &a.ackCqEvents) && sym(h, "ibv_create_qp", &a.createQp) &&
            sym(h, "ibv_modify_qp", &a.modifyQp) && sym(h, "ibv_destroy_qp", &a.destroyQp) &&
            sym(h, "ibv_wc_status_str", &a.wcStatusStr) && sym(h, "ibv_fork_init", &a.forkInit);
  if (!ok) return;  // the handle stays open: harmless, and dlclose of verbs providers is unsafe
  g_api = a;
  g_loaded = true;
}
}  // namespace

const Api* api(std::string* why) {
  static std::once_flag once;
  std::call_once(once, load);
  if (!g_loaded && why) *why = g_error;
  return g_loaded ? &g_api : nullptr;
}

std::string loadError() {
  std::string why;
  return api(&why) ? std::string() : why;
}

}  // namespace ib
}  // namespace core
}  // namespace accl
