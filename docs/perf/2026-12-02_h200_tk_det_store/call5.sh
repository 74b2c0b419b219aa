# (run inline through the device tool; recorded here) the call 4 A/B again with the order reversed
# and the no-ticket variant twice, as an A/A check of the position in the round.
export PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1; python3 -m kernels.thunderkittens.build > /dev/null 2>&1; timeout 200 python3 docs/perf/2026-12-01_h200_fp8_gemm_power/gemm_ab.py "70B w2,8192^3" 4 "noticket,head,noticket2" 2>&1 | tee $OUT/call5_ticket_ab_reversed.txt
