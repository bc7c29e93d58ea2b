# Shared by the job scripts in jobs/ (sourced after they cd to the project): what the scheduler
# gave the job (ranks, hosts, threads), the MPI launch line, resume of the run directory, and
# the walltime signal. Works under PBS Pro / OpenPBS / Torque, Slurm, or none (a plain shell).
# Every variable below may be set in the environment (qsub -v, sbatch --export) to override.

mpicnn_log() { echo "[mpicnn job $(date +%H:%M:%S)] $*"; }
mpicnn_die() { echo "[mpicnn job] error: $*" >&2; exit 2; }

# HH:MM:SS, MM:SS or SS -> seconds.
mpicnn_seconds() {
  local IFS=: parts s=0 p
  read -ra parts <<< "$1"
  for p in "${parts[@]}"; do s=$((s * 60 + 10#$p)); done
  echo "$s"
}

mpicnn_check_ranks() {
  case "$RANKS" in '' | *[!0-9]* | 0 | 00*) mpicnn_die "RANKS='$RANKS' is not a positive integer" ;; esac
}

# Sets SCHEDULER, JOB_ID, JOB_NAME, RANKS, HOSTFILE, THREADS from the scheduler's environment.
mpicnn_detect() {
  if [ -n "${PBS_JOBID:-}" ]; then
    SCHEDULER=pbs
    JOB_ID=$PBS_JOBID
    JOB_NAME=${PBS_JOBNAME:-job}
    [ -r "${PBS_NODEFILE:-}" ] || mpicnn_die "PBS_NODEFILE '${PBS_NODEFILE:-}' is not readable"
    HOSTFILE=$PBS_NODEFILE  # one line per MPI process (mpiprocs per chunk; Torque: ppn)
    RANKS=${RANKS:-$(grep -c . "$PBS_NODEFILE")}
    mpicnn_check_ranks  # before the threads arithmetic below divides by it
    local nodes
    nodes=$(sort -u "$PBS_NODEFILE" | grep -c .)
    # ncpus of a chunk shared by its mpiprocs (PBS Pro sets NCPUS; Torque: PBS_NUM_PPN).
    local cpus=${NCPUS:-${PBS_NUM_PPN:-0}} per_node=$(((RANKS + nodes - 1) / nodes))
    if [ -z "${THREADS:-}" ] && [ "$cpus" -gt 0 ] 2>/dev/null; then
      THREADS=$((cpus / per_node))
      [ "$THREADS" -ge 1 ] || THREADS=1
    fi
  elif [ -n "${SLURM_JOB_ID:-}" ]; then
    SCHEDULER=slurm
    JOB_ID=$SLURM_JOB_ID
    [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && JOB_ID=${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
    JOB_NAME=${SLURM_JOB_NAME:-job}
    HOSTFILE=""  # mpiexec and srun read the allocation themselves
    RANKS=${RANKS:-${SLURM_NTASKS:-1}}
    [ -n "${SLURM_CPUS_PER_TASK:-}" ] && THREADS=${THREADS:-$SLURM_CPUS_PER_TASK}
  else
    SCHEDULER=none
    JOB_ID=local-$$
    JOB_NAME=${JOB_NAME:-local}
    HOSTFILE=""
    RANKS=${RANKS:-2}
  fi
  THREADS=${THREADS:-0}  # 0: ./train's default, the node's usable CPUs / ranks on the node
  mpicnn_check_ranks
  case "$THREADS" in '' | *[!0-9]*) mpicnn_die "THREADS='$THREADS' is not an integer >= 0" ;; esac
}

# The launch command for RANKS ranks, as the array LAUNCH. LAUNCHER=mpiexec (default) or srun.
# --bind-to none: OpenMPI binds each rank to one core when there are <= 2 ranks, which would put
# all of a rank's compute threads on that core.
mpicnn_launch_line() {
  local launcher=${LAUNCHER:-mpiexec}
  case "$launcher" in
    mpiexec)
      LAUNCH=(${MPIEXEC:-mpiexec} -n "$RANKS" --bind-to none)
      [ -n "$HOSTFILE" ] && LAUNCH+=(-hostfile "$HOSTFILE")
      # shellcheck disable=SC2206  # MPIEXEC_ARGS is a list of words on purpose
      LAUNCH+=(${MPIEXEC_ARGS:-})
      ;;
    srun)
      [ "$SCHEDULER" = slurm ] || mpicnn_die "LAUNCHER=srun needs a Slurm job"
      # shellcheck disable=SC2206
      LAUNCH=(srun --ntasks="$RANKS" --mpi="${SRUN_MPI:-pmix}" ${SRUN_ARGS:-})
      ;;
    *) mpicnn_die "LAUNCHER='$launcher' is not mpiexec or srun" ;;
  esac
}

# Runs "$@" (the launch line and program) in the background and waits for it, so that the
# job's shell can pass the walltime warning on: SIGUSR1 (Slurm's --signal=B:USR1@T) or SIGTERM
# (PBS at walltime or qdel) become one SIGUSR1 to the launcher, which mpiexec and srun forward
# to every rank; ./train then stops after the same step on all ranks and writes a checkpoint.
# STOP_AFTER=SECONDS (set by mpicnn_walltime_watch) sends the same signal from a timer.
# Returns the program's exit status.
mpicnn_run_forwarding() {
  "$@" &
  local pid=$! rc=1 timer="" done_pid st
  _mpicnn_signalled=""
  _mpicnn_forward() {
    [ -n "$_mpicnn_signalled" ] && return
    _mpicnn_signalled=1
    mpicnn_log "walltime warning ($1): asking ./train to checkpoint and stop"
    kill -USR1 "$pid" 2>/dev/null
  }
  trap '_mpicnn_forward SIGUSR1' USR1
  trap '_mpicnn_forward SIGTERM' TERM
  if [ -n "${STOP_AFTER:-}" ]; then
    sleep "$STOP_AFTER" &
    timer=$!
  fi
  # `wait -n` returns when the program or the timer ends, or early (status > 128) when a
  # trapped signal arrives; only the program's own exit ends the loop.
  while :; do
    done_pid=""
    wait -n -p done_pid "$pid" ${timer:+"$timer"}
    st=$?
    if [ "$done_pid" = "$pid" ]; then
      rc=$st
      break
    elif [ -n "$timer" ] && [ "$done_pid" = "$timer" ]; then
      timer=""
      _mpicnn_forward "timer, STOP_AFTER=${STOP_AFTER}s"
    elif [ -z "$done_pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      rc=$?
      break
    fi
  done
  [ -n "$timer" ] && kill "$timer" 2>/dev/null
  trap - USR1 TERM
  return "$rc"
}

# PBS gives no warning before the walltime (SIGTERM, then SIGKILL after kill_delay), so the
# job sets its own timer: STOP_AFTER = walltime - STOP_MARGIN - the script's time so far. The
# walltime comes from WALLTIME (HH:MM:SS) or from `qstat -f` when available. Slurm jobs use
# #SBATCH --signal instead.
mpicnn_walltime_watch() {
  [ -n "${STOP_AFTER:-}" ] && return
  local wall=${WALLTIME:-}
  if [ -z "$wall" ] && [ "$SCHEDULER" = pbs ] && command -v qstat >/dev/null; then
    wall=$(qstat -f "$JOB_ID" 2>/dev/null | sed -n 's/^ *Resource_List.walltime = //p' | head -1)
  fi
  [ -n "$wall" ] || return 0
  local left margin=${STOP_MARGIN:-300}
  left=$(($(mpicnn_seconds "$wall") - SECONDS))  # the script's own time so far (packing shards) counts
  STOP_AFTER=$((left > margin ? left - margin : left / 2))
  [ "$STOP_AFTER" -ge 1 ] || STOP_AFTER=1
  mpicnn_log "walltime $wall: checkpoint-and-stop signal in ${STOP_AFTER}s"
}

# Whether the run directory DIR holds a finished run (summary.json status FINISHED).
mpicnn_finished() { [ -r "$1/summary.json" ] && grep -q '"status": *"FINISHED"' "$1/summary.json"; }

# Sets RESUME_ARGS for RUN_DIR: --resume when it holds a checkpoint (a resubmitted job carries
# on), nothing for a new directory. A directory with a run but no checkpoint (killed before the
# first one) is moved aside, so nothing written is lost. Returns 1 when the run has finished.
mpicnn_resume_args() {
  RESUME_ARGS=()
  if [ -e "$RUN_DIR/latest" ]; then
    if mpicnn_finished "$RUN_DIR"; then
      mpicnn_log "$RUN_DIR has finished (summary.json status FINISHED); nothing to do"
      return 1
    fi
    RESUME_ARGS=(--resume "$RUN_DIR")
    mpicnn_log "resuming $RUN_DIR from $(readlink "$RUN_DIR/latest")"
  elif [ -e "$RUN_DIR" ] && [ -n "$(ls -A "$RUN_DIR" 2>/dev/null)" ]; then
    local aside
    aside="$RUN_DIR.incomplete-$(date +%Y%m%d-%H%M%S)"
    mv "$RUN_DIR" "$aside"
    mpicnn_log "$RUN_DIR had no checkpoint; moved it to $aside and starting afresh"
  fi
  return 0
}

# Prints where the job runs, for the job log.
mpicnn_banner() {
  mpicnn_log "$SCHEDULER job $JOB_ID ($JOB_NAME) in $PWD: $RANKS ranks, threads per rank ${THREADS} (0 = auto)"
  [ -n "$HOSTFILE" ] && mpicnn_log "hosts: $(sort "$HOSTFILE" | uniq -c | awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')"
  return 0
}

# ./train of MODEL on DATA for EPOCHS into RUN_DIR (resumed per RESUME_ARGS), with the walltime
# warning forwarded. Used by jobs/train.pbs and jobs/train.slurm; returns ./train's status.
mpicnn_train() {
  # Checked here, before mpiexec starts: one line in the job log instead of ./train's line
  # between OpenMPI's notices, and no ranks started for nothing.
  case "$EPOCHS" in '' | *[!0-9]* | 0 | 00*) mpicnn_die "EPOCHS='$EPOCHS' is not a positive integer" ;; esac
  case "$BATCH" in '' | *[!0-9]* | 0 | 00*) mpicnn_die "BATCH='$BATCH' is not a positive integer" ;; esac
  [ -z "$DATA" ] || [ -e "$DATA" ] || mpicnn_die "DATA='$DATA' does not exist"
  local args=(-m "$MODEL" -e "$EPOCHS" -b "$BATCH" --threads "$THREADS" -s "$RUN_DIR" --progress plain)
  [ -n "$DATA" ] && args+=(-d "$DATA")
  # shellcheck disable=SC2206  # TRAIN_ARGS is a list of words on purpose
  args+=($TRAIN_ARGS "${RESUME_ARGS[@]}")
  mpicnn_log "${LAUNCH[*]} ./train ${args[*]}"
  mpicnn_run_forwarding "${LAUNCH[@]}" ./train "${args[@]}"
  local rc=$?
  mpicnn_log "./train exited $rc; run directory $RUN_DIR"
  return $rc
}

# Makes sure SHARDS holds tar shards (shards.json, written last by `shards pack`, marks a
# finished set): packs SOURCE there once (an image folder with train/ and val/ or test/, or any
# dataset the tool reads), on this node, on all its cores. A pack killed part way is packed
# again from the start. Used by jobs/imagenet_resnet50.*.
mpicnn_pack_shards() {
  if [ -r "$SHARDS/shards.json" ]; then
    mpicnn_log "using the shards in $SHARDS"
    return 0
  fi
  [ -n "$SOURCE" ] || mpicnn_die "SHARDS='$SHARDS' holds no shards.json and SOURCE is empty (the image folder to pack)"
  [ -e "$SOURCE" ] || mpicnn_die "SOURCE='$SOURCE' does not exist"
  case "$SHARD_MB" in '' | *[!0-9.]* | .) mpicnn_die "SHARD_MB='$SHARD_MB' is not a number of MiB" ;; esac
  local tool=${SHARDS_TOOL:-build/release/bin/shards}
  [ -x "$tool" ] || mpicnn_die "$tool is not built (make tools)"
  mpicnn_log "packing $SOURCE into $SHARDS (shards of $SHARD_MB MiB)"
  "$tool" pack -i "$SOURCE" -o "$SHARDS" --shard-mb "$SHARD_MB" --force ||
    mpicnn_die "packing $SOURCE into $SHARDS failed"
}

# ./pipeline_eval of CHECKPOINT on DATA (kind DATASET; the test split of the run's own data when both are empty) with RANKS ranks,
# report and predictions into OUT_DIR. Used by jobs/eval.pbs and jobs/eval.slurm.
mpicnn_eval() {
  [ -e "$CHECKPOINT" ] || mpicnn_die "CHECKPOINT='$CHECKPOINT' does not exist (a ./train run directory)"
  OUT_DIR=${OUT_DIR:-$CHECKPOINT/eval-$JOB_ID}
  local args=(--checkpoint "$CHECKPOINT" --threads "$THREADS" -o "$OUT_DIR")
  [ -n "$DATA" ] && args+=(-d "$DATA")
  [ -n "${DATASET:-}" ] && args+=(--dataset "$DATASET")
  # shellcheck disable=SC2206  # EVAL_ARGS is a list of words on purpose
  args+=($EVAL_ARGS)
  mpicnn_log "${LAUNCH[*]} ./pipeline_eval ${args[*]}"
  "${LAUNCH[@]}" ./pipeline_eval "${args[@]}"
  local rc=$?
  mpicnn_log "./pipeline_eval exited $rc; report in $OUT_DIR"
  return $rc
}

# The configuration of array element INDEX in SWEEP_GRID (jobs/sweep.grid format): sets
# SWEEP_MODEL, SWEEP_BATCH, RANKS, THREADS and SWEEP_ARGS (an array). Comments and blank lines
# do not count.
mpicnn_sweep_config() {
  local index=$1 line
  [ -r "$SWEEP_GRID" ] || mpicnn_die "SWEEP_GRID='$SWEEP_GRID' is not readable"
  case "$index" in '' | *[!0-9]*) mpicnn_die "array index '$index' is not an integer (submit as a job array)" ;; esac
  line=$(grep -v '^[[:space:]]*\(#\|$\)' "$SWEEP_GRID" | sed -n "$((index + 1))p")
  [ -n "$line" ] || mpicnn_die "$SWEEP_GRID has no configuration $index (0-based; $(grep -cv '^[[:space:]]*\(#\|$\)' "$SWEEP_GRID") lines)"
  local rest
  read -r SWEEP_MODEL SWEEP_BATCH RANKS THREADS rest <<< "$line"
  # shellcheck disable=SC2206  # the line's remaining words are ./train options
  SWEEP_ARGS=($rest)
  [ -n "$THREADS" ] || mpicnn_die "$SWEEP_GRID line '$line': expected model batch ranks threads [options]"
  case "$SWEEP_BATCH" in *[!0-9]* | 0 | 00*) mpicnn_die "$SWEEP_GRID line '$line': batch '$SWEEP_BATCH' is not a positive integer" ;; esac
  case "$RANKS" in *[!0-9]* | 0 | 00*) mpicnn_die "$SWEEP_GRID line '$line': ranks '$RANKS' is not a positive integer" ;; esac
}

# One sweep element: trains the configuration for SWEEP_EPOCHS into SWEEP_DIR/<index>-<config>
# and leaves its summary.json there; jobs/sweep_report.sh tabulates the directory.
mpicnn_sweep_run() {
  local index=$1 name
  name=$(printf '%03d-%s-b%s-r%s-t%s' "$index" "$SWEEP_MODEL" "$SWEEP_BATCH" "$RANKS" "$THREADS")
  local dir=$SWEEP_DIR/$name
  mpicnn_finished "$dir" && { mpicnn_log "$dir has finished; nothing to do"; return 0; }
  rm -rf "$dir"  # a benchmark element is re-run from scratch, never resumed
  mkdir -p "$SWEEP_DIR"
  local args=(-m "$SWEEP_MODEL" -b "$SWEEP_BATCH" -e "$SWEEP_EPOCHS" --threads "$THREADS" -s "$dir"
              --progress plain --checkpoint-every 0 --keep-checkpoints 1 "${SWEEP_ARGS[@]}")
  mpicnn_log "sweep element $index: ${LAUNCH[*]} ./train ${args[*]}"
  mpicnn_run_forwarding "${LAUNCH[@]}" ./train "${args[@]}"
}
