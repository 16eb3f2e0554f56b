#!/usr/bin/env bash
# End-to-end `dsv4 bench` warm-up: by default every timed prefill (each
# --prompt-len) follows an untimed one of the same shape, as llama-bench
# does; --no-warmup times the process's first prefill and prints no warm-up.
# Usage: bench_warmup_test.sh DSV4_BINARY TOKENIZER_JSON
set -euo pipefail
dsv4=$1
tokenizer=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "$0")/cli_expect.sh"  # fail, expect_count, make_tiny

make_tiny "$tmp/model"
run=("$dsv4" bench --model "$tmp/model" --threads 2 --prompt-len 16,32 --decode-steps 2
  --triad-mib 16)
"${run[@]}" > "$tmp/warm.out" 2> "$tmp/warm.err" || { cat "$tmp/warm.err" >&2; fail "bench"; }
"${run[@]}" --no-warmup > "$tmp/cold.out" 2> "$tmp/cold.err" \
  || { cat "$tmp/cold.err" >&2; fail "bench --no-warmup"; }
for len in 16 32; do
  expect_count "$tmp/warm.out" "^warm-up prefill \(untimed\): 1 x $len tokens in [0-9.]+ s$" 1
  expect_count "$tmp/cold.out" "^warm-up prefill" 0
  for f in "$tmp/warm.out" "$tmp/cold.out"; do
    expect_count "$f" "^prefill: 1 x $len tokens in [0-9.]+ s = [0-9.]+ tok/s" 1
  done
done
# Each warm-up comes right before the prefill it warms.
grep -A1 '^warm-up prefill' "$tmp/warm.out" | grep -c '^prefill: ' | grep -qx 2 \
  || { cat "$tmp/warm.out" >&2; fail "warm-up lines not followed by their timed prefill"; }
echo "bench warm-up test passed"
