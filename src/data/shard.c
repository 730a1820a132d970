// Token shard files: a fixed 64-byte header followed by little-endian tokens.
//
// Header layout (all integers little-endian; docs/formats.md "Token shards"):
//   0  char[8] magic "SLMSHRD1"      8  u32 version        12 u32 token_bytes (2 or 4)
//   16 u64 n_tokens                  24 u64 n_docs          32 u64 payload XXH64 (seed 0)
//   40 u32 vocab_size                44 20 reserved bytes, all zero (version 1)
// Version 2 (instruction data): 44 u32 flags = 1, 48 16 reserved zero bytes; after the tokens,
// one SLM_TOKF_* byte per token; the payload hash covers tokens and flags.
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Version 1 (flags NULL) or 2 (flags [n] appended after the tokens, header flags bit 0).
static slm_status shard_write(const char *path, const int32_t *tokens, const uint8_t *flags,
                              uint64_t n, uint64_t n_docs, uint32_t vocab_size) {
    if (vocab_size == 0) return slm_fail(SLM_E_ARG, "%s: vocab_size must be > 0", path);
    uint32_t tb = vocab_size <= 65536u ? 2u : 4u;
    if (n > (SIZE_MAX - SLM_SHARD_HEADER_BYTES) / (tb + 1))
        return slm_fail(SLM_E_ARG, "%s: %" PRIu64 " tokens do not fit in memory", path, n);
    if (flags) {
        uint64_t starts = 0;
        for (uint64_t i = 0; i < n; i++) {
            if ((flags[i] & ~(SLM_TOKF_TARGET | SLM_TOKF_START)) ||
                (i == 0 && !(flags[i] & SLM_TOKF_START)))
                return slm_fail(SLM_E_ARG, "%s: token %" PRIu64 " has flags 0x%02x", path, i,
                                flags[i]);
            starts += (flags[i] & SLM_TOKF_START) != 0;
        }
        if (starts != n_docs)
            return slm_fail(SLM_E_ARG, "%s: %" PRIu64 " sample starts, expected n_docs %" PRIu64,
                            path, starts, n_docs);
    }
    size_t per = tb + (flags ? 1u : 0u);
    size_t bytes = SLM_SHARD_HEADER_BYTES + (size_t)n * per;
    uint8_t *buf = slm_xcalloc(1, bytes);
    uint8_t *pay = buf + SLM_SHARD_HEADER_BYTES;
    for (uint64_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || (uint32_t)t >= vocab_size) {
            free(buf);
            return slm_fail(SLM_E_ARG,
                            "%s: token %" PRIu64 " is %" PRId32 ", outside [0, vocab_size %" PRIu32
                            ")",
                            path, i, t, vocab_size);
        }
        if (tb == 2) {
            slm_put_le16(pay + 2 * i, (uint16_t)t);
        } else {
            slm_put_le32(pay + 4 * i, (uint32_t)t);
        }
    }
    if (flags) memcpy(pay + (size_t)n * tb, flags, (size_t)n);
    memcpy(buf, SLM_SHARD_MAGIC, 8);
    slm_put_le32(buf + 8, flags ? SLM_SHARD_VERSION_MASKED : SLM_SHARD_VERSION);
    slm_put_le32(buf + 12, tb);
    slm_put_le64(buf + 16, n);
    slm_put_le64(buf + 24, n_docs);
    slm_put_le64(buf + 32, slm_xxh64(pay, (size_t)n * per, 0));
    slm_put_le32(buf + 40, vocab_size);
    if (flags) slm_put_le32(buf + 44, 1u); // header flags: bit 0 = per-token flags present
    slm_status st = slm_file_write_atomic(path, buf, bytes);
    free(buf);
    return st;
}

slm_status slm_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint64_t n_docs,
                           uint32_t vocab_size) {
    return shard_write(path, tokens, NULL, n, n_docs, vocab_size);
}

slm_status slm_shard_write_masked(const char *path, const int32_t *tokens, const uint8_t *flags,
                                  uint64_t n, uint64_t n_docs, uint32_t vocab_size) {
    if (!flags) return slm_fail(SLM_E_ARG, "%s: masked shard without flags", path);
    return shard_write(path, tokens, flags, n, n_docs, vocab_size);
}

slm_status slm_shard_parse_header(const char *path, const uint8_t *data, size_t len,
                                  slm_shard_header *h) {
    memset(h, 0, sizeof *h);
    if (len < SLM_SHARD_HEADER_BYTES)
        return slm_fail(SLM_E_FORMAT,
                        "%s: truncated shard: %zu bytes, shorter than the %d-byte header", path,
                        len, SLM_SHARD_HEADER_BYTES);
    if (memcmp(data, SLM_SHARD_MAGIC, 8) != 0)
        return slm_fail(SLM_E_FORMAT, "%s: not a shardlm token shard (magic is not \"%s\")", path,
                        SLM_SHARD_MAGIC);
    h->version = slm_get_le32(data + 8);
    if (h->version != SLM_SHARD_VERSION && h->version != SLM_SHARD_VERSION_MASKED)
        return slm_fail(SLM_E_FORMAT, "%s: shard format version %" PRIu32 ", expected %d or %d",
                        path, h->version, SLM_SHARD_VERSION, SLM_SHARD_VERSION_MASKED);
    h->token_bytes = slm_get_le32(data + 12);
    if (h->token_bytes != 2 && h->token_bytes != 4)
        return slm_fail(SLM_E_FORMAT, "%s: token width %" PRIu32 " bytes, expected 2 or 4", path,
                        h->token_bytes);
    h->n_tokens = slm_get_le64(data + 16);
    h->n_docs = slm_get_le64(data + 24);
    h->payload_xxh64 = slm_get_le64(data + 32);
    h->vocab_size = slm_get_le32(data + 40);
    h->masked = h->version == SLM_SHARD_VERSION_MASKED;
    if (h->masked && slm_get_le32(data + 44) != 1u)
        return slm_fail(SLM_E_FORMAT,
                        "%s: version-2 shard with header flags 0x%08" PRIx32 ", expected 0x1 "
                        "(per-token flags present)",
                        path, slm_get_le32(data + 44));
    for (int i = h->masked ? 48 : 44; i < SLM_SHARD_HEADER_BYTES; i++)
        if (data[i] != 0)
            return slm_fail(SLM_E_FORMAT, "%s: reserved header byte %d is not zero", path, i);
    if (h->vocab_size == 0) return slm_fail(SLM_E_FORMAT, "%s: vocab_size is 0", path);
    uint32_t want_tb = h->vocab_size <= 65536u ? 2u : 4u;
    if (h->token_bytes != want_tb)
        return slm_fail(SLM_E_FORMAT,
                        "%s: token width %" PRIu32 " does not match vocab_size %" PRIu32
                        " (expected %" PRIu32 ")",
                        path, h->token_bytes, h->vocab_size, want_tb);
    if (h->n_docs > h->n_tokens)
        return slm_fail(SLM_E_FORMAT, "%s: %" PRIu64 " documents in %" PRIu64 " tokens", path,
                        h->n_docs, h->n_tokens);
    // Size check without overflow: payload bytes must equal len - header exactly.
    uint64_t pay = (uint64_t)(len - SLM_SHARD_HEADER_BYTES);
    uint64_t per = h->token_bytes + (h->masked ? 1u : 0u);
    if (h->n_tokens > pay / per || h->n_tokens * per != pay)
        return slm_fail(SLM_E_FORMAT,
                        "%s: file is %zu bytes but the header promises %" PRIu64
                        " tokens of %" PRIu64 " bytes%s (%s)",
                        path, len, h->n_tokens, per, h->masked ? " (id + flags byte)" : "",
                        h->n_tokens > pay / per ? "truncated" : "trailing bytes");
    return SLM_OK;
}

slm_status slm_shard_verify(const char *path, const uint8_t *data, size_t len, uint32_t vocab_size,
                            slm_shard_header *h) {
    slm_status st = slm_shard_parse_header(path, data, len, h);
    if (st) return st;
    const uint8_t *pay = data + SLM_SHARD_HEADER_BYTES;
    size_t pay_bytes = len - SLM_SHARD_HEADER_BYTES;
    uint64_t got = slm_xxh64(pay, pay_bytes, 0);
    if (got != h->payload_xxh64) {
        char a[17], b[17];
        slm_hex64(h->payload_xxh64, a);
        slm_hex64(got, b);
        return slm_fail(SLM_E_CHECKSUM,
                        "%s: payload checksum mismatch (header xxh64 %s, payload %s): the file is "
                        "corrupt; HINT: rerun shardlm prep",
                        path, a, b);
    }
    uint32_t v = vocab_size ? vocab_size : h->vocab_size;
    if (h->vocab_size > v)
        return slm_fail(SLM_E_FORMAT, "%s: shard vocab_size %" PRIu32 " > dataset vocab %" PRIu32,
                        path, h->vocab_size, v);
    // Scan for out-of-range tokens: max-reduce first (vectorises), locate only on failure.
    uint32_t mx = 0;
    if (h->token_bytes == 2) {
        for (uint64_t i = 0; i < h->n_tokens; i++) {
            uint32_t t = slm_get_le16(pay + 2 * i);
            mx = t > mx ? t : mx;
        }
    } else {
        for (uint64_t i = 0; i < h->n_tokens; i++) {
            uint32_t t = slm_get_le32(pay + 4 * i);
            mx = t > mx ? t : mx;
        }
    }
    // Every id is below the shard's own vocab_size (which is <= the dataset's): a header that
    // claims a smaller vocabulary than its ids use is as corrupt as an id past the dataset's.
    uint32_t hv = h->vocab_size;
    if (h->n_tokens > 0 && mx >= hv) {
        for (uint64_t i = 0; i < h->n_tokens; i++) {
            uint32_t t =
                h->token_bytes == 2 ? slm_get_le16(pay + 2 * i) : slm_get_le32(pay + 4 * i);
            if (t >= hv)
                return slm_fail(SLM_E_FORMAT,
                                "%s: token %" PRIu64 " is %" PRIu32 ", >= vocab_size %" PRIu32
                                " (%s)",
                                path, i, t, hv,
                                hv < v ? "the shard header's; the dataset's is larger"
                                       : "of the header and the dataset");
        }
    }
    if (h->masked) { // flags: known bits only; sample starts at token 0 and n_docs in all
        const uint8_t *f = pay + h->n_tokens * h->token_bytes;
        uint64_t starts = 0;
        for (uint64_t i = 0; i < h->n_tokens; i++) {
            if ((f[i] & ~(SLM_TOKF_TARGET | SLM_TOKF_START)) ||
                (i == 0 && !(f[i] & SLM_TOKF_START)))
                return slm_fail(SLM_E_FORMAT,
                                "%s: token %" PRIu64 " has flags 0x%02x (bits: 1 target, 2 "
                                "sample start; token 0 must start a sample)",
                                path, i, f[i]);
            starts += (f[i] & SLM_TOKF_START) != 0;
        }
        if (starts != h->n_docs)
            return slm_fail(SLM_E_FORMAT,
                            "%s: %" PRIu64 " sample starts in the flags, header n_docs %" PRIu64,
                            path, starts, h->n_docs);
    }
    return SLM_OK;
}
