#!/usr/bin/env bash
# Weights are never paired with a tokenizer they were not trained with (issue 8 item 8 reached
# through --train-from-scratch): after a run dir is retrained on a dataset of another tokenizer,
# its earlier checkpoints (moved to checkpoints.replaced-*) no longer match the run's
# tokenizer.json; export / eval / generate of them are refused (exit 1) naming both XXH64s,
# which are read here from the two datasets' manifest.json. Also: a normal run's summary line is
# "done: N steps", never "already complete" (an uninitialised result once printed that).
. "$(dirname "$0")/../lib.sh"
set +e # exit codes of commands expected to fail are checked below
slm_tiny_data "$W/d1" 300 40000 > /dev/null
head -c 80000 "$CORPUS" | tail -c 40000 > "$W/c2.txt"
"$BIN" tokenizer train --input "$W/c2.txt" --vocab-size 300 --out "$W/t2.json" --quiet
"$BIN" prep --tokenizer "$W/t2.json" --input "$W/c2.txt" --out "$W/d2" --val-fraction 0.1 \
    --quiet > /dev/null 2>&1
slm_tiny_config "$W/m.json" vocab_size=300
T=(train --model "$W/m.json" --batch 2 --seq 16 --steps 2 --threads 1 --peak-gflops 10
   --log-every 0 --out "$W/run")
for i in 1 2 3; do # the uninitialised field was stack garbage: try a few times
    rm -rf "$W/r$i"
    "$BIN" train --data "$W/d1" --model "$W/m.json" --batch 2 --seq 16 --steps 5 --threads 1 \
        --peak-gflops 10 --log-every 0 --out "$W/r$i" > "$W/done$i.txt" 2> /dev/null
    check "run $i exits 0" 0 $?
    has "run $i summary is 'done: 5 steps'" "$W/done$i.txt" "^done: 5 steps"
done
# The summary's tok/s is tokens / wall time of steps 2.. (metrics.jsonl's ms_per_step), not a
# mean of per-step rates (which a few fast steps on a busy machine inflate).
"$PY" - "$W/r1/metrics.jsonl" "$W/done1.txt" <<'PY' && ok "done: tok/s = tokens / time of steps 2.." || bad "done: tok/s is not tokens / time of steps 2.."
import json, re, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l]
steps = [s for s in steps if s["step"] > 1]
tok = 2 * 16 * len(steps)
want = tok / (sum(s["ms_per_step"] for s in steps) / 1e3)
got = float(re.search(r"\| ([0-9.]+) tok/s", open(sys.argv[2]).read()).group(1))
print(f"done: {got} tok/s; tokens / time of steps 2..: {want:.2f}")
sys.exit(0 if abs(got - want) <= 0.5 + 1e-6 * want else 1)
PY
"$BIN" "${T[@]}" --data "$W/d1" > /dev/null 2>&1; check "first run" 0 $?
"$BIN" "${T[@]}" --data "$W/d2" --train-from-scratch > /dev/null 2>&1
check "retrain on another tokenizer's dataset" 0 $?
old=$(ls -d "$W"/run/checkpoints.replaced-*/step_00000002 | head -1)
[ -d "$old" ] && ok "old checkpoints kept" || bad "old checkpoints kept"
# the earlier run's history, config and tokenizer go with its checkpoints (not overwritten)
cmp -s "$(dirname "$old")/tokenizer.json" "$W/d1.tokenizer.json" &&
    ok "earlier tokenizer kept beside its checkpoints" || bad "earlier tokenizer not kept"
[ "$(grep -c '"event":"start"' "$(dirname "$old")/metrics.jsonl")" = 1 ] &&
    ok "earlier metrics.jsonl kept" || bad "earlier metrics.jsonl not kept"
[ -f "$(dirname "$old")/config.json" ] && ok "earlier config.json kept" || bad "earlier config.json not kept"
h1=$("$PY" -c "import json,sys; print('%016x' % json.load(open(sys.argv[1]))['tokenizer']['xxh64'] if isinstance(json.load(open(sys.argv[1]))['tokenizer']['xxh64'], int) else json.load(open(sys.argv[1]))['tokenizer']['xxh64'])" "$W/d1/manifest.json")
h2=$("$PY" -c "import json,sys; print('%016x' % json.load(open(sys.argv[1]))['tokenizer']['xxh64'] if isinstance(json.load(open(sys.argv[1]))['tokenizer']['xxh64'], int) else json.load(open(sys.argv[1]))['tokenizer']['xxh64'])" "$W/d2/manifest.json")
[ "$h1" != "$h2" ] && ok "two different tokenizers ($h1, $h2)" || bad "two different tokenizers"
"$BIN" ckpt export "$old" --hf "$W/hf" > /dev/null 2> "$W/err.txt"
rc=$?
if [ $rc -eq 0 ]; then # a moved checkpoint exports without a tokenizer, never with the new one
    [ ! -e "$W/hf/tokenizer.json" ] && ok "moved checkpoint: no tokenizer paired" ||
        bad "moved checkpoint exported with the run's new tokenizer"
    has "says the tokenizer is not looked for" "$W/err.txt" "not looked for"
else
    check "export of the replaced checkpoint refused" 1 $rc
fi
"$BIN" ckpt export "$W/run" --hf "$W/hf_new" > /dev/null 2>&1
check "export of the current run still works" 0 $?
# The run's own tokenizer copy replaced behind its checkpoints' back (same vocab size):
cp "$W/d1.tokenizer.json" "$W/run/tokenizer.json"
for cmd in "ckpt export $W/run --hf $W/hf_bad" "eval --model $W/run --data $W/d2 --seq 16" \
           "generate --model $W/run --prompt hi --max-new 2"; do
    # shellcheck disable=SC2086
    "$BIN" $cmd > /dev/null 2> "$W/err.txt"
    check "${cmd%% *} with a replaced tokenizer copy refused" 1 $?
    has "${cmd%% *}: names the checkpoint's recorded hash" "$W/err.txt" "$h2"
    has "${cmd%% *}: names the copy's hash" "$W/err.txt" "$h1"
done
[ ! -e "$W/hf_bad" ] && ok "no export dir after the refusal" || bad "export dir left after a refusal"
slm_finish
