#!/usr/bin/env bash
# The objstore client against a real S3 server (SeaweedFS `weed mini`, SigV4 checked): single and
# multipart PUT (5 MiB parts, in parallel) + GET + range GET byte-equal to the local file, HEAD
# of present / missing keys, ListObjectsV2 over several pages, DELETE; credentials from an
# AWS_PROFILE in a credentials file; a wrong secret (403 naming bucket and key id, never the
# secret); throttling (a proxy answering 503 SlowDown: retries succeed and are counted); the
# server killed during a retry loop (the request succeeds once it is back); a multipart upload
# cancelled while its parts or its CreateMultipartUpload are in flight leaves no upload behind;
# a missing bucket is named as such (HEAD included).
# Usage: test_s3_client.sh S3_TOOL
. "$(dirname "$0")/../lib.sh"
export S3TOOL=$1
. "$(dirname "$0")/lib.sh"
slm_s3_start "$W/s3"
T=$S3TOOL B=$S3_BUCKET

head -c 12345678 /dev/urandom > "$W/big"     # 3 parts of 5 MiB (multipart from 5 MiB)
echo "hello s3" > "$W/small"
export SHARDLM_S3_MULTIPART_MIB=5 SHARDLM_S3_PART_MIB=5
"$T" put "$B" "t/small file+1.txt" "$W/small" > "$W/o1"
check "put single" 0 $?
"$T" put "$B" t/big "$W/big" > "$W/o2"
has "multipart: 3 part PUTs" "$W/o2" "puts=3 "
"$T" get "$B" t/big "$W/big.back" > /dev/null
if cmp -s "$W/big" "$W/big.back"; then ok "multipart GET equal"; else bad "multipart GET differs"; fi
"$T" get "$B" "t/small file+1.txt" "$W/small.back" > /dev/null
if cmp -s "$W/small" "$W/small.back"; then ok "key with space and +"; else bad "odd key"; fi
"$T" range "$B" t/big 5242870 20 "$W/r"
if cmp -s <(tail -c +5242871 "$W/big" | head -c 20) "$W/r"; then ok "range GET across a part"
else bad "range GET"; fi
size=$("$T" head "$B" t/big)
check "HEAD size" 12345678 "$size"
set +e # rc of expected failures
"$T" head "$B" t/missing; check "HEAD missing = 3" 3 $?
set -e
for i in 1 2 3 4 5; do "$T" put "$B" "p/k$i" "$W/small" > /dev/null; done
SHARDLM_S3_LIST_PAGE=2 "$T" ls "$B" p/ > "$W/ls"
check "list 5 keys in pages of 2" 5 "$(grep -c ' p/k' "$W/ls")"
has "list took 3 pages" "$W/ls" "requests=3 "
"$T" rm "$B" p/k3
"$T" ls "$B" p/ > "$W/ls2"
if grep -q "p/k3" "$W/ls2"; then bad "DELETE"; else ok "DELETE"; fi

# Credentials from a profile (environment keys unset).
cat > "$W/creds" <<INI
[default]
aws_access_key_id = WRONGDEFAULT
aws_secret_access_key = nope
[slm]
aws_access_key_id = $AWS_ACCESS_KEY_ID
aws_secret_access_key = $AWS_SECRET_ACCESS_KEY
INI
(unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
 AWS_SHARED_CREDENTIALS_FILE="$W/creds" AWS_PROFILE=slm "$T" head "$B" t/big > "$W/prof")
check "profile credentials" 12345678 "$(cat "$W/prof")"

# Wrong secret: a clear 403 naming the bucket and key id, never the secret.
set +e
AWS_SECRET_ACCESS_KEY="TheWrongSecret123" "$T" ls "$B" t/ 2> "$W/e403"
check "wrong secret exit 1" 1 $?
set -e
has "403 named" "$W/e403" "HTTP 403 SignatureDoesNotMatch"
has "403 names bucket and key id" "$W/e403" "bucket $B, access key id $AWS_ACCESS_KEY_ID"
if grep -q "TheWrongSecret123" "$W/e403"; then bad "secret leaked"; else ok "secret not in message"; fi

# Throttling: 4 answers of 503 SlowDown, then forwarded: the PUT and GET succeed, retries counted.
"$PY" "$(dirname "$0")/throttle_proxy.py" "$S3_PORT" 4 "$W/pport" "$W/pcount" &
ppid=$!
slm_on_exit "kill $ppid"
for i in $(seq 1 100); do [ -s "$W/pport" ] && break; sleep 0.1; done
AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$W/pport")" "$T" put "$B" t/throttled "$W/small" > "$W/thr"
check "PUT through throttling" 0 $?
has "4 retries counted" "$W/thr" "retries=4 throttled=4"
has "proxy answered 4 x 503" "$W/pcount" "throttled=4 forwarded=1"
kill "$ppid"; wait "$ppid" 2>/dev/null || true

# A multipart upload cut short by slm_s3_cancel (an abandoned checkpoint upload) is aborted: the
# server's ListMultipartUploads lists it while it runs and not after (no parts left behind).
head -c $((60 << 20)) /dev/urandom > "$W/cancel.bin"
set +e
SHARDLM_S3_MAX_CONNS=2 "$T" put-cancel "$B" t/cancelled "$W/cancel.bin" 3 > "$W/pc" 2>&1
check "cancelled multipart PUT ends cancelled" 0 $?
set -e
has "the put was cancelled" "$W/pc" "put: .*cancelled"
has "ListMultipartUploads saw it in progress" "$W/pc" "uploads before cancel: 1"
"$T" uploads "$B" t/cancelled > "$W/pc.after"
check "no multipart upload left after the cancel (AbortMultipartUpload)" 0 "$(wc -l < "$W/pc.after")"
"$T" head "$B" t/cancelled > /dev/null 2>&1 && bad "the cancelled object exists" ||
    ok "no object for the cancelled upload"
rm -f "$W/cancel.bin"

# A cancel that lands while CreateMultipartUpload is in flight: the server has created the
# upload (the proxy forwarded the POST and holds its answer until 1 s after the cancel); the
# client still awaits the UploadId (SHARDLM_S3_CREATE_WAIT_S, 30 s here so that a loaded machine
# cannot make it give up first) and aborts the upload, so none is left behind.
head -c $((6 << 20)) /dev/urandom > "$W/create.bin"
"$PY" "$(dirname "$0")/throttle_proxy.py" "$S3_PORT" 0 "$W/hport" "$W/hcount" "$W/held" "$W/release" &
hpid=$!
slm_on_exit "kill $hpid"
for i in $(seq 1 100); do [ -s "$W/hport" ] && break; sleep 0.1; done
set +e
AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$W/hport")" SHARDLM_S3_MULTIPART_MIB=5 \
    SHARDLM_S3_PART_MIB=5 SHARDLM_S3_CREATE_WAIT_S=30 "$T" put-cancel-create "$B" t/create-cancelled "$W/create.bin" "$W/held" "$W/release" > "$W/cc" 2>&1
check "put cancelled during CreateMultipartUpload ends cancelled" 0 $?
set -e
has "the proxy held the create's answer" "$W/held" "^200 .*uploads"
has "the server created the upload before the cancel" "$W/cc" "uploads before cancel: 1"
has "the put awaited the create's answer after the cancel" "$W/cc" "put ended before the answer: no"
has "the put was cancelled" "$W/cc" "put: .*cancelled"
"$T" uploads "$B" t/create-cancelled > "$W/cc.after"
check "no multipart upload left after a cancel during the create" 0 "$(wc -l < "$W/cc.after")"
kill "$hpid"; wait "$hpid" 2>/dev/null || true
rm -f "$W/create.bin"

# A bucket that does not exist: named as such (NoSuchBucket, bucket and endpoint), not "no
# checkpoint here", by ckpt inspect and train --resume.
set +e
"$BIN" ckpt inspect "s3://slm-missing-bucket/x/" > "$W/nb" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && ok "inspect of a missing bucket fails (exit $rc)" || bad "inspect of a missing bucket: exit 0"
has "inspect: NoSuchBucket named" "$W/nb" "the bucket slm-missing-bucket does not exist at $S3_ENDPOINT"
if grep -q "no checkpoint here" "$W/nb"; then bad "inspect says no checkpoint here"; else ok "inspect does not say no checkpoint here"; fi
cat > "$W/nbcfg.json" <<JSON
{"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 16}
JSON
set +e
"$BIN" train --synthetic --model "$W/nbcfg.json" --seq 8 --batch 2 --steps 2 --threads 1 \
    --log-every 0 --out "$W/nbrun" --resume "s3://slm-missing-bucket/run/checkpoints/step_00000002" > "$W/nbr" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && ok "--resume from a missing bucket fails (exit $rc)" || bad "--resume from a missing bucket: exit 0"
has "--resume: NoSuchBucket named" "$W/nbr" "the bucket slm-missing-bucket does not exist at $S3_ENDPOINT"
set +e
"$BIN" ckpt verify "s3://slm-missing-bucket/x/" > "$W/nbv" 2>&1
check "verify of a missing bucket fails" 1 $?
"$BIN" train --synthetic --model "$W/nbcfg.json" --seq 8 --batch 2 --steps 2 --threads 1 \
    --log-every 0 --out "$W/nbrun2" --ckpt-every-steps 1 --ckpt-uri "s3://slm-missing-bucket/run/" > "$W/nbu" 2>&1
check "--ckpt-uri to a missing bucket fails" 1 $?
# HEAD answers a bare 404 for a missing bucket and a missing key alike: the client asks the
# bucket (ListObjectsV2 answers NoSuchBucket) before reporting "not found" (s3_tool head: 3).
"$T" head slm-missing-bucket x > "$W/nbh" 2>&1
check "HEAD in a missing bucket is an error, not 'missing' (3)" 1 $?
"$T" get slm-missing-bucket x "$W/nbg.out" > "$W/nbg" 2>&1
check "get_file (HEAD first) from a missing bucket fails" 1 $?
set -e
for f in nbv nbu nbh nbg; do
    has "$f: NoSuchBucket named" "$W/$f" "the bucket slm-missing-bucket does not exist at $S3_ENDPOINT"
    if grep -qE "no checkpoint here|no such object" "$W/$f"; then bad "$f: reported as not found"; cat "$W/$f"
    else ok "$f: not reported as a missing key"; fi
done
has "HEAD names the object it asked for" "$W/nbh" "s3://slm-missing-bucket/x: HEAD answered 404"

# Server down: connection errors are retried (bounded); the server back within the budget wins.
slm_s3_kill
(SHARDLM_S3_MAX_ATTEMPTS=40 "$T" put "$B" t/after-restart "$W/small" > "$W/down" 2>&1; echo $? > "$W/down.rc") &
cpid=$!
sleep 2
slm_s3_restart
wait "$cpid"
check "PUT retried across a restart" 0 "$(cat "$W/down.rc")"
if grep -qE "retries=[1-9]" "$W/down"; then ok "connection retries counted"; else bad "no retries"; cat "$W/down"; fi
set +e
SHARDLM_S3_MAX_ATTEMPTS=2 AWS_ENDPOINT_URL="http://127.0.0.1:1" "$T" head "$B" x 2> "$W/econn"
check "unreachable endpoint fails" 1 $?
set -e
has "connection error named" "$W/econn" "s3://$B/x: HEAD failed: Couldn't connect"
has "attempts bounded" "$W/econn" "after 2 attempts"
slm_finish
