export DEADLINE=560; source session/lib.sh; export PYTHONPATH=$PWD
nvidia-smi --query-gpu=clocks.max.sm,power.limit,power.default_limit --format=csv
s=$SECONDS
timeout $(budget 200) python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1
echo "build rc=$? wall=$((SECONDS-s))s"; tail -3 /tmp/logs/build.log
for v in 2 1; do
s=$SECONDS
TITANKIT_TK_GEMM_CLUSTER=$v timeout -k 5 $(budget 80) python3 -m pytest -q -x -m gpu tests/gpu/test_thunderkittens.py -k "gemm" -p no:cacheprovider > /tmp/logs/tests_c$v.log 2>&1
echo "gemm tests cluster=$v rc=$? wall=$((SECONDS-s))s"; tail -1 /tmp/logs/tests_c$v.log; grep -E "FAILED|Error|assert" /tmp/logs/tests_c$v.log | head -5
done
TITANKIT_TK_GEMM_CLUSTER=2 python3 -c "from kernels.thunderkittens import build; print('cluster-2 grid at 8192^3 (CTAs):', build.extension().fp8_gemm_rowwise_workspace(8192,8192,8192)[1] // 2)"
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu --format=csv,noheader -lms 50 > /tmp/logs/smi.csv 2>&1 &
SMI=$!
nvidia-smi --query-gpu=timestamp,clocks_event_reasons.active --format=csv,noheader -lms 200 > /tmp/logs/smi_reasons.csv 2>&1 &
SMI2=$!
timeout -k 5 $(budget 200) python3 session/gemm_ab.py "8192^3,8B w1/w3,70B w2" 3 > /tmp/logs/ab.log 2>&1; echo "ab rc=$?"
kill $SMI $SMI2
python3 session/powsum.py /tmp/logs/ab.log /tmp/logs/smi.csv | tee /tmp/logs/ab_power.md
grep -v "^|" /tmp/logs/ab.log | tail -5
sort /tmp/logs/smi_reasons.csv | awk -F, '{print $2}' | sort | uniq -c | head
finish
