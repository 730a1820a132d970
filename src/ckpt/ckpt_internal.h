// Helpers shared by the ckpt/ sources and its tests (not part of the public API).
#ifndef SLM_CKPT_INTERNAL_H
#define SLM_CKPT_INTERNAL_H

#include "ckpt/ckpt.h"

// One unit's range in a rank file: elements [begin, end) of the unit's flat buffer, of which
// `stored` = max(0, min(end, numel) - begin) are in the file at byte `offset` (params), then
// offset + 4 stored (m), offset + 8 stored (v).
typedef struct slm_ckpt_range {
    int64_t begin, end, stored, offset;
} slm_ckpt_range;

// A piece of a rank file's bytes (borrowed).
typedef struct slm_ckpt_seg {
    const uint8_t *p;
    size_t len;
} slm_ckpt_seg;

// A rank file's contents as a list of segments: either one segment over the staging buffer
// (slm_ckpt_stage: asynchronous saves) or the header plus the live shard arrays
// (slm_ckpt_describe: synchronous saves write straight from the shards, no copy).
typedef struct slm_ckpt_image {
    int rank, world, n_units;
    uint8_t hdr[SLM_CKPT_HEADER_BYTES];
    int n_segs;
    slm_ckpt_seg *segs; // [n_segs] owned array
    uint8_t *data;      // [cap] owned, 64-byte aligned
    size_t len;         // bytes in use
    size_t cap; // bytes allocated (a saver reuses the buffer: no page faults after the first)
    slm_ckpt_range *ranges; // [n_units] owned
} slm_ckpt_image;

// Copies the shards into the image (header + per unit params, m, v), reusing im->data when it is
// large enough (im zeroed or from an earlier stage). NULL m / v store zeros. `parallel`: copy
// with the OpenMP threads (training thread); false on the background writer.
void slm_ckpt_stage(slm_ckpt_image *im, int rank, int world, int64_t step,
                    const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards,
                    bool parallel);
// Describes the shards in place (header + params, m, v of each unit): nothing is copied, so the
// shards must stay unchanged until the image is written. m and v must be non-NULL.
void slm_ckpt_describe(slm_ckpt_image *im, int rank, int world, int64_t step,
                       const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards);
void slm_ckpt_image_free(slm_ckpt_image *im);
// Writes the image as DIR/rank_RRRRR.bin plus its sidecar rank_RRRRR.json, both fsynced; the
// whole-file and per-chunk XXH64 are computed piece by piece right after each write.
// Safe to call from a background thread (no MPI, thread-local error message).
slm_status slm_ckpt_write_image(const char *dir, const slm_ckpt_image *im);
// rm of a flat directory; missing is fine. Never deletes through a symbolic link or a
// non-directory entry: DIR itself is checked with lstat (a symlink or non-directory is skipped
// with a warning naming it, SLM_OK, nothing followed or deleted), then opened with O_NOFOLLOW
// and its entries unlinked relative to that descriptor (unlink removes a link, not its target).
slm_status slm_ckpt_rmdir(const char *dir);
// For the fuzz target: a checkpoint object over DIR without reading anything, and the manifest
// parser over text in memory.
slm_ckpt *slm_ckpt_alloc(const char *dir);
slm_status slm_ckpt_parse_manifest(slm_ckpt *c, const char *text, size_t len);

// Reading a checkpoint on S3 (remote.c): slm_ckpt_open of an s3:// URI resolves it (a step
// prefix with manifest.json, a checkpoints prefix with `latest`, or a run prefix with
// checkpoints/latest) to *dir ("s3://BUCKET/.../step_N", owned) and the manifest text (owned);
// rank files are then read with range GETs of the chunks asked for (up to 8 chunks per request
// batch, in parallel) and checked like local ones.
typedef struct slm_ckpt_remote slm_ckpt_remote;
slm_status slm_ckpt_remote_resolve(const char *uri, slm_ckpt_remote **out, char **dir, char **text,
                                   size_t *len);
// Records rank `rank`'s file size (the manifest's "files"), for the object size checks.
void slm_ckpt_remote_expect(slm_ckpt_remote *r, int rank, int64_t bytes);
// HEAD of rank `rank`'s object `name`: exists, with exactly the bytes of the files in it (this
// file's `bytes` at its offset; the other files recorded with slm_ckpt_remote_expect). Messages
// use `path`.
slm_status slm_ckpt_remote_head(slm_ckpt_remote *r, int rank, const char *name, const char *path,
                                int64_t bytes);
// Bytes [off, off + len) of the rank's object into dst; prefetches up to want_end (bounded).
slm_status slm_ckpt_remote_read(slm_ckpt_remote *r, int rank, const char *name, int64_t off,
                                size_t len, int64_t want_end, uint8_t *dst);
void slm_ckpt_remote_free(slm_ckpt_remote *r);
// "; the file is in s3://BUCKET/KEY from byte OFF": where rank `rank`'s file `name` lies remotely,
// for messages (caller frees).
char *slm_ckpt_remote_where(slm_ckpt_remote *r, int rank, const char *name);

// --resume auto's candidate rules, shared by the local pick (slm_ckpt_pick_newest) and the remote
// one (slm_ckpt_remote_pick): of `steps` (ascending, [n]) those above `above` (-1: all), newest
// first, the first whose ROOT/step_N (a local directory or an s3:// prefix) verifies: manifest
// parses and names step N, every rank file exists with its manifest size (locally also: a real
// directory, not a link), with full_verify every file's hash. Warns, naming the problem, for each
// one skipped; logs the one taken and why, with `hint` (the step `latest` names, -1) and
// `hint_state` (a word on `latest` when it names none). *out_dir (owned) NULL and *out_step -1
// when none is above `above`, or (above >= 0) none of those verifies. Errors: SLM_E_FORMAT when
// above < 0 and none of the n verifies, naming the newest one's problem.
slm_status slm_ckpt_pick_from(const char *root, const int64_t *steps, int n, int64_t hint,
                              const char *hint_state, int64_t above, bool full_verify,
                              const char *use, char **out_dir, int64_t *out_step);

// GGUF export (gguf_write.c): quantizes n floats (a multiple of 32) into n / 32 ggml Q8_0 blocks
// of 34 bytes at out (fp16 scale d, 32 x int8 q): d is the smallest fp16 with 127 d >= max|x| of
// the block (fp16(max|x| / 127) or the next one up), q = round-half-away(x / d), so
// |x - d q| <= d / 2 for every element (d = 0 and q = 0 for an all-zero block). Returns false
// when a block's scale overflows fp16 (max|x| > 127 x 65504).
bool slm_gguf_quant_q8_0(const float *x, int64_t n, uint8_t *out);

#endif
