#!/usr/bin/env bash
# Install halfgrad from the build tree into a scratch prefix, check that only
# public headers went in and that they are complete, then configure, build and
# run an outside project (with its own core/tensor.h) that finds it.
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install check: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
inc="$work/prefix/include"
[ -f "$inc/halfgrad.h" ] || fail "no include/halfgrad.h in the installed prefix"
# One include root: everything but the umbrella sits under include/halfgrad/.
stray=$(find "$inc" -type f ! -path "$inc/halfgrad/*" ! -path "$inc/halfgrad.h")
[ -z "$stray" ] || fail "headers outside include/halfgrad/: $stray"
# Every halfgrad include inside an installed header resolves inside the prefix
# (no internal header left out that a public one needs).
while IFS= read -r line; do
  file=${line%%:*}; target=$(sed -E 's/.*#include <(halfgrad\/[^>]*)>.*/\1/' <<<"${line#*:}")
  [ -f "$inc/$target" ] || fail "$file includes <$target>, which is not installed"
done < <(grep -rE '^#include <halfgrad/' "$inc" || true)
# Nothing internal is installed: the backend interface, the dispatcher, raw views, kernel headers.
for internal in kernels/kernels.h dispatch/dispatch.h dispatch/layers.h dispatch/node.h ops/util.h ops/indexing_detail.h core/alias.h kernels/cpu kernels/cuda amp/cuda optim/cuda core/cuda; do
  [ ! -e "$inc/halfgrad/$internal" ] || fail "internal $internal is installed"
done
! grep -rqE 'namespace halfgrad::kernels|namespace kernels|alias_with' "$inc" ||
  fail "an installed header declares the backend interface or alias_with: $(grep -rlE 'namespace halfgrad::kernels|namespace kernels|alias_with' "$inc")"

cmake -S "$source_dir/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/app"
