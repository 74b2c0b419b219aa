export DEADLINE=265; source session/lib.sh; export PYTHONPATH=$PWD
python3 -c "from kernels.thunderkittens import build; build.extension()" > /tmp/logs/build.log 2>&1; echo "build rc=$?"
S="--section SpeedOfLight --section WarpStateStats --section SourceCounters"
for v in head noscale; do
  TITANKIT_TK_GEMM_VARIANT=$v timeout $(budget 70) ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:"gemm_kernel" --import-source no $S -o /tmp/logs/$v python3 session/gemm_probe.py tk 8192 14336 4096 > /tmp/logs/ncu_$v.log 2>&1; echo "ncu $v rc=$?"
  ncu -i /tmp/logs/$v.ncu-rep --print-details all > /tmp/logs/ncu_${v}_details.txt 2>&1
  timeout 40 ncu -i /tmp/logs/$v.ncu-rep --page source --csv --print-source sass > /tmp/logs/ncu_${v}_sass.csv 2>/dev/null; echo "sass $(wc -l < /tmp/logs/ncu_${v}_sass.csv)"
  grep -E "Duration|SM Frequency|Compute \(SM\)|Issued Ipc|No Eligible|Warp Cycles Per Issued" /tmp/logs/ncu_${v}_details.txt | head -8
done
rm -f /tmp/logs/*.ncu-rep
finish
