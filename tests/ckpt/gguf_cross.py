"""The GGUF reader and its dequantization against gguf-py (the `gguf` package, llama.cpp's own
Python reader / writer), on files gguf-py writes.

For every type shardlm reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), tensors of
random blocks: gguf.quants.quantize of random normal data at several scales where gguf-py can
quantize (F16, BF16, Q8_0, Q4_0, Q4_1), and random bytes with finite random f16 scales for all the
block types (gguf-py cannot quantize the K-quants; random blocks reach every nibble, bit and scale
pattern). Written with gguf.GGUFWriter (alignment 32, then general.alignment 64), read back with
`ckpt_tool gguf-dump` (slm_gguf_open + slm_gguf_read_f32) and compared with
gguf.quants.dequantize. Bitwise equality is required: both sides evaluate the same fp32
expressions (f16 -> f32 exact, d * scale, then * q, then - min) in the same order, and each
IEEE operation is correctly rounded, so there is no legitimate difference to allow for.
Also: the tensor shapes (GGUF's ne reversed) and a file with metadata arrays of every scalar type.
Usage: gguf_cross.py CKPT_TOOL   (exit 77 when numpy / gguf are not importable)
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError as e:
    print(f"SKIP: gguf / numpy not importable ({e}); pip install gguf")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from llama_ref import read_tensors  # noqa: E402

TOOL = sys.argv[1]
rng = np.random.default_rng(1234)

# Byte offsets of the f16 scale fields in each block type (d, and dmin / m where present).
F16_FIELDS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
              T.Q6_K: [208]}


def random_f16(n):
    # finite, both signs, magnitudes 2^-14 .. 2^4 (normal f16), plus some zeros
    mag = np.exp2(rng.uniform(-14, 4, n)).astype(np.float16)
    sign = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    v = mag * sign
    v[rng.random(n) < 0.02] = 0
    return v


def random_blocks(t, rows, cols):
    bs, size = gguf.GGML_QUANT_SIZES[t]
    nb = rows * cols // bs
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        raw[:, off:off + 2] = random_f16(nb).view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // bs * size)


def cases():
    out = []
    for scale in (1e-3, 1.0, 50.0):
        x = (rng.standard_normal((8, 256)) * scale).astype(np.float32)
        out.append((f"f32_{scale}", T.F32, x))
        for t in (T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1):
            out.append((f"{t.name.lower()}_{scale}", t, quants.quantize(x, t)))
    for t in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q5_K, T.Q6_K):
        out.append((f"{t.name.lower()}_rand", t, random_blocks(t, 6, 512)))
    # random f16 / bf16 bit patterns (finite)
    h = random_f16(4 * 64).reshape(4, 64)
    out.append(("f16_bits", T.F16, h))
    b = rng.integers(0, 65536, size=(4, 64), dtype=np.uint16)
    b[(b & 0x7F80) == 0x7F80] = 0x3F80  # no inf / nan exponents
    out.append(("bf16_bits", T.BF16, b.view(np.uint8).reshape(4, 128)))
    # a 3-D tensor and a 1-D one, for the dimension order
    out.append(("three_d", T.F32, rng.standard_normal((2, 3, 32)).astype(np.float32)))
    out.append(("one_d", T.Q8_0, quants.quantize(rng.standard_normal(64).astype(np.float32),
                                                  T.Q8_0)))
    return out


def write(path, items, alignment=None):
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for name, t, data in items:
        if t in (T.F32, T.F16) and data.dtype != np.uint8:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=t)
    # metadata of every scalar type and arrays of them, which the reader must step over
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -5)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_int32("test.i32", -7)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.125)
    w.add_bool("test.bool", True)
    w.add_array("test.arr_f32", [1.5, -2.0])
    w.add_array("test.arr_str", ["x", "", "yz" * 100])
    w.add_array("test.arr_i64", [1, -1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    items = cases()
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for alignment in (None, 64):
            path = os.path.join(tmp, f"t{alignment}.gguf")
            write(path, items, alignment)
            out = os.path.join(tmp, "out.slt")
            r = subprocess.run([TOOL, "gguf-dump", path, out], capture_output=True, text=True)
            if r.returncode:
                print(f"FAIL: gguf-dump {path}: {r.stderr}")
                return 1
            got, _ = read_tensors(out)
            reader = gguf.GGUFReader(path)
            for rt in reader.tensors:
                want = quants.dequantize(rt.data, rt.tensor_type).astype(np.float32)
                want = want.reshape(tuple(int(x) for x in reversed(rt.shape)))
                g = got.get(rt.name)
                if g is None or g.shape != want.shape:
                    print(f"FAIL {rt.name}: shape {None if g is None else g.shape}, "
                          f"gguf-py {want.shape}")
                    fails += 1
                    continue
                same = np.array_equal(g.view(np.uint32), want.view(np.uint32))
                if not same:
                    bad = np.flatnonzero(g.view(np.uint32).ravel() != want.view(np.uint32).ravel())
                    i = bad[0]
                    print(f"FAIL {rt.name} ({rt.tensor_type.name}, align {alignment}): "
                          f"{bad.size} of {g.size} differ; first at {i}: shardlm "
                          f"{g.ravel()[i]!r}, gguf-py {want.ravel()[i]!r}")
                    fails += 1
                else:
                    print(f"ok {rt.name:16s} {rt.tensor_type.name:5s} {tuple(g.shape)} "
                          f"align {alignment or 32}: bitwise equal")
    print(f"{'FAILED' if fails else 'passed'}: {fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
