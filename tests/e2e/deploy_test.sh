#!/usr/bin/env bash
# What a first deployment meets (docs/deploy.md), through the real binaries:
#  - `--version`; a missing model directory says "model directory X does not
#    exist" with exit 2 in every subcommand;
#  - an impossible --kv-cache-memory (1T) is one line naming the numbers,
#    exit 2; a possible one logs the memory sum and "Maximum concurrency";
#  - `dsv4 serve MODEL` (positional, as vllm serve), and the model given twice;
#  - the port is bound before the model loads: /health answers 503
#    (OpenAI-style error, code model_loading) until the engine is attached,
#    then 200; the warm-up forward is logged; a second server on the same
#    port exits within seconds;
#  - "deepseek_mtp" is accepted as the speculative method;
#  - --log-level warning silences the info lines, before or after the
#    subcommand; an unknown level is one line, exit 2.
# Usage: deploy_test.sh DSV4 DSV4_SCRIPTED_SERVE TOKENIZER_JSON
set -euo pipefail
dsv4=$1
scripted=$2
tokenizer=$3
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/cli_expect.sh"  # fail, expect_error, make_tiny

"$dsv4" --version | grep -qE '^dsv4 [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
make_tiny "$tmp/model"
engine=(--threads 2 --prepacked off)

# --- errors: one prefix, exit 2 for bad input --------------------------------------
for cmd in generate serve bench eval prepack; do
  extra=()
  [[ $cmd != eval ]] || extra=(--text "$tmp/model/config.json")
  [[ $cmd != generate ]] || extra=(--prompt-ids 5)
  expect_error 2 "^dsv4 $cmd: model directory $tmp/nope does not exist$" \
    "$dsv4" "$cmd" --model "$tmp/nope" "${extra[@]}"
done
expect_error 2 "^dsv4 serve: model directory $tmp/nope does not exist$" "$dsv4" serve "$tmp/nope"
mkdir "$tmp/empty"
expect_error 2 "^dsv4 serve: model directory $tmp/empty has no config.json" \
  "$dsv4" serve "$tmp/empty"
expect_error 2 '^dsv4 convert: --input-dir .*/nope does not exist$' \
  "$dsv4" convert --input-dir "$tmp/nope" -o "$tmp/converted"
expect_error 2 '^dsv4 convert: --output is required$' "$dsv4" convert --input-dir "$tmp/model"
expect_error 2 '^dsv4 make-tiny: --output is required$' "$dsv4" make-tiny

# --- readable help: one output spelling, no raw CLI11 ranges -------------------------
for cmd in generate serve bench eval convert prepack make-tiny tokenize check-golden; do
  "$dsv4" "$cmd" --help > "$tmp/help" 2>&1 || fail "$cmd --help"
  if grep -nE 'in \[|[0-9]{10,}' "$tmp/help"; then fail "$cmd --help shows a raw range"; fi
  case $cmd in
    convert | prepack | make-tiny | tokenize) grep -q -- '-o,--output' "$tmp/help" || fail "$cmd: no -o,--output" ;;
  esac
  if grep -qE -- '--out\b|--output-dir|Excludes' "$tmp/help"; then fail "$cmd --help shows an old spelling"; fi
done
"$dsv4" serve --help > "$tmp/help"
grep -qE -- '--max-model-len INT >= 2 \(default 4096\)' "$tmp/help" || fail "serve --help: --max-model-len"
grep -qE -- '--port INT in 0\.\.65535 \(default 8000\)' "$tmp/help" || fail "serve --help: --port"
expect_error 2 '^dsv4 serve: the model is given twice' \
  "$dsv4" serve "$tmp/model" --model "$tmp/empty"

# --- memory checked before anything is promised -------------------------------------
greedy='{"max_new_tokens":2,"temperature":0}'
for cmd in generate serve; do
  extra=()
  [[ $cmd != generate ]] || extra=(--prompt-ids 5,6 --generate-config "$greedy")
  expect_error 2 "^dsv4 $cmd: --kv-cache-memory 1\.0 TiB does not fit: the host has [0-9.]+ [GM]iB available of [0-9.]+ [GM]iB total; after [0-9.]+ [KMG]iB of working memory at most [0-9.]+ [GM]iB is left for the caches$" \
    "$dsv4" "$cmd" --model "$tmp/model" "${engine[@]}" --kv-cache-memory 1T "${extra[@]}"
done
"$dsv4" generate --model "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --prompt-ids 5,6 \
  --generate-config "$greedy" --speculative-config '{"method":"deepseek_mtp","num_speculative_tokens":1}' \
  > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "generate with deepseek_mtp"; }
grep -q 'K = 1' "$tmp/err" || { cat "$tmp/err" >&2; fail "deepseek_mtp did not turn MTP on"; }
grep -qE 'memory: weights [0-9.]+ [KMG]iB \(mapped\) \+ caches 64\.0 MiB \+ working memory' "$tmp/err" \
  || { cat "$tmp/err" >&2; fail "no memory summary line"; }
grep -qE 'Maximum concurrency for 4096 tokens per request: [0-9]+ requests' "$tmp/err" \
  || { cat "$tmp/err" >&2; fail "no Maximum concurrency line"; }

# --- --log-level: before or after the subcommand; a bad level is one line, exit 2 ------
for placement in before after; do
  args=(generate --model "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --prompt-ids 5,6
        --generate-config "$greedy")
  if [[ $placement == before ]]; then args=(--log-level warning "${args[@]}"); else args+=(--log-level warning); fi
  "$dsv4" "${args[@]}" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "--log-level $placement"; }
  ! grep -q '^\[dsv4 I\]' "$tmp/err" || { cat "$tmp/err" >&2; fail "--log-level warning ($placement) printed info lines"; }
done
expect_error 2 '^dsv4: --log-level: loud not in' "$dsv4" generate --log-level loud --model "$tmp/model"

# --- resident before ready: --populate, --mlock, --numa ------------------------------
"$dsv4" generate --model "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --prompt-ids 5,6 \
  --generate-config "$greedy" --populate --numa interleave > "$tmp/out" 2> "$tmp/err" \
  || { cat "$tmp/err" >&2; fail "generate --populate --numa interleave"; }
grep -qE 'populate: [0-9.]+ [KMG]iB of mapped checkpoint \([1-9][0-9]* regions\) resident in [0-9.]+ s' \
  "$tmp/err" || { cat "$tmp/err" >&2; fail "no populate line"; }
grep -qE 'numa: (interleave is a no-op: the host has one NUMA node|weights and caches interleaved over [0-9]+ nodes)' \
  "$tmp/err" || { cat "$tmp/err" >&2; fail "no numa line"; }
expect_error 2 '^dsv4 generate: --numa must be none, interleave, auto or node:N, got "both"$' \
  "$dsv4" generate --model "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --prompt-ids 5 --numa both
# --mlock: locked (a line with the time), or refused naming RLIMIT_MEMLOCK
# where the limit is below the process size (no CAP_IPC_LOCK).
rc=0
"$dsv4" generate --model "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --prompt-ids 5,6 \
  --generate-config "$greedy" --mlock > "$tmp/out" 2> "$tmp/err" || rc=$?
if [[ $rc -eq 0 ]]; then
  grep -qE 'mlock: [0-9.]+ [KMG]iB of weights, caches and working memory locked in [0-9.]+ s' "$tmp/err" \
    || { cat "$tmp/err" >&2; fail "no mlock line"; }
else
  [[ $rc -eq 1 ]] && grep -q '^dsv4 generate: --mlock: mlockall failed .*RLIMIT_MEMLOCK' "$tmp/err" \
    || { cat "$tmp/err" >&2; fail "--mlock: exit $rc without the RLIMIT_MEMLOCK message"; }
fi

# Without CAP_IPC_LOCK and under a finite limit the refusal is certain
# (where capsh can drop the capability, i.e. when run as root).
if [[ $(ulimit -l) != unlimited ]] && command -v capsh > /dev/null \
    && capsh --drop=cap_ipc_lock -- -c true 2> /dev/null; then
  expect_error 1 '^dsv4 generate: --mlock: mlockall failed \(.*\): the locked-memory limit RLIMIT_MEMLOCK is [0-9.]+ [MKG]iB and the process maps [0-9.]+ [MG]iB; raise it \(ulimit -l unlimited' \
    capsh --drop=cap_ipc_lock -- -c "exec \"\$0\" \"\$@\"" "$dsv4" generate --model "$tmp/model" "${engine[@]}" \
    --kv-cache-memory 64M --prompt-ids 5,6 --generate-config "$greedy" --mlock
fi

# --- serve MODEL, ready means ready -------------------------------------------------
# start BINARY LOG ARGS...: a server in the background on a free port.
start() {
  local bin=$1 log=$2
  shift 2
  "$bin" serve "$@" > "$log.out" 2> "$log.err" &
  pids+=($!)
}
# bound_port LOG: the port of the "bound http://host:port" line, waiting up to 10 s.
bound_port() {
  local p=
  for _ in $(seq 1 100); do
    p=$(sed -nE 's|.*bound http://[^:]+:([0-9]+);.*|\1|p' "$1.err")
    [[ -z $p ]] || { echo "$p"; return; }
    sleep 0.1
  done
  cat "$1.err" >&2
  fail "no bound line in $1.err"
}
health() { curl -s -o "$tmp/health" -w '%{http_code}' "http://127.0.0.1:$1/health"; }

start "$scripted" "$tmp/slow" "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --port 0 \
  --test-start-delay 4
port=$(bound_port "$tmp/slow")
code=$(health "$port")
[[ $code == 503 ]] || fail "/health during start-up: $code, want 503"
grep -q '"code":"model_loading"' "$tmp/health" || fail "503 body: $(cat "$tmp/health")"
grep -q '"type":"service_unavailable"' "$tmp/health" || fail "503 body: $(cat "$tmp/health")"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": [5, 6], "max_tokens": 1}')
[[ $code == 503 ]] || fail "completion during start-up: $code, want 503"
# A second server on the bound port fails at once, not after a load.
t0=$(date +%s)
expect_error 1 "^dsv4 serve: cannot bind 127\.0\.0\.1:$port: " \
  "$dsv4" serve "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --port "$port"
(( $(date +%s) - t0 <= 3 )) || fail "address in use took $(( $(date +%s) - t0 )) s"
for _ in $(seq 1 200); do
  grep -q '^Listening on ' "$tmp/slow.out" && break
  sleep 0.1
done
grep -q '^Listening on ' "$tmp/slow.out" || { cat "$tmp/slow.err" >&2; fail "slow server never ready"; }
code=$(health "$port")
[[ $code == 200 ]] || fail "/health after start-up: $code, want 200"
grep -qE 'warm-up forward \(1 prompt token, 1 output token\) took [0-9.]+ s' "$tmp/slow.err" \
  || { cat "$tmp/slow.err" >&2; fail "no warm-up line"; }

# The shipped binary, model as a positional argument: served under its name.
start "$dsv4" "$tmp/plain" "$tmp/model" "${engine[@]}" --kv-cache-memory 64M --port 0
port=$(bound_port "$tmp/plain")
for _ in $(seq 1 200); do
  [[ $(health "$port") == 200 ]] && break
  sleep 0.1
done
[[ $(health "$port") == 200 ]] || fail "positional serve never healthy"
curl -s "http://127.0.0.1:$port/v1/models" | grep -q '"id":"model"' || fail "/v1/models id"
# --generation-config auto: the model's defaults, named in the log; vLLM's
# min_tokens (over max_tokens is a 400; equal to it, every token is generated).
grep -qE 'generation config \(auto\): defaults from .*/generation_config\.json: temperature=1\.0, top_p=1\.0 ' \
  "$tmp/plain.err" || { cat "$tmp/plain.err" >&2; fail "no generation-config line"; }
completion() {
  curl -s -o "$tmp/completion.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
    -H 'Content-Type: application/json' -d "$1"
}
[[ $(completion '{"prompt":[5,6],"max_tokens":2,"min_tokens":3}') == 400 ]] \
  || fail "min_tokens > max_tokens accepted"
grep -q '"param":"min_tokens"' "$tmp/completion.json" || fail "min_tokens 400 names no param"
[[ $(completion '{"prompt":[5,6],"max_tokens":3,"min_tokens":3,"temperature":0}') == 200 ]] \
  || fail "min_tokens request failed"
grep -q '"completion_tokens":3' "$tmp/completion.json" || fail "min_tokens: $(cat "$tmp/completion.json")"
echo "deploy_test: OK"
