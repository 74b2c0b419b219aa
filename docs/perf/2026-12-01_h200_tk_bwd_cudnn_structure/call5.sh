# Run after `git apply` of this call's patch (README.md here).
set -u
export PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1
TK_BWD_DQ_TURNS=2 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_lockstep.txt 2>&1
tail -2 $OUT/tests_lockstep.txt
grep -q " passed" $OUT/tests_lockstep.txt && ! grep -q "failed" $OUT/tests_lockstep.txt && timeout 400 python3 docs/perf/2026-12-01_h200_tk_bwd_cudnn_structure/ab.py anchor,8b,70b-tp8 4 0,2,1 > $OUT/ab.txt 2>&1
tail -14 $OUT/ab.txt
cd $OUT && tar czf out.tgz *.txt && rm -f *.txt
