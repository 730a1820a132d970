"""The SentencePiece (`llama`) tokenizer of a GGUF file, against independent references.

1. A SentencePiece BPE model with byte fallback, as Llama 2's (identity normalizer, spaces kept,
   digits split, a dummy prefix; two ChatML control symbols), is trained with the `sentencepiece`
   package on tinyshakespeare in a temp directory. A GGUF is written from it with gguf-py's
   GGUFWriter the way llama.cpp's converter writes a `llama` vocabulary (tokens as pieces, scores,
   token types normal / unknown / control / byte (<0xNN>), BOS / EOS / UNK ids, add_bos_token,
   add_space_prefix; tokenizer.ggml.pre "default"), with a tiny random Llama so that the file is a
   model shardlm and transformers load.
2. `shardlm tokenizer from-gguf` writes a tokenizer.model; its ids for tinyshakespeare and the
   hostile strings (hostile_strings.py, shared with gguf_smollm2.py) must equal
   - sentencepiece's own ids from the trained model (special tokens' text stays text),
   - sentencepiece's ids from the file shardlm wrote (it is a valid SentencePiece model),
   - transformers' GGUF tokenizer (AutoTokenizer.from_pretrained(dir, gguf_file=...)): with
     split_special_tokens=True against plain encoding and without it against --allow-special.
   `tokenizer info` shows the GGUF's BOS / EOS / UNK ids; decode(encode(x)) == x.
3. `generate --model X.gguf` prompts with BOS + sentencepiece's ids (its temp run directory's
   tokenizer); `train --init-from-gguf` runs on data prepared with the from-gguf tokenizer and
   its run directory carries that tokenizer.model byte for byte.
4. Bad metadata: scores count != tokens count, a token type outside 1..6, no tokens, no scores,
   add_eos_token true: `tokenizer from-gguf` exits non-zero naming the file and the key.

Unigram models are not covered: spm*.c implements SentencePiece BPE only (and llama.cpp encodes
every `llama` vocabulary with its BPE-style merge loop).

Usage: gguf_spm.py  (SHARDLM_BIN, SLM_SHARED_DIR from CTest; exit 77 naming a missing package)
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

missing = [m for m in ("numpy", "sentencepiece", "gguf", "transformers")
           if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not installed (the test set-up installs them)")
    sys.exit(77)

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import gguf  # noqa: E402
from hostile_strings import HOSTILE  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "shardlm")
TS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
CONTROL = ["<|im_start|>", "<|im_end|>"]
fails = []


def sh(*args, data=None, check=True):
    r = subprocess.run([BIN, *args], input=data, capture_output=True)
    if check and r.returncode:
        raise SystemExit(f"FAIL: shardlm {' '.join(args)}: exit {r.returncode}: "
                         f"{r.stderr.decode(errors='replace')[-500:]}")
    return r


def train_spm(tmp):
    prefix = os.path.join(tmp, "sp")
    spm.SentencePieceTrainer.train(
        input=TS, model_prefix=prefix, model_type="bpe", vocab_size=1000, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        add_dummy_prefix=True, character_coverage=1.0, control_symbols=CONTROL,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=2, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def vocab_of(sp):
    """tokens, scores, types as llama.cpp's converter (_create_vocab_sentencepiece) makes them."""
    T = gguf.TokenType
    toks, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        toks.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        t = T.NORMAL
        if sp.is_unknown(i):
            t = T.UNKNOWN
        elif sp.is_control(i):
            t = T.CONTROL
        elif sp.is_unused(i):
            t = T.UNUSED
        elif sp.is_byte(i):
            t = T.BYTE
        types.append(int(t))
    return toks, scores, types


def write_gguf(path, toks, scores, types, drop=(), add_eos=False):
    """A tiny random Llama (1 block, width 32, tied embeddings) carrying the vocabulary."""
    rng = np.random.default_rng(5)
    V, D, F = len(toks), 32, 64
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    if "tokens" not in drop:
        w.add_token_list(toks)
    if "scores" not in drop:
        w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(add_eos)
    w.add_add_space_prefix(True)

    def t(name, *shape):
        w.add_tensor(name, (0.05 * rng.standard_normal(shape)).astype(np.float32))
    t("token_embd.weight", V, D)
    w.add_tensor("output_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(D, dtype=np.float32))
    t("blk.0.attn_q.weight", D, D)
    t("blk.0.attn_k.weight", D // 2, D)
    t("blk.0.attn_v.weight", D // 2, D)
    t("blk.0.attn_output.weight", D, D)
    t("blk.0.ffn_gate.weight", F, D)
    t("blk.0.ffn_up.weight", F, D)
    t("blk.0.ffn_down.weight", D, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def shardlm_encode(tok, text, special):
    r = sh("tokenizer", "encode", "--tokenizer", tok, "--whole",
           *(["--allow-special"] if special else []), data=text.encode("utf-8"))
    return [int(x) for x in r.stdout.split()]


def first_diff(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"{len(a)} vs {len(b)} ids, first difference at {i}: {a[i:i + 5]} vs {b[i:i + 5]}"


def check_ids(tmp, sp, gg, tok):
    from transformers import AutoTokenizer
    sp_out = spm.SentencePieceProcessor(model_file=tok)  # the file shardlm wrote
    hf = AutoTokenizer.from_pretrained(tmp, gguf_file=os.path.basename(gg))
    texts = [("tinyshakespeare", open(TS, encoding="utf-8").read())]
    texts += [(f"hostile[{i}]", h) for i, h in enumerate(HOSTILE)]
    texts += [("specials", "<s>x</s><unk> <|im_start|>a<|im_end|>\n" + "<0x41>")]
    n_ok = 0
    for name, text in texts:
        want = sp.encode(text)  # sentencepiece never reads special tokens in text
        refs = [("sentencepiece", False, want),
                ("sentencepiece on shardlm's tokenizer.model", False, sp_out.encode(text)),
                ("transformers (split_special_tokens)", False,
                 hf(text, add_special_tokens=False, split_special_tokens=True).input_ids),
                ("transformers", True, hf(text, add_special_tokens=False).input_ids)]
        got = {s: shardlm_encode(tok, text, s) for s in (False, True)}
        for ref, special, ids in refs:
            if got[special] != ids:
                fails.append(f"{name}: shardlm{' --allow-special' if special else ''} vs {ref}: "
                             f"{first_diff(got[special], ids)}")
            else:
                n_ok += 1
        back = sh("tokenizer", "decode", "--tokenizer", tok, "--bytes",
                  data=(" ".join(map(str, got[False])) + "\n").encode()).stdout
        if back[:-1] != sp.decode(got[False]).encode("utf-8"):
            fails.append(f"{name}: shardlm's decode differs from sentencepiece's")
    print(f"tokenizer: {n_ok} of {4 * len(texts)} comparisons identical "
          f"({len(shardlm_encode(tok, texts[0][1], False))} ids of tinyshakespeare, "
          f"{len(HOSTILE)} hostile strings, specials)")
    info = sh("tokenizer", "info", "--tokenizer", tok).stdout.decode()
    for want in ("type: sentencepiece_bpe", f"vocab_size: {sp.vocab_size()}", "bos_id: 1",
                 "eos_id: 2", "unk_id: 0", "pad_id: -1"):
        if want not in info:
            fails.append(f"tokenizer info lacks '{want}': {info!r}")


def check_generate_train(tmp, sp, gg, tok):
    prompt = "First Citizen:\nBefore we proceed"
    r = sh("generate", "--model", gg, "--prompt", prompt, "--max-new", "3", "--temperature", "0",
           "--ids", "--quiet", check=False)
    if r.returncode:
        fails.append(f"generate --model X.gguf: exit {r.returncode}: {r.stderr.decode()[-300:]}")
    else:
        ids = [int(x) for x in r.stderr.decode().strip().splitlines()[-1].split()]
        want = [1] + sp.encode(prompt)
        if ids[:len(want)] != want or len(ids) != len(want) + 3:
            fails.append(f"generate --model X.gguf: ids {ids} (want the prompt {want} + 3 new)")
    text = os.path.join(tmp, "ts.txt")
    with open(TS, encoding="utf-8") as f, open(text, "w", encoding="utf-8") as o:
        o.write(f.read()[:20000])
    sh("prep", "--tokenizer", tok, "--input", text, "--out", os.path.join(tmp, "data"), "--quiet")
    run = os.path.join(tmp, "run")
    r = sh("train", "--init-from-gguf", gg, "--data", os.path.join(tmp, "data"), "--out", run,
           "--batch", "1", "--seq", "32", "--steps", "1", "--threads", "2", check=False)
    if r.returncode:
        fails.append(f"train --init-from-gguf: exit {r.returncode}: {r.stderr.decode()[-300:]}")
    elif open(os.path.join(run, "tokenizer.model"), "rb").read() != open(tok, "rb").read():
        fails.append("train --init-from-gguf: the run directory's tokenizer.model differs from "
                     "tokenizer from-gguf's")
    print("generate --model X.gguf and train --init-from-gguf: checked")


def check_bad(tmp, toks, scores, types):
    cases = [
        ("scores count", dict(scores=scores[:-1]), "tokenizer.ggml.scores has"),
        ("token type 9", dict(types=types[:5] + [9] + types[6:]), "tokenizer.ggml.token_type 9"),
        ("no tokens", dict(drop=("tokens",)), "tokenizer.ggml.tokens missing"),
        ("no scores", dict(drop=("scores",)), "tokenizer.ggml.scores missing"),
        ("empty token", dict(toks=toks[:7] + [""] + toks[8:]), "text of 0 bytes"),
        ("duplicate token", dict(toks=toks[:300] + [toks[299]] + toks[301:]),
         "is already defined as piece"),
        ("add_eos_token", dict(add_eos=True), "tokenizer.ggml.add_eos_token is true"),
    ]
    for name, kw, want in cases:
        args = dict(toks=toks, scores=scores, types=types)
        args.update({k: v for k, v in kw.items() if k in args})
        path = os.path.join(tmp, f"bad_{name.replace(' ', '_')}.gguf")
        write_gguf(path, args["toks"], args["scores"], args["types"], drop=kw.get("drop", ()),
                   add_eos=kw.get("add_eos", False))
        r = sh("tokenizer", "from-gguf", "--gguf", path, "--out", path + ".model", check=False)
        msg = r.stderr.decode(errors="replace")
        if r.returncode == 0 or path not in msg or want not in msg:
            fails.append(f"bad metadata ({name}): exit {r.returncode}, want a message naming "
                         f"{path} and '{want}': {msg.strip()[-300:]}")
        if os.path.exists(path + ".model"):
            fails.append(f"bad metadata ({name}): {path}.model was written")
    print(f"bad metadata: {len(cases)} files refused")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sp = train_spm(tmp)
        toks, scores, types = vocab_of(sp)
        nbyte = sum(t == int(gguf.TokenType.BYTE) for t in types)
        if nbyte != 256:
            raise SystemExit(f"FAIL: the trained model has {nbyte} byte pieces (want 256)")
        gg = os.path.join(tmp, "spm.gguf")
        write_gguf(gg, toks, scores, types)
        tok = os.path.join(tmp, "tokenizer.model")
        sh("tokenizer", "from-gguf", "--gguf", gg, "--out", tok)
        check_ids(tmp, sp, gg, tok)
        check_generate_train(tmp, sp, gg, tok)
        check_bad(tmp, toks, scores, types)
    for f in fails:
        print("FAIL:", f)
    if fails:
        sys.exit(1)
    print("gguf_spm: all checks passed")


main()
