"""Writes the seed corpus of the GGUF fuzz target (tests/fuzz/corpus/ckpt_gguf/) with gguf-py:
small files holding one block of every tensor type shardlm reads, llama metadata (the keys
slm_gguf_llama_config reads), tokenizer arrays (a gpt2 and a llama / SentencePiece vocabulary)
and general.alignment 64. Run it again after a
format change: python3 tests/fuzz/make_gguf_corpus.py  (needs numpy and gguf)."""

import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "ckpt_gguf")
rng = np.random.default_rng(7)


def tensors(w):
    for t in (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q5_K, T.Q6_K):
        bs, size = gguf.GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(1, 256 // bs * size), dtype=np.uint8)
        w.add_tensor(f"t_{t.name.lower()}", raw, raw_dtype=t)


def main():
    os.makedirs(OUT, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(OUT, "types.gguf"), arch="llama")
    tensors(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    w = gguf.GGUFWriter(os.path.join(OUT, "llama_meta.gguf"), arch="llama")
    w.add_custom_alignment(64)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(8)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(["<s>", "</s>", "a", "b", "ab", "\u0120", "\u0120a", "c"])
    w.add_token_types([3, 3, 1, 1, 1, 1, 1, 1])
    w.add_token_merges(["a b", "\u0120 a"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% endfor %}")
    w.add_tensor("token_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # a SentencePiece (`llama`) vocabulary as llama.cpp's converter writes it: <unk>, <s>, </s>,
    # the 256 byte pieces, then pieces with scores
    pieces = ["\u2581a", "\u2581b", "ab", "\u2581ab", "c"]
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    w = gguf.GGUFWriter(os.path.join(OUT, "spm_meta.gguf"), arch="llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
