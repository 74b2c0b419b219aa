# Column scales through shared memory (in the tree): SASS counts of both kernels, the FP8 GEMM
# tests, then ab.py against main's kernel (a copy of main's file carried in .tk/).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/.tk/main_gemm_fp8_rowwise_sm90.cu
D=docs/perf/2026-12-04_h200_fp8_gemm_smem_scales
{ date -u; git log -1 --format='%H %s'; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu $AB_MAIN_GEMM; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
FLAGS=$(python3 -c "from kernels.thunderkittens import build; print(' '.join(build.nvcc_flags(build.tk_root())))")
cp $AB_MAIN_GEMM kernels/thunderkittens/zz_main_gemm.cu
for f in gemm_fp8_rowwise_sm90 zz_main_gemm; do
  nvcc $FLAGS -cubin -o /tmp/$f.cubin kernels/thunderkittens/$f.cu && cuobjdump -sass /tmp/$f.cubin > /tmp/$f.sass
  python3 - /tmp/$f.sass $f <<'PY' >> $OUT/call1_sass.txt
import collections, re, sys
fun, cnt = None, {}
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m: fun = "rowwise" if "ILb0" in m.group(1) else "tensorwise"; cnt[fun] = collections.Counter()
    m = re.match(r"\s+/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
    if m and fun: cnt[fun][m.group(1).split(".")[0]] += 1
for f, c in cnt.items():
    keys = ["LDG", "LDS", "LD", "STS", "ST", "FMUL", "ISETP", "SEL", "BAR", "HGMMA", "QGMMA"]
    print(sys.argv[2], f, "total", sum(c.values()), " ".join(f"{k} {c[k]}" for k in keys))
PY
done
rm kernels/thunderkittens/zz_main_gemm.cu
echo "sass at $((SECONDS-T0)) s"; cat $OUT/call1_sass.txt
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/call1_tests.txt
timeout $((570-SECONDS+T0)) python3 $D/ab.py ${ROUNDS:-4} 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call1_ab.txt | cut -c1-170 | head -50
