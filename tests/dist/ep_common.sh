# Shared by the dist shell tests (sourced, not run): the scratch folder and its
# cleanup, a failure line, the tiny model, one generate run with or without
# mpirun, and finding a server's port and a rank's process under mpirun.
# Expects $dsv4 to name the binary and $here the folder of these scripts.
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipping" >&2; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() {  # every process a test started (continued first: a test may have stopped it)
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

make_tiny() {  # make_tiny DIR
  "$dsv4" make-tiny --preset tiny --seed 1 -o "$1" > /dev/null 2>&1 || fail "make-tiny"
}
port_of() {  # port_of ERRFILE PID: waits for the bound port and /health 200
  local i port=""
  for i in $(seq 300); do
    kill -0 "$2" 2>/dev/null || { cat "$1" >&2; fail "the server exited"; }
    port=$(grep -oE 'bound http://[^:]+:[0-9]+' "$1" | grep -oE '[0-9]+$' || true)
    if [[ -n $port ]] && curl -sf "localhost:$port/health" > /dev/null; then
      echo "$port"
      return 0
    fi
    sleep 0.2
  done
  fail "server not ready"
}
rank_pid() {  # rank_pid MPIRUN_PID RANK: the dsv4 process of that rank
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
run_generate() {  # run_generate OUT NP K ARGS...: `dsv4 generate ARGS` with MTP K drafts (0: none),
  # under mpirun -np NP --ep NP when NP > 1; OUT gets stdout without the timing line
  local out=$1 np=$2 k=$3 extra=()
  shift 3
  if ((k > 0)); then extra=(--speculative-config "{\"method\":\"mtp\",\"num_speculative_tokens\":$k}"); fi
  local cmd=("$dsv4" generate "$@" "${extra[@]}")
  if ((np == 1)); then
    "${cmd[@]}" > "$out.raw" 2> "$out.err" || { cat "$out.err" >&2; fail "$out"; }
  else
    "$here/mpirun.sh" "$np" "${cmd[@]}" --ep "$np" > "$out.raw" 2> "$out.err" \
      || { cat "$out.err" >&2; fail "$out"; }
  fi
  grep -v '^\[generate\]' "$out.raw" > "$out"
}
