export DEADLINE=570; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
timeout $(budget 150) python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py -k "selective_ac" 2>&1 | tail -3 | tee /tmp/logs/pytest_ac.txt
cp trainer/parallel/checkpointing.py /tmp/new_ckpt.py
C="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --profiling.enable_profiling=true --profiling.profile_start_step=9 --profiling.profile_steps=2"
for run in thunderkittens:old thunderkittens:new triton:old triton:new torch:new; do
  be=${run%%:*}; v=${run##*:}
  if [[ $v == old ]]; then cp session/old_checkpointing.py trainer/parallel/checkpointing.py; else cp /tmp/new_ckpt.py trainer/parallel/checkpointing.py; fi
  n=fp8_${be}_$v
  train $n 1 16 $([[ $be == triton ]] && echo 150 || echo 100) configs/llama3_8b.toml $C --float8.backend=$be
  f=$(ls -d /tmp/runs/$n/profile_traces/step-*/ 2>/dev/null | tail -1); cp $f/summary.md /tmp/logs/prof_$n.md 2>/dev/null
  python3 session/trace_gemms.py $f/rank0_trace.json.gz > /tmp/logs/gemms_$n.txt 2>&1; head -1 /tmp/logs/gemms_$n.txt
  python3 session/tps.py /tmp/logs/$n.jsonl
done
cp /tmp/new_ckpt.py trainer/parallel/checkpointing.py
finish
