# The Slurm job scripts (jobs/*.slurm) submitted with `sbatch --wait` to a real Slurm:
# tests/slurm/local_slurm.sh starts slurmctld and slurmd on this machine (one node, 4 CPUs,
# auth/none) for the suite. Checks: a run directory with a checkpoint and summary.json (mpiexec
# and srun --mpi=pmix launchers); the walltime warning (SIGUSR1 to the batch shell, as
# --signal=B:USR1@T sends it; simulated with scancel --signal=USR1 --batch) checkpoints and the
# resubmitted job resumes to the end; the evaluation job; a sweep job array; the ImageNet job on
# shards it packs.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO" || exit 1
slurm=$REPO/tests/slurm/local_slurm.sh

if ! why=$("$slurm" available 2>&1); then
  skip slurm "${why:-Slurm is not installed} (make deps installs slurm-wlm)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  skip slurm "slurmd must run as root to start jobs; this suite runs as $(id -un)"
  exit 0
fi
on_exit "'$slurm' stop '$SCRATCH/slurm'"
if ! out=$("$slurm" start "$SCRATCH/slurm" 2>&1); then
  fail "slurm: local cluster starts" "$(echo "$out" | grep local_slurm | tail -1)"
  finish
fi
eval "$(echo "$out" | grep '^export SLURM_CONF=')"

# One node here: the scripts' 2-node layout is replaced on the command line, as users do.
small=(--nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --time=10)
# -lr 0.02: LeNet at the default 0.05 on synthetic data diverged after 4 of the 12 epochs of
# case 3 when the direct kernels ran their AVX2 copy (another rounding, another trajectory);
# what these cases check is the jobs' life, not the learning rate.
common=(TRAIN_ARGS="--dataset synthetic --seed 5 -lr 0.02" BATCH=32)
status_of() { json_get "$1/summary.json" status 2>/dev/null; }
# submit NAME [VAR=VALUE...] -- SBATCH_ARGS... : sbatch --wait with the variables exported.
submit() {
  local name=$1
  shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" sbatch --wait --quiet -o "$SCRATCH/$name.out" "$@"
}

# 1. train.slurm with mpiexec: a finished run, 2 ranks from SLURM_NTASKS, 1 thread per task.
run=$SCRATCH/plain
if submit plain "${common[@]}" EPOCHS=2 RUN_DIR="$run" -- "${small[@]}" jobs/train.slurm &&
   [ -f "$run/latest/model.safetensors" ] && [ "$(status_of "$run")" = FINISHED ] &&
   [ "$(json_get "$run/summary.json" ranks)" = 2 ] && [ "$(json_get "$run/summary.json" threads_per_rank)" = 1 ]; then
  pass "slurm: sbatch --wait train.slurm writes a finished run with a checkpoint (2 tasks)"
else
  fail "slurm: train.slurm" "$(tail -2 "$SCRATCH/plain.out" 2>/dev/null | tr '\n' ' ')"
fi

# 2. The same with srun --mpi=pmix as the launcher.
if submit srun "${common[@]}" EPOCHS=1 RUN_DIR="$SCRATCH/srun" LAUNCHER=srun -- "${small[@]}" jobs/train.slurm &&
   [ "$(status_of "$SCRATCH/srun")" = FINISHED ] && grep -q "srun --ntasks=2 --mpi=pmix" "$SCRATCH/srun.out"; then
  pass "slurm: LAUNCHER=srun (srun --mpi=pmix) runs the same job"
else
  fail "slurm: LAUNCHER=srun" "$(tail -2 "$SCRATCH/srun.out" 2>/dev/null | tr '\n' ' ')"
fi

# 3. The walltime warning: SIGUSR1 to the batch shell (what --signal=B:USR1@T delivers) stops
#    every rank with a checkpoint; resubmitting the job resumes and finishes the run.
cut=$SCRATCH/cut
env "${common[@]}" EPOCHS=12 RUN_DIR="$cut" sbatch --parsable -o "$SCRATCH/cut1.out" "${small[@]}" \
  jobs/train.slurm > "$SCRATCH/cut.jid"
jid=$(cat "$SCRATCH/cut.jid")
for _ in $(seq 150); do grep -q "^epoch 1/" "$SCRATCH/cut1.out" 2>/dev/null && break; sleep 0.2; done
scancel --signal=USR1 --batch "$jid"
for _ in $(seq 150); do [ -n "$(squeue -h -j "$jid" 2>/dev/null)" ] || break; sleep 0.2; done
stopped=$(status_of "$cut")
if [ "$stopped" = KILLED ] && grep -q "walltime warning (SIGUSR1)" "$SCRATCH/cut1.out" &&
   submit cut2 "${common[@]}" EPOCHS=12 RUN_DIR="$cut" -- "${small[@]}" jobs/train.slurm &&
   grep -q "resuming $cut" "$SCRATCH/cut2.out" && [ "$(status_of "$cut")" = FINISHED ] &&
   [ "$(json_get "$cut/summary.json" epochs_done)" = 12 ]; then
  pass "slurm: SIGUSR1 to the batch shell checkpoints; the resubmitted job resumes and finishes"
else
  fail "slurm: walltime warning and resume" "status after signal: $stopped; $(tail -2 "$SCRATCH/cut1.out" "$SCRATCH/cut2.out" 2>/dev/null | tr '\n' ' ')"
fi

# 4. eval.slurm on 4 tasks (read | decode | normalize | predict) over the finished run.
if submit eval CHECKPOINT="$run" DATASET=synthetic EVAL_ARGS="--batch-size 16" -- \
     --nodes=1 --ntasks=4 --time=10 jobs/eval.slurm &&
   [ -f "$run/eval-$(sed -n 's/.*eval-\([0-9]*\).*/\1/p' "$SCRATCH/eval.out" | head -1)/report.json" ]; then
  pass "slurm: eval.slurm on 4 tasks writes the report of the run"
else
  fail "slurm: eval.slurm" "$(tail -2 "$SCRATCH/eval.out" 2>/dev/null | tr '\n' ' ')"
fi

# 5. A sweep job array of two configurations; sbatch --wait waits for the whole array.
grid=$SCRATCH/grid
printf 'lenet 32 1 2 --dataset synthetic\nlenet 64 2 1 --dataset synthetic\n' > "$grid"
if submit "sweep%a" SWEEP_GRID="$grid" SWEEP_DIR="$SCRATCH/sweep" -- --array=0-1 --nodes=1 --ntasks=2 \
     --cpus-per-task=1 --time=10 jobs/sweep.slurm; then :; fi
table=$(bash jobs/sweep_report.sh "$SCRATCH/sweep" 2>&1)
if echo "$table" | grep -q '| 000-lenet-b32-r1-t2 | FINISHED |' && echo "$table" | grep -q '| 001-lenet-b64-r2-t1 | FINISHED |'; then
  pass "slurm: sweep.slurm job array trains each grid line"
else
  fail "slurm: sweep array" "$(echo "$table" | tail -2 | tr '\n' ' ') $(tail -1 "$SCRATCH"/sweep*.out | tr '\n' ' ')"
fi

# 6. imagenet_resnet50.slurm on a small ImageNet-shaped folder (train/, val/): packs it into
#    shards, trains the recipe on them (ResNet-20 at 32x32 for speed), validation on the val shards.
img=$SCRATCH/imagenet shards=$SCRATCH/imagenet-shards inrun=$SCRATCH/imagenet-run
/usr/bin/python3 tests/python/shards_python.py folder "$img" 24 4 val
# 30 minutes: the script's --signal=B:USR1@600 asks for the warning 600 s before the limit, which
# a 10-minute job reaches at once (Slurm then sends it at its next check, under load mid-run).
if submit imagenet SOURCE="$img" SHARDS="$shards" SHARD_MB=0.02 MODEL=resnet20 EPOCHS=6 BATCH=8 IMAGE_SIZE=32 \
     RUN_DIR="$inrun" TRAIN_ARGS="--workers 1 --seed 3" -- "${small[@]/--time=10/--time=30}" \
     jobs/imagenet_resnet50.slurm &&
   [ -f "$shards/shards.json" ] && grep -q "packing $img into $shards" "$SCRATCH/imagenet.out" &&
   grep -q "tar shards, 96 samples, 4 classes" "$SCRATCH/imagenet.out" && [ "$(status_of "$inrun")" = FINISHED ] &&
   [ "$(json_get "$inrun/summary.json" epochs_done)" = 6 ]; then
  pass "slurm: imagenet_resnet50.slurm packs an image folder into shards and trains the recipe on them"
else
  fail "slurm: imagenet_resnet50.slurm" "$(tail -n 3 "$SCRATCH/imagenet.out" 2>/dev/null | tr '\n' ' ')"
fi
finish
