#!/usr/bin/env bash
# Training and inference throughput, mpicnn vs PyTorch 1.13 CPU, side by side: for each row,
# ROUNDS alternating runs of each (separate processes, so peak memory is per row), same model,
# batch, thread count and step; prints the best images/s of each, the ratio and peak memory.
# With BACKENDS="openblas eigen" our engine runs once per GEMM backend (MPICNN_GEMM) and the
# table gets a column for each; the ratio is for the first.
# Usage: bench/compare_train.sh [ROUNDS] (default 2); THREADS defaults to all cores; ROWS
# ("model size batch" triples, ';'-separated) picks rows; STEPS and WARMUP (default 10 and 3)
# are each run's timed and untimed steps, the same for both engines. PRECISION=bf16 runs ours
# with --precision bf16 (the CPU's bf16 GEMMs) against PyTorch's bf16 autocast (default fp32).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
read -r -a backends <<<"${BACKENDS:-openblas}"
bin=${BENCH_BIN:-build/release/bench/train_bench}
[ -x "$bin" ] || make -s bench >/dev/null
IFS=';' read -r -a rows <<<"${ROWS:-resnet18 32 64;resnet18 224 16;alexnet 224 16;vgg11 64 32;resnet50 224 16;densenet121 224 16}"
steps=(--steps "${STEPS:-10}" --warmup "${WARMUP:-3}" --precision "${PRECISION:-fp32}")
field() { sed -E "s/.*$1=([0-9.]+).*/\1/"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
header=$(printf "%-10s %5s %5s %-6s" model size batch mode)
for b in "${backends[@]}"; do header+=$(printf " %14s" "ours/$b im/s"); done
header+=$(printf " %10s %6s %9s %9s" "torch im/s" ratio "ours MB" "torch MB")
echo "$header"
for row in "${rows[@]}"; do
  read -r model size batch <<<"$row"
  for mode in train infer; do
    declare -A best_o=() mem_o=()
    best_t=0 mem_t=0
    for ((r = 0; r < rounds; r++)); do
      for b in "${backends[@]}"; do
        o=$(MPICNN_GEMM=$b "$bin" --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads" "${steps[@]}")
        best_o[$b]=$(best "${best_o[$b]:-0}" "$(echo "$o" | field images_per_s)")
        mem_o[$b]=$(echo "$o" | field peak_rss_mb)
      done
      t=$("$python" bench/torch_train_bench.py --model "$model" --size "$size" --batch "$batch" --mode "$mode" --threads "$threads" "${steps[@]}")
      best_t=$(best "$best_t" "$(echo "$t" | field images_per_s)")
      mem_t=$(echo "$t" | field peak_rss_mb)
    done
    line=$(printf "%-10s %5s %5s %-6s" "$model" "$size" "$batch" "$mode")
    for b in "${backends[@]}"; do line+=$(printf " %14.1f" "${best_o[$b]}"); done
    ratio=$(awk -v a="${best_o[${backends[0]}]}" -v b="$best_t" 'BEGIN { printf "%.2f", a / b }')
    line+=$(printf " %10.1f %6s %9.0f %9.0f" "$best_t" "$ratio" "${mem_o[${backends[0]}]}" "$mem_t")
    echo "$line"
  done
done
