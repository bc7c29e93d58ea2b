# A rank dies or stalls (issue 23). Kills (SIGKILL, from fault points: core/fault.h) one rank
# of a 3-rank ./train in the forward pass, inside the gradient allreduce, while rank 0 writes a
# checkpoint, during evaluation and in the epoch-start scatter, and a predictor of a 4-rank
# ./pipeline_eval: mpiexec must exit non-zero within 30 s; where a checkpoint was written,
# RUN/latest must load and --resume must finish. Then stops (SIGSTOP) one rank: with
# --timeout 3 the watchdog (dist/watchdog.h) must end the job with one line naming the waiting
# rank, the MPI operation and the time waited. bench/reliability.sh runs many seeded trials.
# About 60-80 s on 2 cores.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/rank_failure.sh"
cd "$REPO"

RF_EPOCHS=3
if ! rf_make_data "$SCRATCH/data"; then
  fail "rank failure: create_dataset" "$(tail -1 "$SCRATCH/data.log")"
  finish
fi

# 1. Kills. 3 epochs of 11 steps; evaluation has 3 batches per rank per epoch.
# checkpoint-published:0:1 dies after publishing the first checkpoint, before `latest` is written.
for how in forward:1:5 allreduce:2:14 checkpoint-model:0:2 checkpoint-published:0:1 eval:1:4 scatter:2:1; do
  name=${how%%:*}
  rf_train_trial "$SCRATCH/kill-$name" "$how" > "$SCRATCH/line"
  case $? in
    0) pass "rank killed ($how): $(cat "$SCRATCH/line")" ;;
    *) fail "rank killed ($how)" "$(cat "$SCRATCH/line")" ;;
  esac
done
# The checkpoint trial's run was resumed to the end: evaluate it, and kill its predictor.
if [ -e "$SCRATCH/kill-checkpoint-model/latest" ]; then
  rf_eval_trial "$SCRATCH/kill-checkpoint-model" "$SCRATCH/eval-kill" eval-predict:3:3 > "$SCRATCH/line"
  case $? in
    0) pass "pipeline_eval predictor killed: $(cat "$SCRATCH/line")" ;;
    *) fail "pipeline_eval predictor killed" "$(cat "$SCRATCH/line")" ;;
  esac
else
  fail "pipeline_eval predictor killed" "no finished run to evaluate"
fi

# 2. Stalls. check_stall NAME LOG TIMEOUT: the job ended non-zero soon after the stop, and
# exactly the ranks that waited printed one line each, in the watchdog's form.
check_stall() {
  local name=$1 log=$2 limit=$3 lines
  lines=$(grep -E '^rank [0-9]+ \([^)]*\): waited [0-9]+\.[0-9] s in MPI_[A-Za-z]+( \(.*\))? > --timeout '"$limit"'; aborting the job$' "$log")
  if [ "$RF_RC" = 0 ] || [ "$RF_RC" = 124 ] || [ -z "$RF_TTE" ]; then
    fail "$name" "rc $RF_RC (124 = hung: the watchdog did not end the job)"
  elif [ -z "$lines" ]; then
    fail "$name" "no watchdog line in the output: $(grep -v '^ ' "$log" | tail -2 | tr '\n' ' ')"
  elif [ "$(echo "$lines" | cut -d' ' -f2 | sort | uniq -d)" != "" ]; then
    fail "$name" "a rank printed more than one line: $lines"
  elif ! /usr/bin/python3 -c "import sys; sys.exit(not ($limit < float(sys.argv[1]) < $limit + 15))" "$RF_TTE"; then
    fail "$name" "the job ended $RF_TTE s after the stop (want between $limit and $((limit + 15)) s)"
  else
    pass "$name: exit $RF_RC $RF_TTE s after the stop; $(echo "$lines" | head -1)"
  fi
}
rf_run "$SCRATCH/stall-train.log" forward:1:6:stop \
  mpiexec -n 3 --oversubscribe "$REPO/train" "${RF_TRAIN[@]}" -s "$SCRATCH/stall" --timeout 3
check_stall "train: a stopped rank with --timeout 3" "$SCRATCH/stall-train.log" 3
if grep -q '^rank 1 ' "$SCRATCH/stall-train.log"; then
  fail "train stall: the stopped rank" "rank 1 (stopped) printed a line"
fi
if [ -e "$SCRATCH/kill-checkpoint-model/latest" ]; then
  rf_run "$SCRATCH/stall-eval.log" eval-predict:3:2:stop mpiexec -n 4 --oversubscribe \
    "$REPO/pipeline_eval" --checkpoint "$SCRATCH/kill-checkpoint-model" --threads 1 -b 8 --timeout 2
  check_stall "pipeline_eval: a stopped predictor with --timeout 2" "$SCRATCH/stall-eval.log" 2
fi

# 3. A bad --timeout: one line naming the flag, exit 1.
out=$("$REPO/train" --timeout=-1 2>&1)
rc=$?
if [ $rc = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [[ $out == *"--timeout: '-1' is not a number of seconds >= 0"* ]]; then
  pass "train --timeout=-1: one line naming the flag"
else
  fail "train --timeout=-1" "rc $rc: $out"
fi
finish
