"""`shardlm ckpt export RUN --gguf OUT.gguf` read back by the outside references (issue 23).

Three small runs trained here for a few steps (byte-level BPE trained by shardlm, GQA, rope_theta
5e5): A untied, B with tied embeddings, and C a LoRA run on B's HF export (merged by --gguf).
Each is exported with --hf (fp32 safetensors, the reference weights) and --gguf in f32, f16,
bf16 and q8_0; then:
1. gguf.GGUFReader: every metadata key, its GGUF value type and value (from config.json,
   tokenizer.json and `shardlm tokenizer info`), every tensor's name, shape (GGUF order, fastest
   first), type (norms f32) and 32-byte aligned offset, no other key or tensor;
2. the tensors dequantized by gguf-py, with each head's Q / K rows put back into HF's order by
   this script (row 2i + s of a head is HF row s D/2 + i), equal to the safetensors within the
   type's rounding bound: 0 for f32, half an ulp for f16 / bf16 (relative 2^-11 / 2^-8, f16
   subnormals 2^-25 absolute), and for q8_0 d / 2 per element where d, the block's stored fp16
   scale, must be the smallest fp16 with 127 d >= max|x| of the reference block;
3. transformers' GGUF loader (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)): its
   state dict (transformers undoes the Q / K order itself: an independent check of the layout)
   equals the safetensors within the same bounds; its logits on several prompts equal, within
   fp32 noise (1e-4 absolute + 1e-4 relative of the largest logit: the same weights in one
   fp32 computation differ only by summation order), those of the HF-export model whose weights
   this script rounded to the type itself (numpy f16, torch bf16, and its own q8_0 round trip),
   the rounding being bounded per element by 2.; for f32, greedy generate() equals `shardlm
   generate --temperature 0` id for id;
4. --chat-template (llama2, llama3, a template file) is stored as Jinja that transformers'
   apply_chat_template renders to the ids `shardlm generate --chat` prompts with, a FILE.jinja
   as it is; the tokenizer transformers builds from the GGUF encodes tinyshakespeare lines and hostile
   strings as `shardlm tokenizer encode --bos` (special-token text with --allow-special, as
   transformers matches control tokens in text);
5. the CLI: an existing OUT is refused without --overwrite and left as it was, replaced with it.
Usage: gguf_export.py (SHARDLM_BIN, SLM_SHARED_DIR from CTest). Exit 77 naming the package when
gguf, numpy, torch or transformers is missing.
"""

import json
import os
import subprocess
import struct
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGUFReader, GGMLQuantizationType as QT
except ImportError as e:
    print(f"SKIP: gguf / numpy not importable ({e})")
    sys.exit(77)
try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"SKIP: torch / transformers / safetensors not importable ({e})")
    sys.exit(77)
if int(transformers.__version__.split(".")[0]) < 5:
    print(f"SKIP: needs transformers 5 (its GGUF tokenizer and dtype=), found "
          f"{transformers.__version__}")
    sys.exit(77)

transformers.utils.logging.disable_progress_bar()
SHARDLM = os.environ["SHARDLM_BIN"]
CORPUS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
THETA = 500000.0
TYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0}
FTYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def run(*args, data=None, ok=True):
    r = subprocess.run([SHARDLM, *args], input=data, capture_output=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"shardlm {' '.join(args)}: exit {r.returncode}: {r.stderr.decode()}")
    return r


# --- references ---------------------------------------------------------------------------------

def f16_round(x):
    return x.astype(np.float16).astype(np.float32)


def bf16_round(x):
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()


def q8_0_round(x):
    """The spec'd q8_0 round trip, written here: blocks of 32 along rows, d the smallest fp16
    with 127 d >= max|x| (fp16(max|x|/127), one step up where that falls short), q = round half
    away from zero of x / d, clamped to +-127; returns (d * q, d per block)."""
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(axis=1).astype(np.float64)
    d16 = (amax / 127).astype(np.float16)
    short = d16.astype(np.float64) * 127 < amax
    d16[short] = np.nextafter(d16[short], np.float16(np.inf))
    d = d16.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(d[:, None] > 0, b / d[:, None], 0)
    q = np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), -127, 127)
    return (q * d[:, None]).reshape(x.shape).astype(np.float32), d


def round_to(kind, x):
    if kind == "f32" or x.ndim == 1:
        return x
    if kind == "f16":
        return f16_round(x)
    if kind == "bf16":
        return bf16_round(x)
    return q8_0_round(x)[0]


def bound_ok(kind, ref, got, d=None):
    """Elementwise |got - ref| within the type's rounding bound; (ok, worst excess)."""
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    if kind == "f32" or ref.ndim == 1:
        lim = np.zeros_like(err)
    elif kind == "f16":
        lim = np.maximum(np.abs(ref) * 2.0 ** -11, 2.0 ** -25)
    elif kind == "bf16":
        lim = np.abs(ref) * 2.0 ** -8
    else:
        lim = np.repeat(d.astype(np.float64) / 2, 32).reshape(ref.shape)
    return bool((err <= lim).all()), float((err - lim).max())


def unpermute(w, heads):
    """HF row order from llama.cpp's: each head's row 2i + s holds HF row s D/2 + i."""
    rows = w.shape[0]
    D = rows // heads
    out = np.empty_like(w)
    for h in range(heads):
        for j in range(D):
            out[h * D + (j % 2) * (D // 2) + j // 2] = w[h * D + j]
    return out


HF_OF = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k":
         "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up":
         "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_name(g):
    if g == "token_embd.weight":
        return "model.embed_tokens.weight"
    if g == "output_norm.weight":
        return "model.norm.weight"
    if g == "output.weight":
        return "lm_head.weight"
    _, l, part, _ = g.split(".")
    return f"model.layers.{l}.{HF_OF[part]}.weight"


# --- checks ------------------------------------------------------------------------------------

def field_value(f):
    return f.contents()


def check_file(label, path, kind, cfg, tok_json, info, st):
    r = GGUFReader(path)
    V = gguf.GGUFValueType
    L, H, KV = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    C = cfg["hidden_size"]
    vocab = tok_json["model"]["vocab"]
    added = {t["id"]: t for t in tok_json.get("added_tokens", [])}
    n_ids = max(list(vocab.values()) + list(added)) + 1
    tokens = [None] * n_ids
    for s, i in vocab.items():
        tokens[i] = s
    for i, t in added.items():
        tokens[i] = t["content"]
    types = [3 if i in added and added[i]["special"] else 4 if i in added else 1
             for i in range(n_ids)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    want = {
        "general.architecture": (V.STRING, "llama"),
        "general.name": (V.STRING, "shardlm export"),
        "general.alignment": (V.UINT32, 32),
        "general.file_type": (V.UINT32, FTYPE[kind]),
        "general.quantization_version": (V.UINT32, 2),
        "llama.vocab_size": (V.UINT32, cfg["vocab_size"]),
        "llama.context_length": (V.UINT32, cfg["max_position_embeddings"]),
        "llama.embedding_length": (V.UINT32, C),
        "llama.block_count": (V.UINT32, L),
        "llama.feed_forward_length": (V.UINT32, cfg["intermediate_size"]),
        "llama.attention.head_count": (V.UINT32, H),
        "llama.attention.head_count_kv": (V.UINT32, KV),
        "llama.rope.dimension_count": (V.UINT32, C // H),
        "llama.rope.freq_base": (V.FLOAT32, np.float32(cfg["rope_theta"])),
        "llama.attention.layer_norm_rms_epsilon": (V.FLOAT32, np.float32(cfg["rms_norm_eps"])),
        "tokenizer.ggml.model": (V.STRING, "gpt2"),
        "tokenizer.ggml.pre": (V.STRING, "gpt-2"),
        "tokenizer.ggml.tokens": ([V.ARRAY, V.STRING], tokens),
        "tokenizer.ggml.token_type": ([V.ARRAY, V.INT32], types),
        "tokenizer.ggml.merges": ([V.ARRAY, V.STRING], merges),
        "tokenizer.ggml.bos_token_id": (V.UINT32, int(info["bos_id"])),
        "tokenizer.ggml.eos_token_id": (V.UINT32, int(info["eos_id"])),
        "tokenizer.ggml.padding_token_id": (V.UINT32, int(info["pad_id"])),
        "tokenizer.ggml.add_bos_token": (V.BOOL, True),
        "tokenizer.ggml.add_eos_token": (V.BOOL, False),
    }
    got_keys = [k for k in r.fields if not k.startswith("GGUF.")]
    check(sorted(got_keys) == sorted(want), f"{label}: keys {sorted(set(got_keys) ^ set(want))} "
          "differ from the expected set")
    for k, (ty, val) in want.items():
        f = r.fields.get(k)
        if f is None:
            continue
        tys = f.types if isinstance(ty, list) else f.types[:1]
        check(tys == (ty if isinstance(ty, list) else [ty]), f"{label}: {k} types {f.types}")
        v = field_value(f)
        check(v == val, f"{label}: {k} = {str(v)[:80]} expected {str(val)[:80]}")
    check(int(field_value(r.fields["GGUF.version"])) == 3, f"{label}: version")
    # tensors
    names = ["token_embd.weight"]
    for l in range(L):
        names += [f"blk.{l}.{p}.weight" for p in HF_OF]
    names.append("output_norm.weight")
    if not cfg.get("tie_word_embeddings", False):
        names.append("output.weight")
    check(sorted(t.name for t in r.tensors) == sorted(names),
          f"{label}: tensors {sorted(t.name for t in r.tensors)}")
    worst = 0.0
    for t in r.tensors:
        ref = st[hf_name(t.name)]
        check(t.data_offset % 32 == 0, f"{label}: {t.name} at unaligned offset {t.data_offset}")
        check(list(t.shape) == list(reversed(ref.shape)),
              f"{label}: {t.name} shape {list(t.shape)} vs HF {list(ref.shape)}")
        want_t = QT.F32 if ref.ndim == 1 else TYPES[kind]
        check(t.tensor_type == want_t, f"{label}: {t.name} type {t.tensor_type.name}")
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ref.shape)
        d = None
        if t.tensor_type == QT.Q8_0:
            raw = np.asarray(t.data).reshape(-1, 34)
            d = raw[:, :2].copy().view(np.float16).astype(np.float32).reshape(-1)
        heads = H if ".attn_q." in t.name else KV if ".attn_k." in t.name else 0
        if heads:
            x = unpermute(x, heads)
            if d is not None:
                d = unpermute(d.reshape(ref.shape[0], -1), heads).reshape(-1)
        if d is not None:
            _, dref = q8_0_round(ref)
            check(np.array_equal(d, dref), f"{label}: {t.name}: q8_0 scales differ from "
                  "the smallest fp16 d with 127 d >= max|x|")
        ok, excess = bound_ok(kind, ref, x, d)
        worst = max(worst, excess)
        check(ok, f"{label}: {t.name}: dequantized values outside the {kind} bound by {excess}")
    print(f"{label}: {len(got_keys)} keys, {len(r.tensors)} tensors within the {kind} bound",
          file=sys.stderr)
    return r


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def check_transformers(label, gguf_path, kind, hf_dir, st, prompts_ids, cfg, run_dir=None,
                       prompts=()):
    d, name = os.path.split(gguf_path)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    m.eval()
    c = m.config
    check((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size,
           c.intermediate_size, c.vocab_size) ==
          (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
           cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]),
          f"{label}: transformers config {c}")
    rp = getattr(c, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(c, "rope_theta", None))
    check(theta is not None and abs(theta - cfg["rope_theta"]) < 1e-3, f"{label}: theta {theta}")
    check(bool(c.tie_word_embeddings) == bool(cfg.get("tie_word_embeddings", False)),
          f"{label}: tie_word_embeddings {c.tie_word_embeddings}")
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    ref = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    ref.eval()
    rsd = ref.state_dict()
    for k, w in st.items():
        rounded = round_to(kind, w)
        dd = q8_0_round(w)[1] if kind == "q8_0" and w.ndim == 2 else None
        ok, excess = bound_ok(kind, w, sd[k], dd)
        check(ok, f"{label}: transformers' {k} outside the {kind} bound by {excess}")
        rsd[k].copy_(torch.from_numpy(rounded))
    worst = 0.0
    for ids in prompts_ids:
        a, b = logits(m, ids), logits(ref, ids)
        err = float(np.abs(a - b).max())
        lim = 1e-4 + 1e-4 * float(np.abs(b).max())
        worst = max(worst, err)
        check(err <= lim, f"{label}: logits differ by {err} (bound {lim}) on {len(ids)} ids")
    print(f"{label}: transformers {transformers.__version__} GGUF model: weights within the "
          f"{kind} bound, logits max |diff| {worst:.3g} vs the {kind}-rounded reference",
          file=sys.stderr)
    if run_dir is not None:
        for text, ids in zip(prompts, prompts_ids):
            with torch.no_grad():
                out = m.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                 dtype=torch.long), do_sample=False, max_new_tokens=16,
                                 pad_token_id=cfg["pad"])
            hf_new = out[0, len(ids):].tolist()
            r = run("generate", "--model", run_dir, "--prompt", text, "--max-new", "16",
                    "--temperature", "0", "--stop-at-eos", "--ids", "--threads", "2")
            # --ids prints the prompt's ids (BOS included) and then the new ones
            got = [int(x) for x in r.stderr.decode().strip().splitlines()[-1].split()]
            check(got[:len(ids)] == ids, f"{label}: generate's prompt ids {got[:len(ids)]}")
            slm = got[len(ids):]
            check(slm == hf_new, f"{label}: greedy transformers {hf_new} vs shardlm {slm}")


def check_tokenizer(label, gguf_path, tok_path, texts):
    d, name = os.path.split(gguf_path)
    t = AutoTokenizer.from_pretrained(d, gguf_file=name)
    n = 0
    for s in texts:
        special = "<|" in s
        args = ["tokenizer", "encode", "--tokenizer", tok_path, "--bos", "--whole"]
        if special:
            args.append("--allow-special")
        ref = [int(x) for x in run(*args, data=s.encode()).stdout.split()]
        got = t(s)["input_ids"]
        n += len(ref)
        if not check(got == ref, f"{label}: GGUF tokenizer({s[:40]!r}) = {got[:12]} vs shardlm "
                                 f"{ref[:12]}"):
            break
    print(f"{label}: tokenizer from the GGUF: {len(texts)} texts, {n} ids equal", file=sys.stderr)


def check_chat(w, run_dir, tok_path):
    """--chat-template: llama2, llama3 and a template file written as Jinja, rendered by
    transformers (apply_chat_template of the GGUF's tokenizer) to the ids `shardlm generate
    --chat` prompts with; a FILE.jinja stored byte for byte."""
    tpl = os.path.join(w, "tpl.json")
    with open(tpl, "w") as f:
        json.dump({"begin": "<|begin_of_text|>", "system": "System: {content}\n\n",
                   "user": "User: {content}\n", "assistant": "Bot:{content}<|eot_id|>\n",
                   "trim": False}, f)
    jin = os.path.join(w, "own.jinja")
    with open(jin, "w") as f:
        f.write("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    convs = [(None, "Hi there"), ("Be brief. 'Quote' \\ back", "  What light\tthrough yonder?  ")]
    for spec in ("llama2", "llama3", tpl, jin):
        out = os.path.join(w, "gguf", f"chat_{os.path.basename(spec)}.gguf")
        run("ckpt", "export", run_dir, "--gguf", out, "--type", "f16", "--chat-template", spec,
            "--quiet")
        r = GGUFReader(out)
        f = r.fields.get("tokenizer.chat_template")
        if not check(f is not None, f"--chat-template {spec}: no tokenizer.chat_template"):
            continue
        if spec == jin:
            check(f.contents() == open(jin).read(), "FILE.jinja not stored as it is")
            continue
        d, name = os.path.split(out)
        t = AutoTokenizer.from_pretrained(d, gguf_file=name)
        for system, user in convs:
            msgs = ([{"role": "system", "content": system}] if system else []) + \
                   [{"role": "user", "content": user}]
            got = t.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if isinstance(got, dict) or hasattr(got, "input_ids"):
                got = got["input_ids"]
            args = ["generate", "--model", run_dir, "--chat", spec, "--prompt", user,
                    "--max-new", "0", "--ids", "--temperature", "0"]
            if system:
                args += ["--system", system]
            ref = [int(x) for x in run(*args).stderr.decode().strip().splitlines()[-1].split()]
            check(list(got) == ref, f"--chat-template {os.path.basename(spec)}: transformers "
                  f"renders {list(got)[:40]} vs shardlm generate --chat {ref[:40]}")
    print(f"chat templates: llama2, llama3, a template file and a .jinja checked",
          file=sys.stderr)


def llama3_divisors(theta, D, factor, lo, hi, old_ctx):
    """Llama 3.1's per-frequency divisor (inv_freq / scaled inv_freq), from Meta's reference
    apply_scaling: high frequencies kept, low ones slowed by factor, a blend in between."""
    out = []
    for i in range(0, D, 2):
        f = 1.0 / theta ** (i / D)
        wl = 2 * np.pi / f
        if wl < old_ctx / hi:
            g = f
        elif wl > old_ctx / lo:
            g = f / factor
        else:
            sm = (old_ctx / wl - lo) / (hi - lo)
            g = (1 - sm) * f / factor + sm * f
        out.append(f / g)
    return np.array(out)


def check_shapes_run(w, tok_path, info):
    """A config off the common path: hidden 48 (q8_0 falls back to f16 for rows of 48), head_dim
    16 with 4 heads (key_length / value_length), Llama 3.1 RoPE scaling (rope_freqs.weight), and
    a linear-scaled one (rope.scaling.* keys)."""
    cfg = {"vocab_size": 300, "hidden_size": 48, "intermediate_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "max_position_embeddings": 128, "rope_theta": 10000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}
    rd = train(w, "run_d", cfg)
    hf = os.path.join(w, "hf_d")
    run("ckpt", "export", rd, "--hf", hf)
    st = load_file(os.path.join(hf, "model.safetensors"))
    out = os.path.join(w, "gguf", "run_d_q8_0.gguf")
    r = run("ckpt", "export", rd, "--gguf", out, "--type", "q8_0")
    check(b"written as f16" in r.stderr, f"no f16 fallback warning: {r.stderr[-300:]!r}")
    g = GGUFReader(out)
    for k, v in (("llama.rope.dimension_count", 16), ("llama.attention.key_length", 16),
                 ("llama.attention.value_length", 16), ("llama.embedding_length", 48)):
        f = g.fields.get(k)
        check(f is not None and f.contents() == v, f"run D: {k} = {f and f.contents()}")
    check("llama.rope.scaling.type" not in g.fields, "run D: llama3 scaling as keys")
    t = {x.name: x for x in g.tensors}
    fr = t.get("rope_freqs.weight")
    if check(fr is not None and fr.tensor_type == QT.F32 and list(fr.shape) == [8],
             "run D: rope_freqs.weight missing or not f32 [8]"):
        ref = llama3_divisors(10000.0, 16, 8.0, 1.0, 4.0, 32)
        got = np.asarray(fr.data, dtype=np.float64)
        check(np.allclose(got, ref, rtol=1e-6, atol=0), f"rope_freqs {got} vs {ref}")
    for name, ty in (("blk.0.attn_q.weight", QT.F16), ("blk.0.ffn_down.weight", QT.Q8_0),
                     ("blk.0.attn_output.weight", QT.Q8_0), ("token_embd.weight", QT.F16)):
        check(t[name].tensor_type == ty, f"run D: {name} {t[name].tensor_type.name}, want {ty.name}")
        x = gguf.quants.dequantize(t[name].data, t[name].tensor_type)
        ref = st[hf_name(name)]
        x = x.reshape(ref.shape)
        if ".attn_q." in name:
            x = unpermute(x, 4)
        kind = "f16" if ty == QT.F16 else "q8_0"
        ok, ex = bound_ok(kind, ref, x, q8_0_round(ref)[1] if kind == "q8_0" else None)
        check(ok, f"run D: {name} outside the {kind} bound by {ex}")
    cfg_l = dict(cfg, rope_scaling={"rope_type": "linear", "factor": 2.0})
    rl = train(w, "run_l", cfg_l)
    out = os.path.join(w, "gguf", "run_l.gguf")
    run("ckpt", "export", rl, "--gguf", out, "--type", "f32", "--quiet")
    g = GGUFReader(out)
    f1, f2 = g.fields.get("llama.rope.scaling.type"), g.fields.get("llama.rope.scaling.factor")
    check(f1 is not None and f1.contents() == "linear" and f2 is not None and
          f2.contents() == 2.0 and "rope_freqs.weight" not in [x.name for x in g.tensors],
          "run L: linear scaling keys")
    print("run D / L: head_dim, f16 fallback, llama3 rope_freqs, linear scaling keys checked",
          file=sys.stderr)


def spm_run(spm, w, name, remove_extra_whitespaces):
    """A SentencePiece BPE (byte fallback, 400 pieces) trained on the corpus, a dataset and a
    2-step run on it in W/NAME; returns (dir, tokenizer.model path, run dir)."""
    d = os.path.join(w, name)
    os.makedirs(d)
    spm.SentencePieceTrainer.train(
        input=os.path.join(w, "corpus.txt"), model_prefix=os.path.join(d, "sp"),
        vocab_size=400, model_type="bpe", byte_fallback=True, minloglevel=2,
        normalization_rule_name="identity", remove_extra_whitespaces=remove_extra_whitespaces)
    tok_path = os.path.join(d, "tokenizer.model")
    os.rename(os.path.join(d, "sp.model"), tok_path)
    run("prep", "--tokenizer", tok_path, "--input", os.path.join(w, "corpus.txt"), "--out",
        os.path.join(d, "data"), "--val-fraction", "0.1", "--workers", "1", "--quiet")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64,
                   "num_hidden_layers": 1, "num_attention_heads": 4,
                   "max_position_embeddings": 64}, f)
    rd = os.path.join(d, "run")
    run("train", "--data", os.path.join(d, "data"), "--model", os.path.join(d, "config.json"),
        "--batch", "2", "--seq", "32", "--steps", "2", "--threads", "2", "--peak-gflops", "10",
        "--log-every", "0", "--out", rd)
    return d, tok_path, rd


def check_spm(w, text, hostile):
    """A SentencePiece tokenizer.model run: tokenizer.ggml.model "llama" with scores and types
    read back equal to the model's (sentencepiece's own reader), and the tokenizer transformers
    builds from the GGUF encodes as shardlm does."""
    try:
        import sentencepiece as spm
    except ImportError:
        print("spm: sentencepiece not importable, SentencePiece export not checked",
              file=sys.stderr)
        return
    d, tok_path, rd = spm_run(spm, w, "spm", remove_extra_whitespaces=False)
    out = os.path.join(d, "gguf", "spm.gguf")  # alone: from_pretrained(dir) prefers tokenizer.model
    os.makedirs(os.path.dirname(out))
    run("ckpt", "export", rd, "--gguf", out, "--type", "f32", "--quiet")
    g = GGUFReader(out)
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    n = sp.get_piece_size()
    toks = g.fields["tokenizer.ggml.tokens"].contents()
    scores = g.fields["tokenizer.ggml.scores"].contents()
    types = g.fields["tokenizer.ggml.token_type"].contents()
    kind = [1] * n
    for i in range(n):
        kind[i] = (2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                   else 6 if sp.is_byte(i) else 1)
    check(g.fields["tokenizer.ggml.model"].contents() == "llama", "spm: tokenizer.ggml.model")
    # the import side (tokenizer from-gguf of a llama vocabulary): a tokenizer.model that encodes
    # as the run's own, checked on every text below
    back = os.path.join(d, "t.model")
    r = run("tokenizer", "from-gguf", "--gguf", out, "--out", back, ok=False)
    check(r.returncode == 0, f"spm: from-gguf of a llama tokenizer: exit {r.returncode} "
                             f"{r.stderr[-300:]!r}")
    check("tokenizer.ggml.merges" not in g.fields and "tokenizer.ggml.pre" not in g.fields,
          "spm: merges / pre written for a SentencePiece model")
    check(toks == [sp.id_to_piece(i) for i in range(n)], "spm: tokens")
    check(np.array_equal(np.float32(scores), np.float32([sp.get_score(i) for i in range(n)])),
          "spm: scores")
    check(types == kind, f"spm: token types {types[:8]} vs {kind[:8]}")
    for k, v in (("tokenizer.ggml.bos_token_id", sp.bos_id()), ("tokenizer.ggml.eos_token_id",
                 sp.eos_id()), ("tokenizer.ggml.unknown_token_id", sp.unk_id()),
                 ("tokenizer.ggml.add_space_prefix", True), ("tokenizer.ggml.add_bos_token",
                                                               True)):
        check(k in g.fields and g.fields[k].contents() == v, f"spm: {k}")
    dd, name = os.path.split(out)
    t = AutoTokenizer.from_pretrained(dd, gguf_file=name)
    # transformers' Metaspace prepends no "\u2581" to text that starts with a space, where
    # sentencepiece (and llama.cpp with add_space_prefix) always prepends one: such texts are
    # transformers' own divergence, left out
    texts = [x for x in [l for l in text[300000:330000].split("\n") if l][:100] + hostile
             if "<|" not in x and not x.startswith(" ")]
    m = 0
    for s in texts:
        ref = [int(x) for x in run("tokenizer", "encode", "--tokenizer", tok_path, "--bos",
                                   "--whole", data=s.encode()).stdout.split()]
        got = t(s)["input_ids"]
        m += len(ref)
        rt = [int(x) for x in run("tokenizer", "encode", "--tokenizer", back, "--bos", "--whole",
                                  data=s.encode()).stdout.split()]
        check(rt == ref, f"spm: from-gguf's tokenizer.model({s[:40]!r}) = {rt[:12]} vs the run's "
                         f"{ref[:12]}")
        if not check(got == ref, f"spm: GGUF tokenizer({s[:40]!r}) = {got[:12]} vs shardlm "
                                 f"{ref[:12]}"):
            break
    # remove_extra_whitespaces (sentencepiece's default) has no GGUF key: export warns
    d2, _, rd2 = spm_run(spm, w, "spm2", remove_extra_whitespaces=True)
    r = run("ckpt", "export", rd2, "--gguf", os.path.join(d2, "x.gguf"), "--quiet")
    check(b"remove_extra_whitespaces" in r.stderr, f"spm: no warning: {r.stderr[-300:]!r}")
    print(f"spm: tokens / scores / types equal to sentencepiece's; {len(texts)} texts, {m} ids "
          f"equal ({type(t).__name__} from the GGUF, and tokenizer from-gguf's tokenizer.model)",
          file=sys.stderr)


def train(w, name, cfg, extra=()):
    p = os.path.join(w, name + ".json")
    with open(p, "w") as f:
        json.dump({k: v for k, v in cfg.items() if k != "pad"}, f)
    rd = os.path.join(w, name)
    run("train", "--data", os.path.join(w, "data"), "--model", p, "--batch", "8", "--seq", "64",
        "--lr", "1e-2", "--seed", "2", "--threads", "2", "--peak-gflops", "10", "--log-every",
        "0", "--steps", "30", "--out", rd, *extra)
    return rd


def main():
    w = tempfile.mkdtemp(prefix="slm_gguf_out_")
    os.makedirs(os.path.join(w, "gguf"))  # export --gguf creates no directory
    text = open(CORPUS, encoding="utf-8").read()
    with open(os.path.join(w, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(text[:100000])
    tok_path = os.path.join(w, "tokenizer.json")
    run("tokenizer", "train", "--input", os.path.join(w, "corpus.txt"), "--vocab-size", "300",
        "--out", tok_path, "--quiet", "--special", "<|begin_of_text|>,<|end_of_text|>,<|pad|>,"
        "<|eot_id|>,<|start_header_id|>,<|end_header_id|>")
    run("prep", "--tokenizer", tok_path, "--input", os.path.join(w, "corpus.txt"), "--out",
        os.path.join(w, "data"), "--val-fraction", "0.1", "--workers", "1", "--quiet")
    tok_json = json.load(open(tok_path))
    info = dict(l.split(": ", 1) for l in run("tokenizer", "info", "--tokenizer", tok_path)
                .stdout.decode().splitlines() if ": " in l)
    base = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 128, "rope_theta": THETA, "rms_norm_eps": 1e-5,
            "pad": int(info["pad_id"])}
    cfg_a = dict(base, tie_word_embeddings=False)
    cfg_b = dict(base, tie_word_embeddings=True)
    run_a = train(w, "run_a", cfg_a)
    run_b = train(w, "run_b", cfg_b)
    hf_a, hf_b = os.path.join(w, "hf_a"), os.path.join(w, "hf_b")
    run("ckpt", "export", run_a, "--hf", hf_a)
    run("ckpt", "export", run_b, "--hf", hf_b)
    run_c = os.path.join(w, "run_c")
    run("train", "--data", os.path.join(w, "data"), "--model", os.path.join(hf_b, "config.json"),
        "--init-from-hf", hf_b, "--lora-rank", "4",
        "--batch", "8", "--seq", "64", "--lr", "1e-2", "--seed", "3", "--threads", "2",
        "--peak-gflops", "10", "--log-every", "0", "--steps", "10", "--out", run_c)
    hf_c = os.path.join(w, "hf_c")
    run("ckpt", "export", run_c, "--hf", hf_c, "--merge-lora")

    lines = [l for l in text[200000:230000].split("\n") if l][:100]
    hostile = ["", " ", "ROMEO:", "  leading and trailing  ", "tabs\tand\r\nCRLF\n\n",
               "emoji \U0001F680 Hello", "CJK \u4f60\u597d \u3053\u3093\u306b\u3061\u306f",
               "combining e\u0301\u0303", "NUL \x00 byte", "I'm DON'T we'll 12345 3.14",
               "<|begin_of_text|> special <|eot_id|>", "a" + " " * 300 + "b", "\u2028\u00a0\u3000"]
    prompts = ["ROMEO:\nWhat light", "First Citizen:\nWe are accounted poor citizens",
               "\U0001F680 x", text[250000:250400]]
    prompts_ids = [[int(x) for x in run("tokenizer", "encode", "--tokenizer", tok_path, "--bos",
                                        "--whole", data=p.encode()).stdout.split()][:120]
                   for p in prompts]

    for label, rd, hf, cfg in (("A untied", run_a, hf_a, cfg_a), ("B tied", run_b, hf_b, cfg_b),
                               ("C LoRA merged", run_c, hf_c, cfg_b)):
        st = load_file(os.path.join(hf, "model.safetensors"))
        for kind in TYPES:
            out = os.path.join(w, "gguf", f"{os.path.basename(rd)}_{kind}.gguf")
            r = run("ckpt", "export", rd, "--gguf", out, "--type", kind, "--quiet")
            if label.startswith("C"):
                check(b"LoRA merged" in r.stdout, f"{label}: stdout {r.stdout!r}")
            check_file(f"{label} {kind}", out, kind, cfg, tok_json, info, st)
            check_transformers(f"{label} {kind}", out, kind, hf, st, prompts_ids, cfg,
                               run_dir=rd if kind == "f32" else None, prompts=prompts[:3])
            if kind == "f32" and label.startswith("A"):
                check_tokenizer(label, out, tok_path, lines + hostile)

    check_chat(w, run_a, tok_path)
    check_shapes_run(w, tok_path, info)
    check_spm(w, text, hostile)

    # 5. the CLI: no silent overwrite
    out = os.path.join(w, "gguf", "run_a_f32.gguf")
    before = open(out, "rb").read()
    # a 1-D tensor of the wrong length: both shapes printed as GGUF dims, nothing added
    name = b"output_norm.weight"
    at = before.index(struct.pack("<Q", len(name)) + name) + 8 + len(name) + 4  # past n_dims
    ne0 = struct.unpack_from("<Q", before, at)[0]
    bad_path = os.path.join(w, "gguf", "bad_norm.gguf")
    with open(bad_path, "wb") as f:
        f.write(before[:at] + struct.pack("<Q", ne0 - 1) + before[at + 8:])
    r = run("ckpt", "export", bad_path, "--hf", os.path.join(w, "bad_hf"), ok=False)
    want = f"tensor output_norm.weight has ne [{ne0 - 1}] (1 dims), expected [{ne0}] (GGUF order)"
    check(r.returncode == 1 and want.encode() in r.stderr and
          r.stderr.count(bad_path.encode()) == 1,
          f"1-D shape mismatch: exit {r.returncode} {r.stderr[-300:]!r}")
    r = run("train", "--init-from-gguf", bad_path, "--data", os.path.join(w, "data"), "--out",
            os.path.join(w, "bad_run"), "--batch", "1", "--seq", "8", "--steps", "1", ok=False)
    check(r.returncode == 1 and want.encode() in r.stderr and
          r.stderr.count(bad_path.encode()) == 1,
          f"train, 1-D shape mismatch: exit {r.returncode} {r.stderr[-300:]!r}")
    r = run("ckpt", "export", run_a, "--gguf", out, "--type", "q8_0", ok=False)
    check(r.returncode == 1 and b"--overwrite" in r.stderr and open(out, "rb").read() == before,
          f"existing OUT: exit {r.returncode} {r.stderr[-200:]!r}")
    r = run("ckpt", "export", run_a, "--gguf", out, "--type", "q8_0", "--overwrite")
    check(GGUFReader(out).fields["general.file_type"].contents() == 7, "--overwrite: not replaced")
    check(not [f for f in os.listdir(os.path.dirname(out)) if f.startswith(".")],
          "a temp file was left beside OUT")
    r = run("ckpt", "export", run_a, "--gguf", w, ok=False)
    check(r.returncode == 2 and b"is a directory" in r.stderr,
          f"OUT a directory: exit {r.returncode} {r.stderr[-200:]!r}")
    # a write that fails (file size limit 64 KiB, SIGXFSZ ignored: EFBIG) leaves no OUT and no
    # temp file
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    fdir = os.path.join(w, "full")
    os.makedirs(fdir)
    r = subprocess.run([SHARDLM, "ckpt", "export", run_a, "--gguf", os.path.join(fdir, "x.gguf"),
                        "--type", "f32"], capture_output=True, preexec_fn=small_files)
    check(r.returncode == 1 and b"write failed" in r.stderr and not os.listdir(fdir),
          f"failed write: exit {r.returncode} {r.stderr[-200:]!r}, left {os.listdir(fdir)}")
    r = run("ckpt", "export", run_a, "--gguf", os.path.join(w, "new") + "/", ok=False)
    check(r.returncode == 2 and b"expected a file name" in r.stderr and
          not os.path.exists(os.path.join(w, "new")), f"OUT/: exit {r.returncode}")
    r = run("ckpt", "export", run_a, "--gguf", out + "2", "--type", "q4", ok=False)
    check(r.returncode == 2 and b"q8_0" in r.stderr, f"--type q4: exit {r.returncode}")
    r = run("ckpt", "export", run_a, "--gguf", out + "2", "--hf", hf_a, ok=False)
    check(r.returncode == 2, f"--gguf with --hf: exit {r.returncode}")

    subprocess.run(["rm", "-rf", w])
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
