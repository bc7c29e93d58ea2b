# Shared by tests/shell/test_rank_failure.sh and bench/reliability.sh (sourced after common.sh):
# one trial = a 3-rank ./train (or 4-rank ./pipeline_eval) in which one rank is killed
# (SIGKILL) or stopped (SIGSTOP), either by a fault point (MPICNN_FAULT, core/fault.h) or
# from outside (kill -9 of a rank's pid after a delay). A trial measures the time from the
# kill to mpiexec's exit; `timeout 60` turns a hang into a failure instead of a hung suite.
# Every trial's MPI shared-memory segments go to a private folder, removed at exit.
RF_SHM=$(mktemp -d /dev/shm/mpicnn-rf.XXXXXX)
on_exit "rm -rf '$RF_SHM'"
export OMPI_MCA_btl_vader_backing_directory=$RF_SHM
RF_GUARD=60  # seconds before `timeout` calls a run hung
# A tiny run: LeNet on a 1280-image Fashion-MNIST sample (a CSV dataset: rank 0 scatters each
# epoch's file lists), 3 ranks x 32, 11 steps, an evaluation and a checkpoint per epoch.
RF_EPOCHS=${RF_EPOCHS:-6}

# rf_make_data DIR: the sample (create_dataset), and RF_TRAIN, the training flags on it.
rf_make_data() {
  RF_DATA=$1
  "$REPO/$MPICNN_BUILD/bin/create_dataset" -d fashion-mnist -n 1280 -o "$RF_DATA" --threads 1 \
    > "$RF_DATA.log" 2>&1 || return 1
  RF_TRAIN=(-d "$RF_DATA" -e "$RF_EPOCHS" -b 32 --progress plain --threads 1 -w 0 --seed 1)
}

rf_now() { date +%s.%N; }
rf_sub() { /usr/bin/python3 -c 'import sys; print(f"{float(sys.argv[1]) - float(sys.argv[2]):.2f}")' "$1" "$2"; }

# rf_rank_pid LAUNCHER_PID RANK: the pid of that rank (the launcher is `timeout` over mpiexec).
rf_rank_pid() {
  local mp p
  for mp in $(pgrep -P "$1" -x mpiexec); do
    for p in $(pgrep -P "$mp"); do
      if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
        echo "$p"
        return 0
      fi
    done
  done
  return 1
}

# rf_run LOG HOW CMD...: runs `timeout RF_GUARD CMD` with the fault HOW, which is a
# MPICNN_FAULT spec (name:rank:n[:kill|stop]) or outside:DELAY:RANK (kill -9 of that rank
# DELAY seconds after the start). Sets RF_RC (124: hung), RF_TTE (seconds from the kill to the
# exit; empty when no kill happened) and RF_KILLED (1 when the kill happened).
rf_run() {
  local log=$1 how=$2 start pid killed_at="" end
  shift 2
  RF_TTE="" RF_KILLED=0
  start=$(rf_now)
  if [[ $how == outside:* ]]; then
    local delay rank victim
    IFS=: read -r _ delay rank <<< "$how"
    timeout "$RF_GUARD" "$@" > "$log" 2>&1 &
    pid=$!
    sleep "$delay"
    if victim=$(rf_rank_pid "$pid" "$rank") && kill -9 "$victim" 2>/dev/null; then
      killed_at=$(rf_now)
      echo "outside: kill -9 rank $rank (pid $victim) at $killed_at" >> "$log.kill"
    fi
    wait "$pid"
    RF_RC=$?
  else
    MPICNN_FAULT=$how timeout "$RF_GUARD" "$@" > "$log" 2>&1
    RF_RC=$?
    killed_at=$(sed -n 's/^fault: rank .* at \([0-9.]*\)$/\1/p' "$log" | head -1)
  fi
  end=$(rf_now)
  if [ -n "$killed_at" ]; then
    RF_KILLED=1
    RF_TTE=$(rf_sub "$end" "$killed_at")
  fi
}

# rf_verdict LINE: whether the killed job exited non-zero within 30 s (RF_RC, RF_TTE of rf_run);
# prints LINE with why and returns 1 when it did not, returns 2 (printing why) when no kill
# happened, 0 otherwise. RF_LINE gets LINE with the time-to-exit.
rf_verdict() {
  RF_LINE="$1: rc $RF_RC"
  if [ "$RF_KILLED" != 1 ]; then
    echo "$RF_LINE, no kill happened (the run ended first); not a trial"
    return 2
  fi
  RF_LINE+=", time-to-exit $RF_TTE s"
  if [ "$RF_RC" = 0 ] || [ "$RF_RC" = 124 ] || ! /usr/bin/python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 30)" "$RF_TTE"; then
    echo "$RF_LINE: FAILED (must exit non-zero within 30 s; 124 = hung)"
    return 1
  fi
}

# rf_train_trial RUN HOW: a killed 3-rank training run in RUN, then its recovery. Prints one
# line "trial HOW: rc R, time-to-exit T s, <recovery>" and returns non-zero on a failure: the
# job did not exit non-zero within 30 s, or RUN/latest did not load, or --resume did not finish.
rf_train_trial() {
  local run=$1 how=$2
  rm -rf "$run" "$run.log" "$run.log.kill"
  rf_run "$run.log" "$how" mpiexec -n 3 --oversubscribe "$REPO/train" "${RF_TRAIN[@]}" -s "$run"
  rf_verdict "trial $how" || return
  if [ -e "$run/latest" ]; then
    rf_recover "$run" "$RF_LINE"
  elif ls -d "$run"/checkpoints/epoch-* >/dev/null 2>&1; then
    # Killed between publishing the first checkpoint and pointing `latest` at it: --resume RUN
    # continues from the newest published checkpoint.
    rf_recover "$run" "$RF_LINE, no latest yet (killed before it was written)"
  else
    echo "$RF_LINE, killed before the first checkpoint (nothing to resume)"
  fi
}

# rf_recover RUN LINE: RUN's checkpoint loads (./pipeline_eval on 1 rank) and --resume RUN
# finishes the run.
rf_recover() {
  local run=$1 line=$2 ckpt
  ckpt="checkpoint $(ls -t "$run/checkpoints" | head -1)"
  if ! timeout "$RF_GUARD" mpiexec -n 1 --oversubscribe "$REPO/pipeline_eval" --checkpoint "$run" \
       --limit 64 > "$run.eval.log" 2>&1; then
    echo "$line: FAILED: $ckpt does not load: $(tail -1 "$run.eval.log")"
    return 1
  fi
  if ! timeout "$RF_GUARD" mpiexec -n 3 --oversubscribe "$REPO/train" --resume "$run" > "$run.resume.log" 2>&1 ||
     ! grep -q '^done: ' "$run.resume.log"; then
    echo "$line: FAILED: --resume from $ckpt did not finish: $(tail -1 "$run.resume.log")"
    return 1
  fi
  echo "$line, $ckpt loads, --resume finished"
}

# rf_eval_trial CKPT_RUN OUT HOW: a killed 4-rank ./pipeline_eval of CKPT_RUN (rank 0 reads,
# 1 decodes, 2 normalises, 3 predicts). Same verdict as rf_train_trial, without recovery.
rf_eval_trial() {
  local ckpt=$1 out=$2 how=$3
  rf_run "$out.log" "$how" mpiexec -n 4 --oversubscribe "$REPO/pipeline_eval" --checkpoint "$ckpt" \
    --threads 1 -b 8
  rf_verdict "eval trial $how" || return
  echo "$RF_LINE"
}
