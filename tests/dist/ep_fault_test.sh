#!/usr/bin/env bash
# A rank that dies or hangs mid-generation ends the whole run with an error
# within a bounded time (docs/scale-out.md "Faults"): SIGKILL on rank 1 (mpirun
# notices and stops every rank), and SIGSTOP on rank 1 (rank 0's next
# exchange waits --dist-timeout 3 s, then aborts every rank naming it).
# Usage: ep_fault_test.sh DSV4_BINARY
set -euo pipefail
dsv4=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/ep_common.sh"
make_tiny "$tmp/m"
long=(generate --model "$tmp/m" --kv-cache-memory 64M --threads 1 --generation-config vllm
      --max-model-len 4096 --prompt "Hello" --generate-config
      '{"max_new_tokens":4000,"ignore_eos":true}' --ep 2 --dist-timeout 3)


fault() {  # fault NAME SIGNAL REGEX: start, wait for decoding, signal rank 1, expect an error
  local name=$1 sig=$2 regex=$3
  "$here/mpirun.sh" 2 "$dsv4" "${long[@]}" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  local mpirun_pid=$! victim="" i
  pids+=("$mpirun_pid")
  for i in $(seq 100); do  # rank 1 up and the engine running (its rank line logged)
    victim=$(rank_pid "$mpirun_pid" 1 || true)
    [[ -n $victim ]] && grep -q "rank 1 of 2 (.*routed experts" "$tmp/$name.err" && break
    sleep 0.1
  done
  [[ -n $victim ]] || fail "$name: rank 1 not found"
  sleep 0.5
  kill -"$sig" "$victim"
  pids+=("$victim")
  local start=$SECONDS rc=0
  for i in $(seq 300); do  # bounded: 30 s
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$mpirun_pid" 2>/dev/null && fail "$name: the run still goes 30 s after the fault"
  wait "$mpirun_pid" || rc=$?
  ((rc != 0)) || fail "$name: exit status 0 after a rank failed"
  grep -qE -- "$regex" "$tmp/$name.err" "$tmp/$name.out" \
    || { cat "$tmp/$name.err" >&2; fail "$name: no clear error"; }
  grep -q '^finish_reason: length' "$tmp/$name.out" && fail "$name: reported a finished request"
  echo "$name: the run ended with status $rc after $((SECONDS - start)) s"
}

fault killed KILL "rank 1 .*(exited on signal|killed)|exited on signal 9"
fault hung STOP "rank 0 of 2: (all-gather|broadcast|barrier) waited [0-9]+ s for the other ranks"
