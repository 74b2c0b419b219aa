export DEADLINE=500; source session/lib.sh; export PYTHONPATH=$PWD
s=$SECONDS
timeout $(budget 200) python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1
echo "build rc=$? wall=$((SECONDS-s))s"; tail -3 /tmp/logs/build.log
ok=1
for v in 2p 1p 1n; do
s=$SECONDS
TITANKIT_TK_GEMM_VARIANT=$v timeout -k 5 $(budget 60) python3 -m pytest -q -x -m gpu tests/gpu/test_thunderkittens.py -k "gemm" -p no:cacheprovider > /tmp/logs/tests_$v.log 2>&1
rc=$?; echo "gemm tests $v rc=$rc wall=$((SECONDS-s))s"; tail -1 /tmp/logs/tests_$v.log; grep -E "FAILED|Error" /tmp/logs/tests_$v.log | head -3
[[ $rc == 0 ]] || ok=0
done
if [[ $ok == 1 ]]; then
timeout -k 5 $(budget 120) python3 session/gemm_ab.py "8192^3,8B w1/w3,70B w2,70B wq/wo" 4 "1n,1p,2p" > /tmp/logs/ab.log 2>&1; echo "ab rc=$?"
python3 - <<'PY'
import collections
d = collections.defaultdict(list)
for l in open("/tmp/logs/ab.log"):
    p = [x.strip() for x in l.strip().strip("|").split("|")]
    if len(p) > 4 and p[3].isdigit(): d[(p[0], p[1])].append(int(p[3]))
for (s, i), v in d.items(): print(f"| {s} | {i} | {' '.join(map(str, v))} | median {sorted(v)[len(v)//2]} |")
PY
timeout -k 5 $(budget 150) python3 session/gemm_energy.py "8192^3,8B w1/w3,70B w2" 3 "1n,1p,2p,cublas" 1.0 > /tmp/logs/energy.log 2>&1; echo "energy rc=$?"
grep "^|" /tmp/logs/energy.log | cut -d"|" -f2-5,8
fi
finish
