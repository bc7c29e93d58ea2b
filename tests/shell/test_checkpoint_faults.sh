# Checkpoint faults end to end (issue 23): a disk that fills while checkpoint 2 is written
# (a size-limited tmpfs in a private mount namespace, and RLIMIT_FSIZE), bit-flipped and
# truncated checkpoints refused by --resume and pipeline_eval --checkpoint, and resuming with
# another rank count (2 -> 3 and 3 -> 2) at an epoch boundary and mid-epoch. Each refusal must
# be ONE line from the program naming the file (and tensor) or the rule; nothing already
# written may be left broken. LeNet on the synthetic set; about 40 s on 2 cores.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"
TRAIN=$REPO/$MPICNN_BUILD/bin/train
EVAL=$REPO/$MPICNN_BUILD/bin/pipeline_eval
on_exit "rm -f /dev/shm/vader_segment.* 2>/dev/null"
common=(--dataset synthetic --progress plain --threads 1 -w 0)

# run_train K OUT ARGS...: mpiexec -n K ./train, output in OUT, returns its status.
run_train() {
  local k=$1 out=$2
  shift 2
  env -u OPENBLAS_CORETYPE mpiexec -n "$k" --oversubscribe "$TRAIN" "${common[@]}" "$@" > "$out" 2>&1
}
# our_lines OUT PROG: the lines the program itself printed as errors ("train: ...").
our_lines() { grep -c "^$2: " "$1"; }
# one_line NAME OUT PROG WORDS...: the run failed with exactly one error line holding every word.
one_line() {
  local name=$1 out=$2 prog=$3 line
  shift 3
  line=$(grep "^$prog: " "$out" | head -1)
  if [ "$(our_lines "$out" "$prog")" != 1 ]; then
    fail "$name" "expected one '$prog:' line, got $(our_lines "$out" "$prog"): $(tail -2 "$out" | tr '\n' ' ')"
    return 1
  fi
  local w
  for w in "$@"; do
    case $line in *"$w"*) ;; *) fail "$name" "line lacks '$w': $line"; return 1 ;; esac
  done
  pass "$name: $line"
}
# intact RUN: latest names checkpoints/epoch-0001, no temporary left, tracking files parse.
intact() {
  local run=$1
  [ "$(readlink "$run/latest")" = checkpoints/epoch-0001 ] || { echo "latest -> $(readlink "$run/latest")"; return 1; }
  ! ls -a "$run/checkpoints" | grep -q '^\.tmp' || { echo "temporary left: $(ls -a "$run/checkpoints")"; return 1; }
  ! find "$run" -name '*.tmp.*' | grep -q . || { echo "temporary file left: $(find "$run" -name '*.tmp.*')"; return 1; }
  /usr/bin/python3 - "$run" <<'PY' || return 1
import json, sys
run = sys.argv[1]
s = json.load(open(run + "/summary.json"))
assert s["status"] in ("FAILED", "KILLED", "RUNNING", "FINISHED"), s["status"]
for n, line in enumerate(open(run + "/metrics.jsonl")):
    json.loads(line)
PY
}

# ---- 1. disk full: a 900 KiB tmpfs holds checkpoint 1 (~500 KiB) and the tracking files (a
# 4 KiB page each: about 70 MLflow param files, one per recorded option) but not checkpoint 2 --
if ! unshare -m true 2>/dev/null; then
  skip "disk full (tmpfs)" "unshare -m is not permitted here (needs root or user namespaces)"
else
  full=$SCRATCH/full
  mkdir -p "$full/mnt"
  unshare -m sh -c '
    base=$1; shift
    mount -t tmpfs -o size=900k tmpfs "$base/mnt" || { echo MOUNT_FAILED > "$base/rc"; exit 0; }
    cd "$base/mnt" && "$@" -e 3 -s r > "$base/out" 2>&1; echo $? > "$base/rc"
    cp -a r "$base/r"' sh "$full" env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe "$TRAIN" "${common[@]}" -b 32
  if [ "$(cat "$full/rc")" = MOUNT_FAILED ]; then
    skip "disk full (tmpfs)" "mount -t tmpfs is not permitted in a mount namespace here"
  elif [ "$(cat "$full/rc")" = 0 ]; then
    fail "disk full (tmpfs)" "the run did not fail: $(tail -2 "$full/out" | tr '\n' ' ')"
  else
    one_line "disk full (tmpfs): one line" "$full/out" train "checkpoint " "epoch-0002 not saved" \
      "model.safetensors" "No space left on device" "still points to checkpoints/epoch-0001"
    check "disk full (tmpfs): latest and checkpoint 1 intact, no temporaries, tracking files parse" intact "$full/r"
    if env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe "$EVAL" --checkpoint "$full/r" --threads 1 \
        -o "$SCRATCH/full-eval" > "$full/eval.out" 2>&1; then
      pass "disk full (tmpfs): pipeline_eval --checkpoint loads checkpoint 1"
    else
      fail "disk full (tmpfs): pipeline_eval --checkpoint loads checkpoint 1" "$(tail -1 "$full/eval.out")"
    fi
    if run_train 2 "$full/resume.out" --resume "$full/r" -b 32 -e 2; then
      pass "disk full (tmpfs): --resume continues from checkpoint 1"
    else
      fail "disk full (tmpfs): --resume continues from checkpoint 1" "$(grep '^train:' "$full/resume.out")"
    fi
  fi
fi

# ---- 2. RLIMIT_FSIZE: checkpoint 1 written freely, the resumed run's checkpoint 2 hits the limit
lim=$SCRATCH/fsize
run_train 2 "$lim.1.out" -b 32 -e 1 -s "$lim" || fail "fsize: first run" "$(tail -1 "$lim.1.out")"
# The limit on the ranks only (mpiexec's PMIx store and the shared-memory transport make larger
# files: TCP between the ranks instead). SIGXFSZ ignored: write() then fails with EFBIG instead
# of the signal killing the rank.
env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe --mca btl self,tcp \
  sh -c 'trap "" XFSZ; ulimit -f 200; exec "$@"' sh "$TRAIN" "${common[@]}" --resume "$lim" -b 32 -e 2 \
  > "$lim.2.out" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
  fail "RLIMIT_FSIZE" "the run did not fail"
else
  one_line "RLIMIT_FSIZE: one line" "$lim.2.out" train "epoch-0002 not saved" "model.safetensors" \
    "File too large" "still points to checkpoints/epoch-0001"
  check "RLIMIT_FSIZE: latest and checkpoint 1 intact, no temporaries, tracking files parse" intact "$lim"
fi

# ---- 2b. the limit hit by metrics.jsonl mid-epoch (dash's ulimit -f counts 512-byte blocks):
# one line, and the file is cut back to whole lines (never a torn JSON line). 8 blocks = 4 KiB:
# above summary.json (about 2.5 KiB with every run fact) and the mlruns metric files at the
# failing step, below this epoch's metrics.jsonl (about 9 KiB).
mj=$SCRATCH/mjsonl
env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe --mca btl self,tcp \
  sh -c 'trap "" XFSZ; ulimit -f 8; exec "$@"' sh "$TRAIN" "${common[@]}" -b 8 -e 1 -s "$mj" > "$mj.out" 2>&1
if [ $? = 0 ]; then
  fail "RLIMIT_FSIZE on metrics.jsonl" "the run did not fail"
else
  check "RLIMIT_FSIZE on metrics.jsonl: one error line naming it" grep -q "train: $mj/metrics.jsonl: write failed" "$mj.out"
  check "RLIMIT_FSIZE on metrics.jsonl: whole lines only, summary.json parses" /usr/bin/python3 -c '
import json, sys
[json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
json.load(open(sys.argv[1] + "/summary.json"))' "$mj"
fi

# ---- 3. bit-flipped and truncated checkpoints ---------------------------------------------
good=$SCRATCH/good
run_train 2 "$good.out" -b 32 -e 1 -s "$good" || fail "good run" "$(tail -1 "$good.out")"
# damage NAME HOW FILE: a copy of the good run with FILE damaged.
damage() {
  local d=$SCRATCH/$1
  cp -a "$good" "$d"
  local f=$d/checkpoints/epoch-0001/$3
  case $2 in
    flip) /usr/bin/python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)-1000]^=0x10; open(p,"wb").write(b)' "$f" ;;
    cut) truncate -s -1000 "$f" ;;
    digit) /usr/bin/python3 -c 'import sys; p=sys.argv[1]; s=open(p).read(); s=s.replace("\"epoch\": 1,", "\"epoch\": 3,", 1); open(p,"w").write(s)' "$f" ;;
  esac
  echo "$d"
}
d=$(damage flip flip model.safetensors)
run_train 2 "$d.resume" --resume "$d" -b 32 -e 2
one_line "bit-flipped model: --resume refuses" "$d.resume" train "model.safetensors: tensor '" "fails its CRC32 check" "the file is corrupt"
env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe "$EVAL" --checkpoint "$d" --threads 1 -o "$d.eval" > "$d.evalout" 2>&1
one_line "bit-flipped model: pipeline_eval refuses" "$d.evalout" pipeline_eval "model.safetensors: tensor '" "fails its CRC32 check"
d=$(damage cut cut optimizer.safetensors)
run_train 2 "$d.resume" --resume "$d" -b 32 -e 2
one_line "truncated optimizer: --resume refuses" "$d.resume" train "optimizer.safetensors: tensor '" "run past the end of the file" "truncated"
d=$(damage cutm cut model.safetensors)
env -u OPENBLAS_CORETYPE mpiexec -n 2 --oversubscribe "$EVAL" --checkpoint "$d" --threads 1 -o "$d.eval" > "$d.evalout" 2>&1
one_line "truncated model: pipeline_eval refuses" "$d.evalout" pipeline_eval "model.safetensors: tensor '" "truncated"
d=$(damage digit digit trainer.json)
run_train 2 "$d.resume" --resume "$d" -b 32 -e 2
one_line "trainer.json digit changed (still JSON): --resume refuses" "$d.resume" train "trainer.json: fails its CRC32 check"

# ---- 4. another rank count: epoch boundary works both ways; mid-epoch needs the global batch
r2=$SCRATCH/r2 r3=$SCRATCH/r3
run_train 2 "$r2.out" -b 6 -e 1 --eval-every 0 -s "$r2" || fail "2-rank run" "$(tail -1 "$r2.out")"
run_train 3 "$r3.out" -b 4 -e 1 --eval-every 0 -s "$r3" || fail "3-rank run" "$(tail -1 "$r3.out")"
check "epoch boundary 2 -> 3 ranks resumes" run_train 3 "$r2.to3" --resume "$r2/checkpoints/epoch-0001" -s "$SCRATCH/r2to3" -e 2
check "epoch boundary 3 -> 2 ranks resumes" run_train 2 "$r3.to2" --resume "$r3/checkpoints/epoch-0001" -s "$SCRATCH/r3to2" -e 2

# mid_epoch K B RUN: a K-rank run stopped by SIGUSR1 (the walltime warning) inside epoch 2:
# raised by rank 0 at its 100th step (epochs are 85 or 86 steps of 12 images), so the stop is
# mid-epoch whatever the timing (a signal sent by the clock may land at the epoch's end, which
# stops there: tests/shell/test_stop_signals.sh).
mid_epoch() {
  local k=$1 b=$2 run=$3
  env -u OPENBLAS_CORETYPE MPICNN_FAULT=forward:0:100:usr1 mpiexec -n "$k" --oversubscribe \
    "$TRAIN" "${common[@]}" -b "$b" -e 20 --eval-every 0 -s "$run" > "$run.out" 2>&1
  ls "$run/checkpoints" | grep -q '^step-' || { fail "mid-epoch stop of a $k-rank run" "no step-* checkpoint: $(ls "$run/checkpoints")"; return 1; }
}
m2=$SCRATCH/m2 m3=$SCRATCH/m3
if mid_epoch 2 6 "$m2" && mid_epoch 3 4 "$m3"; then
  run_train 3 "$m2.to3" --resume "$m2" -e 2 --eval-every 0
  one_line "mid-epoch 2 -> 3 ranks, same batch: refused" "$m2.to3" train "stopped mid-epoch" \
    "2 ranks x batch 6" "3 ranks x batch 6" "pass -b 4"
  run_train 2 "$m3.to2" --resume "$m3" -e 2 --eval-every 0
  one_line "mid-epoch 3 -> 2 ranks, same batch: refused" "$m3.to2" train "stopped mid-epoch" \
    "3 ranks x batch 4" "pass -b 6"
  check "mid-epoch 2 -> 3 ranks with the same global batch (-b 4) resumes" \
    run_train 3 "$m2.to3b" --resume "$m2" -b 4 -e 2 --eval-every 0
  check "mid-epoch 3 -> 2 ranks with the same global batch (-b 6) resumes" \
    run_train 2 "$m3.to2b" --resume "$m3" -b 6 -e 2 --eval-every 0
fi
finish
