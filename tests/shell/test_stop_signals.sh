# A scheduler's stop signal at any moment of a run (issue 62): SIGTERM or SIGUSR1 raised on rank
# 0 or rank 1 exactly at a fault point (core/fault.h) — the first step, a step inside the epoch,
# the epoch's last step, the next epoch's first, an evaluation batch, each stage of a checkpoint
# write — must always give one "stop requested" line, exit 0, a `latest` that names a complete
# checkpoint, the run KILLED in summary.json and in MLflow's meta.yaml (status 5, an end time),
# and a --resume that finishes the run. A signal during the last epoch's evaluation lets the
# finished run end as FINISHED (nothing is left to resume). Then SIGUSR1 sent to mpiexec at
# start-up and at an epoch's end. 32 moments, 2 ranks, LeNet on the synthetic set (8 steps an
# epoch); about 25 s on 2 cores.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"
TRAIN=$REPO/$MPICNN_BUILD/bin/train
on_exit "rm -f /dev/shm/vader_segment.* 2>/dev/null"
base=(--dataset synthetic --progress plain --threads 1 -w 0 -b 64)
common=("${base[@]}" -e 2)

# run_train OUT FAULT ARGS...: 2 ranks with MPICNN_FAULT=FAULT (none when empty).
run_train() {
  local out=$1 fault=$2
  shift 2
  env -u OPENBLAS_CORETYPE ${fault:+MPICNN_FAULT=$fault} mpiexec -n 2 --oversubscribe "$TRAIN" \
    "${common[@]}" "$@" > "$out" 2>&1
}

# stopped RUN OUT WANT: the run's record: WANT (KILLED or FINISHED) in summary.json and
# meta.yaml with an end time, one "stop requested" line for KILLED (none for FINISHED), and
# `latest` naming a checkpoint directory with its three files. Prints what is wrong.
stopped() {
  local run=$1 out=$2 want=$3 lines
  lines=$(grep -c "^stop requested" "$out")
  if [ "$want" = KILLED ] && [ "$lines" != 1 ]; then echo "$lines 'stop requested' lines"; return 1; fi
  if [ "$want" = FINISHED ] && [ "$lines" != 0 ]; then echo "a stop line in a finished run"; return 1; fi
  /usr/bin/python3 - "$run" "$want" <<'PY'
import glob, json, os, sys
run, want = sys.argv[1], sys.argv[2]
s = json.load(open(run + "/summary.json"))
assert s["status"] == want, f"summary.json status {s['status']}"
metas = [m for m in glob.glob(run + "/mlruns/*/*/meta.yaml")]
assert len(metas) == 1, f"{len(metas)} MLflow runs"
meta = dict(l.split(": ", 1) for l in open(metas[0]).read().splitlines() if ": " in l)
code = {"KILLED": "5", "FINISHED": "3"}[want]
assert meta["status"] == code, f"meta.yaml status {meta['status']}"
assert meta["end_time"] not in ("null", ""), "meta.yaml end_time null"
latest = os.path.realpath(run + "/latest")
for f in ("model.safetensors", "optimizer.safetensors", "trainer.json"):
    assert os.path.isfile(os.path.join(latest, f)), f"latest lacks {f}"
json.load(open(os.path.join(latest, "trainer.json")))
assert not glob.glob(run + "/checkpoints/.tmp*"), "a temporary checkpoint left"
PY
}

# case NAME FAULT WANT LATEST [resume]: one run stopped at FAULT, checked, its `latest` matching
# the pattern LATEST (epoch-0001: the stop came at epoch 1's end, before any step of epoch 2;
# step-*: inside an epoch); with "resume", resumed to the end too.
n=0
case_() {
  local name=$1 fault=$2 want=$3 latest=$4 resume=${5:-}
  local run=$SCRATCH/run$((n += 1)) why
  if ! run_train "$run.out" "$fault" -s "$run"; then
    fail "stop at $name" "exit $?: $(grep -v '^fault:' "$run.out" | tail -1)"
    return
  fi
  if ! grep -q "^fault: rank [01] raises signal" "$run.out"; then
    fail "stop at $name" "the fault point was not reached: no signal raised"
    return
  fi
  if ! why=$(stopped "$run" "$run.out" "$want" 2>&1); then
    fail "stop at $name" "$(echo "$why" | tail -1)"
    return
  fi
  # shellcheck disable=SC2053  # LATEST is a pattern
  if [[ $(readlink "$run/latest") != checkpoints/$latest ]]; then
    fail "stop at $name" "latest -> $(readlink "$run/latest"), expected checkpoints/$latest"
    return
  fi
  if [ -n "$resume" ]; then
    if ! run_train "$run.resume" "" --resume "$run" ||
        ! why=$(stopped "$run" "$run.resume" FINISHED 2>&1); then
      fail "stop at $name, then --resume" "$(tail -1 "$run.resume") $why"
      return
    fi
  fi
  pass "stop at $name: $want${resume:+, resumed to the end}"
}

# Each rank's evaluation batches: the synthetic test set's 256 images over 2 ranks, batches of 64.
eval_batches=2
for sig in term usr1; do
  for rank in 0 1; do
    case_ "the first step ($sig on rank $rank)" "forward:$rank:1:$sig" KILLED 'step-*'
    case_ "step 5 ($sig on rank $rank)" "forward:$rank:5:$sig" KILLED 'step-*'
    case_ "the epoch's last step ($sig on rank $rank)" "forward:$rank:8:$sig" KILLED epoch-0001 \
      $([ $sig = term ] && echo resume)
    case_ "the next epoch's first step ($sig on rank $rank)" "forward:$rank:9:$sig" KILLED 'step-*'
    case_ "epoch 1's evaluation ($sig on rank $rank)" "eval:$rank:1:$sig" KILLED epoch-0001 \
      $([ $rank = 1 ] && echo resume)
    case_ "the last epoch's evaluation ($sig on rank $rank)" "eval:$rank:$((eval_batches + 1)):$sig" \
      FINISHED epoch-0002
  done
  for stage in model optimizer trainer; do
    case_ "the checkpoint's $stage write ($sig on rank 0)" "checkpoint-$stage:0:1:$sig" KILLED \
      epoch-0001 $([ $stage = model ] && echo resume)
  done
done
# SIGUSR1 to mpiexec itself (it forwards the signal to every rank), at moments picked from the
# output: start-up (as soon as the header is printed: data and model ready, no step yet), and
# right after epoch 1's closing line (its checkpoint being written).
# mpiexec_case NAME WHEN LATEST: WHEN is "start" or "epoch"; LATEST as for case_.
mpiexec_case() {
  local name=$1 when=$2 latest=$3 run=$SCRATCH/run$((n += 1)) i why
  env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe "$TRAIN" "${base[@]}" -e 4 -s "$run" \
    > "$run.out" 2>&1 &
  local pid=$!
  local line="^mpicnn train: "
  [ "$when" = epoch ] && line="^epoch 1/4 done"  # 3 epochs left: the stop lands before the end
  for i in $(seq 1200); do grep -q "$line" "$run.out" 2>/dev/null && break; sleep 0.02; done
  kill -USR1 "$pid"
  if ! wait "$pid"; then fail "stop at $name" "exit $?: $(tail -1 "$run.out")"; return; fi
  if ! why=$(stopped "$run" "$run.out" KILLED 2>&1); then fail "stop at $name" "$(echo "$why" | tail -1)"; return; fi
  # shellcheck disable=SC2053  # LATEST is a pattern
  if [[ $(readlink "$run/latest") != checkpoints/$latest ]]; then
    fail "stop at $name" "latest -> $(readlink "$run/latest"), expected checkpoints/$latest"
    return
  fi
  pass "stop at $name: KILLED"
}
# An epoch takes ~0.3 s here, so where such a stop lands is not fixed: any complete checkpoint.
mpiexec_case "start-up (SIGUSR1 to mpiexec)" start '*'
mpiexec_case "epoch 1's end (SIGUSR1 to mpiexec)" epoch '*'
finish
