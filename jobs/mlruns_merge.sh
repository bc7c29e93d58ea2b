#!/bin/bash
# Gathers the MLflow runs of many run directories (a sweep, a set of runs) into one MLflow file
# store, so that MLflow's UI lists and compares them together: each run directory holds its own
# store (RUN/mlruns, experiment 0, one run). The runs are copied (the originals stay as they
# are) into OUT/1/ as one experiment named after OUT (or $EXPERIMENT); running it again adds new
# runs and refreshes those already there. Usage: jobs/mlruns_merge.sh OUT RUN_OR_FOLDER...
# Then: mlflow ui --backend-store-uri file:OUT   (MLflow 3.13+: docs/run_directory.md)
set -u
out=${1:?usage: jobs/mlruns_merge.sh OUT RUN_OR_FOLDER...}
shift
[ $# -gt 0 ] || { echo "mlruns_merge: no run directories given (usage: jobs/mlruns_merge.sh OUT RUN_OR_FOLDER...)" >&2; exit 2; }
name=${EXPERIMENT:-$(basename "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")")}
exp="$out/1"
mkdir -p "$exp" || { echo "mlruns_merge: $out: cannot create" >&2; exit 1; }
now=$(($(date +%s) * 1000))
if [ ! -e "$exp/meta.yaml" ]; then
  abs=$(cd "$exp" && pwd)
  printf "artifact_location: 'file://%s'\ncreation_time: %s\nexperiment_id: '1'\nlast_update_time: %s\nlifecycle_stage: active\nname: '%s'\n" \
    "$abs" "$now" "$now" "${name//\'/\'\'}" > "$exp/meta.yaml"
fi
# MLflow's UI expects a Default experiment 0 as well.
if [ ! -e "$out/0/meta.yaml" ]; then
  mkdir -p "$out/0"
  printf "artifact_location: 'file://%s'\ncreation_time: %s\nexperiment_id: '0'\nlast_update_time: %s\nlifecycle_stage: active\nname: Default\n" \
    "$(cd "$out/0" && pwd)" "$now" "$now" > "$out/0/meta.yaml"
fi
n=0
for arg in "$@"; do
  [ -d "$arg" ] || { echo "mlruns_merge: $arg: not a directory" >&2; exit 2; }
  # Run directories: $arg itself, or its subfolders (two levels: a sweep's points).
  while IFS= read -r store; do
    for run in "$store"/0/*/; do
      run=${run%/}
      [ -e "$run/meta.yaml" ] || continue
      id=$(basename "$run")
      rm -rf "${exp:?}/$id.tmp" && cp -r "$run" "$exp/$id.tmp" || { echo "mlruns_merge: $run: cannot copy" >&2; exit 1; }
      sed -i -e "s/^experiment_id: .*/experiment_id: '1'/" \
        -e "s#^artifact_uri: .*#artifact_uri: 'file://$(cd "$exp" && pwd)/$id/artifacts'#" "$exp/$id.tmp/meta.yaml"
      rm -rf "${exp:?}/$id" && mv "$exp/$id.tmp" "$exp/$id"
      n=$((n + 1))
    done
  done < <(find "$arg" -maxdepth 3 -type d -name mlruns | sort)
done
[ "$n" -gt 0 ] || { echo "mlruns_merge: no RUN/mlruns under $*" >&2; exit 1; }
echo "mlruns_merge: $n runs in $out (experiment '$name'); open with: mlflow ui --backend-store-uri file:$(cd "$out" && pwd)"
