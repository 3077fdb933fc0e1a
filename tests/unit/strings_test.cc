// The small helpers of accl/internal: split/join/trim, the NCCL-style name
// lists of ACCL_SOCKET_IFNAME / ACCL_IB_HCA, the error factory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accl/errors.h"
#include "accl/internal/name_spec.h"
#include "accl/internal/net.h"
#include "accl/internal/strings.h"

using namespace accl;
using namespace accl::internal;
using V = std::vector<std::string>;

TEST(Strings, SplitKeepsOrDropsEmptyPieces) {
  EXPECT_EQ(split("a,,b", ','), (V{"a", "", "b"}));
  EXPECT_EQ(split("a,,b", ',', true), (V{"a", "b"}));
  EXPECT_EQ(split("", ','), (V{""}));
  EXPECT_EQ(split("", ',', true), V{});
  EXPECT_EQ(split(",a,", ','), (V{"", "a", ""}));
  EXPECT_EQ(split("/x:/y", ':'), (V{"/x", "/y"}));
}

TEST(Strings, JoinAndTrim) {
  EXPECT_EQ(join(std::vector<int>{1, 2, 3}), "1,2,3");
  EXPECT_EQ(join(V{"a", "b"}, ", "), "a, b");
  EXPECT_EQ(join(V{}), "");
  const char* names[] = {"x", "y"};
  EXPECT_EQ(join(names, "|"), "x|y");
  EXPECT_EQ(trim("  a b \t\n"), "a b");
  EXPECT_EQ(trim(" \t "), "");
}

TEST(NameSpec, PrefixesExclusionExactNamesAndPorts) {
  auto s = NameSpec::parse("mlx5_0:1,mlx5_1", true);
  EXPECT_FALSE(s.exclude);
  EXPECT_FALSE(s.exact);
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[0].name, "mlx5_0");
  EXPECT_EQ(s.items[0].port, 1);
  EXPECT_EQ(s.items[1].port, 0);
  EXPECT_TRUE(s.matches("mlx5_10"));  // a prefix
  EXPECT_FALSE(s.matches("mlx4_0"));
  EXPECT_EQ(s.find("mlx5_0")->port, 1);

  auto x = NameSpec::parse("^=eth1", false);
  EXPECT_TRUE(x.exclude && x.exact);
  EXPECT_FALSE(x.matches("eth1"));
  EXPECT_TRUE(x.matches("eth10"));  // whole names only

  auto alias = NameSpec::parse("eth0:1", false);  // an interface alias, not a port
  EXPECT_EQ(alias.items[0].name, "eth0:1");
  EXPECT_TRUE(NameSpec::parse("^", false).items.empty());
  EXPECT_TRUE(NameSpec::parse("^lo,docker", false).matches("eth0"));
  EXPECT_FALSE(NameSpec::parse("^lo,docker", false).matches("docker0"));
  // The interface matcher uses the same rules.
  EXPECT_TRUE(matchInterfaceSpec("=lo", "lo"));
  EXPECT_FALSE(matchInterfaceSpec("=lo", "lo0"));
  EXPECT_TRUE(matchInterfaceSpec("^eth", "lo"));
}

TEST(Errors, TheFactoryKeepsTheKindAndAddsContext) {
  for (ErrorCode c : {ErrorCode::InvalidArgument, ErrorCode::NotSupported, ErrorCode::Timeout,
                      ErrorCode::RemoteError, ErrorCode::SystemError, ErrorCode::Internal}) {
    try {
      try {
        throwError(c, "inner");
      } catch (...) {
        rethrowWithPrefix("outer: ");
      }
      ADD_FAILURE() << "nothing thrown";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c);
      EXPECT_STREQ(e.what(), "outer: inner");
    }
  }
  try {
    try {
      throw std::runtime_error("plain");
    } catch (...) {
      rethrowWithPrefix("ctx: ", ErrorCode::RemoteError);
    }
  } catch (const RemoteError& e) {
    EXPECT_STREQ(e.what(), "ctx: plain");
  }
}
