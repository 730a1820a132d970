#!/usr/bin/env bash
# Token counts of instruction data (ft2 item 1): tokens_seen / tokens/s count the real
# (non-padding) input tokens of each window, not B x T. Expected values come from the shard
# files themselves, parsed here per docs/formats.md (sample starts = flag bit 1), and the
# loader's packing rule re-done in Python; plain data keeps B x T x steps.
. "$(dirname "$0")/../lib.sh"
fails=0
slm_corpus "$W/corpus.txt" 20000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
V=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^vocab_size: //p')
slm_tiny_config "$W/config.json" vocab_size="$V" max_position_embeddings=256
T=40
# 10 samples of very different lengths: some far shorter than T+1 (padding), some longer (cut)
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
L = [l for l in open(w + "/corpus.txt", encoding="utf-8").read().split("\n") if l.strip()]
with open(w + "/s.jsonl", "w") as f:
    for i in range(10):
        f.write(json.dumps({"prompt": L[i][:3 + 12 * (i % 4)] if i != 5 else " ".join(L[30:36]), "completion": " " + L[i + 20][:3 + 6 * (i % 3)]}) + "\n")
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/s.jsonl" --out "$W/d" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet || bad "prep failed"
# expected: per window (no packing: one sample each; packing: greedy in stream order) the sample
# tokens among its first T
"$PY" - "$W/d" "$T" > "$W/expect" <<'PY'
import glob, json, struct, sys
d, T = sys.argv[1], int(sys.argv[2])
man = json.load(open(d + "/manifest.json"))
lens = []
for sh in [s for s in man["shards"] if s["split"] == "train"]:  # manifest order = stream order
    b = open(d + "/" + sh["file"], "rb").read()
    assert b[:8] == b"SLMSHRD1" and struct.unpack_from("<I", b, 8)[0] == 2
    tb = struct.unpack_from("<I", b, 12)[0]
    n = struct.unpack_from("<Q", b, 16)[0]
    flags = b[64 + n * tb:64 + n * tb + n]
    for i, f in enumerate(flags):
        if f & 2: lens.append(0)
        lens[-1] += 1
lens = [min(x, T + 1) for x in lens]
wins = []
for x in lens:
    if wins and wins[-1] + x <= T + 1: wins[-1] += x
    else: wins.append(x)
print(len(lens), sum(min(x, T) for x in lens), " ".join(str(min(x, T)) for x in sorted(lens)))
print(len(wins), sum(min(x, T) for x in wins), " ".join(str(min(x, T)) for x in sorted(wins)))
PY
cat "$W/expect"
run() { # run NAME STEPS ARGS...
    local n=$1 s=$2
    shift 2
    "$BIN" train --data "$W/d" --model "$W/config.json" --batch 1 --seq $T --steps "$s" \
        --threads 1 --eval-every 0 --log-every 1 --out "$W/$n" "$@" > "$W/$n.log" 2>&1
    check "$n: trains" 0 $?
}
# per-step token counts from metrics.jsonl: successive differences of "tokens"; their multiset
# must equal the per-window counts (one epoch: every window once, in shuffled order)
steps_of() {
    "$PY" - "$1/metrics.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l]
tok = [e["tokens"] for e in ev]
per = [b - a for a, b in zip([0] + tok[:-1], tok)]
# tokens_per_s x ms_per_step is the step's count too (same wall time), to printing precision
for e, p in zip(ev, per):
    assert abs(e["tokens_per_s"] * e["ms_per_step"] / 1e3 - p) <= 1e-3 * p + 0.5, (e, p)
print(tok[-1], " ".join(str(x) for x in sorted(per)))
PY
}
read -r nS sumS listS < <(sed -n 1p "$W/expect")
read -r nP sumP listP < <(sed -n 2p "$W/expect")
[ "$nS" -eq 10 ] && ok "10 samples in the shards" || bad "samples: $nS"
[ "$nP" -lt "$nS" ] && ok "packing merges samples ($nP windows)" || bad "no packing happened"
run nopack "$nS" --no-packing
got=$(steps_of "$W/nopack")
[ "$got" = "$sumS $listS" ] && ok "--no-packing: tokens $sumS, per step $listS" ||
    bad "--no-packing: got '$got', expected '$sumS $listS'"
[ "$sumS" -lt $((nS * T)) ] && ok "padding excluded ($sumS < $((nS * T)))" || bad "no padding in the test"
has "--no-packing: checkpoint tokens_seen" <("$BIN" ckpt inspect "$W/nopack") "tokens_seen *$sumS\$"
run pack "$nP"
got=$(steps_of "$W/pack")
[ "$got" = "$sumP $listP" ] && ok "packed: tokens $sumP, per step $listP" ||
    bad "packed: got '$got', expected '$sumP $listP'"
# plain data: unchanged meaning, B x T per step
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/plain" --val-fraction 0 \
    --workers 1 --quiet
"$BIN" train --data "$W/plain" --model "$W/config.json" --batch 2 --seq $T --steps 3 --threads 1 \
    --eval-every 0 --log-every 1 --out "$W/plainrun" > "$W/plain.log" 2>&1
check "plain: trains" 0 $?
got=$(steps_of "$W/plainrun")
[ "$got" = "$((3 * 2 * T)) $((2 * T)) $((2 * T)) $((2 * T))" ] && ok "plain: B x T per step" ||
    bad "plain: got '$got'"
slm_finish
