#!/usr/bin/env bash
# Line coverage of src/ by the unit tests and the MPI tests (2 ranks), from a COVERAGE=1 build
# (`make coverage` builds it and calls this). Prints one row per folder of src/ and the total;
# the counts of earlier runs are cleared first. Shell suites are not run here. With --report, only
# the table of the counts as they are (after tests run by hand: counts add up over runs).
# Usage: tests/coverage.sh BUILD_DIR [--report]   (BUILD_DIR: build/release-cov)
set -uo pipefail
build=${1:?usage: tests/coverage.sh BUILD_DIR [--report]}
cd "$(dirname "$0")/.."
command -v gcovr > /dev/null || { echo "tests/coverage.sh: gcovr not found (make coverage installs it)" >&2; exit 1; }
export PYTHON=${PYTHON:-/usr/bin/python3} GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
if [ "${2:-}" != --report ]; then
  find "$build" -name '*.gcda' -delete
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  "$build/tests/unit_tests" -tse=cuda --no-colors=true | tail -3
  mpiexec -n 2 --oversubscribe "$build/tests/mpi_tests" -tse=cuda --no-colors=true | tail -3
fi
json=$(mktemp)
trap 'rm -f "$json"' EXIT
gcovr -r . --filter 'src/' --object-directory "$build" --json-summary "$json" -j 2 > /dev/null 2>&1 ||
  { echo "tests/coverage.sh: gcovr failed" >&2; exit 1; }
"$PYTHON" - "$json" <<'PY'
import collections, json, sys
folders = collections.defaultdict(lambda: [0, 0])
for f in json.load(open(sys.argv[1]))["files"]:
    parts = f["filename"].split("/")
    key = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    folders[key][0] += f["line_covered"]
    folders[key][1] += f["line_total"]
print(f"{'folder':<16}{'lines':>8}{'covered':>9}{'%':>8}")
for key in sorted(folders):
    c, t = folders[key]
    print(f"{key:<16}{t:>8}{c:>9}{100 * c / max(t, 1):>8.2f}")
c, t = (sum(v[i] for v in folders.values()) for i in (0, 1))
print(f"{'src (total)':<16}{t:>8}{c:>9}{100 * c / max(t, 1):>8.2f}")
PY
