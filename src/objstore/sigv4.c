// AWS Signature Version 4 (header-based), as specified in AWS's "Create a signed AWS API
// request" and the S3 API reference "Authenticating Requests: Using the Authorization Header":
//   CanonicalRequest = Method \n CanonicalURI \n CanonicalQuery \n CanonicalHeaders \n
//                      SignedHeaders \n HashedPayload
//   StringToSign     = "AWS4-HMAC-SHA256" \n AmzDate \n Date/Region/Service/aws4_request \n
//                      hex(SHA256(CanonicalRequest))
//   SigningKey       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, Date), Region), Service),
//                           "aws4_request")
//   Signature        = hex(HMAC(SigningKey, StringToSign))
#include "objstore/objstore.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#define SLM_SIGV4_MAX 64

static void hex_of(const unsigned char *d, size_t n, char *out) {
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * n] = 0;
}

void slm_sha256_hex(const void *data, size_t len, char out[65]) {
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data, len, md);
    hex_of(md, sizeof md, out);
}

static void hmac256(const void *key, size_t klen, const void *msg, size_t mlen,
                    unsigned char out[32]) {
    unsigned int olen = 32;
    HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &olen);
}

void slm_sigv4_uri_encode(slm_buf *out, const char *s, size_t len, bool keep_slash) {
    static const char hx[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool unreserved = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                          (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
                          ch == '~' || (keep_slash && ch == '/');
        if (unreserved) {
            slm_buf_append(out, &s[i], 1);
        } else {
            char e[3] = {'%', hx[ch >> 4], hx[ch & 15]};
            slm_buf_append(out, e, 3);
        }
    }
}

typedef struct kv {
    char *k, *v; // owned (encoded query pair, or lowercased header name + trimmed value)
} kv;

static int kv_cmp(const void *a, const void *b) {
    const kv *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    return c ? c : strcmp(x->v, y->v);
}

// Header value per SigV4: leading / trailing spaces removed, inner runs of spaces as one.
static char *trim_value(const char *v) {
    size_t n = strlen(v);
    char *o = slm_xmalloc(n + 1);
    size_t j = 0;
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (ch == ' ' || ch == '\t') {
            space = j > 0;
            continue;
        }
        if (space) o[j++] = ' ';
        space = false;
        o[j++] = ch;
    }
    o[j] = 0;
    return o;
}

void slm_sigv4_out_free(slm_sigv4_out *o) {
    if (!o) return;
    slm_buf_free(&o->canonical_request);
    slm_buf_free(&o->string_to_sign);
    slm_buf_free(&o->signed_headers);
    slm_buf_free(&o->authorization);
    slm_buf_free(&o->canonical_query);
    memset(o, 0, sizeof *o);
}

static void kv_free(kv *a, int n) {
    for (int i = 0; i < n; i++) {
        free(a[i].k);
        free(a[i].v);
    }
}

slm_status slm_sigv4_sign(const slm_sigv4_req *r, slm_sigv4_out *out) {
    memset(out, 0, sizeof *out);
    if (!r->method || !r->canonical_uri || !r->payload_sha256 || !r->amz_date || !r->region ||
        !r->service || !r->access_key || !r->secret_key || strlen(r->amz_date) != 16)
        return slm_fail(SLM_E_ARG, "sigv4: request to sign lacks a field");
    if (r->n_query < 0 || r->n_query > SLM_SIGV4_MAX || r->n_headers < 0 ||
        r->n_headers > SLM_SIGV4_MAX)
        return slm_fail(SLM_E_ARG, "sigv4: %d query parameters / %d headers (at most %d)",
                        r->n_query, r->n_headers, SLM_SIGV4_MAX);
    kv q[SLM_SIGV4_MAX], h[SLM_SIGV4_MAX];
    for (int i = 0; i < r->n_query; i++) {
        slm_buf k = {0}, v = {0};
        const char *qk = r->query[2 * i], *qv = r->query[2 * i + 1] ? r->query[2 * i + 1] : "";
        slm_sigv4_uri_encode(&k, qk, strlen(qk), false);
        slm_sigv4_uri_encode(&v, qv, strlen(qv), false);
        slm_buf_append(&k, "", 0);
        slm_buf_append(&v, "", 0);
        q[i].k = k.data ? k.data : slm_xstrdup("");
        q[i].v = v.data ? v.data : slm_xstrdup("");
    }
    qsort(q, (size_t)r->n_query, sizeof q[0], kv_cmp);
    for (int i = 0; i < r->n_headers; i++) {
        h[i].k = slm_xstrdup(r->headers[2 * i]);
        for (char *p = h[i].k; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
        h[i].v = trim_value(r->headers[2 * i + 1]);
    }
    qsort(h, (size_t)r->n_headers, sizeof h[0], kv_cmp);

    slm_buf *cq = &out->canonical_query;
    slm_buf_append(cq, "", 0);
    for (int i = 0; i < r->n_query; i++)
        slm_buf_appendf(cq, "%s%s=%s", i ? "&" : "", q[i].k, q[i].v);
    slm_buf *sh = &out->signed_headers;
    slm_buf_append(sh, "", 0);
    for (int i = 0; i < r->n_headers; i++)
        slm_buf_appendf(sh, "%s%s", i ? ";" : "", h[i].k);

    slm_buf *cr = &out->canonical_request;
    slm_buf_appendf(cr, "%s\n%s\n%s\n", r->method, r->canonical_uri, cq->data);
    for (int i = 0; i < r->n_headers; i++)
        slm_buf_appendf(cr, "%s:%s\n", h[i].k, h[i].v);
    slm_buf_appendf(cr, "\n%s\n%s", sh->data, r->payload_sha256);
    kv_free(q, r->n_query);
    kv_free(h, r->n_headers);

    char date[9];
    memcpy(date, r->amz_date, 8);
    date[8] = 0;
    char crhash[65];
    slm_sha256_hex(cr->data, cr->len, crhash);
    slm_buf *sts = &out->string_to_sign;
    slm_buf_appendf(sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", r->amz_date, date,
                    r->region, r->service, crhash);

    slm_buf k0 = {0};
    slm_buf_appendf(&k0, "AWS4%s", r->secret_key);
    unsigned char k1[32], k2[32], k3[32], k4[32], sig[32];
    hmac256(k0.data, k0.len, date, 8, k1);
    // The secret's copy is wiped before the buffer goes back to the allocator.
    memset(k0.data, 0, k0.len);
    slm_buf_free(&k0);
    hmac256(k1, 32, r->region, strlen(r->region), k2);
    hmac256(k2, 32, r->service, strlen(r->service), k3);
    hmac256(k3, 32, "aws4_request", 12, k4);
    hmac256(k4, 32, sts->data, sts->len, sig);
    hex_of(sig, 32, out->signature);
    slm_buf_appendf(&out->authorization,
                    "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request,SignedHeaders=%s,"
                    "Signature=%s",
                    r->access_key, date, r->region, r->service, sh->data, out->signature);
    return SLM_OK;
}
