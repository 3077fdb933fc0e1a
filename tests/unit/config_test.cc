#include <gtest/gtest.h>

#include <map>

#include "accl/config.h"
#include "accl/errors.h"

using namespace accl;

namespace {
Config parse(std::map<std::string, std::string> env) {
  return Config::parse([&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

void expectInvalid(const std::string& var, const std::string& value, const std::string& mention) {
  try {
    parse({{var, value}});
    ADD_FAILURE() << var << "=" << value << " was accepted";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(var), std::string::npos) << m;
    EXPECT_NE(m.find("'" + value + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(mention), std::string::npos) << m;
  }
}
}  // namespace

TEST(Config, Defaults) {
  Config c = parse({});
  EXPECT_EQ(c.debug, LogLevel::Warn);
  EXPECT_EQ(c.timeout, std::chrono::minutes(30));
  EXPECT_TRUE(c.socketIfname.empty());
  EXPECT_EQ(c.storePort, 0);
}

TEST(Config, ValidValues) {
  Config c = parse({{"ACCL_DEBUG", "info"}, {"ACCL_TIMEOUT", "500ms"}, {"ACCL_DEBUG_SUBSYS", "INIT,coll"},
                    {"ACCL_SOCKET_IFNAME", "^lo,docker"}, {"ACCL_STORE_PORT", "29500"}});
  EXPECT_EQ(c.debug, LogLevel::Info);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c.debugSubsys, (std::vector<std::string>{"INIT", "COLL"}));
  EXPECT_EQ(c.storePort, 29500);
  EXPECT_EQ(parse({{"ACCL_TIMEOUT", "2m"}}).timeout, std::chrono::minutes(2));
  EXPECT_EQ(parse({{"ACCL_TIMEOUT", "90"}}).timeout, std::chrono::seconds(90));
}

TEST(Config, InvalidValuesNameVariableAndAcceptedValues) {
  expectInvalid("ACCL_DEBUG", "verbose", "TRACE");
  expectInvalid("ACCL_DEBUG_SUBSYS", "INIT,GPU", "STORE");
  expectInvalid("ACCL_TIMEOUT", "soon", "ms");
  expectInvalid("ACCL_TIMEOUT", "-5", "positive");
  expectInvalid("ACCL_TIMEOUT", "10parsecs", "unit");
  expectInvalid("ACCL_STORE_PORT", "70000", "1..65535");
  expectInvalid("ACCL_STORE_PORT", "12ab", "1..65535");
  expectInvalid("ACCL_SOCKET_IFNAME", "^", "interface");
}

TEST(Config, TableDocumentsEveryVariable) {
  Config c = parse({});
  for (auto& e : configTable()) {
    EXPECT_EQ(std::string(e.name).rfind("ACCL_", 0), 0u);
    EXPECT_GT(std::string(e.meaning).size(), 10u) << e.name;
    EXPECT_GT(std::string(e.accepted).size(), 0u) << e.name;
    EXPECT_NO_THROW(c.valueText(e.name)) << e.name;
  }
}
