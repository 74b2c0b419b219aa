# Run after `git apply` of this call's patch (README.md here).
set -u
export PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/date.txt
( time python3 -m kernels.thunderkittens.build ) > $OUT/build.txt 2>&1
TK_BWD_EXP_OVERLAP=1 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_overlap.txt 2>&1
tail -3 $OUT/tests_overlap.txt
grep -q " passed" $OUT/tests_overlap.txt && ! grep -q "failed" $OUT/tests_overlap.txt && AB_VAR=TK_BWD_EXP_OVERLAP timeout 400 python3 docs/perf/2026-12-01_h200_tk_bwd_cudnn_structure/ab.py anchor,8b,70b-tp8 4 > $OUT/ab.txt 2>&1
cat $OUT/ab.txt | tail -12
cd $OUT && tar czf out.tgz *.txt && rm -f *.txt
