#!/usr/bin/env bash
# Bad files, flags and corrupt-but-well-formed models through the real binary
# (docs/checkpoint.md, docs/prepack.md, docs/engine.md): each is one line on
# stderr and a non-zero exit, never a hang, an abort or a silent wrong token.
#  - NaN weights (a norm, or one embedding row): generate exits 1 naming the
#    step; serve answers 500 for the poisoned request and 200 for the others;
#  - a sidecar byte changed after prepack: the load fails;
#  - a FIFO as config.json, a symlink-loop model directory, absurd config
#    values, thread counts out of range, prepack --output onto a shard;
#  - serve: a header or body trickled past its deadline is answered 408.
# Usage: hardening_test.sh DSV4_BINARY TOKENIZER_JSON
set -euo pipefail
dsv4=$1
tokenizer=$2
here=$(cd "$(dirname "$0")" && pwd)
poison=("/usr/bin/python3" "$here/poison_tensor.py")
tmp=$(mktemp -d)
server_pid=
cleanup() {
  [[ -z $server_pid ]] || kill "$server_pid" 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

source "$(dirname "$0")/cli_expect.sh"  # fail, expect_error, make_tiny

make_tiny "$tmp/model"
engine=(--kv-cache-memory 256M --threads 2 --prepacked off)
greedy='{"max_new_tokens":4,"temperature":0}'

# --- NaN weights -------------------------------------------------------------
cp -r "$tmp/model" "$tmp/nan_norm"
"${poison[@]}" "$tmp/nan_norm" norm.weight
expect_error 1 '^dsv4 generate: prompt 1: step [0-9]+: the logits of request [0-9]+ at position 2 are not finite' \
  "$dsv4" generate --model "$tmp/nan_norm" "${engine[@]}" --prompt-ids 5,6,9 --generate-config "$greedy"
grep -q '^finish_reason: error' "$tmp/out" || fail "no error finish_reason on stdout"

# One poisoned embedding row: only the request whose sampled row is that
# token fails (a NaN mid-prompt reaches later rows only through the FP8
# caches, which turn it into finite values: docs/engine.md).
cp -r "$tmp/model" "$tmp/nan_row"
"${poison[@]}" "$tmp/nan_row" embed.weight 7
expect_error 1 '^dsv4 generate: prompt 1: step [0-9]+: the logits of request [0-9]+ at position 1 ' \
  "$dsv4" generate --model "$tmp/nan_row" "${engine[@]}" --prompt-ids 8,7 --prompt-ids 5,6 \
  --generate-config "$greedy"
[[ $(grep -c '^finish_reason: error' "$tmp/out") -eq 1 ]] || fail "want exactly one failed prompt"
[[ $(grep -c '^finish_reason: length' "$tmp/out") -eq 1 ]] || fail "the healthy prompt did not finish"

# start_serve ARGS...: dsv4 serve in the background; sets server_pid and port.
start_serve() {
  "$dsv4" serve "$@" --port 0 > "$tmp/serve.out" 2> "$tmp/serve.err" &
  server_pid=$!
  port=
  for _ in $(seq 1 300); do
    port=$(sed -nE 's|^Listening on http://[^:]+:([0-9]+)$|\1|p' "$tmp/serve.out")
    [[ -z $port ]] || break
    sleep 0.1
  done
  [[ -n $port ]] || { cat "$tmp/serve.err" >&2; fail "serve did not start"; }
}
start_serve --model "$tmp/nan_row" "${engine[@]}"
complete() {  # complete PROMPT_IDS -> HTTP status, body in $tmp/body
  curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\": [$1], \"max_tokens\": 4, \"temperature\": 0}"
}
[[ $(complete 8,7) == 500 ]] || fail "poisoned request: want 500, got $(cat "$tmp/body")"
grep -q 'are not finite' "$tmp/body" || fail "500 body does not say why: $(cat "$tmp/body")"
[[ $(complete 5,6) == 200 ]] || fail "healthy request after the failure: $(cat "$tmp/body")"
kill "$server_pid"
wait "$server_pid" || true
server_pid=

# --- slow clients: 408 at the header and body deadlines -----------------------
# (docs/server.md "Transport".)  A body trickled a byte every 0.25 s, each
# wait far under --read-timeout, used to hold its connection as long as the
# client kept sending.
start_serve --model "$tmp/model" "${engine[@]}" --header-timeout 0.5 --body-timeout 1
# slow_request TEXT: sends TEXT, then a byte every 0.25 s for 4 s; the answer
# (read until the server closes, at most 6 s) lands in $tmp/resp.
slow_request() {
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf '%b' "$1" >&3
  (trap '' PIPE; for _ in $(seq 1 16); do sleep 0.25; printf a >&3 2>/dev/null || true; done) &
  local trickler=$!
  local t0=$SECONDS
  timeout 6 cat <&3 > "$tmp/resp" || true
  elapsed=$((SECONDS - t0))
  exec 3<&- 3>&-
  kill "$trickler" 2>/dev/null || true
  wait "$trickler" 2>/dev/null || true
}
slow_request 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{'
grep -q '^HTTP/1.1 408' "$tmp/resp" || fail "trickled body: want 408, got: $(head -c 300 "$tmp/resp")"
grep -q 'request body not complete within 1 s (--body-timeout)' "$tmp/resp" \
  || fail "trickled body: 408 does not name the deadline: $(head -c 300 "$tmp/resp")"
[[ $elapsed -le 3 ]] || fail "trickled body: answered after ${elapsed} s, want ~1 s"
slow_request 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: '
grep -q '^HTTP/1.1 408' "$tmp/resp" || fail "trickled header: want 408, got: $(head -c 300 "$tmp/resp")"
grep -q 'request header not complete within 0.5 s (--header-timeout)' "$tmp/resp" \
  || fail "trickled header: 408 does not name the deadline: $(head -c 300 "$tmp/resp")"
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") == 200 ]] \
  || fail "/health after the slow clients"
kill "$server_pid"
wait "$server_pid" || true
server_pid=

# --- sidecar changed after prepack -------------------------------------------
cp -r "$tmp/model" "$tmp/packed"
"$dsv4" prepack --model "$tmp/packed" > /dev/null || fail "prepack"
"${poison[@]}" --flip "$tmp/packed/dsv4-stacked-r1.safetensors" layers.2.ffn.experts.w13.weight
expect_error 1 'data changed after it was written' \
  "$dsv4" generate --model "$tmp/packed" --kv-cache-memory 256M --threads 2 --prompt-ids 5,6

# --- files ---------------------------------------------------------------------
mkdir "$tmp/fifo"
cp "$tmp/model"/* "$tmp/fifo/"
rm "$tmp/fifo/config.json"
mkfifo "$tmp/fifo/config.json"
expect_error 2 'config.json: is a FIFO, expected a regular file' \
  "$dsv4" generate --model "$tmp/fifo" "${engine[@]}" --prompt-ids 5,6
ln -s "$tmp/loop_b" "$tmp/loop_a"
ln -s "$tmp/loop_a" "$tmp/loop_b"
for cmd in generate serve bench eval; do
  extra=()
  [[ $cmd != generate ]] || extra=(--prompt-ids 5,6)
  [[ $cmd != eval ]] || extra=(--text "$tmp/model/config.json")
  expect_error 2 "model directory $tmp/loop_a: Too many levels of symbolic links \(a symlink loop\?\)" \
    "$dsv4" "$cmd" --model "$tmp/loop_a" "${extra[@]}"
done
expect_error 1 'loop_a: Too many levels of symbolic links' \
  "$dsv4" convert --input-dir "$tmp/loop_a" --output-dir "$tmp/converted"
expect_error 1 'prepack: .*loop_a.*Too many levels of symbolic links' \
  "$dsv4" prepack --model "$tmp/loop_a"

# --- absurd config values ------------------------------------------------------
for edit in 'index_topk=1000000000' 'hc_sinkhorn_iters=1000000000' 'sliding_window=100000000'; do
  field=${edit%%=*}
  rm -rf "$tmp/absurd"
  cp -r "$tmp/model" "$tmp/absurd"
  /usr/bin/python3 - "$tmp/absurd/config.json" "$field" "${edit#*=}" <<'EOF'
import json, sys
path, field, value = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(path))
c[field] = value
json.dump(c, open(path, "w"))
EOF
  expect_error 2 "config.json: field '$field' is [0-9]+, above the [0-9]+ this engine accepts" \
    "$dsv4" generate --model "$tmp/absurd" "${engine[@]}" --prompt-ids 5,6
done

# --- flags ---------------------------------------------------------------------
for cmd in generate serve bench eval make-tiny convert; do
  expect_error 2 '^dsv4: --threads: Value 1000000 not in range 0 to 1024$' \
    "$dsv4" "$cmd" --threads 1000000
done
expect_error 2 '^dsv4: --http-threads: Value 100000 not in range 0 to 4096$' \
  "$dsv4" serve --http-threads 100000
expect_error 2 '^dsv4: --shutdown-timeout: Value -1 not in range' \
  "$dsv4" serve --shutdown-timeout -1
expect_error 2 '^dsv4: --body-timeout: Value 0 not in range' "$dsv4" serve --body-timeout 0

# --- prepack never overwrites its input -----------------------------------------
shard=$tmp/model/model-00001-of-00003.safetensors
sum=$(sha256sum "$shard")
expect_error 2 "is the checkpoint's own file" \
  "$dsv4" prepack --model "$tmp/model" --output "$shard" --force
expect_error 2 'is not a prepacked sidecar' \
  "$dsv4" prepack --model "$tmp/model" --output "$tmp/model/tokenizer.json" --force
[[ $(sha256sum "$shard") == "$sum" ]] || fail "prepack changed a checkpoint shard"
echo "hardening_test: OK"
