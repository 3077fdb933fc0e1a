#!/usr/bin/env bash
# The main job on one machine, no configuration: installs what is missing,
# builds, shows what this build can do, benchmarks the backends side by side
# and runs a small program on each.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=${BUILD_DIR:-build}/bin
NP=${DEMO_RANKS:-2}

echo
echo "== accl-info: version, backends, configuration"
"$BIN/accl-info" --backends

echo
echo "== accl-topo: GPUs, NICs, NUMA nodes of this host and what each local rank should use"
"$BIN/accl-topo" --ranks "$NP"

mapfile -t backends < <("$BIN/accl-info" --backends | awk '$2 == "usable" {print $1}')
echo
echo "== Side-by-side float32 sum allreduce, $NP ranks on this host (accl-perf)"
summary=()
for b in "${backends[@]}"; do
  if [ "$b" = mpi ]; then launch=(mpirun --oversubscribe -n "$NP"); else launch=("$BIN/accl-run" -n "$NP"); fi
  echo "-- backend $b"
  out=$("${launch[@]}" "$BIN/accl-perf" --backend "$b" -b 8 -e 16M -f 8 -n 10 -w 3 -c 1 2>&1)
  echo "$out" | sed 's/^\[0\] //' | grep -v '^\[[1-9]'
  summary+=("$b: $(echo "$out" | grep -o 'Avg bus bandwidth *: [0-9.e+-]*')")
done
echo
echo "== Summary (average busbw over sizes, GB/s)"
printf '  %s\n' "${summary[@]}"

echo
echo "== A program using the SDK (examples/cpp/allreduce) on every backend"
for b in "${backends[@]}"; do
  if [ "$b" = mpi ]; then launch=(mpirun --oversubscribe -n "$NP"); else launch=("$BIN/accl-run" -n "$NP"); fi
  "${launch[@]}" "$BIN/allreduce_example" "$b"
done

echo
if command -v mpirun >/dev/null && [ -x "$BIN/accl-vs-mpi" ]; then
  echo
  echo "== accl against Open MPI's MPI_Allreduce, same run, same buffers (2 ranks)"
  mpirun --oversubscribe -n 2 "$BIN/accl-vs-mpi" --reps 1 --max 16777216
fi

echo
echo "== BERT training with backend='accl' needs the PyTorch plugin (torch_accl),"
echo "   which is not part of this version yet."
