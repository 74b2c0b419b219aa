# A/B on one H200: FP8 tensorwise backward reusing the forward's amaxes (new) vs recomputing them (old),
# 4-layer Llama-3 8B, compiled, selective AC (the config's) and no AC; old/new alternated.
set -u
export PYTHONPATH=$PWD
date -u > $OUT/date.txt
swap() { cp session/$1/trainer/float8.py trainer/float8.py; cp session/$1/kernels/fp8/__init__.py kernels/fp8/__init__.py;
         cp session/$1/trainer/parallel/checkpointing.py trainer/parallel/checkpointing.py; }
run() {  # name, extra overrides
  swap $1
  timeout 240 python3 scripts/bench_train.py --config configs/llama3_8b.toml --ngpu 1 --warmup 4 --steps 8 \
     --model.overrides.n_layers=4 --float8.enable --float8.recipe=tensorwise --training.global_batch_size=4 \
     --training.mixed_precision_reduce=bfloat16 $2 --out $OUT/$1_$3.md > $OUT/$1_$3.log 2>&1
  grep -h "^| " $OUT/$1_$3.md | tail -1
}
for r in 1 2; do
  run old "" sac$r; run new "" sac$r
done
run new "--activation_checkpoint.mode=none" noac1; run old "--activation_checkpoint.mode=none" noac1
swap new
for f in $OUT/*.md; do echo "== $f"; grep "^| " $f | tail -1; done
cd $OUT && tar czf out.tgz *.md *.log *.txt && rm -f *.md *.log *.txt
