export DEADLINE=560; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
python3 session/host_us.py 2>&1 | tee /tmp/logs/host_us.txt
C="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --profiling.enable_profiling=true --profiling.profile_start_step=9 --profiling.profile_steps=2"
for be in torch thunderkittens; do
  train fp8_$be 1 12 150 configs/llama3_8b.toml $C --float8.backend=$be
  f=$(ls -d /tmp/runs/fp8_$be/profile_traces/step-*/ 2>/dev/null | tail -1); cp $f/summary.md /tmp/logs/prof_$be.md 2>/dev/null
  python3 session/trace_gemms.py $f/rank0_trace.json.gz > /tmp/logs/gemms_$be.txt 2>&1
  head -1 /tmp/logs/gemms_$be.txt; grep -E "^idle|^GAP" /tmp/logs/gemms_$be.txt | head -8
  tail -1 /tmp/logs/fp8_$be.jsonl | cut -c1-60
done
finish
