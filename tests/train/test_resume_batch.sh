#!/usr/bin/env bash
# A resume keeps the run's batch geometry (docs/formats.md "Batch geometry"):
#   the manifest records --batch / --seq / --grad-accum / world and the global counts;
#   a 2-rank checkpoint (--batch 2 --grad-accum 3: 12 sequences per step) resumed at 3 ranks with
#   the same options (18 per step; --resume PATH, and auto with --verify-on-resume; tests/objstore/
#   test_s3_ckpt.sh does s3://) is refused (exit 2) before any step, naming the checkpoint,
#   both geometries and --grad-accum 2; with --grad-accum 2 it runs (resharding) and its losses
#   are the straight run's within the FSDP tolerance; at 4 ranks the message gives --batch 1
#   --grad-accum 3, which runs; --allow-batch-change runs at 18 with the warning and a
#   metrics.jsonl "batch_change" event; --seq changed: exit 2 even with --allow-batch-change; a
#   manifest without "batch" (older shardlm) resumes with a warning; a "batch" whose counts
#   disagree is refused (exit 1) naming the field.
# Args: MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
MPIEXEC="${1:-$MPIEXEC}"
slm_tiny_config "$W/config.json" vocab_size=300
slm_tiny_data "$W/data" 300 30000
COMMON=(train --data "$W/data" --model "$W/config.json" --seq 16 --steps 4 --warmup 1
        --lr 3e-3 --seed 5 --threads 1 --peak-gflops 10 --log-every 0 --eval-every 0)
run() { # run N OUT ARGS... (log in OUT.log; exit status returned)
    local n=$1 out=$2
    shift 2
    if [ "$n" = 1 ]; then "$BIN" "${COMMON[@]}" --out "$out" "$@" > "$out.log" 2>&1
    else slm_mpirun "$n" -x OMP_NUM_THREADS=1 "$BIN" "${COMMON[@]}" --out "$out" "$@" \
        > "$out.log" 2>&1; fi
}
losses() { grep '"event":"step"' "$1/metrics.jsonl" | sed -E 's/.*"step":([0-9]+),"loss":([^,]*),.*/\1 \2/'; }

A="$W/a" C="$W/a/checkpoints/step_00000002"
if run 2 "$A" --batch 2 --grad-accum 3 --ckpt-every-steps 2; then ok "2-rank run"
else tail -5 "$A.log"; bad "2-rank run"; fi
# 1. the manifest's record: 2 x 2 x 3 = 12 sequences of 16 tokens = 192 tokens
if "$PY" - "$C/manifest.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["batch"]
want = {"micro_batch": 2, "seq": 16, "grad_accum": 3, "world": 2, "global_sequences": 12,
        "global_tokens": 192}
assert b == want, b
EOF
then ok "manifest batch record"; else bad "manifest batch record"; fi
"$BIN" ckpt inspect "$C" > "$W/inspect.txt" 2>&1 || true
has "ckpt inspect shows the batch" "$W/inspect.txt" \
    "batch        --batch 2 x 2 ranks x --grad-accum 3 = 12 sequences of 16 tokens per step"

# 2. 3 ranks, same --batch / --grad-accum: 18 sequences per step -> refused before any step
set +e # the exit codes are the checks
run 3 "$W/r3" --batch 2 --grad-accum 3 --resume "$C"
check "3 ranks at 18 sequences: usage error" 2 $?
set -e
has "message names the checkpoint and both batches" "$W/r3.log" \
    "checkpoint $C was saved with a global batch of --batch 2 x 2 ranks x --grad-accum 3 = 12 sequences; this run's is --batch 2 x 3 ranks x --grad-accum 3 = 18 sequences"
has "message gives the --grad-accum that keeps 12" "$W/r3.log" \
    "To keep 12 sequences at 3 ranks: --grad-accum 2 (with --batch 2); or pass --allow-batch-change"
# rank 0 decides; the others stop with its message (slm_dist_agree)
if [ "$(grep -c 'rank 0/3\] error: train: --resume .*= 12 sequences; this' "$W/r3.log")" = 1 ] &&
    [ "$(grep -c 'error: train: rank 0 failed: --resume .*= 12 sequences; this' "$W/r3.log")" = 2 ]
then ok "rank 0 decides, every rank stops with its message"
else cat "$W/r3.log"; bad "rank 0 decides, every rank stops with its message"; fi
if grep -q '"event":"step"' "$W/r3/metrics.jsonl" 2> /dev/null ||
    ls "$W/r3/checkpoints" 2> /dev/null | grep -q step_; then
    bad "refused run trained or saved"
else ok "refused before any step (no step event, no checkpoint)"; fi

# --resume auto --verify-on-resume in the run directory itself: the same refusal (its newest
# checkpoint, step 4), and the run's checkpoints are left as they were
before=$(ls "$A/checkpoints")
set +e
run 3 "$A" --batch 2 --grad-accum 3 --resume auto --verify-on-resume
check "--resume auto --verify-on-resume at 18 sequences: usage error" 2 $?
set -e
has "--resume auto: the newest checkpoint named" "$A.log" \
    "checkpoint $A/checkpoints/step_00000004 was saved with a global batch of --batch 2 x 2 ranks x --grad-accum 3 = 12 sequences"
[ "$(ls "$A/checkpoints")" = "$before" ] && ok "the run's checkpoints untouched" ||
    bad "checkpoints changed: $(ls "$A/checkpoints")"

# 3. the suggested fix: 3 ranks x --grad-accum 2 keeps 12 -> runs, steps 3-4 equal the straight
# run's within the FSDP-vs-FSDP tolerance of tests/ckpt/test_ckpt_mpi_resume.sh (1e-5 relative:
# other per-rank GEMM shapes and reduction order, same sequences per step)
close() { # close NAME DIR: steps 3, 4 of DIR against A's
    if "$PY" - "$A" "$2" <<'EOF'
import json, sys
def L(d): return {j["step"]: j["loss"] for j in map(json.loads, open(d + "/metrics.jsonl")) if j.get("event") == "step"}
a, b = L(sys.argv[1]), L(sys.argv[2])
assert sorted(b) == [3, 4], sorted(b)
for s in b:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
EOF
    then ok "$1: losses == straight run"; else losses "$A"; losses "$2"; bad "$1: losses"; fi
}
if run 3 "$W/r3k2" --batch 2 --grad-accum 2 --resume "$C"; then
    ok "3 ranks --grad-accum 2 (12 sequences) runs"
    close "3 ranks --grad-accum 2" "$W/r3k2"
    grep -E -q "global batch|batch geometry|allow-batch-change" "$W/r3k2.log" && { cat "$W/r3k2.log"; bad "resharding said something"; } \
        || ok "resharding (same global batch) says nothing about the batch"
else tail -5 "$W/r3k2.log"; bad "3 ranks --grad-accum 2"; fi

# 4 ranks: 12 is no multiple of 2 x 4 -> the --batch / --grad-accum pair; that pair runs
set +e
run 4 "$W/r4" --batch 2 --grad-accum 3 --resume "$C"
check "4 ranks at 24 sequences: usage error" 2 $?
set -e
has "4 ranks: the --batch / --grad-accum pair" "$W/r4.log" \
    "To keep 12 sequences at 4 ranks: --batch 1 --grad-accum 3; or pass --allow-batch-change"
if run 4 "$W/r4b1" --batch 1 --grad-accum 3 --resume "$C"; then
    ok "4 ranks --batch 1 --grad-accum 3 runs"
    close "4 ranks --batch 1 --grad-accum 3" "$W/r4b1"
else tail -5 "$W/r4b1.log"; bad "4 ranks --batch 1 --grad-accum 3"; fi

# --allow-batch-change: 18 sequences accepted, warned, logged
if run 3 "$W/allow" --batch 2 --grad-accum 3 --resume "$C" --allow-batch-change; then
    ok "--allow-batch-change runs"
else tail -5 "$W/allow.log"; bad "--allow-batch-change runs"; fi
has "--allow-batch-change warning with both values" "$W/allow.log" \
    "warning: --allow-batch-change: the global batch changes from --batch 2 x 2 ranks x --grad-accum 3 = 12 sequences (checkpoint $C, step 2) to --batch 2 x 3 ranks x --grad-accum 3 = 18 sequences"
if "$PY" - "$W/allow/metrics.jsonl" <<'EOF'
import json, sys
ev = [j for j in map(json.loads, open(sys.argv[1])) if j.get("event") == "batch_change"]
assert len(ev) == 1, ev
e = ev[0]
assert e["step"] == 2, e
assert e["from"] == {"batch": 2, "world": 2, "grad_accum": 3, "seq": 16, "global_batch": 12}, e
assert e["to"] == {"batch": 2, "world": 3, "grad_accum": 3, "seq": 16, "global_batch": 18}, e
steps = [j["step"] for j in map(json.loads, open(sys.argv[1])) if j.get("event") == "step"]
assert steps == [3, 4], steps
EOF
then ok "metrics.jsonl batch_change event"; else cat "$W/allow/metrics.jsonl"; bad "batch_change event"; fi

# --seq changed (same global batch, one rank): refused, with or without the opt-in
set +e
run 1 "$W/seq" --batch 12 --seq 8 --resume "$C"
check "--seq 8 against 16: usage error" 2 $?
run 1 "$W/seq2" --batch 12 --seq 8 --resume "$C" --allow-batch-change
check "--seq 8 with --allow-batch-change: usage error" 2 $?
set -e
has "--seq message" "$W/seq.log" \
    "checkpoint $C was saved by a run with --seq 16; this run has --seq 8: the saved loader position counts windows of 16 tokens"
has "--seq message gives the fix" "$W/seq2.log" "resume with --seq 16 (--allow-batch-change does not cover --seq)"

# a manifest without "batch" (written before it was recorded): resumes, unchecked, with a warning
O="$W/old/step_00000002"
mkdir -p "$W/old" && cp -r "$C" "$O"
"$PY" - "$O/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
del m["batch"]
json.dump(m, open(sys.argv[1], "w"))
EOF
if run 1 "$W/oldr" --batch 2 --resume "$O"; then ok "old manifest resumes"
else tail -5 "$W/oldr.log"; bad "old manifest resumes"; fi
has "old manifest: warned as unchecked" "$W/oldr.log" \
    "checkpoint $O records no batch geometry (written before shardlm recorded it): the global batch and --seq of this run (--batch 2 x 1 rank x --grad-accum 1, --seq 16) are not checked"

# a "batch" record whose counts disagree: refused as a bad manifest (exit 1), the field named
"$PY" - "$C/manifest.json" "$O/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["batch"]["global_sequences"] = 13
json.dump(m, open(sys.argv[2], "w"))
EOF
set +e
run 1 "$W/badm" --batch 12 --resume "$O"
check "inconsistent batch record: error" 1 $?
set -e
has "inconsistent batch record named" "$W/badm.log" \
    "batch: global_sequences 13 and global_tokens 192, expected micro_batch 2 x world 2 x grad_accum 3"
slm_finish
