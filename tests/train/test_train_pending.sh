#!/usr/bin/env bash
# An interrupted save (every rank wrote and fsynced its shard, the job died before the commit)
# is a checkpoint: it is never trained over from step 0 (adversarial tester break3).
#  1  a real interruption: the process sleeps before step 3 (SHARDLM_FAULT=slow) after step 2's
#     asynchronous save was written, and is SIGKILLed: step_00000002.tmp holds pending.json,
#     rank_00000.bin and its sidecar; nothing is committed.
#  1b `ckpt inspect|verify RUN_DIR` without `latest` name the interrupted save / newest step_N.
#  2  without --resume the run is refused (exit 2) naming the uncommitted save; nothing touched.
#  3  --train-from-scratch moves it aside (byte-equal) instead of sweeping it at the first commit.
#  4  --resume auto whose recovery fails (pending.json names another step) with no committed
#     checkpoint is refused (exit 1) naming the .tmp, which is left as it was.
#  4b an explicit --resume PATH warns that this run's first checkpoint removes it.
#  5  --resume auto commits it: the recovered step_00000002 and the resumed run's step_00000004
#     are byte-equal (every file, manifest included) to an uninterrupted run's.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_on_exit 'kill -9 "${bg:-}" 2>/dev/null'
slm_tiny_config "$W/config.json"
S=(train --synthetic --model "$W/config.json" --batch 2 --seq 16 --threads 1 --peak-gflops 10
   --log-every 0 --ckpt-every-steps 2 --steps 4)
"$BIN" "${S[@]}" --out "$W/ref" > "$W/ref.log" 2>&1 || { cat "$W/ref.log"; exit 1; }

# 1: the real interruption
R=$W/run T=$W/run/checkpoints/step_00000002.tmp
SHARDLM_FAULT=slow:rank=0:ms=600000:step=3 "$BIN" "${S[@]}" --out "$R" > "$W/int.log" 2>&1 &
bg=$!
# the sidecar is written last (after the rank file's fsync): wait until it is whole JSON
side_done() { "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))["xxh64"]' "$T/rank_00000.json" 2>/dev/null; }
for _ in $(seq 600); do side_done && break; sleep 0.2; done
kill -9 "$bg"
wait "$bg" 2>/dev/null
[ -f "$T/pending.json" ] && [ -f "$T/rank_00000.bin" ] && [ -f "$T/rank_00000.json" ] &&
    [ ! -e "$R/checkpoints/step_00000002" ] && ok "interrupted: step 2 written, not committed" ||
    { bad "interrupted save state"; ls -R "$R/checkpoints"; cat "$W/int.log"; }
cp -a "$R" "$W/orig"
same_tmp() { # same_tmp NAME DIR: DIR holds the interrupted save's three files, byte-equal
    local f d=0
    for f in pending.json rank_00000.bin rank_00000.json; do
        cmp -s "$2/$f" "$W/orig/checkpoints/step_00000002.tmp/$f" || d=1
    done
    [ "$d" = 0 ] && ok "$1" || { bad "$1"; ls -l "$2"; }
}

# 1b: `ckpt inspect` names the interrupted save (no `latest` yet), and a committed step_N when
#     `latest` is missing, instead of "no checkpoint here"
"$BIN" ckpt inspect "$W/orig" > "$W/l1b" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "an interrupted save every rank wrote is in $W/orig/checkpoints/step_00000002.tmp" "$W/l1b" &&
    ok "ckpt inspect names the interrupted save" || { bad "ckpt inspect: rc $rc"; cat "$W/l1b"; }
cp -a "$W/ref" "$W/nolatest" && rm "$W/nolatest/checkpoints/latest"
"$BIN" ckpt verify "$W/nolatest" > "$W/l1c" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "the newest $W/nolatest/checkpoints/step_00000004 (.latest. missing" "$W/l1c" &&
    ok "ckpt verify without latest names the newest step_N" || { bad "ckpt verify: rc $rc"; cat "$W/l1c"; }

# 2: no --resume
"$BIN" "${S[@]}" --out "$R" > "$W/l2" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "not yet committed: --resume auto commits it" "$W/l2" &&
    ok "no --resume over an interrupted save: refused (exit 2)" ||
    { bad "no --resume: rc $rc"; cat "$W/l2"; }
same_tmp "refused run left the interrupted save as it was" "$T"

# 3: --train-from-scratch moves it aside
cp -a "$W/orig" "$W/r3"
"$BIN" "${S[@]}" --out "$W/r3" --train-from-scratch > "$W/l3" 2>&1
rc=$?
a=$(ls -d "$W"/r3/checkpoints.replaced-*/step_00000002.tmp 2>/dev/null | head -1)
[ $rc = 0 ] && [ -n "$a" ] && ok "--train-from-scratch moved the interrupted save aside" ||
    { bad "--train-from-scratch: rc $rc"; cat "$W/l3"; ls -R "$W/r3"; }
[ -n "$a" ] && same_tmp "moved aside byte-equal" "$a"

# 4: a recovery that fails, nothing committed: refused, not trained from step 0
cp -a "$W/orig" "$W/r4"
P4=$W/r4/checkpoints/step_00000002.tmp/pending.json
"$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); m["step"]=3; json.dump(m,open(sys.argv[1],"w"))' "$P4"
cp "$P4" "$W/p4"
"$BIN" "${S[@]}" --out "$W/r4" --resume auto > "$W/l4" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "step_00000002.tmp holds a save every rank wrote that could not be committed" "$W/l4" &&
    cmp -s "$P4" "$W/p4" && [ ! -e "$W/r4/checkpoints/step_00000004" ] &&
    ok "failed recovery with no committed checkpoint: refused (exit 1), .tmp kept" ||
    { bad "failed recovery: rc $rc"; cat "$W/l4"; ls -R "$W/r4/checkpoints"; }

# 4b: an explicit --resume PATH is obeyed, with a warning that the interrupted save goes
cp -a "$W/orig" "$W/r6"
"$BIN" "${S[@]}" --out "$W/r6" --resume "$W/ref/checkpoints/step_00000002" > "$W/l6" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "step_00000002.tmp holds a save of step 2 every rank wrote.*--resume auto would commit" "$W/l6" &&
    ok "explicit --resume PATH: warned that the interrupted save is removed" ||
    { bad "explicit --resume: rc $rc"; cat "$W/l6"; }

# 5: --resume auto recovers it, bitwise as the uninterrupted run
"$BIN" "${S[@]}" --out "$R" --resume auto > "$W/l5" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "checkpoint step 2 recovered" "$W/l5" && ok "--resume auto recovered step 2" ||
    { bad "--resume auto: rc $rc"; cat "$W/l5"; }
for s in step_00000002 step_00000004; do
    d=0 n=0
    for f in "$W/ref/checkpoints/$s"/*; do
        n=$((n + 1))
        cmp -s "$f" "$R/checkpoints/$s/$(basename "$f")" || d=1
    done
    [ $n -ge 2 ] && [ $d = 0 ] && ok "$s: $n files byte-equal to the uninterrupted run's" ||
        { bad "$s differs from the uninterrupted run's"; ls -l "$R/checkpoints/$s"; }
done
slm_finish
