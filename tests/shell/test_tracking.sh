#!/bin/bash
# The MLflow store of a ./train run as Python reads it: meta.yaml through PyYAML (what MLflow's
# FileStore parses it with), user_id against Python's own getpass.getuser() under the same
# environment (with $LOGNAME and friends, and without them: the password database), params
# against trainer.json's options, artifacts against the run's files. The C++ side of the same
# rules is tests/test_tracking.cpp; this is the check from outside, in another language.
source "$(dirname "$0")/lib/common.sh"
TRAIN=$MPICNN_BUILD/bin/train
[ -x "$TRAIN" ] || { fail "setup" "$TRAIN not built (make apps)"; finish; }

# A run without any of getpass's variables set: the user comes from the password database.
run=$SCRATCH/run
if env -u OPENBLAS_CORETYPE -u LOGNAME -u USER -u LNAME -u USERNAME "$TRAIN" --dataset synthetic \
    -e 1 -b 64 --threads 1 -w 0 --progress none -s "$run" > "$run.out" 2>&1; then
  pass "train: a one-epoch synthetic run"
else
  fail "train: a one-epoch synthetic run" "$(tail -1 "$run.out")"
  finish
fi

check_store() {
  env -u LOGNAME -u USER -u LNAME -u USERNAME /usr/bin/python3 - "$1" <<'PY'
import getpass, glob, json, os, sys, yaml
run = sys.argv[1]
runs = [p for p in glob.glob(f"{run}/mlruns/0/*") if os.path.isdir(p)]
assert len(runs) == 1, runs
d = runs[0]
exp = yaml.safe_load(open(f"{run}/mlruns/0/meta.yaml"))
assert exp["experiment_id"] == "0" and exp["lifecycle_stage"] == "active", exp
meta = yaml.safe_load(open(f"{d}/meta.yaml"))
assert meta["run_id"] == meta["run_uuid"] == os.path.basename(d), meta
assert meta["experiment_id"] == "0" and meta["status"] == 3, meta
assert isinstance(meta["start_time"], int) and isinstance(meta["end_time"], int), meta
assert meta["user_id"] == getpass.getuser(), (meta["user_id"], getpass.getuser())
assert open(f"{d}/tags/mlflow.user").read() == getpass.getuser()
trainer = json.load(open(f"{run}/latest/trainer.json"))
summary = json.load(open(f"{run}/summary.json"))
params = {os.path.basename(p): open(p).read() for p in glob.glob(f"{d}/params/*")}
options = {k: v for k, v in trainer["config"].items() if v != ""}
assert {k: params[k] for k in options if k in params} == options, "options differ from trainer.json"
extra = set(params) - set(options)
for k in extra:  # facts: in summary.json, and no option states them
    assert k in summary and k.replace("_", "-") not in trainer["config"], k
assert all(v != "" for v in params.values()), [k for k, v in params.items() if v == ""]
assert meta["artifact_uri"] == "file://" + os.path.abspath(d) + "/artifacts", meta["artifact_uri"]
art = meta["artifact_uri"][len("file://"):]
originals = {"trainer.json": f"{run}/latest/trainer.json", "summary.json": f"{run}/summary.json",
             "model.safetensors": f"{run}/latest/model.safetensors"}
assert sorted(os.listdir(art)) == sorted(originals), os.listdir(art)
for name, orig in originals.items():
    assert open(f"{art}/{name}", "rb").read() == open(orig, "rb").read(), name
PY
}
check "mlruns: PyYAML types, getpass user (passwd), params = trainer.json's options, artifacts" \
  check_store "$run"

# getpass's variables, in its order: LOGNAME wins over USER.
run2=$SCRATCH/run2
if env -u OPENBLAS_CORETYPE LOGNAME="ann o'neil" USER=bob "$TRAIN" --dataset synthetic -e 1 -b 64 \
    --threads 1 -w 0 --progress none -s "$run2" --log-final-weights=false > "$run2.out" 2>&1 &&
  LOGNAME="ann o'neil" USER=bob /usr/bin/python3 - "$run2" > "$run2.py" 2>&1 <<'PY'
import getpass, glob, os, sys, yaml
d = [p for p in glob.glob(f"{sys.argv[1]}/mlruns/0/*") if os.path.isdir(p)][0]
meta = yaml.safe_load(open(f"{d}/meta.yaml"))
assert meta["user_id"] == getpass.getuser() == "ann o'neil", meta["user_id"]
art = os.listdir(f"{d}/artifacts")
assert sorted(art) == ["summary.json", "trainer.json"], art
assert open(f"{d}/params/log-final-weights").read() == "false"
PY
then
  pass "mlruns: \$LOGNAME before \$USER, as getpass; --log-final-weights=false logs no weights"
else
  fail "mlruns: \$LOGNAME before \$USER; --log-final-weights=false" \
    "$(cat "$run2.out" "$run2.py" 2>/dev/null | tail -1)"
fi

finish
