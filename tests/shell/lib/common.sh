# Shared by the shell suites (tests/shell/*.sh), sourced, never run. A suite reports each case
# on one line that tests/run_all.sh counts: "PASS: name", "FAIL: name: why", "SKIP: name: why".
# Suites run from the repository root; MPICNN_BUILD is the build directory (build/release).
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
MPICNN_BUILD=${MPICNN_BUILD:-build/release}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
suite_failed=0

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1: $2"; suite_failed=1; }
skip() { echo "SKIP: $1: $2"; }

# check NAME COMMAND...: PASS when the command succeeds, else FAIL with its last output line.
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(echo "$out" | tail -1)"; fi
}

# A private scratch directory removed when the suite exits (plus any cleanup the suite adds
# with `on_exit CMD`; commands run in reverse order of registration).
SCRATCH=$(mktemp -d /tmp/mpicnn-suite.XXXXXX)
_exit_cmds=("rm -rf '$SCRATCH'")
on_exit() { _exit_cmds=("$1" "${_exit_cmds[@]}"); }
_run_exit_cmds() { local c; for c in "${_exit_cmds[@]}"; do eval "$c" >/dev/null 2>&1 || true; done; }
trap _run_exit_cmds EXIT

# json_get FILE KEY: a top-level value of a JSON file (python3 is a make deps package).
json_get() { /usr/bin/python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(json.dumps(v) if isinstance(v,(dict,list)) else v)' "$1" "$2"; }

# The suite's exit status: non-zero when any case failed.
finish() { exit "$suite_failed"; }
