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
#             holds torchvision's names, and a resumed run continues it.
#
#   train_classifier_test.sh <train_classifier> <case>
set -euo pipefail
bin=$1
case_=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--device cpu --epochs 1 --batch-size 64 --log-every 10 --optimizer adamw --schedule cosine)

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
  *) echo "unknown case $case_"; exit 2 ;;
esac
