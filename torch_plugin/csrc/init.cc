// Python module torch_accl._C: the creator functions torch's register_backend calls.
#include <torch/extension.h>
#include <cstdint>
#include <torch/version.h>

#include "accl/registry.h"
#include "accl/trace.h"
#include "accl/types.h"
#include "process_group_accl.h"

namespace py = pybind11;

namespace {

using Holder = torch_accl::compat::Base;

c10::intrusive_ptr<Holder> createExtended(const c10d::DistributedBackendOptions& o, py::object /*pgOptions*/) {
  py::gil_scoped_release nogil;
  return c10::make_intrusive<torch_accl::ProcessGroupACCL>(o.store, o.group_rank, o.group_size,
                                                          std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout),
                                                          o.global_ranks_in_group, o.group_id);
}

c10::intrusive_ptr<Holder> createBasic(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout) {
  py::gil_scoped_release nogil;
  return c10::make_intrusive<torch_accl::ProcessGroupACCL>(store, rank, size, timeout);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ACCL collectives as a torch.distributed backend";
  py::module::import("torch.distributed");
  py::class_<torch_accl::ProcessGroupACCL, Holder, c10::intrusive_ptr<torch_accl::ProcessGroupACCL>>(
      m, "ProcessGroupACCL")
      .def_property_readonly("sdk_backend", &torch_accl::ProcessGroupACCL::sdkBackend,
                             "The ACCL backend that runs the ops (accl, gloo, mpi or nccl).")
      .def_property_readonly("global_ranks", &torch_accl::ProcessGroupACCL::globalRanks)
      .def_property_readonly("cuda_path", &torch_accl::ProcessGroupACCL::cudaPath,
                             "Where CUDA tensors go (direct, nccl or stage) and why (ACCL_TORCH_CUDA).")
      .def("_sdk_all_reduce", &torch_accl::ProcessGroupACCL::sdkAllreduce, py::arg("tensor"),
           py::arg("inline") = false, py::call_guard<py::gil_scoped_release>(),
           "Benchmarks only: in-place float32 sum on the ACCL group directly, waited for; inline=True "
           "runs it on the calling thread (OpOptions::blocking) as a synchronous torch call does.");
  m.def("create_extended", &createExtended, py::arg("dist_backend_opts"), py::arg("pg_options"));
  m.def("create", &createBasic, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
  m.def("_prepare_exit", [](double waitSeconds) {
    py::gil_scoped_release nogil;
    torch_accl::prepareExit(std::chrono::milliseconds(static_cast<int64_t>(waitSeconds * 1000)));
  }, py::arg("wait_seconds"), "atexit hook: completions stop touching torch objects (see prepareExit).");
  m.def("dump_traces", [](const std::string& reason) {
    py::gil_scoped_release nogil;
    return accl::dumpTraces(reason);
  }, py::arg("reason") = "on request",
        "Writes the flight recorder of every ACCL group of this process to ACCL_TRACE_DIR; returns the file's "
        "path (\"\" when ACCL_TRACE_BUFFER=0 or nothing could be written, logged).");
  m.attr("torch_version") = TORCH_VERSION;
  m.attr("cxx11_abi") = static_cast<bool>(_GLIBCXX_USE_CXX11_ABI);
  m.attr("accl_version") = accl::versionString();
  m.def("backends", [] {
    py::list out;
    for (auto& b : accl::listBackends()) {
      py::dict d;
      d["name"] = b.name;
      d["description"] = b.description;
      d["usable"] = b.usable;
      d["reason"] = b.reason;
      out.append(d);
    }
    return out;
  });
}
