#!/usr/bin/env bash
# Usage: timeout_check.sh MPIEXEC BINARY — expects the job to abort within seconds with the
# timed-out op, its context and its group in the log.
set -u
out=$("$1" -np 2 --oversubscribe "$2" 2>&1)
rc=$?
echo "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: job exited 0"; exit 1; }
for want in "all-gather (params) timed out" "step 7, backward, FSDP unit 3" "shard group 0 of 1"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: log lacks \"$want\""; exit 1; }
done
echo "timeout test passed"
