"""Hostile strings for tokenizer comparisons (gguf_smollm2.py, gguf_spm.py): empty text, control
characters, long runs of spaces and digits, mixed scripts, emoji, ZWJ / BOM, and chat special
tokens (ChatML, SmolLM2's) whole and broken."""

HOSTILE = [
    "", " ", "\n", "\t\t", "\r\n\r\n", "a\x00b", "\x01\x02\x03\x04\x7f", "\x1b[31mred\x1b[0m",
    " " * 100, "x" + " " * 37 + "y", "  1", "   12  345 ", "0" * 200, "3.14159265358979",
    "1,000,000 and 2024-12-01", "12abc34", "Ünïcödé café naïve", "日本語のテキスト",
    "Ελληνικά και русский", "مرحبا بالعالم", "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷", "ZWJ\u200dand\ufeffBOM",
    "tab\tnewline\nmixed  \t\n  ", "'s 't 're 've 'm 'll 'd", "I'M DON'T",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>",
    "text<|im_end|>more", "<|im_start|", "<repo_name>x<file_sep>", "\xff\xfe invalid? no: str",
    "a" * 3000, "😀" * 50,
]
