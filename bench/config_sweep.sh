#!/usr/bin/env bash
# The recommender's training data (issue 24): runs bench/config_sweep.grid (112 configurations:
# lenet, resnet20, squeezenet1_1 and resnet18 on synthetic data and Fashion-MNIST, 1-4 ranks
# oversubscribed, 1-2 threads, batch 32-256, 1-5 epochs) with `./recommend sweep`, about 12
# minutes on a 2-core machine. Makes the Fashion-MNIST subsets it needs first (OUT/data/fmnist_2k,
# _5k, _10k: 2000 / 5000 / 10000 images, 20% test, from the Debian package). Rerunning resumes:
# finished points are skipped, failed ones rerun.
# Usage: bench/config_sweep.sh [OUT] (default runs/config_sweep); extra arguments go to
# `recommend sweep` (e.g. --dry-run, --only lenet-syn). Then: ./recommend fit OUT -o model.json
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-runs/config_sweep}")
shift || true
cd "$repo"
[ -x ./recommend ] && [ -x ./train ] && [ -x build/release/bin/create_dataset ] || nice make -s apps tools >/dev/null
mkdir -p "$out/data"
for n in 2000 5000 10000; do
  d="$out/data/fmnist_$((n / 1000))k"
  [ -f "$d/test.csv" ] && continue
  rm -rf "$d"
  build/release/bin/create_dataset -d fashion-mnist -o "$d" --size "$n" --test-fraction 0.2 | tail -1
done
# The grid names data/... relative to the sweep's folder.
cd "$out"
start=$(date +%s)
rc=0
"$repo/recommend" sweep "$repo/bench/config_sweep.grid" -o "$out" --train "$repo/train" "$@" || rc=$?
echo "config_sweep: $(($(date +%s) - start)) s, exit $rc, runs in $out"
# Per model and data kind: points, their status, seconds per epoch and final test top-1 ranges,
# and the points' total wall time (sweep_point.json, this and earlier invocations).
/usr/bin/python3 - "$out" <<'PY'
import collections, glob, json, os, sys
rows, total, status = collections.defaultdict(list), 0.0, collections.Counter()
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "sweep_point.json"))):
    p = json.load(open(f))
    total += p.get("seconds", 0)
    status[p["status"]] += 1
    s_path = os.path.join(os.path.dirname(f), "summary.json")
    if p["status"] != "FINISHED" or not os.path.exists(s_path):
        continue
    s = json.load(open(s_path))
    eps = [e["epoch_seconds"] for e in s["per_epoch"]]
    top1 = [e["top1"] for e in s["per_epoch"] if e.get("top1") is not None]
    rows[(s["model"], f"{s['dataset_kind']} {s['train_samples']}")].append((sum(eps) / len(eps), top1[-1] if top1 else None))
print(f"points: {sum(status.values())} ({', '.join(f'{v} {k}' for k, v in sorted(status.items()))}), "
      f"{total:.0f} s of point wall time")
print(f"| model | data (train images) | points | s/epoch | final top-1 |\n|---|---|---|---|---|")
for (m, d), v in sorted(rows.items()):
    t = [x for _, x in v if x is not None]
    print(f"| {m} | {d} | {len(v)} | {min(e for e, _ in v):.2f}-{max(e for e, _ in v):.2f} | "
          + (f"{100 * min(t):.1f}-{100 * max(t):.1f}% |" if t else "- |"))
PY
exit "$rc"
