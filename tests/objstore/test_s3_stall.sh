#!/usr/bin/env bash
# A server that accepts connections and never answers (a hung S3 endpoint or proxy): each
# attempt is aborted once it moved no byte for SHARDLM_S3_STALL_S and retried within the retry
# budget, so the request ends with a clear error naming the object (before: every attempt hung
# for the 300 s attempt timeout; with --ckpt-uri training waited 300 s per checkpoint). No S3
# server needed: the hung endpoint is a Python socket on loopback that reads and never writes.
# Usage: test_s3_stall.sh S3_TOOL. Env (CTest): SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
S3TOOL=$1
"$PY" - "$W/port" <<'PY' > "$W/srv.log" 2>&1 &
import socket, sys, time, threading
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
held, t0 = [], time.time()
s.settimeout(1)
while time.time() - t0 < 150 and len(held) < 50:  # bounded in time and connections
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    held.append(c)  # read nothing back, answer never
PY
SP=$!
slm_on_exit "kill $SP"
t0=$SECONDS
until [ -s "$W/port" ] || [ $((SECONDS - t0)) -gt 60 ]; do sleep 0.1; done
export AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$W/port")" AWS_ACCESS_KEY_ID=SLMSTALLKEY
export AWS_SECRET_ACCESS_KEY=stallsecret AWS_REGION=us-east-1
export AWS_SHARED_CREDENTIALS_FILE="$W/none" AWS_CONFIG_FILE="$W/none"
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3
export SHARDLM_S3_STALL_S=2 SHARDLM_S3_MAX_ATTEMPTS=2 SHARDLM_S3_RETRY_BUDGET_S=3
head -c 1000 /dev/urandom > "$W/obj"
# the test's own bound (CTest's TIMEOUT is the backstop): far above 2 attempts x 2 s
timeout 100 "$S3TOOL" put slm-test "a/obj" "$W/obj" > "$W/put.log" 2>&1
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 0 ] && ok "PUT to a hung server ends with an error (exit $rc), not a hang" ||
    bad "PUT to a hung server: exit $rc (124: still hanging after 100 s)"
has "the error names the object and the stall" "$W/put.log" "s3://slm-test/a/obj.*\(too slow\|timed out\|Timeout\)"
timeout 100 "$S3TOOL" get slm-test "a/obj" "$W/back" > "$W/get.log" 2>&1
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 0 ] && ok "GET from a hung server ends with an error (exit $rc)" ||
    bad "GET from a hung server: exit $rc"
slm_finish
