#!/bin/sh
# examples/bert/run_pretraining.sh as a two-node container job would start it:
# two simulated hosts (network namespaces), one process each, the job's
# environment (MASTER_ADDR, MASTER_PORT, RANK = node rank, WORLD_SIZE = nodes,
# NPROC_PER_NODE, PHASE, BATCH_SIZE, BACKEND) and torchrun under it, on CPU.
#   bert_script_test.sh SOURCE_DIR PYTHON TORCH_ACCL_DIR WORK_DIR
src=$1 py=$2 staged=$3 work=$4
. "$src/tests/netns/lib.sh"
export ACCL_NETNS_PREFIX=accl-bert ACCL_NETNS_SUBNET=10.79.0
netns_hosts_up "$src" 2
rm -rf "$work" && mkdir -p "$work" || exit 1
pids=""
for node in 0 1; do
  ip netns exec accl-bert$node env MASTER_ADDR=10.79.0.1 MASTER_PORT=29531 RANK=$node WORLD_SIZE=2 NPROC_PER_NODE=1 \
    PHASE=1 BATCH_SIZE=4 BACKEND=accl CONFIG=tiny STEPS=6 SAVE_EVERY=0 CHECKPOINT="$work/ck.pt" PYTHON="$py" \
    PYTHONPATH="$staged" OMP_NUM_THREADS=1 ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT \
    "$src/examples/bert/run_pretraining.sh" --log-every 2 --threads 1 >"$work/node$node.log" 2>&1 &
  pids="$pids $!"
done
fails=0
for p in $pids; do wait "$p" || fails=$((fails + 1)); done
for node in 0 1; do echo "== node $node"; grep -E "run_pretraining|BERT tiny|step .*6/|done:|Error|error" "$work/node$node.log" | head -8; done
[ $fails -eq 0 ] || { echo "FAIL: $fails node(s) failed"; tail -30 "$work/node0.log" "$work/node1.log"; exit 1; }
grep -q "node 1 of 2, 1 process(es) per node, master 10.79.0.1:29531" "$work/node1.log" || { echo "FAIL: node 1's banner"; exit 1; }
grep -q "2 rank(s), backend accl" "$work/node0.log" || { echo "FAIL: not one job of 2 ranks on accl"; exit 1; }
grep -q "done: first loss" "$work/node0.log" || { echo "FAIL: training did not finish"; exit 1; }
# The two ranks are on different hosts: ACCL connected them over TCP.
cat "$work"/node*.log | grep -q "tcp" || { echo "FAIL: no TCP peer in ACCL's INFO log"; exit 1; }
[ -f "$work/ck.pt" ] || { echo "FAIL: no checkpoint written"; exit 1; }
echo "bert_script: 2 hosts x 1 rank trained through run_pretraining.sh"
