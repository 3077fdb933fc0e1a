#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <map>

#include "accl/config.h"
#include "accl/errors.h"
#include "accl/internal/config_var.h"
#include "accl/logging.h"

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
  EXPECT_EQ(c.scratchKeepMb, 256);
  EXPECT_EQ(parse({{"ACCL_SCRATCH_KEEP_MB", "0"}}).scratchKeepMb, 0);
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
  expectInvalid("ACCL_SCRATCH_KEEP_MB", "-1", "0..1048576");
  expectInvalid("ACCL_SCRATCH_KEEP_MB", "256M", "0..1048576");
}

TEST(Config, TableDocumentsEveryVariable) {
  Config c = parse({});
  auto table = configTable();
  EXPECT_GE(table.size(), 18u);
  for (auto& e : table) {
    EXPECT_EQ(e.name.rfind("ACCL_", 0), 0u);
    EXPECT_GT(e.meaning.size(), 10u) << e.name;
    EXPECT_GT(e.accepted.size(), 0u) << e.name;
    EXPECT_FALSE(e.defaultText.empty()) << e.name;
    EXPECT_FALSE(e.owner.empty()) << e.name;
    EXPECT_NO_THROW(c.valueText(e.name)) << e.name;
  }
}

TEST(Config, DefaultsComeFromTheRowsAndPrintAsDocumented) {
  Config c = parse({});
  // The default text of each row is the printed default value where the
  // default does not depend on the host.
  for (auto& e : configTable()) {
    if (e.name == "ACCL_DEBUG" || e.name == "ACCL_TIMEOUT" || e.name == "ACCL_TORCH_CUDA" ||
        e.name == "ACCL_STORE_BIND") {
      EXPECT_EQ(c.valueText(e.name), e.defaultText) << e.name;
    }
  }
  EXPECT_EQ(c.valueText("ACCL_TIMEOUT"), "30m");
  EXPECT_EQ(parse({{"ACCL_TIMEOUT", "90"}}).valueText("ACCL_TIMEOUT"), "90s");
  EXPECT_EQ(parse({{"ACCL_TIMEOUT", "1500ms"}}).valueText("ACCL_TIMEOUT"), "1500ms");
  EXPECT_EQ(c.torchBackend, "accl");
  EXPECT_EQ(parse({{"ACCL_TORCH_BACKEND", "GLOO"}}).torchBackend, "gloo");
  EXPECT_EQ(parse({{"ACCL_STORE_SECRET", "s3cret"}}).valueText("ACCL_STORE_SECRET"), "(set, not shown)");
  EXPECT_EQ(parse({{"ACCL_DEBUG_SUBSYS", "ALL"}}).valueText("ACCL_DEBUG_SUBSYS"), "ALL");
}

TEST(Config, OtherLibrariesVariablesAndTheAliasAreFollowedWithANote) {
  Config c = parse({{"NCCL_SOCKET_IFNAME", "=eth1"}, {"GLOO_SOCKET_IFNAME", "eth2"}, {"ACCL_LOG_LEVEL", "debug"}});
  EXPECT_EQ(c.socketIfname, "=eth1");
  EXPECT_EQ(c.debug, LogLevel::Info);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("following NCCL_SOCKET_IFNAME"), std::string::npos) << c.notes[0];
  Config both = parse({{"ACCL_DEBUG", "trace"}, {"ACCL_LOG_LEVEL", "warn"}});
  EXPECT_EQ(both.debug, LogLevel::Trace);
  ASSERT_EQ(both.notes.size(), 1u);
  EXPECT_NE(both.notes[0].find("ACCL_LOG_LEVEL=warn ignored"), std::string::npos) << both.notes[0];
  // A bad value of a followed variable is named as that variable.
  expectInvalid("ACCL_LOG_LEVEL", "loud", "DEBUG");
  try {
    parse({{"NCCL_IB_HCA", "^"}});
    ADD_FAILURE() << "NCCL_IB_HCA=^ accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL_IB_HCA"), std::string::npos) << e.what();
  }
}

TEST(Config, UnknownNamesAreWarnedWithTheNearestKnownOne) {
  auto w = unknownVariableWarnings({"PATH", "ACCL_TIMOUT", "ACCL_TIMEOUT", "ACCL_TEST_FOO", "ACCL_ZZZZZZZZZZZZ"});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("ACCL_TIMOUT is not an ACCL variable"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("did you mean ACCL_TIMEOUT?"), std::string::npos) << w[0];
  EXPECT_EQ(w[1].find("did you mean"), std::string::npos) << w[1];
}

// A row registered by a library other than the core (as a backend module
// does when it loads): in the table, parsed from the environment once,
// invalid values named with what is accepted.
const config::Var<int> kTestKnob("ACCL_UNITTEST_KNOB", "unit test", config::intRange(2, 9, "odd ones"), 5, nullptr,
                                 "A knob that only this test registers.");

TEST(Config, RowsRegisteredByALibraryJoinTheTable) {
  bool listed = false;
  for (auto& e : configTable())
    if (e.name == "ACCL_UNITTEST_KNOB") {
      listed = true;
      EXPECT_EQ(e.defaultText, "5");
      EXPECT_EQ(e.accepted, "2..9 (odd ones)");
      EXPECT_EQ(e.owner, "unit test");
      EXPECT_EQ(e.type, "int");
    }
  EXPECT_TRUE(listed);
  EXPECT_EQ(kTestKnob.parse([](const char*) -> const char* { return nullptr; }), 5);
  EXPECT_EQ(kTestKnob.parse([](const char*) -> const char* { return "7"; }), 7);
  try {
    kTestKnob.parse([](const char*) -> const char* { return "10"; });
    ADD_FAILURE() << "10 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'10' for ACCL_UNITTEST_KNOB; accepted: 2..9"), std::string::npos) << e.what();
  }
  unsetenv("ACCL_UNITTEST_KNOB");
  EXPECT_EQ(configValue("ACCL_UNITTEST_KNOB"), "5");
  EXPECT_THROW(configValue("ACCL_NO_SUCH_KNOB"), InvalidArgument);
  EXPECT_TRUE(unknownVariableWarnings({"ACCL_UNITTEST_KNOB"}).empty());
}

TEST(Config, DebugSubsysTakesAnExclusionList) {
  Config c = parse({{"ACCL_DEBUG_SUBSYS", "^net,Store"}});
  EXPECT_TRUE(c.debugSubsysExcluded);
  EXPECT_EQ(c.debugSubsys, (std::vector<std::string>{"NET", "STORE"}));
  EXPECT_EQ(c.valueText("ACCL_DEBUG_SUBSYS"), "^NET,STORE");
  Config all = parse({{"ACCL_DEBUG_SUBSYS", "INIT,ALL"}});
  EXPECT_TRUE(all.debugSubsys.empty());
  EXPECT_FALSE(all.debugSubsysExcluded);
  EXPECT_TRUE(parse({{"ACCL_DEBUG_SUBSYS", "torch"}}).debugSubsys == std::vector<std::string>{"TORCH"});
  expectInvalid("ACCL_DEBUG_SUBSYS", "^", "^ first excludes");
  expectInvalid("ACCL_DEBUG_SUBSYS", "^GPU", "INIT, COLL");
}

TEST(Logging, EveryLineStartsWithUtcTimeHostPidTid) {
  std::string p = logPrefix();
  // 2026-11-24T02:52:07.415Z host:pid:tid
  ASSERT_GE(p.size(), 25u) << p;
  EXPECT_EQ(p[4], '-');
  EXPECT_EQ(p[10], 'T');
  EXPECT_EQ(p[19], '.');
  EXPECT_EQ(p[23], 'Z');
  std::string rest = p.substr(25);
  std::string pid = std::to_string(getpid());
  EXPECT_NE(rest.find(":" + pid + ":"), std::string::npos) << p;
  // The time is now, to the second or so.
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char year[16];
  std::snprintf(year, sizeof year, "%04d", tm.tm_year + 1900);
  EXPECT_EQ(p.substr(0, 4), year) << p;
}
