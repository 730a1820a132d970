"""The Llama families and scaled RoPE against transformers.LlamaForCausalLM itself (issue 13,
Models): Llama-2 (MHA), TinyLlama-style GQA (32/4 scaled down to 8/1), Llama-3.1 (llama3 RoPE
scaling, theta 5e5), Llama-3.2 (tied embeddings + explicit head_dim 24 != hidden / heads; also
saved in bf16: checked at 1e-5 against transformers' fp32 forward on the same bf16 weights and
within a derived bf16 bound against transformers computing in bf16; the other families in
bf16 through checks 1-2), and linear scaling; each through the four checks below (the
unscaled-model guard only where the RoPE differs from the default).

Tiny random models built by transformers (LlamaConfig with rope_scaling llama3: factor 8,
low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 32, and linear:
legacy "type" key, factor 4), max_position_embeddings 128, saved with save_pretrained
(safetensors), are evaluated on sequences of 101 tokens, i.e. positions far beyond
original_max_position_embeddings:
1. logits and loss of `model_dump --config HF/config.json --weights` (the C forward on the HF
   weights) equal transformers' fp32 forward within 1e-5 relative (norm-wise for the logits);
   as an independent guard, the same transformers model with rope_scaling removed must differ
   by more than 1e-2 (so the comparison sees the scaling at these positions);
2. `shardlm eval --init-from-hf HF --token-ids` (the loader and eval path) gives the same loss
   within 1e-5 relative;
3. greedy `shardlm generate --model HF` (the KV-cache decode path) equals transformers'
   generate() id for id up to position ~100; a difference is accepted only at a near-tie of
   transformers' top two logits (< 1e-4; fp32 logits agree to ~1e-6), where the comparison stops;
4. the reverse: `shardlm train --init-from-hf` for 2 steps, `ckpt export --hf`, and
   transformers loads the export with the same rope_scaling and the loss `shardlm eval` of the
   run (its checkpoint manifest's config) gives, within 1e-5 relative.
The 1e-5 bound: both sides are fp32 (unit round-off 6e-8) with reductions of at most 96 terms
and an attention over <= 101 positions; the C side against a float64 reference is ~1e-6
(tests/model/parity.py), so 1e-5 leaves a 10x margin while the unscaled model is off by ~1.

Usage: hf_rope_scaling.py MODEL_DUMP_BINARY (SHARDLM_BIN, SLM_SHARED_DIR from CTest).
Exit 77 (skip) only if transformers cannot be imported (scripts/setup_test.sh installs it).
"""

import copy
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

try:
    import numpy as np
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: transformers / torch not importable ({e})")
    sys.exit(77)

import llama_ref as ref  # noqa: E402  (only its .slt tensor-file writer / reader)

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11; generate() imports
# it only to ask whether the model is FSDP-wrapped (see tests/ckpt/hf_transformers.py).
if int(torch.__version__.split(".")[0]) < 2:
    import transformers.generation.utils as _gu
    _gu.is_fsdp_managed_module = lambda module: False

SHARDLM = os.environ["SHARDLM_BIN"]
CORPUS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
TOL = 1e-5
T = 100  # positions 0..99 evaluated (101 tokens per sequence: inputs and shifted targets)

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
# name, rope_scaling, LlamaConfig overrides of hf_model's shape, weights dtype. The model
# families (issue 13): Llama-2 (MHA, untied, theta 1e4), TinyLlama-style GQA 32/4 scaled down
# (8 heads / 1 kv head), Llama-3.1 (llama3 scaling, theta 5e5) and Llama-3.2 (tied embeddings,
# explicit head_dim 24 != hidden 64 / 4 heads, llama3 scaling), the last also saved in bf16.
CASES = [
    ("llama3", LLAMA3, {}, "float32"),
    ("linear", {"type": "linear", "factor": 4.0}, {}, "float32"),
    ("llama2_mha", None, dict(num_key_value_heads=4), "float32"),
    ("tinyllama_gqa", None, dict(num_attention_heads=8, num_key_value_heads=1), "float32"),
    ("llama31", LLAMA3, dict(rope_theta=500000.0), "float32"),
    ("llama32_tied_head_dim", LLAMA3,
     dict(rope_theta=500000.0, tie_word_embeddings=True, head_dim=24), "float32"),
    ("llama32_bf16", LLAMA3,
     dict(rope_theta=500000.0, tie_word_embeddings=True, head_dim=24), "bfloat16"),
    # the other families in bf16: checks 1 and 2 only (the decode and train paths are the fp32
    # cases' and the Llama-3.2 bf16 case's; this keeps the test's CI time down)
    ("llama2_mha_bf16", None, dict(num_key_value_heads=4), "bfloat16-light"),
    ("tinyllama_gqa_bf16", None, dict(num_attention_heads=8, num_key_value_heads=1),
     "bfloat16-light"),
    ("llama31_bf16", LLAMA3, dict(rope_theta=500000.0), "bfloat16-light"),
]
# bf16 (unit round-off u = 2^-8): shardlm computes in fp32 on the bf16 weights (exact in fp32),
# so against transformers' fp32 forward on the same weights the fp32 bound 1e-5 holds. Against
# transformers computing in bf16 itself, every stored activation is rounded: about k = 20
# roundings per layer-path (norms, projections, RoPE, softmax, SwiGLU, residuals) x 2 layers + the
# head; independent roundings grow as sqrt(k) u, so the logits' norm-wise error is bounded by
# 4 sqrt(45) u ~ 0.1 (measured 3.1e-2 to 5.5e-2 over the families); a real bug (a wrong
# head_dim, RoPE, tie) is O(1).
BF16_NATIVE_TOL = 4 * (45 ** 0.5) * 2.0 ** -8

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


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def hf_model(V, scaling, seed, over=None, dtype="float32"):
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=scaling,
              initializer_range=0.3, tie_word_embeddings=False, bos_token_id=None,
              eos_token_id=None, pad_token_id=None)
    kw.update(over or {})
    cfg = LlamaConfig(**kw)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.dim() == 1:  # norm gains away from 1
                p.uniform_(0.5, 1.5)
        if dtype == "bfloat16":  # the weights rounded to bf16, kept in fp32 (exact)
            for p in m.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    return m


def case(w, dump, tok_path, V, name, scaling, over, dtype, seed):
    light = dtype.endswith("-light")
    dtype = dtype.replace("-light", "")
    d = os.path.join(w, name)
    model = hf_model(V, scaling, seed, over, dtype)
    if dtype == "bfloat16":  # saved as bf16 tensors (torch_dtype bfloat16), as Llama 3.2 ships;
        # a copy, so that the fp32 reference keeps its fp32 RoPE inv_freq buffer
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    else:
        model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(tok_path), "rb") as f, open(os.path.join(d, "tokenizer.json"),
                                                        "wb") as g:
        g.write(f.read())
    saved = json.load(open(os.path.join(d, "config.json")))
    # transformers 4 saves rope_scaling and torch_dtype, transformers 5 rope_parameters (with
    # rope_theta) and dtype: the fixture must carry the scaling and dtype in either layout
    saved_rs = saved.get("rope_scaling") or saved.get("rope_parameters") or {}
    check(scaling is None or saved_rs.get("factor") == scaling["factor"],
          f"{name}: saved config.json rope scaling {saved_rs}")
    saved_dt = saved.get("torch_dtype", saved.get("dtype"))
    check(saved_dt == dtype, f"{name}: saved config.json dtype {saved_dt}")
    want_hd = (over or {}).get("head_dim", 64 // (over or {}).get("num_attention_heads", 4))
    check(saved.get("head_dim", want_hd) == want_hd, f"{name}: saved head_dim {saved.get('head_dim')}")

    # 1. logits and loss at positions 0..T-1 (B = 2)
    g = np.random.default_rng(seed)
    ids = g.integers(0, V, (2, T + 1)).astype(np.int64)
    x, y = torch.tensor(ids[:, :-1]), torch.tensor(ids[:, 1:])
    with torch.no_grad():
        out = model(x, labels=None)
        logits = out.logits.float().numpy()
        loss = float(torch.nn.functional.cross_entropy(out.logits.reshape(-1, V).float(),
                                                       y.reshape(-1)))
        unscaled = hf_model(V, None, seed, dict(over or {}, rope_theta=10000.0))
        unscaled.load_state_dict(model.state_dict())
        plain = unscaled(x).logits.float().numpy()
        native = None
        if dtype == "bfloat16":  # transformers computing in bf16 itself, loaded as users do
            native = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.bfloat16).eval()
            native = native(x).logits.float().numpy()
    tensors = {"param/" + k: v.detach().float().numpy() for k, v in model.state_dict().items()
               if not k.endswith("inv_freq")}
    tensors.update(tokens=ids[:, :-1].astype(np.int32), targets=ids[:, 1:].astype(np.int32))
    wpath, opath = os.path.join(w, name + ".w.slt"), os.path.join(w, name + ".out.slt")
    ref.write_tensors(wpath, tensors, meta={"what": "transformers init"})
    subprocess.run([dump, "--config", os.path.join(d, "config.json"), "--weights", wpath,
                    "--out", opath, "--batch", "2", "--seq", str(T), "--keep"], check=True)
    t, _ = ref.read_tensors(opath)
    e_logits = rel(t["logits"], logits)
    e_loss = abs(float(t["loss_eval"][0]) - loss) / abs(loss)
    e_plain = rel(plain, logits)
    check(e_logits <= TOL, f"{name}: logits rel err {e_logits:.3e} > {TOL:g}")
    check(e_loss <= TOL, f"{name}: loss rel err {e_loss:.3e} > {TOL:g}")
    changed = scaling is not None or (over or {}).get("rope_theta", 10000.0) != 10000.0
    check(not changed or e_plain > 1e-2,
          f"{name}: unscaled transformers model differs by only {e_plain:.2e}")
    e_native = None
    if native is not None:
        e_native = rel(t["logits"], native)
        check(e_native <= BF16_NATIVE_TOL,
              f"{name}: vs transformers in bf16 rel err {e_native:.3e} > {BF16_NATIVE_TOL:.3g}")

    # 2. shardlm eval --init-from-hf --token-ids: one line per sequence
    idf = os.path.join(w, name + ".ids")
    with open(idf, "w") as f:
        for row in ids:
            f.write(" ".join(str(int(v)) for v in row) + "\n")
    r = run("eval", "--init-from-hf", d, "--token-ids", idf, "--threads", "2")
    ev = dict(l.split(None, 1) for l in r.stdout.decode().splitlines() if l.strip())
    ev_loss = float(ev["loss"].strip(": \t").split()[0])
    e_eval = abs(ev_loss - loss) / abs(loss)
    check(e_eval <= TOL, f"{name}: eval loss {ev_loss} vs transformers {loss} ({e_eval:.3e})")

    if light:
        print(f"[{name}] logits rel err {e_logits:.2e}, loss rel err {e_loss:.2e}, eval loss rel "
              f"err {e_eval:.2e}, vs transformers bf16 compute {e_native:.2e}")
        return

    # 3. greedy generation to position ~100 (KV-cache decode)
    compared = ties = 0
    for prompt in ["ROMEO:", "First Citizen:\nWe are"]:
        r = run("generate", "--model", d, "--prompt", prompt, "--max-new", "90",
                "--temperature", "0", "--ids", "--threads", "2")
        all_ids = [int(v) for v in r.stderr.decode().strip().splitlines()[-1].split()]
        enc = [int(v) for v in run("tokenizer", "encode", "--tokenizer", tok_path, "--bos",
                                   "--whole", data=prompt.encode()).stdout.split()]
        check(all_ids[:len(enc)] == enc, f"{name} {prompt!r}: prompt ids {all_ids[:len(enc)]} "
              f"vs encode {enc}")
        p = torch.tensor([enc])
        with torch.no_grad():
            o = model.generate(p, attention_mask=torch.ones_like(p), do_sample=False,
                               max_new_tokens=90, min_new_tokens=0)
        hf_new, slm_new = o[0, len(enc):].tolist(), all_ids[len(enc):]
        k = 0
        while k < min(len(hf_new), len(slm_new)) and hf_new[k] == slm_new[k]:
            k += 1
        compared += k
        if k == len(hf_new) == len(slm_new):
            continue
        if k < min(len(hf_new), len(slm_new)):
            with torch.no_grad():
                lg = model(torch.tensor([enc + hf_new[:k]])).logits[0, -1]
            if abs(float(lg[hf_new[k]] - lg[slm_new[k]])) < 1e-4:
                ties += 1
                continue
        check(False, f"{name} generate {prompt!r}: HF {hf_new} vs shardlm {slm_new} "
              f"(first {k} equal)")
    check(compared >= 150, f"{name}: only {compared} generated ids compared")

    # 4. the reverse: shardlm trains from these weights (--init-from-hf; the checkpoint
    # manifest carries the scaling), exports, and transformers loads the export with the same
    # rope_scaling and the same loss as `shardlm eval` of the run (positions 0..99)
    run_dir, exp = os.path.join(w, name + ".run"), os.path.join(w, name + ".hf")
    run("train", "--data", os.path.join(w, "data"), "--model", os.path.join(d, "config.json"),
        "--init-from-hf", d, "--batch", "2", "--seq", str(T), "--steps", "2", "--lr", "1e-3",
        "--threads", "2", "--peak-gflops", "10", "--log-every", "0", "--out", run_dir)
    run("ckpt", "export", run_dir, "--hf", exp, "--dtype", "bf16" if dtype == "bfloat16" else "fp32")
    exported = json.load(open(os.path.join(exp, "config.json")))
    check(exported.get("head_dim", want_hd) == want_hd and
          exported.get("tie_word_embeddings") == bool((over or {}).get("tie_word_embeddings")),
          f"{name}: exported head_dim {exported.get('head_dim')} / tie "
          f"{exported.get('tie_word_embeddings')}")
    for layout in ("rope_scaling", "rope_parameters"):
        o = exported.get(layout) or {}
        check(all(isinstance(o.get(k), float) for k in scaling or {} if k.endswith("factor")),
              f"{name}: exported {layout} {o}: factors must be JSON floats (transformers warns)")
    back = LlamaForCausalLM.from_pretrained(exp, torch_dtype=torch.float32).eval()
    rs = back.config.rope_scaling or {}
    if scaling is not None:
        want = {k: v for k, v in scaling.items() if k != "type"}
        got = {k: rs.get(k) for k in want if k != "rope_type"}
        check(rs.get("rope_type", rs.get("type")) == want.pop("rope_type", scaling.get("type"))
              and got == want, f"{name}: exported rope_scaling {rs} vs {scaling}")
    else:
        check(rs.get("rope_type", "default") == "default", f"{name}: exported rope_scaling {rs}")
    with torch.no_grad():
        lb = back(x).logits
        loss_b = float(torch.nn.functional.cross_entropy(lb.reshape(-1, V), y.reshape(-1)))
    # a bf16 export: shardlm evaluates the exported (bf16-rounded) weights, so both sides see
    # the same weights (the run's fp32 masters would differ by the rounding)
    r = run("eval", "--model", exp if dtype == "bfloat16" else run_dir, "--token-ids", idf,
            "--threads", "2")
    ev = dict(l.split(None, 1) for l in r.stdout.decode().splitlines() if l.strip())
    run_loss = float(ev["loss"].strip(": \t").split()[0])
    e_back = abs(run_loss - loss_b) / abs(loss_b)
    check(e_back <= TOL, f"{name}: exported model loss {loss_b} vs shardlm eval of the run "
          f"{run_loss} ({e_back:.3e})")
    check(abs(loss_b - loss) > 1e-4, f"{name}: training changed the loss by only "
          f"{abs(loss_b - loss):.2e} (the reverse check would not see the trained weights)")
    bf = f", vs transformers bf16 compute {e_native:.2e}" if e_native is not None else ""
    print(f"[{name}] logits rel err {e_logits:.2e}, loss rel err {e_loss:.2e}, eval loss rel "
          f"err {e_eval:.2e}, unscaled differs {e_plain:.2e}{bf}; generate: {compared} greedy ids "
          f"equal to transformers {transformers.__version__} ({ties} near-ties); exported "
          f"(trained) model loss vs shardlm eval rel err {e_back:.2e}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.set_num_threads(2)
    w = tempfile.mkdtemp(prefix="slm_hf_rope_")
    with open(os.path.join(w, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(open(CORPUS, encoding="utf-8").read()[:50000])
    tok_path = os.path.join(w, "tokenizer.json")
    run("tokenizer", "train", "--input", os.path.join(w, "corpus.txt"), "--vocab-size", "300",
        "--out", tok_path, "--quiet")
    info = dict(l.split(": ", 1) for l in run("tokenizer", "info", "--tokenizer", tok_path)
                .stdout.decode().splitlines() if ": " in l)
    V = int(info["vocab_size"])
    run("prep", "--tokenizer", tok_path, "--input", os.path.join(w, "corpus.txt"), "--out",
        os.path.join(w, "data"), "--val-fraction", "0.1", "--workers", "1", "--quiet")
    only = os.environ.get("SLM_HF_CASES")  # e.g. "llama32_bf16" to rerun one case by hand
    for i, (name, scaling, over, dtype) in enumerate(CASES):
        if only and name not in only.split(","):
            continue
        case(w, sys.argv[1], tok_path, V, name, scaling, over, dtype, 3 + i)
    subprocess.run(["rm", "-rf", w])
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
