# issue 10 on one GPU each: TK kernel bench (GPU 1) beside the FP8 4-layer torch vs TK training pair (GPU 0)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
python3 -c "from kernels.thunderkittens import build; build.extension()" > $OUT/build.log 2>&1; echo "build rc=$? ${SECONDS}s"
(CUDA_VISIBLE_DEVICES=1 timeout 300 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B wq/wo,70B w2' > $OUT/bench.txt 2>&1; echo "bench rc=$? ${SECONDS}s") &
CUDA_VISIBLE_DEVICES=0 timeout 420 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 --common="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable" --a=--float8.backend=torch --b=--float8.backend=thunderkittens --out $OUT/fp8_tk_curves.md --timeout 200 > $OUT/fp8_curves.txt 2>&1; echo "curves rc=$? ${SECONDS}s"
wait
tail -8 $OUT/fp8_curves.txt; tail -30 $OUT/bench.txt
