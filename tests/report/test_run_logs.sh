#!/usr/bin/env bash
# Issue 11 "Logs": per-rank log files, warnings of any rank on rank 0's output, and the
# metrics.jsonl events (schema 2, docs/formats.md), on a 2-rank FULL_SHARD run with checkpoints
# and validation, its resume, and a run that diverges. Expected values come from outside the
# trainer: the host name (hostname), the clock (date), file sizes (os.stat), tokens = step x B x
# T x world, and the stdout step lines.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR; $1 = mpirun.
. "$(dirname "$0")/../lib.sh"
MPIEXEC="${1:-$MPIEXEC}"
slm_tiny_data "$W/data" 300 40000
slm_tiny_config "$W/config.json" vocab_size=300
T0=$(date -u +%s)
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 32 --threads 1
       --peak-gflops 10 --eval-every 10 --eval-batches 2 --ckpt-every-steps 10 --log-every 5
       --out "$W/run")
# SHARDLM_LOG_PROBE=7: every rank logs a warning at step 7 (docs/observability.md).
SHARDLM_LOG_PROBE=7 slm_mpirun 2 "$BIN" "${TRAIN[@]}" --steps 24 > "$W/out1.txt" 2> "$W/err1.txt"
check "2-rank run" 0 $?
T1=$(date -u +%s)
HOST=$(hostname)

for r in 0 1; do
    [ -s "$W/run/logs/rank_0000$r.log" ] && ok "logs/rank_0000$r.log written" ||
        bad "logs/rank_0000$r.log missing"
done
# rank 0 prints rank 1's warning with the rank named (it arrives at a step boundary)
[ "$(grep -c "^shardlm\[rank 1/2 on $HOST, forwarded\] warning: log probe: rank 1 on $HOST at step 7$" "$W/err1.txt")" = 1 ] &&
    ok "rank 1's warning reaches rank 0's output, rank and host named" ||
    { bad "rank 1's warning not forwarded"; cat "$W/err1.txt"; }
"$PY" - "$W/run/logs" "$HOST" "$T0" "$T1" "$W/out1.txt" <<'PY' && ok "log lines: UTC time, rank, host, level" || bad "log lines"
import datetime, re, sys
d, host, t0, t1, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
pat = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z rank=(\d+) host=(\S+)( forwarded=1)? "
                 r"level=(debug|info|warning|error) (.*)$")
logs = {}
for r in (0, 1):
    lines = open(f"{d}/rank_{r:05d}.log").read().splitlines()
    assert lines, r
    for l in lines:
        m = pat.match(l)
        assert m, (r, l)
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        assert t0 - 1 <= t <= t1 + 1, (l, t0, t1)
        assert m.group(3) == host, l
        # rank 0's file also holds the lines forwarded from rank 1, marked
        assert int(m.group(2)) == r or (r == 0 and m.group(4) and m.group(2) == "1"), l
    logs[r] = lines
want = [f"level=warning log probe: rank {r} on {host} at step 7" for r in (0, 1)]
assert any(l.endswith(want[1]) for l in logs[1]), "rank 1's own warning"
assert any(l.endswith(want[1]) and "forwarded=1" in l for l in logs[0]), "forwarded copy"
assert not any("step " in l and "/24 |" in l for l in logs[1]), "step lines are rank 0's"
steps = [l for l in open(out).read().splitlines() if l.startswith("step ")]
assert len(steps) == 6, steps  # steps 1, 5, 10, 15, 20, 24
for s in steps:
    assert any(l.endswith("level=info " + s) for l in logs[0]), s
exch = [l for l in logs[1] if "per-step exchange" in l]
print("  " + exch[-1].split("level=info ")[1])
PY

# metrics.jsonl, schema 2
"$PY" - "$W/run" "$HOST" 2 2 32 24 <<'PY' && ok "metrics.jsonl events (schema 2)" || bad "metrics.jsonl events"
import json, os, sys
run, host, W, B, T, N = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
ev = [json.loads(l) for l in open(run + "/metrics.jsonl")]
assert all(isinstance(e.get("event"), str) for e in ev)
st = ev[0]
assert st["event"] == "start" and st["schema"] == 2 and st["world"] == W, st
assert st["hosts"] == [host] * W and st["sharding"] == "FULL_SHARD" and st["start_step"] == 0
steps = [e for e in ev if e["event"] == "step"]
assert [e["step"] for e in steps] == list(range(1, N + 1))
for e in steps:
    assert e["tokens"] == e["step"] * B * T * W, e
    assert e["data_ms"] >= 0 and e["comm_ms"] >= 0 and e["ckpt_ms"] >= 0
    assert e["data_ms"] + e["comm_ms"] <= e["ms_per_step"] + 0.05, e
ts = [e["time"] for e in ev if "time" in e]
assert ts == sorted(ts)
evals = {e["step"]: e["val_loss"] for e in ev if e["event"] == "eval"}
assert evals == {e["step"]: e["val_loss"] for e in steps if e["val_loss"] is not None}, evals
assert sorted(evals) == [10, 20, 24]
ranks = [e for e in ev if e["event"] == "ranks"]
assert [e["step"] for e in ranks] == [1, 10, 20, 24]
for e in ranks:
    for k in ("rss_bytes", "peak_rss_bytes", "cpu_util", "step_ms", "data_ms", "comm_ms"):
        assert len(e[k]) == W, (k, e)
    assert all(1e6 < x < 1e11 for x in e["rss_bytes"]) and all(
        p >= r for p, r in zip(e["peak_rss_bytes"], e["rss_bytes"]))
ck = {e["step"]: e for e in ev if e["event"] == "checkpoint"}
root = run + "/checkpoints"
dirs = sorted(d for d in os.listdir(root) if d.startswith("step_"))
assert sorted(ck) == [int(d[5:]) for d in dirs] == [10, 20, 24], (sorted(ck), dirs)
for d in dirs:
    size = sum(os.path.getsize(os.path.join(root, d, f)) for f in os.listdir(os.path.join(root, d)))
    assert ck[int(d[5:])]["bytes"] == size and ck[int(d[5:])]["dir"] == d, (d, size, ck)
assert ev[-1]["event"] == "end" and ev[-1]["steps"] == N
PY

# resume: a restart event naming the checkpoint, only the new checkpoints reported
slm_mpirun 2 "$BIN" "${TRAIN[@]}" --steps 30 --resume auto > /dev/null 2>&1
check "resumed run" 0 $?
"$PY" - "$W/run" <<'PY' && ok "restart event; steps and checkpoints continue" || bad "restart event"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
i = [k for k, e in enumerate(ev) if e["event"] == "start"]
assert len(i) == 2 and ev[i[1]]["start_step"] == 24, i
rs = [e for e in ev if e["event"] == "restart"]
assert len(rs) == 1 and rs[0]["step"] == 24 and rs[0]["from"].endswith("step_00000024"), rs
later = ev[i[1]:]
assert [e["step"] for e in later if e["event"] == "step"] == list(range(25, 31))
assert [e["step"] for e in later if e["event"] == "checkpoint"] == [30]
PY
n0=$(wc -l < "$W/run/logs/rank_00001.log")
[ "$(grep -c 'training starts at step 24 of 30' "$W/run/logs/rank_00001.log")" = 1 ] &&
    ok "rank logs are appended across attempts ($n0 lines)" || bad "rank log not appended"

# a diverging run: "nonfinite" and "error" events, no "end"
set +e
"$BIN" train --data "$W/data" --model "$W/config.json" --batch 2 --seq 32 --threads 1 \
    --steps 5 --lr 1e30 --out "$W/nan" > /dev/null 2> "$W/err_nan.txt"
rc=$?
set -e
check "diverging run exits 1" 1 $rc
"$PY" - "$W/nan/metrics.jsonl" <<'PY' && ok "nonfinite and error events" || bad "nonfinite event"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
nf = [e for e in ev if e["event"] == "nonfinite"]
assert len(nf) == 1 and "training loss is" in nf[0]["message"], ev[-3:]
last_step = max(e["step"] for e in ev if e["event"] == "step")
assert nf[0]["step"] == last_step + 1 and ev[-1]["event"] == "error" and ev[-1]["status"] == "numeric"
assert not any(e["event"] == "end" for e in ev)
PY
grep -q "level=error train: step" "$W/nan/logs/rank_00000.log" 2> /dev/null &&
    ok "the final error line is in the log" || bad "final error line not in the log"
slm_finish
