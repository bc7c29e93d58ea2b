#!/usr/bin/env bash
# Training loader throughput, ours vs torchvision, per loader core: our data::Loader (over the
# image folder, and over the same images packed as tar shards, read as ./train streams them) with
# ./train's --augment imagenet transform (decode, RandomResizedCrop(224), flip, normalize) and
# the eval one (Resize(256), CenterCrop(224)) against DataLoader(ImageFolder) with the same
# torchvision transforms, batch 64, 0/1/2 workers, 1 OpenMP/BLAS/torch thread; then our
# one-thread time split (read, decode, geometry, normalize). Not a test, and not ./train's
# step: nothing consumes the batches.
#
# Usage: bench/compare_loader.sh [DIR] [ROUNDS]
#   DIR: where the generated image folder goes (default: a temp dir, removed at the end); never
#   the repo. Made once (DIR/folder: IMAGES photo-like JPEGs q90, 500x375-ish, in 10 class
#   folders) and reused by later runs.
#   ROUNDS (default 3): the two programs alternate, each reporting its best of PASSES passes
#   (default 2) per row; the table shows each side's best round, the lowest round beside it
#   (the noise), and the ratio of the bests. The time split is the round with the fastest total.
#   IMAGES (default 1500: a run of ~5 minutes on 2 cores), PASSES, WORKERS (default 0,1,2):
#   environment overrides.
#   Needs build/release/bench/loader_bench and build/release/bin/shards (make bench tools).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BIN=${LOADER_BENCH:-build/release/bench/loader_bench}
SHARDS=${SHARDS_TOOL:-build/release/bin/shards}
rounds=${2:-3}
images=${IMAGES:-1500}
passes=${PASSES:-2}
workers=${WORKERS:-0,1,2}
[ -x "$BIN" ] && [ -x "$SHARDS" ] || { echo "compare_loader.sh: $BIN or $SHARDS not built (make bench tools)"; exit 1; }
if [ -n "${1:-}" ]; then
  dir=$1
  case "$(realpath -m "$dir")/" in "$(pwd)"/*) echo "compare_loader.sh: $dir is inside the repo"; exit 1;; esac
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/mpicnn_loaderbench_XXXXXX")
  trap 'rm -rf "$dir"' EXIT
fi
folder=$dir/folder
if [ ! -f "$dir/folder.done" ] || [ "$(cat "$dir/folder.done")" != "$images" ]; then
  rm -rf "$dir/gen" "$folder"
  # ImageNet-like shapes (landscape and portrait 4:3 and 3:2, mostly 500 px on the long side),
  # JPEG q90, RGB; image i goes to class i * 10 / IMAGES (ImageFolder: one folder per class).
  "$PYTHON" tests/python/photo_images.py "$dir/gen" "$images" --formats jpg \
    --sizes 500x375,375x500,500x333,333x500,500x400 --gray-every 0 --quality 90
  "$PYTHON" - "$dir/gen" "$folder" "$images" <<'EOF'
import os, sys
gen, folder, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = open(os.path.join(gen, "list.txt")).read().split()
for i, name in enumerate(names):
    cls = os.path.join(folder, f"class_{i * 10 // n:02d}")
    os.makedirs(cls, exist_ok=True)
    os.rename(os.path.join(gen, name), os.path.join(cls, name))
EOF
  rm -rf "$dir/gen"
  echo "$images" > "$dir/folder.done"
  rm -rf "$dir/shards"
fi
# The same images as tar shards of 16 MiB (a few shards, so that the stream opens several).
[ -f "$dir/shards/shards.json" ] || "$SHARDS" pack -i "$folder" -o "$dir/shards" --shard-mb 16 --force > /dev/null

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
out=$dir/results
mkdir -p "$out"
rm -f "$out"/*.txt
for ((r = 1; r <= rounds; ++r)); do
  "$BIN" "$folder" --passes "$passes" --workers "$workers" --time-split > "$out/ours_$r.txt" 2>/dev/null \
    || { echo "compare_loader.sh: loader_bench failed (round $r)"; exit 1; }
  "$BIN" "$dir/shards" --label shards --passes "$passes" --workers "$workers" >> "$out/ours_$r.txt" 2>/dev/null \
    || { echo "compare_loader.sh: loader_bench on shards failed (round $r)"; exit 1; }
  "$PYTHON" bench/torchvision_loader_bench.py "$folder" --passes "$passes" --workers "$workers" \
    > "$out/theirs_$r.txt" 2>/dev/null \
    || { echo "compare_loader.sh: torchvision_loader_bench.py failed (round $r)"; exit 1; }
  echo "round $r of $rounds done" >&2
done

echo "$images JPEGs in $folder; batch 64, best of $passes passes per round, $rounds rounds; img/s per loader core"
printf "%-12s %7s %14s %12s %14s %12s %7s %13s\n" transform workers "ours best" "ours lowest" "tv best" "tv lowest" \
  ratio "round ratios"
awk '
  FNR == 1 {  # ours_R.txt or theirs_R.txt
    side = FILENAME ~ /ours_/ ? "o" : "t"
    match(FILENAME, /_[0-9]+\.txt$/); round = substr(FILENAME, RSTART + 1, RLENGTH - 5)
  }
  $1 != "split" && $1 != "crop" && NF >= 4 {
    k = $1 " " $2; keys[k] = 1; v = $4 + 0; rate[side, k, round] = v; rounds[round] = 1
    if (!((side, k) in best) || v > best[side, k]) best[side, k] = v
    if (!((side, k) in low) || v < low[side, k]) low[side, k] = v
  }
  END {
    for (k in keys) {
      if (!(("o", k) in best)) continue
      split(k, f, " ")
      t = f[1]; sub(/\/.*/, "", t); t = t " " f[2]  # train/shards is compared with torchvision train
      rr_lo = 1e9; rr_hi = 0
      for (r in rounds) if ((("o", k, r) in rate) && (("t", t, r) in rate) && rate["t", t, r] > 0) {
        x = rate["o", k, r] / rate["t", t, r]; if (x < rr_lo) rr_lo = x; if (x > rr_hi) rr_hi = x }
      tb = best["t", t] + 0
      printf "%-12s %7s %14.1f %12.1f %14.1f %12.1f %7.2f %6.2f-%-6.2f\n", f[1], f[2], best["o", k], low["o", k],
        tb, low["t", t], (tb > 0 ? best["o", k] / tb : 0), rr_lo, rr_hi
    }
  }' "$out"/ours_*.txt "$out"/theirs_*.txt | sort -k1,1r -k2,2n  # train before eval, workers ascending
# The time split of the round whose train total was the lowest (the least disturbed).
fastest=$(for f in "$out"/ours_*.txt; do
  awk -v f="$f" '$1 == "split" && $2 == "train" && $3 == "total" { print $4, f }' "$f"; done | sort -n | head -1 | cut -d' ' -f2)
echo
echo "our time split, one thread (ms per image; % of read + decode + apply;" \
  "round $(basename "$fastest" .txt | cut -d_ -f2)):"
grep -E '^(split|crop) ' "$fastest" | cut -d' ' -f2-
