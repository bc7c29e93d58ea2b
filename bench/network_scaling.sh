#!/usr/bin/env bash
# Data-parallel training across a network: 2 "hosts" x 1 rank made of network namespaces on
# this machine (tests/hosts/netns_cluster.sh; every byte between the ranks goes over TCP on a
# veth link), with the links limited to RATES in turn. Per rate: the mean step time (from the
# run's metrics.jsonl: global batch / images_per_s of each step line, first step left out as
# warm-up), the share of step time spent waiting on the gradient allreduce (summary.json
# comm_share) and the bytes each host sent per step (its eth0 tx counter over the run / steps,
# so it includes the start-up broadcast of the weights). A reference row runs the same job as
# 2 ranks on one host (shared memory). Prints a markdown table; needs root.
#
# Usage: bench/network_scaling.sh [ROUNDS] (default 1; with more, each row is the round with the
# lowest mean step time). Environment: RATES (default "none 1gbit 100mbit 10mbit"), MODEL
# (resnet20), BATCH (32 per rank), EPOCHS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
read -r -a rates <<<"${RATES:-none 1gbit 100mbit 10mbit}"
model=${MODEL:-resnet20} batch=${BATCH:-32} epochs=${EPOCHS:-1}
python=${PYTHON:-/usr/bin/python3}
cluster=tests/hosts/netns_cluster.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./train ] || { echo "no ./train (make apps)" >&2; exit 1; }
why=$("$cluster" available) || { echo "network namespaces unavailable: $why" >&2; exit 1; }
tmp=$(mktemp -d)
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$cluster" up 2 >"$tmp/up.log"
args=(-m "$model" --dataset synthetic -e "$epochs" -b "$batch" --eval-every 0 --threads 1 --progress none)

# stats RUN_DIR TX_BYTES_PER_HOST: "mean_step_ms comm_share_% tx_MB_per_step steps params"
stats() {
  "$python" - "$1" "$2" <<'EOF'
import json, sys
run, tx = sys.argv[1], float(sys.argv[2])
s = json.load(open(run + "/summary.json"))
steps = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"kind":"step"' in l]
times = [s["global_batch"] / st["images_per_s"] for st in steps[1:]]
print(f'{1000 * sum(times) / len(times):.0f} {100 * s["comm_share"]:.0f} {tx / len(steps) / 1e6:.2f} {len(steps)}')
EOF
}
tx_sum() { "$cluster" counters | awk '{ s += $3 } END { print s }'; }

results=()
for rate in local "${rates[@]}"; do
  if [ "$rate" != local ]; then "$cluster" rate "$rate" >"$tmp/rate.log"; fi
  best=""
  for ((r = 0; r < rounds; r++)); do
    d="$tmp/$rate-$r"
    if [ "$rate" = local ]; then
      timeout 600 mpiexec -n 2 --oversubscribe ./train "${args[@]}" -s "$d" >"$d.log" 2>&1 </dev/null ||
        { tail -5 "$d.log" >&2; exit 1; }
      line=$(stats "$d" 0)
    else
      t0=$(tx_sum)
      NETNS_MPIEXEC_TIMEOUT=600 tests/hosts/netns_mpiexec.sh 2 1 -- ./train "${args[@]}" -s "$d" >"$d.log" 2>&1 ||
        { tail -5 "$d.log" >&2; exit 1; }
      line=$(stats "$d" $((($(tx_sum) - t0) / 2)))
    fi
    if [ -z "$best" ] || [ "${line%% *}" -lt "${best%% *}" ]; then best=$line; fi
  done
  results+=("$rate $best")
done
kind=$(sed -nE 's/.*\((netem|tbf)\).*/\1/p' "$tmp/rate.log" 2>/dev/null || true)
params=$(sed -nE "s/.*$model \(([0-9]+) parameters\).*/\1/p" "$tmp/local-0.log" | head -1)

echo "$model ($params parameters, fp32 gradient $("$python" -c "print(f'{4 * $params / 1e6:.2f}')") MB), batch $batch per rank," \
  "2 hosts x 1 rank, --threads 1, $epochs epoch(s) of synthetic data; link limit by ${kind:-tbf}, both directions"
echo
echo "| link | mean step (ms) | vs unlimited | comm share | sent per host per step (MB) | steps |"
echo "|---|---|---|---|---|---|"
base=""
for row in "${results[@]}"; do
  read -r rate ms share mb steps <<<"$row"
  [ "$rate" = none ] && base=$ms
done
for row in "${results[@]}"; do
  read -r rate ms share mb steps <<<"$row"
  case "$rate" in
    local) label="1 host, 2 ranks (shared memory)" mb="-" ;;
    none) label="veth, no limit" ;;
    *) label="veth, $rate" ;;
  esac
  rel=$(awk -v a="$ms" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
  echo "| $label | $ms | $rel | $share% | $mb | $steps |"
done
