export DEADLINE=420; source session/lib.sh; export PYTHONPATH=$PWD
s=$SECONDS
timeout $(budget 200) python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1
echo "build rc=$? wall=$((SECONDS-s))s"; tail -3 /tmp/logs/build.log
TITANKIT_TK_GEMM_CLUSTER=2 TITANKIT_TK_GEMM_SUPER=8 timeout -k 5 $(budget 60) python3 -m pytest -q -x -m gpu tests/gpu/test_thunderkittens.py -k "gemm" -p no:cacheprovider > /tmp/logs/tests.log 2>&1
echo "gemm tests c2 super8 rc=$?"; tail -1 /tmp/logs/tests.log
timeout -k 5 $(budget 300) python3 session/gemm_energy.py "8192^3,70B w2,8B w1/w3" 4 "c1,c2,cublas,c1:8,c2:32" 1.0 > /tmp/logs/energy.log 2>&1; echo "energy rc=$?"
grep "^|" /tmp/logs/energy.log; grep -v "^|" /tmp/logs/energy.log | tail -5
finish
