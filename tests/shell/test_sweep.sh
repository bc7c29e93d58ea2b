# `recommend sweep` (issue 24): a grid of 4 LeNet points on synthetic data plus one whose
# ./train fails (--init-weights names a missing file) in the middle. The sweep must record the
# failure and go on, exit 1, and a second run must skip the finished points and rerun only the
# failed one; --dry-run runs nothing; Ctrl-C stops the running point (FAILED, interrupted) and
# starts no other; bad grid lines (keys ./train does not have, values it refuses) get one line
# naming the file and line, exit 2, before anything runs. Also jobs/mlruns_merge.sh
# over the sweep's runs (one MLflow store for MLflow's compare view). About 20 s on 2 cores.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"
RECOMMEND=$REPO/$MPICNN_BUILD/bin/recommend
TRAIN=$REPO/$MPICNN_BUILD/bin/train
on_exit "rm -f /dev/shm/vader_segment.* 2>/dev/null"
[ -x "$RECOMMEND" ] || { skip sweep "no $RECOMMEND (make apps)"; finish; }
grid=$SCRATCH/grid
out=$SCRATCH/sweep
cat > "$grid" <<'EOF'
# shared by every block
model = lenet
dataset = synthetic
epochs = 1
threads = 1
workers = 0      # no loader threads: the quickest start
[a]
batch-size = 64 128
[bad]
init-weights = /nonexistent/w.safetensors
[b]
batch-size = 64
ranks = 2
distribute-data = true false
EOF
sweep() { env -u OPENBLAS_CORETYPE "$RECOMMEND" sweep "$grid" -o "$out" --train "$TRAIN" "$@"; }
# field DIR/NAME KEY: a key of the point's sweep_point.json
field() { json_get "$out/$1/sweep_point.json" "$2"; }
ok_points=(lenet-syn-b64-r1-t1-w0-dd1-e1 lenet-syn-b128-r1-t1-w0-dd1-e1 lenet-syn-b64-r2-t1-w0-dd1-e1
  lenet-syn-b64-r2-t1-w0-dd0-e1)

# --dry-run: the five points and their commands, nothing created
dry=$(sweep --dry-run 2>&1)
if [ $? = 0 ] && [ "$(echo "$dry" | grep -c '^lenet-syn-')" = 5 ] && [ ! -e "$out" ] &&
  echo "$dry" | grep -q -- "-n 2 $TRAIN .*--distribute-data=false"; then
  pass "dry run lists 5 points and runs nothing"
else fail "dry run" "$(echo "$dry" | tail -3 | tr '\n' ' ')"; fi

# the sweep: 4 finished, the bad point FAILED with ./train's line, and the points after it ran
log1=$(sweep 2>&1); rc=$?
bad=$(ls "$out" | grep -- '-e1-[0-9a-f]\{6\}$')
[ "$rc" = 1 ] && pass "exit 1 when a point failed" || fail "exit 1 when a point failed" "exit $rc"
echo "$log1" | grep -q "^sweep: 4 finished, 0 skipped (already done), 1 failed$" &&
  pass "summary line" || fail "summary line" "$(echo "$log1" | tail -1)"
n_ok=0
for p in "${ok_points[@]}"; do
  [ "$(field "$p" status)" = FINISHED ] && [ "$(json_get "$out/$p/summary.json" status)" = FINISHED ] &&
    [ -s "$out/$p/train.log" ] && n_ok=$((n_ok + 1))
done
[ "$n_ok" = 4 ] && pass "4 points FINISHED in their run directories" || fail "finished points" "$n_ok of 4"
err=$(field "$bad" error 2>/dev/null)
[ -n "$bad" ] && [ "$(field "$bad" status)" = FAILED ] && [ "$(field "$bad" exit_code)" != 0 ] &&
  case $err in "exit code "*"--init-weights: /nonexistent/w.safetensors does not exist"*) true ;; *) false ;; esac &&
  pass "failed point recorded: $err" || fail "failed point recorded" "dir '$bad': $err"
t_bad=$(field "$bad" started_unix_ms 2>/dev/null || echo 0)
t_after=$(field "${ok_points[3]}" started_unix_ms)
[ "$t_after" -gt "$t_bad" ] && pass "the sweep went on after the failure" || fail "went on" "$t_after <= $t_bad"
/usr/bin/python3 - "$out/${ok_points[2]}/sweep_point.json" "$TRAIN" <<'PY' && pass "sweep_point.json record" || fail "sweep_point.json record" "see above"
import json, sys
p = json.load(open(sys.argv[1]))
o = p["options"]
assert p["ranks"] == 2 and o["model"] == "lenet" and o["batch-size"] == "64" and o["learning-rate"] == "0.05", p
assert o["save-dir"].endswith(p["name"]) and p["seconds"] > 0 and p["error"] == "", p
c = p["command"]
assert c[c.index("-n") + 1] == "2" and sys.argv[2] in c and c[-2:] == ["--progress", "plain"], c
PY

# again: the finished points are skipped (untouched), only the failed one reruns
before=$(for p in "${ok_points[@]}"; do field "$p" started_unix_ms; done)
log2=$(sweep 2>&1); rc=$?
after=$(for p in "${ok_points[@]}"; do field "$p" started_unix_ms; done)
[ "$rc" = 1 ] && echo "$log2" | grep -q "^sweep: 0 finished, 4 skipped (already done), 1 failed$" &&
  [ "$before" = "$after" ] && [ "$(field "$bad" started_unix_ms)" -gt "$t_bad" ] &&
  pass "rerun skips the 4 finished points and reruns the failed one" ||
  fail "rerun" "exit $rc: $(echo "$log2" | tail -1)"
sweep --only a --only b > /dev/null 2>&1 && pass "--only the good blocks: exit 0" || fail "--only" "exit $?"

# Ctrl-C: the running point is stopped and recorded, the next one never starts
printf 'model = lenet\ndataset = synthetic\nthreads = 1\nworkers = 0\nepochs = 200\nbatch-size = 16 32\n' > "$SCRATCH/long.grid"
env -u OPENBLAS_CORETYPE "$RECOMMEND" sweep "$SCRATCH/long.grid" -o "$SCRATCH/int" --train "$TRAIN" > "$SCRATCH/int.out" 2>&1 &
pid=$!
first=$SCRATCH/int/lenet-syn-b16-r1-t1-w0-dd1-e200
for _ in $(seq 100); do grep -q "^epoch 1/200" "$first/train.log" 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"; rc=$?
[ "$rc" = 1 ] && [ "$(json_get "$first/sweep_point.json" error)" = interrupted ] &&
  [ "$(json_get "$first/sweep_point.json" status)" = FAILED ] && [ ! -e "$SCRATCH/int/lenet-syn-b32-r1-t1-w0-dd1-e200" ] &&
  ! pgrep -f "$first" > /dev/null && pass "SIGINT stops the point, records it interrupted, starts no other" ||
  fail "SIGINT" "exit $rc: $(tail -1 "$SCRATCH/int.out")"

# jobs/mlruns_merge.sh: the sweep's runs in one MLflow store, one experiment, their params the
# run facts, artifact locations inside the new store (PyYAML reads the YAML as MLflow would)
merged=$SCRATCH/mlflow
if jobs/mlruns_merge.sh "$merged" "$out" > "$SCRATCH/merge.out" 2>&1 &&
  /usr/bin/python3 - "$merged" "$out" <<'PY'
import glob, os, sys, yaml
merged, sweep = sys.argv[1], sys.argv[2]
want = {os.path.basename(p) for p in glob.glob(f"{sweep}/*/mlruns/0/*") if os.path.isdir(p)}
exp = yaml.safe_load(open(f"{merged}/1/meta.yaml"))
assert exp["experiment_id"] == "1" and exp["lifecycle_stage"] == "active", exp
got = {os.path.basename(p) for p in glob.glob(f"{merged}/1/*") if os.path.isdir(p)}
assert got == want and len(got) >= 4, (sorted(got), sorted(want))
for rid in got:
    meta = yaml.safe_load(open(f"{merged}/1/{rid}/meta.yaml"))
    assert meta["experiment_id"] == "1" and meta["run_id"] == rid, meta
    assert meta["artifact_uri"] == f"file://{os.path.realpath(merged)}/1/{rid}/artifacts", meta
    for key in ("model_macs", "train_samples", "cpus_per_node", "ranks", "batch-size"):
        assert os.path.exists(f"{merged}/1/{rid}/params/{key}"), (rid, key)
PY
then pass "mlruns_merge: every run in one MLflow store, params with the run facts"
else fail "mlruns_merge" "$(tail -1 "$SCRATCH/merge.out")"; fi

# bad grid input: one line naming the file and line, exit 2, nothing run
bad_grid() {
  local name=$1 text=$2 want=$3 err rc
  printf '%b' "$text" > "$SCRATCH/bad.grid"
  err=$("$RECOMMEND" sweep "$SCRATCH/bad.grid" -o "$SCRATCH/never" 2>&1 >/dev/null); rc=$?
  if [ "$rc" = 2 ] && [ "$(echo "$err" | wc -l)" = 1 ] && [ ! -e "$SCRATCH/never" ] &&
    case $err in *"$want"*) true ;; *) false ;; esac; then pass "$name: $err"
  else fail "$name" "exit $rc: $err"; fi
}
bad_grid "malformed line" 'model = lenet\nbatch-size 64\n' "bad.grid:2: expected 'key = values'"
bad_grid "empty values" '# c\n[x]\nmodel =\n' "bad.grid:3: model has no values"
bad_grid "ranks not a positive integer" 'model = lenet\nranks = 1 0\n' "bad.grid:2: ranks '0' is not a positive integer"
bad_grid "bad block header" '[a b]\nmodel = lenet\n' "bad.grid:1: a block header"
bad_grid "a key ./train does not have" 'model = lenet\nbatch = 64\n' \
  "bad.grid:2: 'batch' is not an option of ./train or the sweep (did you mean batch-size?)"
bad_grid "a value ./train refuses" 'model = lenet\nepochs = 1\n[a]\nbatch-size = 64\n[b]\noptimizer = sgd bogus\n' \
  "bad.grid:6: optimizer = bogus: ./train refuses it: --optimizer: 'bogus'"
err=$("$RECOMMEND" sweep "$grid" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$(echo "$err" | wc -l)" = 1 ] && case $err in *"-o DIR is required"*) true ;; *) false ;; esac &&
  pass "no -o: $err" || fail "no -o" "exit $rc: $err"
finish
