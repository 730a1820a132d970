#!/usr/bin/env python3
"""tokenizer.json files written by Hugging Face `tokenizers` itself load in shardlm and encode id
for id as HF does (issue 8 item 36; test_bpe_hf.py covers files written by shardlm).

Files are built here with the tokenizers Python API, a small BPE trained by HF's BpeTrainer on
tinyshakespeare, and saved with Tokenizer.save:
- gpt2: ByteLevel pre-tokenizer (GPT-2 regex), ByteLevel decoder and post-processor, the
  special token first (id 0) as the trainer puts it, merges saved as pairs;
- llama3: Sequence[Split(Llama-3 regex, isolated), ByteLevel(use_regex false)], ignore_merges,
  special tokens added after training (so at the end of the vocabulary, as in Llama 3), a
  TemplateProcessing post-processor adding BOS;
- blbpe: the `tokenizers.ByteLevelBPETokenizer` convenience class (its own defaults);
- gpt2 and llama3 also pretty=False (one-line JSON).
Checks: `shardlm tokenizer info` reports HF's ids for BOS / EOS; `encode --whole` equals HF's
encode(add_special_tokens=False) on all of tinyshakespeare, the hostile strings of
test_bpe_hf.py, and special-token texts (with --allow-special: HF always matches them); a file
with ByteLevel add_prefix_space true (not implemented) is refused naming the field.
Env: SHARDLM_BIN, SLM_SHARED_DIR (set by CTest).
"""
import os
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from slm_need import need  # noqa: E402

for _m in ("tokenizers",):
    need(_m)

from tokenizers import (ByteLevelBPETokenizer, Regex, Tokenizer, decoders, models,
                        pre_tokenizers, processors, trainers)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_bpe_hf import LLAMA3_REGEX, NASTY  # noqa: E402

SHARDLM = os.environ["SHARDLM_BIN"]
TS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def build(kind, add_prefix_space=False):
    if kind == "blbpe":
        tok = ByteLevelBPETokenizer(add_prefix_space=add_prefix_space)
        tok.train([TS], vocab_size=800, special_tokens=["<|endoftext|>"], show_progress=False)
        return tok
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        specials = ["<|endoftext|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)])
        specials = []
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([TS], trainer)
    if kind == "llama3":
        tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def encode(path, text, allow_special=False):
    args = [SHARDLM, "tokenizer", "encode", "--tokenizer", path, "--whole"]
    r = subprocess.run(args + (["--allow-special"] if allow_special else []),
                       input=text.encode(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"encode failed: {r.stderr.decode()}")
    return [int(x) for x in r.stdout.split()]


def compare(label, hf, path, text, allow_special=False):
    ref = hf.encode(text, add_special_tokens=False).ids
    got = encode(path, text, allow_special)
    if not check(ref == got, f"{label}: shardlm {len(got)} ids vs HF {len(ref)}"):
        i = next((k for k, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
        print(f"    first difference at {i}: HF {ref[i:i+8]} shardlm {got[i:i+8]} "
              f"text {text[:60]!r}", file=sys.stderr)
    return len(ref)


def main():
    tmp = tempfile.mkdtemp(prefix="slm_bpe_hf_native_")
    ts = open(TS, encoding="utf-8").read()
    for kind, bos_name, eos_name in (("gpt2", "<|endoftext|>", "<|endoftext|>"),
                                     ("llama3", "<|begin_of_text|>", "<|end_of_text|>"),
                                     ("blbpe", "<|endoftext|>", "<|endoftext|>")):
        tok = build(kind)
        for pretty in ((True, False) if kind != "blbpe" else (True,)):
            path = os.path.join(tmp, f"{kind}_{int(pretty)}.json")
            tok.save(path, pretty=pretty)
            hf = Tokenizer.from_file(path)
            r = subprocess.run([SHARDLM, "tokenizer", "info", "--tokenizer", path],
                               capture_output=True, text=True)
            if not check(r.returncode == 0, f"{kind}: info exit {r.returncode}: {r.stderr}"):
                continue
            info = dict(l.split(": ", 1) for l in r.stdout.splitlines() if ": " in l)
            check(int(info["vocab_size"]) == hf.get_vocab_size() and
                  int(info["bos_id"]) == hf.token_to_id(bos_name) and
                  int(info["eos_id"]) == hf.token_to_id(eos_name),
                  f"{kind}: info {info} vs HF vocab {hf.get_vocab_size()} bos "
                  f"{hf.token_to_id(bos_name)} eos {hf.token_to_id(eos_name)}")
            n = compare(f"{kind} tinyshakespeare", hf, path, ts)
            for i, s in enumerate(NASTY):
                n += compare(f"{kind} hostile[{i}]", hf, path, s)
            for s in (f"{bos_name}Hello{eos_name}", f"a {eos_name}\n{bos_name} b",
                      f"{bos_name}{bos_name}", f"<|x|> {bos_name[:-1]}"):
                n += compare(f"{kind} special {s!r}", hf, path, s, allow_special=True)
            print(f"{kind} (pretty={pretty}): {n} ids equal to HF", file=sys.stderr)
        # add_prefix_space true is not implemented: refused, never encoded differently
        path = os.path.join(tmp, f"{kind}_prefix.json")
        build(kind, add_prefix_space=True).save(path)
        r = subprocess.run([SHARDLM, "tokenizer", "info", "--tokenizer", path],
                           capture_output=True, text=True)
        check(r.returncode == 1 and "add_prefix_space" in r.stderr,
              f"{kind} add_prefix_space: exit {r.returncode}, stderr {r.stderr!r}")
    subprocess.run(["rm", "-rf", tmp])
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
