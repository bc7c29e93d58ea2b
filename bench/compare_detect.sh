#!/usr/bin/env bash
# Faster R-CNN training step and inference, mpicnn vs torchvision 0.14 CPU, side by side: for
# each row, ROUNDS alternating runs of each (separate processes), same model, image size, batch,
# targets and threads; prints the best images/s of each, the ratio and peak memory.
# Usage: bench/compare_detect.sh [ROUNDS] (default 2); THREADS (default all cores); ROWS
# ("model size batch" triples, ';'-separated); STEPS and WARMUP (default 5 and 2).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
bin=${BENCH_BIN:-build/release/bench/detect_bench}
[ -x "$bin" ] || make -s bench >/dev/null
IFS=';' read -r -a rows <<<"${ROWS:-fasterrcnn_resnet18_fpn 320 2;fasterrcnn_resnet50_fpn 512 2}"
steps=(--steps "${STEPS:-5}" --warmup "${WARMUP:-2}")
field() { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
printf "%-24s %5s %5s %-6s %10s %10s %6s %9s %9s\n" model size batch mode "ours im/s" "torch im/s" ratio "ours MB" "torch MB"
for row in "${rows[@]}"; do
  read -r model size batch <<<"$row"
  for mode in train infer; do
    best_o=0 best_t=0 mem_o=0 mem_t=0
    for ((r = 0; r < rounds; r++)); do
      o=$("$bin" --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads" "${steps[@]}")
      best_o=$(best "$best_o" "$(echo "$o" | field images_per_s)")
      mem_o=$(echo "$o" | field peak_rss_mb)
      t=$("$python" bench/torch_detect_bench.py --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads" "${steps[@]}")
      best_t=$(best "$best_t" "$(echo "$t" | field images_per_s)")
      mem_t=$(echo "$t" | field peak_rss_mb)
    done
    ratio=$(awk -v a="$best_o" -v b="$best_t" 'BEGIN { printf "%.2f", a / b }')
    printf "%-24s %5s %5s %-6s %10.2f %10.2f %6s %9.0f %9.0f\n" "$model" "$size" "$batch" "$mode" "$best_o" "$best_t" "$ratio" "$mem_o" "$mem_t"
  done
done
