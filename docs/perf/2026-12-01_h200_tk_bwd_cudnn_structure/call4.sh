# Where the dQ-turns variant stalls, vs the committed schedule (same build; env var picks).
set -u
export PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1
P=docs/perf/2026-11-30_h200_tk_bwd_experiments/ncu_probe.py
for v in 0 1; do
  TK_BWD_DQ_TURNS=$v timeout 200 ncu --clock-control none -k regex:bwd_kernel --launch-skip 2 --launch-count 1 \
     --section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats \
     -o $OUT/v$v python3 $P tk > $OUT/ncu_run_v$v.txt 2>&1
  ncu -i $OUT/v$v.ncu-rep --page details > $OUT/v${v}_details.txt 2>&1
  ncu -i $OUT/v$v.ncu-rep --page source --csv --print-source sass > $OUT/v${v}_sass.csv 2>&1
  rm -f $OUT/v$v.ncu-rep
done
grep -E "Duration|SM Frequency|Executed Instructions  |Warp Cycles Per Issued" $OUT/v*_details.txt
cd $OUT && tar czf out.tgz *.txt *.csv && rm -f *.txt *.csv
