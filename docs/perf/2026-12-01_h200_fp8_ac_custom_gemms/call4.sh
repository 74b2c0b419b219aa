export DEADLINE=580; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
cp trainer/parallel/checkpointing.py /tmp/new_ckpt.py
use() { if [[ $1 == old ]]; then cp session/old_checkpointing.py trainer/parallel/checkpointing.py; else cp /tmp/new_ckpt.py trainer/parallel/checkpointing.py; fi; }
C="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable"
for run in thunderkittens:new torch:new thunderkittens:old; do
  be=${run%%:*}; v=${run##*:}; use $v; n=d_${be}_$v
  train $n 1 25 90 configs/llama3_8b.toml $C --float8.backend=$be
  python3 session/tps2.py /tmp/logs/$n.jsonl 5
done
M="--model.name=moe --model.flavor=moe_16b --model.overrides.n_layers=4 --training.seq_len=8192 --training.local_batch_size=1 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op --compile.enable --optimizer.lr=3e-4 --profiling.enable_profiling=true --profiling.profile_start_step=9 --profiling.profile_steps=1"
for v in old new; do
  use $v; n=moe_$v
  train $n 1 14 150 configs/debug.toml $M
  python3 session/tps2.py /tmp/logs/$n.jsonl 10
  f=$(ls -d /tmp/runs/$n/profile_traces/step-*/ 2>/dev/null | tail -1); cp $f/summary.md /tmp/logs/prof_$n.md 2>/dev/null
  python3 - $f/rank0_trace.json.gz <<'PY'
import gzip, json, sys, collections
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
c = collections.Counter(); d = collections.Counter()
for e in ev:
    if e.get("cat") == "kernel" and any(s in e["name"].lower() for s in ("group", "gemm", "nvjet", "cutlass", "sm90")):
        c[e["name"][:90]] += 1; d[e["name"][:90]] += e["dur"]
for k, v in c.most_common(12): print(f"  {v:4d} {d[k]/1000:8.2f} ms  {k}")
PY
done
use new
finish
