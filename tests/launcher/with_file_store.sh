#!/usr/bin/env bash
# Runs a command with rendezvous through a fresh FileStore (ACCL_STORE_FILE).
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export ACCL_STORE_FILE="$dir/store"
"$@"
