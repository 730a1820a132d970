#!/usr/bin/env bash
# Style checks that need no build (run by scripts/test.sh; exit 1 on any finding):
#  (a) include layering: a file of src/<module>/ includes only headers of its own module and of
#      the modules it depends on (transitively), as the slm_module(NAME DEPS ...) lines of
#      CMakeLists.txt declare; the module graph has no cycle, and no header include cycle exists;
#  (b) no exit() / _exit() / printf / puts / putchar / fprintf(stdout, ...) in src/ (the library
#      reports through slm_status; tools/ prints and exits), except the lines listed with a
#      reason in scripts/style_allow.txt;
#  (c) clang-format --dry-run -Werror on every tracked .c / .h / .cu / .cuh file.
#  (d) no cycle between the files of a module: file A uses a non-static function or variable of
#      file B and B (through any chain) one of A's (scripts/file_graph.py, which parses the
#      sources, so this needs no build); modules listed in scripts/cycle_allow.txt are exempt;
#  (e) no function over 120 lines in src/ and tools/ (scripts/check_lengths.py; its ALLOW table
#      names the ones being split on an unmerged branch).
#  (f) the device boundary (scripts/check_device.py): no OpenMP, BLAS or kernels/kernels.h in
#      model/, fsdp/, optim/, train/, health/, ckpt/, tools/; no raw allocation or copy of
#      compute memory in model/, fsdp/, optim/ (everything through src/device/device.h).
# Usage: scripts/check_style.sh   (from anywhere; needs python3, clang-format for (c))
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import os, re, sys

fail = 0
def bad(msg):
    global fail
    print("check_style: " + msg)
    fail = 1

# (a) module dependencies from CMakeLists.txt
cm = open("CMakeLists.txt").read()
deps = {}
for m in re.finditer(r"^\s*slm_module\(\s*(\w+)([^)]*)\)", cm, re.M):
    name, rest = m.group(1), m.group(2)
    d = rest.split("DEPS", 1)[1].split() if "DEPS" in rest else []
    deps[name] = [x[4:] for x in d if x.startswith("slm_")]
if not deps:
    bad("no slm_module(...) lines found in CMakeLists.txt")
for n, ds in deps.items():
    for d in ds:
        if d not in deps:
            bad(f"CMakeLists.txt: module {n} depends on unknown module {d}")

# transitive closure; a cycle in the declared graph is itself an error
closure, state = {}, {}
def close(n, path):
    if state.get(n) == 1:
        bad("module dependency cycle: " + " -> ".join(path + [n]))
        return set()
    if n in closure:
        return closure[n]
    state[n] = 1
    s = set()
    for d in deps.get(n, []):
        s |= {d} | close(d, path + [n])
    state[n] = 2
    closure[n] = s
    return s
for n in deps:
    close(n, [])

files = []
for root, _, names in os.walk("src"):
    for f in sorted(names):
        if f.endswith((".c", ".h")):
            files.append(os.path.join(root, f))
inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
graph = {}
for path in sorted(files):
    mod = path.split(os.sep)[1]
    text = open(path, encoding="utf-8", errors="replace").read()
    graph[path] = []
    for inc in inc_re.findall(text):
        # resolve like the compiler: next to the file first, then src/
        here = os.path.normpath(os.path.join(os.path.dirname(path), inc))
        target = here if os.path.exists(here) else os.path.normpath(os.path.join("src", inc))
        if not os.path.exists(target):
            bad(f"{path}: includes \"{inc}\", which is not in src/")
            continue
        graph[path].append(target)
        tmod = target.split(os.sep)[1]
        if mod not in deps:
            bad(f"{path}: module {mod} has no slm_module() line in CMakeLists.txt")
        elif tmod != mod and tmod not in closure.get(mod, set()):
            bad(f"{path}: includes {target} of module {tmod}, which {mod} does not depend on "
                f"(CMakeLists.txt: slm_module({mod} DEPS {' '.join('slm_' + d for d in deps[mod])}))")

# header include cycles
color = {}
def visit(f, stack):
    color[f] = 1
    for t in graph.get(f, []):
        if color.get(t) == 1:
            bad("include cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
        elif not color.get(t):
            visit(t, stack + [t])
    color[f] = 2
for f in graph:
    if not color.get(f):
        visit(f, [f])

# (b) exit / stdout in src/
allow = {}
for line in open("scripts/style_allow.txt"):
    if not line.strip() or line.startswith("#"):
        continue
    # PATH | LINE | REASON: the line itself may hold " | ", the reason may not
    path_, _, rest = line.rstrip("\n").partition(" | ")
    text_, _, reason = rest.rpartition(" | ")
    parts = [path_.strip(), text_.strip(), reason.strip()]
    if not all(parts):
        bad(f"scripts/style_allow.txt: expected PATH | LINE | REASON: {line.strip()}")
        continue
    allow[(parts[0], parts[1])] = False
banned = re.compile(r"(?<![\w.>])(_?exit|printf|puts|putchar)\s*\(|\bfprintf\s*\(\s*stdout\b|"
                    r"\b(fputs|fputc|fwrite|vfprintf)\s*\([^;]*\bstdout\s*\)")
for path in sorted(files):
    for no, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        code = line.split("//", 1)[0]
        if not banned.search(code):
            continue
        key = (path, line.strip())
        if key in allow:
            allow[key] = True
        else:
            bad(f"{path}:{no}: process exit or stdout in the library: {line.strip()} "
                "(return an slm_status; tools/ prints; or list it in scripts/style_allow.txt "
                "with the reason)")
for (path, text), used in allow.items():
    if not used:
        print(f"check_style: note: stale allow-list entry (no longer in {path}): {text}")
sys.exit(fail)
PY
rc=0
# (c) clang-format: every C source and header in the tree (.clang-format; the tree was
#     reformatted once, so a diff here is a change that was not formatted)
if command -v clang-format > /dev/null; then
    mapfile -t fmt < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
    if [ ${#fmt[@]} -gt 0 ]; then
        clang-format --dry-run -Werror "${fmt[@]}" 2>&1 | head -40
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    fi
else
    echo "check_style: clang-format not found (scripts/setup.sh installs it)" >&2
    rc=1
fi
# (d) file cycles inside a module
python3 scripts/file_graph.py --allow scripts/cycle_allow.txt | sed 's/^/check_style: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# (e) function length
python3 scripts/check_lengths.py | { grep -v '^check_lengths: no function' || true; } | sed 's/^/check_style: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# (f) the device boundary
python3 scripts/check_device.py | sed 's/^/check_style: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
[ $rc -eq 0 ] && echo "check_style: ok"
exit $rc
