#!/usr/bin/env bash
# End-to-end `dsv4 eval`: make-tiny into a temp dir, then perplexity of a
# short text, chunked and sliding, human and --json output, the model taken
# from $DSV4_MODEL, and bad input (exit status 2, one line on stderr).
# Usage: eval_test.sh DSV4_BINARY TOKENIZER_JSON
set -euo pipefail
dsv4=$1
tokenizer=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "$0")/cli_expect.sh"  # fail, expect_count, make_tiny
json_int() {  # json_int FILE KEY: the first "KEY": <integer> in FILE
  grep -oE "\"$2\": [0-9]+" "$1" | head -1 | grep -oE '[0-9]+$'
}

make_tiny "$tmp/model"
for i in 1 2 3; do
  echo "Line $i: the quick brown fox jumps over the lazy dog, and the dog sleeps on."
done > "$tmp/text.txt"
run=(--model "$tmp/model" --text "$tmp/text.txt" --threads 2)

# Human output, chunked (the default stride).
"$dsv4" eval "${run[@]}" --context 24 > "$tmp/chunked.out" 2> "$tmp/chunked.err" \
  || { cat "$tmp/chunked.err" >&2; fail "chunked run"; }
expect_count "$tmp/chunked.out" '^text: [0-9]+ tokens \([0-9]+ bytes\) from ' 1
expect_count "$tmp/chunked.out" '^windows: [0-9]+ of up to 24 tokens, stride 24 \(chunked' 1
expect_count "$tmp/chunked.out" \
  '^main: [0-9]+ tokens scored, mean NLL [0-9.]+ nats, perplexity [0-9.]+, top-1 accuracy [0-9.]+%$' 1
expect_count "$tmp/chunked.out" '^mtp \(token q\+2 from the true q\+1\): [0-9]+ tokens scored' 1
expect_count "$tmp/chunked.out" '^time: [0-9.]+ s, [0-9.]+ scored tokens/s' 1
expect_count "$tmp/chunked.err" "model: $tmp/model \(from --model\)" 1

# --json, chunked and sliding: the scored counts follow the window plan.
"$dsv4" eval "${run[@]}" --context 24 --json > "$tmp/chunked.json" 2> "$tmp/err" \
  || { cat "$tmp/err" >&2; fail "chunked --json"; }
"$dsv4" eval "${run[@]}" --context 24 --stride 8 --batch 3 --json > "$tmp/sliding.json" \
  2> "$tmp/err" || { cat "$tmp/err" >&2; fail "sliding --json"; }
n=$(json_int "$tmp/chunked.json" tokens)
# Chunked: all but the first token of each of the ceil(n / 24) chunks (a last
# chunk of one token scores nothing and is not run).
[[ $(json_int "$tmp/chunked.json" scored) -eq $(( n - (n + 23) / 24 )) ]] \
  || fail "chunked scored count for $n tokens"
[[ $(json_int "$tmp/sliding.json" scored) -eq $(( n - 1 )) ]] || fail "sliding scored count"
grep -q '"mode": "chunked"' "$tmp/chunked.json" || fail "chunked mode"
grep -q '"mode": "sliding"' "$tmp/sliding.json" || fail "sliding mode"
grep -q '"draft_acceptance"' "$tmp/chunked.json" || fail "mtp in json"
# Perplexity = exp(mean NLL) in the JSON itself.
mean=$(grep -oE '"mean_nll": [0-9.e+-]+' "$tmp/chunked.json" | head -1 | awk '{print $2}')
ppl=$(grep -oE '"perplexity": [0-9.e+-]+' "$tmp/chunked.json" | head -1 | awk '{print $2}')
awk -v m="$mean" -v p="$ppl" 'BEGIN { d = exp(m) / p - 1; exit !(d < 1e-9 && d > -1e-9) }' \
  || fail "perplexity $ppl != exp($mean)"

# The model from $DSV4_MODEL; --no-mtp says why MTP is not scored.
DSV4_MODEL="$tmp/model" "$dsv4" eval --text "$tmp/text.txt" --threads 2 --no-mtp \
  > "$tmp/env.out" 2> "$tmp/env.err" || { cat "$tmp/env.err" >&2; fail "\$DSV4_MODEL run"; }
expect_count "$tmp/env.err" "model: $tmp/model \(from \\\$DSV4_MODEL\)" 1
expect_count "$tmp/env.out" '^mtp: not scored: MTP scoring was turned off$' 1
"$dsv4" eval --help | grep -q 'models/dsv4-mini' || fail "eval --help names the default model"

# Bad input: exit status 2 and exactly one line on stderr.
expect_input_error() {  # expect_input_error REGEX ARGS...
  local regex=$1 rc=0
  shift
  "$dsv4" eval --model "$tmp/model" "$@" > "$tmp/bad.out" 2> "$tmp/bad.err" || rc=$?
  [[ $rc -eq 2 ]] || { cat "$tmp/bad.err" >&2; fail "exit $rc, want 2 for: $*"; }
  [[ $(wc -l < "$tmp/bad.err") -eq 1 ]] || { cat "$tmp/bad.err" >&2; fail "not one line: $*"; }
  grep -qE -- "$regex" "$tmp/bad.err" || { cat "$tmp/bad.err" >&2; fail "message for: $*"; }
}
: > "$tmp/empty.txt"
printf 'a' > "$tmp/one.txt"
expect_input_error 'no such file' --text "$tmp/missing.txt"
expect_input_error 'is empty' --text "$tmp/empty.txt"
expect_input_error 'encodes to 1 token\(s\); perplexity needs at least 2' --text "$tmp/one.txt"
expect_input_error 'exceeds the model.s max_position_embeddings' --text "$tmp/text.txt" \
  --context 2000000
expect_input_error 'context must be at least 2 tokens, got 1' --text "$tmp/text.txt" --context 1
expect_input_error 'stride must be in \[1, context = 16\], got 17' --text "$tmp/text.txt" \
  --context 16 --stride 17
expect_input_error '--stride must be at least 1' --text "$tmp/text.txt" --stride 0
rc=0
DSV4_MODEL="$tmp/nowhere" "$dsv4" eval --text "$tmp/text.txt" > /dev/null 2> "$tmp/bad.err" || rc=$?
[[ $rc -eq 2 && $(wc -l < "$tmp/bad.err") -eq 1 ]] || fail "bad \$DSV4_MODEL: exit $rc"
grep -q 'DSV4_MODEL' "$tmp/bad.err" || fail "bad \$DSV4_MODEL message"

# No --model and no $DSV4_MODEL: the default models/dsv4-mini above the
# executable (a link to the binary in a fresh tree, so that a checkout's own
# default model cannot answer instead).
mkdir -p "$tmp/tree/bin" "$tmp/tree/models"
ln "$dsv4" "$tmp/tree/bin/dsv4" 2> /dev/null || cp "$dsv4" "$tmp/tree/bin/dsv4"
mv "$tmp/model" "$tmp/tree/models/dsv4-mini"
(cd / && env -u DSV4_MODEL "$tmp/tree/bin/dsv4" eval --text "$tmp/text.txt" --threads 2 \
  --no-mtp > "$tmp/default.out" 2> "$tmp/default.err") \
  || { cat "$tmp/default.err" >&2; fail "default model run"; }
expect_count "$tmp/default.err" \
  "model: $tmp/tree/models/dsv4-mini \(the embedded default model\)" 1
expect_count "$tmp/default.out" '^main: [0-9]+ tokens scored' 1
echo "PASS"
