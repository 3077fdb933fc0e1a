#!/usr/bin/env bash
# The checks that need a GPU host, which a CPU-only CI cannot run.
#
#   scripts/gpu-check.sh [cmake arguments...]
#
# Builds ACCL with CUDA, NCCL and torch_accl required (the python3 on PATH,
# whose torch must be a CUDA build) into ${BUILD_DIR:-build-gpu}, then:
#   1. ctest -L gpu with ACCL_REQUIRE_GPU=1, so that a missing GPU fails
#      instead of skipping: accl-perf on device buffers through the nccl
#      backend (every op, results checked, a corrupted element caught), and
#      torch_accl's CUDA suite (the staged path ordered after the current
#      stream, DDP on device tensors; the nccl path where there are 2 GPUs);
#   2. bench/torch_cuda_bench.py on 2 ranks: all_reduce of device tensors
#      staged through host memory (ACCL_TORCH_CUDA=stage) against torch's gloo
#      on the same tensors, beside the host copies any staging needs;
#   3. the BERT example through its entry script (examples/bert/run_pretraining.sh)
#      on the GPUs, AMP on: BACKEND=nccl, BACKEND=accl (device tensors go where
#      ACCL_TORCH_CUDA's auto choice sends them) and BACKEND=accl with
#      ACCL_TORCH_CUDA=stage; one process per GPU, STEPS (default 12) steps of
#      CONFIG (default large), printing the time per step and peak GPU memory.
# The BERT runs read examples/bert/data/kjv.txt, which pretrain.py makes with
# Debian's bible-kjv package: install it or copy the file from another machine.
# The build dependencies must be installed first (scripts/setup.sh does it on
# Debian and Ubuntu). Logs: ${BUILD_DIR}/gpu-check/. Exit status: 0 when every
# stage passed.
# STAGE_TIMEOUT (seconds, default 1800) ends a stage that runs longer, as a
# failure of that stage; BENCH_MAX (default 256M) is the largest size of step 2.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$PWD
BUILD_DIR=${BUILD_DIR:-build-gpu}
STEPS=${STEPS:-12}
CONFIG=${CONFIG:-large}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-1800}
BENCH_MAX=${BENCH_MAX:-256M}
[[ $STAGE_TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check.sh: STAGE_TIMEOUT=$STAGE_TIMEOUT; accepted: a whole number of seconds" >&2; exit 2; }
py=$(command -v python3) || { echo "gpu-check.sh: no python3 on PATH" >&2; exit 2; }
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check.sh: $py's torch sees no GPU (torch.cuda.is_available() is False): run this on a GPU host" >&2
  exit 2
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
case $BUILD_DIR in /*) logs=$BUILD_DIR/gpu-check ;; *) logs=$src/$BUILD_DIR/gpu-check ;; esac
mkdir -p "$logs"
failed=()
stage() {  # stage NAME COMMAND...: runs it, its output also in $logs/NAME.log
  local name=$1; shift
  local t0=$(date +%s)
  echo "== gpu-check: $name"
  timeout -k 10 "$STAGE_TIMEOUT" "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  local why=""; [ "$rc" -eq 124 ] && why=" (stopped after STAGE_TIMEOUT=${STAGE_TIMEOUT} s)"
  echo "== gpu-check: $name: rc $rc in $(( $(date +%s) - t0 )) s$why"
  [ "$rc" -eq 0 ] || failed+=("$name")
  return "$rc"
}

stage configure cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DACCL_WITH_CUDA=ON -DACCL_WITH_NCCL=ON -DACCL_WITH_TORCH=ON -DACCL_PYTHON="$py" \
  "$@" || exit 1
# What the gpu-labelled tests and the example run; not the whole suite.
stage build cmake --build "$BUILD_DIR" -j"$(nproc)" --target accl-run accl-perf accl-info allreduce_example torch_accl accl-backend-nccl \
  || exit 1

cd "$BUILD_DIR"
stage ctest env ACCL_REQUIRE_GPU=1 ctest -V -L gpu
pydir=$(sed -n 's/^[^=]*=[^=]*=//p' torch-builds.txt | head -1)
cd "$src"
ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())')
# Device tensors staged through host memory against torch's gloo on the same
# tensors, and the copies any staging needs (2 ranks; they share a GPU on a
# host with one).
stage cuda-bench env ACCL_TORCH_CUDA=stage PYTHONPATH="$pydir" "$BUILD_DIR/bin/accl-run" -n 2 \
  "$py" bench/torch_cuda_bench.py --min 64K --max "$BENCH_MAX"
for run in nccl accl accl-stage; do
  backend=${run%-stage}
  env=(); [ "$run" = accl-stage ] && env=(ACCL_TORCH_CUDA=stage)
  stage "bert-$run" env "${env[@]}" PYTHONPATH="$pydir" MASTER_PORT=$(( 29700 + RANDOM % 200 )) NPROC_PER_NODE="$ngpu" \
    PHASE=1 BATCH_SIZE=${BATCH_SIZE:-32} STEPS="$STEPS" CONFIG="$CONFIG" BACKEND="$backend" SAVE_EVERY=0 \
    examples/bert/run_pretraining.sh --log-every 4 --threads 2 --checkpoint ""
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu-check.sh: failed: ${failed[*]} (logs in $logs)"
  exit 1
fi
echo "gpu-check.sh: every stage passed on $ngpu GPU(s) (logs in $logs)"
