# Shared by the session's device calls (not committed). Usage: source session/lib.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=4 THUNDERKITTENS_ROOT=$PWD/.tk
T0=$SECONDS
DEADLINE=${DEADLINE:-570}
mkdir -p /tmp/runs /tmp/logs
left() { echo $(( DEADLINE - (SECONDS - T0) )); }
# budget NAME SECONDS: the smaller of SECONDS and the time left before the deadline
budget() { local l; l=$(left); (( $1 < l )) && echo $1 || echo $l; }
# train NAME NGPU STEPS MAXSEC CONFIG [overrides...]
train() {
  local name=$1 ngpu=$2 steps=$3 t; t=$(budget $4); local cfg=$5; shift 5
  if (( t < 30 )); then echo "SKIP $name (no time left)"; return; fi
  local s=$SECONDS
  timeout -k 10 $t torchrun --standalone --nproc_per_node=$ngpu -m trainer.train --config $cfg \
    --training.steps=$steps --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/runs --run.name=$name "$@" > /tmp/logs/$name.log 2>&1
  local rc=$?
  cp /tmp/runs/$name/metrics.jsonl /tmp/logs/$name.jsonl 2>/dev/null
  echo "RUN $name rc=$rc wall=$((SECONDS - s))s steps_logged=$(wc -l < /tmp/logs/$name.jsonl 2>/dev/null)"
  [[ $rc == 0 ]] || tail -5 /tmp/logs/$name.log
}
finish() {
  tar -czf $OUT/logs.tar.gz -C /tmp logs
  echo "total wall $((SECONDS - T0))s"
}
