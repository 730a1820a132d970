#!/usr/bin/env python3
"""File graph inside each module of src/ and the cycles in it (issue 24 item 4).

An edge A -> B (both .c files of src/<module>/) means: A uses a function or variable with external
linkage that B defines. A module's files must form a one-way graph; a strongly connected group of
two or more files is a cycle.

Two ways to build the graph:
  default     parse the sources (build-free, so scripts/check_style.sh can run it before any
              build): comments and literals are dropped, the non-static definitions at file scope
              are collected per file, and a file uses B's symbol when the name appears in it as an
              identifier and the file does not define a static of the same name.
  --nm BUILD  read the object files of a CMake build (BUILD/CMakeFiles/slm_<module>.dir/src/
              <module>/*.c.o) with nm: the undefined symbols of A that B defines. Exact for what
              the compiler emitted; used to cross-check the parser (--compare BUILD prints both).

Usage: scripts/file_graph.py [--nm BUILD | --compare BUILD] [--edges] [--allow FILE] [--root DIR]
                             [MODULE...]
Prints every cycle as "cycle in MODULE: a.c -> b.c (sym, ...) -> a.c"; with --allow, the modules
listed there (one per line, "MODULE | reason") are reported as allowed. Exits 1 when a cycle is
found in a module that is not allowed, 0 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
IDENT = re.compile(r"[A-Za-z_]\w*")
# C keywords and type words that may end a declarator chunk but are never the declared name
KEYWORDS = set("""auto break case char const continue default do double else enum extern float for
goto if inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Thread_local _Atomic _Noreturn _Alignas""".split())


def strip_code(text):
    """Text with comments and string and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_pp(code):
    """(code with preprocessor lines blanked, text of the #define lines: macros use symbols)."""
    body, macros, cont, define = [], [], False, False
    for line in code.split("\n"):
        if not cont:
            define = bool(re.match(r"\s*#\s*define\b", line))
        pp = cont or line.lstrip().startswith("#")
        if pp and define:
            macros.append(line)
        cont = pp and line.rstrip().endswith("\\")
        body.append("" if pp else line)
    return "\n".join(body), "\n".join(macros)


def top_level(code):
    """File-scope declarations as (head, kind): kind 'func' for a function definition (head is
    the text before its body), 'decl' for a declaration ending in ';' (brace groups inside it,
    as in struct bodies and initializers, are replaced by {})."""
    decls, chunk, depth, i, n = [], [], 0, 0, len(code)
    func = False
    while i < n:
        c = code[i]
        if depth == 0:
            if c == "{":
                head = "".join(chunk).strip()
                func = head.endswith(")") and "=" not in head
                if func:
                    decls.append((head, "func"))
                    chunk = []
                else:
                    chunk.append("{}")
                depth = 1
            elif c == ";":
                decls.append(("".join(chunk).strip(), "decl"))
                chunk = []
            else:
                chunk.append(c)
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
        i += 1
    return decls


def split_top(s, sep=","):
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def func_name(head):
    """Name of the function whose definition header is head (ends with its parameter list)."""
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                ids = IDENT.findall(head[:k])
                return ids[-1] if ids else None
    return None


def definitions(code):
    """({name: kind} of external definitions, set of static names) of one file's code."""
    ext, static = {}, set()
    for head, kind in top_level(code):
        words = IDENT.findall(head.split("(", 1)[0].split("=", 1)[0])
        if not words or words[0] == "typedef" or "extern" in words:
            continue
        is_static = "static" in words
        if kind == "func":
            name = func_name(head)
            names = [name] if name else []
        else:
            names = []
            for d in split_top(head):
                d = d.split("=", 1)[0].strip()
                if not d or "(" in d or d.endswith("}"):
                    continue  # prototype, function pointer, or a bare struct/enum definition
                d = re.sub(r"\[[^\]]*\]", "", d)
                ids = [w for w in IDENT.findall(d) if w not in KEYWORDS]
                if ids:
                    names.append(ids[-1])
        for nm in names:
            if is_static:
                static.add(nm)
            else:
                ext[nm] = kind
    return ext, static


def module_files(module):
    """The module's .c files, relative to src/<module>/ (subfolders too, as CMake's cpu/*.c)."""
    d = os.path.join(ROOT, "src", module)
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.relpath(os.path.join(root, f), d) for f in names if f.endswith(".c")]
    return sorted(out)


def modules():
    return sorted(m for m in os.listdir(os.path.join(ROOT, "src"))
                  if os.path.isdir(os.path.join(ROOT, "src", m)))


def graph_from_sources(module):
    """{file: {other file: set of symbols}} parsed from src/<module>/*.c."""
    info = {}
    for f in module_files(module):
        text = open(os.path.join(ROOT, "src", module, f), encoding="utf-8", errors="replace").read()
        code, macros = split_pp(strip_code(text))
        ext, static = definitions(code)
        info[f] = (ext, static, set(IDENT.findall(code)) | set(IDENT.findall(macros)))
    owner = {}
    for f, (ext, _, _) in info.items():
        for sym in ext:
            owner.setdefault(sym, []).append(f)
    g = {f: {} for f in info}
    for a, (ext, static, used) in info.items():
        for sym in used - static - set(ext):
            for b in owner.get(sym, []):
                if b != a:
                    g[a].setdefault(b, set()).add(sym)
    return g


def nm_symbols(obj, flags):
    out = subprocess.run(["nm", "-P"] + flags + [obj], capture_output=True, text=True, check=True)
    syms = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            syms.add(parts[0])
    return syms


def graph_from_nm(module, build):
    d = os.path.join(build, "CMakeFiles", f"slm_{module}.dir", "src", module)
    if not os.path.isdir(d):
        return None
    defs, undef = {}, {}
    for f in module_files(module):
        obj = os.path.join(d, f + ".o")
        if not os.path.exists(obj):
            continue
        defs[f] = nm_symbols(obj, ["-g", "--defined-only"])
        undef[f] = nm_symbols(obj, ["-u"])
    g = {f: {} for f in defs}
    for a in defs:
        for b in defs:
            if a != b and undef[a] & defs[b]:
                g[a][b] = undef[a] & defs[b]
    return g


def cycles(g):
    """Strongly connected components of two or more nodes (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, {})):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def cycle_path(g, comp):
    """One closed path through a component, from its first file back to it (BFS)."""
    start, members = comp[0], set(comp)
    for first in sorted(g[start]):
        if first not in members:
            continue
        prev, todo = {first: start}, [first]
        while todo:
            v = todo.pop(0)
            if v == start:
                path = [start]
                while path[-1] != first:
                    path.append(prev[path[-1]])
                return [start] + list(reversed(path[1:])) + [start] if len(path) > 1 else \
                    [start, start]
            for w in sorted(g[v]):
                if w in members and w not in prev:
                    prev[w] = v
                    todo.append(w)
        if start in prev:
            break
    return comp + [comp[0]]


def describe(g, path):
    parts = [path[0]]
    for a, b in zip(path, path[1:]):
        syms = sorted(g[a].get(b, ()))
        shown = ", ".join(syms[:3]) + (", ..." if len(syms) > 3 else "")
        parts.append(f"-> {b} ({shown})")
    return " ".join(parts)


def read_allow(path):
    allow = {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        mod, _, reason = line.partition("|")
        if not reason.strip():
            sys.exit(f"{path}: expected 'MODULE | reason': {line}")
        allow[mod.strip()] = reason.strip()
    return allow


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nm", metavar="BUILD", help="read object files of BUILD instead of sources")
    ap.add_argument("--compare", metavar="BUILD", help="print edges where sources and nm differ")
    ap.add_argument("--edges", action="store_true", help="print every edge too")
    ap.add_argument("--allow", metavar="FILE", help="modules allowed to hold a cycle")
    ap.add_argument("--root", metavar="DIR", help="the tree holding src/ (default: this one)")
    ap.add_argument("module", nargs="*")
    args = ap.parse_args()
    if args.root:
        global ROOT
        ROOT = os.path.abspath(args.root)
    allow = read_allow(args.allow) if args.allow else {}
    fail = 0
    cyclic = set()
    for mod in args.module or modules():
        if not module_files(mod):
            continue
        g = graph_from_nm(mod, args.nm) if args.nm else graph_from_sources(mod)
        if g is None:
            print(f"file_graph: no object files of module {mod} in {args.nm}")
            fail = 1
            continue
        if args.compare:
            h = graph_from_nm(mod, args.compare) or {}
            for a in sorted(set(g) | set(h)):
                for b in sorted(set(g.get(a, {})) | set(h.get(a, {}))):
                    s, o = g.get(a, {}).get(b, set()), h.get(a, {}).get(b, set())
                    if bool(s) != bool(o):
                        which = "sources only" if s else "nm only"
                        print(f"differ {mod}: {a} -> {b} {which}: {', '.join(sorted(s or o))}")
        if args.edges:
            for a in sorted(g):
                for b in sorted(g[a]):
                    print(f"edge {mod}: {a} -> {b} ({', '.join(sorted(g[a][b]))})")
        for comp in cycles(g):
            cyclic.add(mod)
            path = cycle_path(g, comp)
            line = f"cycle in {mod}: {describe(g, path)}"
            if len(set(path)) < len(comp): # the group holds files this path does not pass
                line += f" [component: {' '.join(comp)}]"
            if mod in allow:
                print(f"{line}  (allowed: {allow[mod]})")
            else:
                print(line)
                fail = 1
    for mod in sorted(set(allow) - cyclic):
        if not args.module or mod in args.module:
            print(f"note: stale entry in {args.allow}: module {mod} has no cycle (remove it)")
    return fail


if __name__ == "__main__":
    sys.exit(main())
