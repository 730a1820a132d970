#!/usr/bin/env bash
# Fault test 6 (issue 10) and the other exit codes of `shardlm launch`:
#  1. restarts exhausted: rank 1 is killed before step 3 (first attempt), then rank 0 exits 1
#     before step 6 on every attempt: with --max-restarts 1 the launcher stops after 2 attempts
#     with exit 1, attempts.json result "failed", restarts 1, and the summary says it gave up;
#  2. a deterministic start-up failure (a --data directory that does not exist): the job fails
#     before its first step twice with the same message, exit 4, the original error printed
#     prominently, with --max-restarts 5 only 2 attempts;
#  3. a health check failing on rank 1 (this host only, nowhere to move): exit 3, no training
#     attempt, rank 1 named; 4. no --out in the train arguments: usage error, exit 2.
# Usage: test_launch_giveup.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
SHARDLM_FAULT=kill:rank=1:step=3,exit:rank=0:step=6:always "$BIN" launch --nproc 2 "${LA[@]}" \
    --max-restarts 1 -- "${TR[@]}" --steps 10 --out "$W/r1" > "$W/1.log" 2>&1
check "restarts exhausted: exit 1" 1 $?
J=$W/r1/attempts.json
[ "$(aj "$J" 'len(a["attempts"])')" = 2 ] && [ "$(aj "$J" 'a["restarts"]')" = 1 ] &&
    [ "$(aj "$J" 'a["result"]')" = failed ] && [ "$(aj "$J" 'a["exit_code"]')" = 1 ] &&
    ok "attempts.json: 2 attempts, 1 restart, result failed, exit_code 1" || { bad "attempts.json"; cat "$J"; }
[ "$(aj "$J" 'a["attempts"][1]["culprit_rank"]')" = 0 ] && ok "attempt 2: culprit rank 0" || bad "culprit"
has "summary: gave up" "$W/1.log" 'launch summary: failed (exit 1).*gave up after 1 restart'
no_orphans "no process left (restarts exhausted)"

"$BIN" launch --nproc 2 "${LA[@]}" --max-restarts 5 -- "${TR[@]}" --data "$W/no_such_data" \
    --steps 10 --out "$W/r2" > "$W/2.log" 2>&1
check "deterministic start-up failure: exit 4" 4 $?
J=$W/r2/attempts.json
[ "$(aj "$J" 'len(a["attempts"])')" = 2 ] && [ "$(aj "$J" 'a["result"]')" = "deterministic failure" ] &&
    ok "attempts.json: 2 attempts (no further retries), result deterministic failure" ||
    { bad "attempts.json"; cat "$J"; }
has "the original error is printed prominently" "$W/2.log" 'DETERMINISTIC START-UP FAILURE'
grep -A2 'DETERMINISTIC START-UP FAILURE' "$W/2.log" | grep -q "no_such_data" &&
    ok "... and names the missing directory" || { bad "error text"; cat "$W/2.log"; }

SHARDLM_FAULT=fail-health:rank=1 "$BIN" launch --nproc 2 "${LA[@]}" -- "${TR[@]}" --steps 10 \
    --out "$W/r3" > "$W/3.log" 2>&1
check "health check failed: exit 3" 3 $?
J=$W/r3/attempts.json
[ "$(aj "$J" 'len(a["attempts"])')" = 0 ] && [ "$(aj "$J" 'a["health"][0]["ok"]')" = False ] &&
    ok "no training attempt; the health record failed" || { bad "attempts.json"; cat "$J"; }
has "the failing rank is named" "$J" 'rank 1 (host '
[ ! -d "$W/r3/checkpoints" ] && ok "nothing trained" || bad "checkpoints exist"

"$BIN" launch --nproc 2 -- "${TR[@]}" --steps 10 > "$W/4.log" 2>&1
check "no --out: usage error" 2 $?
has "names --out" "$W/4.log" 'need --out RUN_DIR'
no_orphans "no process left"
slm_finish
