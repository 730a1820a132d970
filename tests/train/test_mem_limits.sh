#!/usr/bin/env bash
# Issue 8 #11: every subcommand checks shapes against the config and estimates its memory before
# allocating, and exits 1 naming the estimate and the limit (never an abort: exit 134 / 70, nor
# the OOM killer). Each case runs under `ulimit -v` (RLIMIT_AS) so that nothing here can
# allocate tens of GB even when a check is missing: the cases are tiny crafted configs / files.
# Also: a signal during start-up exits 1 with a message (not 130 / 143).
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
set -uo pipefail
BIN="${SHARDLM_BIN:?}"
PY="${SLM_PYTHON:-python3}"
CORPUS="${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt"
W=$(mktemp -d /tmp/slm_mem_limits.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }
LIM=4000000 # KiB of address space for every case below
lim() { timeout 120 bash -c 'ulimit -v "$0"; exec "$@"' "$@"; }
# expect NAME RC REGEX cmd...: exit status RC and stderr matching REGEX (extended)
expect() {
    local name=$1 want=$2 re=$3
    shift 3
    "$@" > "$W/out.txt" 2> "$W/err.txt"
    local rc=$?
    if [ "$rc" = "$want" ] && grep -Eq -- "$re" "$W/err.txt"; then
        ok "$name (exit $rc)"
    else
        bad "$name: exit $rc (want $want), stderr: $(tail -c 400 "$W/err.txt")"
    fi
}

# --- a tiny run (1 layer, hidden 32) whose config allows 2^31 - 1 positions, and its HF export
head -c 100000 "$CORPUS" > "$W/corpus.txt"
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/data" --val-fraction 0.2 \
    --quiet
V=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokenizer']['vocab_size'])" \
    "$W/data/manifest.json")
cat > "$W/cfg.json" <<EOF
{"vocab_size": $V, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 2147483647}
EOF
"$BIN" train --data "$W/data" --model "$W/cfg.json" --batch 2 --seq 16 --steps 1 \
    --peak-gflops 10 --threads 1 --out "$W/run" > /dev/null 2>&1 || bad "tiny train failed"
"$BIN" ckpt export "$W/run/checkpoints/step_00000001" --hf "$W/hf" > /dev/null \
    || bad "export failed"
setcfg() { # setcfg SRC_DIR DST_DIR JSON_UPDATE: copy an HF dir with config.json changed
    cp -r "$1" "$2"
    "$PY" - "$2/config.json" "$3" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
u = json.loads(sys.argv[2])
c = u if u == {} else {**c, **u}
json.dump(c, open(sys.argv[1], "w"))
EOF
}
setcfg "$W/hf" "$W/hf_vocab" '{"vocab_size": 2147483647}'
setcfg "$W/hf" "$W/hf_empty" '{}'
echo "1 2 3 4 5" > "$W/ids.txt"

# --- --init-from-hf: the safetensors shapes against the config before any allocation
SHAPE_V="model\.embed_tokens\.weight has shape \[$V, 32\].*config asks for \[2147483647, 32\]"
SHAPE_E="model\.embed_tokens\.weight has shape \[$V, 32\].*config asks for \[32000, 4096\]"
expect "eval --init-from-hf, vocab_size 2^31-1" 1 "$SHAPE_V" \
    lim $LIM "$BIN" eval --init-from-hf "$W/hf_vocab" --token-ids "$W/ids.txt"
expect "generate --init-from-hf, vocab_size 2^31-1" 1 "$SHAPE_V" \
    lim $LIM "$BIN" generate --init-from-hf "$W/hf_vocab" --prompt hi --max-new 2
expect "eval --init-from-hf, config.json {} (Llama-2-7B defaults)" 1 "$SHAPE_E" \
    lim $LIM "$BIN" eval --init-from-hf "$W/hf_empty" --token-ids "$W/ids.txt"
expect "generate --init-from-hf, config.json {}" 1 "$SHAPE_E" \
    lim $LIM "$BIN" generate --init-from-hf "$W/hf_empty" --prompt hi --max-new 2
# train: the estimate (Llama-2-7B: about 100 GiB of state) before anything else
expect "train --init-from-hf, config.json {}: the estimate" 1 \
    "needs about [0-9.]+ GiB of memory.*than the [0-9.]+ (MiB|GiB) available \(address-space limit" \
    lim $LIM "$BIN" train --synthetic --model "$W/hf_empty/config.json" \
    --init-from-hf "$W/hf_empty" --batch 1 --seq 8 --steps 1
# train whose --model fits: the HF weights' shapes are checked before allocating
setcfg "$W/hf" "$W/hf_wide" '{"intermediate_size": 128}'
expect "train --init-from-hf, weights narrower than the config" 1 \
    "--init-from-hf .*mlp\.(gate|up|down)_proj\.weight has shape .*config asks for" \
    lim $LIM "$BIN" train --synthetic --model "$W/hf_wide/config.json" \
    --init-from-hf "$W/hf_wide" --batch 1 --seq 8 --steps 1

# --- ckpt export of a checkpoint whose manifest declares a huge model
cp -r "$W/run/checkpoints/step_00000001" "$W/ck_huge"
"$PY" - "$W/ck_huge/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["model_config"]["vocab_size"] = 2147483647
json.dump(m, open(sys.argv[1], "w"))
EOF
expect "ckpt export, manifest declares vocab_size 2^31-1" 1 "ck_huge/manifest\.json: unit" \
    lim $LIM "$BIN" ckpt export "$W/ck_huge" --hf "$W/ex_huge"

# --- eval: an estimate for --batch x --seq, as train has
expect "eval --batch 1048576 --seq 64" 1 \
    "activations of --batch 1048576 x --seq 64 needs about [0-9.]+ GiB of memory, more than the [0-9.]+ (MiB|GiB) available \(address-space limit.*reduce --batch" \
    lim $LIM "$BIN" eval --model "$W/run" --data "$W/data" --batch 1048576 --seq 64

# --- generate: the KV cache for 16 Mi positions (2^31-1 allowed by the config) is estimated
expect "generate --max-new 16777216" 1 \
    "KV cache for [0-9]+ positions .*needs about [0-9.]+ GiB of memory, more than the [0-9.]+ (MiB|GiB) available" \
    lim $LIM "$BIN" generate --model "$W/run" --prompt hi --max-new 16777216

# --- prep: one 60 MB document under an address-space limit just above what prep needs to map
# it. The limit is found by raising it in 32 MiB steps until prep gets past mapping the input and
# starting its worker; there the document's ids (about 160 MB) cannot fit: a clean exit 1 with
# the estimate, and no temp directory left beside --out.
"$PY" - "$W/corpus.txt" "$W/one_doc.txt" <<'EOF'
import sys
t = "".join(l for l in open(sys.argv[1]) if l.strip())  # no blank line: one document
with open(sys.argv[2], "w") as f:
    n = 0
    while n < 60_000_000:
        f.write(t)
        n += len(t)
EOF
found=0
for mib in $(seq 256 32 2048); do
    rm -rf "$W/p_out"
    lim $((mib * 1024)) "$BIN" prep --tokenizer "$W/tok.json" --input "$W/one_doc.txt" \
        --out "$W/p_out" --workers 1 --quiet > /dev/null 2> "$W/p_err.txt"
    rc=$?
    # Open MPI's own start-up under the limit fails in several ways (a plugin that cannot be
    # started, its help parser out of memory, even a double free inside opal_output_verbose
    # while MPI_Init_thread reports a plugin it could not open), and in a CUDA build the dynamic
    # loader cannot map libcublasLt (about 540 MB) under a low limit: all before prep's code runs.
    if grep -aEq "mmap failed|cannot start worker|MPI_INIT|pcre2: out of memory|Out of resource|ompi_mpi_init|opal_show_help|error while loading shared libraries" \
        "$W/p_err.txt" || [ $rc = 124 ]; then
        rm -rf "$W"/.p_out.prep-tmp.* # an environment failure before prep's own code ran
        continue
    fi
    found=1
    echo "  prep under ulimit -v $mib MiB: exit $rc"
    if [ $rc = 1 ] && grep -Eq "one_doc\.txt: a document of [0-9]+ bytes .*needs about .* available \(address-space limit" "$W/p_err.txt"; then
        ok "prep: a too-big document exits 1 with the estimate and the limit"
    else
        bad "prep: exit $rc: $(tail -c 400 "$W/p_err.txt")"
    fi
    left=$(ls -a "$W" | grep -c "prep-tmp")
    [ "$left" = 0 ] && ok "prep: no temp directory left" || bad "prep left $left temp dir(s)"
    [ ! -e "$W/p_out" ] && ok "prep: --out not created" || bad "prep created --out"
    break
done
[ $found = 1 ] || bad "prep: no limit between 256 MiB and 2 GiB got past mapping the input"

# --- a signal while a subcommand starts up or waits: exit 1 with a message, not 130 / 143.
# `tokenizer encode` blocks reading a stdin pipe nobody writes; launched with SIGINT at its
# default disposition (a shell's background job would inherit it ignored).
for sig in TERM INT; do
    "$PY" - "$BIN" "$W/tok.json" "$sig" > "$W/sig.txt" 2>&1 <<'EOF'
import signal, subprocess, sys, time
sig = getattr(signal, "SIG" + sys.argv[3])
p = subprocess.Popen([sys.argv[1], "tokenizer", "encode", "--tokenizer", sys.argv[2]],
                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
time.sleep(1.0)
p.send_signal(sig)
try:
    _, err = p.communicate(timeout=20)
except subprocess.TimeoutExpired:
    p.kill()
    _, err = p.communicate()
print("rc", p.returncode)
print(err.decode(errors="replace"))
EOF
    if grep -q "^rc 1$" "$W/sig.txt" && grep -q "SIG$sig" "$W/sig.txt"; then
        ok "SIG$sig while waiting: exit 1 with a message"
    else
        bad "SIG$sig: $(cat "$W/sig.txt")"
    fi
done

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
