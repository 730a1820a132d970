#!/usr/bin/env python3
"""shardlm's incremental BPE trainer vs a naive reference that recounts every pair each merge.

The reference pre-tokenizes with HF `tokenizers`' ByteLevel pre-tokenizer (GPT-2 regex, an
independent implementation), maps the byte symbols back to bytes with its own GPT-2
bytes_to_unicode table, then repeats: count all adjacent pairs weighted by word frequency, take
the most frequent pair, ties to the smallest (left bytes, right bytes), merge it left to right
in every word. The learned merges and ids must equal shardlm's tokenizer.json exactly.
Env: SHARDLM_BIN, SLM_SHARED_DIR (set by CTest).
"""
import collections
import json
import os
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from slm_need import need  # noqa: E402

for _m in ("tokenizers",):
    need(_m)

from tokenizers.pre_tokenizers import ByteLevel

SHARDLM = os.environ["SHARDLM_BIN"]
TS = os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt")
N_MERGES = 300


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def naive_train(text, n_merges):
    sym2byte = bytes_to_unicode()
    pre = ByteLevel(add_prefix_space=False, use_regex=True).pre_tokenize_str(text)
    counts = collections.Counter(bytes(sym2byte[c] for c in piece) for piece, _ in pre)
    words = [[bytes([b]) for b in w] for w in counts]
    freq = list(counts.values())
    merges = []
    vocab = {bytes([b]): b for b in range(256)}
    while len(merges) < n_merges:
        pc = collections.Counter()
        for w, f in zip(words, freq):
            for a, b in zip(w, w[1:]):
                pc[(a, b)] += f
        if not pc:
            break
        (a, b), _ = min(pc.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
        for k, w in enumerate(words):
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[k] = out
    return merges, vocab


def main():
    text = open(TS, encoding="utf-8").read()[:150000]  # > 2 training chunks of 64 KiB
    # Trailing blanks before newlines make `\s+(?!\S)` depend on what follows a chunk's end: a
    # trainer that scanned each chunk as its own subject would count different words.
    text = "".join(l + ("  " if i % 3 == 0 else "\t " if i % 3 == 1 else "") + "\n"
                   for i, l in enumerate(text.split("\n")))
    tmp = tempfile.mkdtemp(prefix="slm_bpe_ref_")
    corpus = os.path.join(tmp, "corpus.txt")
    open(corpus, "w", encoding="utf-8").write(text)
    ref_merges, ref_vocab = naive_train(text, N_MERGES)
    # Ask for exactly as many tokens as the reference made (merges may reuse a token).
    vocab_size = len(ref_vocab)
    out = os.path.join(tmp, "tokenizer.json")
    subprocess.run([SHARDLM, "tokenizer", "train", "--input", corpus, "--vocab-size",
                    str(vocab_size), "--special", "", "--out", out, "--quiet"], check=True)
    j = json.load(open(out, encoding="utf-8"))
    sym2byte = bytes_to_unicode()
    to_bytes = lambda s: bytes(sym2byte[c] for c in s)
    got_merges = [(to_bytes(a), to_bytes(b)) for a, b in j["model"]["merges"]]
    got_vocab = {to_bytes(s): i for s, i in j["model"]["vocab"].items()}
    ok = True
    # shardlm stops once the vocab is full, so it may skip the reference's trailing merges that
    # only reuse existing tokens.
    tail_reuses = all(ref_vocab[a + b] < vocab_size and (a + b) in
                      {x + y for x, y in ref_merges[:len(got_merges)]} | {bytes([c]) for c in range(256)}
                      for a, b in ref_merges[len(got_merges):])
    if got_merges != ref_merges[:len(got_merges)] or not tail_reuses:
        ok = False
        for i, (g, r) in enumerate(zip(got_merges, ref_merges)):
            if g != r:
                print(f"  merge {i}: shardlm {g} reference {r}", file=sys.stderr)
                break
        print(f"  merges: shardlm {len(got_merges)} reference {len(ref_merges)}",
              file=sys.stderr)
    want_vocab = {k: v for k, v in ref_vocab.items() if v < vocab_size}
    if got_vocab != want_vocab:
        ok = False
        print(f"  vocab differs: {len(got_vocab)} vs {len(want_vocab)} entries", file=sys.stderr)
    subprocess.run(["rm", "-rf", tmp])
    print(f"{len(got_merges)} merges compared: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
