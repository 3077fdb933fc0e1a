#include <pugixml.hpp>

#include <fstream>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/logging.h"
#include "accl/topology.h"
#include "util.h"

namespace accl {
namespace topo {

Topology loadFile(const std::string& path) {
  std::string text;
  pugi::xml_document doc;
  detail::parseXml(path, text, doc);
  std::string root = doc.document_element().name();
  if (root == "topology") return loadHwlocXml(path);
  if (root == "system") return loadNcclXml(path);
  throw InvalidArgument("accl topology: " + path + ": the root element is <" + root +
                        ">; accepted: <system> (NCCL topology file) or <topology> (hwloc XML)");
}

Topology loadFromConfig(bool dump) {
  const Config& cfg = Config::get();
  Topology t = cfg.topoFile.empty() ? probe() : loadFile(cfg.topoFile);
  if (dump && !cfg.topoDumpFile.empty()) {
    bool json = cfg.topoDumpFile.size() > 5 && cfg.topoDumpFile.compare(cfg.topoDumpFile.size() - 5, 5, ".json") == 0;
    std::ofstream f(cfg.topoDumpFile);
    if (!f) throw SystemError("accl topology: cannot write ACCL_TOPO_DUMP_FILE=" + cfg.topoDumpFile);
    f << (json ? toJson(t) : toNcclXml(t));
    ACCL_INFO("INIT", "topology written to " << cfg.topoDumpFile);
  }
  return t;
}

}  // namespace topo
}  // namespace accl
