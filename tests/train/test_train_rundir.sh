#!/usr/bin/env bash
# The run directory and resume never lose work (issue 8 items 2-9, 14), through the CLI:
#  2  --resume auto with `latest` missing resumes the newest step_N (never from scratch; with
#     --ckpt-keep nothing of the earlier run is deleted); a truncated newest one falls back to
#     the previous with a warning naming the file; a flipped byte is caught with
#     --verify-on-resume; none verifying is refused naming --train-from-scratch, which moves
#     them aside and trains from a seeded init.
#  4  a non-finite loss one step after an async save still commits that save.
#  5  "checkpoints: N saved" counts committed saves only.
#  6  --steps == the checkpoint's step: "already complete", exit 0, no "nan"; below: exit 2.
#  7  an empty checkpoints/ left by a failed run does not block the rerun.
#  8  resuming on a dataset of another tokenizer (same vocab size) is refused naming both
#     hashes (from the datasets' manifest.json), the run's tokenizer.json is kept; the same for
#     eval / train --init-from-hf of an HF export that ships the run's tokenizer.
#  9  a second training into a run directory in use fails naming the holder's pid.
# 14  --out naming a non-empty directory that is not a run directory is refused, files intact.
# Issue 8 follow-ups (adversarial tester):
#  A  --ckpt-keep never deletes through a step_N symlink (nor a non-directory step_N entry):
#     skipped with a warning naming it, its target's files intact; --resume auto does not follow
#     it either; a regular file named step_N is reported as "not a directory".
#  C  a folder with only an empty checkpoints/ or a metrics.jsonl of other content is not a run
#     directory (refused, config.json untouched); an empty directory is a fresh --out.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
slm_on_exit 'kill "${bg:-}"'
t() { if eval "$2"; then ok "$1"; else bad "$1"; tail -4 "${3:-/dev/null}"; fi; }
slm_tiny_config "$W/config.json"
S=(train --synthetic --model "$W/config.json" --batch 2 --seq 16 --threads 1 --peak-gflops 10
   --log-every 0)
latest() { cat "$1/checkpoints/latest" 2>/dev/null; }

# --- item 2: latest missing / corrupt newest / none verifies
R="$W/r2"
"$BIN" "${S[@]}" --steps 4 --ckpt-every-steps 2 --out "$R" > /dev/null 2>&1
rm -f "$R/checkpoints/latest" # a SIGKILL in the first commit's window leaves exactly this
"$BIN" "${S[@]}" --steps 6 --lr 1e20 --grad-clip 0 --resume auto --out "$R" > "$W/l2r" 2>&1
rc=$?
t "latest missing, the resumed run then fails: latest repaired to step_00000004" '[ $rc = 1 ] &&
   grep -q "latest repaired" "$W/l2r" && [ "$(latest "$R")" = step_00000004 ]' "$W/l2r"
rm -f "$R/checkpoints/latest"
"$BIN" "${S[@]}" --steps 6 --ckpt-keep 1 --resume auto --out "$R" > "$W/l2a" 2>&1
rc=$?
t "latest missing: resumes from step_00000004 and says why" '[ $rc = 0 ] &&
   grep -q "latest missing; resuming from step_00000004" "$W/l2a" &&
   grep -q "resumed from .*step_00000004 (step 4)" "$W/l2a" && [ "$(latest "$R")" = step_00000006 ]' "$W/l2a"
truncate -s 100 "$R/checkpoints/step_00000006/rank_00000.bin"
"$BIN" "${S[@]}" --steps 7 --ckpt-keep 0 --resume auto --out "$R" > "$W/l2b" 2>&1
rc=$?
# --ckpt-keep 1 above kept step 6 only; with keep 1 step 4 went, so recreate the fallback case
t "truncated newest, no older one: refused naming the file and --train-from-scratch" '[ $rc = 1 ] &&
   grep -q "step_00000006/rank_00000.bin: size 100" "$W/l2b" && grep -q -- "--train-from-scratch" "$W/l2b" &&
   [ ! -e "$R/checkpoints/step_00000007" ]' "$W/l2b"
R="$W/r2b"
"$BIN" "${S[@]}" --steps 6 --ckpt-every-steps 2 --out "$R" > /dev/null 2>&1
truncate -s 100 "$R/checkpoints/step_00000006/rank_00000.bin"
"$BIN" "${S[@]}" --steps 7 --resume auto --out "$R" > "$W/l2c" 2>&1
rc=$?
t "truncated newest: falls back to step_00000004 with a warning naming the file" '[ $rc = 0 ] &&
   grep -q "warning: checkpoint .*step_00000006 does not verify: .*rank_00000.bin" "$W/l2c" &&
   grep -q "resumed from .*step_00000004 (step 4)" "$W/l2c" && [ "$(latest "$R")" = step_00000007 ]' "$W/l2c"
# flip one byte of step 7's rank file (same size): only --verify-on-resume catches it
"$PY" - "$R/checkpoints/step_00000007/rank_00000.bin" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[300] ^= 0xFF; open(p, "wb").write(b)
PY
"$BIN" "${S[@]}" --steps 8 --resume auto --verify-on-resume --out "$R" > "$W/l2d" 2>&1
rc=$?
t "--verify-on-resume: a flipped byte falls back to step_00000004" '[ $rc = 0 ] &&
   grep -q "step_00000007 does not verify: .*checksum mismatch" "$W/l2d" &&
   grep -q "resumed from .*step_00000004 (step 4)" "$W/l2d"' "$W/l2d"
t "the step saved again after the fallback replaced the bad one" '"$BIN" ckpt verify "$R" > /dev/null 2>&1 &&
   [ "$(latest "$R")" = step_00000008 ]'
"$BIN" "${S[@]}" --steps 3 --out "$R" > "$W/l2e" 2>&1
rc=$?
t "no --resume over checkpoints: exit 2 naming --resume auto and --train-from-scratch" '[ $rc = 2 ] &&
   grep -q -- "--resume auto" "$W/l2e" && grep -q -- "--train-from-scratch" "$W/l2e"' "$W/l2e"
"$BIN" "${S[@]}" --steps 3 --train-from-scratch --out "$R" > "$W/l2f" 2>&1
rc=$?
t "--train-from-scratch moves the checkpoints aside (nothing deleted)" '[ $rc = 0 ] &&
   [ -d "$R"/checkpoints.replaced-*/step_00000008 ] && [ "$(latest "$R")" = step_00000003 ] &&
   ! grep -q "resumed from" "$W/l2f"' "$W/l2f"

# --- item 4 (and 7): NaN one step after an async save; the empty checkpoints/ of a failed run
R="$W/r4"
"$BIN" "${S[@]}" --steps 5 --lr 1e20 --grad-clip 0 --ckpt-every-steps 1 --out "$R" > "$W/l4" 2>&1
rc=$?
t "NaN after an async save: exit 1, step 1 committed, verifies, no .tmp left" '[ $rc = 1 ] &&
   grep -q "training loss is" "$W/l4" && [ "$(latest "$R")" = step_00000001 ] &&
   "$BIN" ckpt verify "$R" > /dev/null 2>&1 && [ -z "$(ls "$R/checkpoints" | grep tmp)" ]' "$W/l4"
R="$W/r7"
"$BIN" "${S[@]}" --steps 5 --lr 1e20 --grad-clip 0 --out "$R" > "$W/l7a" 2>&1
"$BIN" "${S[@]}" --steps 2 --out "$R" > "$W/l7b" 2>&1
rc=$?
t "an empty checkpoints/ of a failed run does not block the rerun" '[ -d "$R/checkpoints" ] && [ $rc = 0 ] &&
   [ "$(latest "$R")" = step_00000002 ]' "$W/l7b"

# --- item 5: failed saves are not counted as saved
R="$W/r5"
mkdir -p "$R/checkpoints"
: > "$R/metrics.jsonl"
: > "$R/checkpoints/step_00000002.tmp" # plain files: the staging directories cannot be made
: > "$R/checkpoints/step_00000004.tmp"
"$BIN" "${S[@]}" --steps 6 --ckpt-every-steps 2 --out "$R" > "$W/l5" 2>&1
rc=$?
t "checkpoints: 1 saved (2 failed)" '[ $rc = 0 ] && grep -q "checkpoints: 1 saved (2 failed" "$W/l5"' "$W/l5"

# --- item 6: --steps at or below the checkpoint's step
"$BIN" "${S[@]}" --steps 6 --resume auto --out "$R" > "$W/l6a" 2>&1
rc=$?
t "--steps == checkpoint step: already complete, exit 0, no nan" '[ $rc = 0 ] &&
   grep -q "already complete at step 6" "$W/l6a" && ! grep -qi "nan" "$W/l6a"' "$W/l6a"
"$BIN" "${S[@]}" --steps 4 --resume auto --out "$R" > "$W/l6b" 2>&1
rc=$?
t "--steps below the checkpoint step: exit 2" '[ $rc = 2 ] && grep -q "below the checkpoint" "$W/l6b" &&
   ! grep -qi "nan" "$W/l6b"' "$W/l6b"

# --- item 9: one run at a time per run directory
R="$W/r9"
"$BIN" "${S[@]}" --steps 100000000 --out "$R" > "$W/l9a" 2>&1 &
bg=$!
for _ in $(seq 300); do [ -s "$R/run.lock" ] && break; sleep 0.1; done
"$BIN" "${S[@]}" --steps 3 --resume auto --out "$R" > "$W/l9b" 2>&1
rc=$?
kill -INT "$bg" 2>/dev/null
wait "$bg" 2>/dev/null
t "a second training into a locked run dir: exit 1 naming the holder's pid" '[ $rc = 1 ] &&
   grep -q "in use by another training run (pid $bg on host" "$W/l9b"' "$W/l9b"
t "the first run's checkpoint verifies" '"$BIN" ckpt verify "$R" > /dev/null 2>&1'

# --- item 14: a non-empty directory that is not a run directory
U="$W/user"
mkdir -p "$U"
echo '{"mine": 1}' > "$U/config.json"
echo "my weights" > "$U/weights.bin"
cp "$U/config.json" "$W/cfg.bak"
"$BIN" "${S[@]}" --steps 2 --out "$U" > "$W/l14" 2>&1
rc=$?
t "--out a user folder: exit 2, files untouched" '[ $rc = 2 ] && grep -q "not a shardlm run directory" "$W/l14" &&
   cmp -s "$U/config.json" "$W/cfg.bak" && [ "$(cat "$U/weights.bin")" = "my weights" ] &&
   [ ! -e "$U/run.lock" ]' "$W/l14"

# --- item 8: another tokenizer with the same vocab size
slm_corpus "$W/c1.txt" 60000
tail -c 60000 "$CORPUS" > "$W/c2.txt"
for k in 1 2; do
    "$BIN" tokenizer train --input "$W/c$k.txt" --vocab-size 300 --out "$W/tok$k.json" --quiet &&
    "$BIN" prep --tokenizer "$W/tok$k.json" --input "$W/c$k.txt" --out "$W/d$k" \
        --val-fraction 0.1 --workers 1 --quiet
done
hash() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer"]["xxh64"])' "$1/manifest.json"; }
h1=$(hash "$W/d1"); h2=$(hash "$W/d2")
echo "  dataset tokenizer hashes: $h1 / $h2"
cat > "$W/c300.json" <<JSON
{"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 32}
JSON
D=(train --model "$W/c300.json" --batch 2 --seq 16 --threads 1 --peak-gflops 10 --log-every 0)
R="$W/r8"
"$BIN" "${D[@]}" --data "$W/d1" --steps 2 --out "$R" > "$W/l8a" 2>&1
"$BIN" "${D[@]}" --data "$W/d2" --steps 4 --resume auto --out "$R" > "$W/l8b" 2>&1
rc=$?
t "resume on another tokenizer's dataset: exit 1 naming both hashes, tokenizer.json kept" '[ -n "$h1" ] &&
   [ "$h1" != "$h2" ] && [ $rc = 1 ] && grep -q "$h1" "$W/l8b" && grep -q "$h2" "$W/l8b" &&
   cmp -s "$R/tokenizer.json" "$W/tok1.json" && [ "$(latest "$R")" = step_00000002 ]' "$W/l8b"
"$BIN" ckpt export "$R" --hf "$W/hf" > /dev/null 2>&1
"$BIN" eval --init-from-hf "$W/hf" --data "$W/d2" --seq 16 --batch 2 --max-batches 1 > /dev/null 2> "$W/l8c"
rc=$?
t "eval --init-from-hf on another tokenizer's dataset: exit 1 naming both hashes" '[ $rc = 1 ] &&
   grep -q "$h1" "$W/l8c" && grep -q "$h2" "$W/l8c"' "$W/l8c"
"$BIN" "${D[@]}" --data "$W/d2" --steps 1 --init-from-hf "$W/hf" --out "$W/r8b" > "$W/l8d" 2>&1
rc=$?
t "train --init-from-hf on another tokenizer's dataset: exit 1 naming both hashes" '[ $rc = 1 ] &&
   grep -q "$h1" "$W/l8d" && grep -q "$h2" "$W/l8d"' "$W/l8d"
"$BIN" "${D[@]}" --data "$W/d1" --steps 1 --init-from-hf "$W/hf" --out "$W/r8c" > "$W/l8e" 2>&1
rc=$?
t "train --init-from-hf on the same tokenizer's dataset still works" '[ $rc = 0 ]' "$W/l8e"
# item 14 again: an HF export and a dataset directory are not run directories either
cp "$W/d1/manifest.json" "$W/manifest.bak"
"$BIN" "${D[@]}" --data "$W/d1" --steps 1 --out "$W/hf" > "$W/l14b" 2>&1
rc1=$?
"$BIN" "${D[@]}" --data "$W/d1" --steps 1 --out "$W/d1" > "$W/l14c" 2>&1
rc2=$?
t "--out an HF export or the dataset itself: exit 2, untouched" '[ $rc1 = 2 ] && [ $rc2 = 2 ] &&
   [ ! -e "$W/hf/run.lock" ] && [ ! -e "$W/d1/config.json" ] && cmp -s "$W/d1/manifest.json" "$W/manifest.bak"' "$W/l14c"

# --- A: retention and step_N symlinks / non-directory entries
O="$W/other"
"$BIN" "${S[@]}" --steps 2 --ckpt-every-steps 2 --out "$O" > /dev/null 2>&1
ls "$O/checkpoints/step_00000002" > "$W/o_files"
R="$W/ra"
"$BIN" "${S[@]}" --steps 2 --ckpt-every-steps 2 --out "$R" > /dev/null 2>&1
ln -s "$O/checkpoints/step_00000002" "$R/checkpoints/step_00000001"
"$BIN" "${S[@]}" --steps 4 --ckpt-every-steps 2 --ckpt-keep 1 --resume auto --out "$R" > "$W/la1" 2>&1
rc=$?
t "--ckpt-keep 1 over a step_N symlink: skipped with a warning, target intact, step 2 pruned" '[ $rc = 0 ] &&
   grep -q "step_00000001 is a symbolic link, not a checkpoint directory: skipped (not followed, not deleted)" "$W/la1" &&
   [ -L "$R/checkpoints/step_00000001" ] && [ -s "$W/o_files" ] &&
   [ "$(ls "$O/checkpoints/step_00000002")" = "$(cat "$W/o_files")" ] &&
   "$BIN" ckpt verify "$O" > /dev/null 2>&1 && [ ! -e "$R/checkpoints/step_00000002" ] &&
   [ "$(latest "$R")" = step_00000004 ]' "$W/la1"
R="$W/ra2"
mkdir -p "$R/checkpoints"
ln -s "$O/checkpoints/step_00000002" "$R/checkpoints/step_00000002"
"$BIN" "${S[@]}" --steps 4 --ckpt-every-steps 2 --ckpt-keep 1 --resume auto --out "$R" > "$W/la2" 2>&1
rc=$?
t "--resume auto does not follow a step_N symlink (refused naming it), target intact" '[ $rc = 1 ] &&
   grep -q "step_00000002 is a symbolic link, not a checkpoint directory (not followed" "$W/la2" &&
   [ -L "$R/checkpoints/step_00000002" ] && [ "$(ls "$O/checkpoints/step_00000002")" = "$(cat "$W/o_files")" ]' "$W/la2"
R="$W/ra"
echo "not a checkpoint" > "$R/checkpoints/step_00000009"
"$BIN" "${S[@]}" --steps 5 --ckpt-keep 1 --resume auto --out "$R" > "$W/la3" 2>&1
rc=$?
t "a regular file named step_N: \"not a directory\", falls back, never deleted" '[ $rc = 0 ] &&
   grep -q "step_00000009 is not a directory (a checkpoint step_N is a directory" "$W/la3" &&
   ! grep -q "step_00000009/manifest.json is missing" "$W/la3" &&
   grep -q "resumed from .*step_00000004 (step 4)" "$W/la3" &&
   [ "$(cat "$R/checkpoints/step_00000009")" = "not a checkpoint" ] && [ -L "$R/checkpoints/step_00000001" ] &&
   [ "$(latest "$R")" = step_00000005 ]' "$W/la3"

# --- C: what makes a run directory
U="$W/userc"
mkdir -p "$U/checkpoints"
echo '{"mine": 1}' > "$U/config.json"
"$BIN" "${S[@]}" --steps 1 --out "$U" > "$W/lc1" 2>&1
rc=$?
t "--out a folder with only an empty checkpoints/: exit 2, config.json untouched" '[ $rc = 2 ] &&
   grep -q "not a shardlm run directory" "$W/lc1" && cmp -s "$U/config.json" "$W/cfg.bak" &&
   [ ! -e "$U/run.lock" ]' "$W/lc1"
rmdir "$U/checkpoints"
echo '{"event":"epoch","loss":1.0}' > "$U/metrics.jsonl"
"$BIN" "${S[@]}" --steps 1 --out "$U" > "$W/lc2" 2>&1
rc=$?
t "--out a folder with a metrics.jsonl of other content: exit 2, untouched" '[ $rc = 2 ] &&
   grep -q "not a shardlm run directory" "$W/lc2" && cmp -s "$U/config.json" "$W/cfg.bak" &&
   [ ! -e "$U/run.lock" ]' "$W/lc2"
U="$W/userc2"
mkdir -p "$U"
echo '{"mine": 1}' > "$U/config.json"
printf '{"event":"start","model":"x"}\n' > "$U/metrics.jsonl"
"$BIN" "${S[@]}" --steps 1 --out "$U" > "$W/lc3" 2>&1
rc=$?
t "a metrics.jsonl starting with a start event marks a run directory" '[ $rc = 0 ] && [ -e "$U/run.lock" ]' "$W/lc3"
mkdir -p "$W/emptyc"
"$BIN" "${S[@]}" --steps 1 --out "$W/emptyc" > "$W/lc4" 2>&1
rc=$?
t "an empty directory is a fresh --out" '[ $rc = 0 ] && [ -e "$W/emptyc/config.json" ]' "$W/lc4"
echo "$fails failed"
slm_finish
