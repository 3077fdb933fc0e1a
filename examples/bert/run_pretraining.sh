#!/usr/bin/env bash
# BERT pretraining on every GPU of every node, started the way multi-node
# container launches start it (the environment of the job, as NVIDIA's
# DeepLearningExamples run_pretraining.sh is used): run this same line on each
# node, e.g.
#
#   MASTER_ADDR=node0 MASTER_PORT=29500 RANK=<node rank> WORLD_SIZE=<nodes> \
#   NPROC_PER_NODE=8 PHASE=1 BATCH_SIZE=64 BACKEND=accl examples/bert/run_pretraining.sh
#
# Environment (defaults in brackets):
#   MASTER_ADDR [127.0.0.1]  MASTER_PORT [29500]  the first node's address and a free port
#   RANK [0]                 this node's rank (0 .. WORLD_SIZE-1), not a process rank
#   WORLD_SIZE [1]           the number of nodes
#   NPROC_PER_NODE [GPUs, else 1]  processes per node, one per GPU
#   PHASE [1]                1: sequence length 128, 2: sequence length 512
#   BATCH_SIZE [64 / 16]     sequences per process per step (phase 1 / phase 2)
#   BACKEND [accl]           accl, nccl, gloo or mpi
#   CONFIG [large]           tiny, mini, base or large
#   STEPS [phase 1: 7038, phase 2: 1563]   optimizer steps
#   GRAD_ACCUM [1]           micro-batches per step
#   CHECKPOINT [checkpoints/bert_<config>_phase<PHASE>.pt]  saved every SAVE_EVERY [200] steps
#   PYTHON [python3]         the interpreter that has torch (and torch_accl for BACKEND=accl)
# Further arguments go to pretrain.py (e.g. --corpus FILE... --vocab vocab.txt --amp fp16).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
NODE_RANK=${RANK:-0}
NNODES=${WORLD_SIZE:-1}
PHASE=${PHASE:-1}
BACKEND=${BACKEND:-accl}
CONFIG=${CONFIG:-large}
GRAD_ACCUM=${GRAD_ACCUM:-1}
SAVE_EVERY=${SAVE_EVERY:-200}
case $PHASE in
  1) seq=128; batch=${BATCH_SIZE:-64}; steps=${STEPS:-7038} ;;
  2) seq=512; batch=${BATCH_SIZE:-16}; steps=${STEPS:-1563} ;;
  *) echo "run_pretraining.sh: PHASE=$PHASE; accepted: 1 (sequence length 128) or 2 (512)" >&2; exit 2 ;;
esac
case $BACKEND in accl|nccl|gloo|mpi) ;; *)
  echo "run_pretraining.sh: BACKEND=$BACKEND; accepted: accl, nccl, gloo, mpi" >&2; exit 2 ;;
esac
for v in NODE_RANK NNODES GRAD_ACCUM SAVE_EVERY batch steps MASTER_PORT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "run_pretraining.sh: $v=${!v} is not a whole number" >&2; exit 2; }
done
(( NODE_RANK < NNODES )) || { echo "run_pretraining.sh: RANK=$NODE_RANK, but WORLD_SIZE (nodes) is $NNODES" >&2; exit 2; }
if [ -z "${NPROC_PER_NODE:-}" ]; then
  NPROC_PER_NODE=$("$PYTHON" -c "import torch; print(max(1, torch.cuda.device_count()))")
fi
CHECKPOINT=${CHECKPOINT:-checkpoints/bert_${CONFIG}_phase${PHASE}.pt}
mkdir -p "$(dirname "$CHECKPOINT")"
resume=()
[ -f "$CHECKPOINT" ] && resume=(--resume)

echo "run_pretraining.sh: node $NODE_RANK of $NNODES, $NPROC_PER_NODE process(es) per node, master $MASTER_ADDR:$MASTER_PORT;" \
     "BERT $CONFIG phase $PHASE (sequence $seq), batch $batch x $GRAD_ACCUM per process, $steps steps, backend $BACKEND"
# torchrun gives each process RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE.
unset RANK WORLD_SIZE
exec "$PYTHON" -m torch.distributed.run \
  --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC_PER_NODE" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
  "$here/pretrain.py" --config "$CONFIG" --backend "$BACKEND" --seq-len "$seq" --batch-size "$batch" \
  --grad-accum "$GRAD_ACCUM" --steps "$steps" --checkpoint "$CHECKPOINT" --save-every "$SAVE_EVERY" \
  "${resume[@]}" "$@"
