#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite.
#   scripts/test.sh                 everything
#   scripts/test.sh -L unit         only tests with a CTest label (unit, threads,
#                                   multiproc, conformance, launcher, install)
#   scripts/test.sh -R gloo.np2     only tests matching a name
#   ACCL_TEST_RDMA=0 scripts/test.sh   everything but the soft-RoCE guest (label rdma)
# Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${BUILD_DIR:-build}"
start=$(date +%s)
# Multi-process tests oversubscribe the cores already: run one test at a time.
if [ "${ACCL_TEST_RDMA:-1}" = 0 ]; then set -- -LE rdma "$@"; fi
ctest --output-on-failure --timeout 3000 "$@"
echo "test.sh: finished in $(( $(date +%s) - start )) s"
