"""PyTorch reference of shardlm's Llama-2 model, and the tensor exchange format (.slt).

Written for shardlm's parity tests and benchmarks; plain torch.nn, not `transformers`, but with
Hugging Face's parameter names, [out, in] weight layout, RMSNorm, RoPE `rotate_half` convention
and loss semantics (mean cross-entropy over targets != -1), so that weights map 1:1 onto the C
model's views (src/model/model.h).

Import it from a test (sys.path.insert(0, "<repo>/tests/reference")) and use:

    cfg = load_config("config.json")           # HF LlamaConfig fields, HF defaults filled in
    model = build_model(cfg, dtype=torch.float64)
    tensors, meta = read_tensors("dump.slt")   # {name: np.ndarray}, {json meta}
    load_flat_weights(model, tensors, prefix="param/")
    logits, loss = forward(model, tokens, targets)   # numpy or torch int inputs [B, T]
    loss.backward(); grads = named_grads(model)      # {hf_name: np.ndarray}
    opt = make_adamw(model, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    loss = train_step(model, opt, tokens, targets, max_grad_norm=1.0)

AdamW decays exactly the tensors the C model marks weight_decay (2-D matmul weights incl. an
untied lm_head; not norms, not the embedding).

Tensor file format (.slt, little-endian), written by write_tensors here and by
tests/reference/slm_tensors.c:
    bytes 0-7    magic b"SLMTNS1\\n"
    bytes 8-15   uint64 header length h
    bytes 16..   h bytes of UTF-8 JSON: {"tensors": [{"name": str, "dtype": "f32"|"i32"|"f64",
                 "shape": [int, ...], "offset": int}, ...], "meta": {...}}
    zero padding to a multiple of 64 bytes; then the data area: each tensor's raw row-major
    little-endian elements at data_start + offset (offsets 64-byte aligned; the file ends with
    the last tensor's last byte).
"""

import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -1

# HF LlamaConfig defaults for fields a config.json may omit.
HF_DEFAULTS = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    initializer_range=0.02,
    rope_scaling=None,
    head_dim=None,
)

# ------------------------------------------------------------------------------------------------
# Tensor files

_MAGIC = b"SLMTNS1\n"
_DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4"), "f64": np.dtype("<f8")}


def _align64(n):
    return (n + 63) // 64 * 64


def write_tensors(path, tensors, meta=None):
    """Writes {name: array} (float32 / int32 / float64) to `path` in the .slt format."""
    entries, blobs, off, end = [], [], 0, 0
    for name, arr in tensors.items():
        a = np.asarray(arr)
        if a.dtype.kind == "f" and a.dtype.itemsize == 8:
            code = "f64"
        elif a.dtype.kind == "f":
            code = "f32"
        elif a.dtype.kind in "iu":
            code = "i32"
        else:
            raise ValueError(f"{name}: unsupported dtype {a.dtype}")
        a = np.ascontiguousarray(a, dtype=_DTYPES[code])
        entries.append({"name": name, "dtype": code, "shape": list(a.shape), "offset": off})
        blobs.append((off, a.tobytes()))
        end = off + a.nbytes
        off = _align64(end)
    header = json.dumps({"tensors": entries, "meta": meta or {}}).encode()
    data_start = _align64(16 + len(header))
    buf = bytearray(data_start + end)  # no padding after the last tensor
    buf[0:8] = _MAGIC
    buf[8:16] = struct.pack("<Q", len(header))
    buf[16 : 16 + len(header)] = header
    for o, b in blobs:
        buf[data_start + o : data_start + o + len(b)] = b
    with open(path, "wb") as f:
        f.write(buf)


def read_tensors(path):
    """Reads a .slt file: returns ({name: np.ndarray}, meta dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != _MAGIC:
        raise ValueError(f"{path}: bad magic {raw[:8]!r}, expected {_MAGIC!r}")
    (h,) = struct.unpack("<Q", raw[8:16])
    header = json.loads(raw[16 : 16 + h].decode())
    data_start = _align64(16 + h)
    out = {}
    for e in header["tensors"]:
        dt = _DTYPES[e["dtype"]]
        n = int(np.prod(e["shape"])) if e["shape"] else 1
        start = data_start + e["offset"]
        if start + n * dt.itemsize > len(raw):
            raise ValueError(f"{path}: tensor {e['name']} runs past the end of the file")
        arr = np.frombuffer(raw, dtype=dt, count=n, offset=start)
        out[e["name"]] = arr.reshape(e["shape"]).copy()
    return out, header.get("meta", {})


# ------------------------------------------------------------------------------------------------
# Config


def normalize_config(cfg):
    """Returns a dict of the HF fields with HF defaults filled in (num_key_value_heads None ->
    num_attention_heads)."""
    c = dict(HF_DEFAULTS)
    c.update({k: v for k, v in cfg.items() if k in HF_DEFAULTS})
    # transformers 5 nests the RoPE settings in rope_parameters (rope_scaling's alias there)
    rp = cfg.get("rope_parameters")
    if rp:
        if "rope_theta" in rp:
            c["rope_theta"] = rp["rope_theta"]
        if c["rope_scaling"] is None and rp.get("rope_type", rp.get("type")) != "default":
            c["rope_scaling"] = rp
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    if c["head_dim"] is None:  # HF: hidden_size / num_attention_heads unless given
        assert c["hidden_size"] % c["num_attention_heads"] == 0
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    assert c["num_attention_heads"] % c["num_key_value_heads"] == 0
    return c


def load_config(path):
    with open(path) as f:
        return normalize_config(json.load(f))


# ------------------------------------------------------------------------------------------------
# Model


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019; HF LlamaRMSNorm)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_inv_freq(D, theta, scaling=None):
    """The D/2 RoPE frequencies theta^(-2i/D) (float64), adjusted by an HF rope_scaling dict:
    "linear": all divided by factor; "llama3" (Llama 3.1): with L = original_max_position_embeddings
    and wavelength w = 2 pi / f, frequencies with w < L / high_freq_factor stay, those with
    w > L / low_freq_factor are divided by factor, and in between f is blended as
    (1 - s) f / factor + s f with s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv_freq
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor
    assert kind == "llama3", kind
    lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    L = float(scaling["original_max_position_embeddings"])
    w = 2 * math.pi / inv_freq
    s = (L / w - lo) / (hi - lo)
    blended = (1 - s) * inv_freq / factor + s * inv_freq
    out = torch.where(w > L / lo, inv_freq / factor, blended)
    return torch.where(w < L / hi, inv_freq, out)


def rope_cos_sin(T, D, theta, dtype, scaling=None):
    """cos, sin [T, D] for RoPE (Su et al. 2021), HF layout: the D/2 frequencies theta^(-2i/D)
    (scaled by rope_inv_freq) repeated for the two halves of the head dim. Computed in float64."""
    inv_freq = rope_inv_freq(D, theta, scaling)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.H, self.KV, self.D = H, KV, c["head_dim"]
        self.q_proj = nn.Linear(C, H * self.D, bias=False)
        self.k_proj = nn.Linear(C, KV * self.D, bias=False)
        self.v_proj = nn.Linear(C, KV * self.D, bias=False)
        self.o_proj = nn.Linear(H * self.D, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # [B, H, T, D]
        k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if KV != H:  # GQA: query head h reads kv head h // (H / KV)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ v  # [B, H, T, D]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, Fd = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(C, Fd, bias=False)
        self.up_proj = nn.Linear(C, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    """Parameter names equal HF's (model.layers.N.self_attn.q_proj.weight, lm_head.weight...).
    With tie_word_embeddings the lm_head shares model.embed_tokens.weight and is not listed by
    named_parameters(), as in the C layout."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.tied = bool(c["tie_word_embeddings"])
        if not self.tied:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, tokens, targets=None):
        c = self.config
        B, T = tokens.shape
        D = c["head_dim"]
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(T, D, c["rope_theta"], x.dtype, c.get("rope_scaling"))
        for layer in self.model.layers:
            x = layer(x, cos.to(x.device), sin.to(x.device))
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = x @ w.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
            )
        return logits, loss


def build_model(cfg, dtype=torch.float32):
    """Builds the reference model from a config dict (HF field names). Weights are torch's
    default init; load the C model's with load_flat_weights for parity."""
    return LlamaForCausalLM(normalize_config(cfg)).to(dtype)


def load_flat_weights(model, tensors, prefix=""):
    """Copies tensors[prefix + hf_name] into every parameter (shapes must match exactly; every
    parameter must be present)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = prefix + name
            if key not in tensors:
                raise KeyError(f"weights lack {key}")
            a = torch.as_tensor(np.asarray(tensors[key]))
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{key}: shape {tuple(a.shape)} != {tuple(p.shape)}")
            p.copy_(a.to(p.dtype))


def named_weights(model):
    """{hf_name: np.ndarray} of the current parameters."""
    return {n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters()}


def named_grads(model):
    """{hf_name: np.ndarray} of the parameters' .grad (zeros where None)."""
    out = {}
    for n, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out[n] = g.detach().cpu().numpy().copy()
    return out


def _as_long(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.long)
    return torch.as_tensor(np.asarray(x), dtype=torch.long, device=device)


def forward(model, tokens, targets=None):
    """tokens, targets [B, T] int (numpy or torch; targets may hold -1) -> (logits [B, T, V],
    mean loss or None), torch tensors attached to the graph."""
    dev = next(model.parameters()).device
    tg = None if targets is None else _as_long(targets, dev)
    return model(_as_long(tokens, dev), tg)


def decay_flags(model):
    """{hf_name: bool}: AdamW weight decay on 2-D matmul weights, not on norms / embedding."""
    return {n: (p.dim() == 2 and "embed_tokens" not in n) for n, p in model.named_parameters()}


def make_adamw(model, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0):
    """torch.optim.AdamW with decoupled decay (Loshchilov & Hutter 2019) on decay_flags' set."""
    flags = decay_flags(model)
    decay = [p for n, p in model.named_parameters() if flags[n]]
    rest = [p for n, p in model.named_parameters() if not flags[n]]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def train_step(model, opt, tokens, targets, max_grad_norm=None, lr=None):
    """One optimizer step on one batch: zero grads, forward, backward, optional global-norm
    clipping, AdamW step (lr overrides every group's rate when given). Returns the loss (float)."""
    opt.zero_grad(set_to_none=False)
    _, loss = forward(model, tokens, targets)
    loss.backward()
    if max_grad_norm is not None and max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if lr is not None:
        for g in opt.param_groups:
            g["lr"] = lr
    opt.step()
    return float(loss.detach())


def rel_err(a, b):
    """Norm-wise relative error ||a - b|| / ||b|| (in float64; 0 when both are zero)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nb = np.linalg.norm(b)
    nd = np.linalg.norm(a - b)
    if nb == 0.0:
        return 0.0 if nd == 0.0 else float("inf")
    return float(nd / nb)
