#!/usr/bin/env bash
# Data-parallel training across a network: HOSTS "hosts" x RANKS ranks each, made of network
# namespaces on this machine (tests/hosts/netns_cluster.sh; every byte between hosts goes over
# TCP on a veth link), with the links limited to RATES in turn. Per rate: the mean step time
# (from the run's metrics.jsonl: global batch / images_per_s of each step line, first step left
# out as warm-up), the share of step time spent waiting on the gradient allreduce (summary.json
# comm_share), the bytes each host sent per step (the hosts' eth0 tx counters over the run /
# hosts / steps, so it includes the start-up broadcast of the weights), and the step time
# bench/comm_model.py predicts from the "no limit" row of the same flags (compute), the
# gradient bytes and the rate, with measured / model. A reference row runs the same job as
# HOSTS x RANKS ranks on one host (shared memory). Prints a markdown table; needs root.
#
# Usage: bench/network_scaling.sh [ROUNDS] (default 1; with more, each row is the round with the
# lowest mean step time). Environment:
#   HOSTS (2), RANKS per host (1), RATES ("none 1gbit 100mbit 10mbit"), MODEL (resnet20),
#   BATCH (32 per rank), EPOCHS (1), TRAIN_FLAGS (extra ./train flags for every run),
#   VARIANTS ("label1:flags1;label2:flags2": several flag sets per rate, run alternately within
#   each round so they see the same machine state; TRAIN_FLAGS apply to all of them),
#   NETNS_BTL (the BTLs of the namespace runs; default tcp,self with 1 rank per host and
#   vader,tcp,self with more: ranks of one host share memory, hosts talk TCP, as on a cluster),
#   OMPI_MCA_mpi_yield_when_idle (default 1 when HOSTS x RANKS > this machine's cores: waiting
#   ranks then yield their core instead of spinning on it, as each rank of a real cluster has a
#   core of its own; OpenMPI does this itself for a one-host --oversubscribe run, but a namespace
#   host that has as many slots as ranks spins: 4 x 2 resnet20 ran 1.6x slower that way).
# The model column takes from each run what it ran: the allreduce algorithm, overlap mode and
# compression (summary.json `allreduce`, `overlap`, `grad_compression`) and the bucket count
# (the log's "gradient sync: ... N buckets" line): 2-byte gradients when compressed, a ring among
# hosts when hierarchical, nothing hidden with --overlap off; overlap estimated by comm_model.py.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
read -r -a rates <<<"${RATES:-none 1gbit 100mbit 10mbit}"
model=${MODEL:-resnet20} batch=${BATCH:-32} epochs=${EPOCHS:-1}
hosts=${HOSTS:-2} per=${RANKS:-1}
python=${PYTHON:-/usr/bin/python3}
cluster=tests/hosts/netns_cluster.sh
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: a positive integer, not '$rounds'" >&2; exit 2; }
[[ "$hosts" =~ ^[1-9][0-9]*$ && "$hosts" -ge 2 ]] || { echo "HOSTS: an integer >= 2, not '$hosts'" >&2; exit 2; }
[[ "$per" =~ ^[1-9][0-9]*$ ]] || { echo "RANKS: a positive integer, not '$per'" >&2; exit 2; }
if [ "$per" -gt 1 ]; then export NETNS_BTL=${NETNS_BTL:-vader,tcp,self}; fi
nranks=$((hosts * per))
cores=$(nproc --all 2>/dev/null || nproc)
if [ "$nranks" -gt "$cores" ]; then export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}; fi
# Variants: labels and flag strings (one unlabelled variant when VARIANTS is unset).
labels=() vflags=()
if [ -n "${VARIANTS:-}" ]; then
  IFS=';' read -r -a specs <<<"$VARIANTS"
  for spec in "${specs[@]}"; do
    [ -n "${spec// /}" ] || continue
    [[ "$spec" == *:* ]] || { echo "VARIANTS: '$spec' is not label:flags" >&2; exit 2; }
    labels+=("${spec%%:*}") vflags+=("${spec#*:}")
  done
  [ ${#labels[@]} -ge 1 ] || { echo "VARIANTS: no label:flags in '$VARIANTS'" >&2; exit 2; }
else
  labels=("") vflags=("")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./train ] || { echo "no ./train (make apps)" >&2; exit 1; }
why=$("$cluster" available) || { echo "network namespaces unavailable: $why" >&2; exit 1; }
tmp=$(mktemp -d)
# After `down` no job of ours runs in the namespaces: remove the shared-memory segments a killed
# vader job left (OpenMPI names them after the node: vader_segment.hI.*).
trap '"$cluster" down >/dev/null 2>&1; rm -f /dev/shm/vader_segment.h[0-9]*; rm -rf "$tmp"' EXIT
"$cluster" up "$hosts" >"$tmp/up.log"
base_args=(-m "$model" --dataset synthetic -e "$epochs" -b "$batch" --eval-every 0 --threads 1 --progress none)
read -r -a common <<<"${TRAIN_FLAGS:-}"

# stats RUN_DIR TX_BYTES_PER_HOST: "mean_step_ms comm_share_% tx_MB_per_step steps"
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

# run RATE ROUND VARIANT_INDEX: one job; prints its stats line.
run() {
  local rate=$1 r=$2 v=$3 d t0 extra
  d="$tmp/$rate-$r-$v"
  read -r -a extra <<<"${vflags[$v]}"
  local args=("${base_args[@]}" "${common[@]}" "${extra[@]}" -s "$d")
  if [ "$rate" = local ]; then
    timeout 600 mpiexec -n "$nranks" --oversubscribe ./train "${args[@]}" >"$d.log" 2>&1 </dev/null ||
      { echo "local run failed (exit $?): $(tail -3 "$d.log")" >&2; return 1; }
    stats "$d" 0
  else
    t0=$(tx_sum)
    NETNS_MPIEXEC_TIMEOUT=600 tests/hosts/netns_mpiexec.sh "$hosts" "$per" -- ./train "${args[@]}" >"$d.log" 2>&1 ||
      { echo "$rate run failed (exit $?): $(tail -3 "$d.log")" >&2; return 1; }
    stats "$d" $((($(tx_sum) - t0) / hosts))
  fi
}

declare -A best rundir
start=$(date +%s)
for rate in local "${rates[@]}"; do
  if [ "$rate" != local ]; then "$cluster" rate "$rate" >"$tmp/rate.log"; fi
  for ((r = 0; r < rounds; r++)); do
    for v in "${!labels[@]}"; do
      line=$(run "$rate" "$r" "$v")
      key="$rate/$v"
      if [ -z "${best[$key]:-}" ] || [ "${line%% *}" -lt "${best[$key]%% *}" ]; then
        best[$key]=$line rundir[$key]="$tmp/$rate-$r-$v"
      fi
    done
  done
done
elapsed=$(($(date +%s) - start))
kind=$(sed -nE 's/.*\((netem|tbf)\).*/\1/p' "$tmp/rate.log" 2>/dev/null || true)
params=$(sed -nE "s/.*$model \(([0-9]+) parameters\).*/\1/p" "$tmp/local-0-0.log" | head -1)

# model_args RUN_DIR: comm_model.py predict options for what the run ran (its summary.json
# facts and its log's "gradient sync:" line; older runs without them: flat ring, fp32, 25 MiB).
model_args() {
  "$python" - "$1" "$params" <<'EOF'
import json, re, sys
run, params = sys.argv[1], int(sys.argv[2])
s = json.load(open(run + "/summary.json"))
m = re.search(r"gradient sync: .*?, (\d+) buckets?", open(run + ".log").read())
args = ["--bytes", str((2 if s.get("grad_compression", "none") != "none" else 4) * params),
        "--fp32-bytes", str(4 * params), "--algo", "hierarchical" if s.get("allreduce") == "hierarchical" else "ring"]
args += ["--buckets", m.group(1)] if m else ["--bucket-mb", "25"]
if s.get("overlap") == "off":
    args += ["--overlap-ms", "0"]
print(" ".join(args))
EOF
}

echo "$model ($params parameters, fp32 gradient $("$python" -c "print(f'{4 * $params / 1e6:.2f}')") MB), batch $batch per rank," \
  "$hosts hosts x $per rank(s) (btl ${NETNS_BTL:-tcp,self}${OMPI_MCA_mpi_yield_when_idle:+, mpi_yield_when_idle $OMPI_MCA_mpi_yield_when_idle}), --threads 1, $epochs epoch(s) of synthetic data;" \
  "link limit by ${kind:-tbf}, both directions; ${TRAIN_FLAGS:+flags $TRAIN_FLAGS; }best of $rounds round(s), ${elapsed} s in all"
echo
echo "| link | mean step (ms) | vs unlimited | comm share | sent per host per step (MB) | steps | model step (ms) | measured / model |"
echo "|---|---|---|---|---|---|---|---|"
for v in "${!labels[@]}"; do
  tag=${labels[$v]:+ [${labels[$v]}]}
  base=$(echo "${best[none/$v]:-}" | awk '{print $1}')
  for rate in local "${rates[@]}"; do
    read -r ms share mb steps <<<"${best[$rate/$v]}"
    case "$rate" in
      local) label="1 host, $nranks ranks (shared memory)" mb="-" ;;
      none) label="veth, no limit" ;;
      *) label="veth, $rate" ;;
    esac
    rel=$(awk -v a="$ms" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    pred="-" ratio="-"
    if [ "$rate" != local ] && [ -n "$base" ] && [ -n "$params" ]; then
      # shellcheck disable=SC2046  # model_args prints options, one a word
      pred=$("$python" bench/comm_model.py predict --quiet --compute-ms "$base" --rate "$rate" \
        --hosts "$hosts" --ranks-per-host "$per" $(model_args "${rundir[$rate/$v]}"))
      ratio=$(awk -v a="$ms" -v b="$pred" 'BEGIN { printf "%.2f", a / b }')
      pred=$(printf '%.0f' "$pred")
    fi
    echo "| $label$tag | $ms | $rel | $share% | $mb | $steps | $pred | $ratio |"
  done
done
