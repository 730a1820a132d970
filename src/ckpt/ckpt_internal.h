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

// A piece of a rank file's bytes: in memory (p, borrowed), or (p NULL) array k of a shard read
// through read(src, unit, k, ...) from element 0 (slm_ckpt_shard.read).
typedef struct slm_ckpt_seg {
    const uint8_t *p;
    size_t len;
    slm_ckpt_read_fn read;
    const void *src;
    int unit, k;
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
// large enough (im zeroed or from an earlier stage). NULL m / v store zeros (unless the shard has
// a `read` source). `parallel`: each array in one copy, which the CPU device spreads over its
// threads (training thread); false on the background writer: in pieces the CPU device copies
// on the calling thread alone.
void slm_ckpt_stage(slm_ckpt_image *im, int rank, int world, int64_t step,
                    const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards,
                    bool parallel);
// Describes the shards in place (header + params, m, v of each unit): nothing is copied, so the
// shards must stay unchanged until the image is written. m and v must be non-NULL, or the shard
// has a `read` source (the writer then reads it piece by piece).
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

// Where the reader (ckpt.c) gets a checkpoint's rank files: a source, which ckpt.c reads only
// through these operations. Local files implement it (local.c), and so do S3 objects (s3_read.c).
// A file is named to a source by its place in the manifest and the manifest's fields:
typedef struct slm_ckpt_src_file {
    int index;        // its position in the manifest's "files" (0-based)
    int rank;         // files[].rank
    const char *name; // files[].file, a plain name
    const char *path; // DIR/name (a local path or an s3:// URI), used in messages
    int64_t bytes;    // files[].bytes
} slm_ckpt_src_file;

typedef struct slm_ckpt_source_ops {
    // Every file of the manifest, once it parsed (a source whose objects hold several files needs
    // all their sizes to check one); NULL when the source does not need them.
    void (*files)(void *impl, const slm_ckpt_src_file *f, int n);
    // Head of file f: it exists with exactly f->bytes bytes (SLM_E_IO naming f->path otherwise).
    // The reader calls it before reading f, until it succeeds once.
    slm_status (*head)(void *impl, const slm_ckpt_src_file *f);
    // Bytes [off, off + len) of f into dst (after its head succeeded); the reader reads on up to
    // byte want_end (<= f->bytes), which a source may fetch ahead. Errors name f->path.
    slm_status (*read)(void *impl, const slm_ckpt_src_file *f, int64_t off, size_t len,
                       int64_t want_end, uint8_t *dst);
    // XXH64 of all of f in one pass (slm_ckpt_verify); NULL: verify hashes every chunk read
    // through `read` instead (the chunks cover the file).
    slm_status (*hash)(void *impl, const slm_ckpt_src_file *f, uint64_t *out);
    // Text to append to a checksum message about f ("; the file is in ...", caller frees); NULL
    // when f->path says it all.
    char *(*where)(void *impl, const slm_ckpt_src_file *f);
    // Releases impl and whatever it holds open.
    void (*free)(void *impl);
} slm_ckpt_source_ops;

typedef struct slm_ckpt_source {
    const slm_ckpt_source_ops *ops;
    void *impl; // owned by the checkpoint that reads through it
} slm_ckpt_source;

// Local files (local.c): files are opened on their head and closed when the source is freed.
slm_ckpt_source slm_ckpt_local_source(void);
// Replaces c's source (slm_ckpt_alloc gives a local one) with src, which c then owns. Set it
// before slm_ckpt_parse_manifest (the source is told the files there).
void slm_ckpt_set_source(slm_ckpt *c, slm_ckpt_source src);
// slm_ckpt_open of a local PATH (ckpt.c) and of an s3:// URI (s3_read.c); open.c picks one.
slm_status slm_ckpt_open_local(const char *path, slm_ckpt **out);
// S3 (s3_read.c): the URI is resolved (a step prefix with manifest.json, a checkpoints prefix with
// `latest`, or a run prefix with checkpoints/latest) to the step "s3://BUCKET/.../step_N"; rank
// files are then read with range GETs of the chunks asked for (up to 8 chunks per request batch,
// in parallel) and checked like local ones.
slm_status slm_ckpt_open_s3(const char *uri, slm_ckpt **out);

// The remote layout (s3_read.c; docs/formats.md "Checkpoints on S3"), shared with the remote
// pick and the uploader (remote.c): bucket, run prefix and --s3-prefix-shards of an s3:// URI.
typedef struct slm_ckpt_rlay {
    char *bucket;
    char *prefix; // run prefix, "" or ending in '/'
    int shards;   // K of --s3-prefix-shards (>= 1)
} slm_ckpt_rlay;
slm_status slm_ckpt_rlay_parse(const char *uri, slm_ckpt_rlay *L);
void slm_ckpt_rlay_free(slm_ckpt_rlay *L);
// Keys (caller frees): PREFIX/checkpoints/step_N/NAME; the object of the rank files of the host
// led by world rank `leader`; PREFIX/checkpoints/latest.
char *slm_ckpt_rlay_key_step(const slm_ckpt_rlay *L, int64_t step, const char *name);
char *slm_ckpt_rlay_key_host(const slm_ckpt_rlay *L, int64_t step, int leader);
char *slm_ckpt_rlay_key_latest(const slm_ckpt_rlay *L);
// "step_NNNNNNNN" (optionally followed by whitespace) -> N; false when it is not one.
bool slm_ckpt_rlay_parse_step(const char *s, size_t len, int64_t *step);

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
