# Shared by the namespace tests: exits 77 (skipped) unless this process may
# create network namespaces, then brings up N simulated hosts with
# bench/netns.sh under ACCL_NETNS_PREFIX / ACCL_NETNS_SUBNET and removes them
# on exit.   netns_hosts_up SOURCE_DIR N

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
  "$src/bench/netns.sh" up "$n" || exit 1
}
