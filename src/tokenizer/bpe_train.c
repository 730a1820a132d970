// Byte-level BPE training (Sennrich et al. 2016; GPT-2 byte-level variant, Radford et al. 2019).
//
// 1. Counting, shared-nothing: the inputs are memory-mapped and cut into ~64 KiB chunks at points
//    that are pre-token boundaries of the whole-file scan (just after a '\n' that is followed by
//    a printable ASCII character: no GPT-2 regex match spans such a point, and the regex subject
//    is still the whole file so look-aheads see past it). Each OpenMP thread counts the
//    pre-tokens of its chunks in its own hash map; the maps are then summed and the distinct
//    words sorted by bytes, so nothing downstream depends on the thread count.
// 2. Merging, incremental: words are symbol arrays with a count; each pair (left, right) has a
//    count and an occurrence list of the words that contained it when it was created (entries
//    may be stale or repeated; they are re-checked when used). A lazy max-heap holds
//    (count, pair) entries: an entry is pushed whenever a pair's count grows, and a popped entry
//    whose count no longer matches is dropped (or re-pushed with the current, smaller count).
//    Applying a merge touches only the words in the pair's occurrence list, updating the
//    neighbouring pairs' counts by the word's count; there is no recount.
// 3. Tie-break (documented in tokenizer.h): among pairs of equal count, the pair whose left
//    token's bytes are lexicographically smallest (memcmp order, a proper prefix first) wins,
//    then the smallest right token's bytes. A merge whose result already exists as a token
//    (e.g. "ab"+"c" after "a"+"bc") reuses that id, as HF's BpeTrainer does.
// Ids of the result: 0..255 are the single bytes (id = byte value), then merged tokens in the
// order learned, then the special tokens in the order given.
#include "tokenizer/bpe.h"

#include <dirent.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Inputs

typedef struct path_list {
    char **v;
    int n, cap;
} path_list;

static void path_push(path_list *pl, char *p) {
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? 2 * pl->cap : 16;
        pl->v = slm_xrealloc(pl->v, (size_t)pl->cap * sizeof *pl->v);
    }
    pl->v[pl->n++] = p;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Adds a file, or a directory's files recursively in sorted order (dot-files skipped).
static slm_status collect_inputs(const char *path, int depth, path_list *pl) {
    if (slm_is_file(path)) {
        path_push(pl, slm_xstrdup(path));
        return SLM_OK;
    }
    if (!slm_is_dir(path))
        return slm_fail(SLM_E_IO, "%s: no such file or directory (tokenizer training input)", path);
    if (depth > 64) return slm_fail(SLM_E_IO, "%s: directories nested too deeply", path);
    DIR *d = opendir(path);
    if (!d) return slm_fail(SLM_E_IO, "%s: cannot open directory", path);
    path_list names = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') path_push(&names, slm_xstrdup(e->d_name));
    closedir(d);
    if (names.n) qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);
    slm_status st = SLM_OK;
    for (int i = 0; i < names.n; i++) {
        char *p = slm_path_join(path, names.v[i]);
        if (!st) st = collect_inputs(p, depth + 1, pl);
        free(p);
        free(names.v[i]);
    }
    free(names.v);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Word counting

typedef struct wc_entry {
    uint64_t h; // 0: empty
    int64_t off;
    int64_t count;
    uint32_t len;
} wc_entry;

typedef struct word_counter {
    wc_entry *slot;
    size_t cap, n;
    slm_buf bytes; // word bytes, concatenated
} word_counter;

static uint64_t word_hash(const uint8_t *p, size_t n) {
    return slm_xxh64(p, n, 0) | 1;
}

static void wc_grow(word_counter *wc) {
    size_t nc = wc->cap ? 2 * wc->cap : 1 << 14;
    wc_entry *ns = slm_xcalloc(nc, sizeof *ns);
    for (size_t i = 0; i < wc->cap; i++) {
        if (!wc->slot[i].h) continue;
        size_t j = wc->slot[i].h & (nc - 1);
        while (ns[j].h)
            j = (j + 1) & (nc - 1);
        ns[j] = wc->slot[i];
    }
    free(wc->slot);
    wc->slot = ns;
    wc->cap = nc;
}

static void wc_add(word_counter *wc, const uint8_t *p, size_t n, uint64_t h, int64_t count) {
    if (2 * (wc->n + 1) > wc->cap) wc_grow(wc);
    size_t mask = wc->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        wc_entry *e = &wc->slot[i];
        if (!e->h) {
            e->h = h;
            e->off = (int64_t)wc->bytes.len;
            e->len = (uint32_t)n;
            e->count = count;
            slm_buf_append(&wc->bytes, p, n);
            wc->n++;
            return;
        }
        if (e->h == h && e->len == n && !memcmp(wc->bytes.data + e->off, p, n)) {
            e->count += count;
            return;
        }
    }
}

static void wc_free(word_counter *wc) {
    free(wc->slot);
    slm_buf_free(&wc->bytes);
    memset(wc, 0, sizeof *wc);
}

static void count_piece(void *ctx, const uint8_t *p, size_t n) {
    word_counter *wc = ctx;
    // A pre-token longer than 4 GiB (one whitespace run?) is counted in pieces.
    const size_t max_len = (size_t)1 << 31;
    for (size_t off = 0; off < n; off += max_len) {
        size_t k = n - off < max_len ? n - off : max_len;
        wc_add(wc, p + off, k, word_hash(p + off, k), 1);
    }
}

typedef struct chunk {
    int file;
    size_t start, stop;
} chunk;

// Cuts [0, len) into chunks of about `target` bytes at pre-token boundaries (see the top).
static void make_chunks(int file, const uint8_t *t, size_t len, size_t target, chunk **v, size_t *n,
                        size_t *cap) {
    size_t start = 0;
    while (start < len) {
        size_t stop = len;
        for (size_t i = start + target; i < len; i++)
            if (t[i - 1] == '\n' && t[i] > 0x20 && t[i] < 0x7f) {
                stop = i;
                break;
            }
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *v = slm_xrealloc(*v, *cap * sizeof **v);
        }
        (*v)[(*n)++] = (chunk){file, start, stop};
        start = stop;
    }
}

// ---------------------------------------------------------------------------------------------
// Merge state

typedef struct pair {
    uint64_t key; // left << 32 | right
    int64_t count;
    int32_t *occ; // words that contained the pair (may be stale / repeated)
    int32_t occ_n, occ_cap;
    int32_t stamp; // merge step that last grew the count
} pair;

typedef struct heap_entry {
    int64_t count;
    int32_t pair;
} heap_entry;

typedef struct trainer {
    // words
    int32_t n_words;
    int32_t *sym;  // all words' symbols
    int64_t *woff; // [n_words] offset into sym
    int32_t *wlen; // [n_words] current length
    int64_t *wcnt; // [n_words]
    int32_t *wstamp;
    // tokens
    int32_t n_tokens, tok_cap;
    int64_t *tok_off; // into tok_bytes
    int32_t *tok_len;
    slm_buf tok_bytes;
    int32_t *tmap; // token bytes -> id (open addressing, -1 empty)
    size_t tcap;
    // pairs
    pair *pairs;
    int32_t n_pairs, pairs_cap;
    uint64_t *pkey; // hash slots: key (UINT64_MAX empty)
    int32_t *pidx;
    size_t pcap;
    // heap
    heap_entry *heap;
    size_t nh, heap_cap;
    // merge step bookkeeping
    int32_t step;
    int32_t *touched;
    int32_t n_touched, touched_cap;
} trainer;

static const uint8_t *tok_data(const trainer *T, int32_t id) {
    return (const uint8_t *)T->tok_bytes.data + T->tok_off[id];
}

static int32_t tmap_get(const trainer *T, const uint8_t *p, size_t n) {
    size_t mask = T->tcap - 1;
    for (size_t i = word_hash(p, n) & mask;; i = (i + 1) & mask) {
        int32_t id = T->tmap[i];
        if (id < 0) return -1;
        if ((size_t)T->tok_len[id] == n && !memcmp(tok_data(T, id), p, n)) return id;
    }
}

static void tmap_put(trainer *T, int32_t id) {
    size_t mask = T->tcap - 1;
    size_t i = word_hash(tok_data(T, id), (size_t)T->tok_len[id]) & mask;
    while (T->tmap[i] >= 0)
        i = (i + 1) & mask;
    T->tmap[i] = id;
}

static int32_t add_token(trainer *T, const uint8_t *p, size_t n) {
    if (T->n_tokens == T->tok_cap) {
        T->tok_cap *= 2;
        T->tok_off = slm_xrealloc(T->tok_off, (size_t)T->tok_cap * sizeof *T->tok_off);
        T->tok_len = slm_xrealloc(T->tok_len, (size_t)T->tok_cap * sizeof *T->tok_len);
    }
    int32_t id = T->n_tokens++;
    T->tok_off[id] = (int64_t)T->tok_bytes.len;
    T->tok_len[id] = (int32_t)n;
    slm_buf_append(&T->tok_bytes, p, n);
    if (2 * (size_t)T->n_tokens > T->tcap) { // rehash
        T->tcap *= 2;
        T->tmap = slm_xrealloc(T->tmap, T->tcap * sizeof *T->tmap);
        memset(T->tmap, 0xff, T->tcap * sizeof *T->tmap);
        for (int32_t k = 0; k < T->n_tokens; k++)
            tmap_put(T, k);
    } else {
        tmap_put(T, id);
    }
    return id;
}

static int cmp_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    if (c) return c;
    return na < nb ? -1 : na > nb ? 1 : 0;
}

// True if entry x should be merged before entry y (higher count, then the tie-break).
static bool heap_before(const trainer *T, heap_entry x, heap_entry y) {
    if (x.count != y.count) return x.count > y.count;
    uint64_t kx = T->pairs[x.pair].key, ky = T->pairs[y.pair].key;
    if (kx == ky) return false;
    int32_t lx = (int32_t)(kx >> 32), ly = (int32_t)(ky >> 32);
    int c =
        cmp_bytes(tok_data(T, lx), (size_t)T->tok_len[lx], tok_data(T, ly), (size_t)T->tok_len[ly]);
    if (c) return c < 0;
    int32_t rx = (int32_t)(kx & 0xffffffffu), ry = (int32_t)(ky & 0xffffffffu);
    return cmp_bytes(tok_data(T, rx), (size_t)T->tok_len[rx], tok_data(T, ry),
                     (size_t)T->tok_len[ry]) < 0;
}

static void heap_push(trainer *T, heap_entry e) {
    if (T->nh == T->heap_cap) {
        T->heap_cap = T->heap_cap ? 2 * T->heap_cap : 1024;
        T->heap = slm_xrealloc(T->heap, T->heap_cap * sizeof *T->heap);
    }
    size_t i = T->nh++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(T, e, T->heap[p])) break;
        T->heap[i] = T->heap[p];
        i = p;
    }
    T->heap[i] = e;
}

static heap_entry heap_pop(trainer *T) {
    heap_entry top = T->heap[0], v = T->heap[--T->nh];
    size_t i = 0, n = T->nh;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(T, T->heap[c + 1], T->heap[c])) c++;
        if (!heap_before(T, T->heap[c], v)) break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (n) T->heap[i] = v;
    return top;
}

static void pairs_rehash(trainer *T) {
    T->pcap *= 2;
    T->pkey = slm_xrealloc(T->pkey, T->pcap * sizeof *T->pkey);
    T->pidx = slm_xrealloc(T->pidx, T->pcap * sizeof *T->pidx);
    memset(T->pkey, 0xff, T->pcap * sizeof *T->pkey);
    size_t mask = T->pcap - 1;
    for (int32_t k = 0; k < T->n_pairs; k++) {
        size_t i = slm_mix64(T->pairs[k].key) & mask;
        while (T->pkey[i] != UINT64_MAX)
            i = (i + 1) & mask;
        T->pkey[i] = T->pairs[k].key;
        T->pidx[i] = k;
    }
}

// Index of pair (a, b), created with count 0 when `create` (else -1 when absent).
static int32_t pair_find(trainer *T, int32_t a, int32_t b, bool create) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = T->pcap - 1, i = slm_mix64(key) & mask;
    for (; T->pkey[i] != UINT64_MAX; i = (i + 1) & mask)
        if (T->pkey[i] == key) return T->pidx[i];
    if (!create) return -1;
    if (T->n_pairs == T->pairs_cap) {
        T->pairs_cap = T->pairs_cap ? 2 * T->pairs_cap : 1 << 14;
        T->pairs = slm_xrealloc(T->pairs, (size_t)T->pairs_cap * sizeof *T->pairs);
    }
    int32_t k = T->n_pairs++;
    T->pairs[k] = (pair){.key = key, .stamp = -1};
    T->pkey[i] = key;
    T->pidx[i] = k;
    if (2 * (size_t)T->n_pairs > T->pcap) pairs_rehash(T);
    return k;
}

// count(a, b) += delta for word w; records w as an occurrence and the pair as grown.
static void pair_inc(trainer *T, int32_t a, int32_t b, int64_t delta, int32_t w) {
    int32_t k = pair_find(T, a, b, true);
    pair *p = &T->pairs[k];
    p->count += delta;
    if (p->occ_n == 0 || p->occ[p->occ_n - 1] != w) {
        if (p->occ_n == p->occ_cap) {
            p->occ_cap = p->occ_cap ? 2 * p->occ_cap : 4;
            p->occ = slm_xrealloc(p->occ, (size_t)p->occ_cap * sizeof *p->occ);
        }
        p->occ[p->occ_n++] = w;
    }
    if (p->stamp != T->step) {
        p->stamp = T->step;
        if (T->n_touched == T->touched_cap) {
            T->touched_cap = T->touched_cap ? 2 * T->touched_cap : 1024;
            T->touched = slm_xrealloc(T->touched, (size_t)T->touched_cap * sizeof *T->touched);
        }
        T->touched[T->n_touched++] = k;
    }
}

static void pair_dec(trainer *T, int32_t a, int32_t b, int64_t delta) {
    int32_t k = pair_find(T, a, b, false);
    SLM_ASSERT(k >= 0);
    T->pairs[k].count -= delta;
}

// Replaces every non-overlapping (a, b), left to right, in word w by `nw`, updating the counts
// of the pairs around each replacement (see the top of the file).
static void merge_in_word(trainer *T, int32_t w, int32_t a, int32_t b, int32_t nw) {
    int32_t *s = T->sym + T->woff[w];
    int32_t n = T->wlen[w], j = 0;
    int64_t c = T->wcnt[w];
    for (int32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (j > 0) {
                pair_dec(T, s[j - 1], a, c);
                pair_inc(T, s[j - 1], nw, c, w);
            }
            if (i + 2 < n) {
                pair_dec(T, b, s[i + 2], c);
                pair_inc(T, nw, s[i + 2], c, w);
            }
            pair_dec(T, a, b, c);
            s[j++] = nw;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    T->wlen[w] = j;
}

static void trainer_free(trainer *T) {
    free(T->sym);
    free(T->woff);
    free(T->wlen);
    free(T->wcnt);
    free(T->wstamp);
    free(T->tok_off);
    free(T->tok_len);
    slm_buf_free(&T->tok_bytes);
    free(T->tmap);
    for (int32_t k = 0; k < T->n_pairs; k++)
        free(T->pairs[k].occ);
    free(T->pairs);
    free(T->pkey);
    free(T->pidx);
    free(T->heap);
    free(T->touched);
}

// Sort order of the distinct words: by bytes (`arg` is the counter's byte arena).
static int cmp_wc(const void *x, const void *y, void *arg) {
    const wc_entry *a = x, *b = y;
    const uint8_t *bytes = arg;
    return cmp_bytes(bytes + a->off, a->len, bytes + b->off, b->len);
}

static slm_status count_words(const slm_bpe_train_opts *o, word_counter *total, double *mb) {
    path_list files = {0};
    slm_map *maps = NULL;
    chunk *chunks = NULL;
    size_t n_chunks = 0, chunks_cap = 0;
    word_counter *wcs = NULL;
    pcre2_code *re = NULL;
    slm_status st = SLM_OK;
    for (int i = 0; i < o->n_inputs && !st; i++)
        st = collect_inputs(o->inputs[i], 0, &files);
    if (st) goto out;
    maps = slm_xcalloc((size_t)files.n + 1, sizeof *maps);
    size_t bytes = 0;
    for (int f = 0; f < files.n; f++) {
        if ((st = slm_map_file(files.v[f], &maps[f]))) goto out;
        bytes += maps[f].len;
        make_chunks(f, maps[f].data, maps[f].len, (size_t)1 << 16, &chunks, &n_chunks, &chunks_cap);
    }
    *mb = (double)bytes / 1e6;
    char err[256];
    re = slm_bpe_compile_regex(slm_bpe_gpt2_regex, err);
    if (!re) slm_fatal("tokenizer: GPT-2 regex does not compile: %s", err);
    int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
    wcs = slm_xcalloc((size_t)nt, sizeof *wcs);
#pragma omp parallel num_threads(nt)
    {
        word_counter *wc = &wcs[omp_get_thread_num()];
        bpe_matcher mt;
        slm_bpe_matcher_init(&mt);
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < n_chunks; c++) {
            const slm_map *mp = &maps[chunks[c].file];
            slm_bpe_pretokenize(re, &mt, mp->data, mp->len, chunks[c].start, chunks[c].stop,
                                count_piece, wc);
        }
        slm_bpe_matcher_free(&mt);
    }
    // Sum the per-thread maps (order does not matter: counts add).
    for (int k = 0; k < nt; k++) {
        for (size_t i = 0; i < wcs[k].cap; i++) {
            const wc_entry *e = &wcs[k].slot[i];
            if (e->h)
                wc_add(total, (const uint8_t *)wcs[k].bytes.data + e->off, e->len, e->h, e->count);
        }
        wc_free(&wcs[k]);
    }
out:
    if (re) pcre2_code_free(re);
    free(wcs);
    for (int f = 0; f < files.n; f++) {
        if (maps) slm_map_free(&maps[f]);
        free(files.v[f]);
    }
    free(files.v);
    free(maps);
    free(chunks);
    return st;
}

static bool valid_utf8(const char *s) {
    const uint8_t *p = (const uint8_t *)s;
    while (*p) {
        int n = p[0] < 0x80             ? 0
                : (p[0] & 0xE0) == 0xC0 ? 1
                : (p[0] & 0xF0) == 0xE0 ? 2
                : (p[0] & 0xF8) == 0xF0 ? 3
                                        : -1;
        if (n < 0 || (n == 1 && p[0] < 0xC2)) return false;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xC0) != 0x80) return false;
    }
    return true;
}

// Builds the model as tokenizer.json text: ids 0..n_tokens-1 are the learned tokens, then the
// specials.
static void build_json(const trainer *T, const int32_t *ml, const int32_t *mr, int32_t n_merges,
                       const char *const *specials, int n_specials, slm_buf *out) {
    bpe_model *m = slm_xcalloc(1, sizeof *m);
    m->n_ids = T->n_tokens + n_specials;
    m->piece = slm_xcalloc((size_t)m->n_ids, sizeof *m->piece);
    m->flags = slm_xcalloc((size_t)m->n_ids, 1);
    slm_buf sym = {0};
    for (int32_t id = 0; id < T->n_tokens; id++) {
        sym.len = 0;
        slm_bpe_bytes_to_symbols(tok_data(T, id), (size_t)T->tok_len[id], &sym);
        m->piece[id] = slm_xstrdup(sym.data);
        m->flags[id] = BPE_IN_VOCAB;
    }
    slm_buf_free(&sym);
    m->added_ids = slm_xcalloc((size_t)n_specials + 1, sizeof *m->added_ids);
    for (int i = 0; i < n_specials; i++) {
        int32_t id = T->n_tokens + i;
        m->piece[id] = slm_xstrdup(specials[i]);
        m->flags[id] = BPE_ADDED | BPE_SPECIAL;
        m->added_ids[m->n_added++] = id;
    }
    m->n_merges = n_merges;
    m->merge_left = slm_xmalloc(((size_t)n_merges + 1) * sizeof(int32_t));
    m->merge_right = slm_xmalloc(((size_t)n_merges + 1) * sizeof(int32_t));
    if (n_merges) {
        memcpy(m->merge_left, ml, (size_t)n_merges * sizeof(int32_t));
        memcpy(m->merge_right, mr, (size_t)n_merges * sizeof(int32_t));
    }
    m->pre_form = BPE_PRE_BYTELEVEL;
    slm_bpe_write_json(m, out);
    slm_bpe_free(m);
}

// The special tokens: non-empty UTF-8, no two alike; the vocabulary size leaves room for them.
static slm_status check_train_opts(const slm_bpe_train_opts *o, const char *const *specials,
                                   int n_specials) {
    if (o->n_inputs <= 0) return slm_fail(SLM_E_ARG, "tokenizer train: no input files given");
    for (int i = 0; i < n_specials; i++) {
        if (!specials[i][0] || !valid_utf8(specials[i]))
            return slm_fail(SLM_E_ARG, "tokenizer train: special token %d is empty or not UTF-8",
                            i);
        for (int j = 0; j < i; j++)
            if (!strcmp(specials[i], specials[j]))
                return slm_fail(SLM_E_ARG, "tokenizer train: special token \"%s\" given twice",
                                specials[i]);
    }
    if (o->vocab_size < 256 + n_specials || o->vocab_size > (1 << 22))
        return slm_fail(SLM_E_ARG,
                        "tokenizer train: vocab size %d must be in [256 + %d specials, 4194304]",
                        o->vocab_size, n_specials);
    return SLM_OK;
}

// The distinct words of `total` in cmp_wc order (*n of them; caller frees).
static wc_entry *sorted_words(const word_counter *total, size_t *n) {
    wc_entry *ents = slm_xmalloc(total->n * sizeof *ents);
    *n = 0;
    for (size_t i = 0; i < total->cap; i++)
        if (total->slot[i].h) ents[(*n)++] = total->slot[i];
    qsort_r(ents, *n, sizeof *ents, cmp_wc, total->bytes.data);
    return ents;
}

// The trainer's words: each word's bytes as symbols 0..255, with its count.
static void init_words(trainer *T, const wc_entry *ents, size_t n, const word_counter *total) {
    T->n_words = (int32_t)n;
    T->sym = slm_xmalloc((total->bytes.len + 1) * sizeof *T->sym);
    T->woff = slm_xmalloc(n * sizeof *T->woff);
    T->wlen = slm_xmalloc(n * sizeof *T->wlen);
    T->wcnt = slm_xmalloc(n * sizeof *T->wcnt);
    T->wstamp = slm_xmalloc(n * sizeof *T->wstamp);
    int64_t off = 0;
    for (size_t w = 0; w < n; w++) {
        const uint8_t *p = (const uint8_t *)total->bytes.data + ents[w].off;
        T->woff[w] = off;
        T->wlen[w] = (int32_t)ents[w].len;
        T->wcnt[w] = ents[w].count;
        T->wstamp[w] = -1;
        for (uint32_t i = 0; i < ents[w].len; i++)
            T->sym[off + i] = p[i];
        off += ents[w].len;
    }
}

// The 256 byte tokens, the counts of every adjacent pair and the heap over them.
static void init_pairs(trainer *T) {
    T->tok_cap = 1024;
    T->tok_off = slm_xmalloc((size_t)T->tok_cap * sizeof *T->tok_off);
    T->tok_len = slm_xmalloc((size_t)T->tok_cap * sizeof *T->tok_len);
    T->tcap = 2048;
    T->tmap = slm_xmalloc(T->tcap * sizeof *T->tmap);
    memset(T->tmap, 0xff, T->tcap * sizeof *T->tmap);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        (void)add_token(T, &c, 1);
    }
    T->pcap = 1 << 16;
    T->pkey = slm_xmalloc(T->pcap * sizeof *T->pkey);
    T->pidx = slm_xmalloc(T->pcap * sizeof *T->pidx);
    memset(T->pkey, 0xff, T->pcap * sizeof *T->pkey);
    for (int32_t w = 0; w < T->n_words; w++) {
        const int32_t *s = T->sym + T->woff[w];
        for (int32_t i = 0; i + 1 < T->wlen[w]; i++)
            pair_inc(T, s[i], s[i + 1], T->wcnt[w], w);
    }
    for (int32_t k = 0; k < T->n_touched; k++)
        heap_push(T, (heap_entry){T->pairs[T->touched[k]].count, T->touched[k]});
    T->n_touched = 0;
}

// The most frequent pair ({0, -1} when none is left); stale heap entries are dropped or
// pushed back with their current count.
static heap_entry pop_best(trainer *T) {
    while (T->nh) {
        heap_entry e = heap_pop(T);
        int64_t cur = T->pairs[e.pair].count;
        if (cur <= 0) continue;
        if (e.count != cur) { // stale: a smaller current count goes back in
            if (e.count > cur) heap_push(T, (heap_entry){cur, e.pair});
            continue;
        }
        return e;
    }
    return (heap_entry){0, -1};
}

// The merges learned so far, in order: merge i joins tokens left[i] and right[i].
typedef struct {
    int32_t *left, *right;
    int32_t n, cap;
} merge_list;

// Merges the pair `best` everywhere: a new token (or the existing one with the same bytes), the
// merge recorded, every word that holds the pair rewritten and the touched pairs re-queued.
static void apply_merge(trainer *T, heap_entry best, merge_list *M, slm_buf *cat) {
    T->step++;
    uint64_t key = T->pairs[best.pair].key;
    int32_t a = (int32_t)(key >> 32), b = (int32_t)(key & 0xffffffffu);
    cat->len = 0;
    slm_buf_append(cat, tok_data(T, a), (size_t)T->tok_len[a]);
    slm_buf_append(cat, tok_data(T, b), (size_t)T->tok_len[b]);
    int32_t nw = tmap_get(T, (const uint8_t *)cat->data, cat->len);
    if (nw < 0) nw = add_token(T, (const uint8_t *)cat->data, cat->len);
    if (M->n == M->cap) {
        M->cap = M->cap ? 2 * M->cap : 1024;
        M->left = slm_xrealloc(M->left, (size_t)M->cap * sizeof *M->left);
        M->right = slm_xrealloc(M->right, (size_t)M->cap * sizeof *M->right);
    }
    M->left[M->n] = a;
    M->right[M->n++] = b;
    // Take the occurrence list: the merge only adds pairs that contain `nw`, never (a, b).
    pair *p = &T->pairs[best.pair];
    int32_t *occ = p->occ, occ_n = p->occ_n;
    p->occ = NULL;
    p->occ_n = p->occ_cap = 0;
    for (int32_t k = 0; k < occ_n; k++) {
        int32_t w = occ[k];
        if (T->wstamp[w] == T->step) continue;
        T->wstamp[w] = T->step;
        merge_in_word(T, w, a, b, nw);
    }
    free(occ);
    SLM_ASSERT(T->pairs[best.pair].count == 0); // every occurrence was in the list
    for (int32_t k = 0; k < T->n_touched; k++) {
        int64_t c = T->pairs[T->touched[k]].count;
        if (c > 0) heap_push(T, (heap_entry){c, T->touched[k]});
    }
    T->n_touched = 0;
}

// Merges the most frequent pair until the vocabulary holds `target` tokens or no pair is left.
static void merge_until(trainer *T, int32_t target, bool verbose, merge_list *M) {
    const int32_t n_first = T->n_tokens; // merges to do: target - n_first
    slm_buf cat = {0};
    slm_progress pg;
    slm_progress_begin(&pg, "tokenizer train", 0, target - n_first);
    while (T->n_tokens < target) {
        heap_entry best = pop_best(T);
        if (best.pair < 0) break; // no pair left: the corpus is fully merged
        apply_merge(T, best, M, &cat);
        if (verbose && slm_progress_enabled())
            slm_progress_update(&pg, M->n, "%d of %d merges, vocab %d", M->n, target - n_first,
                                T->n_tokens);
        else if (verbose && M->n % 2000 == 0)
            slm_info("tokenizer train: %d merges, vocab %d (last count %lld)", M->n, T->n_tokens,
                     (long long)best.count);
    }
    slm_progress_end(&pg, M->n, "%d merges, vocab %d", M->n, T->n_tokens);
    slm_buf_free(&cat);
}

// The trained tokenizer, loaded from the tokenizer.json text build_json writes (*out owned).
static slm_status load_trained(const trainer *T, const merge_list *M, const char *const *specials,
                               int n_specials, slm_tokenizer **out) {
    slm_buf json = {0};
    build_json(T, M->left, M->right, M->n, specials, n_specials, &json);
    slm_tokenizer *t = slm_xcalloc(1, sizeof *t);
    t->bos_id = t->eos_id = t->unk_id = t->pad_id = -1;
    slm_status st = slm_bpe_load_json("(trained tokenizer.json)", json.data, json.len, t);
    if (st) {
        free(t);
        t = NULL;
    } else {
        t->hash = slm_xxh64(json.data, json.len, 0);
    }
    slm_buf_free(&json);
    *out = t;
    return st;
}

slm_status slm_bpe_train(const slm_bpe_train_opts *o, slm_tokenizer **out) {
    *out = NULL;
    slm_bpe_init_bytemap();
    // specials == NULL means the default set; a non-NULL array with n_specials == 0 means none.
    static const char *const default_specials[] = {"<|bos|>", "<|eos|>", "<|pad|>"};
    const char *const *specials = o->specials ? o->specials : default_specials;
    int n_specials = o->specials ? o->n_specials : 3;
    slm_status st = check_train_opts(o, specials, n_specials);
    if (st) return st;
    double t0 = slm_time_s(), mb = 0;
    word_counter total = {0};
    trainer T = {0};
    merge_list M = {0};
    slm_tokenizer *t = NULL;
    st = count_words(o, &total, &mb);
    if (st == SLM_OK && total.n == 0)
        st = slm_fail(SLM_E_FORMAT, "tokenizer train: the inputs contain no text");
    if (st == SLM_OK && (total.n > INT32_MAX / 2 || total.bytes.len > (size_t)INT32_MAX * 4))
        st = slm_fail(SLM_E_ARG, "tokenizer train: too many distinct words (%zu)", total.n);
    if (st) goto out;
    size_t n = 0;
    wc_entry *ents = sorted_words(&total, &n);
    double t_count = slm_time_s();
    if (o->verbose)
        slm_info("tokenizer train: %.1f MB, %zu distinct pre-tokens, counted in %.2f s", mb, n,
                 t_count - t0);
    init_words(&T, ents, n, &total);
    free(ents);
    wc_free(&total);
    init_pairs(&T);
    const int32_t target = o->vocab_size - n_specials;
    merge_until(&T, target, o->verbose, &M);
    if (T.n_tokens < target)
        slm_warn("tokenizer train: the corpus has no pair left to merge after %d merges: the "
                 "tokenizer has %d ids, fewer than the %d asked for (a larger corpus gives more)",
                 M.n, T.n_tokens + n_specials, o->vocab_size);
    st = load_trained(&T, &M, specials, n_specials, &t);
    if (st) goto out;
    if (o->verbose)
        slm_info("tokenizer train: %d merges, %d ids (%d specials) in %.2f s (merging %.2f s)", M.n,
                 t->vocab_size, n_specials, slm_time_s() - t0, slm_time_s() - t_count);
    *out = t;
out:
    wc_free(&total);
    trainer_free(&T);
    free(M.left);
    free(M.right);
    return st;
}
