// shardlm prep: tokenizes a corpus into token shards and writes the dataset manifest.
//
// Documents (docs/formats.md "Token shards"):
//   - a plain text file is split into documents at blank lines (lines of only spaces, tabs,
//     CR): a document is a maximal run of non-blank lines, with their newlines, the separating
//     blank lines dropped;
//   - a *.jsonl file holds one document per line: the "text" string field of a JSON object
//     (blank lines are skipped; anything else that is not such an object is an error);
//   - "-" reads standard input as plain text (rank 0 only under MPI).
// Empty documents produce nothing (counted as skipped: log and manifest "documents"). Each document
// is encoded with the tokenizer's BOS prepended and EOS appended when it has them, and goes to val
// if XXH64(document bytes, seed) / 2^64 < val_fraction, else to train: a property of the content
// only.
//
// Parallelism, shared-nothing: every source file is cut into fixed-size units (1 MiB default);
// a unit owns the documents that START inside it (a document may run past the unit's end; the
// unit's worker reads on). Global unit u goes to rank u % world, and a rank's i-th unit to
// worker i % W. Each worker fills its own train and val buffers and writes its own shards named
// <split>_<rank:4>_<worker:3>_<index:6>.bin, flushed at document boundaries once a buffer holds
// >= shard_tokens tokens. Documents never split across shards. The token multiset of each split
// does not depend on W or world; the order of documents across shards does.
// Output: the new dataset is built in a hidden temp sibling of --out,
// <parent>/.<name>.prep-tmp.<pid> (rank 0's pid, broadcast), never in --out itself. Shards are
// written there as NAME.partial (temp + fsync + rename) and renamed to NAME only once every rank
// finished without error; then the shard lists are all-gathered and rank 0 writes manifest.json
// (shards in (split, rank, worker, index) order) and swaps the directory in: the previous --out
// is renamed aside to .<name>.prep-old.<pid>, the temp directory renamed to --out, the parent
// fsynced, and the old directory retired (its dataset files deleted, any other files moved into
// the new --out). So a failed, interrupted or killed run leaves the previous dataset in --out
// untouched (a kill -9 may leave a hidden temp sibling behind, which the next run for the same
// --out removes once its pid is no longer running); on any error or SIGINT/SIGTERM the temp
// directory is removed. --out must not be or contain an --input; inside an input
// directory it is skipped by the walk.
#include "data/data.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

#define UNIT_BYTES ((size_t)1 << 20) // default work unit size
#define REC_FIELDS 7                 // split, worker, index, n_tokens, n_docs, bytes, xxh64

typedef struct {
    char *path; // owned; "<stdin>" for stdin
    bool jsonl;
    bool is_stdin;
    size_t size;      // bytes
    char *stdin_data; // owned, stdin only (rank 0)
} source;

typedef struct {
    int src;
    size_t begin, end;
} unit;

typedef struct {
    int64_t split, worker, index, n_tokens, n_docs, bytes;
    uint64_t xxh64;
} shard_rec;

typedef struct prep_ctx prep_ctx;

typedef struct {
    prep_ctx *ctx;
    int id;
    slm_ivec buf[2];                  // [0] train, [1] val tokens not yet flushed
    slm_buf fbuf[2];                  // instruction data: their SLM_TOKF_* flags, one per token
    uint64_t docs[2];                 // documents in buf
    uint64_t docs_read, docs_skipped; // every document seen; those that produced no token
    int64_t next_index[2];
    shard_rec *recs; // shards written
    int n_recs, cap_recs;
    slm_status st;
    char err[2048];
    pthread_t thread;
} worker;

struct prep_ctx {
    const slm_prep_opts *o;
    char *work_dir; // the temp sibling of --out the new dataset is built in (see header)
    slm_tokenizer *tok;
    slm_chat_template *tpl; // instruction data: --chat-template (NULL: none)
    uint32_t vocab;
    int rank, world;
    source *srcs;
    int n_srcs;
    unit *units; // this rank's units
    int n_units;
    uint64_t val_threshold; // val if (hash >> 11) < threshold (53-bit fixed point)
    worker *workers;
    atomic_int failed;
    atomic_int done;
    _Atomic uint64_t bytes_done;
};

static const char *split_name(int s) {
    return s ? "val" : "train";
}

// Final path of a shard; with `partial`, the name it has until the whole run succeeded.
static char *shard_path(const prep_ctx *c, int split, int64_t w, int64_t idx, int rank,
                        bool partial) {
    char name[80];
    snprintf(name, sizeof name, "%s_%04d_%03d_%06" PRId64 ".bin%s", split_name(split), rank, (int)w,
             idx, partial ? ".partial" : "");
    return slm_path_join(c->work_dir, name);
}

// SIGINT / SIGTERM while prep runs (base/'s stop flag): workers stop at the next document, the
// run fails with SLM_E_INTERRUPTED and removes its output. Previous handlers are restored on
// return.
static bool stop_requested(prep_ctx *c) {
    return atomic_load(&c->failed) || slm_stop_requested();
}

// --- Inputs ---------------------------------------------------------------------------------

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void add_source(source **v, int *n, int *cap, source s) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *v = slm_xrealloc(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[(*n)++] = s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Adds `path` (a file, or a directory walked recursively in byte-wise sorted order, skipping
// names that start with '.', so also prep's hidden temp siblings of --out). `skip` (the --out
// directory, or NULL when it does not exist yet) is never walked: it holds the previous output.
static slm_status add_path(const char *path, source **v, int *n, int *cap, int depth,
                           const struct stat *skip) {
    struct stat st;
    if (stat(path, &st) != 0) return slm_fail(SLM_E_IO, "input %s: %s", path, strerror(errno));
    if (skip && S_ISDIR(st.st_mode) && st.st_dev == skip->st_dev && st.st_ino == skip->st_ino)
        return SLM_OK;
    if (S_ISREG(st.st_mode)) {
        source s = {slm_xstrdup(path), ends_with(path, ".jsonl"), false, (size_t)st.st_size, NULL};
        add_source(v, n, cap, s);
        return SLM_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return slm_fail(SLM_E_IO, "input %s: not a regular file or directory", path);
    if (depth > 64) return slm_fail(SLM_E_IO, "input %s: directories nested too deep", path);
    DIR *d = opendir(path);
    if (!d) return slm_fail(SLM_E_IO, "input %s: cannot open directory: %s", path, strerror(errno));
    char **names = NULL;
    size_t nn = 0, cn = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (nn == cn) {
            cn = cn ? 2 * cn : 64;
            names = slm_xrealloc(names, cn * sizeof *names);
        }
        names[nn++] = slm_xstrdup(e->d_name);
    }
    closedir(d);
    if (nn) qsort(names, nn, sizeof *names, cmp_str);
    slm_status rc = SLM_OK;
    for (size_t i = 0; i < nn; i++) {
        if (rc == SLM_OK) {
            char *p = slm_path_join(path, names[i]);
            rc = add_path(p, v, n, cap, depth + 1, skip);
            free(p);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static slm_status read_stdin(char **out, size_t *len) {
    slm_buf b = {0};
    slm_buf_reserve(&b, 1 << 16);
    for (;;) {
        if (b.cap - b.len < 4096) slm_buf_reserve(&b, 2 * b.cap);
        ssize_t r = read(0, b.data + b.len, b.cap - b.len - 1);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            slm_buf_free(&b);
            return slm_fail(SLM_E_IO, "<stdin>: read failed: %s", strerror(e));
        }
        if (r == 0) break;
        b.len += (size_t)r;
    }
    b.data[b.len] = 0;
    *out = b.data;
    *len = b.len;
    return SLM_OK;
}

// --- Worker -----------------------------------------------------------------------------------

static slm_status flush_split(worker *w, int split) {
    prep_ctx *c = w->ctx;
    slm_ivec *b = &w->buf[split];
    if (b->len == 0) return SLM_OK;
    int64_t idx = w->next_index[split]++;
    char *path = shard_path(c, split, w->id, idx, c->rank, true);
    bool masked = c->o->format != SLM_PREP_TEXT;
    slm_status st =
        masked ? slm_shard_write_masked(path, b->data, (const uint8_t *)w->fbuf[split].data, b->len,
                                        w->docs[split], c->vocab)
               : slm_shard_write(path, b->data, b->len, w->docs[split], c->vocab);
    uint64_t h = 0;
    if (st == SLM_OK) st = slm_file_xxh64(path, &h);
    if (st == SLM_OK) {
        if (w->n_recs == w->cap_recs) {
            w->cap_recs = w->cap_recs ? 2 * w->cap_recs : 16;
            w->recs = slm_xrealloc(w->recs, (size_t)w->cap_recs * sizeof *w->recs);
        }
        shard_rec r = {split,
                       w->id,
                       idx,
                       (int64_t)b->len,
                       (int64_t)w->docs[split],
                       (int64_t)(SLM_SHARD_HEADER_BYTES +
                                 b->len * ((c->vocab <= 65536u ? 2 : 4) + (masked ? 1 : 0))),
                       h};
        w->recs[w->n_recs++] = r;
    } else {
        unlink(path);
    }
    free(path);
    b->len = 0;
    w->fbuf[split].len = 0;
    w->docs[split] = 0;
    return st;
}

// Documents at least this long are checked against the memory probe before encoding (the probe
// reads a few /proc files: too slow to run for every small document).
#define PREP_BIG_DOC_BYTES ((size_t)8 << 20)

// Memory to encode a document of `len` bytes: its ids, at most one 4-byte id per input byte plus
// BOS / EOS, with half again for the buffer's growth (an upper bound; measured: about 4 bytes of
// resident memory per input byte, input mapping included, for a 20 MB document).
static slm_status check_doc_memory(size_t len) {
    if (len < PREP_BIG_DOC_BYTES) return SLM_OK;
    slm_status st = slm_mem_check(((double)len + 3) * sizeof(int32_t) * 1.5,
                                  "a document of %zu bytes (its token ids)", len);
    if (!st) return SLM_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", slm_errmsg());
    return slm_fail(st,
                    "%s; split it into smaller documents (blank lines separate the documents "
                    "of a text file; one JSONL line is one document) or raise the limit",
                    msg);
}

static slm_status emit_doc(worker *w, const char *text, size_t len) {
    w->docs_read++;
    if (len == 0) {
        w->docs_skipped++;
        return SLM_OK;
    }
    slm_status mst = check_doc_memory(len);
    if (mst) return mst;
    prep_ctx *c = w->ctx;
    uint64_t h = slm_xxh64(text, len, c->o->seed);
    int split = (h >> 11) < c->val_threshold ? 1 : 0;
    slm_ivec *b = &w->buf[split];
    size_t before = b->len;
    // BOS unless the tokenizer's file says not to (a GGUF import with add_bos_token false)
    int fl = (slm_tokenizer_add_bos(c->tok) ? SLM_ENC_ADD_BOS : 0) | SLM_ENC_ADD_EOS;
    slm_status st = slm_tokenizer_encode(c->tok, text, len, fl, b);
    if (st) return st;
    if (b->len == before) { // encodes to no token (no BOS/EOS and nothing the tokenizer keeps)
        w->docs_skipped++;
        return SLM_OK;
    }
    w->docs[split]++;
    if ((int64_t)b->len >= c->o->shard_tokens) return flush_split(w, split);
    return SLM_OK;
}

// One instruction sample (a parsed JSONL line of bytes [line, line + n)): rendered with the chat
// template, encoded segment by segment with its flags. The train/val hash is over the line's
// bytes. A sample without any target token (no assistant message, empty completion) is skipped.
static slm_status emit_sample(worker *w, const slm_sample *smp, const char *line, size_t n,
                              const char *path, int64_t lineno) {
    prep_ctx *c = w->ctx;
    w->docs_read++;
    slm_sample_segs g;
    char why[256];
    if (!slm_sample_render(c->tpl, smp, false, slm_tokenizer_bos_id(c->tok),
                           slm_tokenizer_eos_id(c->tok), &g, why, sizeof why))
        return slm_fail(SLM_E_FORMAT, "%s:%" PRId64 ": %s", path, lineno, why);
    slm_status mst = check_doc_memory(n);
    if (mst) {
        slm_sample_segs_free(&g);
        return mst;
    }
    uint64_t h = slm_xxh64(line, n, c->o->seed);
    int split = (h >> 11) < c->val_threshold ? 1 : 0;
    slm_ivec *b = &w->buf[split];
    slm_buf *f = &w->fbuf[split];
    size_t before = b->len;
    slm_status st = slm_sample_encode(&g, c->tok, b, f);
    slm_sample_segs_free(&g);
    if (st) return st;
    bool any_target = false;
    for (size_t i = before + 1; i < b->len; i++) // the first token is never predicted
        any_target |= (((const uint8_t *)f->data)[i] & SLM_TOKF_TARGET) != 0;
    if (!any_target) {
        b->len = before;
        f->len = before;
        w->docs_skipped++;
        return SLM_OK;
    }
    w->docs[split]++;
    if ((int64_t)b->len >= c->o->shard_tokens) return flush_split(w, split);
    return SLM_OK;
}

static bool blank_span(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n' && p[i] != '\f' &&
            p[i] != '\v')
            return false;
    return true;
}

static size_t line_end(const char *d, size_t S, size_t p) {
    const char *nl = memchr(d + p, '\n', S - p);
    return nl ? (size_t)(nl - d) + 1 : S;
}

// First line start >= a (S if none).
static size_t first_line_start(const char *d, size_t S, size_t a) {
    if (a == 0) return 0;
    const char *nl = memchr(d + a - 1, '\n', S - (a - 1));
    return nl ? (size_t)(nl - d) + 1 : S;
}

static int64_t line_number(const char *d, size_t p) {
    int64_t n = 1;
    for (size_t i = 0; i < p; i++)
        n += d[i] == '\n';
    return n;
}

static slm_status do_text_unit(worker *w, const char *d, size_t S, size_t a, size_t b) {
    size_t p = first_line_start(d, S, a);
    // Is the line before p blank (or is p the start of the file)?
    bool prev_blank = true;
    if (p > 0 && p < S) {
        size_t q = p - 1; // the '\n' ending the previous line
        while (q > 0 && d[q - 1] != '\n' && blank_span(d + q - 1, 1))
            q--;
        prev_blank = (q == 0 || d[q - 1] == '\n');
    }
    while (p < S) {
        if (stop_requested(w->ctx)) return SLM_OK;
        size_t e = line_end(d, S, p);
        if (blank_span(d + p, e - p)) {
            prev_blank = true;
            p = e;
            continue;
        }
        if (!prev_blank) { // inside a document that started in an earlier unit
            p = e;
            continue;
        }
        if (p >= b) break;
        size_t s0 = p, last = e;
        p = e;
        while (p < S) {
            e = line_end(d, S, p);
            if (blank_span(d + p, e - p)) break;
            last = e;
            p = e;
        }
        slm_status st = emit_doc(w, d + s0, last - s0);
        if (st) return st;
        prev_blank = false; // p is at a blank line (handled above) or at S
    }
    return SLM_OK;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int x = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

// Escapes in the strings of one JSONL line that cJSON would silently mishandle: \u0000 (a C
// string ends there, so "a\u0000b" would become "a") and UTF-16 surrogates that are not a high
// one followed by a low one (cJSON only says "not valid JSON"). Returns a reason (in buf) or
// NULL. Other malformations are left to the parser.
static const char *jsonl_escapes(const char *s, size_t n, char *buf, size_t cap) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = false;
        } else if (c == '\\' && i + 1 < n) {
            if (s[i + 1] != 'u') {
                i++;
                continue;
            }
            int u = i + 6 <= n ? hex4(s + i + 2) : -1;
            if (u < 0) return NULL; // malformed escape: the parser reports it
            if (u == 0) {
                snprintf(buf, cap,
                         "\\u0000 (NUL) in a string at byte %zu; prep does not "
                         "store NUL characters (remove them from the input)",
                         i + 1);
                return buf;
            }
            bool low_ok = false;
            if (u >= 0xD800 && u <= 0xDBFF && i + 12 <= n && s[i + 6] == '\\' && s[i + 7] == 'u') {
                int l = hex4(s + i + 8);
                low_ok = l >= 0xDC00 && l <= 0xDFFF;
            }
            if ((u >= 0xD800 && u <= 0xDBFF && !low_ok) || (u >= 0xDC00 && u <= 0xDFFF)) {
                snprintf(buf, cap,
                         "lone UTF-16 surrogate \\u%04X in a string at byte %zu (a "
                         "high surrogate must be followed by a low one)",
                         u, i + 1);
                return buf;
            }
            i += low_ok ? 11 : 5;
        }
    }
    return NULL;
}

static slm_status do_jsonl_unit(worker *w, const source *src, const char *d, size_t S, size_t a,
                                size_t b) {
    size_t p = first_line_start(d, S, a);
    while (p < b && p < S) {
        if (stop_requested(w->ctx)) return SLM_OK;
        size_t e = line_end(d, S, p);
        if (!blank_span(d + p, e - p)) {
            char esc[192];
            const char *rest = NULL;
            const char *why = jsonl_escapes(d + p, e - p, esc, sizeof esc);
            // A raw NUL byte: cJSON would keep parsing but the C string it builds ends there,
            // silently cutting the field ("a<NUL>b" read as "a").
            const char *nul = memchr(d + p, 0, e - p);
            if (!why && nul) {
                snprintf(esc, sizeof esc,
                         "raw NUL byte (0x00) at byte %zu of the line; prep does not store NUL "
                         "characters (remove them from the input)",
                         (size_t)(nul - (d + p)) + 1);
                why = esc;
            }
            cJSON *j = why ? NULL : cJSON_ParseWithLengthOpts(d + p, e - p, &rest, false);
            const cJSON *t = NULL;
            bool inst = w->ctx->o->format != SLM_PREP_TEXT;
            slm_sample smp = {0};
            char swhy[256];
            if (why)
                ;
            else if (!j)
                why = "not valid JSON";
            else if (rest && !blank_span(rest, (size_t)(d + e - rest)))
                why = "text after the JSON object (one object per line)";
            else if (!cJSON_IsObject(j))
                why = "not a JSON object";
            else if (inst) {
                if (!slm_sample_from_json(j, w->ctx->o->format, &smp, swhy, sizeof swhy))
                    why = swhy;
            } else if (!(t = cJSON_GetObjectItemCaseSensitive(j, "text")))
                why = "no \"text\" field";
            else if (!cJSON_IsString(t) || !t->valuestring)
                why = "field \"text\" is not a string";
            slm_status st = SLM_OK;
            const char *expect =
                !inst ? "{\"text\": \"...\"}"
                : w->ctx->o->format == SLM_PREP_CHAT
                    ? "{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}"
                    : "{\"prompt\": \"...\", \"completion\": \"...\"}";
            if (why)
                st = slm_fail(SLM_E_FORMAT, "%s:%" PRId64 ": %s; expected %s", src->path,
                              line_number(d, p), why, expect);
            else if (inst)
                st = emit_sample(w, &smp, d + p, e - p, src->path, line_number(d, p));
            else
                st = emit_doc(w, t->valuestring, strlen(t->valuestring));
            slm_sample_free(&smp);
            cJSON_Delete(j);
            if (st) return st;
        }
        p = e;
    }
    return SLM_OK;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    prep_ctx *c = w->ctx;
    int W = c->o->workers;
    int cur = -1;
    slm_map m = {0};
    slm_status st = SLM_OK;
    for (int i = w->id; i < c->n_units && st == SLM_OK; i += W) {
        if (stop_requested(c)) break;
        const unit *u = &c->units[i];
        const source *src = &c->srcs[u->src];
        const char *d;
        size_t S;
        if (src->is_stdin) {
            d = src->stdin_data;
            S = src->size;
        } else {
            if (cur != u->src) {
                slm_map_free(&m);
                cur = -1;
                st = slm_map_file(src->path, &m);
                if (st) break;
                cur = u->src;
                if (m.len != src->size) {
                    st = slm_fail(SLM_E_IO, "%s: file changed size during prep (%zu -> %zu bytes)",
                                  src->path, src->size, m.len);
                    break;
                }
            }
            d = (const char *)m.data;
            S = m.len;
        }
        st = src->jsonl ? do_jsonl_unit(w, src, d, S, u->begin, u->end)
                        : do_text_unit(w, d, S, u->begin, u->end);
        if (st == SLM_E_NOMEM) st = slm_fail_wrap(st, "%s", src->path);
        atomic_fetch_add(&c->bytes_done, (uint64_t)(u->end - u->begin));
    }
    slm_map_free(&m);
    for (int s = 0; s < 2 && st == SLM_OK; s++)
        if (!stop_requested(c)) st = flush_split(w, s);
    if (st) {
        w->st = st;
        snprintf(w->err, sizeof w->err, "%s", slm_errmsg());
        atomic_store(&c->failed, 1);
    }
    atomic_fetch_add(&c->done, 1);
    return NULL;
}

// --- Progress -----------------------------------------------------------------------------

// Bytes of input tokenized so far, MB/s and the ETA (base.h "Progress": a terminal line or plain
// lines per tenth on stderr).
static void progress(prep_ctx *c, slm_progress *pg, double t0, bool final) {
    double mb = (double)atomic_load(&c->bytes_done) / 1e6, tot = pg->total / 1e6;
    double dt = slm_time_s() - t0, rate = dt > 0 ? mb / dt : 0;
    if (final)
        slm_progress_end(pg, mb * 1e6, "%.1f / %.1f MB, %.2f MB/s", mb, tot, rate);
    else
        slm_progress_update(pg, mb * 1e6, "%.1f / %.1f MB, %.2f MB/s", mb, tot, rate);
}

// --- Driver -------------------------------------------------------------------------------

// Removes the temp siblings "<parent>/.<name>.prep-tmp.<pid>" that runs killed before they could
// clean up (kill -9, OOM) left behind: those whose pid is not a running process on this host
// (kill(pid, 0) fails with ESRCH), saying so. A temp directory of a live run is never touched.
// Old directories (.prep-old.<pid>) are left alone: after a kill between the two renames of the
// swap, one may hold the only copy of the previous dataset.
static void remove_stale_work_dirs(const char *out_path) {
    char *parent = slm_path_parent(out_path);
    const char *slash = strrchr(out_path, '/');
    const char *base = slash ? slash + 1 : out_path;
    slm_buf prefix = {0};
    slm_buf_appendf(&prefix, ".%s.prep-tmp.", base);
    DIR *d = opendir(parent);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, prefix.data, prefix.len) != 0) continue;
            const char *num = e->d_name + prefix.len;
            char *end = NULL;
            errno = 0;
            long long pid = strtoll(num, &end, 10);
            if (!*num || *end || errno || pid <= 0 || pid > INT_MAX || pid == (long long)getpid())
                continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; // alive (or not ours)
            char *p = slm_path_join(parent, e->d_name);
            slm_rmdir_flat_quiet(p);
            if (!slm_is_dir(p))
                slm_info("prep: removed stale temp directory %s (left by pid %lld, which is no "
                         "longer running)",
                         p, pid);
            else
                slm_warn("prep: stale temp directory %s (pid %lld is not running) could not be "
                         "removed",
                         p, pid);
            free(p);
        }
        closedir(d);
    }
    slm_buf_free(&prefix);
    free(parent);
}

// --out must not be (or contain) an --input: the swap would move the corpus. --out inside an
// input directory is fine (the walk skips it).
static slm_status check_out_vs_inputs(const slm_prep_opts *o, const char *out_path) {
    size_t n = strlen(out_path);
    for (int i = 0; i < o->n_inputs; i++) {
        char real[PATH_MAX];
        if (!strcmp(o->inputs[i], "-") || !realpath(o->inputs[i], real)) continue;
        if (!strncmp(real, out_path, n) && (real[n] == 0 || real[n] == '/' || n == 1))
            return slm_fail(SLM_E_ARG,
                            "prep: --out %s is or contains --input %s; expected an output "
                            "directory outside the inputs (a subdirectory of an input directory "
                            "is fine)",
                            o->out_dir, o->inputs[i]);
    }
    return SLM_OK;
}

static slm_status check_opts(const slm_prep_opts *o) {
    if (!o->tokenizer_path) return slm_fail(SLM_E_ARG, "prep: --tokenizer is required");
    if (!o->out_dir || !*o->out_dir) return slm_fail(SLM_E_ARG, "prep: --out is required");
    if (o->n_inputs < 1) return slm_fail(SLM_E_ARG, "prep: at least one --input is required");
    if (o->shard_tokens < 1)
        return slm_fail(SLM_E_ARG, "prep: shard_tokens %" PRId64 ", expected >= 1",
                        o->shard_tokens);
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return slm_fail(SLM_E_ARG, "prep: val_fraction %g, expected in [0, 1)", o->val_fraction);
    if (o->workers < 1 || o->workers > 999)
        return slm_fail(SLM_E_ARG, "prep: workers %d, expected in [1, 999]", o->workers);
    if (o->seed >= (1ULL << 53))
        return slm_fail(SLM_E_ARG, "prep: seed %" PRIu64 " must be < 2^53 (stored in JSON)",
                        o->seed);
    int n_stdin = 0;
    for (int i = 0; i < o->n_inputs; i++)
        n_stdin += !strcmp(o->inputs[i], "-");
    if (n_stdin > 1) return slm_fail(SLM_E_ARG, "prep: \"-\" (stdin) given more than once");
    if (o->format < SLM_PREP_TEXT || o->format > SLM_PREP_CHAT)
        return slm_fail(SLM_E_ARG, "prep: format %d is unknown", o->format);
    if (o->format == SLM_PREP_CHAT && !o->chat_template)
        return slm_fail(SLM_E_ARG, "prep: --format chat needs --chat-template llama2|llama3|FILE");
    if (o->format == SLM_PREP_TEXT && o->chat_template)
        return slm_fail(SLM_E_ARG,
                        "prep: --chat-template needs --format prompt-completion or chat");
    if (o->format != SLM_PREP_TEXT && n_stdin)
        return slm_fail(SLM_E_ARG, "prep: --format %s reads .jsonl files, not stdin",
                        o->format == SLM_PREP_CHAT ? "chat" : "prompt-completion");
    return SLM_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// The previous dataset in the directory moved aside by the swap, read once (slm_publish drop).
typedef struct {
    slm_dataset ds;
    int state; // 0: not read yet, 1: read, -1: unreadable (then nothing is deleted)
} old_dataset;

// slm_publish drop: the files of the previous dataset (manifest.json, the tokenizer copy and the
// shards its manifest lists) are deleted; anything else in it (files prep did not write) is moved
// into the new --out.
static bool drop_old_dataset_file(const char *old, const char *name, const char *out, void *arg) {
    (void)out;
    old_dataset *od = arg;
    if (!od->state) od->state = slm_dataset_open(old, &od->ds) == SLM_OK ? 1 : -1;
    if (od->state < 0) return false;
    if (!strcmp(name, "manifest.json")) return true;
    if (od->ds.tokenizer_file && !strcmp(name, base_name(od->ds.tokenizer_file))) return true;
    for (int s = 0; s < 2; s++) {
        const slm_split_info *sp = s ? &od->ds.val : &od->ds.train;
        for (int i = 0; i < sp->n_shards; i++)
            if (!strcmp(name, sp->shards[i].file)) return true;
    }
    return false;
}

// Replaces --out by the finished temp directory (slm_publish_dir): a kill in between leaves
// either the old dataset or nothing under `out_path`, never a mix.
static slm_status swap_in(const char *work, const char *out_path, const char *old,
                          const char *shown) {
    old_dataset od = {.state = 0};
    slm_publish p = {.what = "prep: --out", .shown = shown, .drop = drop_old_dataset_file};
    p.arg = &od;
    slm_status st = slm_publish_dir(work, out_path, old, &p);
    slm_dataset_free(&od.ds);
    return st;
}

// Agrees on a status across ranks (no-op in a world of one).
static slm_status agree(const prep_ctx *c, slm_status st) {
    return c->world > 1 ? slm_dist_agree(st) : st;
}

// SLM_E_INTERRUPTED when a stop was requested and `st` is SLM_OK; else `st`.
static slm_status check_interrupted(slm_status st) {
    if (st == SLM_OK && slm_stop_requested())
        st =
            slm_fail(SLM_E_INTERRUPTED, "prep: interrupted by signal %d; removed this run's output",
                     slm_stop_signal());
    return st;
}

// The state of one slm_prep_run: the context the workers share, and what the driver's steps
// hand on to each other.
typedef struct {
    prep_ctx c;
    slm_dataset ds; // the new manifest (shard lists on every rank, the rest on rank 0)
    char *out_path; // --out resolved (slm_publish_target)
    char *old_dir;  // where the previous --out goes during the swap
    char *tok_dst;  // rank 0: the tokenizer copy in the temp directory
    uint64_t total; // bytes of this rank's units
    int started;    // worker threads started
    bool work_created, swapped;
    double t0;
} prep_run;

// Loads the tokenizer (its vocabulary must fit uint32 tokens) and the chat template.
static slm_status load_tokenizer(prep_run *r) {
    const slm_prep_opts *o = r->c.o;
    slm_status st = slm_tokenizer_load(o->tokenizer_path, &r->c.tok);
    if (st == SLM_OK) {
        int32_t v = slm_tokenizer_vocab_size(r->c.tok);
        if (v <= 0)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: vocab size %" PRId32 " does not fit the uint32 "
                          "token dtype",
                          o->tokenizer_path, v);
        r->c.vocab = (uint32_t)v;
    }
    if (st == SLM_OK && o->chat_template) st = slm_chat_template_load(o->chat_template, &r->c.tpl);
    if (st == SLM_OK) st = slm_chat_template_check(r->c.tpl, r->c.tok);
    return st;
}

// Checks --out and lists the inputs (every rank the same list: a shared file system is
// assumed), after `st` (the tokenizer's status). Collective: every rank has listed its inputs
// before rank 0 creates anything next to --out.
static slm_status list_inputs(prep_run *r, slm_status st) {
    const slm_prep_opts *o = r->c.o;
    prep_ctx *c = &r->c;
    int n_cap = 0;
    // --out: never one of the inputs; skipped by the walk when it lies inside an input dir.
    r->out_path = slm_publish_target(o->out_dir);
    struct stat out_st;
    bool out_exists = stat(r->out_path, &out_st) == 0;
    if (st == SLM_OK && out_exists && !S_ISDIR(out_st.st_mode))
        st = slm_fail(SLM_E_IO, "prep: --out %s exists and is not a directory", o->out_dir);
    if (st == SLM_OK) st = check_out_vs_inputs(o, r->out_path);
    for (int i = 0; i < o->n_inputs && st == SLM_OK; i++) {
        if (!strcmp(o->inputs[i], "-")) {
            source s = {slm_xstrdup("<stdin>"), false, true, 0, NULL};
            if (c->rank == 0) st = read_stdin(&s.stdin_data, &s.size);
            add_source(&c->srcs, &c->n_srcs, &n_cap, s);
        } else {
            st = add_path(o->inputs[i], &c->srcs, &c->n_srcs, &n_cap, 0,
                          out_exists ? &out_st : NULL);
        }
    }
    for (int i = 0; i < c->n_srcs && st == SLM_OK && o->format != SLM_PREP_TEXT; i++)
        if (!c->srcs[i].jsonl)
            st = slm_fail(SLM_E_ARG, "prep: input %s: --format %s reads JSONL files (*.jsonl) only",
                          c->srcs[i].path,
                          o->format == SLM_PREP_CHAT ? "chat" : "prompt-completion");
    return agree(c, st);
}

// The new dataset is built in a hidden temp sibling of --out named after rank 0's pid, and
// swapped in only once complete (slm_prep_run's header comment). Rank 0 creates it and copies
// the tokenizer in. Collective: the temp directory exists before any shard is written.
static slm_status create_work_dir(prep_run *r) {
    prep_ctx *c = &r->c;
    slm_status st = SLM_OK;
    int64_t pid = (int64_t)getpid();
    if (c->world > 1) slm_dist_bcast(&pid, 1, SLM_DTYPE_I64, 0, "prep temp dir");
    c->work_dir = slm_publish_sibling(r->out_path, "prep-tmp", pid);
    r->old_dir = slm_publish_sibling(r->out_path, "prep-old", pid);
    if (c->rank == 0) {
        remove_stale_work_dirs(r->out_path);
        slm_publish p = {.what = "prep: --out", .shown = c->o->out_dir};
        st = slm_publish_begin(c->work_dir, &p);
        r->work_created = st == SLM_OK;
        if (st == SLM_OK) {
            r->tok_dst = slm_path_join(c->work_dir, base_name(c->o->tokenizer_path));
            st = slm_file_copy(c->o->tokenizer_path, r->tok_dst, &r->ds.tokenizer_xxh64);
        }
    }
    return agree(c, st);
}

// Units: global index u over file sources -> rank u % world; stdin units stay on rank 0.
static void assign_units(prep_run *r) {
    prep_ctx *c = &r->c;
    size_t ub = c->o->unit_bytes > 0 ? (size_t)c->o->unit_bytes : UNIT_BYTES;
    int64_t u = 0;
    int cap = 0;
    for (int s = 0; s < c->n_srcs; s++) {
        const source *src = &c->srcs[s];
        for (size_t a = 0; a < src->size; a += ub) {
            bool mine = src->is_stdin ? c->rank == 0 : (u % c->world) == c->rank;
            if (!src->is_stdin) u++;
            if (!mine) continue;
            if (c->n_units == cap) {
                cap = cap ? 2 * cap : 64;
                c->units = slm_xrealloc(c->units, (size_t)cap * sizeof *c->units);
            }
            size_t b = a + ub < src->size ? a + ub : src->size;
            c->units[c->n_units++] = (unit){s, a, b};
        }
    }
    for (int i = 0; i < c->n_units; i++)
        r->total += c->units[i].end - c->units[i].begin;
    // val iff (hash >> 11) < val_fraction * 2^53, exact in doubles.
    c->val_threshold = (uint64_t)(c->o->val_fraction * 9007199254740992.0);
}

// Starts the workers, shows progress until they are done and collects their status.
// Collective (the status agreed).
static slm_status run_workers(prep_run *r) {
    prep_ctx *c = &r->c;
    int W = c->o->workers;
    slm_status st = SLM_OK;
    c->workers = slm_xcalloc((size_t)W, sizeof *c->workers);
    atomic_init(&c->failed, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->bytes_done, 0);
    for (int i = 0; i < W; i++) {
        c->workers[i].ctx = c;
        c->workers[i].id = i;
        if (pthread_create(&c->workers[i].thread, NULL, worker_main, &c->workers[i]) != 0) {
            st = slm_fail(SLM_E_IO, "prep: cannot start worker thread %d", i);
            atomic_store(&c->failed, 1);
            break;
        }
        r->started++;
    }
    slm_progress pg;
    slm_progress_begin(&pg, "prep", 0, (double)r->total);
    pg.on = pg.on && c->o->progress && c->rank == 0;
    while (atomic_load(&c->done) < r->started) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        progress(c, &pg, r->t0, false);
    }
    for (int i = 0; i < r->started; i++)
        pthread_join(c->workers[i].thread, NULL);
    progress(c, &pg, r->t0, true);
    for (int i = 0; i < r->started && st == SLM_OK; i++)
        if (c->workers[i].st) {
            st = c->workers[i].st;
            slm_set_errmsg(c->workers[i].err);
        }
    return agree(c, check_interrupted(st));
}

// This rank's shard records as fixed-size rows of REC_FIELDS into `send`.
static void pack_records(const prep_ctx *c, int64_t *send) {
    int64_t k = 0;
    for (int i = 0; i < c->o->workers; i++)
        for (int j = 0; j < c->workers[i].n_recs; j++) {
            const shard_rec *r = &c->workers[i].recs[j];
            int64_t *q = send + REC_FIELDS * k++;
            q[0] = r->split;
            q[1] = r->worker;
            q[2] = r->index;
            q[3] = r->n_tokens;
            q[4] = r->n_docs;
            q[5] = r->bytes;
            memcpy(&q[6], &r->xxh64, 8);
        }
}

// The manifest's shard lists from every rank's rows (`counts[r]` rows of rank r at recv + r *
// row). Manifest order: split, then rank, worker, index (rows are rank-major; within a rank each
// worker's records are in index order, workers in id order).
static void list_shards(prep_run *r, const int64_t *counts, const int64_t *recv, int64_t row) {
    prep_ctx *c = &r->c;
    int64_t total_recs = 0;
    for (int k = 0; k < c->world; k++)
        total_recs += counts[k];
    slm_split_info *sps[2] = {&r->ds.train, &r->ds.val};
    for (int s = 0; s < 2; s++)
        sps[s]->shards = slm_xcalloc((size_t)total_recs + 1, sizeof(slm_shard_info));
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < c->world; k++)
            for (int64_t i = 0; i < counts[k]; i++) {
                const int64_t *q = recv + k * row + REC_FIELDS * i;
                if (q[0] != s) continue;
                slm_shard_info *si = &sps[s]->shards[sps[s]->n_shards++];
                char *p = shard_path(c, s, q[1], q[2], k, false);
                si->file = slm_xstrdup(base_name(p));
                free(p);
                si->n_tokens = (uint64_t)q[3];
                si->n_docs = (uint64_t)q[4];
                si->bytes = (uint64_t)q[5];
                memcpy(&si->xxh64, &q[6], 8);
                sps[s]->n_tokens += si->n_tokens;
                sps[s]->n_docs += si->n_docs;
            }
}

// Gathers every rank's shard records (counts first, then fixed-size rows) into the manifest's
// shard lists. Collective.
static void gather_shards(prep_run *r) {
    prep_ctx *c = &r->c;
    int64_t n_local = 0, max_n = 0;
    for (int i = 0; i < c->o->workers; i++)
        n_local += c->workers[i].n_recs;
    int64_t *counts = slm_xcalloc((size_t)c->world, sizeof *counts);
    if (c->world > 1)
        slm_dist_allgather(&n_local, counts, 1, SLM_DTYPE_I64, "prep shard counts");
    else
        counts[0] = n_local;
    for (int k = 0; k < c->world; k++)
        max_n = counts[k] > max_n ? counts[k] : max_n;
    int64_t row = (max_n > 0 ? max_n : 1) * REC_FIELDS;
    int64_t *send = slm_xcalloc((size_t)row, sizeof *send);
    int64_t *recv = slm_xcalloc((size_t)(row * c->world), sizeof *recv);
    pack_records(c, send);
    if (c->world > 1)
        slm_dist_allgather(send, recv, row, SLM_DTYPE_I64, "prep shard records");
    else
        memcpy(recv, send, (size_t)row * sizeof *send);
    free(send);
    list_shards(r, counts, recv, row);
    free(recv);
    free(counts);
}

// Documents read and skipped (empty, or encoded to no token), summed over every worker of
// every rank; written = the shards' n_docs. Collective.
static void sum_doc_counts(prep_run *r) {
    int64_t dc[2] = {0, 0};
    for (int i = 0; i < r->c.o->workers; i++) {
        dc[0] += (int64_t)r->c.workers[i].docs_read;
        dc[1] += (int64_t)r->c.workers[i].docs_skipped;
    }
    if (r->c.world > 1)
        slm_dist_allreduce(dc, 2, SLM_DTYPE_I64, SLM_OP_SUM, "prep document counts");
    r->ds.has_doc_counts = true;
    r->ds.docs_read = (uint64_t)dc[0];
    r->ds.docs_skipped = (uint64_t)dc[1];
}

// Every shard is complete on every rank: gives this rank's shards their final names and fsyncs
// the temp directory. Collective.
static slm_status finish_shards(prep_run *r) {
    prep_ctx *c = &r->c;
    slm_status st = SLM_OK;
    for (int i = 0; i < c->o->workers && st == SLM_OK; i++)
        for (int j = 0; j < c->workers[i].n_recs && st == SLM_OK; j++) {
            const shard_rec *s = &c->workers[i].recs[j];
            char *from = shard_path(c, (int)s->split, s->worker, s->index, c->rank, true);
            char *to = shard_path(c, (int)s->split, s->worker, s->index, c->rank, false);
            if (rename(from, to) != 0)
                st = slm_fail(SLM_E_IO, "%s: rename to %s failed: %s", from, to, strerror(errno));
            free(from);
            free(to);
        }
    if (st == SLM_OK) st = slm_fsync_dir(c->work_dir);
    return agree(c, check_interrupted(st));
}

// Rank 0: the manifest's fields other than the shard lists and document counts.
static void describe_dataset(prep_run *r) {
    const slm_prep_opts *o = r->c.o;
    slm_dataset *ds = &r->ds;
    ds->dir = slm_xstrdup(r->c.work_dir);
    ds->tokenizer_file = slm_xstrdup(r->tok_dst);
    ds->tokenizer_type = slm_xstrdup(slm_tokenizer_type_name(r->c.tok));
    ds->vocab_size = (int32_t)r->c.vocab;
    ds->bos_id = slm_tokenizer_bos_id(r->c.tok);
    ds->eos_id = slm_tokenizer_eos_id(r->c.tok);
    ds->token_bytes = r->c.vocab <= 65536u ? 2 : 4;
    ds->seed = o->seed;
    ds->val_fraction = o->val_fraction;
    ds->masked = o->format != SLM_PREP_TEXT;
    if (ds->masked) {
        ds->sample_format = slm_xstrdup(o->format == SLM_PREP_CHAT ? "chat" : "prompt-completion");
        if (r->c.tpl) ds->chat_template = slm_xstrdup(slm_chat_template_name(r->c.tpl));
    }
}

// Rank 0 writes manifest.json into the temp directory and swaps it in as --out. Collective.
static slm_status publish(prep_run *r) {
    slm_status st = SLM_OK;
    if (r->c.rank == 0) {
        describe_dataset(r);
        st = check_interrupted(slm_dataset_write(&r->ds));
        if (st == SLM_OK) {
            st = swap_in(r->c.work_dir, r->out_path, r->old_dir, r->c.o->out_dir);
            r->swapped = st == SLM_OK || !slm_is_dir(r->c.work_dir);
        }
    }
    return agree(&r->c, st);
}

// Rank 0, with --progress: the summary lines.
static void log_summary(const prep_run *r) {
    const slm_dataset *ds = &r->ds;
    if (r->c.rank != 0 || !r->c.o->progress) return;
    double dt = slm_time_s() - r->t0;
    slm_info("prep: %s: train %" PRIu64 " tokens / %" PRIu64 " docs / %d shards, val %" PRIu64
             " tokens / %" PRIu64 " docs / %d shards; %.1f MB local input in %.2f s",
             r->c.o->out_dir, ds->train.n_tokens, ds->train.n_docs, ds->train.n_shards,
             ds->val.n_tokens, ds->val.n_docs, ds->val.n_shards, (double)r->total / 1e6, dt);
    slm_info("prep: documents: %" PRIu64 " read, %" PRIu64 " written, %" PRIu64
             " skipped (empty: no text, or no token)",
             ds->docs_read, ds->train.n_docs + ds->val.n_docs, ds->docs_skipped);
}

// After a failure: removes everything this run wrote: own shards, and on rank 0 the whole temp
// directory (manifest, tokenizer copy, other ranks' shards). --out itself was never touched.
static void remove_output(prep_run *r) {
    prep_ctx *c = &r->c;
    for (int i = 0; c->workers && i < c->o->workers; i++)
        for (int j = 0; j < c->workers[i].n_recs; j++) {
            const shard_rec *s = &c->workers[i].recs[j];
            for (int partial = 0; partial < 2; partial++) {
                char *p = shard_path(c, (int)s->split, s->worker, s->index, c->rank, partial);
                unlink(p);
                free(p);
            }
        }
    if (c->rank == 0 && r->work_created) slm_rmdir_flat_quiet(c->work_dir);
}

static void free_run(prep_run *r) {
    prep_ctx *c = &r->c;
    for (int i = 0; c->workers && i < c->o->workers; i++) {
        slm_ivec_free(&c->workers[i].buf[0]);
        slm_ivec_free(&c->workers[i].buf[1]);
        slm_buf_free(&c->workers[i].fbuf[0]);
        slm_buf_free(&c->workers[i].fbuf[1]);
        free(c->workers[i].recs);
    }
    free(c->workers);
    for (int i = 0; i < c->n_srcs; i++) {
        free(c->srcs[i].path);
        free(c->srcs[i].stdin_data);
    }
    free(c->srcs);
    free(c->units);
    free(r->tok_dst);
    free(r->out_path);
    free(r->old_dir);
    free(c->work_dir);
    slm_dataset_free(&r->ds);
    slm_tokenizer_free(c->tok);
    slm_chat_template_free(c->tpl);
}

slm_status slm_prep_run(const slm_prep_opts *o) {
    slm_status st = check_opts(o);
    if (st) return st;
    prep_run r;
    memset(&r, 0, sizeof r);
    r.c.o = o;
    r.c.rank = slm_dist_rank();
    r.c.world = slm_dist_world();
    r.t0 = slm_time_s();
    // Interruptible from here on (handlers restored at the end).
    slm_stop_reset();
    slm_stop_install(NULL, NULL);
    st = list_inputs(&r, load_tokenizer(&r));
    if (st == SLM_OK) st = create_work_dir(&r);
    if (st == SLM_OK) {
        assign_units(&r);
        st = run_workers(&r);
    }
    if (st == SLM_OK) {
        gather_shards(&r);
        sum_doc_counts(&r);
        if (r.ds.train.n_docs + r.ds.val.n_docs == 0)
            st = slm_fail(SLM_E_ARG,
                          "prep: empty corpus: no non-empty documents in the %d input(s) (%" PRIu64
                          " read, %" PRIu64 " skipped as empty)",
                          o->n_inputs, r.ds.docs_read, r.ds.docs_skipped);
    }
    if (st == SLM_OK) st = finish_shards(&r);
    if (st == SLM_OK) st = publish(&r);
    if (st == SLM_OK) log_summary(&r);
    if (st && !r.swapped) remove_output(&r);
    free_run(&r);
    slm_stop_restore();
    return st;
}
