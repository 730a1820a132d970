#!/usr/bin/env bash
# `shardlm report` tells a launcher restart from a user's continuation and shows each session on
# its own (issue 20 item 7). One run directory, five sessions:
#  1. mpirun -np 2 train (--grad-accum 2) to step 8;  2. by hand, --resume auto at 4 ranks
#     (--grad-accum 1: the same global batch) to step 16;  3. by hand at 2 ranks to step 24;
#  4. `shardlm launch` at 2 ranks to step 40, whose rank 1 is killed before step 30 (a new
#     launch: a continuation), and 5. its restart (a launcher restart).
# Expected from metrics.jsonl, read by Python (an independent reader): each session's start
# step, world and SHARDLM_ATTEMPT from its start event, its steps from the step records, its
# tokens/s and MFU over its steps after the first. The report must say 1 launcher restart and 3
# continuations (before: "4 restarts") and give the 2- and 4-rank sessions their own figures.
# Usage: test_launch_sessions.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
R=$W/run
slm_mpirun 2 "$BIN" train "${TR[@]}" --grad-accum 2 --steps 8 --out "$R" > "$W/1.log" 2>&1 ||
    { bad "session 1"; cat "$W/1.log"; }
slm_mpirun 4 "$BIN" train "${TR[@]}" --grad-accum 1 --steps 16 --out "$R" --resume auto > "$W/2.log" 2>&1 ||
    { bad "session 2"; cat "$W/2.log"; }
slm_mpirun 2 "$BIN" train "${TR[@]}" --grad-accum 2 --steps 24 --out "$R" --resume auto > "$W/3.log" 2>&1 ||
    { bad "session 3"; cat "$W/3.log"; }
SHARDLM_FAULT=kill:rank=1:step=30 "$BIN" launch --nproc 2 "${LA[@]}" --no-health-check -- \
    "${TR[@]}" --grad-accum 2 --steps 40 --out "$R" > "$W/4.log" 2>&1
check "the launch (one restart) finishes" 0 $?
"$BIN" report "$R" > "$W/report.txt" 2>&1
check "report" 0 $?
cat "$W/report.txt"
"$BIN" report "$R" -o "$W/report.html" > /dev/null 2>&1
"$PY" - "$R/metrics.jsonl" "$W/report.txt" "$W/report.html" <<'PY' && ok "sessions as metrics.jsonl has them" || bad "sessions"
import json, re, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
text, html = open(sys.argv[2]).read(), open(sys.argv[3]).read()
starts = [e for e in ev if e["event"] == "start"]
steps = {}
for e in ev:  # the last record of a step wins, as a resumed run logs it again
    if e["event"] == "step":
        steps[e["step"]] = e
how = ["start"] + ["launcher restart" if s["attempt"] >= 2 else "new launch" if s["attempt"] == 1
                   else "resumed by hand" for s in starts[1:]]
assert how == ["start", "resumed by hand", "resumed by hand", "new launch", "launcher restart"], how
assert [s["world"] for s in starts] == [2, 4, 2, 2, 2], [s["world"] for s in starts]
assert "sessions: 5: 1 launcher restart, 3 continuations" in text, text
assert "events: 1 restart, 3 continuations," in text, text
assert "2 to 4 ranks" in text.splitlines()[0], text
def si(x):  # report_fmt_si's 3 significant digits, back to a number
    m = re.fullmatch(r"([0-9.]+)([kMG]?)", x)
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
for k, s in enumerate(starts):
    lo = s["start_step"]
    hi = starts[k + 1]["start_step"] if k + 1 < len(starts) else 1 << 62
    mine = [steps[t] for t in sorted(steps) if lo < t <= hi]
    rest = mine[1:]
    tps = sum(x["tokens_per_s"] * x["ms_per_step"] for x in rest) / sum(x["ms_per_step"] for x in rest)
    mfu = sum(x["mfu"] * x["ms_per_step"] for x in rest) / sum(x["ms_per_step"] for x in rest)
    m = re.search(r"^  %d \(%s\): steps (\d+)-(\d+), (\d+) ranks?, (\S+) tok/s, MFU ([0-9.]+)%%$"
                  % (k + 1, re.escape(how[k])), text, re.M)
    assert m, (k, text)
    assert (int(m.group(1)), int(m.group(2))) == (mine[0]["step"], mine[-1]["step"]), (k, m.groups())
    assert int(m.group(3)) == s["world"], (k, m.groups())
    assert abs(si(m.group(4)) - tps) <= 0.006 * tps, (k, m.group(4), tps)  # 3 digits
    assert abs(float(m.group(5)) - 100 * mfu) <= 0.051, (k, m.group(5), mfu)
t = html[html.index('id="sessions"'):html.index("</table>", html.index('id="sessions"'))]
assert t.count("<tr>") == 6 and "launcher restart" in t and "resumed by hand" in t, t
PY
no_orphans "no process left"
slm_finish
