#!/usr/bin/env bash
# GPU training throughput, side by side with the PyTorch installed on the same machine: same
# model, batch, precision, synthetic data and step (forward, cross-entropy, backward, SGD with
# momentum); PyTorch eager in channels-last with autocast for bf16/fp16. Prints one line per run
# and the ratio mpicnn / PyTorch per row. Needs `make CUDA=1` (the bench binary of the CUDA build).
#   bench/gpu_train.sh [MODELS] [PRECISIONS]     defaults: "resnet50 resnet18" "tf32 bf16 fp16"
# Not yet run: no GPU was available when it was written (see bench/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-resnet50 resnet18}
precisions=${2:-tf32 bf16 fp16}
bin=build/release/cuda/bench/train_bench
[ -x "$bin" ] || { echo "gpu_train.sh: $bin missing (run make CUDA=1 bench)" >&2; exit 1; }
python=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
echo "| model | precision | mpicnn images/s | PyTorch images/s | ratio |"
echo "|---|---|---|---|---|"
for m in $models; do
  for p in $precisions; do
    ours=$("$bin" --model "$m" --size 224 --batch 256 --steps 20 --warmup 5 --device cuda --precision "$p")
    peer=$("$python" bench/torch_train_bench.py --model "$m" --size 224 --batch 256 --steps 20 \
             --warmup 5 --device cuda --precision "$p" --channels-last)
    a=$(sed -E 's/.*images_per_s=([0-9.]+).*/\1/' <<<"$ours")
    b=$(sed -E 's/.*images_per_s=([0-9.]+).*/\1/' <<<"$peer")
    echo "| $m | $p | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }') |"
  done
done
