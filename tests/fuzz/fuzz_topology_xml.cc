// The topology loaders (NCCL topology XML, hwloc XML; the root element picks
// the format) on arbitrary files: a topology or accl::InvalidArgument naming
// the problem, nothing else. Writers run on what loads.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "accl/errors.h"
#include "accl/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("accl-fuzz-topology", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  try {
    accl::topo::Topology t = accl::topo::loadFile(path);
    accl::topo::toNcclXml(t);
    // The JSON writer lists a path for every pair of devices: its output grows
    // with the square of their number, and it parses nothing. It runs up to 48
    // devices (the largest hosts among the fixtures, AWS p5 and p5en, have 40),
    // so that inputs with hundreds of copied elements, which the mutator makes
    // often, do not take most of the time.
    if (t.gpus().size() + t.nics().size() <= 48) accl::topo::toJson(t);
    t.bindings(4);
  } catch (const accl::Error&) {
  }
  return 0;
}
