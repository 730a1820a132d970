"""Cross-check of shardlm's safetensors bridge against the PyTorch reference (llama_ref.py).

1. import: PyTorch builds a random Llama, writes config.json + safetensors with the writer
   below (written here from the published format, not the `safetensors` package): F32 single
   file, and BF16 split into shards with model.safetensors.index.json. shardlm loads them
   (slm_hf_load through ckpt_tool hf-logits); its logits must match the reference's (computed
   in float64 from the same, dtype-rounded, weights).
2. export: shardlm saves a checkpoint (ckpt_tool make-ckpt) and `shardlm ckpt export`s it as
   fp32 (sharded), bf16 and fp16. The reader below loads them into the reference; its logits
   must match shardlm's logits from the checkpoint itself, and the bf16 / fp16 tensors must
   equal torch's own rounding of the fp32 export bit for bit.
If the `safetensors` package is importable it reads every file as a further check.
Usage: hf_cross.py CKPT_TOOL   (SHARDLM_BIN, SLM_SOURCE_DIR from CTest's environment)
"""

import json
import os
import struct
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from slm_need import need  # noqa: E402

for _m in ("numpy", "torch"):
    need(_m)

import numpy as np
import torch

SRC = os.environ.get("SLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import llama_ref  # noqa: E402

TOOL = sys.argv[1]
SHARDLM = os.environ.get("SHARDLM_BIN", os.path.join(os.path.dirname(TOOL), "..", "..", "shardlm"))

ST_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def st_write(path, tensors, dtype):
    """Writes {name: torch tensor} as a safetensors file in `dtype` ("F32", "F16", "BF16")."""
    tdt, size = ST_DTYPES[dtype]
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        t = t.detach().to(tdt).contiguous()
        # bytes via an int16 / float32 view (numpy has no bfloat16)
        raw = (t.view(torch.int16) if size == 2 else t).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    """Reads a safetensors file -> {name: torch tensor in its stored dtype}, checking the layout."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"{path}: header length {n} not a multiple of 8"
    hdr = json.loads(raw[8 : 8 + n].decode())
    assert raw[8 : 8 + n].decode().rstrip(" ") == raw[8 : 8 + n].decode().rstrip(), "padding"
    data = raw[8 + n :]
    out, spans = {}, []
    for name, e in hdr.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in e.values())
            continue
        tdt, size = ST_DTYPES[e["dtype"]]
        b, en = e["data_offsets"]
        cnt = int(np.prod(e["shape"])) if e["shape"] else 1
        assert en - b == cnt * size, f"{path}: {name}: span {en - b} != {cnt} x {size}"
        spans.append((b, en))
        buf = np.frombuffer(data[b:en], dtype=np.int16 if size == 2 else np.float32).copy()
        t = torch.from_numpy(buf)
        if size == 2:
            t = t.view(tdt)
        out[name] = t.reshape(e["shape"])
    spans.sort()
    pos = 0
    for b, en in spans:
        assert b == pos, f"{path}: gap or overlap at {b}"
        pos = en
    assert pos == len(data), f"{path}: data not fully covered"
    return out


def st_read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else [
        "model.safetensors"]
    out = {}
    for f in files:
        part = st_read(os.path.join(d, f))
        assert not (set(part) & set(out)), "tensor in two shards"
        out.update(part)
    if os.path.exists(idx):
        wm = json.load(open(idx))["weight_map"]
        assert set(wm) == set(out), "index weight_map != tensors"
    return out


def ref_logits(cfg, weights, tokens):
    model = llama_ref.build_model(cfg, dtype=torch.float64)
    llama_ref.load_flat_weights(model, {k: v.to(torch.float64).numpy() for k, v in weights.items()})
    with torch.no_grad():
        logits, _ = llama_ref.forward(model, tokens)
    return logits.numpy()


def c_logits(mode, path, tokens, tmp):
    tp, op = os.path.join(tmp, "tokens.slt"), os.path.join(tmp, "logits.slt")
    llama_ref.write_tensors(tp, {"tokens": tokens.astype(np.int32)})
    subprocess.run([TOOL, mode, path, tp, op], check=True)
    return llama_ref.read_tensors(op)[0]["logits"].astype(np.float64)


def check_close(name, got, want):
    err = np.max(np.abs(got - want))
    scale = np.max(np.abs(want))
    print(f"{name}: max |diff| {err:.3g} (max |logit| {scale:.3g})")
    assert err <= 1e-4 * max(scale, 1.0), f"{name}: logits differ by {err}"


def also_with_package(path):
    try:
        from safetensors.numpy import load_file  # noqa
    except ImportError:
        return
    try:
        load_file(path)
    except TypeError:  # bf16 has no numpy dtype
        from safetensors.torch import load_file as lf
        lf(path)


def main():
    torch.manual_seed(0)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=96,
               hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
               rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.02)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, cfg["vocab_size"], size=(2, 12))
    with tempfile.TemporaryDirectory() as tmp:
        # ---- 1. import --------------------------------------------------------------------
        for tie in (False, True):
            c = dict(cfg, tie_word_embeddings=tie)
            model = llama_ref.build_model(c)
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0, 0.2)
            w = {n: p.detach().clone() for n, p in model.named_parameters()}
            for dtype in ("F32", "BF16"):
                d = os.path.join(tmp, f"imp_{dtype}_{int(tie)}")
                os.makedirs(d)
                json.dump(c, open(os.path.join(d, "config.json"), "w"))
                if dtype == "F32":
                    st_write(os.path.join(d, "model.safetensors"), w, dtype)
                    also_with_package(os.path.join(d, "model.safetensors"))
                else:  # two shards + index
                    names = list(w)
                    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
                    wm = {}
                    for i, part in enumerate(halves):
                        fn = f"model-{i + 1:05d}-of-00002.safetensors"
                        st_write(os.path.join(d, fn), {n: w[n] for n in part}, dtype)
                        wm.update({n: fn for n in part})
                    json.dump({"metadata": {}, "weight_map": wm},
                              open(os.path.join(d, "model.safetensors.index.json"), "w"))
                rounded = {n: t.to(ST_DTYPES[dtype][0]).to(torch.float32) for n, t in w.items()}
                want = ref_logits(c, rounded, tokens)
                got = c_logits("hf-logits", d, tokens, tmp)
                check_close(f"import {dtype} tie={tie}", got, want)

        # ---- 2. export --------------------------------------------------------------------
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        cpath = os.path.join(run, "config.json")
        json.dump(cfg, open(cpath, "w"))
        subprocess.run([TOOL, "make-ckpt", os.path.join(run, "checkpoints"), cpath, "7", "30"],
                       check=True)
        for sub in ("inspect", "verify"):
            subprocess.run([SHARDLM, "ckpt", sub, run], check=True, stdout=subprocess.DEVNULL)
        want = c_logits("ckpt-logits", run, tokens, tmp)
        outs = {}
        for dt, extra in (("fp32", ["--max-shard-size", "40KB"]), ("bf16", []), ("fp16", [])):
            out = os.path.join(tmp, f"exp_{dt}")
            subprocess.run([SHARDLM, "ckpt", "export", run, "--hf", out, "--dtype", dt] + extra,
                           check=True, stdout=subprocess.DEVNULL)
            assert json.load(open(os.path.join(out, "config.json")))["architectures"] == [
                "LlamaForCausalLM"]
            outs[dt] = st_read_dir(out)
            for f in os.listdir(out):
                if f.endswith(".safetensors"):
                    also_with_package(os.path.join(out, f))
        assert os.path.exists(os.path.join(tmp, "exp_fp32", "model.safetensors.index.json"))
        w32 = outs["fp32"]
        got = ref_logits(cfg, {n: t.to(torch.float32) for n, t in w32.items()}, tokens)
        check_close("export fp32 (reference on shardlm's export vs shardlm)", got, want)
        for dt, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            for n, t in w32.items():
                r = t.to(tdt)
                assert torch.equal(outs[dt][n].view(torch.int16), r.view(torch.int16)), \
                    f"{dt} {n}: shardlm's rounding differs from torch's"
            print(f"export {dt}: every tensor equals torch's rounding of the fp32 export")
    print("hf_cross: OK")


if __name__ == "__main__":
    main()
