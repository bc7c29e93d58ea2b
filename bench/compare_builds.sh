#!/usr/bin/env bash
# Two builds of the engine side by side (a refactor's before and after): train_bench of each in
# turn, ROUNDS rounds, best images/s of each, ratio after / before, 2 threads by default.
# Usage: BEFORE=/path/to/old/build/release/bench/train_bench bench/compare_builds.sh
# (AFTER defaults to this tree's build/release/bench/train_bench; make an old build with
# `git worktree add /tmp/before COMMIT && make -C /tmp/before -j2 build/release/bench/train_bench`).
# ROWS ("model size batch" triples, ';'-separated), ROUNDS (3), STEPS (5), THREADS (2),
# PRECISION (fp32 | bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE:?BEFORE=path to the train_bench of the other build}
after=${AFTER:-build/release/bench/train_bench}
rounds=${ROUNDS:-3}
[ -x "$before" ] || { echo "compare_builds: BEFORE=$before is not an executable" >&2; exit 1; }
[ -x "$after" ] || { echo "compare_builds: AFTER=$after is not an executable (make bench)" >&2; exit 1; }
field() { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
IFS=';' read -r -a rows <<<"${ROWS:-resnet18 32 64;alexnet 224 16;vgg11 64 32;resnet50 224 8}"
args=(--threads "${THREADS:-2}" --steps "${STEPS:-5}" --warmup 2 --precision "${PRECISION:-fp32}")
printf "%-10s %5s %5s %-6s %12s %12s %7s\n" model size batch mode "before im/s" "after im/s" ratio
for row in "${rows[@]}"; do
  read -r model size batch <<<"$row"
  for mode in train infer; do
    b=0 a=0
    for ((r = 0; r < rounds; r++)); do
      o=$("$before" --model "$model" --size "$size" --batch "$batch" --mode "$mode" "${args[@]}")
      b=$(best "$b" "$(echo "$o" | field images_per_s)")
      o=$("$after" --model "$model" --size "$size" --batch "$batch" --mode "$mode" "${args[@]}")
      a=$(best "$a" "$(echo "$o" | field images_per_s)")
    done
    printf "%-10s %5s %5s %-6s %12.2f %12.2f %7.3f\n" "$model" "$size" "$batch" "$mode" "$b" "$a" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
  done
done
