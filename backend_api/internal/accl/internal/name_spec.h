// Lists of names in the syntax of NCCL_SOCKET_IFNAME / NCCL_IB_HCA, which
// ACCL_SOCKET_IFNAME and ACCL_IB_HCA take: comma-separated name prefixes
// ("eth,ib0"), "^" first excludes them ("^lo,docker"), "=" (after any "^")
// matches whole names ("=eth1", "^=eth1"). Device lists may give a port after
// a colon ("mlx5_0:1,mlx5_1").
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "accl/internal/strings.h"

namespace accl {
namespace internal {

struct NameSpec {
  struct Item {
    std::string name;
    int port = 0;  // 0: none given
  };
  bool exclude = false;  // ^: every name but these
  bool exact = false;    // =: whole names, not prefixes
  std::vector<Item> items;

  // `withPorts`: a ":N" after a name is its port (device lists); otherwise
  // the colon is part of the name (interface aliases like eth0:1).
  static NameSpec parse(const std::string& spec, bool withPorts) {
    NameSpec s;
    std::string rest = spec;
    if (!rest.empty() && rest[0] == '^') s.exclude = true, rest = rest.substr(1);
    if (!rest.empty() && rest[0] == '=') s.exact = true, rest = rest.substr(1);
    for (const auto& piece : split(rest, ',', /*skipEmpty=*/true)) {
      Item it;
      size_t colon = withPorts ? piece.find(':') : std::string::npos;
      it.name = piece.substr(0, colon);
      if (colon != std::string::npos) it.port = std::atoi(piece.c_str() + colon + 1);
      if (!it.name.empty()) s.items.push_back(it);
    }
    return s;
  }

  // The first item that names `name` (as a prefix, or whole with =); nullptr
  // when none does. Ignores ^.
  const Item* find(const std::string& name) const {
    for (const auto& it : items)
      if (exact ? name == it.name : name.compare(0, it.name.size(), it.name) == 0) return &it;
    return nullptr;
  }

  // Whether the list selects `name`: named by an item, or not named under ^.
  bool matches(const std::string& name) const { return (find(name) != nullptr) != exclude; }
};

}  // namespace internal
}  // namespace accl
