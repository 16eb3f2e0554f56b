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

one_process() {  # one_process NAME ARGS...: a one-process server's completion into $tmp/NAME.json
  local name=$1 pid
  shift
  "$dsv4" "${serve[@]}" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  pid=$!
  pids+=("$pid")
  complete "$(port_of "$tmp/$name.err" "$pid")" "$tmp/$name.json"
  kill -TERM "$pid"
  wait "$pid" || fail "$name: one-process server exit status $?"
}

# two_ranks NAME REF ARGS...: `mpirun -np 2 dsv4 serve ARGS` answers exactly REF's
# completion, then SIGTERM on rank 0 ends both ranks with exit 0 within 30 s.
two_ranks() {
  local name=$1 ref=$2 mpi rank0 rc=0
  shift 2
  "$here/mpirun.sh" 2 "$dsv4" "${serve[@]}" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  mpi=$!
  pids+=("$mpi")
  complete "$(port_of "$tmp/$name.err" "$mpi")" "$tmp/$name.json"
  cmp -s "$tmp/$ref.json" "$tmp/$name.json" || {
    diff "$tmp/$ref.json" "$tmp/$name.json" >&2 || true
    fail "$name: 2 ranks answered differently from one process"
  }
  rank0=$(rank_pid "$mpi" 0) || fail "$name: rank 0 not found"
  kill -TERM "$rank0"
  for i in $(seq 150); do kill -0 "$mpi" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$mpi" 2>/dev/null && fail "$name: still running 30 s after SIGTERM on rank 0"
  wait "$mpi" || rc=$?
  ((rc == 0)) || { cat "$tmp/$name.err" >&2; fail "$name: SIGTERM on rank 0: exit status $rc"; }
  grep -q "rank 1 of 2: .* steps in" "$tmp/$name.err" || fail "$name: rank 1 did not end its engine"
}

one_process one
two_ranks ep one --ep 2
echo "serve --ep 2: same completion as one process; SIGTERM on rank 0 stopped both ranks"

# DP attention across ranks behind the server: `--dp 2 --ep 2` answers what
# one process with `--dp 2` answers, and stops on SIGTERM the same way.
one_process one2 --dp 2
two_ranks dp one2 --dp 2 --ep 2
echo "serve --dp 2 --ep 2: same completion as one process with --dp 2; SIGTERM stopped both ranks"
