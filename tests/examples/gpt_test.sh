#!/usr/bin/env bash
# examples/gpt end to end on the CPU, with a tiny model (seconds per case):
#   train   60 steps on the fortune database (Debian's `fortunes`) when it is
#           installed, else on a text this script writes: the training loss
#           falls, the evaluation rows and the plot are there;
#   resume  24 steps in one run and 12 + 12 with --resume (bf16 autocast, with
#           dropout, so the generator's state matters) give byte-identical
#           model and optimizer files and the same losses, row for row; the
#           same for fp16 autocast with the GradScaler;
#   sample  the sampled text holds only characters of the training text, with
#           and without top-k, and is the same for the same seed;
#   errors  a missing corpus names the package to install; bad options, a
#           FIFO as the text, a too-short text and a checkpoint of another
#           model are clear errors.
#
#   gpt_test.sh <gpt> <case>
set -euo pipefail
bin=$1
case_=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tiny=(--n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --eval-iters 2 --log-every 10
  --warmup-iters 5 --sample-chars 0)

# A small text of fortune-like records: the same few sentences in a seeded order.
write_text() {
  local words=("the cat sat on the mat" "a stitch in time saves nine" "look before you leap"
    "all that glitters is not gold" "an apple a day keeps the doctor away" "fortune favours the bold")
  local i
  for ((i = 0; i < 600; i++)); do
    echo "${words[$(((i * 7 + i / 5) % 6))]}, said fortune $((i % 10))."
    if ((i % 3 == 2)); then echo "%"; fi
  done >"$1"
}

# The step rows of a metrics CSV from step $2 on, without the timing columns.
rows_after() { awk -F, -v from="$2" 'NR > 1 && $2 > from { print $1, $2, $3, $4, $5, $6, $7, $9 }' "$1"; }

fail() { echo "FAIL: $*"; exit 1; }

case $case_ in
  train)
    data=()
    if [[ -d /usr/share/games/fortunes ]]; then
      echo "on the fortune database"
    else
      write_text "$work/text.txt"
      data=(--data-file "$work/text.txt")
      echo "no fortunes package: on a text of our own"
    fi
    "$bin" "${tiny[@]}" "${data[@]}" --max-iters 60 --eval-interval 30 --lr 3e-3 --metrics "$work/m.csv" \
      >"$work/out" 2>&1 || { cat "$work/out"; fail "exit code"; }
    cat "$work/out"
    grep -q "^data: .*vocabulary [0-9]" "$work/out" || fail "no data line"
    grep -q "precision: autocast bfloat16" "$work/out" || fail "not bf16 autocast by default on the CPU"
    first=$(awk -F, '$1 == "step" { print $4; exit }' "$work/m.csv")
    last=$(awk -F, '$1 == "step" { l = $4 } END { print l }' "$work/m.csv")
    echo "training loss: first logged $first, last $last"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "the loss did not fall ($first -> $last)"
    [[ $(grep -c "^epoch," "$work/m.csv") -eq 3 ]] || { cat "$work/m.csv"; fail "not 3 evaluation rows (steps 0, 30, 60)"; }
    grep -q "step 60: train loss [0-9.]*, val loss [0-9.]*" "$work/out" || fail "no evaluation line at step 60"
    if command -v gnuplot >/dev/null; then [[ -s "$work/m.png" ]] || fail "no plot"; fi
    echo "train: ok"
    ;;
  resume)
    write_text "$work/text.txt"
    for prec in bf16 fp16; do
      common=("${tiny[@]}" --data-file "$work/text.txt" --max-iters 24 --eval-interval 12 --log-every 4
        --dropout 0.1 --precision "$prec")
      "$bin" "${common[@]}" --checkpoint-dir "$work/a-$prec" --checkpoint-every 12 --metrics "$work/a-$prec.csv" \
        >"$work/out-a" 2>&1 || { cat "$work/out-a"; fail "exit code"; }
      "$bin" "${common[@]}" --checkpoint-dir "$work/b-$prec" --stop-at 12 --metrics "$work/b-$prec.csv" \
        >/dev/null 2>&1 || fail "the first half failed"
      "$bin" "${common[@]}" --checkpoint-dir "$work/b-$prec" --resume --metrics "$work/b-$prec.csv" \
        >"$work/out-b" 2>&1 || { cat "$work/out-b"; fail "the resumed half failed"; }
      grep -q "resumed from .*ckpt-12 (step 12)" "$work/out-b" || { cat "$work/out-b"; fail "did not resume"; }
      for f in model.safetensors optimizer.safetensors; do
        cmp "$work/a-$prec/ckpt-24/$f" "$work/b-$prec/ckpt-24/$f" || fail "$prec: $f differs after resume"
      done
      rows_after "$work/a-$prec.csv" 12 >"$work/ra"
      rows_after "$work/b-$prec.csv" 12 >"$work/rb"
      [[ -s "$work/ra" ]] || fail "no rows after step 12"
      diff "$work/ra" "$work/rb" || fail "$prec: the losses after step 12 differ"
      if [[ $prec == fp16 ]]; then grep -q "GradScaler on" "$work/out-a" || fail "fp16 without the GradScaler"; fi
      echo "resume $prec: ok (model and optimizer files identical, $(wc -l <"$work/ra") rows of losses after step 12 equal)"
    done
    ;;
  sample)
    write_text "$work/text.txt"
    common=("${tiny[@]}" --data-file "$work/text.txt" --max-iters 20 --eval-interval 20 --sample-chars 200
      --prompt "the ")
    allowed=$(tr -d '\n' <"$work/text.txt" | fold -w1 | sort -u | tr -d '\n')
    for k in 0 5; do
      "$bin" "${common[@]}" --top-k "$k" >"$work/out-$k" 2>&1 || { cat "$work/out-$k"; fail "exit code"; }
      sed -n '/^sample (temperature/,$p' "$work/out-$k" | tail -n +2 >"$work/s-$k"
      chars=$(wc -c <"$work/s-$k")
      [[ $chars -ge 204 ]] || { cat "$work/out-$k"; fail "top-k $k: $chars bytes, expected the prompt, 200 characters and a newline"; }
      # the text's characters are letters, digits, ' ', ',', '.', '%' and newlines: none special to tr
      other=$(tr -d "$allowed"'\n' <"$work/s-$k" | wc -c)
      [[ $other -eq 0 ]] || { cat "$work/s-$k"; fail "top-k $k: $other sampled characters are not in the text"; }
    done
    "$bin" "${common[@]}" --top-k 5 >"$work/again" 2>&1
    sed -n '/^sample (temperature/,$p' "$work/again" | tail -n +2 | cmp - "$work/s-5" || fail "not the same sample for the same seed"
    head -c 200 "$work/s-5"
    echo
    echo "sample: ok"
    ;;
  errors)
    expect_error() {  # expect_error "what the message must say" args...
      local want=$1
      shift
      set +e
      "$bin" "$@" >"$work/out" 2>&1
      local rc=$?
      set -e
      [[ $rc -ne 0 ]] || { cat "$work/out"; fail "exit code 0 for: $*"; }
      grep -q -- "$want" "$work/out" || { cat "$work/out"; fail "no '$want' for: $*"; }
      echo "ok ($rc): $* -> $(grep -m1 -- "$want" "$work/out")"
    }
    write_text "$work/text.txt"
    expect_error "install Debian's \`fortunes\` package" --data "$work/nowhere" "${tiny[@]}"
    mkdir "$work/empty"
    expect_error "install Debian's \`fortunes\` package" --data "$work/empty" "${tiny[@]}"
    expect_error "does not exist" --data-file "$work/missing.txt" "${tiny[@]}"
    mkfifo "$work/fifo"
    expect_error "is not a regular file" --data-file "$work/fifo" "${tiny[@]}"
    echo "short" >"$work/short.txt"
    expect_error "too short for --block-size" --data-file "$work/short.txt" "${tiny[@]}"
    expect_error "not a multiple of --n-head" --data-file "$work/text.txt" "${tiny[@]}" --n-embd 33
    expect_error "precision" --data-file "$work/text.txt" "${tiny[@]}" --precision fp8
    expect_error "needs --checkpoint-dir" --data-file "$work/text.txt" "${tiny[@]}" --resume
    expect_error "past --max-iters" --data-file "$work/text.txt" "${tiny[@]}" --max-iters 10 --stop-at 20
    expect_error "is not in the vocabulary" --data-file "$work/text.txt" "${tiny[@]}" --max-iters 10 --prompt "Q"
    "$bin" "${tiny[@]}" --data-file "$work/text.txt" --max-iters 10 --checkpoint-dir "$work/ckpt" >/dev/null 2>&1
    expect_error "its gpt.n_layer is 2, this run's 3" --data-file "$work/text.txt" "${tiny[@]}" --max-iters 20 \
      --n-layer 3 --checkpoint-dir "$work/ckpt" --resume
    echo "XYZ!" >>"$work/text.txt"  # new characters
    expect_error "the text differs" --data-file "$work/text.txt" "${tiny[@]}" --max-iters 20 \
      --checkpoint-dir "$work/ckpt" --resume
    echo "errors: ok"
    ;;
  *)
    echo "unknown case $case_"
    exit 2
    ;;
esac
