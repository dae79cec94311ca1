#!/usr/bin/env bash
# train_classifier end to end on the real Fashion-MNIST files, on the CPU:
#   nan-stop  a NaN fed at step 25 stops the run at the next read (step 30) with
#             exit code 3, a message naming step 25, and the last good state
#             (step 20) saved as a checkpoint;
#   resume    40 steps in one run and 20 + 20 steps with --resume give
#             byte-identical model and optimizer files;
#   metrics   the CSV has step and epoch rows, and the plot is drawn;
#   mobilenet MobileNetV3-small (torchvision's, 10 classes) trains under bf16
#             autocast through the same loop: the loss falls, its checkpoint
#             holds torchvision's names, and a resumed run continues it;
#   report    a float16 run with --report: a NaN fed at step 25 makes the
#             monitor say in one line why step 25 was skipped (the last
#             layer's gradient first, in backward's order); the run folder,
#             the page with its figures; halfgrad-report refuses a corrupted
#             file, naming it;
#   report-screenshot  the same run's page as headless Chromium shows it (skipped,
#             exit 77, where Chromium is not installed);
#   mpirun    data-parallel on 2 ranks: one header and one progress bar (rank
#             0's), the epoch's line once; a NaN fed on rank 1 only stops both
#             ranks at the next read (exit 3) and rank 0 saves the last good state.
#
#   train_classifier_test.sh <train_classifier> <case>
set -euo pipefail
bin=$1
case_=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--device cpu --epochs 1 --batch-size 64 --log-every 10 --optimizer adamw --schedule cosine)

# A float16 run with --report into $work/run: a NaN fed at step 25 stops it at exit code 3.
report_run() {
  set +e
  "$bin" "${common[@]}" --dtype float16 --max-steps 60 --inject-nan-at 25 --monitor-every 10 --report "$work/run" \
    >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [[ $rc -eq 3 ]] || { cat "$work/out" "$work/err"; echo "FAIL: exit code $rc, expected 3 (the NaN stop)"; exit 1; }
}

case $case_ in
  nan-stop)
    set +e
    "$bin" "${common[@]}" --max-steps 60 --inject-nan-at 25 --checkpoint-dir "$work/ckpt" >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    cat "$work/err"
    [[ $rc -eq 3 ]] || { echo "FAIL: exit code $rc, expected 3"; exit 1; }
    grep -q "the loss is not finite at step 25" "$work/err" || { echo "FAIL: no message naming step 25"; exit 1; }
    grep -q "saved the last good state (step 20)" "$work/err" || { echo "FAIL: no last-good checkpoint"; exit 1; }
    [[ -f "$work/ckpt/ckpt-20/model.safetensors" ]] || { echo "FAIL: ckpt-20 missing"; ls -R "$work/ckpt"; exit 1; }
    [[ ! -e "$work/ckpt/ckpt-30" ]] || { echo "FAIL: the broken state was saved"; exit 1; }
    echo "nan-stop: ok"
    ;;
  resume)
    "$bin" "${common[@]}" --max-steps 40 --checkpoint-dir "$work/a" --checkpoint-every 20 >/dev/null 2>&1
    "$bin" "${common[@]}" --max-steps 20 --checkpoint-dir "$work/b" >/dev/null 2>&1
    "$bin" "${common[@]}" --max-steps 40 --checkpoint-dir "$work/b" --resume >"$work/out" 2>&1
    grep -q "resumed from .*ckpt-20" "$work/out" || { cat "$work/out"; echo "FAIL: did not resume"; exit 1; }
    for f in model.safetensors optimizer.safetensors; do
      cmp "$work/a/ckpt-40/$f" "$work/b/ckpt-40/$f" || { echo "FAIL: $f differs after resume"; exit 1; }
    done
    echo "resume: ok (model and optimizer files identical)"
    ;;
  metrics)
    "$bin" "${common[@]}" --max-steps 30 --metrics "$work/m.csv" >"$work/out" 2>&1
    head -1 "$work/m.csv" | grep -q "^kind,step" || { echo "FAIL: no CSV header"; exit 1; }
    grep -q "^step,10," "$work/m.csv" || { cat "$work/m.csv"; echo "FAIL: no step row"; exit 1; }
    grep -q "^epoch," "$work/m.csv" || { cat "$work/m.csv"; echo "FAIL: no epoch row"; exit 1; }
    if command -v gnuplot >/dev/null; then
      [[ -s "$work/m.png" && -s "$work/m.svg" ]] || { cat "$work/out"; echo "FAIL: no plot"; exit 1; }
    fi
    grep -q "parameters: 203,530" "$work/out" || { cat "$work/out"; echo "FAIL: no parameter count"; exit 1; }
    echo "metrics: ok"
    ;;
  mobilenet)
    mn=(--model mobilenet_v3_small --amp on --lr 3e-3)
    "$bin" "${common[@]}" "${mn[@]}" --max-steps 30 --checkpoint-dir "$work/ckpt" --checkpoint-every 30 \
      --metrics "$work/m.csv" >"$work/out" 2>&1 || { cat "$work/out"; echo "FAIL: exit code $?"; exit 1; }
    grep -q "parameters: 1,528,106" "$work/out" || { cat "$work/out"; echo "FAIL: not torchvision's parameter count"; exit 1; }
    grep -q "precision: autocast bfloat16" "$work/out" || { cat "$work/out"; echo "FAIL: not under autocast"; exit 1; }
    # the loss of the first read (steps 1-10) above that of the last (steps 21-30)
    first=$(awk -F, '$1 == "step" { print $4; exit }' "$work/m.csv")
    last=$(awk -F, '$1 == "step" { v = $4 } END { print v }' "$work/m.csv")
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { cat "$work/m.csv"; echo "FAIL: loss $first -> $last"; exit 1; }
    grep -aq '"features.0.0.weight"' "$work/ckpt/ckpt-30/model.safetensors" || { echo "FAIL: names"; exit 1; }
    grep -aq '"features.0.1.running_var"' "$work/ckpt/ckpt-30/model.safetensors" || { echo "FAIL: BN buffers"; exit 1; }
    "$bin" "${common[@]}" "${mn[@]}" --max-steps 35 --checkpoint-dir "$work/ckpt" --resume >"$work/out2" 2>&1 ||
      { cat "$work/out2"; echo "FAIL: resume"; exit 1; }
    grep -q "resumed from .*ckpt-30" "$work/out2" || { cat "$work/out2"; echo "FAIL: did not resume"; exit 1; }
    echo "mobilenet: ok (loss $first -> $last)"
    ;;
  report)
    report_bin=$3
    report_run
    cat "$work/out" "$work/err" | grep -Eq \
      "step 25 skipped \(scale 65536\): grad of 3\.(weight|bias) is NaN \(first of 4 non-finite gradients in backward\)" ||
      { cat "$work/out" "$work/err"; echo "FAIL: no line explaining the skipped step"; exit 1; }
    for f in run.json metrics.csv numerics.json dtypes.json report.html figures/loss_scale.png figures/loss_scale.svg \
      figures/grads.png figures/activations.svg figures/grads_layers_last.png; do
      [[ -s "$work/run/$f" ]] || { ls -R "$work/run"; echo "FAIL: $f missing"; exit 1; }
    done
    grep -q "Gradients against float16" "$work/run/report.html" || { echo "FAIL: no gradient figure in the page"; exit 1; }
    grep -q "step 25 skipped" "$work/run/report.html" || { echo "FAIL: the page misses the skipped step"; exit 1; }
    grep -q "<td>linear</td><td>1</td><td>float32, float32, float32</td><td>lower_precision</td><td>float16, float16, float16</td>" \
      "$work/run/report.html" || { echo "FAIL: no dtype table row for linear"; exit 1; }
    # hostile input: a truncated numerics.json is refused with its name
    head -c 100 "$work/run/numerics.json" >"$work/run/n" && mv "$work/run/n" "$work/run/numerics.json"
    if "$report_bin" "$work/run" >"$work/rep" 2>&1; then echo "FAIL: a corrupted file was accepted"; exit 1; fi
    grep -q "numerics.json: not valid JSON" "$work/rep" || { cat "$work/rep"; echo "FAIL: message"; exit 1; }
    echo "report: ok"
    ;;
  report-screenshot)
    # the page as a person sees it: a 1200x1600 screenshot that is not blank (Chromium is a
    # large download, installed only by scripts/setup --screenshot: without it, skipped)
    screenshot=$3
    if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
      echo "no Chromium to look at the report page (scripts/setup --screenshot installs it)"
      exit 77
    fi
    report_run
    "$screenshot" "$work/run" "$work/shot.png" 1200x1600
    dims=$(od -An -tu1 -j16 -N8 "$work/shot.png" | awk '{ print $1*16777216 + $2*65536 + $3*256 + $4 "x" $5*16777216 + $6*65536 + $7*256 + $8 }')
    [[ $dims == 1200x1600 ]] || { echo "FAIL: screenshot is $dims"; exit 1; }
    size=$(stat -c %s "$work/shot.png")
    (( size > 40000 )) || { echo "FAIL: screenshot of $size bytes: a blank page?"; exit 1; }
    echo "report-screenshot: ok ($dims, $size bytes)"
    ;;
  mpirun)
    # (under ASan: OpenMPI's own allocations are not leaks of ours; its plugins stay loaded and the
    # stacks are unwound in full, so that LeakSanitizer's suppressions can name them)
    mpi=(env OMP_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mca_base_component_disable_dlclose=1
      LSAN_OPTIONS=suppressions=$(cd "$(dirname "$0")/.." && pwd)/distributed/lsan.supp
      ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0
      "$3" --oversubscribe --allow-run-as-root -np 2)
    "${mpi[@]}" "$bin" "${common[@]}" --max-steps 30 >"$work/out" 2>"$work/err" ||
      { cat "$work/out" "$work/err"; echo "FAIL: the 2-rank run failed"; exit 1; }
    [[ $(grep -c "^ranks: 2 (data parallel" "$work/out") -eq 1 ]] || { cat "$work/out"; echo "FAIL: header not once"; exit 1; }
    [[ $(grep -c "^epoch 1: test loss" "$work/out") -eq 1 ]] || { cat "$work/out"; echo "FAIL: epoch line not once"; exit 1; }
    set +e
    "${mpi[@]}" "$bin" "${common[@]}" --max-steps 60 --inject-nan-at 15 --inject-nan-rank 1 --checkpoint-dir "$work/ckpt" \
      >"$work/out2" 2>"$work/err2"
    rc=$?
    set -e
    [[ $rc -eq 3 ]] || { cat "$work/out2" "$work/err2"; echo "FAIL: exit code $rc, expected 3"; exit 1; }
    grep -q "rank 1: the loss is not finite at step 15" "$work/err2" || { cat "$work/err2"; echo "FAIL: rank 1's message"; exit 1; }
    grep -q "saved the last good state (step 10)" "$work/err2" || { cat "$work/err2"; echo "FAIL: no last-good checkpoint"; exit 1; }
    [[ -f "$work/ckpt/ckpt-10/model.safetensors" && ! -e "$work/ckpt/ckpt-20" ]] || { ls -R "$work/ckpt"; echo "FAIL: checkpoints"; exit 1; }
    # under --detect-anomaly the rank whose op made the NaN names it; rank 0 names the gradient
    set +e
    "${mpi[@]}" "$bin" "${common[@]}" --max-steps 20 --dtype float16 --detect-anomaly --inject-nan-at 15 \
      --inject-nan-rank 1 >"$work/out3" 2>"$work/err3"
    set -e
    grep -q "rank 1: step 15 skipped (scale 65536): grad of .* is NaN.*first non-finite value: forward of mul" "$work/err3" ||
      { cat "$work/out3" "$work/err3"; echo "FAIL: rank 1 did not name the op"; exit 1; }
    grep -q "step 15 skipped (scale 65536): grad of .*no op produced a non-finite value here" "$work/out3" "$work/err3" ||
      { cat "$work/out3" "$work/err3"; echo "FAIL: rank 0's skip line"; exit 1; }
    # evaluation is sharded (each test sample on one rank) and summed: the same numbers as one process
    "${mpi[@]}" "$bin" "${common[@]}" --checkpoint-dir "$work/ckpt" --resume --evaluate >"$work/eval2" 2>&1 ||
      { cat "$work/eval2"; echo "FAIL: 2-rank evaluation"; exit 1; }
    # (one process with the global batch: the same schedule length, so the checkpoint loads)
    OMP_NUM_THREADS=1 "$bin" "${common[@]/#64/128}" --checkpoint-dir "$work/ckpt" --resume --evaluate >"$work/eval1" 2>&1 ||
      { cat "$work/eval1"; echo "FAIL: 1-process evaluation"; exit 1; }
    e1=$(grep "^evaluation (step 10)" "$work/eval1") || { cat "$work/eval1"; echo "FAIL: no evaluation line"; exit 1; }
    e2=$(grep "^evaluation (step 10)" "$work/eval2") || { cat "$work/eval2"; echo "FAIL: no evaluation line"; exit 1; }
    acc() { sed 's/.*accuracy //' <<<"$1"; }
    loss() { sed 's/.*test loss \([0-9.]*\),.*/\1/' <<<"$1"; }
    [[ $(acc "$e1") == "$(acc "$e2")" ]] || { echo "$e1"; echo "$e2"; echo "FAIL: accuracy differs"; exit 1; }
    awk -v a="$(loss "$e1")" -v b="$(loss "$e2")" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }' ||
      { echo "$e1"; echo "$e2"; echo "FAIL: test loss differs"; exit 1; }
    [[ $(grep -c "^evaluation" "$work/eval2") -eq 1 ]] || { cat "$work/eval2"; echo "FAIL: evaluation printed twice"; exit 1; }
    echo "mpirun: ok ($e2)"
    ;;
  *) echo "unknown case $case_"; exit 2 ;;
esac
