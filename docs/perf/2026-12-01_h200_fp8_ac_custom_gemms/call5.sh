export DEADLINE=585; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"
timeout $(budget 170) python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py -k "selective_ac or full_ac" 2>&1 | tail -2 | tee /tmp/logs/pytest_ac.txt
echo "pytest done $((SECONDS-T0))s"
timeout $(budget 150) python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable" \
    --a=--float8.backend=torch --b=--float8.backend=thunderkittens --out /tmp/logs/fp8_tk_vs_torch_4layers.md > /tmp/logs/compare.log 2>&1
echo "compare rc=$? $((SECONDS-T0))s"; grep -iE "tokens|largest|mean rel" /tmp/logs/fp8_tk_vs_torch_4layers.md | head -6
cp trainer/parallel/checkpointing.py /tmp/final_ckpt.py
M="--model.name=moe --model.flavor=moe_16b --model.overrides.n_layers=4 --training.seq_len=8192 --training.local_batch_size=1 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op --compile.enable --optimizer.lr=3e-4"
for v in final grouped; do
  if [[ $v == grouped ]]; then cp session/grouped_ckpt.py trainer/parallel/checkpointing.py; fi
  n=moe2_$v; train $n 1 16 100 configs/debug.toml $M
  python3 session/tps2.py /tmp/logs/$n.jsonl 5
done
cp /tmp/final_ckpt.py trainer/parallel/checkpointing.py
finish
