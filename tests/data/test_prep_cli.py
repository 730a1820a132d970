#!/usr/bin/env python3
"""shardlm prep end to end, checked against independent references:
  - documents split by the documented rule, re-implemented here;
  - token ids from the `sentencepiece` Python package (+ BOS/EOS);
  - the train/val rule with an XXH64 written here from the xxHash spec (no shared code);
  - shard headers parsed here with struct/numpy, payload hashes recomputed.
Usage: test_prep_cli.py cli            (workers 1/2/4, stdin, bad input, exit codes)
       test_prep_cli.py mpi MPIEXEC    (mpirun -np 2 vs one process)
Environment (set by CTest): SHARDLM_BIN, SLM_SHARED_DIR.
"""
import collections
import glob
import json
import os
import struct
import subprocess
import sys
import shutil
import signal
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from slm_need import need  # noqa: E402

for _m in ("numpy", "sentencepiece"):
    need(_m)

import numpy as np
import sentencepiece as spm

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                      9650029242287828579, 2870177450012600261)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64(data, seed=0):
    """XXH64 (Yann Collet's spec), pure Python."""
    n = len(data)
    i = 0

    def rnd(acc, v):
        acc = (acc + v * P2) & M64
        return (rotl(acc, 31) * P1) & M64

    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed & M64, (seed - P1) & M64]
        while i + 32 <= n:
            lanes = struct.unpack_from('<4Q', data, i)
            v = [rnd(v[k], lanes[k]) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h ^= rnd(0, v[k])
            h = (h * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= rnd(0, struct.unpack_from('<Q', data, i)[0])
        h = (rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from('<I', data, i)[0] * P1) & M64
        h = (rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return h


FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print('  FAIL', msg, file=sys.stderr)
    return cond


def text_docs(data):
    docs, cur = [], []
    for line in data.splitlines(keepends=True):
        if line.strip(b' \t\r\n\f\v') == b'':
            if cur:
                docs.append(b''.join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        docs.append(b''.join(cur))
    return docs


def jsonl_docs(data):
    out = []
    for line in data.split(b'\n'):
        if line.strip():
            out.append(json.loads(line)['text'].encode('utf-8'))
    return [d for d in out if d]


def reference(sp, docs, seed, frac):
    ref = [collections.Counter(), collections.Counter()]
    thr = int(frac * 2.0 ** 53)
    for d in docs:
        ids = [sp.bos_id()] + sp.encode(d.decode('utf-8')) + [sp.eos_id()]
        ref[1 if (xxh64(d, seed) >> 11) < thr else 0][tuple(ids)] += 1
    return ref


def read_dataset(out, bos, hash_payloads=True):
    man = json.load(open(os.path.join(out, 'manifest.json')))
    got = [collections.Counter(), collections.Counter()]
    tot = {'train': [0, 0], 'val': [0, 0]}
    listed = set()
    for sh in man['shards']:
        path = os.path.join(out, sh['file'])
        listed.add(sh['file'])
        b = open(path, 'rb').read()
        check(b[:8] == b'SLMSHRD1', f'{path}: magic')
        ver, tb, nt, nd, h, vocab = struct.unpack_from('<IIQQQI', b, 8)
        check(b[44:64] == bytes(20), f'{path}: reserved bytes')
        check(ver == 1 and tb == 2 and vocab == man['tokenizer']['vocab_size'], f'{path}: header')
        check(len(b) == 64 + tb * nt == sh['bytes'], f'{path}: size')
        check(nt == sh['n_tokens'] and nd == sh['n_docs'], f'{path}: counts vs manifest')
        if hash_payloads:
            check(xxh64(b[64:]) == h, f'{path}: payload xxh64')
            check('%016x' % xxh64(b) == sh['xxh64'], f'{path}: file xxh64 vs manifest')
        t = np.frombuffer(b, dtype='<u2', offset=64).tolist()
        starts = [i for i, x in enumerate(t) if x == bos]
        check(starts[:1] == [0] and len(starts) == nd, f'{path}: documents start with BOS')
        for k, s in enumerate(starts):
            got[sh['split'] == 'val'][tuple(t[s:starts[k + 1] if k + 1 < len(starts) else None])] += 1
        tot[sh['split']][0] += nt
        tot[sh['split']][1] += nd
    for s in ('train', 'val'):
        check(man['splits'][s]['n_tokens'] == tot[s][0] and man['splits'][s]['n_docs'] == tot[s][1],
              f'{out}: splits.{s} totals')
    on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(out, '*.bin'))}
    check(on_disk == listed, f'{out}: shard files on disk == manifest list')
    check(os.path.isfile(os.path.join(out, man['tokenizer']['file'])), f'{out}: tokenizer copy')
    return man, got


def run(args, stdin=None):
    p = subprocess.run(args, stdin=stdin, capture_output=True, timeout=300)
    return p.returncode, p.stderr.decode('utf-8', 'replace')


def main():
    mode = sys.argv[1]
    bin_ = os.environ['SHARDLM_BIN']
    shared = os.environ.get('SLM_SHARED_DIR', '../shared')
    ts_path = os.path.join(shared, 'data', 'tinyshakespeare.txt')
    ts = open(ts_path, 'rb').read()
    with tempfile.TemporaryDirectory(prefix='slm_prep_cli_') as tmp:
        model = os.path.join(tmp, 'sp.model')
        subprocess.run(['spm_train', f'--input={ts_path}', f'--model_prefix={tmp}/sp',
                        '--vocab_size=512', '--model_type=bpe', '--byte_fallback=true',
                        '--character_coverage=1.0', '--normalization_rule_name=identity',
                        '--remove_extra_whitespaces=false', '--minloglevel=2'],
                       check=True, capture_output=True)
        sp = spm.SentencePieceProcessor(model_file=model)
        # A JSONL file made of the first 300 speeches (with unicode and escapes).
        speeches = text_docs(ts)[:300]
        jl = os.path.join(tmp, 'speeches.jsonl')
        with open(jl, 'w') as f:
            for i, d in enumerate(speeches):
                f.write(json.dumps({'id': i, 'text': d.decode() + ('\u00e9\t"' if i % 7 == 0 else '')}) + '\n')
        seed, frac = 99, 0.05
        docs = text_docs(ts) + jsonl_docs(open(jl, 'rb').read())
        ref = reference(sp, docs, seed, frac)
        print(f'reference: {sum(ref[0].values())} train docs, {sum(ref[1].values())} val docs')
        common = ['--tokenizer', model, '--shard-tokens', '40000', '--val-fraction', str(frac),
                  '--seed', str(seed), '--unit-bytes', '65536', '--quiet']

        if mode == 'cli':
            for w in (1, 2, 4):
                out = os.path.join(tmp, f'w{w}')
                rc, err = run([bin_, 'prep', '--input', ts_path, jl, '--out', out, '--workers', str(w)] + common)
                if not check(rc == 0, f'workers {w}: rc {rc}: {err}'):
                    continue
                check(err == '', f'workers {w}: --quiet printed: {err!r}')
                man, got = read_dataset(out, sp.bos_id(), hash_payloads=(w == 1))
                check(man['tokenizer']['type'] == 'sentencepiece_bpe' and man['seed'] == seed, 'manifest fields')
                check(man['tokenizer']['bos_id'] == sp.bos_id() and man['tokenizer']['eos_id'] == sp.eos_id(), 'bos/eos')
                check(got[0] == ref[0], f'workers {w}: train documents == reference')
                check(got[1] == ref[1], f'workers {w}: val documents == reference')
            # stdin
            out = os.path.join(tmp, 'stdin')
            with open(ts_path, 'rb') as f:
                rc, err = run([bin_, 'prep', '--input', '-', '--out', out, '--workers', '2'] + common, stdin=f)
            if check(rc == 0, f'stdin: rc {rc}: {err}'):
                _, got = read_dataset(out, sp.bos_id(), hash_payloads=False)
                ref_ts = reference(sp, text_docs(ts), seed, frac)
                check(got == ref_ts, 'stdin: documents == reference')
            # Bad JSONL line: exit 1, file:line in the message, nothing left behind.
            bad = os.path.join(tmp, 'bad.jsonl')
            open(bad, 'w').write('{"text": "fine"}\n{"text": 3}\n')
            out = os.path.join(tmp, 'bad')
            rc, err = run([bin_, 'prep', '--input', ts_path, bad, '--out', out, '--workers', '2'] + common)
            check(rc == 1, f'bad jsonl: rc {rc}')
            check(f'{bad}:2:' in err, f'bad jsonl: message names file:line: {err}')
            left = os.listdir(out) if os.path.isdir(out) else []
            check(left == [], f'bad jsonl: left behind {left}')
            check(not [n for n in os.listdir(tmp) if '.prep-' in n], 'bad jsonl: temp sibling left')
            # A failed prep over an existing dataset leaves it (and files prep did not write)
            # intact; a successful one replaces the dataset and keeps those files.
            good = os.path.join(tmp, 'w1')
            keep = os.path.join(tmp, 'keep')
            shutil.copytree(good, keep)
            open(os.path.join(keep, 'NOTES.txt'), 'w').write('mine\n')
            open(os.path.join(keep, 'val_0000_000_999999.bin'), 'w').write('not ours\n')
            def snapshot(d):
                return {n: open(os.path.join(d, n), 'rb').read() for n in sorted(os.listdir(d))}
            before = snapshot(keep)
            rc, err = run([bin_, 'prep', '--input', ts_path, bad, '--out', keep, '--workers', '2'] + common)
            check(rc == 1 and f'{bad}:2:' in err, f'bad jsonl over dataset: rc {rc}: {err}')
            check(snapshot(keep) == before, 'bad jsonl over dataset: dataset changed')
            check(not [n for n in os.listdir(tmp) if '.prep-' in n], 'bad jsonl over dataset: temp left')
            rc, err = run([bin_, 'prep', '--input', jl, '--out', keep, '--workers', '2'] + common)
            if check(rc == 0, f'rerun over dataset: rc {rc}: {err}'):
                names = set(os.listdir(keep))
                check({'NOTES.txt', 'val_0000_000_999999.bin'} <= names, f'rerun: own files lost: {names}')
                man = json.load(open(os.path.join(keep, 'manifest.json')))
                listed = {sh['file'] for sh in man['shards']}
                check({n for n in names if n.endswith('.bin')} == listed | {'val_0000_000_999999.bin'},
                      f'rerun: stale shards: {names}')
                check(not [n for n in os.listdir(tmp) if '.prep-' in n], 'rerun: temp/old sibling left')
            # --out inside an --input directory: rerunning must not read the previous output;
            # --out equal to an --input directory is refused and nothing is touched.
            cdir = os.path.join(tmp, 'cdir')
            os.makedirs(cdir)
            shutil.copy(jl, os.path.join(cdir, 'c.jsonl'))
            for k in range(2):
                rc, err = run([bin_, 'prep', '--input', cdir, '--out', os.path.join(cdir, 'out'),
                               '--workers', '2'] + common)
                if check(rc == 0, f'--out inside --input, run {k}: rc {rc}: {err}'):
                    _, got = read_dataset(os.path.join(cdir, 'out'), sp.bos_id(), hash_payloads=False)
                    check(got == reference(sp, jsonl_docs(open(jl, 'rb').read()), seed, frac),
                          f'--out inside --input, run {k}: documents == reference')
            rc, err = run([bin_, 'prep', '--input', cdir, '--out', cdir] + common)
            check(rc == 1 and 'is or contains --input' in err, f'--out == --input: rc {rc}: {err}')
            check(sorted(os.listdir(cdir)) == ['c.jsonl', 'out'], f'--out == --input: {os.listdir(cdir)}')
            afile = os.path.join(tmp, 'afile')
            open(afile, 'w').write('keep me\n')
            rc, err = run([bin_, 'prep', '--input', jl, '--out', afile] + common)
            check(rc == 1 and 'exists and is not a directory' in err, f'--out FILE: rc {rc}: {err}')
            check(open(afile).read() == 'keep me\n', '--out FILE: file changed')
            # Interrupted runs over an earlier dataset: SIGINT -> exit 1, "interrupted", the
            # dataset untouched and no temp sibling left; SIGKILL -> the dataset untouched (only
            # the hidden .NAME.prep-tmp.PID sibling may remain).
            big = os.path.join(tmp, 'big.txt')
            with open(big, 'wb') as f:
                for _ in range(30):
                    f.write(ts)
            for sig in (signal.SIGINT, signal.SIGKILL):
                out = os.path.join(tmp, f'sig{int(sig)}')
                shutil.copytree(good, out)  # an earlier dataset that must survive
                before = snapshot(out)
                p = subprocess.Popen([bin_, 'prep', '--input', big, '--out', out, '--workers', '1',
                                      '--tokenizer', model, '--shard-tokens', '20000', '--quiet'],
                                     stderr=subprocess.PIPE)
                time.sleep(1.5)
                p.send_signal(sig)
                _, err = p.communicate(timeout=120)
                err = err.decode('utf-8', 'replace')
                if p.returncode == 0:
                    print(f'  note: prep finished before signal {int(sig)}; not checked')
                    continue
                check(snapshot(out) == before, f'signal {int(sig)}: earlier dataset changed')
                temps = [n for n in os.listdir(tmp) if n.startswith(f'.sig{int(sig)}.prep-')]
                if sig == signal.SIGINT:
                    check(p.returncode == 1 and 'interrupted' in err, f'SIGINT: rc {p.returncode}: {err}')
                    check(temps == [], f'SIGINT: temp dir left: {temps}')
                else:
                    print(f'  SIGKILL left {temps}; {out} untouched')
                    for t in temps:
                        shutil.rmtree(os.path.join(tmp, t))
            # Usage errors exit 2; --help exits 0.
            rc, _ = run([bin_, 'prep', '--input', ts_path, '--tokenizer', model])
            check(rc == 2, f'missing --out: rc {rc}')
            rc, _ = run([bin_, 'prep', '--out', out, '--tokenizer', model, '--input', ts_path, '--workers', 'x'])
            check(rc == 2, f'bad --workers: rc {rc}')
            rc, err = run([bin_, 'prep', '--input', ts_path, '--tokenizer', model, '--out', out, '--bogus', '1'])
            check(rc == 2 and 'unknown option --bogus' in err, f'--bogus: rc {rc}: {err}')
            rc, err = run([bin_, 'prep', '--tokenizer', model, '--input', '--out', out])
            check(rc == 2 and 'option --input needs a value' in err, f'--input --out: rc {rc}: {err}')
            rc, err = run([bin_, 'prep', '--tokenizer', model, '--input', ts_path, '--out'])
            check(rc == 2 and 'option --out needs a value' in err, f'--out at end: rc {rc}: {err}')
            rc, _ = run([bin_, 'prep', '--help'])
            check(rc == 0, f'--help: rc {rc}')
        else:
            mpiexec = sys.argv[2]
            out1 = os.path.join(tmp, 'one')
            rc, err = run([bin_, 'prep', '--input', ts_path, jl, '--out', out1, '--workers', '1'] + common)
            check(rc == 0, f'one process: rc {rc}: {err}')
            for np_, w in ((2, 2), (3, 1)):
                out = os.path.join(tmp, f'np{np_}')
                rc, err = run([mpiexec, '--oversubscribe', '-np', str(np_), bin_, 'prep', '--input',
                               ts_path, jl, '--out', out, '--workers', str(w)] + common)
                if not check(rc == 0, f'mpirun -np {np_}: rc {rc}: {err}'):
                    continue
                man, got = read_dataset(out, sp.bos_id(), hash_payloads=False)
                _, got1 = read_dataset(out1, sp.bos_id(), hash_payloads=False)
                ranks = {sh['file'].split('_')[1] for sh in man['shards']}
                check(len(ranks) == np_, f'mpirun -np {np_}: shards from ranks {sorted(ranks)}')
                check(got == got1, f'mpirun -np {np_}: documents per split == one process')
                check(got == ref, f'mpirun -np {np_}: documents per split == reference')
            # One rank meets a bad line (the last unit, the only unit of rank 1 for that file):
            # every rank fails with the same message and nothing is left behind.
            bad = os.path.join(tmp, 'bad.jsonl')
            open(bad, 'w').write('{"text": "fine"}\n' * 5000 + 'oops\n')
            out = os.path.join(tmp, 'np2bad')
            rc, err = run([mpiexec, '--oversubscribe', '-np', '2', bin_, 'prep', '--input', ts_path,
                           bad, '--out', out, '--workers', '2'] + common)
            check(rc != 0, f'mpirun bad input: rc {rc}')
            check(f'{bad}:5001: not valid JSON' in err, f'mpirun bad input: message: {err}')
            names = os.listdir(out) if os.path.isdir(out) else []
            check(not [n for n in names if '.bin' in n or 'manifest' in n], f'mpirun bad input: left {names}')
    print(f'{"FAILED: " + str(len(FAILS)) if FAILS else "all checks passed"}')
    print(f'{0 if FAILS else 1} passed, {1 if FAILS else 0} failed')
    return 1 if FAILS else 0


if __name__ == '__main__':
    sys.exit(main())
