"""shardlm's safetensors reader accepts and refuses the same data layouts as the `safetensors`
library (the reference implementation), whatever the JSON key order (issue 8 item 22).

Each case is a header {name: (dtype, shape, [begin, end])} plus a data length; the file is
written here, opened with `safetensors.safe_open(framework="pt")` (every tensor read) and with
`ckpt_tool st-check` (slm_st_open); both must agree. The cases cover zero-element tensors
before / after / between non-empty ones and inside another's bytes, non-empty tensors listed out
of order, overlaps, holes and trailing bytes.
Usage: st_library_cross.py CKPT_TOOL. Exit 77 (skip) if `safetensors` is not importable.
"""

import itertools
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    from safetensors import safe_open
except ImportError:
    print("SKIP: the safetensors package is not installed")
    sys.exit(77)

TOOL = sys.argv[1]
SIZE = {"F32": 4, "F16": 2, "BF16": 2}

# (label, {name: (dtype, shape, offsets)}, data bytes)
CASES = [
    ("issue 8 #22", {"c": ("F32", [2], [0, 8]), "a": ("F32", [0], [0, 0]),
                     "b": ("BF16", [2, 0], [0, 0])}, 8),
    ("empty at the end", {"c": ("F32", [2], [0, 8]), "z": ("F16", [0, 4], [8, 8])}, 8),
    ("empty between", {"a": ("F32", [1], [0, 4]), "e": ("F32", [0], [4, 4]),
                       "b": ("F32", [1], [4, 8])}, 8),
    ("only an empty tensor", {"e": ("F32", [0], [0, 0])}, 0),
    ("empty inside another", {"c": ("F32", [2], [0, 8]), "e": ("F32", [0], [4, 4])}, 8),
    ("empty beyond the data", {"c": ("F32", [2], [0, 8]), "e": ("F32", [0], [12, 12])}, 8),
    ("overlap", {"a": ("F32", [2], [0, 8]), "b": ("F32", [2], [4, 12])}, 12),
    ("hole", {"a": ("F32", [1], [0, 4]), "b": ("F32", [1], [8, 12])}, 12),
    ("trailing bytes", {"a": ("F32", [1], [0, 4])}, 8),
    ("two empty, one full", {"x": ("F32", [0, 3], [0, 0]), "y": ("BF16", [0], [0, 0]),
                             "w": ("F16", [3], [0, 6])}, 6),
]


def write(path, tensors, order, data_len):
    hdr = {name: {"dtype": tensors[name][0], "shape": tensors[name][1],
                  "data_offsets": tensors[name][2]} for name in order}
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\x00" * data_len)


def library_accepts(path):
    try:
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                f.get_tensor(k)
        return True, ""
    except Exception as e:  # the library raises its own SafetensorError (and others)
        return False, str(e)


def main():
    tmp = tempfile.mkdtemp(prefix="slm_st_cross_")
    failures = n = 0
    for label, tensors, data_len in CASES:
        # every key order (at most 3! = 6)
        for order in itertools.permutations(tensors):
            p = os.path.join(tmp, "x.safetensors")
            write(p, tensors, order, data_len)
            ref, why = library_accepts(p)
            r = subprocess.run([TOOL, "st-check", p], capture_output=True, text=True)
            got = r.returncode == 0
            n += 1
            if got != ref or r.returncode not in (0, 1):
                failures += 1
                print(f"FAIL {label} order {order}: library {'accepts' if ref else 'refuses'} "
                      f"({why}); shardlm exit {r.returncode} {r.stderr.strip()}")
    subprocess.run(["rm", "-rf", tmp])
    print(f"{'FAILED' if failures else 'OK'}: {n} files, {failures} disagreements with the "
          f"safetensors library")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
