#!/usr/bin/env bash
# scripts/plot-metrics on a small metrics CSV (step rows, epoch rows, a NaN
# loss, a row without a loss scale): both files written and not empty.
# Exit 77 (CTest: skipped) where gnuplot is not installed.
set -euo pipefail
script=$1
out=$2
command -v gnuplot >/dev/null 2>&1 || { echo "gnuplot is not installed: skipped"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
cat > "$out/run_1.csv" <<'CSV'
kind,step,epoch,loss,lr,loss_scale,skipped,samples_per_s,test_loss,accuracy,seconds
step,10,0,2.30258512,0.001,65536,0,51234.5,,,1.5
step,20,0,1.9,0.001,32768,1,50000,,,3
step,30,0,nan,0.001,16384,1,50000,,,4.5
step,40,0,1.2,0.001,,0,50000,,,6
epoch,40,0,1.6,0.001,16384,2,50100,1.4,0.61,6.2
step,50,1,0.9,0.001,32768,0,50000,,,7.5
epoch,60,1,0.8,0.001,32768,0,50100,0.85,0.74,9
CSV
"$script" "$out/run_1.csv"
for f in "$out/run_1.png" "$out/run_1.svg"; do
  [[ -s $f ]] || { echo "FAIL: $f missing or empty"; exit 1; }
done
head -c 8 "$out/run_1.png" | od -An -tx1 | grep -q "89 50 4e 47" || { echo "FAIL: not a PNG"; exit 1; }
grep -q "<svg" "$out/run_1.svg" || { echo "FAIL: not an SVG"; exit 1; }
# An explicit prefix in a new folder.
"$script" "$out/run_1.csv" "$out/plots/x"
[[ -s $out/plots/x.png && -s $out/plots/x.svg ]] || { echo "FAIL: OUT_PREFIX not honoured"; exit 1; }
# A file that is not a metrics CSV is refused with a message.
echo "a,b" > "$out/bad.csv"
if "$script" "$out/bad.csv" 2> "$out/err.txt"; then echo "FAIL: accepted a bad file"; exit 1; fi
grep -q "metrics header" "$out/err.txt" || { echo "FAIL: no clear message"; cat "$out/err.txt"; exit 1; }
echo "ok"
