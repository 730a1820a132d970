// Checkpoint benchmark driver for bench/bench_ckpt.sh (not a test). Under mpirun -n N each rank
// holds a FULL_SHARD-style 1/N range of every unit (params, m, v) of a seeded model and:
//   1. saves synchronously (stage + write + fsync + commit), timed;
//   2. saves asynchronously twice with one saver (as training does) and reports the second
//      save's training-thread stall (staging copy into the reused buffer) and time to commit;
//   3. drops the rank files from the page cache (posix_fadvise DONTNEED after fsync) and loads
//      its range back with slm_ckpt_read_range (verified chunks), timed, and checks bitwise.
// Prints one line per rank-0 measurement: "sync_save_s X MBps Y", "async_stall_s X ...",
// "load_s X MBps Y", with bytes = all ranks' file bytes.
// The async case emulates training: after save() the training thread computes for STEP_S
// seconds (default 0.5, a busy loop reading the shards) and then calls the fence, as the
// optimizer step does; the stall is the time in save() plus the fence wait.
// Usage: ckpt_bench CONFIG ROOT [STEP_S]
#include "ckpt/ckpt_internal.h"
#include "dist/dist.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void drop_cache(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "rank_", 5)) continue;
        char *p = slm_path_join(dir, e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
        free(p);
    }
    closedir(d);
}

static void die(void) {
    fprintf(stderr, "ckpt_bench: %s\n", slm_errmsg());
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: ckpt_bench CONFIG ROOT [STEP_S]\n");
        return 2;
    }
    double step_s = argc == 4 ? atof(argv[3]) : 0.5;
    if (slm_dist_init(&argc, &argv)) die();
    int rank = slm_dist_rank(), world = slm_dist_world();
    slm_llama_config cfg;
    slm_llama m;
    if (slm_llama_config_resolve(argv[1], &cfg) || slm_llama_init(&m, &cfg, false)) die();
    int U = m.n_units;
    slm_ckpt_shard *sh = slm_xcalloc((size_t)U, sizeof *sh);
    int64_t local = 0;
    for (int u = 0; u < U; u++) {
        int64_t n = m.units[u].numel, per = (n + world - 1) / world;
        int64_t b = rank * per, e = b + per;
        float *full = slm_xmalloc((size_t)n * 4);
        slm_llama_init_unit_weights(&m, 1, u, full);
        float *p = slm_xaligned((size_t)per * 12);
        memset(p, 0, (size_t)per * 12);
        for (int64_t i = b; i < e && i < n; i++) {
            p[i - b] = full[i];
            p[per + i - b] = full[i] * 0.5f;
            p[2 * per + i - b] = full[i] * full[i];
        }
        free(full);
        sh[u] = (slm_ckpt_shard){.begin = b, .end = e, .params = p, .m = p + per, .v = p + 2 * per};
        local += per;
    }
    char *root = argv[2];
    slm_ckpt_meta meta;
    slm_ckpt_meta_default(&meta, &cfg);
    meta.world = world;
    snprintf(meta.strategy, sizeof meta.strategy, "FULL_SHARD");
    meta.shard_group_size = world;
    double bytes = 0;
    // 1. sync
    for (int mode = 0; mode < 2; mode++) {
        slm_ckpt_saver_opts o = {
            .root = root, .sync = mode == 0, .keep = 1, .rank = rank, .world = world};
        slm_ckpt_saver *s = NULL;
        if (slm_ckpt_saver_new(&o, &s)) die();
        meta.step = 100 + 10 * mode;
        if (mode == 1) { // warm-up save: the saver keeps its staging buffer, as in training
            if (slm_ckpt_saver_save(s, &meta, m.units, U, sh) || slm_ckpt_saver_finish(s)) die();
            meta.step++;
        }
        slm_dist_barrier("bench");
        double t0 = slm_time_s();
        if (slm_ckpt_saver_save(s, &meta, m.units, U, sh)) die();
        if (mode == 1) {
            // The next training step's forward / backward: busy compute on the training thread
            // (reading the shards) for step_s, then the fence before the optimizer step.
            double t1 = slm_time_s();
            volatile float acc = 0;
            while (slm_time_s() - t1 < step_s)
                for (int64_t i = 0; i < 4096; i++)
                    acc += sh[0].params[i % (sh[0].end - sh[0].begin)];
            (void)acc;
            slm_ckpt_saver_fence(s);
        }
        double stall = slm_ckpt_saver_last_stall_s(s);
        if (slm_ckpt_saver_finish(s)) die();
        double total = slm_time_s() - t0;
        slm_ckpt_saver_free(s);
        if (bytes == 0) {
            slm_ckpt *c = NULL;
            if (slm_ckpt_open(root, &c)) die();
            for (int r = 0; r < world; r++) {
                char name[64];
                snprintf(name, sizeof name, "rank_%05d.bin", r);
                char *p = slm_path_join(slm_ckpt_dir(c), name);
                slm_map mp;
                if (!slm_map_file(p, &mp)) bytes += (double)mp.len;
                slm_map_free(&mp);
                free(p);
            }
            slm_ckpt_free(c);
        }
        double tmax = total;
        slm_dist_allreduce(&tmax, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench");
        slm_dist_allreduce(&stall, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench");
        if (rank == 0) {
            if (mode == 0)
                printf("sync_save_s %.3f MBps %.1f bytes %.0f\n", tmax, bytes / tmax / 1e6, bytes);
            else
                printf("async_stall_s %.4f async_total_s %.3f step_s %.2f\n", stall, tmax, step_s);
        }
    }
    // 3. load, cold cache
    slm_ckpt *c = NULL;
    if (slm_ckpt_open(root, &c)) die();
    drop_cache(slm_ckpt_dir(c));
    slm_dist_barrier("bench");
    double t0 = slm_time_s();
    int bad = 0;
    for (int u = 0; u < U; u++) {
        int64_t per = sh[u].end - sh[u].begin;
        float *p = slm_xaligned((size_t)per * 12);
        if (slm_ckpt_read_range(c, u, sh[u].begin, sh[u].end, p, p + per, p + 2 * per)) die();
        bad |= memcmp(p, sh[u].params, (size_t)per * 12) != 0;
        free(p);
    }
    double tl = slm_time_s() - t0;
    slm_dist_allreduce(&tl, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench");
    if (rank == 0)
        printf("load_s %.3f MBps %.1f bitwise %s\n", tl, bytes / tl / 1e6, bad ? "NO" : "yes");
    slm_ckpt_free(c);
    for (int u = 0; u < U; u++)
        free(sh[u].params);
    free(sh);
    slm_llama_free(&m);
    slm_dist_finalize();
    (void)local;
    return bad;
}
