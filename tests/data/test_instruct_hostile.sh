#!/usr/bin/env bash
# Hostile instruction data (issue 13): inputs that used to be accepted silently with a wrong
# result must now stop with an error naming the file / option and what was expected.
#   1. every sample's targets lie beyond the first T+1 tokens (a long prompt, a short --seq):
#      train and eval refuse (before: loss 0.0000 every step, AdamW decay only, exit 0), and a
#      split where only some samples lose their targets warns with their count.
#   2. a raw NUL byte inside a JSONL string (before: the field silently cut there, "a<NUL>b"
#      stored as "a"), in --format text / prompt-completion / chat alike.
#   3. chat template files with placeholders other than {content}: "{role}", Jinja's
#      "{{content}}" / "{{ eos_token }}", "{bos}" in begin (before: written literally into every
#      sample, e.g. "{U}" for "{{content}}"); literal braces that are no placeholder still work.
#   4. --chat-template llama2 on a byte-level BPE: every sample equals HF `tokenizers` on the
#      whole string transformers' Llama-2 template renders ("[/INST] " reply " " EOS; before:
#      "[/INST]reply" EOS, the spaces lost between separately encoded pieces).
#   5. eval of a LoRA run whose base directory moved: the error says how to name the moved base
#      (ckpt export --lora-base), and that route works; a PEFT export with a relative
#      --lora-base records the base's absolute path (before: the relative one, which a loader in
#      another working directory cannot find), as train records --init-from-hf.
. "$(dirname "$0")/../lib.sh"
fails=0
slm_corpus "$W/corpus.txt" 20000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
V=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^vocab_size: //p')
slm_tiny_config "$W/config.json" vocab_size="$V" max_position_embeddings=256
# Prompts of ~60 tokens (several lines), completions after them; one short sample in val too.
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
L = [l for l in open(w + "/corpus.txt", encoding="utf-8").read().split("\n") if l.strip()]
with open(w + "/long.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"prompt": " ".join(L[i * 6:i * 6 + 5]), "completion": L[i * 6 + 5]}) + "\n")
    f.write(json.dumps({"prompt": "Q", "completion": " A"}) + "\n")
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/long.jsonl" --out "$W/long" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet
tr() { # tr DATASET ARGS...
    local d=$1
    shift
    "$BIN" train --data "$d" --model "$W/config.json" --batch 1 --steps 2 --threads 1 \
        --eval-every 0 --log-every 1 "$@"
}

# 1. --seq 8: 40 of 41 samples keep no target: a warning naming the count and the --seq needed
set +e # the commands below are expected to fail; their exit codes are checked
tr "$W/long" --seq 8 --out "$W/r1" > "$W/o1" 2>&1
check "some samples lose every target: trains" 0 $?
has "some samples lose every target: warned with the count" "$W/o1" \
    "40 of 41 train samples keep no target token after the cut to T+1 = 9"
# drop the short sample: now no sample has a target inside its window
head -n 40 "$W/long.jsonl" > "$W/long40.jsonl"
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/long40.jsonl" --out "$W/long40" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet
tr "$W/long40" --seq 8 --out "$W/r2" > "$W/o2" 2>&1
check "no sample keeps a target: train refused (usage)" 2 $?
has "no sample keeps a target: the message" "$W/o2" \
    "every one of the 40 train samples has its first target (completion / assistant) token beyond its first T+1 = 9 tokens"
has "no sample keeps a target: the --seq that would" "$W/o2" "raise --seq to at least [0-9]"
[ ! -d "$W/r2/checkpoints" ] && ok "no checkpoint written" || bad "a checkpoint was written"
tr "$W/long40" --seq 8 --no-packing --out "$W/r3" > "$W/o3" 2>&1
check "no sample keeps a target, --no-packing: refused" 2 $?
"$BIN" eval --model "$W/r1" --data "$W/long40" --split train --seq 8 > "$W/o4" 2>&1
check "eval of such a split: refused (usage)" 2 $?
has "eval of such a split: the message" "$W/o4" "every one of the 40 train samples"
# the --seq the message asks for works
need=$(sed -n 's/.*raise --seq to at least \([0-9]*\).*/\1/p' "$W/o2")
tr "$W/long40" --seq "$need" --out "$W/r5" > "$W/o5" 2>&1
check "--seq $need (the advised one) trains" 0 $?
if grep -q "keep no target" "$W/o5"; then bad "--seq $need still warns"; cat "$W/o5"; else ok "--seq $need: no warning"; fi

# 2. raw NUL bytes in JSONL strings
printf '{"text": "a\x00b", "prompt": "a\x00b", "completion": "c"}\n' > "$W/nul.jsonl"
printf '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x\x00y"}]}\n' \
    > "$W/nulchat.jsonl"
printf '{"user": "{content}", "assistant": "{content}"}' > "$W/tpl.json"
for f in text prompt-completion chat; do
    in="$W/nul.jsonl"
    extra=()
    [ "$f" = chat ] && in="$W/nulchat.jsonl" && extra=(--chat-template "$W/tpl.json")
    "$BIN" prep --tokenizer "$W/tok.json" --input "$in" --out "$W/nul_$f" --format "$f" \
        "${extra[@]}" --quiet > "$W/n_$f" 2>&1
    check "raw NUL, --format $f: refused" 1 $?
    has "raw NUL, --format $f: FILE:LINE and the byte" "$W/n_$f" \
        "$(basename "$in"):1: raw NUL byte (0x00) at byte"
    [ ! -e "$W/nul_$f" ] && ok "raw NUL, --format $f: no dataset" || bad "raw NUL: a dataset"
done

# 3. template placeholders
printf '{"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]}\n' \
    > "$W/c.jsonl"
tpl_case() { # tpl_case NAME TEMPLATE_JSON EXPECTED_RC [PATTERN]
    printf '%s' "$2" > "$W/t.json"
    rm -rf "$W/tpl_out"
    "$BIN" prep --tokenizer "$W/tok.json" --input "$W/c.jsonl" --out "$W/tpl_out" --format chat \
        --chat-template "$W/t.json" --val-fraction 0 --quiet > "$W/t.out" 2>&1
    check "template $1: exit $3" "$3" $?
    [ -z "${4:-}" ] || has "template $1: message" "$W/t.out" "$4"
}
tpl_case "{{content}}" '{"user": "{{content}}", "assistant": "{content}"}' 1 \
    'field "user": {{content}} would write the braces'
tpl_case "{role}" '{"user": "{role}: {content}", "assistant": "{content}"}' 1 \
    'field "user": unknown placeholder "{role}"; only {content} is substituted'
tpl_case "{{ eos_token }}" '{"user": "{content}", "assistant": "{content}{{ eos_token }}"}' 1 \
    'field "assistant": unknown placeholder "{{ eos_token }}"'
tpl_case "{bos} in begin" '{"begin": "{bos}", "user": "{content}", "assistant": "{content}"}' 1 \
    'field "begin": unknown placeholder "{bos}"'
tpl_case "{{ content }}" '{"user": "{{ content }}", "assistant": "{content}"}' 1 \
    'expected exactly one {content}'
tpl_case "literal braces" '{"user": "{ }{content}{", "assistant": "{\"a\": {content}}"}' 0
# the literal braces are kept byte for byte (read back with the tokenizer's decode)
"$PY" - "$W" > "$W/t.txt" <<'PY'
import glob, struct, sys, json
w = sys.argv[1]
b = open(glob.glob(w + "/tpl_out/train_*.bin")[0], "rb").read()
tb, n = struct.unpack_from("<I", b, 12)[0], struct.unpack_from("<Q", b, 16)[0]
print(" ".join(str(int.from_bytes(b[64 + i * tb:64 + (i + 1) * tb], "little")) for i in range(n)))
PY
"$BIN" tokenizer decode --tokenizer "$W/tok.json" < "$W/t.txt" > "$W/t.dec" 2>&1
has "literal braces kept" "$W/t.dec" '^{ }U{{"a": A}$'

# 4. llama2 template on a byte-level BPE against HF tokenizers on the rendered string
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
with open(w + "/l2.jsonl", "w") as f:
    f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": " Who art thou? "},
                                     {"role": "assistant", "content": "A king."},
                                     {"role": "user", "content": "Where?"},
                                     {"role": "assistant", "content": "Here, my lord.\n"}]}) + "\n")
    f.write(json.dumps({"messages": [{"role": "user", "content": "Hello there"},
                                     {"role": "assistant", "content": "Good day"}]}) + "\n")
PY
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/l2.jsonl" --out "$W/l2" --format chat \
    --chat-template llama2 --val-fraction 0 --workers 1 --quiet
BOS=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^bos_id: //p')
EOS=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^eos_id: //p')
"$PY" - "$W" "$BOS" "$EOS" > "$W/l2.out" 2>&1 <<'PY'
import glob, json, struct, sys
from tokenizers import Tokenizer
w = sys.argv[1]
tok = Tokenizer.from_file(w + "/tok.json")
bos, eos = tok.id_to_token(int(sys.argv[2])), tok.id_to_token(int(sys.argv[3]))
b = open(glob.glob(w + "/l2/train_*.bin")[0], "rb").read()
tb, n = struct.unpack_from("<I", b, 12)[0], struct.unpack_from("<Q", b, 16)[0]
ids = [int.from_bytes(b[64 + i * tb:64 + (i + 1) * tb], "little") for i in range(n)]
fl = b[64 + n * tb:]
st = [i for i in range(n) if fl[i] & 2] + [n]
for k, line in enumerate(open(w + "/l2.jsonl")):
    msgs = json.loads(line)["messages"]
    sysm = msgs[0]["content"] if msgs[0]["role"] == "system" else None
    text, tgt = "", ""
    for i, m in enumerate(msgs[1:] if sysm else msgs):  # transformers' Llama-2 chat template
        c = m["content"]
        if i == 0 and sysm:
            c = "<<SYS>>\n" + sysm + "\n<</SYS>>\n\n" + c
        if m["role"] == "user":
            text += bos + "[INST] " + c.strip() + " [/INST]"
        else:
            text += " " + c.strip() + " " + eos
            tgt += " " + c.strip() + " " + eos
    want = tok.encode(text, add_special_tokens=False).ids
    got = ids[st[k]:st[k + 1]]
    got_tgt = tok.decode([t for t, f in zip(got, fl[st[k]:st[k + 1]]) if f & 1],
                         skip_special_tokens=False)
    print("sample", k, "ids", "equal" if got == want else f"differ: {got} vs {want}",
          "targets", "equal" if got_tgt == tgt else f"differ: {got_tgt!r} vs {tgt!r}")
PY
has "llama2 on byte BPE: sample 0 = HF template string" "$W/l2.out" "sample 0 ids equal targets equal"
has "llama2 on byte BPE: sample 1 = HF template string" "$W/l2.out" "sample 1 ids equal targets equal"

# 5. a LoRA run's base moved
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/text" --val-fraction 0.1 \
    --workers 1 --quiet
"$BIN" train --data "$W/text" --model "$W/config.json" --batch 1 --seq 16 --steps 1 --threads 1 \
    --out "$W/pre" > /dev/null 2>&1
"$BIN" ckpt export "$W/pre" --hf "$W/base" > /dev/null 2>&1
check "base exported" 0 $?
tr "$W/long" --seq 128 --init-from-hf "$W/base" --lora-rank 2 --out "$W/lora" > "$W/o6" 2>&1
check "LoRA run" 0 $?
mv "$W/base" "$W/base_moved"
"$BIN" eval --model "$W/lora" --data "$W/long" --split train --seq 128 > "$W/o7" 2>&1
check "eval with the base moved: refused" 1 $?
has "eval with the base moved: names ckpt export --lora-base" "$W/o7" \
    "if it moved, \`shardlm ckpt export RUN --hf OUT --lora-base NEW_DIR \[--merge-lora\]\`"
"$BIN" ckpt export "$W/lora" --hf "$W/merged" --lora-base "$W/base_moved" --merge-lora \
    > "$W/o8" 2>&1
check "export --merge-lora --lora-base MOVED" 0 $?
"$BIN" eval --model "$W/merged" --data "$W/long" --split train --seq 128 > "$W/o9" 2>&1
check "eval of the merged export" 0 $?
(cd "$W" && "$BIN" ckpt export lora --hf peft --lora-base ./base_moved/ > /dev/null 2>&1)
check "PEFT export, relative --lora-base" 0 $?
"$PY" -c 'import json, os, sys
got = json.load(open(sys.argv[1] + "/peft/adapter_config.json"))["base_model_name_or_path"]
want = os.path.realpath(sys.argv[1] + "/base_moved")
print("base_model_name_or_path", got, "ok" if got == want else "want " + want)' "$W" > "$W/o10"
has "PEFT export, relative --lora-base: absolute base_model_name_or_path" "$W/o10" " ok$"
set -e
slm_finish
