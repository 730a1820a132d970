# Shared preamble of the end-to-end shell tests. Source it first:
#     . "$(dirname "$0")/../lib.sh"
# It sets `set -euo pipefail` (a script that reads $? of commands expected to fail turns -e off
# with `set +e` right after, saying so) and gives:
#   BIN      the shardlm binary ($SHARDLM_BIN, set by CTest)
#   PY       python3 with torch & co. ($SLM_PYTHON, else python3)
#   SRC      the source tree ($SLM_SOURCE_DIR, else this file's ../)
#   CORPUS   tinyshakespeare.txt in the shared data folder ($SLM_SHARED_DIR)
#   W        a fresh temporary directory, removed on exit (slm_on_exit adds more clean-up)
#   MPIEXEC  mpirun ($MPIEXEC or the first argument CTest passes, else mpirun); slm_mpirun N ...
#            runs it with --oversubscribe -np N under the run-as-root settings of Open MPI
# Results: ok NAME / bad NAME print "[ ok ] NAME" / "[FAIL] NAME" and count failures;
#   check NAME EXPECTED_RC ACTUAL_RC, has NAME FILE PATTERN (grep) are the usual checks;
#   slm_finish prints the count and exits 1 if anything failed, else 0.
# Fixtures: slm_corpus FILE BYTES (the first BYTES of tinyshakespeare), slm_tiny_config FILE
#   [key=value ...] (a tiny Llama config.json), slm_tiny_data DIR VOCAB (tokenizer + prep).
set -euo pipefail
BIN="${SHARDLM_BIN:?set SHARDLM_BIN to the shardlm binary (CTest sets it)}"
PY="${SLM_PYTHON:-python3}"
SRC="${SLM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
CORPUS="${SLM_SHARED_DIR:?set SLM_SHARED_DIR to the shared/ folder (CTest sets it)}/data/tinyshakespeare.txt"
MPIEXEC="${MPIEXEC:-mpirun}"
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
W=$(mktemp -d "${TMPDIR:-/tmp}/slm_$(basename "$0" .sh).XXXXXX")
SLM_CLEANUP=()
slm_on_exit() { SLM_CLEANUP+=("$1"); } # slm_on_exit 'kill "$pid"': run (eval'd) before W goes
slm_cleanup_() {
    local c
    for c in "${SLM_CLEANUP[@]+"${SLM_CLEANUP[@]}"}"; do eval "$c" 2>/dev/null || true; done
    rm -rf "$W"
}
trap slm_cleanup_ EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }
check() { # check NAME EXPECTED_RC ACTUAL_RC
    if [ "$2" != "$3" ]; then bad "$1: exit $3, expected $2"; else ok "$1"; fi
}
has() { # has NAME FILE PATTERN
    if grep -q -- "$3" "$2"; then ok "$1"; else bad "$1: no \"$3\" in:"; cat "$2"; fi
}
slm_finish() {
    if [ "$fails" -eq 0 ]; then echo "all checks passed"; exit 0; fi
    echo "$fails check(s) failed"
    exit 1
}
slm_mpirun() { # slm_mpirun N COMMAND...
    local n=$1
    shift
    "$MPIEXEC" --oversubscribe -np "$n" "$@"
}
# slm_need WHAT TEST_COMMAND... : unless TEST_COMMAND succeeds (quietly), print "SKIP: WHAT missing"
# and exit 77 (CTest: skipped). The one rule for optional dependencies (tests/CMakeLists.txt), e.g.
#   slm_need "promtool (scripts/setup_test.sh)" command -v promtool
#   slm_need "python module prometheus_client (scripts/setup_test.sh)" "$PY" -c 'import prometheus_client'
slm_need() {
    local what=$1
    shift
    "$@" > /dev/null 2>&1 || { echo "SKIP: $what missing"; exit 77; }
}
slm_corpus() { head -c "$2" "$CORPUS" > "$1"; } # slm_corpus FILE BYTES
# slm_tiny_config FILE [key=value ...]: a Llama config.json; the defaults (vocab 256, hidden 32,
# intermediate 64, 1 layer, 2 heads, 2 kv heads, 32 positions) give way to the key=value pairs
# (JSON values: numbers, true/false), and other keys are added.
slm_tiny_config() {
    local file=$1
    shift
    local keys=(vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads
                num_key_value_heads max_position_embeddings)
    local -A v=([vocab_size]=256 [hidden_size]=32 [intermediate_size]=64 [num_hidden_layers]=1
                [num_attention_heads]=2 [num_key_value_heads]=2 [max_position_embeddings]=32)
    local kv k
    for kv in "$@"; do
        k=${kv%%=*}
        [ -n "${v[$k]+x}" ] || keys+=("$k")
        v[$k]=${kv#*=}
    done
    local out="{" sep=""
    for k in "${keys[@]}"; do
        out+="$sep\"$k\": ${v[$k]}"
        sep=", "
    done
    echo "$out}" > "$file"
}
# slm_tiny_data DIR VOCAB [CORPUS_BYTES]: a byte-level BPE of VOCAB ids trained on the first
# CORPUS_BYTES (default 60000) of tinyshakespeare and a dataset of it in DIR (val fraction 0.1);
# the tokenizer is DIR.tokenizer.json, the corpus DIR.corpus.txt.
slm_tiny_data() {
    slm_corpus "$1.corpus.txt" "${3:-60000}"
    "$BIN" tokenizer train --input "$1.corpus.txt" --vocab-size "$2" --out "$1.tokenizer.json" \
        --quiet
    "$BIN" prep --tokenizer "$1.tokenizer.json" --input "$1.corpus.txt" --out "$1" \
        --val-fraction 0.1 --quiet
}
