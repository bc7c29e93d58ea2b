#!/usr/bin/env bash
# GPU training throughput, side by side with the PyTorch installed on the same machine: same
# model, batch, precision, synthetic data and step (forward, cross-entropy, backward, SGD with
# momentum), and inference (forward only); PyTorch eager in channels-last with autocast for
# bf16/fp16. Prints one row per run, each as soon as it is measured, with the ratio mpicnn /
# PyTorch. Needs `make CUDA=1` (the bench binary of the CUDA build).
#   bench/gpu_train.sh [MODELS] [PRECISIONS] [MODES]
#   defaults: "resnet50 resnet18" "tf32 bf16 fp16" "train infer"; BATCH=256 STEPS=20 WARMUP=5
#   LAYOUT=nhwc: ours on the channels-last typed path (train_bench --gpu-layout; default nchw)
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-resnet50 resnet18}
precisions=${2:-tf32 bf16 fp16}
modes=${3:-train infer}
batch=${BATCH:-256} steps=${STEPS:-20} warmup=${WARMUP:-5} layout=${LAYOUT:-nchw}
bin=${BIN:-build/release/cuda/bench/train_bench}
[ -x "$bin" ] || { echo "gpu_train.sh: $bin missing (run make CUDA=1 bench)" >&2; exit 1; }
# PyTorch with its own cuDNN: the libraries put on LD_LIBRARY_PATH for our binaries are not its.
python=(env -u LD_LIBRARY_PATH "${PYTHON:-python3}")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
echo "batch $batch, 224x224, $steps timed steps after $warmup; ours with --gpu-layout $layout"
echo "| model | precision | mode | mpicnn images/s | PyTorch images/s | ratio |"
echo "|---|---|---|---|---|---|"
for m in $models; do
  for p in $precisions; do
    for mode in $modes; do
      args=(--model "$m" --mode "$mode" --size 224 --batch "$batch" --steps "$steps" --warmup "$warmup"
            --device cuda --precision "$p")
      # A failed run (out of memory, say) prints its last line in its cell; the rows go on.
      ours=$("$bin" "${args[@]}" --gpu-layout "$layout" 2>&1) || ours="images_per_s=failed: $(tail -n 1 <<<"$ours")"
      peer=$("${python[@]}" bench/torch_train_bench.py "${args[@]}" --channels-last 2>&1) ||
        peer="images_per_s=failed: $(tail -n 1 <<<"$peer")"
      a=$(sed -nE 's/.*images_per_s=([0-9.]+|failed.*)( .*|$)/\1/p' <<<"$ours" | tail -n 1)
      b=$(sed -nE 's/.*images_per_s=([0-9.]+|failed.*)( .*|$)/\1/p' <<<"$peer" | tail -n 1)
      echo "| $m | $p | $mode | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }') |"
    done
  done
done
