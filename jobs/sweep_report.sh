#!/bin/bash
# Tabulates a sweep directory (jobs/sweep.pbs, jobs/sweep.slurm): one markdown row per element
# from its summary.json. Usage: jobs/sweep_report.sh runs/sweep-JOBID
set -u
dir=${1:?usage: jobs/sweep_report.sh SWEEP_DIR}
[ -d "$dir" ] || { echo "sweep_report: '$dir' is not a directory" >&2; exit 2; }
field() { sed -n "s/^ *\"$2\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -1; }
echo "| configuration | status | ranks | threads/rank | global batch | images/s | comm share | final train loss |"
echo "|---|---|---|---|---|---|---|---|"
n=0
for s in "$dir"/*/summary.json; do
  [ -e "$s" ] || continue
  n=$((n + 1))
  ips=$(field "$s" images_per_s) comm=$(field "$s" comm_share)
  printf '| %s | %s | %s | %s | %s | %.1f | %.2f | %s |\n' "$(basename "$(dirname "$s")")" \
    "$(field "$s" status)" "$(field "$s" ranks)" "$(field "$s" threads_per_rank)" \
    "$(field "$s" global_batch)" "${ips:-0}" "${comm:-0}" "$(field "$s" final_train_loss)"
done
[ "$n" -gt 0 ] || { echo "sweep_report: no */summary.json under $dir" >&2; exit 1; }
