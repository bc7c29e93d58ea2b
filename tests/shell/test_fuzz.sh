# The fuzz harnesses (tests/fuzz/, one per parser of outside data) as a regression test: builds
# them (`make fuzz-build`: clang with ASan and UBSan, about a minute on 2 cores from nothing),
# runs every file of each committed corpus once (the seeds, and the inputs of past findings,
# named regress-*), then fuzzes each harness for FUZZ_TEST_SECONDS (default 2) from its seeds,
# with libFuzzer's random seed fixed (FUZZ_TEST_SEED, default 1): a failure of `make test` is then
# the same on every run of the same tree, not the luck of one draw; exploring fresh seeds is the
# campaign's job (bench/fuzz_campaign.sh, `make fuzz`). A crash, sanitizer report, 10 s hang or 2 GB allocation fails the harness's case, naming the
# report and where libFuzzer saved the input. The long campaign is bench/fuzz_campaign.sh.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"
seconds=${FUZZ_TEST_SECONDS:-2}
seed=${FUZZ_TEST_SEED:-1}
export MPICNN_FUZZ_TMP=$SCRATCH  # the harnesses' scratch files, removed with the suite's folder

names=$(ls tests/fuzz/fuzz_*.cpp | sed -E 's|.*/fuzz_(.*)\.cpp|\1|')
if ! command -v "${FUZZ_CXX:-clang++}" > /dev/null; then
  fail "fuzz: build" "${FUZZ_CXX:-clang++} not found (make deps installs clang and libclang-rt-14-dev)"
  finish
fi
start=$(date +%s)
if ! make --no-print-directory -j"$(nproc)" fuzz-build > "$SCRATCH/build.log" 2>&1; then
  fail "fuzz: make fuzz-build" "$(grep -m1 -E 'error|Error' "$SCRATCH/build.log" || tail -1 "$SCRATCH/build.log")"
  finish
fi
pass "fuzz: make fuzz-build builds $(echo $names | wc -w) harnesses ($(($(date +%s) - start)) s)"

# The first line of a libFuzzer or sanitizer report, and where the input went.
report() {
  local what art
  what=$(grep -m1 -E 'ERROR: |runtime error|SUMMARY|Test unit written|deadly signal' "$1")
  art=$(sed -nE 's/.*Test unit written to (.*)/\1/p' "$1" | head -1)
  echo "${what:-$(tail -1 "$1")}${art:+ (input: $art)}"
}

for n in $names; do
  bin=build/fuzz/fuzz_$n
  files=(tests/fuzz/corpus/"$n"/*)
  if [ ! -e "${files[0]}" ]; then
    fail "fuzz $n: corpus" "tests/fuzz/corpus/$n is empty (tests/fuzz/make_corpus.py writes it)"
  elif "$bin" -timeout=10 -rss_limit_mb=2048 "${files[@]}" > "$SCRATCH/$n.regress.log" 2>&1; then
    pass "fuzz $n: ${#files[@]} corpus inputs run clean"
  else
    fail "fuzz $n: corpus inputs" "$(report "$SCRATCH/$n.regress.log")"
  fi
  if bash tests/fuzz/run.sh "$n" "$seconds" "$SCRATCH/work" -seed="$seed" > "$SCRATCH/$n.log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$SCRATCH/$n.log")
    if [ "${execs:-0}" -gt 0 ]; then
      pass "fuzz $n: $execs executions in $seconds s, nothing found"
    else
      fail "fuzz $n: fuzzing" "no executions counted ($(tail -1 "$SCRATCH/$n.log"))"
    fi
  else
    # Keep the input that failed where a developer can find it after the suite's folder is gone.
    mkdir -p build/fuzz/artifacts && cp -r "$SCRATCH/work/artifacts/$n" build/fuzz/artifacts/ 2> /dev/null
    fail "fuzz $n: fuzzing" "$(report "$SCRATCH/$n.log" | sed "s|$SCRATCH/work|build/fuzz|")"
  fi
done
finish
