#!/bin/bash
# Rank failure trials (issue 23): kills one rank of a 3-rank ./train with SIGKILL at seeded
# random points (a fault point: forward pass, inside the gradient allreduce, each stage of rank
# 0's checkpoint write, evaluation, the epoch-start scatter; or kill -9 from outside after a
# random delay) and one rank of a 4-rank ./pipeline_eval (a stage rank or the predictor).
# Every trial must end with mpiexec exiting non-zero within 30 s of the kill (a 60 s `timeout`
# turns a hang into a failure); for training, RUN/latest must then load (./pipeline_eval) and
# `--resume RUN` must finish the run. Prints each trial and the time-to-exit distribution, and
# writes OUT/trials.tsv.
#   bench/reliability.sh [OUT]     (TRIALS=24 EVAL_TRIALS=6 SEED=1; about 5 minutes on 2 cores)
# Exit status non-zero when any trial failed.
set -u
source "$(dirname "$0")/../tests/shell/lib/common.sh"
source "$(dirname "$0")/../tests/shell/lib/rank_failure.sh"
cd "$REPO"
OUT=${1:-$(mktemp -d /tmp/mpicnn-reliability.XXXXXX)}
TRIALS=${TRIALS:-24} EVAL_TRIALS=${EVAL_TRIALS:-6} SEED=${SEED:-1}
mkdir -p "$OUT"
rf_make_data "$OUT/data" || { echo "reliability: create_dataset failed: $(tail -1 "$OUT/data.log")"; exit 1; }

# The seeded plan: one HOW per line (rf_run's forms). With 6 epochs of 11 steps: 66 forward
# passes and allreduces per rank, 6 scatters and checkpoints, 3 evaluation batches per epoch.
plan() {
  /usr/bin/python3 - "$SEED" "$TRIALS" "$1" <<'PY'
import random, sys
seed, n, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed if kind == "train" else seed + 1000)
if kind == "train":
    kinds = ["forward", "allreduce", "checkpoint", "eval", "scatter", "outside"]
    for i in range(n):
        k = kinds[i % len(kinds)]  # every kind equally often, the rest drawn
        if k in ("forward", "allreduce"):
            print(f"{k}:{rng.randrange(3)}:{rng.randint(1, 66)}")
        elif k == "checkpoint":  # rank 0 writes; after one of its stages
            print(f"checkpoint-{rng.choice(['model', 'optimizer', 'trainer', 'published'])}:0:{rng.randint(1, 5)}")
        elif k == "eval":
            print(f"eval:{rng.randrange(3)}:{rng.randint(1, 18)}")
        elif k == "scatter":
            print(f"scatter:{rng.randrange(3)}:{rng.randint(1, 6)}")
        else:
            print(f"outside:{rng.uniform(1.5, 4.5):.2f}:{rng.randrange(3)}")
else:
    for i in range(int(sys.argv[2])):
        if i % 2 == 0:
            print(f"eval-predict:3:{rng.randint(1, 32)}")
        else:
            r = rng.randint(0, 2)
            print(f"eval-stage:{r}:{rng.randint(1, 256)}")
PY
}

printf 'kind\thow\trc\ttime_to_exit_s\tresult\n' > "$OUT/trials.tsv"
# record KIND HOW STATUS: the trial's line, its verdict (1 fails the run) and, when a kill
# happened (status not 2), its row of trials.tsv.
record() {
  echo "$i. $(cat "$OUT/line")"
  [ "$3" = 1 ] && failed=1
  [ "$3" = 2 ] && return
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$RF_RC" "$RF_TTE" "$3" >> "$OUT/trials.tsv"
}
failed=0 i=0
for how in $(plan train); do
  i=$((i + 1))
  rf_train_trial "$OUT/run$i" "$how" > "$OUT/line"  # not in a subshell: RF_RC, RF_TTE
  record train "$how" $?
done
# The evaluations read a finished run.
timeout "$RF_GUARD" mpiexec -n 3 --oversubscribe "$REPO/train" "${RF_TRAIN[@]}" -s "$OUT/evalrun" \
  > "$OUT/evalrun.log" 2>&1 || { echo "reliability: the run to evaluate failed"; exit 1; }
TRIALS=$EVAL_TRIALS
for how in $(plan eval); do
  i=$((i + 1))
  rf_eval_trial "$OUT/evalrun" "$OUT/eval$i" "$how" > "$OUT/line"
  record eval "$how" $?
done

/usr/bin/python3 - "$OUT/trials.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for kind in ("train", "eval"):
    t = sorted(float(r["time_to_exit_s"]) for r in rows if r["kind"] == kind)
    bad = sum(r["result"] != "0" for r in rows if r["kind"] == kind)
    hung = sum(r["rc"] == "124" for r in rows if r["kind"] == kind)
    if t:
        print(f"{kind}: {len(t)} trials, {bad} failed, {hung} hung; time-to-exit min {t[0]:.2f} s, "
              f"median {statistics.median(t):.2f} s, max {t[-1]:.2f} s")
PY
exit $failed
