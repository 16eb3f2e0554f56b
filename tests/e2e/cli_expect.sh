# Shared by the e2e shell tests (sourced; the caller sets $tmp to its scratch
# directory before calling expect_error, and $dsv4 and $tokenizer before
# calling make_tiny).
#
# fail MESSAGE: print it and fail the test.
fail() { echo "FAIL: $*" >&2; exit 1; }

# make_tiny DIR: the tiny preset's checkpoint into DIR, made by the caller's
# $dsv4 with its $tokenizer (output discarded; fails the test on error).
make_tiny() {
  "$dsv4" make-tiny --out "$1" --tokenizer "$tokenizer" > /dev/null 2>&1 || fail "make-tiny"
}

# expect_error RC REGEX CMD...: CMD exits with RC within 30 s and prints
# exactly one stderr line besides log lines ([dsv4 I]/[dsv4 W]), matching REGEX.
expect_error() {
  local want_rc=$1 regex=$2 rc=0
  shift 2
  timeout 30 "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  [[ $rc -ne 124 ]] || fail "$* hung (killed after 30 s)"
  [[ $rc -eq $want_rc ]] || { cat "$tmp/err" >&2; fail "$*: exit $rc, want $want_rc"; }
  local lines
  lines=$(grep -vc '^\[dsv4 [IW]\]' "$tmp/err" || true)
  [[ $lines -eq 1 ]] || { cat "$tmp/err" >&2; fail "$*: $lines error lines, want 1"; }
  grep -v '^\[dsv4 [IW]\]' "$tmp/err" | grep -qE -- "$regex" \
    || { cat "$tmp/err" >&2; fail "$*: stderr does not match /$regex/"; }
}

# expect_count FILE REGEX N: exactly N lines of FILE match REGEX.
expect_count() {
  local n
  n=$(grep -cE -- "$2" "$1" || true)
  [[ $n -eq $3 ]] || { cat "$1" >&2; fail "$1: expected $3 lines matching /$2/, got $n"; }
}
