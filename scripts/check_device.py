#!/usr/bin/env python3
"""The device boundary (issue 21; docs/architecture.md "device"): memory a step computes on is
touched only through src/device/device.h.

  (1) In the modules that compute a step or handle its state (src/model, fsdp, optim, train,
      health, ckpt) and in tools/: no `#pragma omp`, no omp_*() call, no cblas_*() call, no
      include of omp.h, cblas.h or kernels/kernels.h. OpenMP, BLAS and the kernels live in src/kernels/ (the CPU
      backend) behind src/device/. (Host-only parallel work elsewhere, e.g. tokenizer training
      over text, is not device memory and is not checked.) ALLOW lists exceptions with a reason.
  (2) In src/model, src/fsdp, src/optim (the modules that own parameter, gradient, activation
      and optimizer memory): no malloc / calloc / realloc / aligned_alloc / slm_xaligned /
      memcpy / memset / memmove, except a call whose size is one `sizeof` term (a struct or a
      fixed array: host metadata) or a line that says why it is host memory with a trailing
      `// host: REASON` comment. Small host tables go through slm_xmalloc / slm_xcalloc.
Usage: scripts/check_device.py   (from the repository root; exit 1 on a finding)
"""
import os
import re
import sys

ABOVE = ["model", "fsdp", "optim", "train", "health", "ckpt"]
OWNERS = ["model", "fsdp", "optim"]
# (path, pattern) -> reason: files that may use OpenMP / kernels for host work of their own.
ALLOW = {}

R_OMP = re.compile(r"#\s*pragma\s+omp\b|\bomp_\w+\s*\(|#\s*include\s*<omp\.h>")
R_BLAS = re.compile(r"\bcblas_\w+\s*\(|#\s*include\s*<cblas\.h>")
R_KINC = re.compile(r'#\s*include\s+"kernels/kernels\.h"')
R_MEM = re.compile(r"\b(malloc|calloc|realloc|aligned_alloc|slm_xaligned|memcpy|memset|memmove)"
                   r"\s*\(")
R_ONE_SIZEOF = re.compile(r",\s*sizeof\s*(\(\s*[^()]*\)|[\w\->.\[\]*]+)\s*\)\s*;")


def strip_comment(line):
    return line.split("//", 1)[0]


def files_of(mod):
    root = os.path.join("src", mod) if mod != "tools" else "tools"
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            if n.endswith((".c", ".h")):
                yield os.path.join(dirpath, n)


def main():
    fail = []
    for mod in ABOVE + ["tools"]:
        for path in files_of(mod):
            for no, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                code = strip_comment(line)
                for kind, rx in (("omp", R_OMP), ("blas", R_BLAS), ("kernels", R_KINC)):
                    if not rx.search(code if kind != "kernels" else line):
                        continue
                    if (path, kind) in ALLOW:
                        continue
                    fail.append(f"{path}:{no}: {kind} above the device layer: {line.strip()} "
                                "(go through src/device/device.h)")
                if mod in OWNERS and R_MEM.search(code):
                    if R_ONE_SIZEOF.search(code) or "// host:" in line:
                        continue
                    fail.append(f"{path}:{no}: raw memory call in {mod}/: {line.strip()} "
                                "(slm_dev_alloc / slm_dev_copy / slm_dev_zero; host metadata: "
                                "one sizeof term, or a `// host: REASON` comment)")
    for f in fail:
        print("check_device: " + f)
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
