// The S3 client: a batch of requests runs on one libcurl multi handle with at most max_conns in
// flight; each request is signed afresh per attempt (SigV4, x-amz-date changes) and retried on
// connection errors, 5xx, 503 SlowDown, 429 and 408 with exponential backoff and full jitter
// (sleep uniform in [0, min(cap, base * 2^attempt)], AWS Architecture Blog "Exponential Backoff
// And Jitter"), bounded by max_attempts and retry_budget_s.
#include "objstore/objstore.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define MAX_Q 8 // query parameters per request
#define MAX_H 4 // extra signed headers per request
#define ERR_BODY_MAX (64u << 10)
#define ABORT_S 2 // seconds for the AbortMultipartUpload of a cancelled upload (one attempt)

struct slm_s3 {
    slm_s3_config cfg;
    CURLM *multi;
    slm_s3_stats stats;
    char *scheme;       // "http" / "https"
    char *host;         // "host[:port]" of the endpoint
    slm_rng rng;        // backoff jitter only
    atomic_bool cancel; // slm_s3_cancel: every running and later request ends at once
    char *bucket_seen;  // the last bucket a HEAD 404 probe found to exist (bucket_missing)
};

typedef struct s3_req {
    // what to send
    const char *method;
    const char *bucket, *key; // key "" for a bucket-level request
    const char *query[2 * MAX_Q];
    int n_query;
    const char *hdr[2 * MAX_H]; // extra signed headers
    int n_hdr;
    const uint8_t *body; // borrowed
    size_t body_len;
    const slm_s3_seg *segs; // or: the body is bytes [win_off, win_off + body_len) of these
    int n_segs;
    uint64_t win_off;
    void *dst; // fixed destination (range GET), else the answer goes to `resp`
    size_t dst_cap;
    bool allow_404;    // 404 is an answer, not an error
    int64_t offset;    // range GET: first byte (for messages)
    bool after_cancel; // runs while the client is cancelled (the abort of a cut-short upload):
                       // one attempt, bounded by ABORT_S
    // A cancel does not drop it while its attempt runs: its answer is awaited for cfg.create_wait_s
    // more, no retry after (CreateMultipartUpload: the server may have created the upload, and
    // only its UploadId lets us abort it; 1 s + ABORT_S keeps a cancelled upload's clean-up
    // within the 3 s preemption margin, docs/storage.md); cancel_until is that deadline (0: no
    // cancel seen yet).
    bool answer_on_cancel;
    double cancel_until;
    // state
    char payload_hash[65];
    slm_buf resp;
    size_t got, sent;
    int attempts;
    double first_t, next_t;
    bool running, done;
    long http;
    char etag[128];
    CURL *easy;
    struct curl_slist *slist;
    char errbuf[CURL_ERROR_SIZE];
    slm_buf url, auth_hdr;
    slm_status st;
    char *msg; // final error message (owned)
} s3_req;

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

const slm_s3_config *slm_s3_get_config(const slm_s3 *s) {
    return &s->cfg;
}
void slm_s3_get_stats(const slm_s3 *s, slm_s3_stats *out) {
    *out = s->stats;
}

static char *dupz(const char *s) {
    return s ? slm_xstrdup(s) : NULL;
}

slm_status slm_s3_open(const slm_s3_config *c, slm_s3 **out) {
    *out = NULL;
    pthread_once(&g_curl_once, curl_init_once);
    slm_s3 *s = slm_xcalloc(1, sizeof *s);
    s->cfg = *c;
    s->cfg.endpoint = dupz(c->endpoint);
    s->cfg.region = dupz(c->region);
    s->cfg.access_key = dupz(c->access_key);
    s->cfg.secret_key = dupz(c->secret_key);
    s->cfg.session_token = dupz(c->session_token);
    s->cfg.profile = dupz(c->profile);
    s->cfg.cred_source = dupz(c->cred_source);
    if (s->cfg.max_conns < 1) s->cfg.max_conns = 1;
    if (s->cfg.max_attempts < 1) s->cfg.max_attempts = 1;
    const char *ep = s->cfg.endpoint;
    const char *sep = strstr(ep, "://");
    if (!sep || !sep[3]) {
        slm_s3_close(s);
        return slm_fail(SLM_E_ARG, "S3 endpoint %s: expected SCHEME://HOST[:PORT]", ep);
    }
    s->scheme = slm_xmalloc((size_t)(sep - ep) + 1);
    memcpy(s->scheme, ep, (size_t)(sep - ep));
    s->scheme[sep - ep] = 0;
    const char *h = sep + 3, *he = strchr(h, '/');
    size_t hl = he ? (size_t)(he - h) : strlen(h);
    s->host = slm_xmalloc(hl + 1);
    memcpy(s->host, h, hl);
    s->host[hl] = 0;
    s->multi = curl_multi_init();
    if (!s->multi) {
        slm_s3_close(s);
        return slm_fail(SLM_E_NOMEM, "S3: curl_multi_init failed");
    }
    curl_multi_setopt(s->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)s->cfg.max_conns);
    curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)s->cfg.max_conns);
    slm_rng_seed(&s->rng, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(size_t)s);
    *out = s;
    return SLM_OK;
}

void slm_s3_cancel(slm_s3 *s, bool on) {
    if (s) atomic_store(&s->cancel, on);
}

slm_status slm_s3_open_default(const char *endpoint, const char *region, slm_s3 **out) {
    slm_s3_config c;
    slm_status st = slm_s3_config_load(&c, endpoint, region);
    if (st) return st;
    st = slm_s3_open(&c, out);
    slm_s3_config_free(&c);
    return st;
}

void slm_s3_close(slm_s3 *s) {
    if (!s) return;
    if (s->multi) curl_multi_cleanup(s->multi);
    slm_s3_config_free(&s->cfg);
    free(s->scheme);
    free(s->host);
    free(s->bucket_seen);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// One request's callbacks

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
    s3_req *r = ud;
    size_t n = sz * nm;
    long code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    if (r->dst && code >= 200 && code < 300) {
        if (r->got + n > r->dst_cap) return 0; // longer than asked: CURLE_WRITE_ERROR
        memcpy((char *)r->dst + r->got, p, n);
        r->got += n;
        return n;
    }
    if (code >= 300 && r->resp.len + n > ERR_BODY_MAX) return n; // keep the head of an error
    slm_buf_append(&r->resp, p, n);
    r->got += n;
    return n;
}

// Copies bytes [off, off + n) of the concatenation of segs into dst.
static void seg_copy(const slm_s3_seg *segs, int n_segs, uint64_t off, size_t n, uint8_t *dst) {
    for (int i = 0; i < n_segs && n; i++) {
        if (off >= segs[i].len) {
            off -= segs[i].len;
            continue;
        }
        size_t take = segs[i].len - (size_t)off < n ? segs[i].len - (size_t)off : n;
        memcpy(dst, (const uint8_t *)segs[i].data + off, take);
        dst += take;
        n -= take;
        off = 0;
    }
}

// SHA-256 (hex) of bytes [off, off + n) of the concatenation of segs.
static void seg_sha256(const slm_s3_seg *segs, int n_segs, uint64_t off, size_t n, char out[65]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; i < n_segs && n; i++) {
        if (off >= segs[i].len) {
            off -= segs[i].len;
            continue;
        }
        size_t take = segs[i].len - (size_t)off < n ? segs[i].len - (size_t)off : n;
        EVP_DigestUpdate(ctx, (const uint8_t *)segs[i].data + off, take);
        n -= take;
        off = 0;
    }
    unsigned char md[32];
    unsigned int ml = 32;
    EVP_DigestFinal_ex(ctx, md, &ml);
    EVP_MD_CTX_free(ctx);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = 0;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *ud) {
    s3_req *r = ud;
    size_t n = sz * nm, left = r->body_len - r->sent;
    if (n > left) n = left;
    if (r->segs) {
        seg_copy(r->segs, r->n_segs, r->win_off + r->sent, n, (uint8_t *)p);
    } else if (n) {
        memcpy(p, r->body + r->sent, n);
    }
    r->sent += n;
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    s3_req *r = ud;
    size_t n = sz * nm;
    if (n > 5 && strncasecmp(p, "etag:", 5) == 0) {
        const char *v = p + 5;
        while (*v == ' ')
            v++;
        size_t k = (size_t)(p + n - v);
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' '))
            k--;
        if (k >= sizeof r->etag) k = sizeof r->etag - 1;
        memcpy(r->etag, v, k);
        r->etag[k] = 0;
    }
    return n;
}

static void amz_now(char out[17]) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static bool virtual_host(const slm_s3 *s) {
    return s->cfg.addressing == SLM_S3_ADDR_VIRTUAL;
}

// Builds URL, signs, and adds the easy handle to the multi handle.
// The payload's SHA-256, computed when the request first starts (so hashing later parts of a
// multipart upload overlaps the transfer of earlier ones).
static void payload_hash(s3_req *r) {
    if (r->payload_hash[0]) return;
    if (r->segs)
        seg_sha256(r->segs, r->n_segs, r->win_off, r->body_len, r->payload_hash);
    else
        slm_sha256_hex(r->body ? (const void *)r->body : "", r->body_len, r->payload_hash);
}

static slm_status start_req(slm_s3 *s, s3_req *r) {
    payload_hash(r);
    r->got = r->sent = 0;
    r->resp.len = 0;
    r->etag[0] = 0;
    r->http = 0;
    r->errbuf[0] = 0;
    if (!r->easy)
        r->easy = curl_easy_init();
    else
        curl_easy_reset(r->easy);
    if (!r->easy) return slm_fail(SLM_E_NOMEM, "S3: curl_easy_init failed");
    slm_buf path = {0}, host = {0};
    if (virtual_host(s)) {
        slm_buf_appendf(&host, "%s.%s", r->bucket, s->host);
        slm_buf_append(&path, "/", 1);
    } else {
        slm_buf_append(&host, s->host, strlen(s->host));
        slm_buf_appendf(&path, "/%s/", r->bucket);
    }
    slm_sigv4_uri_encode(&path, r->key, strlen(r->key), true);

    char date[17];
    amz_now(date);
    const char *h[2 * (MAX_H + 4)];
    int nh = 0;
    h[2 * nh] = "host", h[2 * nh + 1] = host.data, nh++;
    h[2 * nh] = "x-amz-content-sha256", h[2 * nh + 1] = r->payload_hash, nh++;
    h[2 * nh] = "x-amz-date", h[2 * nh + 1] = date, nh++;
    if (s->cfg.session_token)
        h[2 * nh] = "x-amz-security-token", h[2 * nh + 1] = s->cfg.session_token, nh++;
    for (int i = 0; i < r->n_hdr; i++)
        h[2 * nh] = r->hdr[2 * i], h[2 * nh + 1] = r->hdr[2 * i + 1], nh++;
    slm_sigv4_req sr = {.method = r->method,
                        .canonical_uri = path.data,
                        .query = r->query,
                        .n_query = r->n_query,
                        .headers = h,
                        .n_headers = nh,
                        .payload_sha256 = r->payload_hash,
                        .amz_date = date,
                        .region = s->cfg.region,
                        .service = "s3",
                        .access_key = s->cfg.access_key,
                        .secret_key = s->cfg.secret_key};
    slm_sigv4_out so;
    slm_status st = slm_sigv4_sign(&sr, &so);
    if (st) {
        slm_buf_free(&path);
        slm_buf_free(&host);
        return st;
    }
    r->url.len = 0;
    slm_buf_appendf(&r->url, "%s://%s%s%s%s", s->scheme, host.data, path.data,
                    so.canonical_query.len ? "?" : "", so.canonical_query.data);
    if (r->slist) curl_slist_free_all(r->slist);
    r->slist = NULL;
    slm_buf line = {0};
    for (int i = 0; i < nh; i++) {
        line.len = 0;
        slm_buf_appendf(&line, "%s: %s", h[2 * i], h[2 * i + 1]);
        r->slist = curl_slist_append(r->slist, line.data);
    }
    line.len = 0;
    slm_buf_appendf(&line, "Authorization: %s", so.authorization.data);
    r->slist = curl_slist_append(r->slist, line.data);
    r->slist = curl_slist_append(r->slist, "Expect:");
    if (strcmp(r->method, "POST") == 0) r->slist = curl_slist_append(r->slist, "Content-Type:");
    slm_buf_free(&line);
    slm_sigv4_out_free(&so);
    slm_buf_free(&path);
    slm_buf_free(&host);

    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url.data);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->slist);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->after_cancel ? ABORT_S * 1000L : 10000L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     r->after_cancel ? ABORT_S * 1000L : (long)(s->cfg.timeout_s * 1000));
    // a stalled attempt (no byte either way for stall_s) ends as CURLE_OPERATION_TIMEDOUT and
    // is retried
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)(s->cfg.stall_s > 0 ? s->cfg.stall_s : 30));
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, r);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "DELETE") == 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (curl_multi_add_handle(s->multi, e) != CURLM_OK)
        return slm_fail(SLM_E_IO, "S3: curl_multi_add_handle failed");
    r->running = true;
    r->attempts++;
    s->stats.requests++;
    if (strcmp(r->method, "PUT") == 0) s->stats.puts++;
    if (strcmp(r->method, "GET") == 0) s->stats.gets++;
    return SLM_OK;
}

static void req_target(const s3_req *r, slm_buf *b) {
    slm_buf_appendf(b, "s3://%s/%s", r->bucket, r->key);
    for (int i = 0; i < r->n_query; i++)
        slm_buf_appendf(b, "%s%s%s%s", i ? "&" : "?", r->query[2 * i],
                        r->query[2 * i + 1][0] ? "=" : "", r->query[2 * i + 1]);
}

static bool retryable_curl(CURLcode c) {
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

// Final error message of a request: what, where, HTTP status + S3 code / message or the curl
// error, attempts; a 403 adds which key id and region signed it (never the secret).
static void set_error(slm_s3 *s, s3_req *r, CURLcode cc) {
    slm_buf b = {0};
    req_target(r, &b);
    slm_buf_appendf(&b, ": %s failed: ", r->method);
    if (cc != CURLE_OK) {
        slm_buf_appendf(&b, "%s (%s)", curl_easy_strerror(cc), r->errbuf[0] ? r->errbuf : "-");
    } else {
        char *code = NULL, *msg = NULL;
        if (r->resp.len) {
            slm_s3_xml_text(r->resp.data, r->resp.len, "Code", &code);
            slm_s3_xml_text(r->resp.data, r->resp.len, "Message", &msg);
        }
        slm_buf_appendf(&b, "HTTP %ld%s%s%s%s", r->http, code ? " " : "", code ? code : "",
                        msg ? ": " : "", msg ? msg : "");
        if (r->http == 404 && code && strcmp(code, "NoSuchBucket") == 0)
            slm_buf_appendf(&b, " (the bucket %s does not exist at %s)", r->bucket,
                            s->cfg.endpoint);
        free(code);
        free(msg);
        if (r->http == 403 || r->http == 401)
            slm_buf_appendf(&b, " (bucket %s, access key id %s, region %s, credentials from %s)",
                            r->bucket, s->cfg.access_key, s->cfg.region,
                            s->cfg.cred_source ? s->cfg.cred_source : "?");
    }
    if (r->attempts > 1) slm_buf_appendf(&b, " after %d attempts", r->attempts);
    free(r->msg);
    r->msg = b.data;
    r->st = SLM_E_IO;
}

static double backoff_s(slm_s3 *s, int attempt) {
    double cap = s->cfg.backoff_base_s;
    for (int i = 1; i < attempt && cap < s->cfg.backoff_max_s; i++)
        cap *= 2;
    if (cap > s->cfg.backoff_max_s) cap = s->cfg.backoff_max_s;
    return cap * (double)slm_rng_uniform(&s->rng);
}

static void finish_one(slm_s3 *s, s3_req *r, CURLcode cc) {
    curl_multi_remove_handle(s->multi, r->easy);
    r->running = false;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    bool ok = cc == CURLE_OK && r->http >= 200 && r->http < 300;
    if (ok && r->resp.len && r->http == 200 && strcmp(r->method, "POST") == 0 &&
        memmem(r->resp.data, r->resp.len, "<Error>", 7)) {
        // CompleteMultipartUpload may answer 200 and fail in the body.
        ok = false;
        r->http = 500;
    }
    // A 404 "no such key" is an answer where allowed; a 404 NoSuchBucket never is: the bucket
    // itself is missing (a typo, another endpoint), named as such by set_error.
    bool no_bucket = cc == CURLE_OK && r->http == 404 && r->resp.len &&
                     memmem(r->resp.data, r->resp.len, "NoSuchBucket", 12);
    if (ok || (cc == CURLE_OK && r->http == 404 && r->allow_404 && !no_bucket)) {
        r->done = true;
        r->st = SLM_OK;
        if (strcmp(r->method, "PUT") == 0)
            s->stats.bytes_up += (int64_t)r->body_len;
        else
            s->stats.bytes_down += (int64_t)r->got;
        return;
    }
    bool slowdown = cc == CURLE_OK && (r->http == 503 || r->http == 429);
    bool retry = (cc != CURLE_OK && retryable_curl(cc)) ||
                 (cc == CURLE_OK && (r->http >= 500 || r->http == 429 || r->http == 408));
    if (cc == CURLE_OK && r->http == 400 && r->resp.len &&
        memmem(r->resp.data, r->resp.len, "RequestTimeout", 14))
        retry = true;
    if (slowdown) s->stats.throttled++;
    double now = slm_time_s();
    double wait = backoff_s(s, r->attempts);
    if (retry && !r->after_cancel && r->attempts < s->cfg.max_attempts &&
        now + wait - r->first_t <= s->cfg.retry_budget_s) {
        s->stats.retries++;
        r->next_t = now + wait;
        return;
    }
    set_error(s, r, cc);
    r->done = true;
}

// Runs every request to completion (success or final error). Returns the first error, with its
// message; every request's own st / msg are set.
static slm_status run_reqs(slm_s3 *s, s3_req *rq, int n) {
    double t0 = slm_time_s();
    for (int i = 0; i < n; i++) {
        rq[i].first_t = t0;
        rq[i].next_t = t0;
    }
    int left = n, in_flight = 0;
    slm_status st = SLM_OK;
    while (left > 0) {
        bool cancelled = atomic_load(&s->cancel) && !rq[0].after_cancel;
        if (cancelled) {
            // Cancelled (slm_s3_cancel, from another thread): every request not yet done ends
            // with SLM_E_INTERRUPTED now, running transfers dropped; a running one marked
            // answer_on_cancel first gets cfg.create_wait_s to answer (no retry after).
            double now = slm_time_s();
            for (int i = 0; i < n; i++) {
                s3_req *r = &rq[i];
                if (r->done) continue;
                if (r->running && r->answer_on_cancel) {
                    if (r->cancel_until == 0) r->cancel_until = now + s->cfg.create_wait_s;
                    if (now < r->cancel_until) continue;
                }
                if (r->running) {
                    curl_multi_remove_handle(s->multi, r->easy);
                    r->running = false;
                    in_flight--;
                }
                r->done = true;
                r->st = SLM_E_INTERRUPTED;
                slm_buf m = {0};
                slm_buf_appendf(&m, "%s s3://%s/%s: cancelled (upload abandoned)", r->method,
                                r->bucket, r->key);
                r->msg = m.data;
                left--;
            }
            if (left == 0) break;
        }
        double now = slm_time_s(), next_wake = now + 0.5;
        for (int i = 0; i < n && in_flight < s->cfg.max_conns; i++) {
            s3_req *r = &rq[i];
            if (r->done || r->running || cancelled) continue;
            if (r->next_t > now) {
                if (r->next_t < next_wake) next_wake = r->next_t;
                continue;
            }
            if (r->attempts == 0) r->first_t = now;
            slm_status e = start_req(s, r);
            if (e) {
                r->done = true;
                r->st = e;
                r->msg = slm_xstrdup(slm_errmsg());
                left--;
                continue;
            }
            in_flight++;
        }
        if (left == 0) break;
        int still = 0;
        curl_multi_perform(s->multi, &still);
        CURLMsg *m;
        int q;
        while ((m = curl_multi_info_read(s->multi, &q))) {
            if (m->msg != CURLMSG_DONE) continue;
            s3_req *r = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            CURLcode cc = m->data.result;
            in_flight--;
            finish_one(s, r, cc);
            if (r->done) left--;
        }
        if (left == 0) break;
        int wait_ms = (int)((next_wake - slm_time_s()) * 1000);
        if (wait_ms < 1) wait_ms = 1;
        if (wait_ms > 200) wait_ms = 200;
        curl_multi_poll(s->multi, NULL, 0, wait_ms, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (rq[i].st && !st) {
            st = rq[i].st;
            slm_fail(st, "%s", rq[i].msg ? rq[i].msg : "S3 request failed");
        }
    }
    return st;
}

static void req_free(s3_req *r) {
    if (r->easy) curl_easy_cleanup(r->easy);
    if (r->slist) curl_slist_free_all(r->slist);
    slm_buf_free(&r->resp);
    slm_buf_free(&r->url);
    slm_buf_free(&r->auth_hdr);
    free(r->msg);
    memset(r, 0, sizeof *r);
}

static void req_init(s3_req *r, const char *method, const char *bucket, const char *key) {
    memset(r, 0, sizeof *r);
    r->method = method;
    r->bucket = bucket;
    r->key = key ? key : "";
}

static void req_query(s3_req *r, const char *k, const char *v) {
    SLM_ASSERT(r->n_query < MAX_Q);
    r->query[2 * r->n_query] = k;
    r->query[2 * r->n_query + 1] = v ? v : "";
    r->n_query++;
}

// ---------------------------------------------------------------------------------------------
// Operations

static slm_status put_single(slm_s3 *s, const char *bucket, const char *key, const void *data,
                             size_t len, const slm_s3_seg *segs, int n_segs) {
    s3_req r;
    req_init(&r, "PUT", bucket, key);
    r.body = data;
    r.body_len = len;
    r.segs = segs;
    r.n_segs = n_segs;
    slm_status st = run_reqs(s, &r, 1);
    req_free(&r);
    return st;
}

slm_status slm_s3_create_bucket(slm_s3 *s, const char *bucket) {
    s3_req r;
    req_init(&r, "PUT", bucket, "");
    slm_status st = run_reqs(s, &r, 1);
    if (st && r.resp.len &&
        (memmem(r.resp.data, r.resp.len, "BucketAlreadyOwnedByYou", 23) ||
         memmem(r.resp.data, r.resp.len, "BucketAlreadyExists", 19)))
        st = SLM_OK;
    req_free(&r);
    return st;
}

// AbortMultipartUpload. After a cancel (slm_s3_cancel) it still runs, as one attempt of at most
// ABORT_S seconds, so a cut-short upload leaves no parts on a reachable server and a frozen one
// costs the canceller little.
static slm_status abort_upload(slm_s3 *s, const char *bucket, const char *key, const char *id) {
    s3_req r;
    req_init(&r, "DELETE", bucket, key);
    req_query(&r, "uploadId", id);
    r.allow_404 = true;
    r.after_cancel = atomic_load(&s->cancel);
    slm_status st = run_reqs(s, &r, 1);
    req_free(&r);
    return st;
}

static slm_status put_multipart(slm_s3 *s, const char *bucket, const char *key, const uint8_t *data,
                                size_t len, size_t part, const slm_s3_seg *segs, int n_segs);

static size_t part_size(const slm_s3 *s) {
    return s->cfg.part_bytes < (5u << 20) ? (5u << 20) : s->cfg.part_bytes;
}

slm_status slm_s3_put(slm_s3 *s, const char *bucket, const char *key, const void *data,
                      size_t len) {
    size_t part = part_size(s);
    if (len < s->cfg.multipart_bytes || len <= part)
        return put_single(s, bucket, key, data ? data : "", len, NULL, 0);
    return put_multipart(s, bucket, key, data, len, part, NULL, 0);
}

slm_status slm_s3_put_segments(slm_s3 *s, const char *bucket, const char *key,
                               const slm_s3_seg *segs, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += segs[i].len;
    size_t part = part_size(s);
    if (len < s->cfg.multipart_bytes || len <= part)
        return put_single(s, bucket, key, NULL, len, segs, n);
    return put_multipart(s, bucket, key, NULL, len, part, segs, n);
}

slm_status slm_s3_put_file(slm_s3 *s, const char *bucket, const char *key, const char *path) {
    slm_map m = {0};
    slm_status st = slm_map_file(path, &m);
    if (st) return st;
    st = slm_s3_put(s, bucket, key, m.data, m.len);
    slm_map_free(&m);
    return st ? slm_fail_wrap(st, "uploading %s", path) : SLM_OK;
}

static slm_status put_multipart(slm_s3 *s, const char *bucket, const char *key, const uint8_t *data,
                                size_t len, size_t part, const slm_s3_seg *segs, int n_segs) {
    slm_status st;
    // CreateMultipartUpload
    s3_req r;
    req_init(&r, "POST", bucket, key);
    req_query(&r, "uploads", "");
    r.answer_on_cancel = true; // its UploadId, even after a cancel, so the upload can be aborted
    char *upload_id = NULL;
    st = run_reqs(s, &r, 1);
    if (!st) st = slm_s3_xml_text(r.resp.data, r.resp.len, "UploadId", &upload_id);
    if (!st && !upload_id)
        st = slm_fail(SLM_E_FORMAT, "s3://%s/%s: CreateMultipartUpload answer has no UploadId",
                      bucket, key);
    req_free(&r);
    if (st) return st;
    int n_parts = (int)((len + part - 1) / part);
    if (n_parts > 10000) {
        part = (len + 9999) / 10000;
        n_parts = (int)((len + part - 1) / part);
    }
    s3_req *pr = slm_xcalloc((size_t)n_parts, sizeof *pr);
    char(*nums)[12] = slm_xcalloc((size_t)n_parts, sizeof *nums);
    for (int i = 0; i < n_parts; i++) {
        req_init(&pr[i], "PUT", bucket, key);
        snprintf(nums[i], sizeof nums[i], "%d", i + 1);
        req_query(&pr[i], "partNumber", nums[i]);
        req_query(&pr[i], "uploadId", upload_id);
        if (segs) {
            pr[i].segs = segs;
            pr[i].n_segs = n_segs;
            pr[i].win_off = (uint64_t)i * part;
        } else {
            pr[i].body = data + (size_t)i * part;
        }
        size_t left = len - (size_t)i * part;
        pr[i].body_len = left < part ? left : part;
    }
    st = run_reqs(s, pr, n_parts);
    slm_buf xml = {0};
    if (!st) {
        slm_buf_appendf(&xml, "<CompleteMultipartUpload>");
        for (int i = 0; i < n_parts; i++) {
            if (!pr[i].etag[0]) {
                st = slm_fail(SLM_E_FORMAT, "s3://%s/%s: part %d answer has no ETag", bucket, key,
                              i + 1);
                break;
            }
            slm_buf_appendf(&xml, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", i + 1,
                            pr[i].etag);
        }
        slm_buf_appendf(&xml, "</CompleteMultipartUpload>");
    }
    for (int i = 0; i < n_parts; i++)
        req_free(&pr[i]);
    free(pr);
    free(nums);
    if (!st) {
        req_init(&r, "POST", bucket, key);
        req_query(&r, "uploadId", upload_id);
        r.body = (const uint8_t *)xml.data;
        r.body_len = xml.len;
        st = run_reqs(s, &r, 1);
        req_free(&r);
    }
    slm_buf_free(&xml);
    if (st) { // failed or cancelled: no parts left behind
        char *keep = slm_xstrdup(slm_errmsg());
        slm_status ab = abort_upload(s, bucket, key, upload_id);
        if (ab)
            slm_warn("s3://%s/%s: AbortMultipartUpload failed too: %s", bucket, key, slm_errmsg());
        slm_set_errmsg(keep);
        free(keep);
    }
    free(upload_id);
    return st;
}

slm_status slm_s3_get(slm_s3 *s, const char *bucket, const char *key, char **data, size_t *len,
                      bool *found) {
    *data = NULL;
    *len = 0;
    if (found) *found = false;
    s3_req r;
    req_init(&r, "GET", bucket, key);
    r.allow_404 = found != NULL;
    slm_status st = run_reqs(s, &r, 1);
    if (!st && r.http != 404) {
        if (found) *found = true;
        slm_buf_append(&r.resp, "", 0);
        *data = r.resp.data;
        *len = r.resp.len;
        r.resp.data = NULL;
        r.resp.len = r.resp.cap = 0;
    }
    req_free(&r);
    return st;
}

slm_status slm_s3_get_ranges(slm_s3 *s, const char *bucket, const slm_s3_range *rg, int n) {
    if (n <= 0) return SLM_OK;
    s3_req *rq = slm_xcalloc((size_t)n, sizeof *rq);
    char(*hv)[64] = slm_xcalloc((size_t)n, sizeof *hv);
    for (int i = 0; i < n; i++) {
        req_init(&rq[i], "GET", bucket, rg[i].key);
        if (rg[i].len <= 0) {
            rq[i].done = true; // nothing to fetch
            continue;
        }
        snprintf(hv[i], sizeof hv[i], "bytes=%lld-%lld", (long long)rg[i].offset,
                 (long long)(rg[i].offset + rg[i].len - 1));
        rq[i].hdr[0] = "range";
        rq[i].hdr[1] = hv[i];
        rq[i].n_hdr = 1;
        rq[i].dst = rg[i].dst;
        rq[i].dst_cap = (size_t)rg[i].len;
        rq[i].offset = rg[i].offset;
    }
    // Requests already done (empty ranges) are skipped by moving the rest together.
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!rq[i].done) {
            if (m != i) rq[m] = rq[i];
            m++;
        }
    slm_status st = run_reqs(s, rq, m);
    for (int i = 0; i < m && !st; i++) {
        if (rq[i].got != rq[i].dst_cap)
            st = slm_fail(SLM_E_IO, "s3://%s/%s: truncated: got %zu of %zu bytes at offset %lld",
                          bucket, rq[i].key, rq[i].got, rq[i].dst_cap, (long long)rq[i].offset);
    }
    for (int i = 0; i < m; i++)
        req_free(&rq[i]);
    free(rq);
    free(hv);
    return st;
}

// A HEAD answers 404 without a body for a missing key and a missing bucket alike; a
// ListObjectsV2 (at most one key) answers 404 NoSuchBucket for the latter. Returns SLM_E_IO
// naming the bucket and the endpoint (set_error) when the bucket is missing, SLM_E_INTERRUPTED
// when cancelled, else SLM_OK: any other answer (200; 403 for a principal allowed to read
// objects but not to list) leaves the HEAD's plain "not found". A bucket answered for (200, 403)
// is remembered (one probe per client and bucket, however many keys are missing).
static slm_status bucket_missing(slm_s3 *s, const char *bucket, const char *key) {
    if (s->bucket_seen && strcmp(s->bucket_seen, bucket) == 0) return SLM_OK;
    s3_req r;
    req_init(&r, "GET", bucket, "");
    req_query(&r, "list-type", "2");
    req_query(&r, "max-keys", "1");
    if (*key) req_query(&r, "prefix", key);
    slm_status st = run_reqs(s, &r, 1);
    bool missing = st == SLM_E_IO && r.http == 404 && r.resp.len &&
                   memmem(r.resp.data, r.resp.len, "NoSuchBucket", 12);
    // Remembered on any answer of the server that is not NoSuchBucket (200; 403 for a principal
    // that may read but not list: the bucket exists, and asking again per missing key only
    // doubles the requests); not after a transport error, 5xx or a cancel.
    if (!st || (st == SLM_E_IO && r.http >= 400 && r.http < 500 && !missing)) {
        free(s->bucket_seen);
        s->bucket_seen = slm_xstrdup(bucket);
    }
    req_free(&r);
    if (missing) return slm_fail_wrap(st, "s3://%s/%s: HEAD answered 404", bucket, key);
    return st == SLM_E_INTERRUPTED ? st : SLM_OK;
}

slm_status slm_s3_head(slm_s3 *s, const char *bucket, const char *key, int64_t *size, bool *found) {
    *size = -1;
    *found = false;
    s3_req r;
    req_init(&r, "HEAD", bucket, key);
    r.allow_404 = true;
    slm_status st = run_reqs(s, &r, 1);
    if (!st && r.http != 404) {
        curl_off_t cl = -1;
        curl_easy_getinfo(r.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        *size = (int64_t)cl;
        *found = true;
    }
    bool not_found = !st && r.http == 404;
    req_free(&r);
    if (not_found) st = bucket_missing(s, bucket, key);
    return st;
}

slm_status slm_s3_delete(slm_s3 *s, const char *bucket, const char *key) {
    s3_req r;
    req_init(&r, "DELETE", bucket, key);
    r.allow_404 = true;
    slm_status st = run_reqs(s, &r, 1);
    req_free(&r);
    return st;
}

slm_status slm_s3_list_objects(slm_s3 *s, const char *bucket, const char *prefix,
                               const char *delimiter, slm_s3_list *out) {
    memset(out, 0, sizeof *out);
    char *token = NULL;
    slm_status st = SLM_OK;
    for (int page = 0; page < 1000000; page++) {
        s3_req r;
        req_init(&r, "GET", bucket, "");
        req_query(&r, "list-type", "2");
        char mk[16];
        snprintf(mk, sizeof mk, "%d", s->cfg.list_page > 0 ? s->cfg.list_page : 1000);
        req_query(&r, "max-keys", mk);
        if (prefix && *prefix) req_query(&r, "prefix", prefix);
        if (delimiter) req_query(&r, "delimiter", delimiter);
        if (token) req_query(&r, "continuation-token", token);
        st = run_reqs(s, &r, 1);
        bool trunc = false;
        char *next = NULL;
        if (!st) st = slm_s3_xml_list(r.resp.data, r.resp.len, out, &trunc, &next);
        if (st) st = slm_fail_wrap(st, "listing s3://%s/%s", bucket, prefix ? prefix : "");
        req_free(&r);
        free(token);
        token = next;
        if (st || !trunc) break;
        if (!token) {
            st = slm_fail(SLM_E_FORMAT,
                          "listing s3://%s/%s: truncated page without a "
                          "NextContinuationToken",
                          bucket, prefix ? prefix : "");
            break;
        }
    }
    free(token);
    if (st) slm_s3_list_free(out);
    return st;
}

slm_status slm_s3_list_uploads(slm_s3 *s, const char *bucket, const char *prefix,
                               slm_s3_list *out) {
    memset(out, 0, sizeof *out);
    char *km = NULL, *um = NULL;
    slm_status st = SLM_OK;
    for (int page = 0; page < 100000; page++) {
        s3_req r;
        req_init(&r, "GET", bucket, "");
        req_query(&r, "uploads", "");
        if (prefix && *prefix) req_query(&r, "prefix", prefix);
        if (km) req_query(&r, "key-marker", km);
        if (um) req_query(&r, "upload-id-marker", um);
        st = run_reqs(s, &r, 1);
        bool trunc = false;
        char *nk = NULL, *nu = NULL;
        if (!st) st = slm_s3_xml_uploads(r.resp.data, r.resp.len, out, &trunc, &nk, &nu);
        if (st)
            st = slm_fail_wrap(st, "listing multipart uploads of s3://%s/%s", bucket,
                               prefix ? prefix : "");
        req_free(&r);
        free(km);
        free(um);
        km = nk;
        um = nu;
        if (st || !trunc) break;
        if (!km) {
            st = slm_fail(SLM_E_FORMAT,
                          "listing multipart uploads of s3://%s/%s: truncated page without a "
                          "NextKeyMarker",
                          bucket, prefix ? prefix : "");
            break;
        }
    }
    free(km);
    free(um);
    if (st) slm_s3_list_free(out);
    return st;
}

slm_status slm_s3_get_file(slm_s3 *s, const char *bucket, const char *key, const char *path) {
    // HEAD for the size, then part-sized range GETs, max_conns in flight, into one buffer.
    int64_t size = -1;
    bool found = false;
    slm_status st = slm_s3_head(s, bucket, key, &size, &found);
    if (!st && !found) st = slm_fail(SLM_E_IO, "s3://%s/%s: no such object", bucket, key);
    if (st) return st;
    int64_t piece = (int64_t)part_size(s);
    int n = (int)((size + piece - 1) / piece);
    uint8_t *data = slm_xmalloc(size > 0 ? (size_t)size : 1);
    slm_s3_range *rg = slm_xcalloc((size_t)(n ? n : 1), sizeof *rg);
    for (int i = 0; i < n; i++) {
        int64_t a = (int64_t)i * piece, b = a + piece < size ? a + piece : size;
        rg[i] = (slm_s3_range){.key = key, .offset = a, .len = b - a, .dst = data + a};
    }
    st = slm_s3_get_ranges(s, bucket, rg, n);
    if (!st) st = slm_file_write_atomic(path, data, (size_t)size);
    free(rg);
    free(data);
    return st;
}
