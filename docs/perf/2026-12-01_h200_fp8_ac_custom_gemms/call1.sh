export DEADLINE=560; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
timeout $(budget 200) python3 session/fp8_layer.py > /tmp/logs/fp8_layer.txt 2>&1; echo "fp8_layer rc=$? $((SECONDS-T0))s"
tail -22 /tmp/logs/fp8_layer.txt
C="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --profiling.enable_profiling=true --profiling.profile_start_step=9 --profiling.profile_steps=2"
for be in torch thunderkittens; do
  train fp8_$be 1 12 150 configs/llama3_8b.toml $C --float8.backend=$be
  f=$(ls -d /tmp/runs/fp8_$be/profile_traces/step-*/ 2>/dev/null | tail -1); cp $f/summary.md /tmp/logs/prof_$be.md 2>/dev/null
  tail -2 /tmp/logs/fp8_$be.jsonl | cut -c1-400
  grep -E "^\| (compute|device|Average)|GEMM|Average step" /tmp/logs/prof_$be.md | head -8
done
finish
