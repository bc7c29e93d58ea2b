# Headless Chromium for the shell suites (sourced after common.sh, never run): load a page,
# dump its DOM after the scripts ran, take a screenshot, and check what came back. Debian's
# chromium (make deps) at /usr/bin/chromium, or $CHROMIUM. Tests run as root, so the sandbox
# is off; each call gets a fresh profile and a time limit, so a hung browser fails the case
# instead of the suite.
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
BROWSER_TIMEOUT=${BROWSER_TIMEOUT:-60}

# browser_available: true when the browser can be started (else the caller SKIPs).
browser_available() { [ -x "$CHROMIUM" ]; }

_browser() {
  local profile
  profile=$(mktemp -d "$SCRATCH/chromium-profile.XXXXXX")
  timeout -k 5 "$BROWSER_TIMEOUT" "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-extensions --disable-background-networking --user-data-dir="$profile" "$@"
  local rc=$?
  rm -rf "$profile"
  return $rc
}

# browser_dump_dom URL OUT: the page's DOM after its scripts ran, serialized to OUT.
browser_dump_dom() { _browser --dump-dom "$1" > "$2" 2>"$2.log" && [ -s "$2" ]; }

# browser_screenshot URL PNG [WIDTH,HEIGHT]: a screenshot of the page (default 1280,2000).
browser_screenshot() {
  rm -f "$2"
  _browser --hide-scrollbars --window-size="${3:-1280,2000}" --screenshot="$2" "$1" >"$2.log" 2>&1 && [ -s "$2" ]
}

# png_not_blank PNG [MIN_COLOURS]: succeeds, printing what it measured, when the image has at
# least MIN_COLOURS (default 8) distinct colours (quantised to 32 levels per channel) and
# between 2% and 95% of its pixels away from white; else fails saying which.
png_not_blank() {
  /usr/bin/python3 - "$1" "${2:-8}" <<'PY'
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
px = list(img.getdata())
colours = len({(r >> 3, g >> 3, b >> 3) for r, g, b in px})
inked = sum(1 for r, g, b in px if min(r, g, b) < 235) / len(px)
msg = f"{img.width}x{img.height}, {colours} colours, {100 * inked:.1f}% non-white"
ok = colours >= int(sys.argv[2]) and 0.02 <= inked <= 0.95
print(msg)
sys.exit(0 if ok else 1)
PY
}

# svg_charts_drawn DOM ID...: succeeds when each <svg class="chart" id=ID> in the dumped DOM
# holds at least one <path class="series ..."> whose d has coordinates; prints the counts or
# the first chart that is missing or empty.
svg_charts_drawn() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.svg = None; self.paths = {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in (a.get("class") or "").split():
            self.svg = a.get("id"); self.paths.setdefault(self.svg, 0)
        elif tag == "path" and self.svg and "series" in (a.get("class") or "").split():
            if len(re.findall(r"-?\d+(?:\.\d+)?", a.get("d") or "")) >= 2: self.paths[self.svg] += 1
    def handle_endtag(self, tag):
        if tag == "svg": self.svg = None
p = P(); p.feed(open(sys.argv[1], encoding="utf-8").read())
for cid in sys.argv[2:]:
    if cid not in p.paths: print(f"no chart {cid}"); sys.exit(1)
    if p.paths[cid] == 0: print(f"chart {cid} drew no series path"); sys.exit(1)
print(", ".join(f"{c}: {p.paths[c]}" for c in sys.argv[2:]))
PY
}
