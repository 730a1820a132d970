#!/usr/bin/env python3
"""Byte-level BPE parity: shardlm vs Hugging Face `tokenizers` (an independent implementation).

Trains a tokenizer with `shardlm tokenizer train` on tinyshakespeare, loads the tokenizer.json
with HF, and requires id-for-id equal encodings of tinyshakespeare, a KJV excerpt and a set of
nasty strings (emoji, CJK, combining marks, NUL, tabs/CRLF, long space runs), with and without
special-token matching. The same checks run on a Llama-3 style rewrite of the file (Split regex
pre-tokenizer + ByteLevel without regex, "a b" merges, ignore_merges). Also checks the CLI
round trip (decode(encode(x)) == x) and `info`.
Env: SHARDLM_BIN, SLM_SHARED_DIR (set by CTest).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from slm_need import need  # noqa: E402

Tokenizer = need("tokenizers").Tokenizer

SHARDLM = os.environ["SHARDLM_BIN"]
SHARED = os.environ["SLM_SHARED_DIR"]
TS = os.path.join(SHARED, "data", "tinyshakespeare.txt")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def shardlm(*args, data=b""):
    r = subprocess.run([SHARDLM, "tokenizer", *args], input=data, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"shardlm tokenizer {' '.join(args)} failed: {r.stderr.decode()}")
    return r.stdout


def encode_whole(tok_path, text, allow_special=False):
    extra = ["--allow-special"] if allow_special else []
    out = shardlm("encode", "--tokenizer", tok_path, "--whole", *extra, data=text.encode())
    return [int(x) for x in out.split()]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, hf, tok_path, text, allow_special=False):
    ref = hf.encode(text, add_special_tokens=False).ids
    got = encode_whole(tok_path, text, allow_special)
    if not check(ref == got, f"{name}: {len(got)} ids vs HF {len(ref)}"):
        i = first_diff(ref, got)
        print(f"    first difference at id {i}: HF {ref[i:i+8]} shardlm {got[i:i+8]} "
              f"text {text[:80]!r}", file=sys.stderr)
    return len(ref)


NASTY = [
    "Hello world", "  leading spaces", "trailing spaces   ", "a" + " " * 5000 + "b", " " * 3000,
    "\t\t\tx\t", "line1\r\nline2\r\n", "\n\n\n\nx\n\n", " \n x \n\n y  \n",
    "emoji \U0001F44B\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7",
    "\U0001F600" * 50, "CJK \u4f60\u597d\u4e16\u754c\uff0c\u3053\u3093\u306b\u3061\u306f "
    "\uc548\ub155\ud558\uc138\uc694", "combining e\u0301 e\u0301\u0303 e\u0323\u0301",
    "zalgo t\u0338\u0322\u0327h\u0337e\u0335", "NUL \x00 inside \x00\x00", "\x00",
    "I'm you're we've they'll he'd it's DON'T 'S 'Ll", "numbers 1234567 3.14159 \u0661\u0662\u0663",
    "nbsp\u00a0and\u3000ideographic space", "\u2028 line sep \u2029", "tabs\tand\vvertical\fform",
    "A" * 10000, "!!!???...---___", "\u03b1\u03b2\u03b3 \u0391\u0392\u0393 \u03a9\u03bc\u03ad\u03b3\u03b1",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u05e2\u05d1\u05e8\u05d9\u05ea "
    "\u0639\u0631\u0628\u064a", "\ufb01 ligature", "", " ", "x", "  \t \n\t  ",
    "<|bo s|> < |eos| > <|pa", "mixed: caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m",
]
SPECIAL_TEXTS = ["<|bos|>Hello<|eos|>", "a<|pad|><|pad|> b <|bos|><|eos|>", "<|bos|",
                 "x <|eos|>\n<|bos|> y", "<|bos|><|bos|>"]


def run_suite(label, tok_path, texts):
    hf = Tokenizer.from_file(tok_path)
    n_ids = 0
    for name, text in texts:
        n_ids += compare(f"{label} {name}", hf, tok_path, text)
    for i, s in enumerate(NASTY):
        n_ids += compare(f"{label} nasty[{i}]", hf, tok_path, s)
    for i, s in enumerate(SPECIAL_TEXTS):
        n_ids += compare(f"{label} special[{i}]", hf, tok_path, s, allow_special=True)
    # Line mode (one output line per input line) against HF per line.
    lines = texts[0][1].split("\n")[:3000]
    out = shardlm("encode", "--tokenizer", tok_path, data="\n".join(lines).encode() + b"\n")
    got = [[int(x) for x in l.split()] for l in out.decode().split("\n")[:-1]]
    ref = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    check(got == ref, f"{label} line mode: {len(got)} lines vs HF {len(ref)}")
    print(f"{label}: {n_ids} ids compared with HF", file=sys.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="slm_bpe_hf_")
    tok = os.path.join(tmp, "tokenizer.json")
    shardlm("train", "--input", TS, "--vocab-size", "2000", "--out", tok, "--threads", "2",
            "--quiet")
    info = shardlm("info", "--tokenizer", tok).decode()
    check("type: byte_bpe" in info and "vocab_size: 2000" in info and "bos_id: 1997" in info
          and "eos_id: 1998" in info and "pad_id: 1999" in info, f"info output: {info!r}")

    ts = open(TS, encoding="utf-8").read()
    kjv = subprocess.run(["bible", "Gen1:1-Gen50:26"], capture_output=True,
                         check=True).stdout.decode("utf-8")
    check(len(kjv) > 100000, f"KJV excerpt has only {len(kjv)} chars")
    texts = [("tinyshakespeare", ts), ("kjv Genesis", kjv)]
    run_suite("gpt2-style", tok, texts)

    # HF decodes our ids back to the text, and so does shardlm (CLI line mode round trip).
    hf = Tokenizer.from_file(tok)
    ids = encode_whole(tok, kjv)
    check(hf.decode(ids) == kjv, "HF decode of shardlm ids differs from the text")
    enc = shardlm("encode", "--tokenizer", tok, data=ts.encode())
    dec = shardlm("decode", "--tokenizer", tok, data=enc)
    check(dec == ts.encode(), "CLI decode(encode(tinyshakespeare)) != tinyshakespeare")
    # The trained file's post_processor prepends BOS by default, as `shardlm tokenizer encode
    # --bos` does (transformers 5 takes BOS only from there, e.g. for an HF export).
    bos = [int(x) for x in shardlm("encode", "--tokenizer", tok, "--bos", "--whole",
                                   data=b"ROMEO: Hi").split()]
    check(hf.encode("ROMEO: Hi").ids == bos,
          f"HF default encode {hf.encode('ROMEO: Hi').ids} vs shardlm --bos {bos}")

    # Llama-3 style file: Split(regex) + ByteLevel(use_regex false), "a b" merges, ignore_merges.
    j = json.load(open(tok, encoding="utf-8"))
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    j["model"]["merges"] = [f"{a} {b}" for a, b in j["model"]["merges"]]
    j["model"]["ignore_merges"] = True
    tok3 = os.path.join(tmp, "llama3_style.json")
    json.dump(j, open(tok3, "w", encoding="utf-8"), ensure_ascii=False)
    run_suite("llama3-style", tok3, texts)

    # An unsupported pre-tokenizer form is refused, naming the field.
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581"}
    bad = os.path.join(tmp, "bad.json")
    json.dump(j, open(bad, "w", encoding="utf-8"))
    r = subprocess.run([SHARDLM, "tokenizer", "info", "--tokenizer", bad], capture_output=True)
    check(r.returncode == 1 and b"pre_tokenizer.type" in r.stderr,
          f"Metaspace file: rc {r.returncode}, stderr {r.stderr!r}")

    # Usage errors exit 2; --help exits 0.
    for args, want in ((["encode"], 2), (["frobnicate"], 2), (["train", "--input", TS], 2),
                       (["encode", "--tokenizer", tok, "--nope"], 2), (["train", "--help"], 0)):
        r = subprocess.run([SHARDLM, "tokenizer", *args], capture_output=True)
        check(r.returncode == want, f"shardlm tokenizer {args}: exit {r.returncode}, want {want}")

    def run(args, data=b"", stdout=subprocess.PIPE):
        return subprocess.run([SHARDLM, "tokenizer", *args], input=data, stdout=stdout,
                              stderr=subprocess.PIPE)

    def expect(args, want_rc, want_msg, data=b"", stdout=subprocess.PIPE):
        r = run(args, data, stdout)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == want_rc and want_msg in err,
              f"shardlm tokenizer {args}: exit {r.returncode} (want {want_rc}), stderr {err!r} "
              f"(want {want_msg!r})")

    # Unknown options and missing values name the option (exit 2).
    for sub in ("encode", "decode", "info", "train"):
        expect([sub, "--bogus"], 2, "unknown option --bogus (see --help)")
    expect(["encode", "--tokenizer"], 2, "option --tokenizer needs a value")
    expect(["info", "--tokenizer"], 2, "option --tokenizer needs a value")
    expect(["train", "--input", TS, "--out", os.path.join(tmp, "x.json"), "--vocab-size"], 2,
           "option --vocab-size needs a value")
    expect(["train", "--input", "--vocab-size", "300"], 2, "option --input needs a value")
    # --vocab-size below 256 bytes + the specials is a usage error giving the real minimum; no
    # file is written.
    small = os.path.join(tmp, "small.json")
    for v in ("1", "258"):
        expect(["train", "--input", TS, "--vocab-size", v, "--out", small], 2,
               f"--vocab-size {v} is out of range [259, 4194304]")
    expect(["train", "--input", TS, "--vocab-size", "257", "--special", "<s>,</s>", "--out",
            small], 2, "out of range [258, 4194304]")
    expect(["train", "--input", TS, "--vocab-size", "4194305", "--out", small], 2,
           "out of range [259, 4194304]")
    check(not os.path.exists(small), "a refused tokenizer train wrote its --out file")

    # Decode errors: exit 1 naming the line (and no fwrite of a NULL buffer: UBSan builds).
    for bad_ids in (b"2000\n", b"99999999999\n", b"-1\n", b"abc\n", b"0x10\n", b"1 2\n2000\n"):
        r = run(["decode", "--tokenizer", tok], bad_ids)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 1 and "line" in err and "runtime error" not in err,
              f"decode {bad_ids!r}: exit {r.returncode}, stderr {err!r}")

    # Write errors on stdout (a full disk) are runtime errors, large outputs and small alike.
    big = ("\n".join([ts] * 3)).encode()
    with open("/dev/full", "wb") as full:
        for args, data in ((["encode", "--tokenizer", tok], big),
                           (["encode", "--tokenizer", tok, "--whole"], big),
                           (["encode", "--tokenizer", tok], b"hello\n"),
                           (["decode", "--tokenizer", tok], b"1 2 3\n" * 50000),
                           (["info", "--tokenizer", tok], b"")):
            expect(args, 1, "write to stdout failed: No space left on device", data, full)

    subprocess.run(["rm", "-rf", tmp])
    print(f"{'FAILED' if failures else 'OK'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
