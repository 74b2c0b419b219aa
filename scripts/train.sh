#!/usr/bin/env bash
# Launch titankit on this machine with torchrun.
#   NGPU=8 CONFIG=configs/llama3_8b.toml ./scripts/train.sh --training.steps=100
# NGPU: processes to start (default: all visible GPUs, or 2 CPU ranks when there is no GPU).
# CONFIG (or --config FILE): the TOML file (default configs/debug.toml). Other arguments are config
# overrides.
# Several nodes (see scripts/multinode.sbatch): NNODES, RDZV_ENDPOINT=host:port and RDZV_ID.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ -z "${NGPU:-}" ]; then
  NGPU=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() or 2)')
fi
for n in "$NGPU" "${NNODES:-1}"; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: NGPU='$NGPU' NNODES='${NNODES:-1}': each must be a whole number >= 1 (NGPU: processes per node)" >&2
    exit 2
  fi
done
# The file comes from CONFIG, or from --config FILE / --config=FILE among the arguments (torchrun's
# form), not from both.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config=*) cli_config=${1#--config=}; config_given=1 ;;
    --config) [ $# -ge 2 ] || { echo "error: --config needs a file" >&2; exit 2; }
              cli_config=$2; config_given=1; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
# --config=$CFG with CFG unset must not fall back to the default file and train that instead.
if [ -n "${config_given:-}" ] && [ -z "$cli_config" ]; then
  echo "error: --config is empty; pass a TOML file" >&2
  exit 2
fi
if [ -n "${cli_config:-}" ]; then
  if [ -n "${CONFIG:-}" ] && [ "$CONFIG" != "$cli_config" ]; then
    echo "error: two config files: CONFIG=$CONFIG and --config $cli_config; give one" \
         "(to combine files, write include = [...] in the TOML)" >&2
    exit 2
  fi
  CONFIG=$cli_config
elif [ -n "${CONFIG:-}" ]; then
  env_config=1  # the file comes from the environment alone (check_env_config)
fi
set -- ${args[@]+"${args[@]}"}
CONFIG=${CONFIG:-configs/debug.toml}
# A file named by CONFIG alone is checked before trainer.config, which gets it as --config and would
# blame "command line". Relative paths start at the repository root (the cd above), so say where.
check_env_config() {
  local looked relative=""
  [ -n "${env_config:-}" ] || return 0
  looked=${CONFIG/#\~/$HOME}  # as Python's expanduser, for CONFIG="~/x.toml"
  if [[ "$looked" != /* ]]; then
    looked="$PWD/$looked"
    relative=": a relative path starts at the repository root, where train.sh runs"
  fi
  if [ -d "$looked" ]; then
    echo "error: CONFIG=$CONFIG (from the environment) is a folder, not a TOML file (looked at $looked$relative)" >&2
    exit 2
  elif [ ! -e "$looked" ]; then
    echo "error: CONFIG=$CONFIG (from the environment): config file not found (looked for $looked$relative)" >&2
    exit 2
  fi
}
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# With torchrun's default shared rendezvous store, a group restarted by --max-restarts reads the
# previous attempt's addresses and fails to connect (pytorch/pytorch#135712): one store per attempt.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=${TORCH_DISABLE_SHARE_RDZV_TCP_STORE:-1}
# The config is checked once here, before torchrun starts a rank: an error is one line, not one per
# rank inside torchrun's own traceback. The ranks check it again (their warnings are the ones shown).
case " $* " in
  *" --help "*|*" -h "*) exec "$PYTHON" -m trainer.train --help ;;  # once, not once per rank
  *) check_env_config
     PYTHONWARNINGS=ignore "$PYTHON" -m trainer.config --config "$CONFIG" "$@" \
       --world-size $((NGPU * ${NNODES:-1})) > /dev/null || exit $? ;;
esac
if [ "${NNODES:-1}" -gt 1 ]; then
  rdzv=(--nnodes="$NNODES" --rdzv_backend=c10d --rdzv_endpoint="${RDZV_ENDPOINT:?set host:port}"
        --rdzv_id="${RDZV_ID:-titankit}")
else
  rdzv=(--standalone)
fi
# Preemption (README): SIGTERM or SIGUSR1 makes every rank finish its step, save it and exit 0.
# torchrun handles neither usefully: SIGTERM it forwards to the ranks but then exits non-zero, and
# SIGUSR1 (outside its --signals-to-handle, default SIGTERM,SIGINT,SIGHUP,SIGQUIT) kills it. So this
# script traps both and signals the ranks itself, and torchrun starts with SIGUSR1 ignored: Slurm's
# `--signal=USR1@T` (no B:) signals every process of the step at once, torchrun included. An ignored
# signal stays ignored across exec and in torchrun's children, so a rank ignores SIGUSR1 too until
# trainer/train.py installs its handler (its first step; the signals of the start-up are kept).
# Ctrl-C (README): the terminal's SIGINT reaches this script and torchrun, not the ranks (each runs in
# its own session). torchrun would send it on and SIGKILL the ranks 30 s later, mid-save, so it
# starts with SIGINT ignored and left out of its --signals-to-handle (torch >= 2.9, pytorch#160690;
# looked up in its source, since importing torch takes seconds), and this script forwards it: the
# first makes the ranks finish the step, save it and stop; a second stops them at once.
torch_dir=$("$PYTHON" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])' 2>/dev/null || true)
own_int=""
ignored="USR1"
handled=()
if grep -q -- "--signals-to-handle" "$torch_dir/distributed/run.py" 2>/dev/null; then
  own_int=1
  ignored="USR1 INT"
  handled=(--signals-to-handle=SIGTERM,SIGHUP,SIGQUIT)
fi
# TITANKIT_LAUNCHER_PID: torchrun's pid (this subshell's, which exec keeps), so that a rank started
# after torchrun exited stops at once (trainer/preemption.py end_with_the_launcher).
( trap '' $ignored; export TITANKIT_LAUNCHER_PID=$BASHPID; exec "$PYTHON" -m torch.distributed.run "${rdzv[@]}" --nproc_per_node="$NGPU" \
  "${handled[@]}" ${MAX_RESTARTS:+--max-restarts=$MAX_RESTARTS} \
  -m trainer.train --config "$CONFIG" "$@" ) &
launcher=$!

workers() {  # torchrun's children on one line
  local pids
  pids=$(pgrep -P "$launcher" 2>/dev/null \
         || cat /proc/"$launcher"/task/*/children 2>/dev/null || true)
  echo $pids
}
signalled=""  # the ranks a preemption signal was forwarded to
# The ranks run in their own sessions (torchrun starts them so), so they are signalled by pid.
forward() {
  local kids
  kids=$(workers)
  if [ -n "$kids" ]; then
    signalled="$signalled $kids"
    kill -s "$1" $kids 2>/dev/null || true
  else
    # No rank yet, so nothing to save: stop the launcher (TERM: it ignores USR1).
    signalled="$signalled none"
    kill -s TERM "$launcher" 2>/dev/null || true
  fi
}
trap 'forward TERM' TERM
trap 'forward USR1' USR1
interrupted=""
if [ -n "$own_int" ]; then
  trap 'interrupted=1; forward INT' INT
else
  trap 'interrupted=1' INT  # torchrun forwards it
fi
# After a preemption signal, ranks that torchrun starts anew (--max-restarts, once a rank exited
# non-zero: checkpoint.enable = false, or a failed save) would only train until the scheduler kills
# the job: stop torchrun instead, so that the job ends now and non-zero.
# Once: torchrun tears the new ranks down on its first TERM, and they stop at their first step (they
# record the signal from their first line); a second TERM during that teardown would kill torchrun
# itself (exit 143 instead of its failure status 1).
stopped_restart=""
stop_restart() {
  local kid
  [ -n "$stopped_restart" ] && return
  for kid in $(workers); do
    case " $signalled " in
      *" $kid "*) ;;
      *) stopped_restart=1; kill -s TERM "$launcher" 2>/dev/null || true; return ;;
    esac
  done
}
set +e
while kill -0 "$launcher" 2>/dev/null; do
  if [ -z "$signalled" ]; then
    wait "$launcher"  # returns early (status > 128) whenever a trapped signal arrives
  else
    stop_restart
    sleep 0.5
  fi
done
wait "$launcher"
status=$?
# After Ctrl-C the ranks exit 0 once their step is saved, but the command was interrupted: 130, as a
# shell reports it, so that `train.sh && next` does not go on.
[ -n "$interrupted" ] && exit 130
exit $status
