# `recommend serve` (src/recommend/serve.cpp) over tiny real runs, with curl and headless
# chromium: the printed address, /healthz, the port not shared, listening on 127.0.0.1 only,
# /api/runs (and a run added while serving), the report, a failing report's 500, 400s naming
# the parameter, 404, 405 for POST, 403 for a foreign Host, 503 without a recommender, the
# /suggest form in a browser, a clean stop on SIGINT and SIGTERM, and the suggestions (JSON,
# HTML, in the browser) from a model `recommend fit` makes of five runs. About 10-20 s (more
# on a loaded machine).
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"

RECOMMEND=$MPICNN_BUILD/bin/recommend
TRAIN=$MPICNN_BUILD/bin/train
for b in "$RECOMMEND" "$TRAIN"; do
  [ -x "$b" ] || { fail "serve: programs" "$b is not built (make apps)"; finish; }
done
if ! command -v curl > /dev/null; then
  skip "serve" "curl is not installed (make deps installs it)"
  finish
fi

runs=$SCRATCH/runs
mkdir -p "$runs"
train_run() {  # NAME [./train options]: one tiny synthetic run in $runs/NAME
  local name=$1
  shift
  env -u OPENBLAS_CORETYPE "$TRAIN" --dataset synthetic -m lenet -e 1 -s "$runs/$name" --progress none --threads 1 --workers 0 "$@" \
    > "$SCRATCH/train-$name.log" 2>&1 || { fail "serve: ./train $name" "$(tail -1 "$SCRATCH/train-$name.log")"; finish; }
}

# start_server NAME [serve options]: sets PID and PORT from the line it prints once listening.
servers=""
stop_all() { local p; for p in $servers; do kill -KILL "$p"; done; }
on_exit stop_all
start_server() {
  local name=$1 i
  shift
  "$RECOMMEND" serve --runs "$runs" --port 0 "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" &
  PID=$!
  servers="$servers $PID"
  for i in $(seq 100); do
    [ -s "$SCRATCH/$name.out" ] || ! kill -0 "$PID" 2> /dev/null && break
    sleep 0.1
  done
  PORT=$(sed -n 's|^serving http://127\.0\.0\.1:\([0-9][0-9]*\)/ (runs: .*, model: .*)$|\1|p' "$SCRATCH/$name.out")
}
# stop_server NAME SIGNAL: the server stops within 10 s, exits 0 and says so.
stop_server() {
  local name=$1 sig=$2 rc i
  kill "-$sig" "$PID"
  for i in $(seq 100); do kill -0 "$PID" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2> /dev/null; then
    fail "serve: $sig stops the server" "still running 10 s after SIG$sig"
    return
  fi
  wait "$PID"
  rc=$?
  servers=${servers/ $PID/}
  if [ "$rc" = 0 ] && grep -q "stopped" "$SCRATCH/$name.err"; then pass "serve: SIG$sig stops the server cleanly (exit 0)"
  else fail "serve: SIG$sig stops the server" "exit $rc: $(tail -1 "$SCRATCH/$name.err")"; fi
}
# get PATH [curl options]: CODE, BODY (a file) and LINES (the body's line count).
BODY=$SCRATCH/body
get() {
  local path=$1
  shift
  CODE=$(curl -s -o "$BODY" -w '%{http_code}' --max-time 20 "$@" "http://127.0.0.1:$PORT$path")
  LINES=$(wc -l < "$BODY")
}
# expect CODE PATH WORD: the answer is CODE with a one-line reason holding WORD.
expect() {
  local code=$1 path=$2 word=$3
  get "$path"
  if [ "$CODE" = "$code" ] && [ "$LINES" = 1 ] && grep -qF -- "$word" "$BODY"; then
    pass "serve: $path -> $code '$(head -c 90 "$BODY")'"
  else
    fail "serve: $path -> $code naming '$word'" "got $CODE, $LINES lines: $(head -c 200 "$BODY" | tr '\n' ' ')"
  fi
}
# runs_hold N NAMES...: /api/runs is a JSON list of N runs holding NAMES with their figures.
runs_hold() {
  /usr/bin/python3 - "$BODY" "$@" << 'PY'
import json, sys
runs = json.load(open(sys.argv[1])); n = int(sys.argv[2]); names = sys.argv[3:]
by = {r["name"]: r for r in runs}
assert len(runs) == n, f"{len(runs)} runs, not {n}"
for name in names:
    r = by[name]
    assert r["status"] == "FINISHED" and r["seconds_per_epoch"] > 0 and 0 <= r["final_top1"] <= 1, r
    assert r["config"]["model"] == "lenet" and r["config"]["ranks"] == 1 and r["summary"], r
PY
}

# chromium: DUMP_DOM URL -> $DOM, the page's DOM after its scripts ran.
CHROMIUM=/usr/bin/chromium
DOM=$SCRATCH/dom.html
dump_dom() {
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$SCRATCH/chromium" \
    --dump-dom "$1" > "$DOM" 2> "$SCRATCH/chromium.err"
}

train_run r1
start_server plain
if [ -z "$PORT" ]; then
  fail "serve: prints 'serving http://127.0.0.1:PORT/ (runs: DIR, model: FILE)'" \
    "$(cat "$SCRATCH/plain.out" "$SCRATCH/plain.err" | tail -2 | tr '\n' ' ')"
  finish
fi
pass "serve: listening: $(cat "$SCRATCH/plain.out")"

get /healthz
[ "$CODE" = 200 ] && [ "$(cat "$BODY")" = ok ] && pass "serve: /healthz 200 ok" || fail "serve: /healthz" "$CODE $(head -c 100 "$BODY")"

# The port is this server's alone: a second one refuses to share it (httplib's SO_REUSEPORT off).
if out=$(timeout 10 "$RECOMMEND" serve --runs "$runs" --port "$PORT" 2>&1); then
  fail "serve: a second server on the port" "it started: $out"
else
  echo "$out" | grep -q "cannot listen on 127.0.0.1:$PORT: Address already in use" \
    && pass "serve: a second server on the port -> '$out'" || fail "serve: a second server on the port" "$out"
fi

# 127.0.0.1 by default: the only listening socket on the port is the loopback's.
if command -v ss > /dev/null; then
  socks=$(ss -Hltn "sport = :$PORT" | awk '{print $4}' | sort -u | tr '\n' ' ')
  [ "$socks" = "127.0.0.1:$PORT " ] && pass "serve: listens on 127.0.0.1 only ($socks)" \
    || fail "serve: listens on 127.0.0.1 only" "listening sockets: '$socks'"
else
  skip "serve: listens on 127.0.0.1 only" "ss is not installed (iproute2)"
fi

get /api/runs
if [ "$CODE" = 200 ] && out=$(runs_hold 1 r1 2>&1); then pass "serve: /api/runs holds the run"
else fail "serve: /api/runs" "$CODE: ${out:-} $(head -c 200 "$BODY")"; fi
train_run r2 -b 32  # a run finished while serving appears on the next request
get /api/runs
if [ "$CODE" = 200 ] && out=$(runs_hold 2 r1 r2 2>&1); then pass "serve: /api/runs re-reads the runs (a new run appears)"
else fail "serve: /api/runs after a new run" "$CODE: $(echo "${out:-}" | tail -1)"; fi

get /
if [ "$CODE" = 200 ] && grep -qi '<html' "$BODY" && grep -q r1 "$BODY" && grep -q r2 "$BODY"; then
  pass "serve: / is the report (HTML naming both runs)"
  if [ -x "$CHROMIUM" ]; then
    dump_dom "http://127.0.0.1:$PORT/"
    grep -q '<svg' "$DOM" && grep -q r1 "$DOM" && grep -q r2 "$DOM" && pass "serve: chromium renders the report (runs, SVG)" \
      || fail "serve: chromium renders the report" "$(head -c 200 "$DOM" | tr '\n' ' ') $(tail -1 "$SCRATCH/chromium.err")"
  fi
else
  fail "serve: / is the report" "$CODE: $(head -c 200 "$BODY" | tr '\n' ' ')"
fi

# Refused queries: checked before whether a recommender is loaded, each named in one line.
expect 400 "/api/suggest?model=nosuchnet&data=synthetic" "model: 'nosuchnet' is not a known model"
expect 400 "/api/suggest?data=synthetic" "model: missing"
expect 400 "/api/suggest?model=lenet" "data: missing"
expect 400 "/api/suggest?model=lenet&data=synthetic&target_top1=abc" "target_top1: 'abc' is not"
expect 400 "/api/suggest?model=lenet&data=synthetic&max_ranks=0" "max_ranks: '0' is not"
expect 400 "/api/suggest?model=lenet&data=synthetic&max_nodes=2.5" "max_nodes: '2.5' is not"
expect 400 "/api/suggest?model=lenet&data=synthetic&colour=red" "unknown parameter 'colour'"
expect 400 "/api/suggest?model=lenet&model=resnet20&data=synthetic" "model: given more than once"
expect 400 "/api/suggest?model=%3Cscript%3E%0Aalert(1)&data=synthetic" "model: '<script> alert(1)'"
get "/suggest?model=lenet&data=synthetic&top=many"
if [ "$CODE" = 400 ] && grep -q 'id="suggest-form"' "$BODY" && grep -q "top: &#39;many&#39; is not" "$BODY"; then
  pass "serve: /suggest with a bad value -> 400, the form and the reason"
else fail "serve: /suggest with a bad value" "$CODE: $(head -c 200 "$BODY" | tr '\n' ' ')"; fi
expect 404 /nosuch "not found: /nosuch"
expect 503 "/api/suggest?model=lenet&data=synthetic" "no recommender loaded"
expect 503 /suggest "no recommender loaded"
get /api/runs -X POST -d x=1
[ "$CODE" = 405 ] && grep -q "GET only" "$BODY" && pass "serve: POST -> 405 (read-only)" || fail "serve: POST" "got $CODE"
get /healthz -H "Host: attacker.example:$PORT"
[ "$CODE" = 403 ] && pass "serve: a foreign Host header -> 403 (DNS rebinding)" || fail "serve: foreign Host" "got $CODE"

# A run directory that cannot be read: the report and the run list answer 500 with the reason.
mkdir "$runs/broken" && echo "not json" > "$runs/broken/summary.json"
expect 500 / "broken/summary.json"
expect 500 /api/runs "broken/summary.json"
rm -r "$runs/broken"

if [ -x "$CHROMIUM" ]; then
  dump_dom "http://127.0.0.1:$PORT/suggest?model=lenet&data=synthetic&max_ranks=x"
  if grep -q '<form id="suggest-form"' "$DOM" && grep -q '<option value="lenet" selected' "$DOM" \
     && grep -q 'max_ranks: .x. is not' "$DOM"; then
    pass "serve: chromium renders the refused /suggest form with its reason"
  else fail "serve: chromium /suggest" "$(head -c 300 "$DOM" | tr '\n' ' ') $(tail -1 "$SCRATCH/chromium.err")"; fi
else
  skip "serve: chromium" "$CHROMIUM is not installed (make deps installs chromium)"
fi
stop_server plain INT

# With a recommender fitted on the runs: the suggestions, as JSON, as HTML, in the browser.
# recommend fit needs five finished runs.
train_run r3 -b 16
train_run r4 -b 128
train_run r5 -b 256
if ! "$RECOMMEND" fit "$runs" -o "$SCRATCH/model.json" > "$SCRATCH/fit.log" 2>&1; then
  fail "serve: recommend fit on the runs" "$(tail -1 "$SCRATCH/fit.log")"
  finish
fi
start_server model -r "$SCRATCH/model.json"
[ -n "$PORT" ] || { fail "serve -r: starts" "$(tail -1 "$SCRATCH/model.err")"; finish; }
get "/api/suggest?model=lenet&data=synthetic&target_top1=0.05&max_ranks=2&max_nodes=1&top=3"
if [ "$CODE" = 200 ] && out=$(/usr/bin/python3 - "$BODY" 2>&1 << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))
q, s = j["query"], j["suggestions"]
assert q["model"] == "lenet" and q["max_ranks"] == 2 and q["top"] == 3, q
assert 1 <= len(s) <= 3, f"{len(s)} suggestions"
for x in s:
    for k in ("seconds_per_epoch", "seconds_sd", "epochs_to_target", "top1_at_target", "top1_sd",
              "seconds_to_target", "core_hours"):
        assert k in x, k
    assert x["config"]["model"] == "lenet" and 1 <= x["config"]["ranks"] <= 2, x["config"]
    assert x["seconds_per_epoch"] > 0, x
print(f'{len(s)} suggestions, first: {s[0]["config"]["summary"]}, {s[0]["seconds_per_epoch"]:.3f} s/epoch')
PY
); then pass "serve: /api/suggest -> 200 JSON ($out)"
else fail "serve: /api/suggest" "$CODE: $(echo "${out:-}" | tail -1) $(head -c 200 "$BODY" | tr '\n' ' ')"; fi
get "/suggest?model=lenet&data=synthetic&max_ranks=2&top=3"
rows=$(grep -c '^<tr><td>' "$BODY")
[ "$CODE" = 200 ] && [ "$rows" -ge 1 ] && pass "serve: /suggest submitted -> 200 HTML table ($rows rows)" \
  || fail "serve: /suggest submitted" "$CODE, $rows rows: $(head -c 200 "$BODY" | tr '\n' ' ')"
if [ -x "$CHROMIUM" ]; then
  dump_dom "http://127.0.0.1:$PORT/suggest"
  options=$(grep -o '<option value="[a-z0-9_]*"' "$DOM" | wc -l)
  grep -q '<form id="suggest-form"' "$DOM" && [ "$options" -ge 2 ] && pass "serve: chromium renders the /suggest form ($options options)" \
    || fail "serve: chromium /suggest form" "$(head -c 300 "$DOM" | tr '\n' ' ')"
  dump_dom "http://127.0.0.1:$PORT/suggest?model=lenet&data=synthetic&max_ranks=2&top=3"
  grep -q '<table id="suggestions">' "$DOM" && pass "serve: chromium shows the suggestions table" \
    || fail "serve: chromium suggestions table" "$(head -c 300 "$DOM" | tr '\n' ' ')"
fi
stop_server model TERM
finish
