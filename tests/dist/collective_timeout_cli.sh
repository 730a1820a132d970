#!/usr/bin/env bash
# --collective-timeout: 0, negative, nan, inf (and junk) are usage errors (exit 2) for train and
# prep, naming the option; prep under mpirun honours it: rank 0 blocks reading stdin (a stuck
# peer), rank 1 waits in the first status agreement and must abort the job after ~3 s with the
# op and the timeout named (without the option the bound is the internal 600 s).
# Usage: collective_timeout_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
MPIEXEC=$1
slm_on_exit '[ -n "${SP:-}" ] && kill "$SP"'
slm_corpus "$W/corpus.txt" 20000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet || { bad "tokenizer train"; slm_finish; }

for v in 0 -1 -0.5 nan inf -inf 1e400 abc ""; do
    out=$("$BIN" train --synthetic --model tiny --batch 1 --seq 8 --steps 1 \
          --collective-timeout "$v" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "--collective-timeout" <<<"$out"; then ok "train --collective-timeout '$v': exit 2"
    else bad "train --collective-timeout '$v': exit $rc: $out"; fi
    out=$("$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/p" --quiet \
          --collective-timeout "$v" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "--collective-timeout" <<<"$out" && [ ! -e "$W/p" ]; then
        ok "prep --collective-timeout '$v': exit 2"
    else bad "prep --collective-timeout '$v': exit $rc: $out"; fi
done
h=$("$BIN" train --help)
grep -q -- "--collective-timeout S .*> 0 seconds and finite; default 600" <<<"$(tr -s '\n ' ' ' <<<"$h")" &&
    ok "train --help documents it" ||
    bad "train --help lacks the --collective-timeout rule"
h=$("$BIN" prep --help)
grep -q -- "--collective-timeout S" <<<"$h" && ok "prep --help documents it" ||
    bad "prep --help lacks --collective-timeout"

# A valid value is accepted by prep (world of one) ...
if "$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/p1" --quiet \
        --collective-timeout 2.5 && [ -f "$W/p1/manifest.json" ]; then ok "prep --collective-timeout 2.5 accepted"
else bad "prep --collective-timeout 2.5 refused"; fi
# ... and bounds prep's collectives under mpirun: stdin (a FIFO kept open by a sleeping writer)
# never ends, so rank 0 never leaves its read; mpirun itself exits only once stdin closes, so
# the writer is stopped as soon as the timeout is logged.
mkfifo "$W/stdin"
sleep 120 > "$W/stdin" &
SP=$!
t0=$SECONDS
"$MPIEXEC" --oversubscribe -np 2 "$BIN" prep --tokenizer "$W/tok.json" --input - \
    --out "$W/p2" --quiet --collective-timeout 3 < "$W/stdin" > "$W/mpi.log" 2>&1 &
MP=$!
while kill -0 $MP 2>/dev/null && ! grep -q "timed out" "$W/mpi.log" && [ $((SECONDS - t0)) -lt 60 ]; do
    sleep 0.2
done
dt=$((SECONDS - t0))
kill $SP 2>/dev/null; SP=
wait $MP
rc=$?
if [ $rc -ne 0 ] && [ $dt -lt 40 ] && grep -q "collective status agreement timed out after 3 s" "$W/mpi.log"; then
    ok "prep under mpirun: a stuck peer aborts the job after 3 s (logged at ${dt}s, exit $rc)"
else
    bad "prep under mpirun: exit $rc, ${dt}s"; head -20 "$W/mpi.log"
fi
slm_finish
