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

PY=/usr/bin/python3
PYPATH=$(cd "${BUILD_DIR:-build}" && pwd)/python
if [ -f "$PYPATH/torch_accl/__init__.py" ]; then
  echo
  echo "== torch_accl: versions, C++ ABI, usable backends, 2-process self-test"
  PYTHONPATH=$PYPATH $PY -m torch_accl.check

  echo
  echo "== torch all_reduce: backend='accl' against torch's gloo, same processes (2 ranks)"
  PYTHONPATH=$PYPATH "$BIN/accl-run" -n 2 $PY bench/torch_allreduce_bench.py --min 8 --max 32M --factor 16 --rounds 5 --time-budget 0.2 \
    2>&1 | sed -n 's/^\[0\] //p'

  echo
  echo "== BERT pretraining (tiny config, MLM + NSP) on 2 ranks with backend='accl'"
  PYTHONPATH=$PYPATH OMP_NUM_THREADS=1 "$BIN/accl-run" -n 2 $PY examples/bert/pretrain.py --config tiny \
    --backend accl --steps ${DEMO_BERT_STEPS:-40} --seq-len 64 --batch-size 4 --log-every 10 --warmup 5 \
    2>&1 | sed -n 's/^\[0\] //p'
else
  echo
  echo "== torch_accl was not built (see the TORCH line of the configuration summary): no BERT run"
fi
