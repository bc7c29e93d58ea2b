#!/usr/bin/env bash
# Eval preprocessing throughput, ours vs torchvision/PIL, one thread each: decode + Resize(256)
# + CenterCrop(224) + ToTensor + Normalize over the same PNG and JPEG files. Not a test.
#
# Usage: bench/compare_image.sh [DIR] [ROUNDS]
#   DIR: where the generated images go (default: a temp dir, removed at the end); never the repo.
#   ROUNDS (default 3): the two programs alternate, each reporting its best of 3 passes; the
#   table shows the best round of each. Needs build/release/bench/image_bench (make bench).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BIN=${IMAGE_BENCH:-build/release/bench/image_bench}
rounds=${2:-3}
[ -x "$BIN" ] || { echo "compare_image.sh: $BIN not built (make bench)"; exit 1; }
if [ -n "${1:-}" ]; then
  dir=$1
  case "$(realpath -m "$dir")/" in "$(pwd)"/*) echo "compare_image.sh: $dir is inside the repo"; exit 1;; esac
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/mpicnn_imgbench_XXXXXX")
  trap 'rm -rf "$dir"' EXIT
fi
if [ ! -f "$dir/list.txt" ]; then
  # 200 photo-like images, half 500x375 (and 375x500), half 640x480; each saved as PNG and JPEG q90.
  "$PYTHON" tests/python/photo_images.py "$dir" 200 --sizes 500x375,640x480,375x500,640x480 \
    --gray-every 0 --quality 90
fi

declare -A ours theirs
best() { awk -v a="${1:-0}" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }
for ((r = 1; r <= rounds; ++r)); do
  while read -r fmt rate _; do ours[$fmt]=$(best "${ours[$fmt]:-}" "$rate"); done \
    < <(OMP_NUM_THREADS=1 "$BIN" "$dir" 3 2>/dev/null)
  while read -r fmt rate _; do theirs[$fmt]=$(best "${theirs[$fmt]:-}" "$rate"); done \
    < <(OMP_NUM_THREADS=1 "$PYTHON" bench/pil_image_bench.py "$dir" 3 2>/dev/null)
done
[ ${#ours[@]} -gt 0 ] && [ ${#theirs[@]} -gt 0 ] || { echo "compare_image.sh: a benchmark printed nothing"; exit 1; }
printf "%-6s %12s %16s %7s\n" format "ours img/s" "torchvision img/s" ratio
for fmt in $(printf "%s\n" "${!ours[@]}" | sort); do
  awk -v f="$fmt" -v a="${ours[$fmt]}" -v b="${theirs[$fmt]:-0}" \
    'BEGIN { printf "%-6s %12.1f %16.1f %7.2f\n", f, a, b, (b > 0 ? a / b : 0) }'
done
