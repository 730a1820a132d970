"""Outside readers on what `scripts/finetune.sh --base smollm2` wrote (test_finetune_smollm2.sh).

Usage: finetune_exports.py OUT   (OUT: the script's --out directory)

1. The held-out ids the script scores with (heldout.prompt.ids, heldout.full.ids) equal Hugging
   Face `tokenizers`' encoding of the ChatML text of each sample,
   "<|im_start|>user\\nPROMPT<|im_end|>\\n<|im_start|>assistant\\n" + "REPLY<|im_end|>\\n",
   with the base's tokenizer.json (special tokens matched, as prep renders the markup).
2. The PEFT adapter (export/lora-peft) loads with peft.PeftModel.from_pretrained onto
   transformers' LlamaForCausalLM of the base directory, and its logits on one held-out sample
   equal those of transformers' model of the merged export (export/lora-merged) within the fp32
   bound of merging W + (alpha / r) B A in another order: 1e-4 relative to max |logit|.
3. The GGUF exports (export/lora.gguf, export/full.gguf) read with gguf-py's GGUFReader:
   architecture llama, 30 blocks, the ChatML chat template, tokens 49152, and each q8_0 matrix
   checked against the Hugging Face export's (lora-merged, full-hf) for a matrix llama.cpp does
   not permute (blk.N.ffn_down): |w - dequant(q)| <= d / 2 per 32-element block, with
   d <= max|w_block| / 127 * (1 + 2^-10) (the smallest fp16 scale at or above it).
Prints what it checked; exits 1 on a mismatch.
"""

import json
import os
import sys

import numpy as np


def main():
    out = sys.argv[1]
    base = os.path.join(out, "base")
    exp = os.path.join(out, "export")
    fails = 0

    # 1. held-out ids
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(base, "tokenizer.json"))
    prompts = open(os.path.join(out, "heldout.prompts"), encoding="utf-8").read().splitlines()
    comps = open(os.path.join(out, "heldout.completions"), encoding="utf-8").read().splitlines()
    pids = [list(map(int, l.split())) for l in open(os.path.join(out, "heldout.prompt.ids"))]
    fids = [list(map(int, l.split())) for l in open(os.path.join(out, "heldout.full.ids"))]
    assert len(prompts) == len(comps) == len(pids) == len(fids) > 0
    for p, c, pi, fi in zip(prompts, comps, pids, fids):
        ptext = f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n"
        want_p = tok.encode(ptext, add_special_tokens=False).ids
        want_f = want_p + tok.encode(f"{c}<|im_end|>\n", add_special_tokens=False).ids
        if pi != want_p or fi != want_f:
            print(f"FAIL held-out ids of {p!r}:\n  script {fi}\n  tokenizers {want_f}")
            fails += 1
    print(f"held-out ids equal tokenizers' ChatML encoding: {len(prompts)} samples")

    # 2. PEFT adapter vs merged export
    import torch
    import peft
    import transformers
    from transformers import LlamaForCausalLM
    dt = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    ids = torch.tensor([fids[0]])
    with torch.no_grad():
        m = LlamaForCausalLM.from_pretrained(base, **{dt: torch.float32})
        m = peft.PeftModel.from_pretrained(m, os.path.join(exp, "lora-peft"))
        m.eval()
        a = m(input_ids=ids).logits[0].double().numpy()
        del m
        m = LlamaForCausalLM.from_pretrained(os.path.join(exp, "lora-merged"), **{dt: torch.float32})
        m.eval()
        b = m(input_ids=ids).logits[0].double().numpy()
        del m
    err, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
    ok = err <= 1e-4 * scale
    print(f"PEFT adapter on the base vs merged export: max |dlogit| {err:.3g} "
          f"(bound {1e-4 * scale:.3g}) {'ok' if ok else 'FAIL'}")
    fails += not ok

    # 3. GGUF files
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import load_file
    for name, hf in (("lora.gguf", "lora-merged"), ("full.gguf", "full-hf")):
        r = GGUFReader(os.path.join(exp, name))
        f = r.fields

        def val(key):
            fld = f[key]
            part = fld.parts[fld.data[0]]
            return bytes(part).decode() if fld.types[0].name == "STRING" else part[0]

        arch, nb = val("general.architecture"), int(val("llama.block_count"))
        tpl = val("tokenizer.chat_template")
        ntok = len(f["tokenizer.ggml.tokens"].data)
        good = arch == "llama" and nb == 30 and "<|im_start|>" in tpl and ntok == 49152
        print(f"{name}: architecture {arch}, {nb} blocks, {ntok} tokens, "
              f"chat template {'ChatML' if '<|im_start|>' in tpl else 'other'}, "
              f"{len(r.tensors)} tensors {'ok' if good else 'FAIL'}")
        fails += not good
        st = load_file(os.path.join(exp, hf, "model.safetensors"))
        ts = {t.name: t for t in r.tensors}
        for blk in (0, nb - 1):
            t = ts[f"blk.{blk}.ffn_down.weight"]
            w = st[f"model.layers.{blk}.mlp.down_proj.weight"].astype(np.float64)
            q = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(w.shape)
            wb, qb = w.reshape(-1, 32), q.reshape(-1, 32)
            bound = np.abs(wb).max(axis=1, keepdims=True) / 127 * (1 + 2.0**-10) / 2
            worst = float((np.abs(wb - qb) - bound).max())
            good = t.tensor_type.name == "Q8_0" and worst <= 1e-12
            print(f"  blk.{blk}.ffn_down {t.tensor_type.name}: max(|w - q| - d/2) {worst:.3g} "
                  f"{'ok' if good else 'FAIL'}")
            fails += not good
    print(json.dumps({"fails": fails}))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
