#include "util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "accl/errors.h"
#include "accl/internal/strings.h"

namespace accl {
namespace topo {
namespace detail {

std::string maskToList(const std::string& mask) {
  std::vector<std::string> words = internal::split(mask, ',');
  std::vector<int> cpus;
  int bitBase = 0;
  for (auto it = words.rbegin(); it != words.rend(); ++it, bitBase += 32) {
    unsigned long v = std::strtoul(it->c_str(), nullptr, 16);
    for (int b = 0; b < 32; ++b)
      if (v & (1ul << b)) cpus.push_back(bitBase + b);
  }
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string listToMask(const std::string& list) {
  std::vector<unsigned long> words(1, 0);
  for (const std::string& item : internal::split(list, ',', /*skipEmpty=*/true)) {
    size_t dash = item.find('-');
    int lo = std::atoi(item.c_str()), hi = dash == std::string::npos ? lo : std::atoi(item.c_str() + dash + 1);
    for (int c = lo; c <= hi; ++c) {
      size_t w = static_cast<size_t>(c) / 32;
      if (words.size() <= w) words.resize(w + 1, 0);
      words[w] |= 1ul << (c % 32);
    }
  }
  std::string out;
  char buf[16];
  for (auto it = words.rbegin(); it != words.rend(); ++it) {
    std::snprintf(buf, sizeof buf, "%08lx", *it);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

namespace {
struct Gen {
  double gt, laneGBs;
};
const Gen kGens[] = {{2.5, 0.25}, {5, 0.5}, {8, 0.985}, {16, 1.969}, {32, 3.938}, {64, 7.563}};
}  // namespace

double pcieGBs(double gt, int width) {
  for (auto& g : kGens)
    if (std::fabs(g.gt - gt) < 0.1) return g.laneGBs * width;
  return gt / 8.0 * width;  // unknown encoding: raw rate
}

void pcieRateWidth(double gbs, double* gt, int* width) {
  double bestErr = 1e30;
  *gt = 0;
  *width = 0;
  for (auto& g : kGens)
    for (int w : {1, 2, 4, 8, 16, 32}) {
      double err = std::fabs(g.laneGBs * w - gbs);
      if (err < bestErr - 1e-9 || (std::fabs(err - bestErr) < 1e-9 && w == 16)) {
        bestErr = err;
        *gt = g.gt;
        *width = w;
      }
    }
}

std::string lowerBusId(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int lineOf(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n'));
}

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument("accl topology: cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void parseXml(const std::string& path, std::string& text, pugi::xml_document& doc) {
  text = readFile(path);
  pugi::xml_parse_result r = doc.load_buffer(text.data(), text.size());
  if (!r)
    throw InvalidArgument("accl topology: " + path + ":" + std::to_string(lineOf(text, static_cast<size_t>(r.offset))) +
                          ": not well-formed XML: " + r.description());
}

}  // namespace detail
}  // namespace topo
}  // namespace accl
