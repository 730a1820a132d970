#!/usr/bin/env bash
# The skip counters survive a resume: checkpoints record them (manifest "skips",
# docs/formats.md) and a resumed run counts on from them. Expected counts come from what the
# test injects (SHARDLM_FAULT=nan-grad at known steps) or from the shard files (windows
# without a target token, computed here in Python), never from the trainer's own output.
#  1. --on-nonfinite skip, NaN at steps 2 and 4 of 6: the uninterrupted run's end record says
#     nonfinite_skips 2 (and the done: line); the same run killed before step 4 and resumed
#     from step 3 (manifest skips.nonfinite 1) ends with the same record, its step 4 says
#     nonfinite_skips 2, and its step-6 rank file equals the uninterrupted run's bitwise;
#  2. --max-nonfinite-skips 1 with NaN at steps 3 and 4: the uninterrupted run stops at step 4
#     (2 in a row); killed before step 4 and resumed, it stops there too (the run of skips is
#     recorded: skips.nonfinite_in_a_row 1 at step 3);
#  3. instruction data with --no-packing, one window per step, one epoch: empty_skips in the
#     end record = the target-less windows of the data, also when killed before step 5 and resumed;
#  4. an old-format manifest (no "skips") resumes as before: no error, counting from 0 (end
#     record nonfinite_skips 1: only step 4), the weights bitwise those of run 1;
#  5. "skips" that contradict themselves or the step are refused naming the field.
# Usage: test_skips_resume.sh. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e # exit codes of runs expected to fail are read below
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 6 --threads 1
    --peak-gflops 10 --ckpt-every-steps 1 --ckpt-sync --log-every 1 --on-nonfinite skip)
ck() { printf '%s/checkpoints/step_%08d' "$1" "$2"; }
endrec() { # endrec RUN_DIR KEY: KEY of the last "end" event of metrics.jsonl
    "$PY" -c '
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print([x for x in e if x["event"] == "end"][-1].get(sys.argv[2]))' "$1/metrics.jsonl" "$2"
}
stepkey() { # stepkey RUN_DIR STEP KEY: KEY of the last "step" event of STEP
    "$PY" -c '
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print([x for x in e if x["event"] == "step" and x["step"] == int(sys.argv[2])][-1].get(sys.argv[3]))' \
        "$1/metrics.jsonl" "$2" "$3"
}
mkey() { # mkey MANIFEST PYEXPR_ON_m
    "$PY" -c 'import json, sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# --- 1. non-finite skips across a resume
SHARDLM_FAULT=nan-grad:step=2,nan-grad:step=4 "$BIN" "${TR[@]}" --out "$W/a" > "$W/a.log" 2>&1
check "uninterrupted skip run" 0 $?
[ "$(endrec "$W/a" nonfinite_skips)" = 2 ] && ok "uninterrupted: end record nonfinite_skips 2" ||
    bad "uninterrupted: end record nonfinite_skips $(endrec "$W/a" nonfinite_skips), expected 2"
has "uninterrupted: the done line counts 2" "$W/a.log" "^done: 6 steps.* | 2 skipped (non-finite)"
SHARDLM_FAULT=nan-grad:step=2,kill:rank=0:step=4 "$BIN" "${TR[@]}" --out "$W/b" > "$W/b.log" 2>&1
[ $? -ne 0 ] && [ -d "$(ck "$W/b" 3)" ] && [ ! -d "$(ck "$W/b" 4)" ] &&
    ok "run killed before step 4, step 3 committed" || bad "kill run"
[ "$(mkey "$(ck "$W/b" 3)/manifest.json" 'm["skips"]')" = "{'nonfinite': 1, 'nonfinite_in_a_row': 0, 'no_target': 0}" ] &&
    ok "step-3 manifest: skips nonfinite 1, in a row 0, no_target 0" ||
    bad "step-3 manifest skips: $(mkey "$(ck "$W/b" 3)/manifest.json" 'm.get("skips")')"
"$BIN" ckpt inspect "$(ck "$W/b" 3)" > "$W/b.inspect" 2>&1
has "ckpt inspect shows the counters" "$W/b.inspect" "^skips  *1 non-finite (0 in a row at the end), 0 without a target token"
SHARDLM_FAULT=nan-grad:step=4 "$BIN" "${TR[@]}" --out "$W/b" --resume auto > "$W/b2.log" 2>&1
check "resumed skip run" 0 $?
has "resumed from step 3" "$W/b2.log" "resumed from .*step_00000003"
[ "$(stepkey "$W/b" 4 nonfinite_skips)" = 2 ] && ok "resumed: step 4 says nonfinite_skips 2" ||
    bad "resumed: step 4 nonfinite_skips $(stepkey "$W/b" 4 nonfinite_skips), expected 2"
[ "$(endrec "$W/b" nonfinite_skips)" = "$(endrec "$W/a" nonfinite_skips)" ] &&
    [ "$(endrec "$W/b" empty_skips)" = 0 ] && ok "resumed: end record nonfinite_skips 2, empty_skips 0, as uninterrupted" ||
    bad "resumed: end record nonfinite_skips $(endrec "$W/b" nonfinite_skips) empty_skips $(endrec "$W/b" empty_skips)"
has "resumed: the done line counts 2" "$W/b2.log" "^done: 6 steps.* | 2 skipped (non-finite)"
[ "$(mkey "$(ck "$W/b" 6)/manifest.json" 'm["skips"]')" = "$(mkey "$(ck "$W/a" 6)/manifest.json" 'm["skips"]')" ] &&
    ok "step-6 manifests record the same skips" || bad "step-6 manifests' skips differ"
cmp -s "$(ck "$W/a" 6)/rank_00000.bin" "$(ck "$W/b" 6)/rank_00000.bin" &&
    ok "resumed step 6 == uninterrupted step 6, bitwise" || bad "resumed run's weights differ"

# --- 2. the run of skips in a row survives a resume
SHARDLM_FAULT=nan-grad:step=3,nan-grad:step=4 "$BIN" "${TR[@]}" --max-nonfinite-skips 1 \
    --out "$W/k" > "$W/k.log" 2>&1
check "two in a row, uninterrupted: exit 1" 1 $?
has "uninterrupted: stopped at step 4" "$W/k.log" "step 4: non-finite loss .* in 2 steps in a row"
SHARDLM_FAULT=nan-grad:step=3,kill:rank=0:step=4 "$BIN" "${TR[@]}" --max-nonfinite-skips 1 \
    --out "$W/l" > "$W/l.log" 2>&1
[ "$(mkey "$(ck "$W/l" 3)/manifest.json" 'm["skips"]["nonfinite_in_a_row"]')" = 1 ] &&
    ok "step-3 manifest: nonfinite_in_a_row 1" || bad "step-3 manifest: in a row not 1"
SHARDLM_FAULT=nan-grad:step=4 "$BIN" "${TR[@]}" --max-nonfinite-skips 1 --out "$W/l" \
    --resume auto > "$W/l2.log" 2>&1
check "two in a row across a resume: exit 1" 1 $?
has "resumed: stopped at step 4 too" "$W/l2.log" "step 4: non-finite loss .* in 2 steps in a row"

# --- 3. no-target skips across a resume (data as test_ft2_empty.sh's)
slm_corpus "$W/corpus.txt" 20000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
V=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^vocab_size: //p')
slm_tiny_config "$W/config2.json" vocab_size="$V" max_position_embeddings=64
T=8
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
L = [l for l in open(w + "/corpus.txt", encoding="utf-8").read().split("\n") if l.strip()]
with open(w + "/i.jsonl", "w") as f:
    for i in range(8):  # long prompts (targets beyond T+1) and short samples, interleaved
        p = " ".join(L[i * 4:i * 4 + 3]) if i % 2 else "Q" + str(i)
        f.write(json.dumps({"prompt": p, "completion": " " + L[40 + i][:6]}) + "\n")
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/i.jsonl" --out "$W/i" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet || bad "prep failed"
n_empty=$("$PY" - "$W/i" "$T" <<'PY'
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
[ "$n_empty" -ge 2 ] && [ "$n_empty" -le 6 ] && ok "the data has $n_empty target-less windows of 8" ||
    bad "test data: $n_empty empty windows"
TI=(train --data "$W/i" --model "$W/config2.json" --batch 1 --seq $T --steps 8 --threads 1
    --no-packing --eval-every 0 --log-every 1 --ckpt-every-steps 1 --ckpt-sync)
"$BIN" "${TI[@]}" --out "$W/e" > "$W/e.log" 2>&1
check "instruction run" 0 $?
[ "$(endrec "$W/e" empty_skips)" = "$n_empty" ] && ok "uninterrupted: end record empty_skips $n_empty" ||
    bad "uninterrupted: end record empty_skips $(endrec "$W/e" empty_skips), expected $n_empty"
SHARDLM_FAULT=kill:rank=0:step=5 "$BIN" "${TI[@]}" --out "$W/f" > "$W/f.log" 2>&1
[ $? -ne 0 ] && [ -d "$(ck "$W/f" 4)" ] && ok "instruction run killed before step 5" || bad "kill run (instruction)"
"$BIN" "${TI[@]}" --out "$W/f" --resume auto > "$W/f2.log" 2>&1
check "instruction run resumed" 0 $?
[ "$(endrec "$W/f" empty_skips)" = "$n_empty" ] && [ "$(endrec "$W/f" nonfinite_skips)" = 0 ] &&
    ok "resumed: end record empty_skips $n_empty, nonfinite_skips 0" ||
    bad "resumed: end record empty_skips $(endrec "$W/f" empty_skips), expected $n_empty"
[ "$n_empty" -gt 0 ] && has "resumed: the done line counts them" "$W/f2.log" "^done: 8 steps.* | $n_empty skipped (no target token)"

# --- 4. a manifest from before "skips" still resumes (counting from 0)
SHARDLM_FAULT=nan-grad:step=2,kill:rank=0:step=4 "$BIN" "${TR[@]}" --out "$W/o" > "$W/o.log" 2>&1
"$PY" -c '
import json, sys
p = sys.argv[1]
m = json.load(open(p)); del m["skips"]; json.dump(m, open(p, "w"), indent=2)' "$(ck "$W/o" 3)/manifest.json"
"$BIN" ckpt inspect "$(ck "$W/o" 3)" > "$W/o.inspect" 2>&1
check "old manifest: ckpt inspect" 0 $?
SHARDLM_FAULT=nan-grad:step=4 "$BIN" "${TR[@]}" --out "$W/o" --resume auto > "$W/o2.log" 2>&1
check "old manifest: resumes" 0 $?
has "old manifest: resumed from step 3" "$W/o2.log" "resumed from .*step_00000003"
[ "$(endrec "$W/o" nonfinite_skips)" = 1 ] && ok "old manifest: counted from 0 (end record nonfinite_skips 1)" ||
    bad "old manifest: end record nonfinite_skips $(endrec "$W/o" nonfinite_skips), expected 1"
cmp -s "$(ck "$W/a" 6)/rank_00000.bin" "$(ck "$W/o" 6)/rank_00000.bin" &&
    ok "old manifest: step 6 == run 1's step 6, bitwise" || bad "old manifest: weights differ"

# --- 5. contradictory counters are refused
badm() { # badm NAME PYTHON_EDIT_OF_m PATTERN
    rm -rf "$W/x" && cp -r "$(ck "$W/a" 3)" "$W/x"
    "$PY" -c '
import json, sys
p = sys.argv[1]
m = json.load(open(p)); exec(sys.argv[2]); json.dump(m, open(p, "w"))' "$W/x/manifest.json" "$2"
    "$BIN" ckpt inspect "$W/x" > "$W/x.log" 2>&1
    check "$1: refused" 1 $?
    has "$1: message" "$W/x.log" "$3"
}
badm "in a row above the count" 'm["skips"]["nonfinite_in_a_row"] = 2' \
    'manifest.json: skips: nonfinite 1, nonfinite_in_a_row 2, no_target 0: expected'
badm "more skips than steps" 'm["skips"]["no_target"] = 3' 'nonfinite + no_target <= step 3'
badm "negative count" 'm["skips"]["nonfinite"] = -1' 'skips.*nonfinite'
badm "not an object" 'm["skips"] = 3' '"skips" is not an object'
slm_finish
