#!/usr/bin/env bash
# The GPU machine's checks (issue 21), in one `device` call, each step under its own time limit
# so that one slow or hung step cannot take the others' time:
#   bash bench/gpu_bundle.sh run 'bash bench/gpu_checks.sh'        (carry .gpu)
# 1. versions: GPU, driver, CUDA, cuDNN, PyTorch;
# 2. unit_tests -ts=cuda (every layer and model on the GPU against the CPU);
# 3. the 2-rank GPU gradient sync (both ranks on the one GPU);
# 4. ./train: LeNet on Fashion-MNIST on the CPU and on the GPU (same accuracy), --deterministic
#    reruns (same bytes), a GPU checkpoint resumed on the CPU and back, resnet18 on synthetic
#    data, and ./pipeline_eval --device cuda against --device cpu on the LeNet run;
# 5. bench/gpu_train.sh [ARGS] (training and inference vs the machine's PyTorch; ARGS: its
#    MODELS PRECISIONS MODES).
# Fashion-MNIST comes from FMNIST (default .gpu/fmnist: copy the Debian package's four .gz
# files there before packing). Logs go to $OUT (the device tool's folder) or gpu-out/.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
fmnist=${FMNIST:-.gpu/fmnist}
B=build/release/cuda/bin
T=build/release/cuda/tests
work=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1

# step NAME SECONDS CMD...: runs CMD with its output appended to $out/NAME.log, then prints
# its status and the log's last lines (the call's output holds only its tail).
step() {
  local name=$1 limit=$2 rc
  shift 2
  echo "=== $name: $*" >>"$out/$name.log"
  timeout -k 5 "$limit" "$@" >>"$out/$name.log" 2>&1
  rc=$?
  echo "=== $name rc=$rc at ${SECONDS}s: $*"
  return $rc
}
# A run's test top-1 after its last epoch.
final_accuracy() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/summary.json"))["test_top1"])' "$1" 2>/dev/null
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  env -u LD_LIBRARY_PATH python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  nproc
  ldd "$T/unit_tests" | grep -E "cud|cublas|not found"
  which mpiexec
} >"$out/info.log" 2>&1
cat "$out/info.log"

step unit 170 "$T/unit_tests" -ts=cuda
tail -n 25 "$out/unit.log"
step unit 60 mpiexec -n 2 --oversubscribe "$T/mpi_tests" -ts=cuda
tail -n 8 "$out/unit.log"

# ---- ./train and ./pipeline_eval --------------------------------------------------------------
common=(-d "$fmnist" --dataset fashion-mnist -e 2 --progress plain --seed 3 --workers 2)
step train 60 "$B/train" "${common[@]}" --device cpu --threads 8 -s "$work/cpu"
step train 40 "$B/train" "${common[@]}" --device cuda --deterministic -s "$work/gpu"
step train 40 "$B/train" "${common[@]}" --device cuda --deterministic -s "$work/gpu2"
{
  echo "lenet fmnist 2 epochs test accuracy: cpu $(final_accuracy "$work/cpu") gpu $(final_accuracy "$work/gpu") gpu-rerun $(final_accuracy "$work/gpu2")"
  if cmp "$work/gpu/latest/model.safetensors" "$work/gpu2/latest/model.safetensors"; then
    echo "deterministic rerun: identical model.safetensors"
  else echo "deterministic rerun: DIFFERENT"; fi
} | tee -a "$out/train.log"
# GPU checkpoint (epoch 1) -> CPU epoch 2 -> GPU epoch 3; then the same weights evaluated.
one=(-d "$fmnist" --dataset fashion-mnist --progress plain --seed 3 --workers 2)
step train 30 "$B/train" "${one[@]}" -e 1 --device cuda --deterministic -s "$work/hop" &&
  step train 40 "$B/train" "${one[@]}" -e 2 --device cpu --threads 8 --resume "$work/hop" &&
  step train 30 "$B/train" "${one[@]}" -e 3 --device cuda --resume "$work/hop" &&
  echo "resume hop gpu->cpu->gpu: accuracy after 3 epochs $(final_accuracy "$work/hop")" | tee -a "$out/train.log"
step train 60 "$B/train" -m resnet18 --dataset synthetic --image-size 224 -b 128 -e 1 \
  --device cuda --progress plain --eval-every 1 -s "$work/r18"
tail -n 4 "$out/train.log"
for d in cpu cuda; do
  step train 40 mpiexec -n 3 --oversubscribe "$B/pipeline_eval" -c "$work/gpu" -d "$fmnist" \
    --dataset fashion-mnist --device "$d" --threads 4 -o "$work/eval-$d"
done
if [ -f "$work/eval-cpu/predictions.csv" ] && [ -f "$work/eval-cuda/predictions.csv" ]; then
  a=$(cut -d, -f1,4 "$work/eval-cpu/predictions.csv" | md5sum)
  b=$(cut -d, -f1,4 "$work/eval-cuda/predictions.csv" | md5sum)
  n=$(paste -d, <(cut -d, -f4 "$work/eval-cpu/predictions.csv") <(cut -d, -f4 "$work/eval-cuda/predictions.csv") |
      awk -F, 'NR > 1 && $1 != $2' | wc -l)
  echo "pipeline_eval predictions cpu vs cuda: $([ "$a" = "$b" ] && echo identical || echo "$n differ")" | tee -a "$out/train.log"
fi

# ---- speed vs PyTorch -------------------------------------------------------------------------
step bench 240 bench/gpu_train.sh "$@"  # its MODELS PRECISIONS MODES
cat "$out/bench.log"
rm -rf "$work"
echo "gpu_checks.sh: done at ${SECONDS}s"
