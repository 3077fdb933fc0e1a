// The ACCL_* value parsers: lines NAME=VALUE become the environment of
// Config::parse and of the accl backend's rows (durations, lists, enums,
// integers, interface and HCA specs), then the values go through the duration, HCA-spec and ACCL_ALGO
// parsers directly. Invalid values are accl::InvalidArgument.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/topology.h"
#include "algorithms/select.h"
#include "settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t pos = 0;
  while (pos <= in.size()) {
    size_t nl = in.find('\n', pos);
    if (nl == std::string::npos) nl = in.size();
    std::string line = in.substr(pos, nl - pos);
    size_t eq = line.find('=');
    if (eq != std::string::npos && eq > 0) {
      std::string name = line.substr(0, eq);
      // Short names stand for the real variables: "T=5m" is ACCL_TIMEOUT=5m.
      static const std::map<std::string, std::string> alias = {
          {"T", "ACCL_TIMEOUT"}, {"D", "ACCL_DEBUG"}, {"S", "ACCL_DEBUG_SUBSYS"}, {"I", "ACCL_SOCKET_IFNAME"},
          {"H", "ACCL_IB_HCA"}, {"X", "ACCL_TRANSPORTS"}, {"A", "ACCL_ALGO"}, {"N", "ACCL_SOCKET_NSTREAMS"},
          {"L", "ACCL_LOG_LEVEL"}, {"C", "ACCL_SHM_CMA"}, {"B", "ACCL_INLINE_BYTES"}};
      auto a = alias.find(name);
      if (a != alias.end()) name = a->second;
      env[name] = line.substr(eq + 1);
    }
    pos = nl + 1;
  }
  accl::config::Getenv getenv = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  try {
    accl::Config c = accl::Config::parse(getenv);
    for (const auto& n : {"ACCL_DEBUG", "ACCL_TIMEOUT", "ACCL_DEBUG_SUBSYS", "ACCL_SOCKET_IFNAME"}) c.valueText(n);
  } catch (const accl::Error&) {
  }
  // The accl backend's rows (settings.cc is linked in).
  try {
    accl::settings::transports.parse(getenv);
    accl::settings::socketNstreams.parse(getenv);
    accl::settings::shmCma.parse(getenv);
    accl::settings::inlineBytes.parse(getenv);
  } catch (const accl::Error&) {
  }
  for (auto& [name, value] : env) {
    try {
      accl::parseDuration(name, value);
    } catch (const accl::Error&) {
    }
    accl::topo::matchHcaSpec(value, "mlx5_0");
    accl::topo::hcaSpecPort(value, "mlx5_1");
    try {
      accl::core::parseAlgoSpec(value);
    } catch (const accl::Error&) {
    }
  }
  return 0;
}
