#!/usr/bin/env bash
# Training and inference throughput, mpicnn vs PyTorch 1.13 CPU, side by side: for each row,
# ROUNDS alternating runs of each (separate processes, so peak memory is per row), same model,
# batch, thread count and step; prints the best images/s of each, the ratio and peak memory.
# Usage: bench/compare_train.sh [ROUNDS] (default 2); THREADS defaults to all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
make -s bench >/dev/null
rows=("resnet18 32 64" "resnet18 224 16" "alexnet 224 16" "vgg11 64 32")
field() { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
printf "%-10s %5s %5s %-6s %10s %10s %6s %9s %9s\n" model size batch mode "ours im/s" "torch im/s" ratio "ours MB" "torch MB"
for row in "${rows[@]}"; do
  read -r model size batch <<<"$row"
  for mode in train infer; do
    best_o=0 best_t=0 mem_o=0 mem_t=0
    for ((r = 0; r < rounds; r++)); do
      o=$(build/release/bench/train_bench --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads")
      t=$("$python" bench/torch_train_bench.py --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads")
      best_o=$(echo "$o" | field images_per_s | awk -v b="$best_o" '{print ($1 > b) ? $1 : b}')
      best_t=$(echo "$t" | field images_per_s | awk -v b="$best_t" '{print ($1 > b) ? $1 : b}')
      mem_o=$(echo "$o" | field peak_rss_mb); mem_t=$(echo "$t" | field peak_rss_mb)
    done
    ratio=$(awk -v a="$best_o" -v b="$best_t" 'BEGIN { printf "%.2f", a / b }')
    printf "%-10s %5s %5s %-6s %10.1f %10.1f %6s %9.0f %9.0f\n" "$model" "$size" "$batch" "$mode" "$best_o" "$best_t" "$ratio" "$mem_o" "$mem_t"
  done
done
