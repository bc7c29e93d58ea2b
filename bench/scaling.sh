#!/usr/bin/env bash
# Data-parallel scaling of ./train on this machine: images/s of one training epoch at K = 1 rank
# (all cores as threads) and K = 2.. ranks (cores split between them), the efficiency
# images/s(K) / images/s(1) at the same total cores, and the share of step time spent waiting
# on gradient communication (summary.json's comm_share). No evaluation, best of ROUNDS.
# Usage: bench/scaling.sh [ROUNDS] (default 2); RANKS="1 2" by default, CORES = nproc.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
cores=${CORES:-$(nproc)}
read -r -a ranks <<<"${RANKS:-1 2}"
python=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./train ] || make -s apps >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# model | data flags | batch per rank
rows=("lenet|--dataset fashion-mnist|64" "resnet20|--dataset synthetic|32")
printf "%-9s %5s %8s %10s %10s %11s\n" model ranks threads "images/s" efficiency "comm share"
for row in "${rows[@]}"; do
  IFS='|' read -r model data batch <<<"$row"
  base=""
  for k in "${ranks[@]}"; do
    t=$((cores / k > 0 ? cores / k : 1))
    best=0 share=0
    for ((r = 0; r < rounds; r++)); do
      d="$tmp/$model-$k-$r"
      # shellcheck disable=SC2086
      mpiexec -n "$k" --oversubscribe ./train -m "$model" $data -b "$batch" -e 1 --eval-every 0 \
        --threads "$t" --progress none -s "$d" >/dev/null
      read -r ips sh <<<"$("$python" -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["images_per_s"], s["comm_share"])' "$d/summary.json")"
      if awk -v a="$ips" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$ips share=$sh; fi
    done
    [ -z "$base" ] && base=$best
    printf "%-9s %5d %8d %10.0f %10.2f %10.1f%%\n" "$model" "$k" "$t" "$best" \
      "$(awk -v a="$best" -v b="$base" 'BEGIN { print a / b }')" "$(awk -v s="$share" 'BEGIN { print 100 * s }')"
  done
done
