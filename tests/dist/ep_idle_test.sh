#!/usr/bin/env bash
# Rank 0 idle and stopping (docs/scale-out.md "Faults", "Stopping"), with
# `mpirun -np 2 dsv4 serve --ep 2 --dist-timeout 2`:
#  1. keep-alive: the server idles for 3x --dist-timeout and still answers
#     (rank 0's keep-alives keep rank 1's deadline from firing);
#  2. SIGTERM to mpirun itself, given --mca odls_base_sigkill_timeout 8: a
#     request in flight still completes (rank 0 drains; rank 1 ignores the
#     forwarded SIGTERM and ends its engine when rank 0 tells it);
#  3. rank 0 frozen (SIGSTOP) while idle: rank 1 stops the run within the
#     bound with one line naming rank 0.
# Usage: ep_idle_test.sh DSV4_BINARY
set -euo pipefail
dsv4=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v curl >/dev/null 2>&1 || { echo "curl not found: skipping" >&2; exit 77; }
source "$here/ep_common.sh"
make_tiny "$tmp/m"
serve=(serve --model "$tmp/m" --kv-cache-memory 64M --threads 1 --port 0 --ep 2 --dist-timeout 2)

ended_within() {  # ended_within PID SECONDS
  local i
  for i in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}
complete() {  # complete PORT MAX_TOKENS OUT
  curl -sf "localhost:$1/v1/completions" -H 'content-type: application/json' \
    -d "{\"prompt\":\"Hello\",\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true}" > "$3"
}

# 1 and 2: idle past the deadline, then SIGTERM to mpirun with a request in flight.
"$here/mpirun.sh" 2 --mca odls_base_sigkill_timeout 8 "$dsv4" "${serve[@]}" \
  > "$tmp/a.out" 2> "$tmp/a.err" &
mpi=$!
pids+=("$mpi")
port=$(port_of "$tmp/a.err" "$mpi")
sleep 6
kill -0 "$mpi" 2>/dev/null || { cat "$tmp/a.err" >&2; fail "idle 6 s (3x --dist-timeout): the run ended"; }
complete "$port" 4 "$tmp/short.json" || fail "no answer after idling"
echo "keep-alive: answered after 6 s idle under --dist-timeout 2"
# Requests back to back (each ~30 tokens), so one is in flight when the
# SIGTERM reaches rank 0 (mpirun sends it odls_base_sigkill_timeout = 8 s
# after its own SIGTERM, and SIGKILL as long again later): every request
# ends complete, the last one refused at connect (curl 7 or 22), never cut
# mid-way (curl 52/56, what a follower killed mid-step gives).
(
  while :; do
    complete "$port" 30 "$tmp/r.json" || { echo "curl $?" >> "$tmp/client"; exit 0; }
    grep -q '"finish_reason":"length"' "$tmp/r.json" || { echo "bad $(cat "$tmp/r.json")" >> "$tmp/client"; exit 0; }
    echo "ok $(date +%s.%N)" >> "$tmp/client"
  done
) &
client=$!
pids+=("$client")
sleep 1
kill -TERM "$mpi"
start=$SECONDS
ended_within "$mpi" 40 || fail "mpirun still runs 40 s after SIGTERM"
rc=0
wait "$mpi" || rc=$?
wait "$client" || true
grep -q "SIGTERM: draining" "$tmp/a.out" || { cat "$tmp/a.out" "$tmp/a.err" >&2; fail "rank 0 never drained"; }
grep -q '^bad' "$tmp/client" && fail "a request ended without finishing: $(grep '^bad' "$tmp/client")"
last=$(tail -1 "$tmp/client")
[[ $last == "curl 7" || $last == "curl 22" ]] || fail "the last request failed mid-way ($last)"
(($(grep -c "^ok" "$tmp/client") >= 2)) || fail "too few requests before the drain"
grep -q "rank 1 of 2: .* steps in" "$tmp/a.err" || { cat "$tmp/a.err" >&2; fail "rank 1 did not end its engine"; }
echo "SIGTERM to mpirun: $(grep -c '^ok' "$tmp/client") requests, rank 0 drained, none cut; both ranks stopped after $((SECONDS - start)) s (mpirun status $rc)"

# 3: rank 0 frozen while idle.
"$here/mpirun.sh" 2 "$dsv4" "${serve[@]}" > "$tmp/b.out" 2> "$tmp/b.err" &
mpi=$!
pids+=("$mpi")
port_of "$tmp/b.err" "$mpi" > /dev/null
rank0=$(rank_pid "$mpi" 0) || fail "rank 0 not found"
pids+=("$rank0")
kill -STOP "$rank0"
start=$SECONDS
ended_within "$mpi" 30 || fail "rank 0 frozen: the run still goes 30 s later"
rc=0
wait "$mpi" || rc=$?
((rc != 0)) || fail "rank 0 frozen: exit status 0"
grep -qE "rank 1 of 2: no message from rank 0 for [0-9]+ s" "$tmp/b.err" \
  || { cat "$tmp/b.err" >&2; fail "rank 0 frozen: no line naming rank 0"; }
echo "rank 0 frozen while idle: the run ended with status $rc after $((SECONDS - start)) s"
