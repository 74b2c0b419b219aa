#!/usr/bin/env bash
# Launch titankit on this machine with torchrun.
#   NGPU=8 CONFIG=configs/llama3_8b.toml ./scripts/train.sh --training.steps=100
# NGPU: processes to start (default: all visible GPUs, or 2 CPU ranks when there is no GPU).
# CONFIG: the TOML file (default configs/debug.toml). Extra arguments are config overrides.
# Several nodes (see scripts/multinode.sbatch): NNODES, RDZV_ENDPOINT=host:port and RDZV_ID.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ -z "${NGPU:-}" ]; then
  NGPU=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() or 2)')
fi
CONFIG=${CONFIG:-configs/debug.toml}
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# With torchrun's default shared rendezvous store, a group restarted by --max-restarts reads the
# previous attempt's addresses and fails to connect (pytorch/pytorch#135712): one store per attempt.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=${TORCH_DISABLE_SHARE_RDZV_TCP_STORE:-1}
if [ "${NNODES:-1}" -gt 1 ]; then
  rdzv=(--nnodes="$NNODES" --rdzv_backend=c10d --rdzv_endpoint="${RDZV_ENDPOINT:?set host:port}"
        --rdzv_id="${RDZV_ID:-titankit}")
else
  rdzv=(--standalone)
fi
"$PYTHON" -m torch.distributed.run "${rdzv[@]}" --nproc_per_node="$NGPU" \
  ${MAX_RESTARTS:+--max-restarts=$MAX_RESTARTS} \
  -m trainer.train --config "$CONFIG" "$@" &
launcher=$!

# Preemption: SIGTERM (or SIGUSR1, e.g. `sbatch --signal=B:USR1@120`) to this script is forwarded
# to the training processes themselves; they finish the current step, save a checkpoint and exit 0,
# so torchrun and this script exit 0 too. (torchrun starts its workers in their own sessions, and
# when it gets SIGTERM itself it forwards it but then exits non-zero.)
forward() {
  local kids
  kids=$(pgrep -P "$launcher" 2>/dev/null || cat /proc/"$launcher"/task/*/children 2>/dev/null || true)
  if [ -n "$kids" ]; then
    kill -s "$1" $kids 2>/dev/null || true
  else
    kill -s "$1" "$launcher" 2>/dev/null || true  # workers not started yet: stop the launcher
  fi
}
trap 'forward TERM' TERM
trap 'forward USR1' USR1
set +e
# `wait` returns early (status > 128) whenever a trapped signal arrives: wait again until torchrun ends.
while kill -0 "$launcher" 2>/dev/null; do
  wait "$launcher"
done
wait "$launcher"
exit $?
