#!/usr/bin/env bash
# Issue 20 items 19 and 16 (report part): shardlm report on hand-written run directories
# (report_fixtures.py: 7-digit steps, a run stopped early, one without an end event, flat
# series, no validation, a validation only the end event holds, attempts.json with nulls, a
# start time near a float32). Checked from the HTML by Python, and in a 1280 px headless Chromium
# window by a measuring script:
#  - every chart's y and x tick labels are distinct, and no tick label is cut at the chart's edge;
#  - no tile, card or table is wider than its box (scrollWidth > clientWidth), nothing scrolls
#    sideways; the status tile says "stopped early" / "no end event" whole;
#  - the loss legend names "validation" only for a run with a validation; the final validation
#    (end event) is a point of the chart and the figure of the tile and of the text summary;
#  - tables: the start time as a UTC date, floats without float32 noise (3e-05, 0.0003), the
#    attempts' headings as words (no raw keys) and no "null";
#  - the text summary says what each loss is over;
#  - MFU (tile, chart axis, summary) at most 100 % for steps an older trainer logged at 150 %.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "SKIP: chromium missing (scripts/setup.sh: chromium)"; exit 77; }
"$PY" "$HERE/report_fixtures.py" "$W"
for r in long running evald; do
    "$BIN" report "$W/$r" -o "$W/$r.html" > /dev/null
    check "report $r -o" 0 $?
    "$BIN" report "$W/$r" > "$W/$r.txt"
    check "report $r" 0 $?
done

# --- the HTML, read by Python
"$PY" - "$W" <<'PY' && ok "tick labels, legends, tables" || bad "tick labels, legends, tables"
import html, re, sys
w = sys.argv[1]
fails = []
def want(cond, what):
    if not cond:
        fails.append(what)
for run in ("long", "running", "evald"):
    h = open(f"{w}/{run}.html").read()
    svgs = re.findall(r"<svg\b.*?</svg>", h, re.S)
    want(len(svgs) == 6, f"{run}: {len(svgs)} charts")
    for s in svgs:
        cid = re.search(r'id="([^"]+)"', s).group(1)
        for cls in ("yt", "xt"):
            labs = re.findall(rf'class="{cls}"[^>]*>([^<]*)<', s)
            want(len(labs) == len(set(labs)), f"{run} {cid}: repeated {cls} labels {labs}")
    loss = svgs[0]
    legend = re.findall(r'<text class="lg"[^>]*>([^<]*)<', loss)
    if run == "evald":
        want(sorted(legend) == ["train", "validation"], f"{run}: loss legend {legend}")
        # the evals at 10, 20, 30 and the end event's validation after step 35
        want(loss.count("<circle") == 4, f"{run}: {loss.count('<circle')} validation points")
    else:
        want(legend == ["train"], f"{run}: loss legend {legend} (no validation in this run)")
    # MFU never above 100 %: the tile, the axis (the running run logged up to 150 %)
    mfu = re.search(r'MFU</div><div class="v">([0-9.]+)%</div>', h)
    want(mfu and float(mfu.group(1)) <= 100, f"{run}: MFU tile {mfu and mfu.group(1)}")
    ticks = [float(x) for x in re.findall(r'class="yt"[^>]*>([0-9.]+)<', svgs[3])]
    want(ticks and max(ticks) <= 100, f"{run}: MFU axis up to {max(ticks or [0])}")
    cfg = h[h.index("<h2>Configuration</h2>"):]
    cell = lambda k: re.search(rf"<td>{k}</td><td><code>([^<]*)</code>", cfg).group(1)
    want(cell("time") == "2026-12-01 21:45:36 UTC", f"{run}: time {cell('time')}")  # 1796161536
    want(cell("min_lr") == "3e-05", f"{run}: min_lr {cell('min_lr')}")
    want(cell("lr") == "0.0003", f"{run}: lr {cell('lr')}")
    want(cell("weight_decay") == "0.1", f"{run}: weight_decay {cell('weight_decay')}")
    want(cell("n_params") == "1234567", f"{run}: n_params {cell('n_params')}")
    if run == "long":
        a = h[h.index('id="attempts"'):h.index("</table>", h.index('id="attempts"'))]
        heads = [html.unescape(x) for x in re.findall(r"<th[^>]*>([^<]*)</th>", a)]
        want(heads[:3] == ["#", "started (UTC)", "ended"], f"attempt headings {heads}")
        want(not any("_" in x for x in heads), f"raw keys among the headings {heads}")
        want("null" not in a, "null in the attempts table")
        want("steps lost" in heads and "culprit rank" in heads, f"attempt headings {heads}")
        want("<b>reason:</b> no heartbeat progress" in a, "the reason row")
        want(re.search(r'<div class="v">1234567</div><div class="s">of 2000000 planned', h),
             "steps tile")
    if run == "evald":
        want(re.search(r'val loss</div><div class="v">3.6500</div><div class="s">end, after step 35',
                       h), "val loss tile: the end event's 3.65")
        want("Validation loss: over 20 batches of 4 x 128 tokens = 10240 positions" in h,
             "what the validation is over")
    if run == "running":
        want('<div class="v warn">no end event</div><div class="s">running, or ended without one'
             in h, "status tile of a run without an end event")
for f in fails:
    print("  " + f)
sys.exit(1 if fails else 0)
PY

# --- the text summary: the final validation and what each loss is over
has "evald: final validation from the end event" "$W/evald.txt" \
    "validation loss: 3.6500 after step 35, the end of training, over 20 batches of 4 x 128 tokens = 10240 positions"
has "evald: what the train loss is over" "$W/evald.txt" \
    "train loss: 5.0000 at step 1 -> 3.2223 at step 35 (each over one step's global batch: 4 x 128 tokens x 2 accumulated = 1024 positions)"
has "long: 2 ranks in the train loss's batch" "$W/long.txt" "4 x 128 tokens x 2 accumulated x 2 ranks = 2048 positions"
"$PY" - "$W/running.txt" <<'PY' && ok "running: summary MFU at most 100 %" || bad "running: summary MFU"
import re, sys
m = re.search(r"MFU ([0-9.]+)%", open(sys.argv[1]).read())
print(f"  MFU {m.group(1)}% (steps logged up to 150 %)")
assert float(m.group(1)) <= 100
PY
grep -q "validation" "$W/long.txt" && bad "long: a validation in the summary of a run without one" ||
    ok "long: no validation line"

# --- layout in a 1280 px window: a copy with a measuring script (the report has none)
MEASURE='<script>
var out=[],de=document.documentElement;
if(de.scrollWidth>de.clientWidth)out.push("page "+de.scrollWidth+">"+de.clientWidth);
document.querySelectorAll(".tile,.tile .v,.tile .s,.card,table,h1,.sub").forEach(function(e){
 if(e.scrollWidth>e.clientWidth+1)out.push((e.className||e.tagName)+" \""+e.textContent.slice(0,40)+"\" "+e.scrollWidth+">"+e.clientWidth);
 var r=e.getBoundingClientRect();if(r.right>de.clientWidth+1)out.push((e.className||e.tagName)+" right "+r.right);});
document.querySelectorAll("svg.chart").forEach(function(s){var c=s.getBoundingClientRect();
 s.querySelectorAll("text").forEach(function(t){var b=t.getBoundingClientRect();
  if(b.left<c.left-0.5||b.right>c.right+0.5||b.top<c.top-0.5||b.bottom>c.bottom+0.5)
   out.push(s.id+" text \""+t.textContent+"\" cut ("+Math.round(b.left-c.left)+".."+Math.round(b.right-c.left)+" of "+Math.round(c.width)+")");});});
document.body.setAttribute("data-overflow",out.length?out.join(" | "):"none");
</script></body>'
for r in long running evald; do
    "$PY" -c 'import sys; h=open(sys.argv[1]).read(); open(sys.argv[2],"w").write(h.replace("</body>", sys.argv[3]))' \
        "$W/$r.html" "$W/$r.measure.html" "$MEASURE"
    "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$W/chrome" \
        --window-size=1280,900 --dump-dom "file://$W/$r.measure.html" > "$W/$r.dom" 2> "$W/$r.chrome.err"
    check "chromium --dump-dom $r" 0 $?
    m=$("$PY" -c 'import html,re,sys; m=re.search(r"data-overflow=\"([^\"]*)\"", open(sys.argv[1]).read()); print(html.unescape(m.group(1)) if m else "no measurement")' "$W/$r.dom")
    [ "$m" = none ] && ok "1280 px: nothing overflows in $r" || bad "1280 px, $r: $m"
done
if [ -n "${SLM_REPORT_PNG:-}" ]; then # a screenshot to look at: SLM_REPORT_PNG=DIR
    for r in long running evald; do
        "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$W/chrome" \
            --window-size=1280,2400 --screenshot="$SLM_REPORT_PNG/$r.png" "file://$W/$r.html" \
            > /dev/null 2>&1
    done
fi
slm_finish
