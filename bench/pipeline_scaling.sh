#!/usr/bin/env bash
# Throughput of ./pipeline_eval against the number of ranks K, and its speedup over the
# sequential baseline measured in the same job (--compare: rank 0 runs every stage alone with
# all cores first, then the K-rank pipeline runs). Two workloads:
#   fmnist: LeNet (trained here for one epoch) on Fashion-MNIST's 10000 test images (IDX, tiny
#           samples: the pipeline's per-message costs dominate);
#   photos: ResNet-18 (torchvision weights exported with data_tools/export_torchvision.py) on
#           JPEG "photographs" of 333x500..640x480, Resize(256) + CenterCrop(224).
# Per-stage utilisation comes from the report. Best of ROUNDS by throughput.
# Usage: bench/pipeline_scaling.sh [ROUNDS] (default 2); RANKS="1 2 3 4 6", PHOTOS=200.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
read -r -a ranks <<<"${RANKS:-1 2 3 4 6}"
photos=${PHOTOS:-200}
python=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./pipeline_eval ] && [ -x ./train ] || make -s apps >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

./train --epochs 1 --progress none -s "$tmp/lenet" >/dev/null
"$python" tests/python/photo_images.py "$tmp/photos" "$photos" --formats jpg >/dev/null
{ echo "path,label"; for f in "$tmp"/photos/*.jpg; do echo "$f,0"; done; } >"$tmp/photos.csv"
"$python" data_tools/export_torchvision.py --model resnet18 --num-classes 1000 -o "$tmp/r18.safetensors" >/dev/null

# name | model flags | data flags | batch
rows=("fmnist|--checkpoint $tmp/lenet|--dataset fashion-mnist|64"
      "photos|--weights $tmp/r18.safetensors --model resnet18 --num-classes 1000|-d $tmp/photos.csv|16")
printf "%-7s %3s %12s %12s %8s %10s  %s\n" data K "images/s" "sequential" speedup "p50 ms" "busy share per stage (rank: stage util)"
for row in "${rows[@]}"; do
  IFS='|' read -r name model data batch <<<"$row"
  for k in "${ranks[@]}"; do
    best=""
    for ((r = 0; r < rounds; r++)); do
      out="$tmp/$name-$k-$r"
      # shellcheck disable=SC2086
      mpiexec -n "$k" --oversubscribe ./pipeline_eval $model $data -b "$batch" --compare --json >"$out.json"
      line=$("$python" - "$out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
stages = " ".join(f'{s["rank"]}:{s["stage"]} {100 * (s["utilisation"] or 0):.0f}% (cpu {s["cpu_s"]:.2f}s)' for s in r["stages"])
print(f'{r["images_per_s"]:.1f} {r["sequential_images_per_s"]:.1f} {r["speedup"]:.2f} '
      f'{1000 * r["latency_s"]["p50"]:.1f} {r["mismatches_vs_sequential"]} | {stages}')
PY
)
      if [ -z "$best" ] || awk -v a="${line%% *}" -v b="${best%% *}" 'BEGIN { exit !(a > b) }'; then best=$line; fi
    done
    read -r ips seq sp p50 mism _ <<<"${best%%|*}"
    [ "$mism" = 0 ] || echo "warning: $name K=$k: $mism predictions differ from sequential" >&2
    printf "%-7s %3d %12s %12s %7sx %10s  %s\n" "$name" "$k" "$ips" "$seq" "$sp" "$p50" "${best#*| }"
  done
done
