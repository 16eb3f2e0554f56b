#!/usr/bin/env bash
# `mpirun -np 2 dsv4 serve --ep 2` and `--dp 2 --ep 2` (docs/scale-out.md): the
# completion equals the one-process server's (with the same --dp), and SIGTERM
# on rank 0 drains and stops every rank with exit status 0 within a bounded time.
# Usage: ep_serve_test.sh DSV4_BINARY
set -euo pipefail
dsv4=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v curl >/dev/null 2>&1 || { echo "curl not found: skipping" >&2; exit 77; }
source "$here/ep_common.sh"
make_tiny "$tmp/m"
serve=(serve --model "$tmp/m" --kv-cache-memory 64M --threads 1 --port 0)
body='{"prompt":"The capital of France is","max_tokens":16,"temperature":0.7,"seed":5,"logprobs":2}'

complete() {  # complete PORT OUT: the completion's choices (ids and timestamps differ)
  curl -sf "localhost:$1/v1/completions" -H 'content-type: application/json' -d "$body" \
    | grep -oE '"choices":.*"usage"' > "$2" || fail "completion on port $1"
}

"$dsv4" "${serve[@]}" > "$tmp/one.out" 2> "$tmp/one.err" &
one=$!
pids+=("$one")
complete "$(port_of "$tmp/one.err" "$one")" "$tmp/one.json"
kill -TERM "$one"
wait "$one" || fail "one-process server: exit status $?"

"$here/mpirun.sh" 2 "$dsv4" "${serve[@]}" --ep 2 > "$tmp/ep.out" 2> "$tmp/ep.err" &
mpi=$!
pids+=("$mpi")
complete "$(port_of "$tmp/ep.err" "$mpi")" "$tmp/ep.json"
cmp -s "$tmp/one.json" "$tmp/ep.json" || {
  diff "$tmp/one.json" "$tmp/ep.json" >&2 || true
  fail "2 ranks answered differently from one"
}
rank0=$(rank_pid "$mpi" 0) || fail "rank 0 not found"
kill -TERM "$rank0"
for i in $(seq 150); do kill -0 "$mpi" 2>/dev/null || break; sleep 0.2; done
kill -0 "$mpi" 2>/dev/null && fail "still running 30 s after SIGTERM on rank 0"
rc=0
wait "$mpi" || rc=$?
((rc == 0)) || { cat "$tmp/ep.err" >&2; fail "SIGTERM on rank 0: exit status $rc"; }
grep -q "rank 1 of 2: .* steps in" "$tmp/ep.err" || fail "rank 1 did not end its engine"
echo "serve --ep 2: same completion as one process; SIGTERM on rank 0 stopped both ranks"

# DP attention across ranks behind the server: `--dp 2 --ep 2` answers what
# one process with `--dp 2` answers, and stops on SIGTERM the same way.
"$dsv4" "${serve[@]}" --dp 2 > "$tmp/one2.out" 2> "$tmp/one2.err" &
one2=$!
pids+=("$one2")
complete "$(port_of "$tmp/one2.err" "$one2")" "$tmp/one2.json"
kill -TERM "$one2"
wait "$one2" || fail "one-process --dp 2 server: exit status $?"
"$here/mpirun.sh" 2 "$dsv4" "${serve[@]}" --dp 2 --ep 2 > "$tmp/dp.out" 2> "$tmp/dp.err" &
dp=$!
pids+=("$dp")
complete "$(port_of "$tmp/dp.err" "$dp")" "$tmp/dp.json"
cmp -s "$tmp/one2.json" "$tmp/dp.json" || {
  diff "$tmp/one2.json" "$tmp/dp.json" >&2 || true
  fail "--dp 2 --ep 2 answered differently from one process with --dp 2"
}
rank0=$(rank_pid "$dp" 0) || fail "rank 0 not found"
kill -TERM "$rank0"
for i in $(seq 150); do kill -0 "$dp" 2>/dev/null || break; sleep 0.2; done
kill -0 "$dp" 2>/dev/null && fail "--dp 2: still running 30 s after SIGTERM on rank 0"
rc=0
wait "$dp" || rc=$?
((rc == 0)) || { cat "$tmp/dp.err" >&2; fail "--dp 2, SIGTERM on rank 0: exit status $rc"; }
echo "serve --dp 2 --ep 2: same completion as one process with --dp 2; SIGTERM stopped both ranks"
