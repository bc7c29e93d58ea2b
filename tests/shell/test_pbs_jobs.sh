# The PBS job scripts (jobs/*.pbs) run as PBS would run them: bash, with PBS_JOBID,
# PBS_JOBNAME, PBS_NODEFILE (this host once per MPI process), PBS_O_WORKDIR and NCPUS set, from
# another working directory. Checks: a run directory with a checkpoint and summary.json; the
# walltime timer and a SIGTERM to the job shell (PBS at walltime, qdel) each stop ./train with a
# checkpoint, and resubmitting resumes to a model identical to an uninterrupted run; the
# evaluation job; a sweep array; bad parameters fail with one line; the ImageNet job on shards.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"

nodes=$SCRATCH/nodefile
for _ in 1 2; do hostname; done > "$nodes"
# pbs_job ID SCRIPT [VAR=VALUE...]: runs SCRIPT as PBS job ID from /, output in $SCRATCH/ID.out.
pbs_job() {
  local id=$1 script=$2
  shift 2
  (cd / && env PBS_JOBID="$id.pbs-test" PBS_JOBNAME="${JOBNAME:-mpicnn-train}" PBS_NODEFILE="$nodes" \
    PBS_O_WORKDIR="$REPO" NCPUS=2 "$@" bash "$REPO/$script") > "$SCRATCH/$id.out" 2>&1
}
status_of() { json_get "$1/summary.json" status 2>/dev/null; }
# Fast runs: LeNet on the synthetic dataset (1024 images, 16 steps of 2 x 32 per epoch).
common=(TRAIN_ARGS="--dataset synthetic --seed 3" BATCH=32)

# 1. A plain run: checkpoint, summary.json, the scheduler's ranks and threads.
run=$SCRATCH/plain
if pbs_job 1 jobs/train.pbs "${common[@]}" EPOCHS=2 RUN_DIR="$run" &&
   [ -f "$run/latest/model.safetensors" ] && [ "$(status_of "$run")" = FINISHED ] &&
   [ "$(json_get "$run/summary.json" ranks)" = 2 ] && [ "$(json_get "$run/summary.json" threads_per_rank)" = 1 ]; then
  pass "pbs: train.pbs writes a finished run with a checkpoint (2 ranks from PBS_NODEFILE, NCPUS/2 threads)"
else
  fail "pbs: train.pbs plain run" "$(tail -3 "$SCRATCH/1.out" | tr '\n' ' ')"
fi

# 2. The default run directory is runs/<job name> under PBS_O_WORKDIR; resubmitting a finished
#    run does nothing.
name=pbs-test-$$
if JOBNAME=$name pbs_job 2 jobs/train.pbs "${common[@]}" EPOCHS=1 && [ -f "runs/$name/summary.json" ] &&
   JOBNAME=$name pbs_job 3 jobs/train.pbs "${common[@]}" EPOCHS=1 && grep -q "nothing to do" "$SCRATCH/3.out"; then
  pass "pbs: default run directory runs/<job name>; a finished run is not trained again"
else
  fail "pbs: default run directory" "$(tail -2 "$SCRATCH/2.out" "$SCRATCH/3.out" | tr '\n' ' ')"
fi
rm -rf "runs/$name"

# 3. Walltime: the job's own timer (WALLTIME - STOP_MARGIN) makes ./train checkpoint and stop;
#    the resubmitted job resumes; the final model equals an uninterrupted run's, byte for byte.
#    (12 epochs take >= 4 s here; the timer fires after 1 s. A stop on an epoch boundary keeps
#    that epoch's checkpoint and prints no "checkpoint written".)
whole=$SCRATCH/whole cut=$SCRATCH/cut
pbs_job 4 jobs/train.pbs "${common[@]}" EPOCHS=12 RUN_DIR="$whole"
pbs_job 5 jobs/train.pbs "${common[@]}" EPOCHS=12 RUN_DIR="$cut" WALLTIME=00:00:02 STOP_MARGIN=1
stopped=$(status_of "$cut")
pbs_job 6 jobs/train.pbs "${common[@]}" EPOCHS=12 RUN_DIR="$cut"
if [ "$stopped" = KILLED ] && grep -q "stop requested" "$SCRATCH/5.out" &&
   grep -q "resuming $cut" "$SCRATCH/6.out" && [ "$(status_of "$cut")" = FINISHED ] &&
   cmp -s "$whole/latest/model.safetensors" "$cut/latest/model.safetensors"; then
  pass "pbs: walltime timer checkpoints, resubmission resumes to the uninterrupted run's exact model"
else
  fail "pbs: walltime timer and resume" "stopped=$stopped, then $(status_of "$cut"), models $(cmp "$whole/latest/model.safetensors" "$cut/latest/model.safetensors" 2>&1 || true); $(grep -h "stop requested\|resuming" "$SCRATCH/5.out" "$SCRATCH/6.out" | tr '\n' ' ')"
fi

# 4. SIGTERM to the job's shell (what PBS sends at the walltime or on qdel) reaches ./train as
#    a checkpoint-and-stop.
term=$SCRATCH/term
(cd / && exec env PBS_JOBID=7.pbs-test PBS_JOBNAME=t PBS_NODEFILE="$nodes" PBS_O_WORKDIR="$REPO" NCPUS=2 \
  "${common[@]}" EPOCHS=40 RUN_DIR="$term" bash "$REPO/jobs/train.pbs") > "$SCRATCH/7.out" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "^epoch 1/" "$SCRATCH/7.out" 2>/dev/null && break; sleep 0.2; done
kill -TERM "$job"
wait "$job"
rc=$?
if [ "$rc" = 0 ] && [ "$(status_of "$term")" = KILLED ] && [ -f "$term/latest/trainer.json" ] &&
   grep -q "walltime warning (SIGTERM)" "$SCRATCH/7.out"; then
  pass "pbs: SIGTERM to the job shell becomes a checkpoint and a clean exit"
else
  fail "pbs: SIGTERM to the job shell" "rc=$rc status=$(status_of "$term"); $(tail -2 "$SCRATCH/7.out" | tr '\n' ' ')"
fi

# 5. The evaluation job on the finished run: report and predictions in <run>/eval-<job id>.
if pbs_job 8 jobs/eval.pbs CHECKPOINT="$whole" DATASET=synthetic EVAL_ARGS="--batch-size 16" &&
   [ -f "$whole/eval-8.pbs-test/report.json" ] && [ -f "$whole/eval-8.pbs-test/predictions.csv" ]; then
  pass "pbs: eval.pbs writes report.json and predictions.csv of the run"
else
  fail "pbs: eval.pbs" "$(tail -2 "$SCRATCH/8.out" | tr '\n' ' ')"
fi

# 6. A sweep array of two configurations, then the report table.
grid=$SCRATCH/grid
printf '# test grid\nlenet 32 1 2 --dataset synthetic\n\nlenet 64 2 1 --dataset synthetic\n' > "$grid"
ok=1
for i in 0 1; do
  pbs_job "9[$i]" jobs/sweep.pbs PBS_ARRAY_INDEX=$i SWEEP_GRID="$grid" SWEEP_DIR="$SCRATCH/sweep" || ok=0
done
table=$(bash jobs/sweep_report.sh "$SCRATCH/sweep" 2>&1)
if [ $ok = 1 ] && echo "$table" | grep -q '| 000-lenet-b32-r1-t2 | FINISHED | 1 | 2 | 32 |' &&
   echo "$table" | grep -q '| 001-lenet-b64-r2-t1 | FINISHED | 2 | 1 | 128 |'; then
  pass "pbs: sweep.pbs array elements train their grid lines; sweep_report tabulates them"
else
  fail "pbs: sweep array" "$(echo "$table" | tail -2 | tr '\n' ' ') $(tail -1 "$SCRATCH/9[1].out")"
fi

# 7. Bad parameters: one line naming the setting, non-zero exit, nothing trained.
if ! pbs_job 10 jobs/sweep.pbs PBS_ARRAY_INDEX=7 SWEEP_GRID="$grid" &&
   grep -q "has no configuration 7" "$SCRATCH/10.out" &&
   ! pbs_job 11 jobs/train.pbs THREADS=x && grep -q "THREADS='x' is not an integer" "$SCRATCH/11.out" &&
   ! pbs_job 12 jobs/eval.pbs CHECKPOINT=/nonexistent && grep -q "CHECKPOINT='/nonexistent' does not exist" "$SCRATCH/12.out"; then
  pass "pbs: bad parameters fail with one line naming them"
else
  fail "pbs: bad parameters" "$(cat "$SCRATCH/10.out" "$SCRATCH/11.out" "$SCRATCH/12.out" | tail -3 | tr '\n' ' ')"
fi
# 8. The ImageNet job end to end on a small ImageNet-shaped folder (train/ and val/, 4 classes):
#    packed into shards once, trained on them with the recipe (validation on the val shards),
#    resubmitted after a walltime stop: the shards are reused and the run resumes to the end.
img=$SCRATCH/imagenet shards=$SCRATCH/imagenet-shards inrun=$SCRATCH/imagenet-run
/usr/bin/python3 tests/python/shards_python.py folder "$img" 24 4 val
# (ResNet-20 at 32x32 for speed: 30 epochs take ~4 s, the timer fires after 1 s.)
inet=(SOURCE="$img" SHARDS="$shards" SHARD_MB=0.02 MODEL=resnet20 EPOCHS=30 BATCH=8 ACCUMULATE=2 IMAGE_SIZE=32
      RUN_DIR="$inrun" TRAIN_ARGS="--workers 1 --seed 3")
pbs_job 13 jobs/imagenet_resnet50.pbs "${inet[@]}" WALLTIME=00:00:02 STOP_MARGIN=1
stopped=$(status_of "$inrun")
pbs_job 14 jobs/imagenet_resnet50.pbs "${inet[@]}"
if [ -f "$shards/shards.json" ] && [ "$(ls "$shards"/train-*.tar | wc -l)" -ge 2 ] &&
   grep -q "packing $img into $shards" "$SCRATCH/13.out" && grep -q "using the shards in $shards" "$SCRATCH/14.out" &&
   grep -q -- "--label-smoothing 0.1" "$SCRATCH/13.out" && grep -q "tar shards, 96 samples, 4 classes" "$SCRATCH/13.out" &&
   grep -q "x 2 accumulated" "$SCRATCH/13.out" && [ "$stopped" = KILLED ] && grep -q "resuming $inrun" "$SCRATCH/14.out" &&
   [ "$(status_of "$inrun")" = FINISHED ] && [ "$(json_get "$inrun/summary.json" epochs_done)" = 30 ]; then
  pass "pbs: imagenet_resnet50.pbs packs an image folder into shards once, trains the recipe on them, resumes after a walltime stop"
else
  fail "pbs: imagenet_resnet50.pbs" "stopped=$stopped then $(status_of "$inrun"); $(tail -n 3 "$SCRATCH/13.out" "$SCRATCH/14.out" | tr '\n' ' ')"
fi
finish
