# Calls 3-9 (device, from the repository root, with the call's patch applied and this folder's
# lib.sh, gemm_ab.py and gemm_energy.py under session/):
#   bash call_variants.sh "TESTED" "AB_SHAPES" ROUNDS "AB_VARIANTS" ["ENERGY_SHAPES" "ENERGY_VARIANTS"]
# TESTED: variants whose GEMM tests run first (space-separated); the A/B runs only if all pass.
export DEADLINE=500; source session/lib.sh; export PYTHONPATH=$PWD
s=$SECONDS
timeout $(budget 200) python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1
echo "build rc=$? wall=$((SECONDS-s))s"; tail -3 /tmp/logs/build.log
ok=1
for v in $1; do
  TITANKIT_TK_GEMM_VARIANT=$v timeout -k 5 $(budget 60) python3 -m pytest -q -x -m gpu tests/gpu/test_thunderkittens.py \
    -k "gemm" -p no:cacheprovider > /tmp/logs/tests_$v.log 2>&1
  rc=$?; echo "gemm tests $v rc=$rc"; tail -1 /tmp/logs/tests_$v.log; [[ $rc == 0 ]] || ok=0
done
if [[ $ok == 1 ]]; then
  timeout -k 5 $(budget 150) python3 session/gemm_ab.py "$2" $3 "$4" > /tmp/logs/ab.log 2>&1; echo "ab rc=$?"
  if [[ -n "$5" ]]; then
    timeout -k 5 $(budget 150) python3 session/gemm_energy.py "$5" 3 "$6" 1.0 > /tmp/logs/energy.log 2>&1; echo "energy rc=$?"
  fi
fi
finish
