#!/usr/bin/env bash
# Issue 11 "Progress": train, tokenizer train, prep, checkpoint export and load show progress on
# stderr; plain lines at every tenth when stderr is not a terminal (files here), one line
# rewritten with "\r" on a terminal (a pseudo-terminal from Python's pty module); --quiet turns
# it off; short work shows nothing. SHARDLM_PROGRESS_AFTER=0 shows it from the start. The
# expected figures are computed here: tenths of the step count, merges = vocab - 256 - specials,
# the tensor bytes of the exported safetensors header.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
slm_corpus "$W/corpus.txt" 40000
export SHARDLM_PROGRESS_AFTER=0
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 400 --out "$W/tok.json" 2> "$W/tok.err"
"$PY" - "$W/tok.err" <<'PY' && ok "tokenizer train: a line per tenth of the 141 merges" || bad "tokenizer train progress"
import re, sys
L = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("tokenizer train: ") and "%" in l]
assert "\r" not in open(sys.argv[1]).read()
pat = re.compile(r"^tokenizer train: (\d+)%, (\d+) of 141 merges, vocab (\d+), ETA \d+:\d\d$")
got = [tuple(map(int, pat.match(l).groups())) for l in L]
assert got[-1][:2] == (100, 141) and got[-1][2] == 397, got  # 256 bytes + 141 merges
pcts = [p for p, _, _ in got]
assert pcts == sorted(pcts) and len(got) <= 11, got
for p, k, _ in got:
    assert p == round(100 * k / 141), (p, k)
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/data" --val-fraction 0.1 \
    2> "$W/prep.err"
size=$(stat -c %s "$W/corpus.txt")
"$PY" - "$W/prep.err" "$size" <<'PY' && ok "prep: MB, MB/s, ETA" || bad "prep progress"
import re, sys
L = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("prep: ") and "MB/s" in l]
m = re.match(r"^prep: 100%, ([\d.]+) / ([\d.]+) MB, [\d.]+ MB/s, ETA 0:00$", L[-1])
assert m and m.group(1) == m.group(2) == f"{int(sys.argv[2]) / 1e6:.1f}", L
PY
slm_tiny_config "$W/config.json" vocab_size=400 num_hidden_layers=2
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 32 --threads 1
       --peak-gflops 10 --log-every 0)
"$BIN" "${TRAIN[@]}" --steps 40 --out "$W/run" > "$W/train.out" 2> "$W/train.err"
"$PY" - "$W/train.err" 40 <<'PY' && ok "train: plain line per tenth (step, tok/s, loss, ETA)" || bad "train progress"
import math, re, sys
text, N = open(sys.argv[1]).read(), int(sys.argv[2])
assert "\r" not in text and "\x1b" not in text
pat = re.compile(rf"^train: (\d+)%, step (\d+)/{N}, (\d+) tok/s, loss (\d+\.\d{{4}}), ETA \d+:\d\d$")
got = [pat.match(l) for l in text.split("\n") if l.startswith("train: ")]
assert all(got), text
steps = [int(m.group(2)) for m in got]
# the first step, then the first step at or past each tenth: ceil(k N / 10)
assert steps == [1] + [math.ceil(k * N / 10) for k in range(1, 11)], steps
assert all(int(m.group(1)) == round(100 * s / N) for m, s in zip(got, steps))
PY
"$BIN" "${TRAIN[@]}" --steps 50 --resume auto --quiet --out "$W/run" > /dev/null 2> "$W/quiet.err"
! grep -q "^train: \|^checkpoint load: " "$W/quiet.err" && ok "train --quiet: no progress" ||
    bad "train --quiet printed progress"
env -u SHARDLM_PROGRESS_AFTER "$BIN" "${TRAIN[@]}" --steps 3 --out "$W/short" > /dev/null 2> "$W/short.err"
! grep -q "^train: " "$W/short.err" && ok "short work (default 2 s): no progress" ||
    bad "short run printed progress"
"$BIN" ckpt export "$W/run" --hf "$W/hf" > /dev/null 2> "$W/export.err"
"$PY" - "$W/export.err" "$W/hf/model.safetensors" <<'PY' && ok "ckpt load and export: units, MB" || bad "ckpt export progress"
import json, re, struct, sys
text = open(sys.argv[1]).read()
b = open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", b, 0)[0]
hdr = json.loads(b[8:8 + n]); hdr.pop("__metadata__", None)
mb = sum(e - s for s, e in (t["data_offsets"] for t in hdr.values())) / 1e6
L = text.split("\n")
ex = [l for l in L if l.startswith("ckpt export: ")]
assert re.match(rf"^ckpt export: 100%, {mb:.0f} of {mb:.0f} MB, ETA 0:00$", ex[-1]), (ex, mb)
ld = [l for l in L if l.startswith("checkpoint load: ")]
# FSDP units: one per decoder layer (2) plus the root (embedding, final norm, lm_head)
assert re.match(r"^checkpoint load: 100%, unit 3 of 3, \d+ MB, ETA 0:00$", ld[-1]), ld
PY
# A terminal: one line redrawn in place; step lines start on a clean line.
"$PY" - "$BIN" "${TRAIN[@]}" --steps 300 --log-every 100 --out "$W/tty" <<'PY' && ok "terminal: one updating line, step lines intact" || bad "terminal progress"
import os, pty, re, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], ["shardlm"] + sys.argv[2:])
out = b""
while True:
    try:
        d = os.read(fd, 65536)
    except OSError:
        break
    if not d:
        break
    out += d
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, out[-400:]
t = out.decode()
bars = re.findall(r"\r\x1b\[Ktrain \[([#.]{20})\] +([\d.]+)% step (\d+)/300, \d+ tok/s, loss [\d.]+ ETA \d+:\d\d", t)
assert bars, t[-600:]
pct = [float(p) for _, p, _ in bars]
assert pct == sorted(pct), pct
for bar, p, s in bars:
    assert abs(float(p) - 100 * int(s) / 300) < 0.06 and bar.count("#") == int(20 * int(s) / 300), (bar, p, s)
for s in ("step      1/300 |", "step    100/300 |", "step    200/300 |", "step    300/300 |"):
    i = t.index(s)
    assert t[i - 1] == "\n" or t[i - 4:i] == "\r\x1b[K", repr(t[i - 20:i + 20])
assert "done: 300 steps" in t
print(f"  {len(bars)} redraws of the line")
PY
slm_finish
