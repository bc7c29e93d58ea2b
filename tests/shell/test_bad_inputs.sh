# The bad-input matrix: runs every row of docs/BAD_INPUTS.md (parsed from the document itself,
# so the table cannot drift from what the programs do) and checks, per row:
#   - the exit status is the table's, and the command ended within its timeout (no hang, also
#     under mpiexec: every rank exited);
#   - the message (the whole line for `exact`, part of it for `substring`) is on exactly one line
#     of stdout + stderr (so not once per rank);
#   - stderr holds nothing but that line: no second error, no stack trace, no per-rank copies.
#     Only OpenMPI's own notice blocks (between lines of dashes, which mpiexec prints when a rank
#     exits non-zero or calls MPI_Abort) and mpiexec's own ORTE_ERROR_LOG lines are set aside
#     first, and only for rows run under mpiexec ($MPI, or a job script); stdout may hold a
#     program's normal progress lines;
#   - no crash marker anywhere (terminate called, Segmentation fault, core dumped, Sanitizer...);
#   - the table's "unchanged" path (a run, a checkpoint, a dataset) has the same files with the
#     same bytes after the row as before it: nothing already written is left corrupt.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"
# OpenMPI's shared-memory segments of the aborted jobs land in the scratch folder, removed at
# the end, not in /dev/shm.
mkdir -m 1777 "$SCRATCH/shm"
export OMPI_MCA_btl_vader_backing_directory=$SCRATCH/shm

DOC=docs/BAD_INPUTS.md
BIN=$MPICNN_BUILD/bin
[ -x ./train ] && [ -x ./pipeline_eval ] && [ -x ./recommend ] && [ -x "$BIN/create_dataset" ] || { fail "bad inputs" "build ./train, ./pipeline_eval, ./recommend and the tools first"; finish; }
chmod 755 "$SCRATCH"  # the unreadable-file row runs as nobody, who must reach the fixtures
F=$SCRATCH/fix
mkdir -p "$F"

# ---- fixtures, made once (about 2 s) ---------------------------------------------------------
# A 60-image, 10-class CSV dataset of Fashion-MNIST PNGs; a 5-class one of other classes (5-9,
# relabelled 0-4); a tiny IDX folder and two broken copies; a finished 1-epoch LeNet run and
# checkpoints broken in the ways the table names.
fixtures() {
  local src=/usr/share/datasets/fashion-mnist
  "$BIN/create_dataset" -d fashion-mnist -o "$F/data" --size 60 --test-fraction 0.25 --seed 1 >/dev/null &&
  "$BIN/create_dataset" -d fashion-mnist -o "$F/data5" --classes 5-9 --size 30 --seed 2 >/dev/null || return 1
  echo "this is not a PNG" > "$F/data/images/bad.png"
  printf 'path,label\nimages/bad.png,0\n%s\n' "$(sed -n 2p "$F/data/train.csv")" > "$F/data/badimg.csv"
  printf 'path,label\n%s\n%s\n' "$(sed -n 2p "$F/data/train.csv")" "$(sed -n 3p "$F/data/train.csv")" > "$F/data/two.csv"
  : > "$F/empty.csv"
  echo "path,label" > "$F/header.csv"
  cp "$F/data/train.csv" "$F/noread.csv" && chmod 000 "$F/noread.csv"
  mkdir -p "$F/emptydir"
  printf 'epochs = 3\nbogus-key = 1\n' > "$F/bad.cfg"
  printf '# model batch ranks threads\nlenet 64 2 1\nlenet 64 0 1\n' > "$F/bad.grid"
  mkdir -p "$F/idx" && /usr/bin/python3 - "$src" "$F" <<'EOF' || return 1
import gzip, struct, sys
src, f = sys.argv[1], sys.argv[2]
for kind, n in (("train", 20), ("t10k", 10)):
    im = gzip.open(f"{src}/{kind}-images-idx3-ubyte.gz").read()
    lb = gzip.open(f"{src}/{kind}-labels-idx1-ubyte.gz").read()
    open(f"{f}/idx/{kind}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 2051, n, 28, 28) + im[16:16 + n * 784])
    open(f"{f}/idx/{kind}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 2049, n) + lb[8:8 + n])
EOF
  # Tar shards of $DATA (train: 20 + 20 + 5 samples, test: 15) and damaged ones.
  "$BIN/shards" pack -i "$F/data" -o "$F/shards" --shard-samples 20 >/dev/null &&
  "$BIN/shards" pack -i "$F/data" -o "$F/shard1" --split train >/dev/null || return 1
  cp "$F/shards/train-000000.tar" "$F/shardtrunc.tar" && truncate -s 9000 "$F/shardtrunc.tar"
  cp -r "$F/shards" "$F/shardcount" &&
    sed -i '0,/"samples": 5$/s//"samples": 6/' "$F/shardcount/shards.json" && grep -q '"samples": 6' "$F/shardcount/shards.json" || return 1
  /usr/bin/python3 - "$F" <<'EOF3' || return 1
import io, sys, tarfile
f = sys.argv[1]
def tar(name, members):
    with tarfile.open(f"{f}/{name}", "w") as t:
        for n, d in members:
            i = tarfile.TarInfo(n); i.size = len(d); t.addfile(i, io.BytesIO(d))
png = open(f"{f}/data/" + open(f"{f}/data/train.csv").read().splitlines()[1].split(",")[0], "rb").read()
tar("shardnocls.tar", [("000000.png", png), ("000000.cls", b"1"), ("000001.png", png)])
tar("shardlabel.tar", [("000000.png", png), ("000000.cls", b"x")])
EOF3
  cp -r "$F/idx" "$F/idxtrunc" && truncate -s 5000 "$F/idxtrunc/train-images-idx3-ubyte"
  cp -r "$F/idx" "$F/idxlab" && printf '\x2a' | dd of="$F/idxlab/train-labels-idx1-ubyte" bs=1 seek=8 conv=notrunc 2>/dev/null
  env -u OPENBLAS_CORETYPE ./train -d "$F/data" -e 1 -b 8 -s "$F/run" --progress none --workers 0 >/dev/null || return 1
  local ck=$F/run/checkpoints/epoch-0001 d
  for d in old newer otherfmt trunc foreign; do cp -r "$ck" "$F/$d"; done
  set_field() { /usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(d,open(p,"w"),indent=2)' "$@"; }
  set_field "$F/old/trainer.json" format_version 0
  set_field "$F/newer/trainer.json" format_version 4
  set_field "$F/otherfmt/trainer.json" format '"other-tool"'
  truncate -s 1000 "$F/trunc/model.safetensors"
  # One flipped bit in the last tensor's data; a trainer.json changed by one digit, still JSON.
  cp -r "$ck" "$F/flip" && cp -r "$ck" "$F/flipjson" || return 1
  /usr/bin/python3 - "$F" <<'EOF2' || return 1
import re, sys
f = sys.argv[1]
b = bytearray(open(f"{f}/flip/model.safetensors", "rb").read()); b[-10] ^= 0x10
open(f"{f}/flip/model.safetensors", "wb").write(b)
t = open(f"{f}/flipjson/trainer.json").read()
t2 = re.sub(r'("samples_seen": *)(\d+)', lambda m: m.group(1) + str(int(m.group(2)) + 1), t, count=1)
assert t2 != t
open(f"{f}/flipjson/trainer.json", "w").write(t2)
EOF2
  cp "$F/data/train.csv" "$F/foreign/trainer.json"
  # A run a job would resume (stopped, not finished) whose checkpoint is of an old format.
  cp -r "$F/run" "$F/oldrun" && set_field "$F/oldrun/checkpoints/epoch-0001/trainer.json" format_version 0 &&
    set_field "$F/oldrun/summary.json" status '"KILLED"'
  cp -r "$F/run" "$F/runro"
  hostname > "$F/nodes" && hostname >> "$F/nodes"
  # $RO DIR CMD...: CMD with DIR read-only. Root ignores permissions, so root gets a read-only
  # bind mount in a private mount namespace (unshare -m); others get chmod -R a-w.
  cat > "$F/ro" <<'EOF'
#!/bin/bash
d=$1; shift
if [ "$(id -u)" = 0 ]; then
  exec unshare -m bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" || exit 99; shift; exec "$@"' ro "$d" "$@"
fi
chmod -R a-w "$d"; "$@"; rc=$?; chmod -R u+w "$d"; exit $rc
EOF
  # $PBS SCRIPT VAR=VALUE...: the job script as PBS runs it (see tests/shell/test_pbs_jobs.sh).
  cat > "$F/pbs" <<EOF
#!/bin/bash
s=\$1; shift
cd / && exec env PBS_JOBID=77.bad-inputs PBS_JOBNAME=bad-inputs PBS_NODEFILE="$F/nodes" PBS_O_WORKDIR="$REPO" NCPUS=2 "\$@" bash "$REPO/\$s"
EOF
  cat > "$F/slurm" <<EOF
#!/bin/bash
s=\$1; shift
cd / && exec env SLURM_JOB_ID=78 SLURM_JOB_NAME=bad-inputs SLURM_NTASKS=2 SLURM_SUBMIT_DIR="$REPO" "\$@" bash "$REPO/\$s"
EOF
  chmod +x "$F/ro" "$F/pbs" "$F/slurm"
}
t0=$(date +%s.%N)
fixtures || { fail "bad inputs: fixtures" "could not build the fixtures"; finish; }
if [ "$(id -u)" = 0 ]; then
  AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
  unshare -m true 2>/dev/null || RO_SKIP="unshare -m is not allowed here (root needs it for a read-only directory)"
else
  AS_NOBODY=""
fi
# The placeholders of the table's commands and messages. Replaced longest name first ($DATA5
# before $DATA), in messages as plain text, in commands by bash itself.
declare -A PH=(
  [BIN]=$BIN [DATA]=$F/data [DATA5]=$F/data5 [IDX]=$F/idx [IDXTRUNC]=$F/idxtrunc [IDXLAB]=$F/idxlab
  [RUN]=$F/run [RUNRO]=$F/runro [OLDRUN]=$F/oldrun [OLD]=$F/old [NEWER]=$F/newer [OTHERFMT]=$F/otherfmt
  [TRUNC]=$F/trunc [FOREIGN]=$F/foreign [FLIP]=$F/flip [FLIPJSON]=$F/flipjson [EMPTYCSV]=$F/empty.csv [HEADERCSV]=$F/header.csv
  [SHARDS]=$F/shards [SHARD1]=$F/shard1 [SHARDTRUNC]=$F/shardtrunc.tar [SHARDCOUNT]=$F/shardcount
  [SHARDNOCLS]=$F/shardnocls.tar [SHARDLABEL]=$F/shardlabel.tar
  [GRID]=$F/bad.grid [NOREAD]=$F/noread.csv [EMPTYDIR]=$F/emptydir [CFG]=$F/bad.cfg [RO]=$F/ro [PBS]=$F/pbs [SLURM]=$F/slurm
  [MPI]="mpiexec --oversubscribe" [AS_NOBODY]=$AS_NOBODY
)
names=$(for k in "${!PH[@]}" TMP; do echo "${#k} $k"; done | sort -rn | cut -d' ' -f2)
expand() {  # expand TEXT TMPDIR: the placeholders replaced by their values
  local s=$1 k v
  for k in $names; do
    if [ "$k" = TMP ]; then v=$2; else v=${PH[$k]}; fi
    s=${s//\$$k/$v}
  done
  printf '%s' "$s"
}
# Files and bytes under a path: equal before and after means nothing there was changed.
fingerprint() { (cd "$1" 2>/dev/null && find . -printf '%y %p\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha256sum; }
crash='terminate called|Segmentation fault|core dumped|Aborted|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|Traceback|\*\*\* Process received signal|Backtrace'

# ---- the rows ----------------------------------------------------------------------------------
# A row: | id | program | `command` | what is wrong | `message` | exact or substring | exit | `path` or - |
rows=0
run_row() {
  local id=$1 cmd=$2 msg=$3 match=$4 want_rc=$5 keep=$6 tmp out err rc before after n stray
  tmp=$(mktemp -d "$SCRATCH/row.XXXXXX")
  chmod 755 "$tmp"
  msg=$(expand "$msg" "$tmp")
  keep=$(expand "$keep" "$tmp")
  [ "$keep" = - ] || before=$(fingerprint "$keep")
  local t=$(date +%s%N)
  # Plain shell variables for eval, not exported: OpenMPI reads TMP (its session directory).
  ( cd "$REPO" && unset TMP && TMP=$tmp && for k in "${!PH[@]}"; do unset "$k"; printf -v "$k" '%s' "${PH[$k]}"; done &&
    eval "exec env -u OPENBLAS_CORETYPE timeout -k 5 20 $cmd" ) > "$tmp.out" 2> "$tmp.err" < /dev/null
  rc=$?
  t=$(( ($(date +%s%N) - t) / 1000000 ))
  out=$(cat "$tmp.out" "$tmp.err")
  # OpenMPI's notice blocks: only where the row runs under mpiexec.
  if [[ $cmd == *'$MPI'* || $cmd == *'$PBS'* || $cmd == *'$SLURM'* ]]; then
    # Also mpiexec's own runtime log lines ("[host:pid] [[J,0],0] ORTE_ERROR_LOG: ..."; OpenMPI
    # 4.1 sometimes logs one when MPI_Abort races its help-message forwarding).
    err=$(awk '/^-----+$/ { inside = !inside; next } !inside' "$tmp.err" |
      grep -vE '^\[[^]]+\] \[\[[0-9]+,0\],0\] ORTE_ERROR_LOG: ')
  else
    err=$(cat "$tmp.err")
  fi
  if [ "$match" = exact ]; then
    n=$(printf '%s\n' "$out" | grep -cxF -- "$msg")
    stray=$(printf '%s\n' "$err" | grep -vxF -- "$msg" | grep -c .)
  else
    n=$(printf '%s\n' "$out" | grep -cF -- "$msg")
    stray=$(printf '%s\n' "$err" | grep -vF -- "$msg" | grep -c .)
  fi
  [ "$keep" = - ] || after=$(fingerprint "$keep")
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$id" "timed out (hang?): $(tail -1 "$tmp.err")"
  elif [ "$rc" != "$want_rc" ]; then
    fail "$id" "exit $rc, expected $want_rc: $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"
  elif [ "$n" != 1 ]; then
    fail "$id" "message on $n lines, expected 1: $(printf '%s' "$out" | grep -v '^ ' | tail -2 | tr '\n' ' ')"
  elif [ "$stray" != 0 ]; then
    fail "$id" "$stray other line(s) on stderr: $(printf '%s\n' "$err" | grep -vF -- "$msg" | head -2 | tr '\n' ' ')"
  elif printf '%s\n' "$out" | grep -qE "$crash"; then
    fail "$id" "crash output: $(printf '%s\n' "$out" | grep -E "$crash" | head -1)"
  elif [ "$keep" != - ] && [ "$before" != "$after" ]; then
    fail "$id" "$keep changed"
  else
    pass "$id: $7 ($t ms)"
  fi
  # KEEP=DIR: each row's stdout and stderr kept as DIR/ID.out and DIR/ID.err.
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$tmp.out" "$KEEP/$id.out" && cp "$tmp.err" "$KEEP/$id.err"; }
  rm -rf "$tmp" "$tmp.out" "$tmp.err"
}

cell() { local c=$1; c=${c#"${c%%[![:space:]]*}"}; c=${c%"${c##*[![:space:]]}"}; c=${c#\`}; c=${c%\`}; printf '%s' "$c"; }
ids=()
while IFS= read -r line; do
  [[ $line =~ ^\|\ *B[0-9]+\ *\| ]] || continue
  IFS='|' read -ra f <<< "$line"
  if [ "${#f[@]}" != 9 ]; then fail "table" "row with ${#f[@]} cells (a '|' inside a cell?): $line"; continue; fi
  id=$(cell "${f[1]}") cmd=$(cell "${f[3]}") what=$(cell "${f[4]}" | tr -d '`') msg=$(cell "${f[5]}")
  match=$(cell "${f[6]}") rc=$(cell "${f[7]}") keep=$(cell "${f[8]}")
  case " ${ids[*]} " in *" $id "*) fail "$id" "duplicate id in $DOC"; continue ;; esac
  ids+=("$id")
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $id "* ]] || continue  # ONLY="B07 B12": just those rows
  [[ $match == exact || $match == substring ]] || { fail "$id" "match column is '$match'"; continue; }
  if [[ $cmd == *'$RO '* && -n ${RO_SKIP:-} ]]; then skip "$id" "$RO_SKIP"; continue; fi
  if [[ $cmd == *'$AS_NOBODY'* && $(id -u) = 0 ]] && ! command -v setpriv >/dev/null; then skip "$id" "needs setpriv as root"; continue; fi
  rows=$((rows + 1))
  run_row "$id" "$cmd" "$msg" "$match" "$rc" "$keep" "$what"
done < "$DOC"
[ -n "${ONLY:-}" ] || { [ "$rows" -ge 30 ] && pass "table: $rows rows run" || fail "table" "only $rows rows in $DOC (>= 30 expected)"; }
echo "bad inputs: $rows rows in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
finish
