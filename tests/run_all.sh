#!/usr/bin/env bash
# Runs every test suite of the build and ends with one line "N passed, N failed" (after a line
# counting the skipped cases, which count as neither).
# Usage: tests/run_all.sh BUILD_DIR. Counts are doctest test cases plus the shell suites' PASS and
# FAIL lines. MPICNN_TEST_JOBS suites run side by side (default 2; 1 runs them one by one); each
# suite's output is printed whole when it ends, with its wall and CPU time.
set -u
build=${1:?usage: tests/run_all.sh BUILD_DIR}
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-/usr/bin/python3}
# Large allocations in transparent huge pages: the parity tests move several GB of references
# and PyTorch tensors, and page faults were half their time (8.3 -> about 6 minutes).
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
# OpenMPI refuses root without these two.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# On one machine OpenMPI picks its ob1 messaging layer after probing the others (cm over
# libfabric/PSM, UCX) in every process: naming it halves each mpiexec's start (0.44 -> 0.22 s
# for 2 ranks), over the several hundred the suites run. The ranks run as they did.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
jobs_max=${MPICNN_TEST_JOBS:-2}
# Side by side, an idle OpenMP thread must sleep rather than spin (libgomp spins by default, as
# does OpenBLAS's OpenMP build): the spinning took the other suite's core. Measured on 2 cores,
# the unit tests beside the ASan unit tests: 532 s wall, 576 s CPU spinning; 352 s, 355 s passive
# (bench/RESULTS.md, "Test loop").
[ "$jobs_max" -gt 1 ] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
passed=0 failed=0 skipped=0
failures=()  # what failed, one line each, repeated at the end (CI shows only the log's tail)
work=$(mktemp -d)
trap 'kill "$(cat "$work/python.pid" 2>/dev/null)" 2>/dev/null; rm -rf "$work"' EXIT
# The tests' Python scripts run in forks of one interpreter that has imported torch and
# torchvision already (tests/fork_server.py: 1.5 s of CPU saved per script, some 60 of
# them); started outside this shell's jobs, which run_queue waits for. A script that comes
# before the server listens runs in a python3 of its own. MPICNN_TEST_PYTHON_SERVER=0: no server.
if [ "${MPICNN_TEST_PYTHON_SERVER:-1}" != 0 ]; then
  ( "$PYTHON" tests/fork_server.py --serve "$work/python.sock" > "$work/python.log" 2>&1 &
    echo $! > "$work/python.pid" )
  export MPICNN_PYTHON_REAL=$PYTHON MPICNN_PYTHON_SERVER=$work/python.sock
  export PYTHON=$PWD/tests/fork_server.py
fi

# ---- running suites side by side ------------------------------------------------------------
# Suites are queued first (queue LANE KIND NAME CMD...), then run_queue runs them: the "cpu" lane
# jobs_max at a time, in queue order (longest first, so that no core idles at the end); the
# "wait" lane, suites that mostly wait (on processes, timeouts, sleeps: a fraction of their wall
# time is CPU), one at a time beside them. KIND is doctest (a doctest binary: its own counts) or
# shell (PASS:/FAIL:/SKIP: lines). `after NAME` before queue makes the next suite wait until
# suite NAME has ended. Each suite's output goes to $work/N.log; whatever has ended is reported,
# in the order it ended.
q_lane=() q_kind=() q_name=() q_cmd=() q_after=() next_after=""
queue() {
  local lane=$1
  [ "$jobs_max" -gt 1 ] || lane=cpu  # one by one: no lane beside
  q_lane+=("$lane") q_kind+=("$2") q_name+=("$3") q_after+=("$next_after")
  shift 3
  q_cmd+=("$(printf '%q ' "$@")")
  next_after=""
}
after() { next_after=$1; }

names=() kinds=() lanes=() reported=() began=()
t0=${EPOCHREALTIME%.*}
start() {
  local j=$1 i=${#names[@]}
  names+=("${q_name[$j]}") kinds+=("${q_kind[$j]}") lanes+=("${q_lane[$j]}") reported+=(0)
  began+=($((${EPOCHREALTIME%.*} - t0)))
  (
    TIMEFORMAT='%R %U %S'
    # Each doctest case's wall time (tests/case_times.h), for the slowest cases at the end.
    export MPICNN_TEST_TIMES="$work/$i.cases"
    { time eval "${q_cmd[$j]}" > "$work/$i.log" 2>&1; echo $? > "$work/$i.rc.tmp"; } 2> "$work/$i.time"
    mv "$work/$i.rc.tmp" "$work/$i.rc"
  ) &
}

running() {  # suites of lane $1 started and not ended
  local i n=0
  for i in "${!names[@]}"; do
    [ "${lanes[$i]}" = "$1" ] && [ ! -e "$work/$i.rc" ] && n=$((n + 1))
  done
  echo "$n"
}

ended() {  # whether suite $1 has ended
  local i
  for i in "${!names[@]}"; do
    [ "${names[$i]}" = "$1" ] && [ -e "$work/$i.rc" ] && return 0
  done
  return 1
}

run_queue() {
  local started=() left=${#q_name[@]} j limit progress
  while [ "$left" -gt 0 ]; do
    progress=0
    for j in "${!q_name[@]}"; do
      [ -n "${started[$j]:-}" ] && continue
      if [ "${q_lane[$j]}" = cpu ]; then limit=$jobs_max; else limit=1; fi
      [ "$(running "${q_lane[$j]}")" -ge "$limit" ] && continue
      if [ -n "${q_after[$j]}" ] && ! ended "${q_after[$j]}"; then continue; fi
      start "$j"
      started[$j]=1 left=$((left - 1)) progress=1
    done
    if [ "$progress" = 0 ]; then
      wait -n
      report_ended
    fi
  done
  while [ -n "$(jobs -rp)" ]; do
    wait -n
    report_ended
  done
  wait
  report_ended
}

report_ended() {
  local i
  for i in "${!names[@]}"; do
    if [ "${reported[$i]}" = 0 ] && [ -e "$work/$i.rc" ]; then
      reported[$i]=1
      report "$i"
    fi
  done
}

report() {
  local i=$1 name=${names[$1]} log=$work/$1.log rc wall cpu
  rc=$(cat "$work/$i.rc")
  read -r wall user sys < <(tail -1 "$work/$i.time")
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", u + s }')
  echo "=== $name"
  cat "$log"
  echo "--- $name: ${wall%.*} s (CPU $cpu s)"
  printf '%s\t%s\t%s\t%s\n' "${wall%.*}" "$cpu" "$name" "${began[$i]}" >> "$work/suites.tsv"
  if [ -s "$work/$i.cases" ]; then
    awk -F'\t' -v s="$name" '{ print $1 "\t" $2 "\t" s ": " $3 }' "$work/$i.cases" >> "$work/cases.tsv"
  fi
  if [ "${kinds[$i]}" = doctest ]; then count_doctest "$name" "$log" "$rc"; else count_shell "$name" "$log" "$rc"; fi
}

# doctest binary: take its own counts; a crash with no summary counts as one failure.
count_doctest() {
  local name=$1 log=$2 rc=$3 line
  line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1)
  if [ -n "$line" ]; then
    local p f s
    p=$(echo "$line" | sed -E 's/.*\| *([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*\| *([0-9]+) failed.*/\1/')
    # A case that printed "SKIP: ..." returned early: doctest counts it passed, we count it skipped.
    s=$(grep -c '^SKIP: ' "$log")
    passed=$((passed + p - s)) failed=$((failed + f)) skipped=$((skipped + s))
    # doctest reports under "TEST CASE:  name" (MESSAGE()s too): the cases with an ERROR line.
    local case
    while IFS= read -r case; do failures+=("$name: $case"); done < <(awk '
      /^====================/ { name = "" } /^TEST CASE:  / { name = substr($0, 13) }
      name != "" && / ERROR: / { print name; name = "" }' "$log" | sort -u)
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
      failed=$((failed + 1))
      failures+=("$name: exited $rc with no failed case")
    fi
  else
    echo "$name: exited $rc without a summary"
    failed=$((failed + 1))
    failures+=("$name: exited $rc without a summary (last line: $(tail -1 "$log"))")
  fi
}

# Shell suite: a PASS or FAIL line counts as one test case; a suite that fails without a FAIL
# line counts one.
count_shell() {
  local name=$1 log=$2 rc=$3 p f s line
  p=$(grep -c '^PASS: ' "$log") f=$(grep -c '^FAIL: ' "$log") s=$(grep -c '^SKIP: ' "$log")
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  while IFS= read -r line; do failures+=("$name: $line"); done < <(grep '^FAIL: ' "$log" | cut -c1-300)
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "$name: exited $rc without a FAIL line"
    failed=$((failed + 1))
    failures+=("$name: exited $rc without a FAIL line (last line: $(tail -1 "$log" | cut -c1-200))")
  fi
}

skip_suite() {
  echo "SKIP: $1"
  skipped=$((skipped + 1))
}

# ---- the build's own check: no compiler warnings -----------------------------------------------
# `make test` keeps its build's output in $build/test-build.log; a warning there (ours, or a
# third-party header's that we did not silence where it arises) fails this check.
if [ -f "$build/test-build.log" ]; then
  warnings=$(grep -E '(^|: )warning( #[0-9A-Za-z-]+)?: ' "$build/test-build.log" | sort -u)
  if [ -z "$warnings" ]; then
    echo "PASS: build: no compiler warnings ($build/test-build.log)"
    passed=$((passed + 1))
  else
    echo "FAIL: build: $(echo "$warnings" | wc -l) compiler warnings ($build/test-build.log):"
    echo "$warnings" | head -n 20
    failed=$((failed + 1))
    failures+=("build: compiler warnings, first: $(echo "$warnings" | head -n 1 | cut -c1-200)")
  fi
else
  skip_suite "build warnings: no $build/test-build.log (make test writes it)"
fi

# ---- the suites, longest first in each lane (measured: tests/README.md, "Time") ---------------
# The unit tests in two processes, so that the two longest suites share the cores: the PyTorch
# parity tests (a reference server in Python beside the checks) and the rest.
doctest_flags=(--no-intro=true --no-colors=true)
parity='*matches PyTorch*'
# PyTorch's parity references (about 8 GB) stay on disk for the rerun below and for later runs,
# as ccache keeps objects (tests/test_model_parity.cpp: keyed by the cases, the scripts and the
# torch version): in MPICNN_PARITY_CACHE, by default ~/.cache/mpicnn/parity where the disk has
# room with margin (16 GB free) or the cache is there already. MPICNN_PARITY_CACHE= (empty)
# turns it off: each run computes its references (the rerun too).
if [ -z "${MPICNN_PARITY_CACHE+set}" ]; then
  cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mpicnn/parity
  mkdir -p "$cache" 2>/dev/null
  free_gb=$(df -Pk "$cache" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ -n "$(ls -A "$cache" 2>/dev/null)" ] || [ "${free_gb:-0}" -ge 16 ]; then
    export MPICNN_PARITY_CACHE=$cache
  fi
fi
echo "parity references: ${MPICNN_PARITY_CACHE:-computed by each run (no cache)}"
queue cpu doctest "unit tests" "$build/tests/unit_tests" -tse=cuda -tce="$parity" "${doctest_flags[@]}"
queue cpu doctest "unit tests: PyTorch parity" "$build/tests/unit_tests" -tse=cuda -tc="$parity" "${doctest_flags[@]}"

# MPICNN_TEST_PARITY_CORETYPE=NAME: the float32 parity checks once more with OpenBLAS held to that
# kernel set, so that a tolerance that holds under one GEMM kernel only cannot pass; "other"
# (what .ci/run sets) picks a set OpenBLAS does not choose here: Haswell (AVX2) where it chose an
# AVX-512 one (Cooperlake on the EPYC, SkylakeX on the Cascade Lake), else Sandybridge (AVX). It
# reads the first run's references (MPICNN_PARITY_CACHE), so it starts once that run has ended,
# and runs the float32 engine only (the float64 one's 1e-9 tolerances are far above any
# kernel's rounding).
parity_core=${MPICNN_TEST_PARITY_CORETYPE:-}
if [ "$parity_core" = other ]; then
  chosen=$("$PYTHON" -c 'import ctypes; l = ctypes.CDLL("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"); l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())' 2>/dev/null)
  case "$chosen" in
    SkylakeX | Cooperlake | SapphireRapids) parity_core=Haswell ;;
    *) parity_core=Sandybridge ;;
  esac
  echo "parity rerun: OpenBLAS chose ${chosen:-?} here, the rerun takes $parity_core"
fi
if [ -n "$parity_core" ]; then
  after "unit tests: PyTorch parity"
  queue cpu doctest "unit tests: PyTorch parity, OPENBLAS_CORETYPE=$parity_core" \
    env OPENBLAS_CORETYPE="$parity_core" MPICNN_PARITY_ENGINES=f32 "$build/tests/unit_tests" -tse=cuda \
    -tc="$parity" "${doctest_flags[@]}"
fi

# ---- Sanitizers (tests/README.md "Sanitizers"; built by `make sanitize-build`, which make test
# runs): ASan+UBSan over the unit tests without the PyTorch parity ones and over the MPI tests on
# 2 ranks, TSan over the loader and pipeline tests. A finding fails its test (UBSan does not
# recover, ASan and TSan exit non-zero); suppressions only for OpenMPI/OpenBLAS/libgomp internals.
sanitize=$PWD/tests/sanitize
asan_build=$(echo "$build" | sed -E 's#(^|/)(release|debug)#\1\2-asan#')
tsan_build=$(echo "$build" | sed -E 's#(^|/)(release|debug)#\1\2-tsan#')
# The programs that initialise MPI (./train, ./pipeline_eval, the MPI tests) unwind leak stacks
# slowly, so that lsan.supp can tell OpenMPI's leaks from ours (src/dist/asan_options.h); the
# unit tests keep ASan's fast unwinder (their ASan run takes half the time so).
asan_env=(env "ASAN_OPTIONS=detect_leaks=1"
  "LSAN_OPTIONS=suppressions=$sanitize/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
# Left out under ASan, to keep the suite near 2 minutes (measured under ASan on 2 busy cores; the
# unsanitized run above has them all): the PyTorch parity tests (not compiled in), every-model
# sweeps (finetune 224 s, registry 62 s, smallest input 54 s, auxiliary heads 42+15 s), the
# torchvision comparisons (22 s), and pipeline eval (63 s; TSan runs it below).
# Also left out (2026-11-24, for the 15-minute suite budget): the longest end-to-end CLI cases,
# which the unsanitized run has (preprocess recipes of ./train 12 s, train CLI --help 11 s).
# And the recommender's fits (35 s under ASan, 1 s without: XGBoost's many allocations); its
# suggest cases stay. And the detector's training runs (40 SGD steps in-process, and ./train
# --task detection on 2 ranks): their parts (batches, predictions, every detection layer) run
# under ASan in their own cases.
# Also the fine-tuning of a Fashion-MNIST LeNet on its exported PNGs (an epoch of 60000 images
# under ASan), and the GPU BatchNorm math's bit-for-bit check against the CPU layer, which holds
# for the FMAs GCC forms at -O3 (the sanitizer builds' -O1 forms fewer).
# And (2026-12-06, for the 7-minute suite budget) the train CLI's runs that repeat ./train's
# path under ASan with another output or precision (--precision bf16 12.8 s, --progress none
# 11 s, output in a pipe 6.3 s: the run-directory case runs ./train under ASan, the bf16
# layers run under ASan in their own cases), and the recommender's ranking (an XGBoost fit,
# 30 s under ASan; its bad-query case still runs suggest).
asan_exclude='*matches PyTorch*,*every model*,registry models*,*smallest input*,auxiliary*,*torchvision*,pipeline eval*,preprocess: ./train*,train CLI: --help*,recommend fit*,recommend model file*,detector training*,train CLI detection*,data tools: a LeNet pretrained*,BatchNorm*GPU math*'
asan_exclude+=',train CLI: --precision bf16*,train CLI: --progress none*,train CLI: under mpiexec with its output in a pipe*,recommend suggest: ranked*'
# And (2026-12-06, night) the MLflow store of a ./train run (12.9 s under ASan): ./train runs
# under ASan in the run-directory case, the store's writer in the tracking cases in process.
asan_exclude+=",tracking: a ./train run's MLflow store*"
if [ -x "$asan_build/tests/unit_tests" ] && [ -x "$asan_build/tests/mpi_tests" ]; then
  queue cpu doctest "asan unit tests" timeout 900 "${asan_env[@]}" "$asan_build/tests/unit_tests" -tse=cuda \
    -tce="$asan_exclude" "${doctest_flags[@]}"
else
  skip_suite "asan tests: no ASan build at $asan_build (make sanitize-build)"
fi

# libgomp and OpenBLAS are not built for TSan, so their threads' synchronisation is invisible
# to it: OpenMP runs one thread (OMP_NUM_THREADS=1), and what TSan checks is our own std::threads
# (the loader's workers) and the pipeline's ranks' threads.
tsan_env=(env OMP_NUM_THREADS=1
  "TSAN_OPTIONS=halt_on_error=1:exitcode=66:history_size=7:suppressions=$sanitize/tsan.supp")
if [ -x "$tsan_build/tests/unit_tests" ]; then
  # history_size=7: TSan keeps enough history to restore an OpenMP thread's stack, so the libgomp
  # entry of tsan.supp can match. Left out: the torchvision case (PyTorch's time, OpenMP threads
  # only); the sweep over every stage-to-rank assignment (118 s under TSan), whose ranks run the
  # same threads as the 1..6-rank case here (the unsanitized run has it); the held-out images of
  # a run with a validation split (which images: 14 s of ./train and pipeline_eval under TSan
  # for no thread of their own); and, for now, the corrupt-image case, whose 4-rank error run
  # hangs under TSan (open: tests/README.md, "Sanitizers").
  queue cpu doctest "tsan loader+pipeline" timeout 900 "${tsan_env[@]}" "$tsan_build/tests/unit_tests" \
    -tc='loader*,shards*,pipeline eval*' -tce='*torchvision*,*corrupt image*,*every stage-to-rank*,*validation split*' \
    "${doctest_flags[@]}"
else
  skip_suite "tsan loader+pipeline: no TSan build at $tsan_build (make sanitize-build)"
fi
# Left out under ASan: the stop-by-signal-and-resume case (five trainings of resnet20, 40 CPU-s
# on the two ranks under ASan, a fifth of the suite); the unsanitized MPI suites run it on 1-3
# ranks, and ASan sees ./train write and resume a checkpoint in the unit tests' run-directory
# case. And the tar-shard training case (two 12-epoch trainings, 25 s under ASan): ASan runs the
# shard stream under the loader's workers in the unit tests (shards*).
if [ -x "$asan_build/tests/mpi_tests" ]; then
  queue cpu doctest "asan mpi tests, 2 ranks" timeout 600 "${asan_env[@]}" mpiexec -n 2 --oversubscribe \
    "$asan_build/tests/mpi_tests" -tse=cuda -tce='train: stopped by a signal*,train: tar shards*' "${doctest_flags[@]}"
fi

# Shell suites (tests/shell/*.sh: job scripts under PBS and Slurm, multi-host runs, the CLI end to
# end): each prints "PASS: name", "FAIL: name: why" or "SKIP: name: why" lines and exits non-zero
# on a failure. Those that mostly wait run in the wait lane; the rest by their measured time,
# then any new one.
wait_suites=" test_bad_inputs.sh test_rank_failure.sh test_checkpoint_faults.sh test_slurm_jobs.sh test_sweep.sh "
shell_order="test_transfer.sh test_bad_inputs.sh test_rank_failure.sh test_checkpoint_faults.sh"
shell_order+=" test_fuzz.sh test_slurm_jobs.sh test_report.sh test_pbs_jobs.sh test_serve.sh"
shell_order+=" test_plan_bits.sh test_sweep.sh test_multihost.sh"
shell_suites=()
for f in $shell_order; do [ -e "tests/shell/$f" ] && shell_suites+=("tests/shell/$f"); done
for s in tests/shell/*.sh; do
  case " $shell_order " in *" ${s#tests/shell/} "*) ;; *) [ -e "$s" ] && shell_suites+=("$s") ;; esac
done
for s in "${shell_suites[@]}"; do
  lane=cpu
  case "$wait_suites" in *" ${s#tests/shell/} "*) lane=wait ;; esac
  queue "$lane" shell "$s" env MPICNN_BUILD="$build" timeout 900 bash "$s"
done

# GradSync's progress thread against the main thread (Open MPI itself is not built for TSan:
# what is checked is the hand-over of buckets and results between our two threads).
if [ -x "$tsan_build/tests/mpi_tests" ]; then
  queue cpu doctest "tsan gradient sync, 2 ranks" timeout 600 mpiexec -n 2 --oversubscribe "${tsan_env[@]}" \
    "$tsan_build/tests/mpi_tests" -tc='dist grad sync: average*,dist grad sync: hierarchical*' "${doctest_flags[@]}"
else
  skip_suite "tsan gradient sync: no TSan build at $tsan_build (make sanitize-build)"
fi

# MPI tests on 1, 2 and 3 ranks (oversubscribed on 2 cores); the timeout turns a hang (a
# collective some rank never reaches) into a failure.
for k in 2 3 1; do
  queue cpu doctest "mpi tests, $k ranks" timeout 600 mpiexec -n "$k" --oversubscribe "$build/tests/mpi_tests" \
    -tse=cuda "${doctest_flags[@]}"
done

# GPU against CPU (tests/test_cuda.cpp) and the GPU gradient sync on 2 ranks (sharing one GPU
# when there is one), in the CUDA build that `make test` compiles when nvcc is present; without
# a GPU every case prints why it was skipped.
if [ -x "$build/cuda/tests/unit_tests" ]; then
  queue cpu doctest "cuda tests" "$build/cuda/tests/unit_tests" -ts=cuda "${doctest_flags[@]}"
  queue cpu doctest "cuda mpi tests, 2 ranks" timeout 600 mpiexec -n 2 --oversubscribe "$build/cuda/tests/mpi_tests" \
    -ts=cuda "${doctest_flags[@]}"
else
  skip_suite "cuda tests: no CUDA build at $build/cuda (nvcc not found by make test)"
fi

run_queue
# The scripts' CPU time is the fork server's (its forks are its children), not their suites'.
if [ -s "$work/python.pid" ] && [ -r "/proc/$(cat "$work/python.pid")/stat" ]; then
  py_cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13 + $14 + $15) / hz }' \
    "/proc/$(cat "$work/python.pid")/stat")
  printf '%s\t%s\t%s\t%s\n' 0 "$py_cpu" "python scripts of every suite (tests/fork_server.py)" - >> "$work/suites.tsv"
fi
# Where the time went, in every log: each suite's wall and CPU seconds, longest first, and the
# slowest test cases (a case of an MPI suite once, at its slowest rank).
echo "suite times (wall s, CPU s, started at s), longest first:"
sort -t$'\t' -k1,1nr "$work/suites.tsv" | awk -F'\t' '{ printf "  %5d %5d %5s  %s\n", $1, $2, $4, $3 }'
if [ -s "$work/cases.tsv" ]; then
  echo "slowest test cases (wall s, CPU s of the case and the programs it ran):"
  sort -t$'\t' -k3,3 -k1,1nr "$work/cases.tsv" | awk -F'\t' '$3 != prev { print; prev = $3 }' |
    sort -t$'\t' -k1,1nr | head -10 | awk -F'\t' '{ printf "  %7.1f %6.1f  %s\n", $1, $2, $3 }'
fi
# The whole tables, kept beside the build for a closer look (which cases a trim should take).
cp "$work/suites.tsv" "$build/test-suites.tsv" 2>/dev/null
[ -s "$work/cases.tsv" ] && cp "$work/cases.tsv" "$build/test-cases.tsv"
echo "suites took $SECONDS s ($jobs_max side by side)"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "failed:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$skipped skipped (see the SKIP: lines for why)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
