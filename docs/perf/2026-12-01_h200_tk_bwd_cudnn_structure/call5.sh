set -u
export PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1
TK_BWD_DQ_TURNS=2 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_lockstep.txt 2>&1
tail -2 $OUT/tests_lockstep.txt
grep -q " passed" $OUT/tests_lockstep.txt && ! grep -q "failed" $OUT/tests_lockstep.txt && timeout 400 python3 session/ab.py anchor,8b,70b-tp8 4 0,2,1 > $OUT/ab.txt 2>&1
tail -14 $OUT/ab.txt
cd $OUT && tar czf out.tgz *.txt && rm -f *.txt
