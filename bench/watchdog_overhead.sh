#!/bin/bash
# Step time with and without the watchdog: PAIRS pairs of 2-rank ./train runs, in ABBA order
# (LeNet on synthetic data, batch 16: many short steps, so per-step costs show), --timeout 0 (no
# watchdog, guards off) against --timeout 1800 (the default), the training images/s of each from
# its "done:" line; prints the medians, their ratio and the median of the ratios of the pairs.
#   bench/watchdog_overhead.sh [PAIRS]   (default 6; about 1 minute on 2 cores)
set -u
source "$(dirname "$0")/../tests/shell/lib/common.sh"
cd "$REPO"
PAIRS=${1:-6}
for i in $(seq "$PAIRS"); do
  order="0 1800"
  [ $((i % 2)) = 0 ] && order="1800 0"  # ABBA: the order within a pair cancels out
  for t in $order; do
    mpiexec -n 2 --oversubscribe ./train --dataset synthetic -e 3 -b 16 --threads 1 -w 0 \
      --progress none --timeout $t -s "$SCRATCH/run-$t-$i" > "$SCRATCH/out" 2>&1 || { tail -2 "$SCRATCH/out"; exit 1; }
    echo "$t $(sed -n 's/^done: .* training, \([0-9]*\) images\/s.*/\1/p' "$SCRATCH/out")"
  done
done | /usr/bin/python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    t, ips = line.split()
    runs.setdefault(t, []).append(float(ips))
off, on = statistics.median(runs["0"]), statistics.median(runs["1800"])
pairs = sorted(b / a for a, b in zip(runs["0"], runs["1800"]))
print("--timeout 0:    ", " ".join(f"{x:.0f}" for x in runs["0"]), "images/s")
print("--timeout 1800: ", " ".join(f"{x:.0f}" for x in runs["1800"]), "images/s")
print(f"median {off:.0f} vs {on:.0f} images/s: with/without = {on / off:.3f}; per pair "
      f"{pairs[0]:.3f} .. {pairs[-1]:.3f}, median {statistics.median(pairs):.3f}")
'
