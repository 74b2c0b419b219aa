export DEADLINE=190; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-T0))s"; tail -3 /tmp/logs/build.log | cut -c1-300
timeout $(budget 80) python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k "fp8" 2>&1 | tail -3 | tee /tmp/logs/pytest_gemm.txt
echo "pytest $((SECONDS-T0))s"
timeout $(budget 90) python3 session/gemm_tw.py 2>&1 | tee /tmp/logs/gemm_tw.txt | tail -8
finish
