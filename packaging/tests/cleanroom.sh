#!/usr/bin/env bash
# Clean Debian 12 roots for the packaging tests (no Docker engine needed):
# a base root made once with debootstrap and kept under /var/tmp, then a fresh
# copy per test, entered with chroot. Sourced by the package tests.
#
# The base is what a user's container already has (python3 with Debian's
# torch, a compiler, cmake), plus the Debian packages ACCL's packages depend on
# downloaded (not installed) into apt's cache, so that installs run without
# waiting on the mirror. It is rebuilt when this file's BASE_PACKAGES change.
set -euo pipefail

CLEANROOM_DIR=${ACCL_PKG_CLEANROOM_DIR:-/var/tmp/accl-cleanroom}
CLEANROOM_MIRROR=${ACCL_PKG_MIRROR:-http://deb.debian.org/debian}
BASE_PACKAGES="ca-certificates build-essential cmake pkg-config python3 python3-venv python3-pip python3-torch procps"
CACHED_PACKAGES="libgloo0 libopenmpi3 openmpi-bin libibverbs1 ibverbs-providers libucx0 libhwloc15 libpugixml1v5 patchelf libhwloc-dev libpugixml-dev nlohmann-json3-dev libcli11-dev libgloo-dev libopenmpi-dev libibverbs-dev libucx-dev python3-dev pybind11-dev libtorch-dev"
BASE_TAG=$(echo "$BASE_PACKAGES|$CACHED_PACKAGES" | md5sum | cut -c1-12)
BASE=$CLEANROOM_DIR/base-$BASE_TAG

cleanroom_log() { echo "cleanroom: $*" >&2; }

# Mounts what a process in the root needs: /proc, /dev (with /dev/shm for
# ACCL's shared segment), /sys, and the host's resolver for apt.
cleanroom_mount() {
  local root=$1
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  mount -t sysfs sysfs "$root/sys"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

cleanroom_umount() {
  local root=$1 m
  for m in sys dev proc; do
    umount -R -l "$root/$m" 2>/dev/null || true
  done
}

# Runs a command in the root as root, with a plain environment (no
# LD_LIBRARY_PATH, no PYTHONPATH, nothing of this machine's ACCL).
cleanroom_run() {
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

cleanroom_ensure_base() {
  if [ -f "$BASE/.complete" ]; then
    cleanroom_log "base root $BASE (cached)"
    return
  fi
  command -v debootstrap >/dev/null || { cleanroom_log "debootstrap is missing (scripts/setup.sh installs it)"; return 1; }
  rm -rf "$BASE.tmp"
  mkdir -p "$CLEANROOM_DIR"
  cleanroom_log "making the base root (debootstrap bookworm, then $BASE_PACKAGES)"
  debootstrap --variant=minbase bookworm "$BASE.tmp" "$CLEANROOM_MIRROR" >"$CLEANROOM_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$CLEANROOM_DIR/debootstrap.log" >&2; return 1; }
  cleanroom_mount "$BASE.tmp"
  trap 'cleanroom_umount "$BASE.tmp"' RETURN
  cleanroom_run "$BASE.tmp" apt-get update -qq
  cleanroom_run "$BASE.tmp" apt-get install -y -qq --no-install-recommends $BASE_PACKAGES >/dev/null
  cleanroom_run "$BASE.tmp" apt-get install -y -qq --no-install-recommends --download-only $CACHED_PACKAGES >/dev/null
  cleanroom_umount "$BASE.tmp"
  trap - RETURN
  touch "$BASE.tmp/.complete"
  rm -rf "$BASE"
  mv "$BASE.tmp" "$BASE"
  # Older bases (other package lists) are not needed any more.
  for old in "$CLEANROOM_DIR"/base-*; do
    [ "$old" = "$BASE" ] || rm -rf "$old"
  done
}

# Prints the path of a fresh root: an overlay over the base (a copy where
# overlayfs is not available), mounted; cleanroom_destroy ends it.
cleanroom_new() {
  local name=$1 dir
  dir=$CLEANROOM_DIR/run-$name-$$
  cleanroom_destroy "$dir/root"
  rm -rf "$dir"
  mkdir -p "$dir/upper" "$dir/work" "$dir/root"
  if ! mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$dir/upper,workdir=$dir/work" "$dir/root" 2>/dev/null; then
    rmdir "$dir/root"
    cp -a "$BASE" "$dir/root"
  fi
  cleanroom_mount "$dir/root"
  echo "$dir/root"
}

cleanroom_destroy() {
  local root=$1
  [ -n "$root" ] && [ -d "$root" ] || return 0
  cleanroom_umount "$root"
  grep -q " $root overlay " /proc/mounts && umount "$root"
  # Never follow a mount into the host: rm only what holds no mount.
  if ! grep -q " $root" /proc/mounts; then
    rm -rf "$(dirname "$root")"
  else
    cleanroom_log "leaving $root: something is still mounted in it"
  fi
}
