#!/usr/bin/env bash
# End-to-end `dsv4 make-tiny --tokenizer-only` + `dsv4 tokenize`: the tokenizer
# files alone at vocab 8192, a JSONL of a text and a tool conversation into a
# uint16 token file with its sidecar, and a bad line rejected with one line
# naming it (exit 2, no output file).
# Usage: tokenize_test.sh DSV4_BINARY TOKENIZER_JSON
set -euo pipefail
dsv4=$1
tokenizer=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/cli_expect.sh"  # fail

"$dsv4" make-tiny --tokenizer-only --vocab-size 8192 --out "$tmp/tok" --tokenizer "$tokenizer" \
  > /dev/null || fail "make-tiny --tokenizer-only"
[[ $(ls "$tmp/tok" | tr '\n' ' ') == "tokenizer.json tokenizer_config.json " ]] \
  || fail "unexpected files: $(ls "$tmp/tok")"

cat > "$tmp/in.jsonl" <<'JSONL'
{"text": "In the beginning was the word."}
{"messages": [{"role": "user", "content": "What is the weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}], "thinking": false}
JSONL
"$dsv4" tokenize --tokenizer "$tmp/tok" --input "$tmp/in.jsonl" --output "$tmp/out.bin" \
  > "$tmp/ok.out" || fail "tokenize"
grep -qE '^tokenize: .* 1 texts, 1 chats, [0-9]+ tokens \(uint16\)' "$tmp/ok.out" \
  || { cat "$tmp/ok.out"; fail "summary line"; }
n=$(sed -nE 's/.*"num_tokens": ([0-9]+).*/\1/p' "$tmp/out.bin.json")
[[ $(stat -c %s "$tmp/out.bin") -eq $((2 * n)) ]] || fail "out.bin is not $n uint16 ids"
# The first ids: BOS ... EOS around the text, then BOS of the conversation.
first=$(od -An -tu2 -N2 "$tmp/out.bin" | tr -d ' ')
[[ $first == 0 ]] || fail "the file does not start with BOS (got $first)"

printf '{"text": "ok"}\n{"text": 5}\n' > "$tmp/bad.jsonl"
set +e
"$dsv4" tokenize --tokenizer "$tmp/tok" --input "$tmp/bad.jsonl" --output "$tmp/bad.bin" \
  > /dev/null 2> "$tmp/bad.err"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "bad line: exit $rc, want 2"
[[ $(wc -l < "$tmp/bad.err") -eq 1 ]] || { cat "$tmp/bad.err"; fail "want one error line"; }
grep -q "bad.jsonl:2: 'text' must be a string" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message"; }
[[ ! -e $tmp/bad.bin ]] || fail "a failed run left bad.bin"
echo "e2e_tokenize: ok"
