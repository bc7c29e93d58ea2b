# `recommend report` in a real browser: five tiny runs (LeNet on synthetic data, 1 and 2 ranks,
# 2 epochs) and a failed sweep point make a report that headless Chromium loads; the DOM must
# hold every run (names escaped, the failure's reason shown), every chart must have drawn
# series paths, the sort script must sort, and a screenshot must not be blank. Bad input gets
# one line and leaves an existing report alone. With a fitted recommender (recommend fit on
# the same runs), the predicted-vs-measured chart must show every run. About 20 s on 2 cores.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/browser.sh"
cd "$REPO"
BIN=$MPICNN_BUILD/bin
runs=$SCRATCH/runs
mkdir -p "$runs"
# MPI's shared-memory segments go in the scratch directory, removed with it.
mkdir -p "$SCRATCH/shm"
export OMPI_MCA_btl_vader_backing_directory=$SCRATCH/shm
train() { env -u OPENBLAS_CORETYPE "$@" --dataset synthetic -m lenet -e 2 --progress none > "$SCRATCH/train.log" 2>&1; }
# Five finished runs: two scaling groups (batch 64 and 32 per rank, 1 and 2 ranks) and a
# single point, enough for `recommend fit` to cross-validate (its minimum is 5).
if ! train "$BIN/train" -s "$runs/lenet-1rank" ||
   ! train mpiexec -n 2 --oversubscribe "$BIN/train" -s "$runs/lenet-2ranks" ||
   ! train "$BIN/train" -b 32 -s "$runs/lenet-b32-1rank" ||
   ! train mpiexec -n 2 --oversubscribe "$BIN/train" -b 32 -s "$runs/lenet-b32-2ranks" ||
   ! train "$BIN/train" -b 128 -s "$runs/lenet-b128-1rank"; then
  fail "report: the runs train" "$(tail -1 "$SCRATCH/train.log")"
  finish
fi
finished="lenet-1rank lenet-2ranks lenet-b32-1rank lenet-b32-2ranks lenet-b128-1rank"
# A sweep point that failed (sweep.h's record), with markup in its name and reason.
bad='fail<i>&"x'
mkdir -p "$runs/$bad"
cat > "$runs/$bad/sweep_point.json" <<'JSON'
{"name": "fail", "options": {"model": "resnet20", "dataset": "synthetic", "batch-size": "64", "threads": "1"},
 "ranks": 4, "status": "FAILED", "error": "exit 137: killed <oom> & \"out of memory\""}
JSON

html=$SCRATCH/report.html
check "report: writes the page" "$BIN/recommend" report "$runs" -o "$html" --title 'Runs <test>'

# Bad input: one line, non-zero, and the report already written is left as it was.
sum=$(md5sum < "$html")
bad_input() {  # NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2 out rc
  shift 2
  out=$("$BIN/recommend" report "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && [[ $out == *"$want"* ]] && [ "$(md5sum < "$html")" = "$sum" ]; then
    pass "report: $name"
  else
    fail "report: $name" "rc $rc: $out"
  fi
}
mkdir -p "$SCRATCH/empty"
bad_input "-o missing is one line" "-o FILE is required" "$runs"
bad_input "no runs is one line" "holds no run directory" "$SCRATCH/empty" -o "$html"
bad_input "a missing folder is one line" "not a directory" "$SCRATCH/nope" -o "$html"
echo '{"per_epoch": ' > "$SCRATCH/empty/summary.json"
bad_input "an unreadable summary is one line" "summary.json" "$SCRATCH/empty" -o "$html"
bad_input "a missing model is one line" "nope.json" "$runs" -o "$html" -r "$SCRATCH/nope.json"

if ! browser_available; then
  skip "report: browser checks" "no $CHROMIUM (make deps installs chromium)"
  finish
fi

dom=$SCRATCH/dom.html
if ! browser_dump_dom "file://$html" "$dom"; then
  fail "report: chromium loads the page" "$(tail -1 "$dom.log")"
  finish
fi
pass "report: chromium loads the page"

# Every run is a row (the markup in the failed point's name is text, not elements), the
# failure shows its reason, nothing loads from the network.
verdict=$(/usr/bin/python3 - "$dom" "$bad" $finished <<'PY'
import re, sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.rows = {}; self.row = None; self.text = {}; self.tags = {}; self.ext = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "run":
            self.row = a.get("data-run"); self.rows[self.row] = a.get("data-status"); self.text[self.row] = ""
        elif self.row is not None: self.tags.setdefault(self.row, []).append(tag)
        for k in ("src", "href"):
            if a.get(k): self.ext.append(a[k])
        if tag == "link": self.ext.append("<link>")
    def handle_endtag(self, tag):
        if tag == "tr": self.row = None
    def handle_data(self, d):
        if self.row is not None: self.text[self.row] += d
p = P(); p.feed(open(sys.argv[1], encoding="utf-8").read())
bad = sys.argv[2]
want = {name: "FINISHED" for name in sys.argv[3:]}
want[bad] = "FAILED"
if p.rows != want: print(f"rows {p.rows}, want {want}"); sys.exit()
if "i" in p.tags.get(bad, []): print("the failed run's name became markup"); sys.exit()
if 'killed <oom> & "out of memory"' not in p.text[bad]: print("no failure reason in its row"); sys.exit()
if p.ext: print(f"external references: {p.ext[:3]}"); sys.exit()
print("ok")
PY
)
[ "$verdict" = ok ] && pass "report: the DOM holds every run, escaped, failure reason shown" \
  || fail "report: the DOM holds every run" "$verdict"

charts="chart-loss chart-top1 chart-epoch-time chart-throughput chart-efficiency chart-comm"
# shellcheck disable=SC2086
if out=$(svg_charts_drawn "$dom" $charts); then pass "report: every chart drew ($out)"; else fail "report: charts" "$out"; fi
# The check itself must be able to fail: the same DOM with the series paths emptied.
sed 's/\(class="series[^"]*"[^>]*\) d="[^"]*"/\1 d=""/g' "$dom" > "$SCRATCH/broken.html"
# shellcheck disable=SC2086
if svg_charts_drawn "$SCRATCH/broken.html" $charts >/dev/null; then
  fail "report: the chart check fails on empty paths" "it passed"
else
  pass "report: the chart check fails on empty paths"
fi

# Scaling: each 2-rank run is measured against its 1-rank one (same command line but -n), so
# both groups have a 2-rank row with a speedup and an efficiency; batch 128 is a lone point.
scaling=$(/usr/bin/python3 - "$dom" <<'PY'
import sys
from html.parser import HTMLParser
class P(HTMLParser):  # the scaling table's rows as lists of cell texts
    def __init__(self):
        super().__init__(); self.rows = []; self.cells = None
    def handle_starttag(self, tag, attrs):
        if tag == "tr" and dict(attrs).get("class") == "scaling": self.rows.append([]); self.cells = self.rows[-1]
        elif tag == "td" and self.cells is not None: self.cells.append("")
    def handle_endtag(self, tag):
        if tag == "tr": self.cells = None
    def handle_data(self, d):
        if self.cells: self.cells[-1] += d
p = P(); p.feed(open(sys.argv[1], encoding="utf-8").read())
# configuration, ranks, threads, runs, s/epoch, images/s, speedup, efficiency
two = [r for r in p.rows if r[1] == "2" and r[6].endswith("x") and r[7].endswith("%") and float(r[7][:-1]) > 0]
print(f"{len(p.rows)} rows, {len(two)} 2-rank rows with an efficiency")
PY
)
if [ "$scaling" = "5 rows, 2 2-rank rows with an efficiency" ]; then
  pass "report: scaling efficiency of the 2-rank runs ($scaling)"
else
  fail "report: scaling efficiency of the 2-rank runs" "$scaling, want 5 rows and 2"
fi

# The sort script: a click on "s/epoch" orders the runs by it, the failed run (no time) last.
sed 's|</body>|<script>document.querySelectorAll("#runs-table th")[12].click()</script></body>|' "$html" > "$SCRATCH/sorted.html"
if browser_dump_dom "file://$SCRATCH/sorted.html" "$SCRATCH/sorted.dom"; then
  order=$(grep -o 'class="run" data-run="[^"]*"' "$SCRATCH/sorted.dom" | sed 's/.*data-run="//; s/"$//' | tr '\n' ' ')
  # The order the summaries give (mean seconds per epoch; the failed point has none).
  want=$(/usr/bin/python3 - "$runs" $finished <<'PY'
import json, sys
def mean(n):
    s = json.load(open(f"{sys.argv[1]}/{n}/summary.json"))["epoch_seconds"]
    return sum(s) / len(s)
print(" ".join(sorted(sys.argv[2:], key=mean)) + " fail&lt;i&gt;&amp;&quot;x ")
PY
)
  if [ "$order" = "$want" ]; then pass "report: sorting by s/epoch ($order)"; else fail "report: sorting by s/epoch" "order $order, want $want"; fi
else
  fail "report: sorting by s/epoch" "chromium: $(tail -1 "$SCRATCH/sorted.dom.log")"
fi

png=$SCRATCH/report.png
if ! browser_screenshot "file://$html" "$png" 1280,2000; then
  fail "report: screenshot" "$(tail -1 "$png.log")"
elif out=$(png_not_blank "$png" 12); then
  pass "report: the screenshot is not blank ($out)"
  [ -n "${REPORT_SCREENSHOT:-}" ] && cp "$png" "$REPORT_SCREENSHOT"
else
  fail "report: the screenshot is not blank" "$out"
fi
/usr/bin/python3 -c 'from PIL import Image; Image.new("RGB", (1280, 2000), "white").save("'"$SCRATCH/blank.png"'")'
if png_not_blank "$SCRATCH/blank.png" 12 >/dev/null; then
  fail "report: the screenshot check fails on a blank page" "it passed"
else
  pass "report: the screenshot check fails on a blank page"
fi

# Predicted vs measured, with a recommender fitted on these five runs.
model=$SCRATCH/model.json
if ! fit_out=$("$BIN/recommend" fit "$runs" -o "$model" 2>&1); then
  fail "report: predicted vs measured" "recommend fit on the runs: $(echo "$fit_out" | tail -1)"
elif ! "$BIN/recommend" report "$runs" -o "$SCRATCH/predicted.html" -r "$model" > "$SCRATCH/predicted.log" 2>&1; then
  fail "report: predicted vs measured" "$(tail -1 "$SCRATCH/predicted.log")"
elif browser_dump_dom "file://$SCRATCH/predicted.html" "$SCRATCH/predicted.dom" &&
     out=$(svg_charts_drawn "$SCRATCH/predicted.dom" chart-predicted) &&
     [ "$(grep -c '<tr class="prediction"' "$SCRATCH/predicted.dom")" -eq 5 ]; then
  pass "report: predicted vs measured ($out)"
else
  fail "report: predicted vs measured" "${out:-no chart-predicted with both runs}"
fi
finish
