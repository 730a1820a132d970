"""`shardlm ckpt export` output used by transformers itself (issue 8 items 21 and 34).

A small model (byte-level BPE tokenizer trained by shardlm, rope_theta = 500000, GQA) is trained
for a few steps and exported. Then, with the `transformers` library:
0. (a SentencePiece tokenizer.model run as well: AutoTokenizer encodes as shardlm, see
   spm_check)
1. config.json / generation_config.json carry the tokenizer's BOS / EOS / PAD ids (as
   `shardlm tokenizer info` reports them), and the model config has theta 500000;
2. AutoTokenizer.from_pretrained(OUT) encodes every prompt (tinyshakespeare lines, hostile
   strings) exactly as `shardlm tokenizer encode --bos` does, BOS included;
3. AutoModelForCausalLM.from_pretrained(OUT).generate (greedy) equals `shardlm generate
   --temperature 0` (the KV-cache decode path, src/model/decode.c) id for id, at theta 5e5.
   Greedy choices can only legitimately differ at a near-tie of the two best logits: a
   difference is accepted only where transformers' top-2 gap is below 1e-4 (fp32 logits of this
   model agree to ~1e-6; tests/model/parity.py), and the comparison of that prompt stops there.
Usage: hf_transformers.py   (SHARDLM_BIN, SLM_SHARED_DIR from CTest). Exit 77 (skip) only if
transformers cannot be imported (scripts/setup_test.sh installs it).
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    print(f"SKIP: transformers / torch not importable ({e})")
    sys.exit(77)

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11 (a dataclass
# error inside torch); transformers' generate() imports it only to ask whether the model is
# FSDP-wrapped, which it is not here.
if int(torch.__version__.split(".")[0]) < 2:
    import transformers.generation.utils as _gu
    _gu.is_fsdp_managed_module = lambda module: False

SHARDLM = os.environ["SHARDLM_BIN"]
CORPUS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
THETA = 500000.0
NEW = 24

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def run(*args, data=None):
    r = subprocess.run([SHARDLM, *args], input=data, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"shardlm {' '.join(args)}: exit {r.returncode}: {r.stderr.decode()}")
    return r


def spm_check(w, text, hostile):
    """A SentencePiece tokenizer.model run: the export's tokenizer_config.json makes
    AutoTokenizer (slow LlamaTokenizer; the fast one also when protobuf is importable, which its
    conversion needs) encode as shardlm does, BOS included."""
    try:
        import sentencepiece as spm
    except ImportError:
        print("spm: sentencepiece not importable, SentencePiece export not checked",
              file=sys.stderr)
        return
    d = os.path.join(w, "spm")
    os.makedirs(d)
    spm.SentencePieceTrainer.train(
        input=os.path.join(w, "corpus.txt"), model_prefix=os.path.join(d, "sp"),
        vocab_size=400, model_type="bpe", byte_fallback=True, minloglevel=2,
        normalization_rule_name="identity")
    tok_path = os.path.join(d, "tokenizer.model")
    os.rename(os.path.join(d, "sp.model"), tok_path)
    run("prep", "--tokenizer", tok_path, "--input", os.path.join(w, "corpus.txt"), "--out",
        os.path.join(d, "data"), "--val-fraction", "0.1", "--workers", "1", "--quiet")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64,
                   "num_hidden_layers": 1, "num_attention_heads": 4,
                   "max_position_embeddings": 64}, f)
    run("train", "--data", os.path.join(d, "data"), "--model", os.path.join(d, "config.json"),
        "--batch", "2", "--seq", "32", "--steps", "2", "--threads", "2", "--peak-gflops", "10",
        "--log-every", "0", "--out", os.path.join(d, "run"))
    hf_dir = os.path.join(d, "hf")
    run("ckpt", "export", os.path.join(d, "run"), "--hf", hf_dir)
    kinds = [("slow", False)]
    try:
        import google.protobuf  # noqa: F401
        kinds.append(("fast", True))
    except ImportError:
        print("spm: protobuf not importable, only the slow LlamaTokenizer checked",
              file=sys.stderr)
    texts = [l for l in text[300000:330000].split("\n") if l][:100] + hostile
    # transformers 5 no longer runs SentencePiece for a tokenizer.model: it converts the model to
    # a `tokenizers` pipeline that drops the model's remove_extra_whitespaces normalization (a
    # run of spaces stays a run). Where AutoTokenizer differs from shardlm there, the format's
    # own implementation (the sentencepiece library) decides: shardlm must equal it exactly,
    # BOS must lead, and only under transformers >= 5 is the difference then counted (and
    # printed) rather than failed.
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    for label, fast in kinds:
        t = AutoTokenizer.from_pretrained(hf_dir, use_fast=fast)
        n = deviations = 0
        for s in texts:
            got = t(s)["input_ids"]
            ref = [int(x) for x in run("tokenizer", "encode", "--tokenizer", tok_path, "--bos",
                                       "--whole", data=s.encode()).stdout.split()]
            n += len(ref)
            if got == ref:
                continue
            k = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b),
                     min(len(got), len(ref)))
            what = (f"spm {label} AutoTokenizer({s!r}) differs from shardlm at id {k}: "
                    f"{got[max(0, k - 3):k + 6]} vs {ref[max(0, k - 3):k + 6]}")
            if v5 and got[:1] == ref[:1] == [sp.bos_id()] and ref[1:] == sp.encode(s):
                if not deviations:
                    print(f"  note: {what}; sentencepiece {spm.__version__} agrees with "
                          f"shardlm (transformers {transformers.__version__} deviation)",
                          file=sys.stderr)
                deviations += 1
                continue
            if not check(False, what):
                break
        print(f"spm {label} ({type(t).__name__}): {len(texts)} texts, {n} shardlm ids; "
              f"{deviations} texts where transformers differs from sentencepiece (which equals "
              f"shardlm)", file=sys.stderr)


def main():
    w = tempfile.mkdtemp(prefix="slm_hf_tf_")
    text = open(CORPUS, encoding="utf-8").read()
    with open(os.path.join(w, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text[:100000])
    tok_path = os.path.join(w, "tokenizer.json")
    run("tokenizer", "train", "--input", os.path.join(w, "corpus.txt"), "--vocab-size", "300",
        "--out", tok_path, "--quiet")
    run("prep", "--tokenizer", tok_path, "--input", os.path.join(w, "corpus.txt"), "--out",
        os.path.join(w, "data"), "--val-fraction", "0.1", "--workers", "1", "--quiet")
    with open(os.path.join(w, "config.json"), "w") as f:
        json.dump({"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "max_position_embeddings": 128, "rope_theta": THETA}, f)
    run_dir, hf_dir = os.path.join(w, "run"), os.path.join(w, "hf")
    run("train", "--data", os.path.join(w, "data"), "--model", os.path.join(w, "config.json"),
        "--batch", "8", "--seq", "64", "--lr", "1e-2", "--seed", "2", "--threads", "2",
        "--peak-gflops", "10", "--log-every", "0", "--steps", "150", "--out", run_dir)
    run("ckpt", "export", run_dir, "--hf", hf_dir)

    # 1. special ids
    info = dict(l.split(": ", 1) for l in run("tokenizer", "info", "--tokenizer", tok_path)
                .stdout.decode().splitlines() if ": " in l)
    bos, eos, pad = int(info["bos_id"]), int(info["eos_id"]), int(info["pad_id"])
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    gen = json.load(open(os.path.join(hf_dir, "generation_config.json")))
    for name, d in (("config.json", cfg), ("generation_config.json", gen)):
        check((d.get("bos_token_id"), d.get("eos_token_id"), d.get("pad_token_id")) ==
              (bos, eos, pad), f"{name}: ids {d} vs tokenizer info {bos}/{eos}/{pad}")
    for f in ("tokenizer_config.json", "special_tokens_map.json"):
        check(os.path.isfile(os.path.join(hf_dir, f)), f"export has no {f}")

    # 2. tokenizer
    hf_tok = AutoTokenizer.from_pretrained(hf_dir)
    check(hf_tok.bos_token_id == bos and hf_tok.eos_token_id == eos,
          f"AutoTokenizer bos/eos {hf_tok.bos_token_id}/{hf_tok.eos_token_id}")
    lines = [l for l in text[200000:260000].split("\n") if l][:300]
    hostile = ["", " ", "ROMEO:", "  leading and trailing  ", "tabs\tand\r\nCRLF\n\n",
               "emoji \U0001F680 Hello", "CJK \u4f60\u597d \u3053\u3093\u306b\u3061\u306f",
               "combining e\u0301\u0303", "NUL \x00 byte", "I'm DON'T we'll 12345 3.14",
               "<|bos|> not special", "a" + " " * 300 + "b", "\u2028\u00a0\u3000"]
    n_ids = 0
    for s in lines + hostile:
        got = hf_tok(s)["input_ids"]
        ref = [int(x) for x in run("tokenizer", "encode", "--tokenizer", tok_path, "--bos",
                                   "--whole", data=s.encode()).stdout.split()]
        n_ids += len(ref)
        if not check(got == ref, f"AutoTokenizer({s[:40]!r}) = {got[:12]} vs shardlm {ref[:12]}"):
            break
    print(f"tokenizer: {len(lines) + len(hostile)} texts, {n_ids} ids equal", file=sys.stderr)

    # 3. greedy generation: transformers vs shardlm's KV-cache decode
    model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model.eval()
    # transformers 4 keeps config.rope_theta; transformers 5 moves it into rope_parameters
    theta = getattr(model.config, "rope_theta", None)
    if theta is None:
        theta = (getattr(model.config, "rope_parameters", None) or {}).get("rope_theta")
    check(theta is not None and abs(theta - THETA) < 1e-3, f"HF rope_theta {theta}")
    compared = ties = 0
    for prompt in ["ROMEO:", "", "First Citizen:\nWe are", "\U0001F680 What light"]:
        ids = hf_tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=NEW, pad_token_id=pad)
        hf_new = out[0, ids.shape[1]:].tolist()
        r = run("generate", "--model", run_dir, "--prompt", prompt, "--max-new", str(NEW),
                "--temperature", "0", "--stop-at-eos", "--ids", "--threads", "2")
        # --ids prints the prompt's ids (BOS included) and then the new ones
        all_ids = [int(x) for x in r.stderr.decode().strip().splitlines()[-1].split()]
        check(all_ids[:ids.shape[1]] == ids[0].tolist(), f"generate {prompt!r}: prompt ids "
              f"{all_ids[:ids.shape[1]]} vs AutoTokenizer {ids[0].tolist()}")
        slm_new = all_ids[ids.shape[1]:]
        k = 0
        while k < min(len(hf_new), len(slm_new)) and hf_new[k] == slm_new[k]:
            k += 1
        compared += k
        if k == len(hf_new) == len(slm_new):
            continue
        if k < min(len(hf_new), len(slm_new)):
            with torch.no_grad():
                prefix = torch.tensor([ids[0].tolist() + hf_new[:k]])
                logits = model(prefix).logits[0, -1]
            gap = float(logits[hf_new[k]] - logits[slm_new[k]])
            if abs(gap) < 1e-4:
                ties += 1
                continue
        check(False, f"generate {prompt!r}: HF {hf_new} vs shardlm {slm_new} (first {k} equal)")
    print(f"generate: {compared} greedy ids equal to transformers {transformers.__version__} "
          f"at rope_theta {THETA:g} ({ties} near-ties)", file=sys.stderr)
    check(compared >= 3 * NEW, f"only {compared} ids compared")

    spm_check(w, text, hostile)
    subprocess.run(["rm", "-rf", w])
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
