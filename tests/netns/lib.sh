# Shared by the namespace tests: exits 77 (skipped) unless this process may
# create network namespaces, then brings up N simulated hosts with
# bench/netns.sh under ACCL_NETNS_PREFIX / ACCL_NETNS_SUBNET and removes them
# on exit. Hosts left by an earlier run of the same prefix (one that was
# killed before its clean-up) are removed first.   netns_hosts_up SOURCE_DIR N

# Exits 77 (skipped) unless this process may create network namespaces.
netns_require_root() {
  if [ "$(id -u)" -ne 0 ] || ! ip netns add accl-probe-$$ 2>/dev/null; then
    echo "SKIP: network namespaces need root (CAP_SYS_ADMIN)"
    exit 77
  fi
  ip netns del accl-probe-$$
}

netns_hosts_up() {
  local src=$1 n=$2
  netns_require_root
  trap '"'"$src"'/bench/netns.sh" down '"$n" EXIT
  # A run killed with SIGKILL never ran its trap: its hosts, with whatever
  # rules it added, would be reused by "up". Start from none.
  "$src/bench/netns.sh" down "$n"
  "$src/bench/netns.sh" up "$n" || exit 1
}
