#!/usr/bin/env bash
# Issue 11 "Reports": shardlm report on a real run (resumed once, with the launcher's
# attempts.json beside it) and on a schema-1 metrics.jsonl of an older run. The HTML is checked
# by independent tools: xmllint (every SVG is well-formed XML), headless Chromium (its DOM has
# every chart's drawn paths; its screenshot shows the charts' colours), and Python reading
# metrics.jsonl (point counts, the text summary's figures). Bad input: exit 1 / 2 naming it.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
command -v xmllint > /dev/null || { bad "xmllint missing (scripts/setup_test.sh: libxml2-utils)"; slm_finish; }
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { bad "chromium missing (scripts/setup_test.sh: chromium)"; slm_finish; }
slm_tiny_data "$W/data" 300 40000
slm_tiny_config "$W/config.json" vocab_size=300
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 4 --seq 32 --threads 1 --lr 3e-3
       --warmup 10 --peak-gflops 10 --eval-every 20 --eval-batches 2 --ckpt-every-steps 20
       --log-every 0 --out "$W/run")
"$BIN" "${TRAIN[@]}" --steps 60 > /dev/null 2>&1
"$BIN" "${TRAIN[@]}" --steps 80 --resume auto > /dev/null 2>&1
# attempts.json as shardlm launch writes it (src/launch: an object with an "attempts" array)
cat > "$W/run/attempts.json" <<'JSON'
{"health": [],
 "attempts": [
  {"attempt": 1, "start": 1796100000.0, "end": 1796100060.5, "detected": 1796100060.2,
   "last_progress": 1796100050.1, "first_step_time": 1796100004.2,
   "world": 2, "hosts": "node6,node7", "grad_accum": 1, "result": "hang",
   "reason": "no heartbeat progress for 10 s (--hang-timeout); rank 1 (pid 4242 on node7) is stopped",
   "exit_status": null, "exit_signal": 9, "culprit_rank": 1, "culprit_host": "node7",
   "flight_verdict": "flight recorder: rank 1 never entered collective #36 of group world (allreduce \"stop flags\" at step 61, phase step start; last dist context: step 60, backward reduce, FSDP unit 1) that ranks 0 and 1 wait in",
   "error": "", "start_step": 0, "steps_reached": 60, "steps_lost": 0},
  {"attempt": 2, "start": 1796100070.0, "end": 1796100100.0, "detected": 1796100100.0,
   "last_progress": 1796100099.5, "first_step_time": 1796100075.0,
   "world": 2, "hosts": "node6,node8", "grad_accum": 1, "result": "success", "reason": "",
   "exit_status": 0, "exit_signal": null, "culprit_rank": null, "culprit_host": null,
   "flight_verdict": "", "error": "", "start_step": 60, "steps_reached": 80, "steps_lost": 0}]}
JSON
before=$(cd "$W/run" && find . -type f | sort | xargs sha256sum)

# --- text summary against metrics.jsonl
"$BIN" report "$W/run" > "$W/summary.txt"
check "report RUN_DIR" 0 $?
cat "$W/summary.txt"
"$PY" - "$W/run" "$W/summary.txt" <<'PY' && ok "text summary figures" || bad "text summary figures"
import json, os, sys
run, text = sys.argv[1], open(sys.argv[2]).read()
ev = [json.loads(l) for l in open(run + "/metrics.jsonl")]
st = {e["step"]: e for e in ev if e["event"] == "step"}
last, first = st[max(st)], st[min(st)]
val = [st[s]["val_loss"] for s in sorted(st) if st[s]["val_loss"] is not None][-1]
want = [f"status: complete, 80 of 80 steps",
        f"train loss: {first['loss']:.4f} at step 1 -> {last['loss']:.4f} at step 80 (each over one step's global batch: 4 x 32 tokens = 128 positions)",
        f"validation loss: {val:.4f} after step 80, over 2 batches of 4 x 32 tokens = 256 positions",
        f"checkpoints: {len([d for d in os.listdir(run + '/checkpoints') if d.startswith('step_')])}, newest step_00000080",
        "attempts: 2 (attempts.json), the last: success", "events: 0 restarts, 1 continuation,"]
for w in want:
    assert w in text, (w, text)
PY

# --- HTML
"$BIN" report "$W/run" -o "$W/report.html" > "$W/o.txt"
check "report RUN_DIR -o" 0 $?
has "says where" "$W/o.txt" "report: wrote $W/report.html"
after=$(cd "$W/run" && find . -type f | sort | xargs sha256sum)
[ "$before" = "$after" ] && ok "run directory untouched" || bad "report changed the run directory"
"$PY" - "$W/report.html" <<'PY' && ok "self-contained: no script, no external resource" || bad "not self-contained"
import re, sys
h = open(sys.argv[1]).read()
assert "<script" not in h.lower() and "<link" not in h.lower() and "<img" not in h.lower()
urls = set(re.findall(r"https?://[^\s\"'<>)]+", h))
assert urls <= {"http://www.w3.org/2000/svg"}, urls
assert "@import" not in h and "url(" not in h
PY
# Every chart: a well-formed SVG (xmllint) with drawn paths; point counts from metrics.jsonl.
"$PY" - "$W/report.html" "$W" "$W/run/metrics.jsonl" <<'PY' && ok "six charts, well-formed, drawn" || bad "charts"
import json, re, subprocess, sys
h, w = open(sys.argv[1]).read(), sys.argv[2]
ev = [json.loads(l) for l in open(sys.argv[3])]
svgs = re.findall(r"<svg\b.*?</svg>", h, re.S)
ids = [re.search(r'id="([^"]+)"', s).group(1) for s in svgs]
assert ids == ["chart-loss", "chart-lr", "chart-throughput", "chart-mfu", "chart-time",
               "chart-memory"], ids
def paths(s, cls):
    return [d for c, d in re.findall(r'<path class="([^"]+)"[^>]* d="([^"]*)"', s) if c == cls]
def npts(d):
    return len(re.findall(r"[ML]\s*-?[\d.]+ -?[\d.]+", d))
for i, s in zip(ids, svgs):
    open(f"{w}/{i}.svg", "w").write(s)
    subprocess.run(["xmllint", "--noout", f"{w}/{i}.svg"], check=True)
    drawn = [d for c in ("line", "faint", "area", "dline") for d in paths(s, c) if npts(d) >= 2]
    assert drawn, i
    assert re.search(r'class="yt">', s) and re.search(r'class="xt">', s), i  # ticks
    assert '<text class="xl"' in s and '<text class="yl"' in s, i             # axis labels
    print(f"  {i}: {len(drawn)} drawn path(s), {sum(map(npts, drawn))} points")
n_steps = len({e["step"] for e in ev if e["event"] == "step"})
loss = svgs[0]
assert npts(paths(loss, "faint")[0]) == n_steps == 80, npts(paths(loss, "faint")[0])
n_val = len({e["step"] for e in ev if e["event"] == "step" and e["val_loss"] is not None})
assert loss.count("<circle") == n_val == 4, loss.count("<circle")
assert ">train</text>" in loss and ">validation</text>" in loss
assert loss.count('class="restart"') == 1  # the resume at step 60
assert len(paths(svgs[4], "area")) == 4 and ">checkpoint stall</text>" in svgs[4]
n_ranks = len({e["step"] for e in ev if e["event"] == "ranks"})
assert npts(paths(svgs[5], "line")[0]) == n_ranks and ">rank 0</text>" in svgs[5]
assert 'id="attempts"' in h and h.count("<tr>", h.index('id="attempts"'), h.index("</table>", h.index('id="attempts"'))) == 3
a = h[h.index('id="attempts"'):h.index("</table>", h.index('id="attempts"'))]
assert '<th data-key="attempt">#</th><th data-key="start">started (UTC)</th><th data-key="end">ended</th>' in a and "node7" in a
assert "2026-12-01 04:40:00 UTC" in a  # 1796100000 in UTC
assert "+60.5 s" in a and "+50.1 s" in a  # end, last_progress: seconds after the start
# free text in a row of its own under its attempt (the table of figures stays narrow)
assert '<tr class="d"><td colspan=' in a and "is stopped" in a and "never entered collective #36" in a
# options as the user gave them: --lr 3e-3 (written as float32 %.9g) reads 0.003, not 0.00300000003
assert "<td>lr</td><td><code>0.003</code>" in h, re.findall(r"<td>lr</td><td><code>[^<]*", h)
PY

# --- headless Chromium: its DOM and its pixels
"$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$W/chrome" --dump-dom \
    "file://$W/report.html" > "$W/dom.html" 2> "$W/chrome1.err"
check "chromium --dump-dom" 0 $?
"$PY" - "$W/dom.html" <<'PY' && ok "Chromium's DOM: every chart has drawn paths" || bad "Chromium DOM"
import re, sys
dom = open(sys.argv[1]).read()
svgs = re.findall(r"<svg\b.*?</svg>", dom, re.S)
assert len(svgs) == 6, len(svgs)
for s in svgs:
    ds = [d for d in re.findall(r'<path [^>]*\bd="([^"]+)"', s) if d.count("L") >= 1]
    assert ds, s[:200]
PY
# layout in a 1280 px window: the attempts table (every column, steps_lost included) fits the
# page and nothing scrolls sideways. A copy with a measuring script (the report has none).
sed 's#</body>#<script>var t=document.getElementById("attempts"),c=t.rows[0].cells,s=null;for(var i=0;i<c.length;i++)if(c[i].getAttribute("data-key")=="steps_lost")s=c[i];document.body.setAttribute("data-m",[document.documentElement.clientWidth,document.documentElement.scrollWidth,Math.ceil(t.getBoundingClientRect().right),s?Math.ceil(s.getBoundingClientRect().right):-1].join(" "))</script></body>#' \
    "$W/report.html" > "$W/measure.html"
"$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$W/chrome" --window-size=1280,900 \
    --dump-dom "file://$W/measure.html" > "$W/measure.dom" 2> "$W/chrome3.err"
read -r vw sw tr sl <<< "$(sed -n 's/.*data-m="\([0-9 -]*\)".*/\1/p' "$W/measure.dom")"
if [ -n "$sl" ] && [ "$sw" -le "$vw" ] && [ "$tr" -le "$vw" ] && [ "$sl" -gt 0 ] && [ "$sl" -le "$vw" ]; then
    ok "1280 px window: attempts table fits (right edge $tr, steps_lost at $sl, page $sw of $vw px)"
else
    bad "1280 px window: attempts table right edge '$tr', steps_lost '$sl', page '$sw' of '$vw' px"
fi
"$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$W/chrome" \
    --window-size=1400,1500 --screenshot="$W/report.png" "file://$W/report.html" > /dev/null 2> "$W/chrome2.err"
check "chromium --screenshot" 0 $?
"$PY" - "$W/report.png" <<'PY' && ok "screenshot shows the charts' colours" || bad "screenshot"
import struct, sys, zlib
import numpy as np
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, hdr = 8, b"", None
while pos < len(b):
    n, kind = struct.unpack(">I4s", b[pos:pos + 8])
    data = b[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", data)
    if kind == b"IDAT": idat += data
    pos += 12 + n
wd, ht, depth, ctype = hdr[:4]
assert depth == 8 and ctype in (2, 6), hdr
ch = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
img = np.zeros((ht, wd * ch), np.int32)
prev = np.zeros(wd * ch, np.int32)
stride = wd * ch
for y in range(ht):  # PNG filters (RFC 2083 section 6)
    f, row = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
    out = row.copy()
    if f == 1:
        for x in range(ch, stride): out[x] = (out[x] + out[x - ch]) & 255
    elif f == 2: out = (row + prev) & 255
    elif f == 3:
        for x in range(stride): out[x] = (row[x] + ((out[x - ch] if x >= ch else 0) + prev[x]) // 2) & 255
    elif f == 4:
        for x in range(stride):
            a = out[x - ch] if x >= ch else 0; c = prev[x - ch] if x >= ch else 0; p = a + prev[x] - c
            pa, pb, pc = abs(p - a), abs(p - prev[x]), abs(p - c)
            out[x] = (row[x] + (a if pa <= pb and pa <= pc else prev[x] if pb <= pc else c)) & 255
    img[y], prev = out, out
px = img.reshape(ht, wd, ch)[:, :, :3]
print(f"  {wd} x {ht} screenshot")
assert (wd, ht) == (1400, 1500)
def count(rgb, tol=40):
    return int((np.abs(px - np.array(rgb)).sum(axis=2) < tol).sum())
# Okabe-Ito blue (train loss, compute), orange (validation), green (LR), purple (tokens/s)
for name, rgb in (("blue", (0, 114, 178)), ("orange", (230, 159, 0)), ("green", (0, 158, 115)),
                  ("purple", (204, 121, 167))):
    n = count(rgb)
    print(f"  {name}: {n} pixels")
    assert n > 300, name
PY

# --- an older run: schema 1 (start / step / end only), no config.json, no checkpoints
mkdir -p "$W/old"
"$PY" - "$W/old/metrics.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"event": "start", "model": "tiny", "n_params": 5000, "batch": 2, "seq": 8,
                        "steps": 30, "peak_gflops": 10, "flops_per_token": 30000}) + "\n")
    for s in range(1, 31):
        f.write(json.dumps({"event": "step", "step": s, "loss": 5 - math.log(s), "lr": 1e-3,
                            "grad_norm": 1, "tokens_per_s": 1000 + s, "mfu": 0.003,
                            "ms_per_step": 16, "val_loss": 4.0 if s % 10 == 0 else None,
                            "tokens": 16 * s, "elapsed_s": 0.016 * s}) + "\n")
    f.write('{"event":"end","steps":30,"loss":1.6,"interrupted":false}\n')
PY
"$BIN" report "$W/old" -o "$W/old.html" > /dev/null
check "schema-1 run: report -o" 0 $?
"$PY" - "$W/old.html" <<'PY' && ok "schema-1 run: charts drawn, gaps explained" || bad "schema-1 report"
import re, sys
h = open(sys.argv[1]).read()
svgs = re.findall(r"<svg\b.*?</svg>", h, re.S)
assert len(svgs) == 6
for s in svgs[:5]:
    assert re.search(r'<path class="(line|faint)"[^>]* d="M[^"]+L', s), s[:120]
assert "schema 1" in svgs[4] and "no per-rank figures" in svgs[5]
PY
"$BIN" report "$W/old" | grep -q "status: complete, 30 of 30 steps" && ok "schema-1 run: summary" ||
    bad "schema-1 summary"

# --- bad input
set +e
"$BIN" report "$W/data" > /dev/null 2> "$W/e1.txt"; check "not a run directory: exit 1" 1 $?
has "names metrics.jsonl" "$W/e1.txt" "$W/data/metrics.jsonl: no such file"
"$BIN" report > /dev/null 2> "$W/e2.txt"; check "no RUN_DIR: exit 2" 2 $?
"$BIN" report "$W/run" "$W/old" > /dev/null 2>&1; check "two RUN_DIRs: exit 2" 2 $?
"$BIN" report "$W/run" -o "$W/nope/r.html" > /dev/null 2> "$W/e3.txt"; check "unwritable -o: exit 1" 1 $?
has "names the output" "$W/e3.txt" "$W/nope/r.html"
mkdir -p "$W/junk" && printf 'hello\nworld\n' > "$W/junk/metrics.jsonl"
"$BIN" report "$W/junk" > /dev/null 2> "$W/e4.txt"; check "garbage metrics.jsonl: exit 1" 1 $?
has "names file and line" "$W/e4.txt" "junk/metrics.jsonl: line 1: expected one JSON object"
set -e
slm_finish
