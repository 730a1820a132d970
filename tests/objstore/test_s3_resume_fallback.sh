#!/usr/bin/env bash
# --resume auto from S3 falls back past a damaged newest checkpoint with the local rules
# (issue 20 item 9), against a real S3 server (SeaweedFS): a run uploads step_5 .. step_40, then
# step_40's host object is damaged under the prefix and fresh run directories resume from S3:
#  - truncated object: skipped with a warning naming the rank file and the object (the HEAD's
#    size), with and without --verify-on-resume; step_35 resumed; the run's step_40 equals the
#    uninterrupted run's byte for byte; bytes appended to the object: skipped the same way;
#  - one byte flipped (same size): --verify-on-resume reads every chunk back and skips it (the
#    warning names the rank file, the object and the chunk), step_35 resumed; without it the
#    sizes match and the read fails with the checksum mismatch, exactly as a local run directory
#    with the same byte flipped does (the local rules: sizes only unless --verify-on-resume);
#  - shardlm launch (restarts add --verify-on-resume): attempt 1 fails, attempt 2 resumes
#    step_35, exit 0 (exit 4 before);
#  - the run directory's only checkpoint damaged: resumed from S3 (refused before);
#  - every remote checkpoint damaged and no local one: refused, naming the newest one's problem.
# Args: MPIEXEC S3_TOOL
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
export S3TOOL=$2
. "$(dirname "$0")/lib.sh"
slm_s3_start "$W/s3"
B=$S3_BUCKET
slm_s3_tiny_run 40 5
U="s3://$B/runs/a/"
HK=runs/a/checkpoints/step_00000040/host_00000.bin
set +e
"$BIN" train "${TR[@]}" --out "$W/ref" --ckpt-uri "$U" > "$W/ref.log" 2>&1
check "reference run uploads step_5 .. step_40" 0 $?
"$S3TOOL" get "$B" runs/a/checkpoints/latest "$W/rl" > /dev/null
check "remote latest" step_00000040 "$(tr -d '\n' < "$W/rl")"
"$S3TOOL" get "$B" "$HK" "$W/host.orig" > /dev/null || bad "get $HK"
# damage: truncate | append (1000 zero bytes) | flip (one byte in the middle, same size)
damage() {
    "$PY" - "$1" "$W/host.orig" "$W/host.bad" <<'PY'
import sys
kind, src, dst = sys.argv[1:]
b = bytearray(open(src, "rb").read())
if kind == "truncate":
    b = b[: len(b) - 1000]
elif kind == "append":
    b += bytes(1000)
else:
    b[len(b) // 2] ^= 0xFF
open(dst, "wb").write(b)
PY
    "$S3TOOL" put "$B" "$HK" "$W/host.bad" > /dev/null || bad "put damaged $HK"
}
same40() { # the resumed run's step_40 equals the uninterrupted one's
    local f n=0 diff=0
    for f in "$W/ref/checkpoints/step_00000040"/rank_*.bin; do
        n=$((n + 1))
        cmp -s "$f" "$1/checkpoints/step_00000040/$(basename "$f")" || diff=1
    done
    [ $n -gt 0 ] && [ $diff = 0 ] && ok "$2: step_40 byte-equal to the uninterrupted run's" ||
        bad "$2: step_40 differs from the uninterrupted run's"
}
resumed35() { # resumed35 NAME LOG RUN
    has "$1: warning names the damaged rank file and its object" "$2" \
        "checkpoint s3://$B/runs/a/checkpoints/step_00000040 does not verify: .*step_00000040/rank_00000.bin.*$HK"
    has "$1: falls back" "$2" "falling back to the previous one"
    has "$1: step_35 found on S3" "$2" "found s3://$B/runs/a/checkpoints/step_00000035"
    has "$1: resumed step_35" "$2" "resumed from s3://$B/runs/a/checkpoints/step_00000035 (step 35)"
    same40 "$3" "$1"
}
# (each resumed run uploads its own step_40 over the damaged one: damage is applied per case)

# --- truncated: skipped with and without --verify-on-resume
n=0
for v in "" --verify-on-resume; do
    n=$((n + 1))
    damage truncate
    "$BIN" train "${TR[@]}" --resume auto $v --out "$W/t$n" --ckpt-uri "$U" > "$W/t$n.log" 2>&1
    check "truncated step_40 ${v:-(sizes only)}: exit 0" 0 $?
    resumed35 "truncated ${v:-(sizes only)}" "$W/t$n.log" "$W/t$n"
    has "truncated: the HEAD's size is named" "$W/t$n.log" "$HK has [0-9]* bytes"
done
# bytes appended to the host object (the files' bytes intact): skipped too, as a local rank
# file whose size is not the manifest's
damage append
"$BIN" train "${TR[@]}" --resume auto --out "$W/t3" --ckpt-uri "$U" > "$W/t3.log" 2>&1
check "appended step_40 (sizes only): exit 0" 0 $?
resumed35 "appended (sizes only)" "$W/t3.log" "$W/t3"
has "appended: the sizes are named" "$W/t3.log" "$HK has [0-9]* bytes.*appended to"

# --- one byte flipped: --verify-on-resume skips it
damage flip
"$BIN" train "${TR[@]}" --resume auto --verify-on-resume --out "$W/f1" --ckpt-uri "$U" \
    > "$W/f1.log" 2>&1
check "flipped byte, --verify-on-resume: exit 0" 0 $?
resumed35 "flipped byte --verify-on-resume" "$W/f1.log" "$W/f1"
has "flipped byte: the chunk's checksum mismatch" "$W/f1.log" "rank_00000.bin: checksum mismatch in chunk"

# without it, as a local run directory with the same byte flipped: the read fails
damage flip
"$BIN" train "${TR[@]}" --resume auto --out "$W/f0" --ckpt-uri "$U" > "$W/f0.log" 2>&1
rf=$?
mkdir -p "$W/loc/checkpoints"
cp -r "$W/ref/checkpoints/step_00000035" "$W/ref/checkpoints/step_00000040" "$W/loc/checkpoints/"
echo step_00000040 > "$W/loc/checkpoints/latest"
"$PY" - "$W/loc/checkpoints/step_00000040/rank_00000.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0xFF
open(sys.argv[1], "wb").write(b)
PY
"$BIN" train "${TR[@]}" --resume auto --out "$W/loc" > "$W/loc.log" 2>&1
rl=$?
check "flipped byte, sizes only: the remote resume exits as the local one ($rl)" "$rl" "$rf"
if grep -q "checksum mismatch" "$W/loc.log"; then
    has "flipped byte, sizes only: same checksum error remotely" "$W/f0.log" "checksum mismatch"
else
    has "flipped byte, sizes only: local skips it" "$W/loc.log" "falling back"
    has "flipped byte, sizes only: remote skips it too" "$W/f0.log" "falling back"
fi

# --- shardlm launch: attempt 1 (sizes only) fails, the restart (--verify-on-resume) resumes 35
damage flip
"$BIN" launch "${LA[@]}" --max-restarts 2 -- "${TR[@]}" --resume auto --out "$W/l" \
    --ckpt-uri "$U" > "$W/l.log" 2> "$W/l.err"
rc=$?
[ $rc = 0 ] || tail -30 "$W/l.err"
check "launch, flipped byte in the newest remote checkpoint: exit 0" 0 $rc
resumed35 "launch" "$W/l.err" "$W/l"

# --- the run directory's only checkpoint damaged, the remote ones intact: resumed from S3
# rather than refused
"$S3TOOL" put "$B" "$HK" "$W/host.orig" > /dev/null || bad "put back $HK"
mkdir -p "$W/ld/checkpoints"
cp -r "$W/ref/checkpoints/step_00000035" "$W/ld/checkpoints/"
echo step_00000035 > "$W/ld/checkpoints/latest"
truncate -s 1000 "$W/ld/checkpoints/step_00000035/rank_00000.bin"
"$BIN" train "${TR[@]}" --resume auto --out "$W/ld" --ckpt-uri "$U" > "$W/ld.log" 2>&1
check "no local checkpoint verifies, the remote one does: exit 0" 0 $?
has "local damage warned" "$W/ld.log" "checkpoint $W/ld/checkpoints/step_00000035 does not verify"
has "resumed from S3" "$W/ld.log" "(step 40) verifies, no local checkpoint does; resuming from S3"

# --- every remote checkpoint damaged, no local one: refused, naming the newest one's problem
"$S3TOOL" ls "$B" runs/a/checkpoints/ > "$W/ls" 2>&1
for s in $(grep -o 'step_000000[0-9]*/host_00000.bin' "$W/ls" | sort -u); do
    echo x > "$W/x"
    "$S3TOOL" put "$B" "runs/a/checkpoints/$s" "$W/x" > /dev/null
done
"$BIN" train "${TR[@]}" --resume auto --out "$W/z" --ckpt-uri "$U" > "$W/z.log" 2>&1
check "no remote checkpoint verifies, none local: refused" 1 $?
has "names that none verifies" "$W/z.log" "none of its [0-9]* checkpoints verifies"
slm_finish
