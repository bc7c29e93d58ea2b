#!/usr/bin/env bash
# ./pipeline_eval's throughput against the number of ranks K, next to the bound its calibration
# predicts (--stages auto: the first images through every stage on one rank, then the layout
# whose slowest stage, or the node's CPUs shared by every stage, allows the most images/s).
# Workloads: ResNet-18 and ResNet-50 at 224 (torchvision architectures, seeded weights exported
# with data_tools/export_torchvision.py) on a generated folder of JPEG "photographs" of
# 333x500..640x480 (most 500x375), Resize(256) + CenterCrop(224), batch 16; and LeNet on
# Fashion-MNIST's 10000 test images (tiny samples: per-message costs dominate).
# Every row is one `mpiexec -n K --bind-to none ./pipeline_eval --stages auto` job; K = 1 runs
# every stage on one rank with all threads (the sequential run). An item of RANKS may instead be
# a --stages layout (read=1,decode=1,batch=1,predict=1: today's fixed layout of 4 ranks), run
# as given on its ranks; its bound is then the calibration's for the auto layout of as many
# ranks, printed for reference. Best of ROUNDS by throughput.
# Usage: bench/pipeline_scaling.sh [ROUNDS] (default 1). Environment: RANKS="1 2 3 4",
# PHOTOS=2000, MODELS="lenet resnet18 resnet50", DEVICE=cpu|cuda, BIN=. (where pipeline_eval and
# train are), COMPARE=1 (each job also runs --compare's sequential baseline: its rate, and
# whether the predictions are identical).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
read -r -a ranks <<<"${RANKS:-1 2 3 4}"
read -r -a models <<<"${MODELS:-lenet resnet18 resnet50}"
photos=${PHOTOS:-2000}
device=${DEVICE:-cpu}
bin=${BIN:-.}
python=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$bin/pipeline_eval" ] && [ -x "$bin/train" ] || make -s apps >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

model_flags() {  # model -> ./pipeline_eval's model and data flags, batch
  case $1 in
    lenet)
      [ -d "$tmp/lenet" ] || "$bin/train" --epochs 1 --progress none -s "$tmp/lenet" >/dev/null
      echo "--checkpoint $tmp/lenet --dataset fashion-mnist -b 64" ;;
    resnet*)
      if [ ! -f "$tmp/photos.csv" ]; then
        "$python" tests/python/photo_images.py "$tmp/photos" "$photos" --formats jpg \
          --sizes 500x375,500x375,375x500,500x333,333x500,640x480 >/dev/null
        { echo "path,label"; for f in "$tmp"/photos/*.jpg; do echo "$f,0"; done; } >"$tmp/photos.csv"
      fi
      [ -f "$tmp/$1.safetensors" ] ||
        "$python" data_tools/export_torchvision.py --model "$1" -o "$tmp/$1.safetensors" >/dev/null
      echo "--weights $tmp/$1.safetensors --model $1 --num-classes 1000 -d $tmp/photos.csv -b 16" ;;
    *) echo "pipeline_scaling.sh: unknown model $1 (lenet, resnet18, resnet50)" >&2; exit 2 ;;
  esac
}

compare=()
[ "${COMPARE:-0}" = 1 ] && compare=(--compare)
printf "%-9s %3s %10s %10s %6s  %-40s %-44s %s\n" model K "images/s" bound "/bound" layout bottleneck \
  "calibration images/s (read decode batch predict; predict on all threads)${compare:+; sequential, speedup, mismatches}"
for model in "${models[@]}"; do
  flags=$(model_flags "$model")
  for item in "${ranks[@]}"; do
    k=$item stages=auto
    if [[ $item == *=* ]]; then  # a layout: its ranks are the sum of its counts
      stages=$item k=0
      for n in $(tr ',' '\n' <<<"$item" | cut -d= -f2); do k=$((k + n)); done
    fi
    best=""
    for ((r = 0; r < rounds; r++)); do
      out="$tmp/$model-$k-$r.json"
      # shellcheck disable=SC2086
      mpiexec -n "$k" --oversubscribe --bind-to none "$bin/pipeline_eval" $flags --device "$device" \
        --stages "$stages" "${compare[@]}" --json >"$out"
      if [ "$stages" != auto ]; then  # the bound: the calibration of an auto job of as many ranks
        # shellcheck disable=SC2086
        mpiexec -n "$k" --oversubscribe --bind-to none "$bin/pipeline_eval" $flags --device "$device" \
          --stages auto --limit 128 --json >"$out.auto"
        "$python" -c 'import json, sys; a = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
r["calibration"] = a["calibration"]; json.dump(r, open(sys.argv[2], "w"))' "$out.auto" "$out"
      fi
      line=$("$python" - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["calibration"]
rates = " ".join(f'{c["rates"][s] or 0:.0f}' for s in ("read", "decode", "batch", "predict"))
rates += f'; {c["predict_rate_threads"] or 0:.1f} on {c["predict_threads"]}'
if r["sequential_images_per_s"]:
    rates += f'; {r["sequential_images_per_s"]:.1f}, {r["speedup"]:.2f}x, {r["mismatches_vs_sequential"]}'
bound = c["predicted_images_per_s"]
print(f'{r["images_per_s"]:.1f}|{bound:.1f}|{r["images_per_s"] / bound:.2f}|{r["stage_ranks"]}|{c["bottleneck"]}|{rates}')
PY
)
      if [ -z "$best" ] || awk -v a="${line%%|*}" -v b="${best%%|*}" 'BEGIN { exit !(a > b) }'; then best=$line; fi
    done
    IFS='|' read -r ips bound ratio layout bottleneck rates <<<"$best"
    printf "%-9s %3d %10s %10s %6s  %-40s %-44s %s\n" "$model" "$k" "$ips" "$bound" "$ratio" "$layout" "$bottleneck" "$rates"
  done
done
