// slm_fsdp_clip_grad_norm vs torch.nn.utils.clip_grad_norm_ (tests/optim/adamw_ref.py clip):
// every rank fills its gradient shards of a tiny Llama with a known function of the unit and the
// element's index in the unit, clips with max_norm 1, and compares the global norm and its
// clipped shard elements with torch's, which clips the full (unsharded) gradient: the norm must
// count every element once (padding excluded, HYBRID replicas not double counted).
// Tolerances: as in test_optim's test_clip_vs_torch (no BLAS; any CPU): norm 1e-5 relative
// (torch's fp32 blocked sums: <= ~(log2 n + 2) u per buffer), elements 1e-5 relative.
// Usage: test_fsdp_clip [--sharding S] [--shard-group-size G]. Env: SLM_PYTHON, SLM_SOURCE_DIR.
#include <unistd.h>

#include "dist/dist.h"
#include "fsdp/fsdp.h"
#include "fixtures.h"
#include "test.h"

static slm_fsdp_opts g_fo;

static float grad_value(int u, int64_t i) {
    return 0.2f * sinf(1.0f + 0.37f * (float)i + (float)u);
}

static void test_clip(void) {
    int R = slm_dist_rank();
    slm_llama_config cfg = slm_test_config(256, 64, 172, 2, 4, 2, 32, true);
    slm_llama model;
    CHECK_OK(slm_llama_init(&model, &cfg, false));
    slm_fsdp f;
    CHECK_OK(slm_fsdp_init(&f, &model, &g_fo, 1));
    int NU = f.n_units;
    int64_t total = 0, last = f.units[NU - 1].numel;
    for (int u = 0; u < NU; u++) {
        slm_fsdp_unit *x = &f.units[u];
        for (int64_t j = 0; j < x->shard_numel; j++) {
            int64_t i = x->shard_begin + j;
            x->grad[j] = i < x->numel ? grad_value(u, i) : 0.0f; // padding stays 0
        }
        total += x->numel;
    }
    const float max_norm = 1.0f;
    double norm = slm_fsdp_clip_grad_norm(&f, max_norm);

    // Rank 0 runs torch on the full gradient: a = units 0..NU-2, b = the last unit.
    char dir[64] = "/tmp/slm_test_fsdp_clip_XXXXXX", in[128], out[128];
    int64_t ok = 1;
    if (R == 0) {
        ok = mkdtemp(dir) != NULL;
        snprintf(in, sizeof in, "%s/clip.in", dir);
        snprintf(out, sizeof out, "%s/clip.out", dir);
        FILE *fi = ok ? fopen(in, "wb") : NULL;
        ok = fi != NULL;
        if (fi) {
            int64_t hdr[2] = {total - last, last};
            fwrite(hdr, sizeof hdr, 1, fi);
            fwrite(&max_norm, 4, 1, fi);
            for (int u = 0; u < NU; u++)
                for (int64_t i = 0; i < f.units[u].numel; i++) {
                    float g = grad_value(u, i);
                    fwrite(&g, 4, 1, fi);
                }
            fclose(fi);
            const char *py = getenv("SLM_PYTHON"), *src = getenv("SLM_SOURCE_DIR");
            char cmd[1024];
            snprintf(cmd, sizeof cmd, "\"%s\" \"%s/tests/optim/adamw_ref.py\" clip \"%s\" \"%s\"",
                     py ? py : "python3", src ? src : ".", in, out);
            ok = system(cmd) == 0;
        }
    }
    slm_dist_bcast(&ok, 1, SLM_DTYPE_I64, 0, "reference status");
    CHECK_MSG(ok, "torch reference failed");
    double tnorm = 0;
    float *ref = malloc(sizeof(float) * (size_t)total);
    if (R == 0) {
        FILE *fo = fopen(out, "rb");
        ok =
            fo && fread(&tnorm, 8, 1, fo) == 1 && fread(ref, 4, (size_t)total, fo) == (size_t)total;
        if (fo) fclose(fo);
        unlink(in), unlink(out), rmdir(dir);
    }
    slm_dist_bcast(&ok, 1, SLM_DTYPE_I64, 0, "reference read");
    CHECK_MSG(ok, "cannot read the torch reference");
    slm_dist_bcast(&tnorm, 1, SLM_DTYPE_F64, 0, "reference norm");
    slm_dist_bcast(ref, total, SLM_DTYPE_F32, 0, "reference grads");
    int64_t off = 0, n_bad = 0;
    double worst = 0;
    for (int u = 0; u < NU; u++) {
        slm_fsdp_unit *x = &f.units[u];
        for (int64_t j = 0; j < x->shard_numel && x->shard_begin + j < x->numel; j++) {
            double want = ref[off + x->shard_begin + j], got = x->grad[j];
            double e = fabs(got - want) / (1e-5 * fabs(want) + 1e-9);
            if (!(e <= 1.0)) n_bad++;
            if (e > worst) worst = e;
        }
        off += x->numel;
    }
    if (R == 0)
        printf("%s S=%d R=%d: norm %.9g torch %.9g, worst scaled element error %.3g\n",
               slm_sharding_name(g_fo.sharding), f.S, f.R, norm, tnorm, worst);
    free(ref);
    slm_fsdp_free(&f);
    slm_llama_free(&model);
    CHECK(tnorm > max_norm); // the case clips
    CHECK_CLOSE(norm, tnorm, 1e-5, 0);
    CHECK_MSG(n_bad == 0, "rank %d: %lld clipped elements differ from torch (worst %.3g)", R,
              (long long)n_bad, worst);
}

int main(int argc, char **argv) {
    if (slm_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    slm_dist_set_timeout(60);
    slm_fsdp_opts_default(&g_fo);
    for (int i = 1; i + 1 < argc; i += 2) {
        slm_status st = SLM_OK;
        if (!strcmp(argv[i], "--sharding"))
            st = slm_sharding_parse(argv[i + 1], &g_fo.sharding);
        else if (!strcmp(argv[i], "--shard-group-size"))
            g_fo.shard_group_size = atoi(argv[i + 1]);
        else
            st = slm_fail(SLM_E_ARG, "unknown option %s", argv[i]);
        if (st) {
            fprintf(stderr, "%s\n", slm_errmsg());
            slm_dist_finalize();
            return 2;
        }
    }
    RUN(test_clip);
    int64_t bad = slm_test_failed_ ? 1 : 0;
    if (slm_dist_rank() == 0) (void)TEST_SUMMARY();
    slm_dist_allreduce(&bad, 1, SLM_DTYPE_I64, SLM_OP_MAX, "result");
    slm_dist_finalize();
    return bad ? 1 : 0;
}
