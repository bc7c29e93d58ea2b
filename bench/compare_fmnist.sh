#!/usr/bin/env bash
# Time to 90% test accuracy on Fashion-MNIST, ours vs PyTorch, side by side in one run: the same
# LeNet, recipe (our ./train defaults: batch 64, SGD 0.05/0.9/5e-4, per-step cosine over 10
# epochs) and thread count, evaluated after every epoch. Time = cumulative training time
# (evaluation excluded) at the end of the first epoch with test top-1 >= 90%. ROUNDS alternating
# runs of each; the best of each side is compared. A last row runs ours on 2 ranks x 1 thread
# (batch 64 per rank: another recipe, global batch 128), for the scaling picture.
# Usage: bench/compare_fmnist.sh [ROUNDS] (default 1); THREADS defaults to all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./train ] || make -s apps >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Our time to target from a run directory's metrics.jsonl: "seconds epoch top1_at_end".
ours_time() {
  "$python" - "$1/metrics.jsonl" <<'PY'
import json, sys
t, hit, last = 0.0, None, None
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["kind"] != "epoch": continue
    t += j["epoch_seconds"]; last = j["top1"]
    if hit is None and j["top1"] is not None and j["top1"] >= 0.90: hit = (t, j["epoch"])
print(f"{hit[0]:.1f} {hit[1]}" if hit else "nan -", last)
PY
}

best_o=inf best_t=inf
for ((r = 0; r < rounds; r++)); do
  mpiexec -n 1 ./train --threads "$threads" --progress none -s "$tmp/ours$r" >/dev/null
  read -r so eo lo <<<"$(ours_time "$tmp/ours$r")"
  res=$("$python" bench/torch_fmnist.py --threads "$threads" --stop-at-target --json | tail -1)
  st=$(echo "$res" | "$python" -c 'import json,sys; j=json.load(sys.stdin); t=j["time_to_target_s"]; print("%.1f %s" % (t, j["epoch_reached"]) if t is not None else "nan -")')
  read -r st et <<<"$st"
  echo "round $((r + 1)): ours ${so}s (epoch $eo, final top-1 $lo)   torch ${st}s (epoch $et)"
  best_o=$(awk -v a="$best_o" -v b="$so" 'BEGIN { print (b < a) ? b : a }')
  best_t=$(awk -v a="$best_t" -v b="$st" 'BEGIN { print (b < a) ? b : a }')
done
mpiexec -n 2 --oversubscribe ./train --threads 1 --progress none -s "$tmp/ours2" >/dev/null
read -r s2 e2 l2 <<<"$(ours_time "$tmp/ours2")"
printf "%-34s %10s\n" "" "s to 90%"
printf "%-34s %10s\n" "PyTorch $(basename "$python"), $threads threads" "$best_t"
printf "%-34s %10s   ratio %.2f (goal <= 0.75)\n" "ours, 1 rank x $threads threads" "$best_o" \
  "$(awk -v a="$best_o" -v b="$best_t" 'BEGIN { print a / b }')"
printf "%-34s %10s   (epoch %s, final top-1 %s)\n" "ours, 2 ranks x 1 thread" "$s2" "$e2" "$l2"
