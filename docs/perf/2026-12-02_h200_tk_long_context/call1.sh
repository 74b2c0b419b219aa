# Long context: TK vs cuDNN attention kernels at S 8192-32768 (8B heads), then a 4-layer Llama-3 8B
# at seq 32768 on one GPU, SDPA vs TK attention, 16 steps each (loss curves and tokens/s).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 120 python3 docs/perf/2026-12-02_h200_tk_long_context/long_s.py 2 8192,16384,32768 2>&1 | tee $OUT/call1_long_s.txt | tail -14
timeout 420 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 16 --ngpu 1 \
    --common="--model.overrides.n_layers=4 --training.seq_len=32768 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call1_loss_curves_8b_4layers_seq32k_1gpu.md > $OUT/call1_compare.txt 2>&1; tail -25 $OUT/call1_compare.txt
