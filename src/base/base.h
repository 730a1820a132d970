// base: status codes and error messages, logging, fatal-error path, checked allocation,
// deterministic RNG, timers, growable buffers, file helpers (atomic write, full write + fsync,
// copy, directory removal, mmap), hashing, little-endian byte order, dtypes (fp32 / fp16 / bf16
// conversions), the signal stop flag, byte formatting and the memory probe. JSON field readers
// are in base/json.h (they need cJSON's types).
//
// Invariants: every fallible function in shardlm returns an slm_status and, on failure, has
// recorded a human message with slm_fail() that names what failed and where (file, tensor,
// line, rank). Messages are thread-local, so worker threads can fail independently.
// Programmer errors (broken invariants) go through slm_fatal(), which flushes logs and calls
// the replaceable abort hook (dist/ installs one that calls MPI_Abort).
// This module knows nothing of MPI, tokenizers or models.
#ifndef SLM_BASE_H
#define SLM_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------------
// Status and messages

typedef enum slm_status {
    SLM_OK = 0,
    SLM_E_ARG = 1,         // bad argument / option / config value
    SLM_E_IO = 2,          // open/read/write/fsync/rename failed
    SLM_E_FORMAT = 3,      // malformed file contents (bad magic, JSON, protobuf, field type)
    SLM_E_CHECKSUM = 4,    // checksum mismatch
    SLM_E_NOMEM = 5,       // allocation failed
    SLM_E_UNSUPPORTED = 6, // valid input that shardlm does not implement
    SLM_E_NUMERIC = 7,     // NaN/Inf or other numeric failure
    SLM_E_COMM = 8,        // collective failed
    SLM_E_TIMEOUT = 9,     // collective or wait timed out
    SLM_E_INTERRUPTED = 10 // stopped by a signal at a step boundary
} slm_status;

// Records a printf-style message for the calling thread and returns `code`, so callers write
// `return slm_fail(SLM_E_IO, "%s: cannot open: %s", path, strerror(errno));`.
slm_status slm_fail(slm_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Prefixes the current thread's message with context ("while loading X: <old message>").
// Returns `code` unchanged.
slm_status slm_fail_wrap(slm_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// The calling thread's last message ("" if none). Valid until the next slm_fail on this thread.
const char *slm_errmsg(void);
// Copies `msg` into the calling thread's message slot (to carry a worker thread's error).
void slm_set_errmsg(const char *msg);
// Short name of a status code ("io", "format", ...).
const char *slm_status_name(slm_status st);

// ---------------------------------------------------------------------------------------------
// Logging. Lines look like "shardlm[rank 3/8] error: ..." (rank part omitted in a world of one).

typedef enum { SLM_LOG_DEBUG, SLM_LOG_INFO, SLM_LOG_WARN, SLM_LOG_ERROR } slm_log_level;

// Sets the rank shown in log prefixes. Thread-safe to call once at start-up.
void slm_log_set_rank(int rank, int world);
void slm_log_set_level(slm_log_level min_level);
// Writes one line to stderr (a newline is added).
void slm_log(slm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define slm_info(...) slm_log(SLM_LOG_INFO, __VA_ARGS__)
#define slm_warn(...) slm_log(SLM_LOG_WARN, __VA_ARGS__)
#define slm_error(...) slm_log(SLM_LOG_ERROR, __VA_ARGS__)

// Per-rank log files. Every slm_log line is also recorded as
// "2026-12-01T12:34:56.789Z rank=R host=H level=L message" (UTC, millisecond) in the log file
// opened with slm_log_open_file; lines before the open are kept (up to 64 KiB) and written first.
// A rank > 0 of a world > 1 also queues its warnings and errors (up to 16 KiB; a count of the
// lines that did not fit follows), which the trainer exchanges at step boundaries so rank 0
// prints them with the rank named (slm_log_forwarded). All thread-safe.

// Opens (appends to) the log file PATH, creating its directory. Errors: SLM_E_IO naming PATH.
slm_status slm_log_open_file(const char *path);
// Flushes and closes the log file (later lines are kept in memory again). Safe without one.
void slm_log_close_file(void);
// A line for the log file only (not stderr, not forwarded): rank 0's step lines.
void slm_log_file_only(slm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Bytes queued for forwarding (an upper bound of what slm_log_forward_take returns).
size_t slm_log_forward_pending(void);
// Moves whole queued lines (at most cap bytes; each "D message\n" with D the level digit)
// into buf and returns their length; not NUL-terminated.
size_t slm_log_forward_take(char *buf, size_t cap);
// Rank 0: prints lines taken on rank `from_rank` (running on `host`) to stderr as
// "shardlm[rank R/W on H, forwarded] warning: ..." and records them in its log file.
void slm_log_forwarded(int from_rank, const char *host, const char *lines, size_t len);
// "debug" / "info" / "warning" / "error".
const char *slm_log_level_name(slm_log_level level);
// This host's name (gethostname; "?" if unknown); static storage.
const char *slm_log_host(void);
// The current UTC time as "2026-12-01T12:34:56.789Z" into out[32].
void slm_utc_timestamp(char out[32]);
// Wall-clock seconds since the Unix epoch (CLOCK_REALTIME).
double slm_unix_time_s(void);
// Internal to base: where slm_log lines go besides stderr. status.c calls no other file of
// base; the owners register their outputs here instead: logfile.c (the per-rank file and the
// forward queue) when the process starts, progress.c (erasing a bar's line before a log line)
// when progress is first enabled. `set_rank` gets slm_log_set_rank's arguments; `record` every
// message (forward: queue a warning / error for rank 0); `clear_line` runs before a line is
// written to stderr.
void slm_log_set_file_sink_(void (*set_rank)(int rank, int world),
                            void (*record)(slm_log_level level, const char *msg, bool forward));
void slm_log_set_clear_line_(void (*clear_line)(void));

// The process's resource use now: resident set (/proc/self/statm), peak resident set
// (getrusage ru_maxrss) and user + system CPU seconds; -1 where unknown.
typedef struct slm_proc_usage_info {
    double rss_bytes, peak_rss_bytes, cpu_s;
} slm_proc_usage_info;
void slm_proc_usage(slm_proc_usage_info *u);

// Progress of long work (prep, train, tokenizer train, checkpoint export and load) on stderr:
// on a terminal one line rewritten in place ("\r", at most 5 times a second: a bar, the
// percentage, the caller's figures, the ETA); otherwise a plain line at every tenth of the work
// and at least every 30 s, so logs stay readable. Nothing is shown for work done within
// SHARDLM_PROGRESS_AFTER seconds (default 2) or while progress is disabled: the library's
// default; `shardlm` enables it and --quiet turns it off. A log line clears the bar first.

typedef struct slm_progress {
    char what[48];       // "train", "prep", ... (the line's first word)
    double total, done0; // units of work (steps, bytes); total <= 0: unknown
    double t0, last;     // slm_time_s at begin and at the last line
    int next_tenth;      // plain lines: the next tenth of total that prints one
    bool on, tty, shown, printed;
} slm_progress;

// Enables / disables progress output for the process (default off).
void slm_progress_enable(bool on);
bool slm_progress_enabled(void);
// Starts a bar for `what` whose work runs from done0 to total (rates count from done0).
void slm_progress_begin(slm_progress *p, const char *what, double done0, double total);
// Reports `done` units, with printf-style figures for the line ("12.3 MB/s"); prints only when
// due (rate-limited). Call from one thread.
void slm_progress_update(slm_progress *p, double done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// The last line (unless the work took less than SHARDLM_PROGRESS_AFTER s, or a plain 100% line
// or, on a terminal, other output came last): the terminal line is completed with a newline.
void slm_progress_end(slm_progress *p, double done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Stops a bar without a final line (on errors), erasing it from the terminal.
void slm_progress_abandon(slm_progress *p);
// Erases the terminal line of the active bar, if any, before other output to the terminal.
void slm_progress_clear_line(void);
// "1:02:03" / "4:05" for seconds ("--:--" when unknown), into out[16].
void slm_fmt_eta(double s, char out[16]);

// Fatal programmer error: logs, flushes, calls the abort hook (default: abort()). Never returns.
void slm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Replaces the abort hook; `hook(code)` must not return (dist/ installs MPI_Abort).
void slm_set_abort_hook(void (*hook)(int code));

#define SLM_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) slm_fatal("%s:%d: assertion failed: %s", __FILE__, __LINE__, #cond);          \
    } while (0)

// Checked allocation: aborts through slm_fatal with the size on failure. Returned memory is
// owned by the caller and released with free(). slm_xaligned returns 64-byte aligned memory.
void *slm_xmalloc(size_t bytes);
void *slm_xcalloc(size_t n, size_t size);
void *slm_xrealloc(void *p, size_t bytes);
void *slm_xaligned(size_t bytes);
char *slm_xstrdup(const char *s);

// ---------------------------------------------------------------------------------------------
// Deterministic RNG: xoshiro256** seeded through splitmix64 (Blackman & Vigna, 2018).
// The same seed gives the same stream on every platform; the state is 4 words a checkpoint can
// store.

typedef struct slm_rng {
    uint64_t s[4];
} slm_rng;

void slm_rng_seed(slm_rng *r, uint64_t seed);
uint64_t slm_rng_u64(slm_rng *r);
// Uniform in [0, 1) with 24 random bits.
float slm_rng_uniform(slm_rng *r);
// Standard normal (Box-Muller, one value per call; deterministic).
float slm_rng_normal(slm_rng *r);
// Uniform integer in [0, n), n > 0 (Lemire's unbiased method).
uint64_t slm_rng_below(slm_rng *r, uint64_t n);
// splitmix64 finaliser: a fast, good 64-bit mix (used for seeds and keyed hashes).
uint64_t slm_mix64(uint64_t x);

// ---------------------------------------------------------------------------------------------
// Host task parallelism: runs fn(ctx, i) for every i in [0, n) on the OpenMP threads, one task
// at a time per thread (dynamic schedule), and returns when all are done. For independent host
// work of uneven size (seeded weight init, one RNG stream per task), whose result does not
// depend on the schedule; fn must not fail (slm_fatal on a broken invariant).
void slm_parallel_tasks(int n, void (*fn)(void *ctx, int i), void *ctx);

// ---------------------------------------------------------------------------------------------
// Memory probe. Every subcommand estimates what it will allocate and calls slm_mem_check before
// the allocation, so running out of memory is a clean error (SLM_E_NOMEM, exit 1) instead of an
// abort in slm_xmalloc or the kernel's OOM killer.

// What this process can still allocate, in bytes, from each source (-1: no such limit).
typedef struct slm_mem_info {
    double bytes;           // min of the three below that apply (0 if none is known)
    double meminfo;         // MemAvailable from /proc/meminfo (physical memory if unreadable)
    double rlimit_as;       // RLIMIT_AS soft limit (ulimit -v) minus the address space in use now
    double cgroup;          // cgroup v2 memory.max minus memory.current (min over the ancestors)
    const char *limit_name; // static text naming the binding source, for messages
} slm_mem_info;

// Fills `out` from /proc/meminfo, getrlimit(RLIMIT_AS) + /proc/self/statm and the cgroup v2
// files of /proc/self/cgroup. Cheap (a few small reads); thread-safe. Never fails: sources that
// cannot be read are left out. Note that MemAvailable is shared by every process on the host.
void slm_mem_probe(slm_mem_info *out);
// slm_mem_probe(...).bytes.
double slm_mem_available(void);
// "1.50 GiB" style text of `bytes` in buf (returns buf).
const char *slm_fmt_bytes(double bytes, char buf[32]);
// SLM_OK if `need_bytes` fit in slm_mem_available() (or nothing is known about the limits);
// otherwise SLM_E_NOMEM with "<what> needs about N of memory, more than the M available
// (<limit name>)", where <what> is the printf-style `fmt`. NaN counts as too much.
slm_status slm_mem_check(double need_bytes, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// ---------------------------------------------------------------------------------------------
// Time

// Monotonic seconds since an arbitrary origin.
double slm_time_s(void);

// ---------------------------------------------------------------------------------------------
// Growable buffers. Zero-initialised structs are valid empty buffers; *_free is safe on them.

typedef struct slm_buf {
    char *data; // owned; always NUL-terminated when len < cap
    size_t len; // bytes
    size_t cap;
} slm_buf;

void slm_buf_reserve(slm_buf *b, size_t cap);
void slm_buf_append(slm_buf *b, const void *data, size_t len);
void slm_buf_appendf(slm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void slm_buf_free(slm_buf *b);

typedef struct slm_ivec {
    int32_t *data; // owned
    size_t len;    // elements
    size_t cap;
} slm_ivec;

void slm_ivec_push(slm_ivec *v, int32_t x);
void slm_ivec_reserve(slm_ivec *v, size_t cap);
void slm_ivec_free(slm_ivec *v);

// ---------------------------------------------------------------------------------------------
// Files

// Reads a whole file into a new NUL-terminated buffer (caller frees *out).
// Errors: SLM_E_IO naming the path and errno text.
slm_status slm_file_read_all(const char *path, char **out, size_t *len);
// Writes `len` bytes to `path` atomically: writes `path.tmp.<pid>`, fsyncs it, renames it over
// `path`, fsyncs the directory. On failure the previous `path` is untouched and the temp file
// removed. Errors: SLM_E_IO naming the path, the failing step and errno text.
slm_status slm_file_write_atomic(const char *path, const void *data, size_t len);
// fsync a directory (to make a rename durable).
slm_status slm_fsync_dir(const char *dir);
// mkdir -p; existing directories are fine.
slm_status slm_mkdir_p(const char *dir);
// True if `path` exists and is a directory / a regular file.
bool slm_is_dir(const char *path);
bool slm_is_file(const char *path);
// Joins two path parts with one '/' into a new string (caller frees).
char *slm_path_join(const char *a, const char *b);
// The directory part of `path` into a new string (caller frees): everything before the last
// '/', "/" for a path directly under the root, "." for a path without '/'.
char *slm_path_parent(const char *path);

// Read-only memory map of a whole file. Zero-length files map to data == NULL, len == 0.
typedef struct slm_map {
    const uint8_t *data;
    size_t len; // bytes
} slm_map;
slm_status slm_map_file(const char *path, slm_map *m);
void slm_map_free(slm_map *m);

// ---------------------------------------------------------------------------------------------
// Hashing: XXH64 (xxHash, Yann Collet) of a buffer / a whole file. Shards, manifests and
// checkpoints use seed 0.
uint64_t slm_xxh64(const void *data, size_t len, uint64_t seed);
slm_status slm_file_xxh64(const char *path, uint64_t *out);
// Formats a 64-bit hash as 16 lowercase hex digits into out[17].
void slm_hex64(uint64_t h, char out[17]);
// Parses 16 hex digits; returns false on malformed input.
bool slm_parse_hex64(const char *s, uint64_t *out);

// Writes all `len` bytes to the open descriptor `fd` (retrying short writes and EINTR), then
// fsyncs it and closes it (always, also on failure). `path` names the file in messages.
// Errors: SLM_E_IO naming the path, the failing step (write / fsync / close) and errno text.
slm_status slm_fd_write_fsync_close(int fd, const void *data, size_t len, const char *path);
// Writes all `len` bytes to `fd` (short writes and EINTR retried), no fsync, no close.
// Errors: SLM_E_IO "PATH: write failed: <errno text>".
slm_status slm_fd_write_all(int fd, const void *data, size_t len, const char *path);
// Creates (or truncates) `path`, writes `len` bytes, fsyncs and closes it; on failure the partial
// file is removed. Not atomic (no rename): for files inside a directory that is itself renamed
// into place (checkpoint staging). Errors: SLM_E_IO as slm_fd_write_fsync_close or "cannot create".
slm_status slm_file_write_durable(const char *path, const void *data, size_t len);
// Copies the file `src` to `dst` atomically (slm_file_write_atomic of src's bytes); with
// `xxh64`, also returns the XXH64 (seed 0) of the bytes copied (read once).
// Errors: SLM_E_IO naming the path that failed.
slm_status slm_file_copy(const char *src, const char *dst, uint64_t *xxh64);
// Removes `dir` and the plain files in it (a flat directory: subdirectories are not descended;
// one left behind makes the rmdir fail). A missing `dir` is SLM_OK.
// Errors: SLM_E_IO naming the directory and errno text (opendir or rmdir).
slm_status slm_rmdir_flat(const char *dir);
// The same, best effort, for clean-up paths: failures are ignored and the calling thread's
// current message (the error being reported) is kept.
void slm_rmdir_flat_quiet(const char *dir);

// ---------------------------------------------------------------------------------------------
// Publishing a directory atomically (publish.c): the new directory is written into a hidden temp
// sibling of the target (same file system, so the renames are atomic; hidden, so a walk over the
// parent skips it) and swapped in whole, so the target never mixes files of two runs. A failed or
// killed run leaves the previous target untouched (at worst a hidden sibling remains); a kill
// between the two renames of the swap leaves the previous directory in the "old" sibling.

// The path to publish at, for a path `path` the user gave: its real path when it exists (so a
// symlink, "." or a trailing '/' name the directory itself), else `path` without trailing '/'.
// Returns a new string (caller frees).
char *slm_publish_target(const char *path);
// "<parent>/.<base>.<tag>.<pid>" for `target` "<parent>/<base>" (".<base>.<tag>.<pid>" when it
// has no '/'): the name of a temp or old sibling, e.g. tag "prep-tmp". New string (caller frees).
char *slm_publish_sibling(const char *target, const char *tag, int64_t pid);

// How one caller publishes: names for messages and which files of the previous directory are its
// own (deleted) rather than the user's (moved into the new directory).
typedef struct slm_publish {
    const char *what;  // message prefix naming the command and option, e.g. "prep: --out"
    const char *shown; // the target as the user gave it, for messages
    // True when entry `name` of the previous directory `old` (already moved aside) belongs to the
    // previous publication and is to be deleted; NULL: none is (everything is moved).
    bool (*drop)(const char *old, const char *name, const char *target, void *arg);
    void *arg;
} slm_publish;

// Creates the temp directory `tmp` (a sibling from slm_publish_sibling), its parent first when
// missing, removing a stale `tmp` left by a killed run that had the same pid.
// Errors: SLM_E_IO from creating the parent, or "<what> <shown>: cannot create temp directory TMP:
// ...".
slm_status slm_publish_begin(const char *tmp, const slm_publish *p);
// Swaps the finished `tmp` in at `target`: fsyncs `tmp`, renames an existing `target` aside to
// `old`, renames `tmp` to `target`, fsyncs the parent, then retires `old`: entries p->drop claims
// are deleted, the rest moved into `target` unless the name is taken there; what cannot be is
// kept in `old` and named in a warning (the new directory is in place by then). If the second
// rename fails the previous directory is moved back. `tmp` is left for the caller to remove on
// error. Errors: SLM_E_IO naming p->shown, the step and errno text: `target` exists and is not a
// directory, the previous directory cannot be moved aside, `tmp` cannot be renamed into place.
slm_status slm_publish_dir(const char *tmp, const char *target, const char *old,
                           const slm_publish *p);

// ---------------------------------------------------------------------------------------------
// Little-endian byte order. Every on-disk integer and float of shardlm's formats (token shards,
// checkpoint rank files, model.bin, safetensors) is little-endian; these read and write them
// byte by byte, so the formats are defined whatever the host order. p need not be aligned.

static inline void slm_put_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void slm_put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void slm_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t slm_get_le16(const uint8_t *p) {
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t slm_get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t slm_get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
// Bulk f32 payloads (weights, checkpoint shards) are copied with memcpy: shardlm builds only on
// little-endian hosts (x86-64, aarch64), checked at compile time in base/dtype.c, so the host's
// float bytes are the format's.

// ---------------------------------------------------------------------------------------------
// Dtypes: the one enum of element types, for tensors on disk (safetensors, checkpoints), on the
// wire (dist/'s collectives: bf16 buffers are uint16 bit patterns) and for mixed precision
// (fsdp/). fp16 is IEEE 754 binary16; bf16 is the top half of an IEEE 754 binary32 (bfloat16).

typedef enum slm_dtype {
    SLM_DTYPE_F32,  // fp32
    SLM_DTYPE_F16,  // fp16 (binary16)
    SLM_DTYPE_BF16, // bfloat16
    SLM_DTYPE_F64,  // double
    SLM_DTYPE_I64,  // int64_t
    SLM_DTYPE_U8    // uint8_t (bytes)
} slm_dtype;

// Bytes per element (8, 4, 2 or 1).
size_t slm_dtype_bytes(slm_dtype t);
// Safetensors' name: "F32", "F16", "BF16", "F64", "I64", "U8".
const char *slm_dtype_st_name(slm_dtype t);
// Parses the float dtypes: "F32" / "F16" / "BF16", "fp32" / "fp16" / "bf16" or "f32" / "f16".
// Errors: SLM_E_ARG "WHAT \"TEXT\": expected fp32, fp16 or bf16" (`what`: the option or field).
slm_status slm_dtype_parse(const char *what, const char *s, slm_dtype *out);

// fp32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN, never rounds to inf.
uint16_t slm_f32_to_bf16_1(float f);
// bf16 -> fp32 (exact).
float slm_bf16_to_f32_1(uint16_t h);
// fp32 -> fp16, round to nearest even; overflow to +-inf (|x| >= 65520), subnormals kept, NaN
// stays NaN. Bit-identical to torch's float -> half conversion.
uint16_t slm_f32_to_f16_1(float f);
// fp16 -> fp32 (exact).
float slm_f16_to_f32_1(uint16_t h);
// Array forms: y[i] = conversion of x[i] for i < n.
void slm_f32_to_bf16(const float *x, uint16_t *y, int64_t n);
void slm_bf16_to_f32(const uint16_t *x, float *y, int64_t n);

// ---------------------------------------------------------------------------------------------
// The stop flag: SIGINT / SIGTERM / SIGUSR1 request a stop that long-running loops poll at safe
// points (train: micro-batch / step boundaries; prep: the next document). One flag per process.
// SIGTERM and SIGUSR1 (what Slurm, Kubernetes and spot capacity send) also mark the stop as a
// preemption (slm_stop_preempted).

// Installs SIGINT / SIGTERM / SIGUSR1 handlers that set the flag and record the signal number
// and its time. With
// `sigint_msg`, the first SIGINT also writes it to stderr (SIGTERM stays quiet: supervisors and
// mpirun's teardown send it); with `second_sigint_msg`, a SIGINT while a stop is already pending
// writes it and exits at once with _exit(1) (without it, further signals only set the flag).
// Both strings must outlive the handlers (string literals). The handlers in place before the
// call are saved for slm_stop_restore. Does not clear the flag (slm_stop_reset does).
void slm_stop_install(const char *sigint_msg, const char *second_sigint_msg);
// Restores the SIGINT / SIGTERM / SIGUSR1 handlers saved by the last slm_stop_install.
void slm_stop_restore(void);
// Sets the flag as a signal would (signal number 0 recorded unless one came first).
void slm_stop_request(void);
// True once a stop was requested (async-signal-safe to read).
bool slm_stop_requested(void);
// The signal number that requested the stop, or 0 (none, or slm_stop_request).
int slm_stop_signal(void);
// True once SIGTERM or SIGUSR1 was received (a preemption: save and exit resumable).
bool slm_stop_preempted(void);
// slm_time_s() clock (CLOCK_MONOTONIC) seconds at which the first signal arrived; 0 if none.
double slm_stop_signal_time(void);
// Clears the flag, the recorded signal, its time and the preemption mark.
void slm_stop_reset(void);

// Temporary paths that a signal ending the process must not leave behind (a GGUF export's
// ".OUT.export-tmp.PID", a model's temp directory and its file): the early SIGINT / SIGTERM
// handler of tools/shardlm.c and slm_stop_install's second-SIGINT exit remove them before
// _exit. At most SLM_TMP_TRACK_MAX at once, each under 4096 bytes.
#define SLM_TMP_TRACK_MAX 8
// Tracks PATH (copied). Returns a slot for slm_tmp_untrack, or -1 when no slot is free or the path
// is too long (then it is simply not removed on a signal). Not thread-safe: call from one thread.
int slm_tmp_track(const char *path);
// Stops tracking the slot (-1 is ignored); call before the path is renamed or removed.
void slm_tmp_untrack(int slot);
// Removes every tracked path: files first (unlink), then directories (rmdir, which succeeds once
// the tracked files in them are gone). Async-signal-safe (unlink, rmdir only).
void slm_tmp_remove_tracked(void);

// ---------------------------------------------------------------------------------------------
// Number parsing for CLI options and config files: whole-string, range-checked.
// Errors: SLM_E_ARG naming `what` and the text.
slm_status slm_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out);
slm_status slm_parse_f64(const char *what, const char *s, double *out);

#endif
