#!/usr/bin/env bash
# The long fuzzing campaign recorded in bench/RESULTS.md: every harness of tests/fuzz/ in turn,
# one process at a time, SECONDS each, from its seed corpus; then a table of executions, speed,
# coverage and findings per harness (OUT/campaign.tsv) and each harness's log (OUT/NAME.log).
# Usage: bench/fuzz_campaign.sh OUT SECONDS [NAMES...]   (after `make fuzz-build`)
# Findings (crashes, sanitizer reports, timeouts, out-of-memory) land in OUT/artifacts/NAME/.
set -u
out=${1:?usage: bench/fuzz_campaign.sh OUT SECONDS [NAMES...]}
seconds=${2:?seconds per harness}
shift 2
cd "$(dirname "$0")/.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(ls tests/fuzz/fuzz_*.cpp | sed -E 's|.*/fuzz_(.*)\.cpp|\1|'))
mkdir -p "$out"
export MPICNN_FUZZ_TMP=$out
printf 'harness\texecutions\texec_per_s\tcoverage\tfeatures\tcorpus\tfindings\trc\n' > "$out/campaign.tsv"
for n in "${names[@]}"; do
  echo "== fuzz_$n: $seconds s ($(date -u +%H:%M:%S))"
  nice bash tests/fuzz/run.sh "$n" "$seconds" "$out" > "$out/$n.log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$n.log" | tail -1)
  done_line=$(grep -E '^#[0-9]+\s+DONE' "$out/$n.log" | tail -1)
  cov=$(echo "$done_line" | sed -nE 's/.* cov: ([0-9]+).*/\1/p')
  ft=$(echo "$done_line" | sed -nE 's/.* ft: ([0-9]+).*/\1/p')
  corp=$(echo "$done_line" | sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p')
  findings=$(find "$out/artifacts/$n" -type f | wc -l)
  rate=$(( ${execs:-0} / seconds ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "${execs:-0}" "$rate" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$findings" "$rc" \
    >> "$out/campaign.tsv"
  tail -1 "$out/campaign.tsv"
done
column -t "$out/campaign.tsv"
