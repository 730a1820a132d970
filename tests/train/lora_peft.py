"""LoRA end to end against transformers + peft (issue 13, LoRA):

1. `shardlm train --init-from-hf BASE --lora-rank 4 --lora-targets all` on a tiny random
   transformers model (save_pretrained): the state it reports per rank is exactly the frozen
   base's fp32 params plus the adapters' params, grads and AdamW m / v (counted here from the
   transformers model and PEFT's shapes); its checkpoints hold only adapter tensors plus the
   base's path and XXH64.
2. Resume: a copy of the run cut back to its step-3 checkpoint, resumed to step 6, writes a
   step-6 rank file byte-identical to the uninterrupted run's.
3. `ckpt export` writes a PEFT adapter: its adapter_config.json has PEFT's fields, its tensors
   PEFT's key names and shapes; `peft.PeftModel.from_pretrained(base, dir)` gives logits whose
   loss equals `shardlm eval` of the run (rel 1e-4; the eval merges the adapters, fp32), and
   that differ from the base's (the adapters were trained).
4. `ckpt export --merge-lora` loads in transformers with logits equal to the PEFT model's
   (rel 1e-5: fp32 rounding of W + s B A) and weights equal to peft's merge_and_unload.
5. FSDP: the same LoRA run under mpirun -np 2 (FULL_SHARD) starts from the same loss and
   trains, with half the state per rank; the 1-rank step-3 checkpoint resumes on 2 ranks.
6. A changed base is refused on resume and on export (the XXH64 reference).

Usage: lora_peft.py   (SHARDLM_BIN, SLM_SHARED_DIR set by CTest; MPIEXEC optional)
Skips (77) when peft is not importable (scripts/setup_test.sh installs it).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

try:
    import peft
    import transformers
    from peft import PeftModel
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

SHARDLM = os.environ["SHARDLM_BIN"]
CORPUS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
MPIEXEC = os.environ.get("MPIEXEC", "mpirun")
failures = 0
T = 32
R, ALPHA = 4, 8.0


def check(cond, msg):
    global failures
    print(("  ok   " if cond else "  FAIL ") + msg)
    if not cond:
        failures += 1
    return cond


def run(*args, prefix=(), ok=True):
    r = subprocess.run([*prefix, SHARDLM, *args], capture_output=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"shardlm {' '.join(args)}: exit {r.returncode}: {r.stderr.decode()}")
    return r


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def losses(out):
    return [float(x) for x in re.findall(r"\| loss ([0-9.]+)", out)]


def main():
    torch.set_num_threads(2)
    w = tempfile.mkdtemp(prefix="slm_lora_peft_")
    try:
        return body(w)
    finally:
        shutil.rmtree(w, ignore_errors=True)


def body(w):
    with open(os.path.join(w, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(open(CORPUS, encoding="utf-8").read()[:40000])
    tok = os.path.join(w, "tokenizer.json")
    run("tokenizer", "train", "--input", os.path.join(w, "corpus.txt"), "--vocab-size", "300",
        "--out", tok, "--quiet")
    info = dict(l.split(": ", 1) for l in run("tokenizer", "info", "--tokenizer", tok)
                .stdout.decode().splitlines() if ": " in l)
    V = int(info["vocab_size"])
    data = os.path.join(w, "data")
    run("prep", "--tokenizer", tok, "--input", os.path.join(w, "corpus.txt"), "--out", data,
        "--val-fraction", "0.1", "--workers", "1", "--quiet")

    cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.1,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    torch.manual_seed(5)
    base_model = LlamaForCausalLM(cfg).float().eval()
    base = os.path.join(w, "base")
    base_model.save_pretrained(base, safe_serialization=True)
    shutil.copy(tok, os.path.join(base, "tokenizer.json"))

    common = ["--data", data, "--model", os.path.join(base, "config.json"), "--init-from-hf",
              base, "--batch", "2", "--seq", str(T), "--steps", "6", "--lr", "1e-2",
              "--warmup", "1", "--lora-rank", str(R), "--lora-alpha", str(ALPHA),
              "--lora-targets", "all", "--lora-dropout", "0.1", "--threads", "2",
              "--peak-gflops", "10", "--eval-every", "0"]
    run1 = os.path.join(w, "run1")
    r = run("train", *common, "--out", run1, "--ckpt-every-steps", "3")
    log = r.stdout.decode() + r.stderr.decode()
    l1 = losses(r.stdout.decode())

    # 1. state bytes and the checkpoint's contents
    n_base = sum(p.numel() for p in base_model.parameters())
    C, F, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    D = C // cfg.num_attention_heads
    KVD = cfg.num_key_value_heads * D
    shapes = [(C, C), (C, KVD), (C, KVD), (C, C), (C, F), (C, F), (F, C)]  # (in, out)
    n_adapt = L * sum(R * (i + o) for i, o in shapes)
    m = re.search(r"state per rank [^(]+\((\d+) bytes", log)
    check(m is not None and int(m.group(1)) == 4 * n_base + 16 * n_adapt,
          f"state per rank {m.group(1) if m else '?'} bytes == 4 x {n_base} frozen + 16 x "
          f"{n_adapt} adapter = {4 * n_base + 16 * n_adapt}")
    m2 = re.search(r"(\d+) trainable parameters", log)
    check(m2 is not None and int(m2.group(1)) == n_adapt, f"trainable parameters {n_adapt}")
    man = json.load(open(os.path.join(run1, "checkpoints", "step_00000006", "manifest.json")))
    names = [t["name"] for u in man["units"] for t in u["tensors"]]
    check(len(names) == 2 * 7 * L and all(".lora_" in n for n in names),
          f"checkpoint holds only the {2 * 7 * L} adapter tensors ({len(names)})")
    lo = man.get("lora", {})
    check(lo.get("r") == R and lo.get("lora_alpha") == ALPHA and
          os.path.realpath(lo.get("base_model", {}).get("path", "")) == os.path.realpath(base),
          f"manifest lora {lo}")
    rank_bytes = os.path.getsize(os.path.join(run1, "checkpoints", "step_00000006",
                                              "rank_00000.bin"))
    check(rank_bytes < 3 * 4 * n_adapt + 4096,
          f"rank file {rank_bytes} bytes: adapters x (params, m, v) only")
    check(len(l1) == 6 and l1[-1] < l1[0], f"LoRA training losses {l1}")
    r = run("ckpt", "inspect", run1)
    check(b"lora         r 4" in r.stdout and b"adapters only" in r.stdout,
          "ckpt inspect names the LoRA adapters and the base")

    # 2. bitwise resume from step 3
    run2 = os.path.join(w, "run2")
    shutil.copytree(run1, run2)
    shutil.rmtree(os.path.join(run2, "checkpoints", "step_00000006"))
    with open(os.path.join(run2, "checkpoints", "latest"), "w") as f:
        f.write("step_00000003\n")
    r = run("train", *common, "--out", run2, "--ckpt-every-steps", "3", "--resume", "auto")
    a = open(os.path.join(run1, "checkpoints", "step_00000006", "rank_00000.bin"), "rb").read()
    b = open(os.path.join(run2, "checkpoints", "step_00000006", "rank_00000.bin"), "rb").read()
    check(a == b, f"resumed step-6 rank file identical to the uninterrupted run's ({len(a)} B)")

    # 3. PEFT adapter export
    pdir = os.path.join(w, "peft")
    run("ckpt", "export", run1, "--hf", pdir)
    ac = json.load(open(os.path.join(pdir, "adapter_config.json")))
    check(ac["peft_type"] == "LORA" and ac["r"] == R and ac["lora_alpha"] == ALPHA and
          sorted(ac["target_modules"]) == sorted(
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
          f"adapter_config.json {ac}")
    from safetensors import safe_open
    with safe_open(os.path.join(pdir, "adapter_model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        ka = "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"
        kb = "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"
        check(ka in keys and tuple(f.get_tensor(ka).shape) == (R, F) and
              tuple(f.get_tensor(kb).shape) == (KVD, R) and len(keys) == 2 * 7 * L,
              f"PEFT keys and shapes ({len(keys)} tensors, e.g. {ka})")
    g = np.random.default_rng(1)
    ids = g.integers(0, V, (2, T + 1)).astype(np.int64)
    x, y = torch.tensor(ids[:, :-1]), torch.tensor(ids[:, 1:])
    base_fresh = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base_fresh(x).logits.numpy()
    pm = PeftModel.from_pretrained(base_fresh, pdir).eval()
    with torch.no_grad():
        pl = pm(x).logits
        peft_logits = pl.numpy()
        peft_loss = float(torch.nn.functional.cross_entropy(pl.reshape(-1, V), y.reshape(-1)))
    idf = os.path.join(w, "ids.txt")
    with open(idf, "w") as f:
        for row in ids:
            f.write(" ".join(str(int(v)) for v in row) + "\n")
    r = run("eval", "--model", run1, "--token-ids", idf, "--threads", "2")
    ev = dict(l.split(None, 1) for l in r.stdout.decode().splitlines() if l.strip())
    slm_loss = float(ev["loss"].strip(": \t").split()[0])
    e = abs(slm_loss - peft_loss) / abs(peft_loss)
    check(e <= 1e-4, f"PeftModel.from_pretrained loss {peft_loss:.6f} == shardlm eval of the "
          f"LoRA run {slm_loss:.6f} (rel {e:.1e}; peft {peft.__version__}, transformers "
          f"{transformers.__version__})")
    check(rel(peft_logits, base_logits) > 1e-3,
          f"the adapters change the logits (rel {rel(peft_logits, base_logits):.2e} from base)")

    # 4. merged export
    mdir = os.path.join(w, "merged")
    run("ckpt", "export", run1, "--hf", mdir, "--merge-lora")
    merged = LlamaForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        merged_logits = merged(x).logits.numpy()
    e = rel(merged_logits, peft_logits)
    check(e <= 1e-5, f"--merge-lora export logits == PEFT model logits (rel {e:.1e})")
    ref = pm.merge_and_unload()
    worst = 0.0
    sd = merged.state_dict()
    for k, v in ref.state_dict().items():
        if k in sd:
            worst = max(worst, rel(sd[k].numpy(), v.numpy()))
    check(worst <= 1e-6, f"merged weights == peft merge_and_unload (worst rel {worst:.1e})")

    # 5. FSDP world of 2
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run3 = os.path.join(w, "run3")
    args = [MPIEXEC, "-np", "2", "--oversubscribe", SHARDLM, "train", *common, "--batch", "1",
            "--sharding", "FULL_SHARD", "--threads", "1", "--out", run3]
    r = subprocess.run(args, capture_output=True, env=env)
    if check(r.returncode == 0, f"mpirun -np 2 LoRA train exit {r.returncode} "
             f"{r.stderr.decode()[-400:] if r.returncode else ''}"):
        l3 = losses(r.stdout.decode())
        # batch 1 x 2 ranks = the same global batch of 2 windows; dropout masks are per rank,
        # so compare the first step (identical weights, different masks: close, not equal) and
        # the direction of training
        check(len(l3) == 6 and abs(l3[0] - l1[0]) / l1[0] < 2e-2 and l3[-1] < l3[0],
              f"FSDP np 2 losses {l3} vs np 1 {l1}")
        log3 = r.stdout.decode() + r.stderr.decode()
        m3 = re.search(r"state per rank [^(]+\((\d+) bytes", log3)
        half = (4 * n_base + 16 * n_adapt) / 2
        check(m3 is not None and abs(int(m3.group(1)) - half) < 16 * 64,
              f"FSDP np 2 state per rank {m3.group(1) if m3 else '?'} ~ half ({half:.0f})")

        # resharding: run1's step-3 adapters (1 rank) resumed by 2 FULL_SHARD ranks
        run4 = os.path.join(w, "run4")
        shutil.copytree(run2, run4)
        shutil.rmtree(os.path.join(run4, "checkpoints", "step_00000006"))
        with open(os.path.join(run4, "checkpoints", "latest"), "w") as f:
            f.write("step_00000003\n")
        args4 = args[:args.index("--out")] + ["--out", run4, "--resume", "auto"]
        r = subprocess.run(args4, capture_output=True, env=env)
        l4 = losses(r.stdout.decode())
        check(r.returncode == 0 and b"resumed from" in r.stderr and len(l4) == 3 and
              abs(l4[0] - l1[3]) / l1[3] < 2e-2,
              f"1-rank LoRA checkpoint resumed on 2 ranks: exit {r.returncode}, losses {l4} vs "
              f"{l1[3:]}")

    # 6. a changed base is refused
    with torch.no_grad():
        base_model.model.norm.weight.add_(0.5)
    base_model.save_pretrained(base, safe_serialization=True)
    r = run("ckpt", "export", run1, "--hf", os.path.join(w, "bad"), ok=False)
    check(r.returncode == 1 and b"xxh64" in r.stderr,
          f"export with a changed base refused (exit {r.returncode}): "
          f"{r.stderr.decode().strip()[-200:]}")
    r = run("train", *common, "--steps", "9", "--out", run1, "--resume", "auto", ok=False)
    check(r.returncode != 0 and b"xxh64" in r.stderr,
          f"resume on a changed base refused (exit {r.returncode})")
    # 7. usage errors (exit 2, naming the option)
    for extra, needle in ((["--lora-targets", "q_proj,qq_proj"], b"qq_proj"),
                          (["--lora-targets", "q_proj,q_proj"], b"repeated"),
                          (["--lora-rank", "0"], b"--lora-rank"),
                          (["--lora-dropout", "1"], b"--lora-dropout")):
        r = run("train", *common, *extra, "--out", os.path.join(w, "bad_run"), ok=False)
        check(r.returncode == 2 and needle in r.stderr,
              f"{' '.join(extra)}: exit {r.returncode} naming {needle.decode()}")
    no_base = [a for a in common]
    i = no_base.index("--init-from-hf")
    del no_base[i:i + 2]
    r = run("train", *no_base, "--out", os.path.join(w, "bad_run"), ok=False)
    check(r.returncode == 2 and b"--init-from-hf" in r.stderr,
          f"--lora-rank without --init-from-hf: exit {r.returncode}")
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
