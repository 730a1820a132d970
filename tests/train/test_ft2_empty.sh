#!/usr/bin/env bash
# A step whose global batch holds no target token (ft2 item 3; --no-packing, prompts longer
# than the window) is skipped on every rank: no AdamW update (rank files = the previous step's
# bytes after the 64-byte header; optimizer step not advanced), warned, counted in
# metrics.jsonl, loss NaN (null) instead of 0.0000. Which windows are empty is computed here from
# the shard files (docs/formats.md: flag bit 0 target, bit 1 sample start; a window = a
# sample's first T+1 tokens, its first token never a target).
. "$(dirname "$0")/../lib.sh"
fails=0
set +e
slm_corpus "$W/corpus.txt" 20000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
V=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^vocab_size: //p')
slm_tiny_config "$W/config.json" vocab_size="$V" max_position_embeddings=64
T=8
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
L = [l for l in open(w + "/corpus.txt", encoding="utf-8").read().split("\n") if l.strip()]
with open(w + "/s.jsonl", "w") as f:
    for i in range(8):  # long prompts (targets beyond T+1) and short samples, interleaved
        p = " ".join(L[i * 4:i * 4 + 3]) if i % 2 else "Q" + str(i)
        f.write(json.dumps({"prompt": p, "completion": " " + L[40 + i][:6]}) + "\n")
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/s.jsonl" --out "$W/d" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet || bad "prep failed"
n_empty=$("$PY" - "$W/d" "$T" <<'PY'
import json, struct, sys
d, T = sys.argv[1], int(sys.argv[2])
man = json.load(open(d + "/manifest.json"))
samples = []
for sh in [s for s in man["shards"] if s["split"] == "train"]:
    b = open(d + "/" + sh["file"], "rb").read()
    tb, n = struct.unpack_from("<I", b, 12)[0], struct.unpack_from("<Q", b, 16)[0]
    for f in b[64 + n * tb:64 + n * tb + n]:
        if f & 2: samples.append([])
        samples[-1].append(f & 1)
print(sum(1 for s in samples if not any(s[1:T + 1])))
PY
)
echo "empty windows: $n_empty of 8"
[ "$n_empty" -ge 2 ] && [ "$n_empty" -le 6 ] && ok "the data has $n_empty target-less windows" ||
    bad "test data: $n_empty empty windows"
# one epoch (8 steps of 1 window): every window once, a checkpoint every step
"$BIN" train --data "$W/d" --model "$W/config.json" --batch 1 --seq $T --steps 8 --threads 1 \
    --no-packing --eval-every 0 --log-every 1 --ckpt-every-steps 1 --ckpt-sync --out "$W/r" \
    > "$W/r.log" 2>&1
check "trains" 0 $?
ck() { printf '%s/checkpoints/step_%08d' "$W/r" "$1"; }
same() { cmp -s -i 64 "$(ck "$1")/rank_00000.bin" "$(ck "$2")/rank_00000.bin"; }
mapfile -t E < <("$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "step" and e.get("no_target"):
        assert e["skipped"] is True and e["loss"] is None, e
        print(e["step"], e["empty_skips"])
' "$W/r/metrics.jsonl")
[ "${#E[@]}" = "$n_empty" ] && ok "metrics.jsonl marks $n_empty steps skipped (no target)" ||
    bad "metrics.jsonl: ${#E[@]} no-target steps, expected $n_empty"
[ "$(grep -c 'update skipped on every rank' "$W/r.log")" = "$n_empty" ] && ok "warned $n_empty times" ||
    bad "warnings: $(grep -c 'update skipped on every rank' "$W/r.log")"
has "the step line says why" "$W/r.log" "update skipped (no target token)"
if grep -q "loss 0.0000" "$W/r.log"; then bad "a step printed loss 0.0000"; else ok "no loss 0.0000"; fi
k=0
for e in "${E[@]}"; do
    s=${e% *}
    k=$((k + 1))
    [ "${e#* }" = "$k" ] && ok "step $s: empty_skips $k" || bad "step $s: empty_skips ${e#* }, expected $k"
    [ "$s" -gt 1 ] || continue
    same $((s - 1)) "$s" && ok "step $s: params, AdamW m, v = step $((s - 1))'s bytes" ||
        bad "step $s changed the state"
    opt=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["optimizer"]["step"])' "$(ck "$s")/manifest.json")
    prev=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["optimizer"]["step"])' "$(ck $((s - 1)))/manifest.json")
    [ "$opt" = "$prev" ] && ok "step $s: AdamW step stays $prev" || bad "step $s: AdamW step $prev -> $opt"
done
# a step with targets does update
for s in 2 3 4 5 6 7 8; do
    printf '%s\n' "${E[@]}" | grep -q "^$s " && continue
    same $((s - 1)) "$s" && bad "step $s (with targets) did not update" || ok "step $s (with targets) updated"
    break
done
slm_finish
