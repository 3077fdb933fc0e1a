// Helpers shared by the topology readers and writers.
#pragma once

#include <pugixml.hpp>

#include <string>
#include <vector>

namespace accl {
namespace topo {
namespace detail {

// "000000ff,ffff0000,00ffffff" (32-bit words, most significant first) -> "0-23,48-71".
std::string maskToList(const std::string& mask);
// "0-23,48-71" -> NCCL's mask text.
std::string listToMask(const std::string& list);
// PCIe GB/s of a link from its rate in GT/s per lane and its width.
double pcieGBs(double gtPerSec, int width);
// The (rate, width) pair whose bandwidth is closest to `gbs` (for writing NCCL files).
void pcieRateWidth(double gbs, double* gtPerSec, int* width);
std::string lowerBusId(std::string s);
// Line number (1-based) of byte `offset` in `text`.
int lineOf(const std::string& text, size_t offset);
std::string readFile(const std::string& path);
// Reads and parses `path` into `doc` (keeping `text` for line numbers); throws
// InvalidArgument "path:line: not well-formed XML: ..." on malformed input.
void parseXml(const std::string& path, std::string& text, pugi::xml_document& doc);

}  // namespace detail
}  // namespace topo
}  // namespace accl
