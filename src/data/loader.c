// The deterministic distributed loader.
//
// The split is one token stream: its shards concatenated in manifest order. Window k is tokens
// [k*T, k*T + T] (T+1 tokens: inputs and shifted targets), k in [0, n_windows) with
// n_windows = (n_tokens - 1) / T. The global window sequence is the infinite concatenation of
// per-epoch permutations perm_0, perm_1, ...; global position g (counted from the start of the
// current epoch) is window perm_{epoch + g / n}(g mod n). Global batch b holds positions
// [b*B, (b+1)*B) and rank r takes [r*B_local, (r+1)*B_local) of it. A batch that crosses the
// end of an epoch continues with the next epoch's permutation, so every window appears exactly
// once per epoch and the state (seed, epoch, pos) is independent of B and of the world size.
//
// perm_e is a keyed bijection: a balanced Feistel network on [0, 4^h) (4^h >= n, h minimal)
// with round keys from (seed, e), restricted to [0, n) by cycle walking (re-encrypt until the
// value falls in range; a bijection on the larger domain restricted this way is a bijection on
// [0, n), Black & Rogaway 2002). Memory O(1), any position O(1) expected.
//
// Instruction data (masked datasets, docs/formats.md "Instruction data"): windows are not
// fixed slices of the stream but runs of whole samples, packed greedily in stream order into
// T+1 tokens and padded (find_samples / pack_samples at open: O(samples) memory); the
// permutation and the state work on those windows the same way.
#include "data/data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEISTEL_ROUNDS 6

struct slm_loader {
    slm_dataset ds;
    const slm_split_info *split;
    slm_map *maps;       // [n_shards] mapped shard files
    const uint8_t **pay; // [n_shards] payload start
    uint32_t *tb;        // [n_shards] token bytes
    int64_t *cum;        // [n_shards + 1] first token index of each shard in the stream
    int n_shards;
    int64_t n_tokens, n_windows;
    int T, B_global, B_local, rank, world;
    int max_T; // the model's positions (0: unknown), for the advice of find_samples
    bool shuffle;
    int half_bits; // Feistel half width h: domain [0, 4^h)
    slm_loader_state st;
    // Instruction data (masked dataset): samples packed into windows (see the header comment).
    bool masked;
    int64_t n_samples;
    int64_t *samp_off;  // [n_samples] first token of each sample in the stream
    int64_t *samp_len;  // [n_samples] tokens (cut to T+1)
    int64_t *win_first; // [n_windows + 1] first sample of each window (windows are runs of samples)
    int32_t pad_id;     // padding token: EOS, or 0 without one
    int64_t last_real;  // real (non-padding) input tokens of the last next / next_val call
};

static void feistel_keys(uint64_t seed, int64_t epoch, uint64_t keys[FEISTEL_ROUNDS]) {
    uint64_t base = slm_mix64(seed ^ 0x5eed5eed5eed5eedULL) ^ slm_mix64((uint64_t)epoch + 1);
    for (int i = 0; i < FEISTEL_ROUNDS; i++)
        keys[i] = slm_mix64(base + (uint64_t)i * 0x9E3779B97F4A7C15ULL);
}

static uint64_t feistel_enc(uint64_t x, int h, const uint64_t keys[FEISTEL_ROUNDS]) {
    uint64_t mask = (1ULL << h) - 1;
    uint64_t L = x >> h, R = x & mask;
    for (int i = 0; i < FEISTEL_ROUNDS; i++) {
        uint64_t F = slm_mix64(R ^ keys[i]) & mask;
        uint64_t nl = R;
        R = L ^ F;
        L = nl;
    }
    return (L << h) | R;
}

// perm_epoch(i) for i in [0, n).
static int64_t permute(const slm_loader *l, int64_t epoch, int64_t i) {
    if (!l->shuffle) return i;
    uint64_t keys[FEISTEL_ROUNDS];
    feistel_keys(l->st.seed, epoch, keys);
    uint64_t y = (uint64_t)i;
    do {
        y = feistel_enc(y, l->half_bits, keys);
    } while (y >= (uint64_t)l->n_windows);
    return (int64_t)y;
}

// Copies `need` tokens of the stream from token t0 into out (int32) and, when flags is not NULL,
// their flags bytes, across shard boundaries when needed.
static void copy_span(const slm_loader *l, int64_t t0, int64_t need, int32_t *out, uint8_t *flags) {
    // Binary search: last shard s with cum[s] <= t0.
    int lo = 0, hi = l->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->cum[mid] <= t0)
            lo = mid;
        else
            hi = mid - 1;
    }
    int s = lo;
    while (need > 0) {
        int64_t off = t0 - l->cum[s];
        int64_t avail = l->cum[s + 1] - t0;
        int64_t n = avail < need ? avail : need;
        if (n > 0) {
            const uint8_t *p = l->pay[s];
            if (l->tb[s] == 2) {
                const uint8_t *q = p + 2 * off;
                for (int64_t j = 0; j < n; j++)
                    out[j] = (int32_t)slm_get_le16(q + 2 * j);
            } else {
                const uint8_t *q = p + 4 * off;
                for (int64_t j = 0; j < n; j++)
                    out[j] = (int32_t)slm_get_le32(q + 4 * j);
            }
            if (flags) {
                const uint8_t *f = p + (size_t)(l->cum[s + 1] - l->cum[s]) * l->tb[s] + off;
                memcpy(flags, f, (size_t)n);
                flags += n;
            }
            out += n;
            t0 += n;
            need -= n;
        }
        s++;
        SLM_ASSERT(need == 0 || s < l->n_shards);
    }
}

// Window k of a plain dataset: tokens [k*T, k*T + T].
static void copy_window(const slm_loader *l, int64_t k, int32_t *out) {
    copy_span(l, k * (int64_t)l->T, (int64_t)l->T + 1, out, NULL);
}

// Window k of a masked dataset: its samples back to back, then padding; target[t] = 1 iff
// token t is predicted (t > 0 inside a sample and the token's target flag set); pos[t] = t's
// position in its sample (the padding run counts as one more sample). target / pos may be NULL.
// Returns the number of sample (non-padding) tokens, 0..T+1.
static int copy_packed(const slm_loader *l, int64_t k, int32_t *out, uint8_t *target,
                       int32_t *pos) {
    int W = l->T + 1, t = 0, used;
    for (int64_t i = l->win_first[k]; i < l->win_first[k + 1]; i++) {
        int64_t n = l->samp_len[i];
        uint8_t *f = target ? target + t : slm_xmalloc((size_t)n);
        copy_span(l, l->samp_off[i], n, out + t, f);
        for (int64_t j = 0; j < n; j++) {
            if (target) target[t + j] = j > 0 && (f[j] & SLM_TOKF_TARGET);
            if (pos) pos[t + j] = (int32_t)j;
        }
        if (!target) free(f);
        t += (int)n;
    }
    used = t;
    for (int j = 0; t < W; t++, j++) {
        out[t] = l->pad_id;
        if (target) target[t] = 0;
        if (pos) pos[t] = j;
    }
    return used;
}

// Greedy packing in stream order: a window takes whole samples while they fit in T+1 tokens
// (one per window without packing); samples longer than T+1 are cut to T+1.
static void pack_samples(slm_loader *l, bool packing) {
    int64_t W = (int64_t)l->T + 1;
    l->win_first = slm_xmalloc((size_t)(l->n_samples + 1) * sizeof *l->win_first);
    int64_t nw = 0, used = 0;
    for (int64_t i = 0; i < l->n_samples; i++) {
        if (i == 0 || !packing || used + l->samp_len[i] > W) {
            l->win_first[nw++] = i;
            used = 0;
        }
        used += l->samp_len[i];
    }
    l->win_first[nw] = l->n_samples;
    l->n_windows = nw;
}

// The samples of a masked split, from the start flags of every shard; lengths cut to T+1.
// A sample whose target tokens all lie beyond its first T+1 tokens adds nothing to the loss
// once cut: warned about (with the window that would keep one of each), and an error when that
// is every sample of the split (training would silently step on a zero loss, eval report none).
static slm_status find_samples(slm_loader *l) {
    int64_t n = 0, cap = 0, cut = 0, blind = 0, need = 0;
    int64_t W = (int64_t)l->T + 1;
    int s_cur = 0;
    for (int s = 0; s < l->n_shards; s++) {
        int64_t nt = l->cum[s + 1] - l->cum[s];
        const uint8_t *f = l->pay[s] + (size_t)nt * l->tb[s];
        for (int64_t j = 0; j < nt; j++) {
            if (!(f[j] & SLM_TOKF_START)) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                l->samp_off = slm_xrealloc(l->samp_off, (size_t)cap * sizeof *l->samp_off);
                l->samp_len = slm_xrealloc(l->samp_len, (size_t)cap * sizeof *l->samp_len);
            }
            l->samp_off[n++] = l->cum[s] + j;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t end = i + 1 < n ? l->samp_off[i + 1] : l->n_tokens;
        l->samp_len[i] = end - l->samp_off[i];
        // Samples never span shards (prep writes whole samples): the shard of sample i.
        while (s_cur + 1 < l->n_shards && l->samp_off[i] >= l->cum[s_cur + 1])
            s_cur++;
        int64_t nt = l->cum[s_cur + 1] - l->cum[s_cur];
        const uint8_t *f = l->pay[s_cur] + (size_t)nt * l->tb[s_cur];
        int64_t j0 = l->samp_off[i] - l->cum[s_cur], first = -1;
        for (int64_t k = 1; k < l->samp_len[i] && first < 0; k++) // token 0 is never predicted
            if (f[j0 + k] & SLM_TOKF_TARGET) first = k;
        if (first >= W) blind++;
        if (first + 1 > need) need = first + 1;
        if (l->samp_len[i] > W) {
            l->samp_len[i] = W;
            cut++;
        }
    }
    l->n_samples = n;
    const char *split = l->split == &l->ds.train ? "train" : "val";
    // The --seq that keeps one target of every sample, unless the model cannot take it: then
    // the samples (their prompts) must be shorter, or the model longer.
    bool too_long = l->max_T > 0 && need - 1 > l->max_T;
    char fix[320];
    if (too_long)
        snprintf(fix, sizeof fix,
                 "keeping one target of every sample would need --seq %" PRId64
                 ", beyond the model's max_position_embeddings %d (the longest --seq it "
                 "takes): shorten those samples' prompts or use a model with more positions",
                 need - 1, l->max_T);
    if (n > 0 && blind == n) {
        if (too_long)
            return slm_fail(SLM_E_ARG,
                            "%s: every one of the %" PRId64 " %s samples has its first target "
                            "(completion / assistant) token beyond its first T+1 = %" PRId64
                            " tokens, so the cut to T+1 leaves nothing to learn or score; %s",
                            l->ds.dir, n, split, W, fix);
        return slm_fail(SLM_E_ARG,
                        "%s: every one of the %" PRId64 " %s samples has its first target "
                        "(completion / assistant) token beyond its first T+1 = %" PRId64
                        " tokens, so the cut to T+1 leaves nothing to learn or score; raise "
                        "--seq to at least %" PRId64 " (keeps one target of every sample)",
                        l->ds.dir, n, split, W, need - 1);
    }
    if (cut && l->rank == 0)
        slm_warn("%s: %" PRId64 " of %" PRId64 " %s samples are longer than T+1 = %" PRId64
                 " tokens and were cut to it",
                 l->ds.dir, cut, n, split, W);
    if (blind && l->rank == 0) {
        if (!too_long)
            snprintf(fix, sizeof fix, "--seq %" PRId64 " keeps one target of every sample",
                     need - 1);
        slm_warn("%s: %" PRId64 " of %" PRId64 " %s samples keep no target token after the cut "
                 "to T+1 = %" PRId64 " tokens (they add nothing to the loss); %s",
                 l->ds.dir, blind, n, split, W, fix);
    }
    return SLM_OK;
}

void slm_loader_free(slm_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->n_shards; i++)
        slm_map_free(&l->maps[i]);
    free(l->maps);
    free(l->pay);
    free(l->tb);
    free(l->cum);
    free(l->samp_off);
    free(l->samp_len);
    free(l->win_first);
    slm_dataset_free(&l->ds);
    free(l);
}

static slm_status open_shards(slm_loader *l) {
    const slm_split_info *sp = l->split;
    int n = sp->n_shards;
    l->n_shards = n;
    l->maps = slm_xcalloc((size_t)n + 1, sizeof *l->maps);
    l->pay = slm_xcalloc((size_t)n + 1, sizeof *l->pay);
    l->tb = slm_xcalloc((size_t)n + 1, sizeof *l->tb);
    l->cum = slm_xcalloc((size_t)n + 1, sizeof *l->cum);
    for (int i = 0; i < n; i++) {
        const slm_shard_info *si = &sp->shards[i];
        slm_shard_header h;
        slm_status st = slm_shard_open_verified(&l->ds, si, &l->maps[i], &h);
        if (st) return st;
        const uint8_t *d = l->maps[i].data;
        l->pay[i] = d + SLM_SHARD_HEADER_BYTES;
        l->tb[i] = h.token_bytes;
        l->cum[i + 1] = l->cum[i] + (int64_t)h.n_tokens;
    }
    l->n_tokens = l->cum[n];
    return SLM_OK;
}

slm_status slm_loader_open(const slm_loader_opts *o, slm_loader **out) {
    *out = NULL;
    if (!o->dir || !o->split) return slm_fail(SLM_E_ARG, "loader: dir and split are required");
    bool train = !strcmp(o->split, "train");
    if (!train && strcmp(o->split, "val") != 0)
        return slm_fail(SLM_E_ARG, "loader: split \"%s\", expected \"train\" or \"val\"", o->split);
    if (o->T < 1) return slm_fail(SLM_E_ARG, "loader: T = %d, expected >= 1", o->T);
    if (o->B_global < 1 || o->world < 1 || o->rank < 0 || o->rank >= o->world ||
        o->B_global % o->world != 0)
        return slm_fail(SLM_E_ARG,
                        "loader: B_global %d, rank %d, world %d: need world | B_global and "
                        "0 <= rank < world",
                        o->B_global, o->rank, o->world);
    slm_loader *l = slm_xcalloc(1, sizeof *l);
    slm_status st = slm_dataset_open(o->dir, &l->ds);
    if (st) goto fail;
    if (!slm_is_file(l->ds.tokenizer_file)) {
        st = slm_fail(SLM_E_IO, "%s: tokenizer file named by the manifest is missing",
                      l->ds.tokenizer_file);
        goto fail;
    }
    uint64_t th = 0;
    if ((st = slm_file_xxh64(l->ds.tokenizer_file, &th))) goto fail;
    if (th != l->ds.tokenizer_xxh64) {
        char a[17], b[17];
        slm_hex64(l->ds.tokenizer_xxh64, a);
        slm_hex64(th, b);
        st = slm_fail(SLM_E_CHECKSUM, "%s: checksum mismatch (manifest xxh64 %s, file %s)",
                      l->ds.tokenizer_file, a, b);
        goto fail;
    }
    l->split = train ? &l->ds.train : &l->ds.val;
    l->max_T = o->max_T;
    l->T = o->T;
    l->B_global = o->B_global;
    l->B_local = o->B_global / o->world;
    l->rank = o->rank;
    l->world = o->world;
    l->shuffle = o->shuffle;
    if ((st = open_shards(l))) goto fail;
    l->masked = l->ds.masked;
    l->pad_id = l->ds.eos_id >= 0 ? l->ds.eos_id : 0;
    if (l->masked) {
        if ((st = find_samples(l))) goto fail;
        pack_samples(l, !o->no_packing);
    } else {
        l->n_windows = l->n_tokens > 0 ? (l->n_tokens - 1) / o->T : 0;
    }
    // A shuffled (training) split must fill one global batch; a sequential (validation) walk
    // only needs one window: its last batch may be ragged.
    if (l->masked && l->n_windows < (o->shuffle ? o->B_global : 1)) {
        st = slm_fail(SLM_E_ARG,
                      "%s: %s split has %" PRId64 " samples = %" PRId64
                      " windows of T+1 = %d tokens (%s), fewer than B_global = %d; reduce "
                      "--batch, or prepare more samples",
                      o->dir, o->split, l->n_samples, l->n_windows, o->T + 1,
                      o->no_packing ? "one sample each" : "packed", o->B_global);
        goto fail;
    }
    if (l->n_windows < (o->shuffle ? o->B_global : 1)) {
        st = slm_fail(SLM_E_ARG,
                      "%s: %s split has %" PRId64 " tokens = %" PRId64
                      " windows of T+1 = %d tokens, fewer than B_global = %d",
                      o->dir, o->split, l->n_tokens, l->n_windows, o->T + 1, o->B_global);
        goto fail;
    }
    l->half_bits = 1;
    while (l->half_bits < 31 && (1ULL << (2 * l->half_bits)) < (uint64_t)l->n_windows)
        l->half_bits++;
    l->st.seed = o->seed;
    *out = l;
    return SLM_OK;
fail:
    slm_loader_free(l);
    return st;
}

// Fills window k; returns its real (non-padding) input tokens: those among its first T.
static int fill_window(const slm_loader *l, int64_t k, int32_t *tokens, uint8_t *target,
                       int32_t *pos) {
    if (l->masked) {
        int used = copy_packed(l, k, tokens, target, pos);
        return used < l->T ? used : l->T;
    }
    copy_window(l, k, tokens);
    for (int t = 0; t <= l->T; t++) {
        if (target) target[t] = t > 0;
        if (pos) pos[t] = t;
    }
    return l->T;
}

void slm_loader_next(slm_loader *l, int32_t *tokens) {
    slm_loader_next_ex(l, tokens, NULL, NULL);
}

void slm_loader_next_ex(slm_loader *l, int32_t *tokens, uint8_t *target, int32_t *pos) {
    int64_t n = l->n_windows;
    int64_t W = (int64_t)l->T + 1;
    int64_t g0 = l->st.pos + (int64_t)l->rank * l->B_local;
    l->last_real = 0;
    for (int i = 0; i < l->B_local; i++) {
        int64_t g = g0 + i;
        int64_t e = l->st.epoch + g / n;
        int64_t k = permute(l, e, g % n);
        l->last_real += fill_window(l, k, tokens + i * W, target ? target + i * W : NULL,
                                    pos ? pos + i * W : NULL);
    }
    l->st.pos += l->B_global;
    while (l->st.pos >= n) {
        l->st.pos -= n;
        l->st.epoch++;
    }
}

int slm_loader_next_val(slm_loader *l, int32_t *tokens) {
    return slm_loader_next_val_ex(l, tokens, NULL, NULL);
}

int slm_loader_next_val_ex(slm_loader *l, int32_t *tokens, uint8_t *target, int32_t *pos) {
    int64_t g0 = l->st.pos + (int64_t)l->rank * l->B_local;
    int64_t W = (int64_t)l->T + 1;
    int cnt = 0;
    l->last_real = 0;
    for (int i = 0; i < l->B_local && g0 + i < l->n_windows; i++) {
        l->last_real += fill_window(l, g0 + i, tokens + i * W, target ? target + i * W : NULL,
                                    pos ? pos + i * W : NULL);
        cnt++;
    }
    if (l->st.pos < l->n_windows) l->st.pos += l->B_global;
    if (l->st.pos > l->n_windows) l->st.pos = l->n_windows;
    return cnt;
}

int64_t slm_loader_last_real_tokens(const slm_loader *l) {
    return l->last_real;
}

bool slm_loader_masked(const slm_loader *l) {
    return l->masked;
}

int64_t slm_loader_n_windows(const slm_loader *l) {
    return l->n_windows;
}

slm_loader_state slm_loader_get_state(const slm_loader *l) {
    return l->st;
}

slm_status slm_loader_set_state(slm_loader *l, slm_loader_state s) {
    // pos == n_windows is the end of a finished validation walk; training positions are < n.
    if (s.epoch < 0 || s.pos < 0 || s.pos > l->n_windows || (s.pos == l->n_windows && l->shuffle))
        return slm_fail(SLM_E_ARG,
                        "loader state epoch %" PRId64 ", pos %" PRId64
                        " is outside the split (%" PRId64 " windows)",
                        s.epoch, s.pos, l->n_windows);
    l->st = s;
    return SLM_OK;
}

const slm_dataset *slm_loader_dataset(const slm_loader *l) {
    return &l->ds;
}
