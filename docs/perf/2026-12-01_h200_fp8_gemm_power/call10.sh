export DEADLINE=300; source session/lib.sh; export PYTHONPATH=$PWD
s=$SECONDS
timeout $(budget 200) python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1
echo "build rc=$? wall=$((SECONDS-s))s"; tail -2 /tmp/logs/build.log
s=$SECONDS
timeout -k 5 $(budget 100) python3 -m pytest -q -x -m gpu tests/gpu/test_thunderkittens.py -p no:cacheprovider > /tmp/logs/tests.log 2>&1
echo "tk tests rc=$? wall=$((SECONDS-s))s"; tail -1 /tmp/logs/tests.log; grep -E "FAILED|Error" /tmp/logs/tests.log | head -3
timeout -k 5 $(budget 120) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B wq/wo,70B w2' > /tmp/logs/bench.log 2>&1; echo "bench rc=$?"
grep "|" /tmp/logs/bench.log | grep -v -e "---" -e promoted | cut -c1-110
cp /tmp/logs/bench.log $OUT/bench_final.txt
finish
