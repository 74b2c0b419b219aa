export DEADLINE=440; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
timeout $(budget 230) python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py 2>&1 | tail -2 | tee /tmp/logs/pytest_fp8_gpu.txt
echo "pytest $((SECONDS-T0))s"
C="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --float8.backend=triton --compile.enable=false"
for v in after before; do
  cp session/fp8_init_$v.py kernels/fp8/__init__.py
  train eager_triton_$v 1 12 70 configs/llama3_8b.toml $C
  python3 session/tps2.py /tmp/logs/eager_triton_$v.jsonl 4
done
cp session/fp8_init_after.py kernels/fp8/__init__.py
finish
