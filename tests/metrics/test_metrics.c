// metrics/: the registry, the text exposition writer (against the format's rules: HELP / TYPE,
// escaping, cumulative buckets with le="+Inf", _sum / _count), its errors, lock-free updates
// under concurrent rendering, and the /metrics server (200 / 404 / 405, port 0, port in use,
// address parsing, a burst of concurrent scrapes).
// With --dump it writes the fixture registry of dump_fixture() to stdout for the independent
// parsers (expo_parse.py: prometheus_client; promtool check metrics), see CMakeLists.txt.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "test.h"

// One HTTP/1.0 request to 127.0.0.1:port; returns the whole response (caller frees) or NULL.
static char *http(int port, const char *method, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return NULL;
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return NULL;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: x\r\n\r\n", method, path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    slm_buf b = {0};
    char tmp[4096];
    ssize_t k;
    while ((k = read(fd, tmp, sizeof tmp)) > 0)
        slm_buf_append(&b, tmp, (size_t)k);
    close(fd);
    if (!b.data) slm_buf_append(&b, "", 0);
    return b.data;
}

static const char *body_of(const char *resp) {
    const char *p = resp ? strstr(resp, "\r\n\r\n") : NULL;
    return p ? p + 4 : "";
}

// The exposition of a fixed registry, checked line by line against the format's rules (the
// expected text is written from the spec, not from the writer).
static void test_render_exact(void) {
    slm_metrics *r = slm_metrics_new();
    slm_metric *c = slm_metrics_counter(r, "app_requests_total", "Requests\\served\nso far");
    slm_metric_inc(c, 3);
    slm_metric_inc(c, -1); // ignored: counters only go up
    slm_metric_inc(c, 0.5);
    slm_metric_family *g;
    const char *ln[] = {"rank", "path"};
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "app_temp_celsius", "T", 2, ln, 0, NULL, &g) ==
          SLM_OK);
    slm_metric *g0, *g1;
    CHECK(slm_metrics_series(g, (const char *[]){"0", "C:\\dir \"x\"\nend"}, &g0) == SLM_OK);
    CHECK(slm_metrics_series(g, (const char *[]){"1", ""}, &g1) == SLM_OK);
    slm_metric *again;
    CHECK(slm_metrics_series(g, (const char *[]){"0", "C:\\dir \"x\"\nend"}, &again) == SLM_OK);
    CHECK(again == g0);
    slm_metric_set(g0, -2.5);
    slm_metric_set(g1, 1.0 / 0.0);
    double bounds[] = {0.1, 1, 10};
    slm_metric *h = slm_metrics_histogram(r, "app_latency_seconds", "Latency.", 3, bounds);
    CHECK(h != NULL);
    slm_metric_observe(h, 0.1); // le is inclusive: bucket 0.1
    slm_metric_observe(h, 0.5);
    slm_metric_observe(h, 10);
    slm_metric_observe(h, 11);        // +Inf only
    slm_metric_observe(h, 0.0 / 0.0); // ignored
    slm_metric_family *e;
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "app_empty", "", 1, ln, 0, NULL, &e) == SLM_OK);
    slm_buf b = {0};
    slm_metrics_render(r, &b);
    const char *want = "# HELP app_requests_total Requests\\\\served\\nso far\n"
                       "# TYPE app_requests_total counter\n"
                       "app_requests_total 3.5\n"
                       "# HELP app_temp_celsius T\n"
                       "# TYPE app_temp_celsius gauge\n"
                       "app_temp_celsius{rank=\"0\",path=\"C:\\\\dir \\\"x\\\"\\nend\"} -2.5\n"
                       "app_temp_celsius{rank=\"1\",path=\"\"} +Inf\n"
                       "# HELP app_latency_seconds Latency.\n"
                       "# TYPE app_latency_seconds histogram\n"
                       "app_latency_seconds_bucket{le=\"0.1\"} 1\n"
                       "app_latency_seconds_bucket{le=\"1\"} 2\n"
                       "app_latency_seconds_bucket{le=\"10\"} 3\n"
                       "app_latency_seconds_bucket{le=\"+Inf\"} 4\n"
                       "app_latency_seconds_sum 21.6\n"
                       "app_latency_seconds_count 4\n"
                       "# HELP app_empty \n"
                       "# TYPE app_empty gauge\n";
    CHECK_MSG(b.data && !strcmp(b.data, want), "rendered:\n%s\nwanted:\n%s", b.data, want);
    CHECK(slm_metric_count(h) == 4);
    CHECK(fabs(slm_metric_value(h) - 21.6) < 1e-12);
    slm_buf_free(&b);
    slm_metrics_free(r);
}

static void test_values(void) {
    char buf[32];
    CHECK(!strcmp(slm_metrics_fmt_value(0.1, buf), "0.1"));
    CHECK(!strcmp(slm_metrics_fmt_value(1e-9, buf), "1e-09"));
    CHECK(!strcmp(slm_metrics_fmt_value(123456789012.0, buf), "123456789012"));
    CHECK(!strcmp(slm_metrics_fmt_value(-1.0 / 0.0, buf), "-Inf"));
    CHECK(!strcmp(slm_metrics_fmt_value(0.0 / 0.0, buf), "NaN"));
    double third = 1.0 / 3.0;
    CHECK(strtod(slm_metrics_fmt_value(third, buf), NULL) == third); // round trip
}

static void test_errors(void) {
    slm_metrics *r = slm_metrics_new();
    slm_metric_family *f;
    CHECK(slm_metrics_counter(r, "no_suffix", "x") == NULL);
    CHECK(strstr(slm_errmsg(), "_total") != NULL);
    CHECK(slm_metrics_gauge(r, "9bad", "x") == NULL);
    CHECK(slm_metrics_gauge(r, "bad-name", "x") == NULL);
    CHECK(slm_metrics_gauge(r, "ok:name_1", "x") != NULL);
    CHECK(slm_metrics_gauge(r, "ok:name_1", "x") == NULL); // duplicate
    CHECK(strstr(slm_errmsg(), "already registered") != NULL);
    const char *l_res[] = {"__x"}, *l_le[] = {"le"}, *l_dup[] = {"a", "a"}, *l_bad[] = {"a:b"};
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "g1", "", 1, l_res, 0, NULL, &f) == SLM_E_ARG);
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "g2", "", 2, l_dup, 0, NULL, &f) == SLM_E_ARG);
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "g3", "", 1, l_bad, 0, NULL, &f) == SLM_E_ARG);
    double b_ok[] = {1}, b_dec[] = {2, 1}, b_inf[] = {1, 1.0 / 0.0};
    CHECK(slm_metrics_family(r, SLM_METRIC_HISTOGRAM, "h1", "", 1, l_le, 1, b_ok, &f) == SLM_E_ARG);
    CHECK(slm_metrics_histogram(r, "h2", "", 2, b_dec) == NULL);
    CHECK(slm_metrics_histogram(r, "h3", "", 2, b_inf) == NULL);
    CHECK(slm_metrics_histogram(r, "h4", "", 0, b_ok) == NULL);
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "g4", "", 1, l_bad + 0, 0, NULL, &f) ==
          SLM_E_ARG);
    const char *l_ok[] = {"rank"};
    CHECK(slm_metrics_family(r, SLM_METRIC_GAUGE, "g5", "", 1, l_ok, 0, NULL, &f) == SLM_OK);
    slm_metric *m;
    CHECK(slm_metrics_series(f, (const char *[]){NULL}, &m) == SLM_E_ARG);
    slm_metric_inc(NULL, 1); // NULL handles are ignored
    slm_metric_set(NULL, 1);
    slm_metric_observe(NULL, 1);
    CHECK(isnan(slm_metric_value(NULL)));
    slm_metrics_free(r);
}

static void test_parse_addr(void) {
    char h[64];
    int p = -1;
    CHECK(slm_metrics_parse_addr("127.0.0.1:9400", h, sizeof h, &p) == SLM_OK);
    CHECK(!strcmp(h, "127.0.0.1") && p == 9400);
    CHECK(slm_metrics_parse_addr(":0", h, sizeof h, &p) == SLM_OK);
    CHECK(!strcmp(h, "127.0.0.1") && p == 0); // loopback unless the user names a host
    CHECK(slm_metrics_parse_addr("[::1]:65535", h, sizeof h, &p) == SLM_OK);
    CHECK(!strcmp(h, "::1") && p == 65535);
    CHECK(slm_metrics_parse_addr("0.0.0.0:80", h, sizeof h, &p) == SLM_OK);
    CHECK(!strcmp(h, "0.0.0.0") && p == 80);
    const char *bad[] = {"",       "9400",    "host:", "host:65536", "host:-1",    "host:12a",
                         "::1:80", "[::1]80", "[]:80", "a b:80",     "host:123456"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(slm_metrics_parse_addr(bad[i], h, sizeof h, &p) == SLM_E_ARG, "accepted %s",
                  bad[i]);
        CHECK(strstr(slm_errmsg(), "HOST:PORT") != NULL);
    }
}

typedef struct {
    slm_metric *c, *h;
    int n;
} writer_ctx;

static void *writer(void *arg) {
    writer_ctx *w = arg;
    for (int i = 0; i < w->n; i++) {
        slm_metric_inc(w->c, 1);
        slm_metric_observe(w->h, (double)(i % 4));
    }
    return NULL;
}

// Two threads update while the main thread renders: no update is lost (atomics) and every
// rendered histogram's +Inf bucket equals its _count.
static void test_concurrent_updates(void) {
    slm_metrics *r = slm_metrics_new();
    double bounds[] = {0.5, 1.5, 2.5};
    writer_ctx w = {slm_metrics_counter(r, "t_total", "t"),
                    slm_metrics_histogram(r, "t_hist", "h", 3, bounds), 200000};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, writer, &w);
    pthread_create(&t2, NULL, writer, &w);
    for (int k = 0; k < 200; k++) {
        slm_buf b = {0};
        slm_metrics_render(r, &b);
        const char *inf = strstr(b.data, "t_hist_bucket{le=\"+Inf\"} ");
        const char *cnt = strstr(b.data, "t_hist_count ");
        CHECK(inf && cnt);
        CHECK(strtoull(inf + strlen("t_hist_bucket{le=\"+Inf\"} "), NULL, 10) ==
              strtoull(cnt + strlen("t_hist_count "), NULL, 10));
        slm_buf_free(&b);
    }
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(slm_metric_value(w.c) == 400000.0);
    CHECK(slm_metric_count(w.h) == 400000);
    CHECK(slm_metric_value(w.h) == 2.0 * (0 + 1 + 2 + 3) * 50000); // exact in doubles
    slm_metrics_free(r);
}

typedef struct {
    int port, n, ok;
} scraper_ctx;

static void *scraper(void *arg) {
    scraper_ctx *s = arg;
    for (int i = 0; i < s->n; i++) {
        char *resp = http(s->port, "GET", "/metrics");
        if (resp && !strncmp(resp, "HTTP/1.", 7) && strstr(resp, " 200 ") &&
            strstr(body_of(resp), "srv_up 1\n"))
            s->ok++;
        free(resp);
    }
    return NULL;
}

static void test_server(void) {
    slm_metrics *r = slm_metrics_new();
    slm_metric_set(slm_metrics_gauge(r, "srv_up", "1 while serving"), 1);
    slm_metrics_server *s = NULL;
    CHECK(slm_metrics_server_start("127.0.0.1:0", r, &s) == SLM_OK);
    if (!s) return;
    int port = slm_metrics_server_port(s);
    CHECK(port > 0);
    char want_addr[64];
    snprintf(want_addr, sizeof want_addr, "127.0.0.1:%d", port);
    CHECK(!strcmp(slm_metrics_server_addr(s), want_addr));
    char *resp = http(port, "GET", "/metrics");
    CHECK(resp && !strncmp(resp, "HTTP/1.", 7) && strstr(resp, " 200 "));
    CHECK(resp && strstr(resp, "text/plain; version=0.0.4"));
    slm_buf b = {0};
    slm_metrics_render(r, &b);
    CHECK(resp && !strcmp(body_of(resp), b.data));
    slm_buf_free(&b);
    free(resp);
    resp = http(port, "GET", "/");
    CHECK(resp && strstr(resp, " 404 "));
    free(resp);
    resp = http(port, "GET", "/metrics/x");
    CHECK(resp && strstr(resp, " 404 "));
    free(resp);
    resp = http(port, "POST", "/metrics");
    CHECK(resp && strstr(resp, " 405 "));
    free(resp);
    resp = http(port, "HEAD", "/metrics");
    CHECK(resp && strstr(resp, " 200 ") && !strstr(resp, "srv_up"));
    free(resp);
    // the same port again: a clear error naming the address and the reason
    slm_metrics_server *s2 = NULL;
    CHECK(slm_metrics_server_start(want_addr, r, &s2) == SLM_E_IO && !s2);
    CHECK_MSG(strstr(slm_errmsg(), want_addr) && strstr(slm_errmsg(), "in use"), "%s",
              slm_errmsg());
    CHECK(slm_metrics_server_start("bad", r, &s2) == SLM_E_ARG);
    CHECK(slm_metrics_server_start("no.such.host.invalid:0", r, &s2) == SLM_E_ARG);
    // a bounded burst: 16 clients x 25 sequential scrapes, all answered
    enum { NT = 16 };
    pthread_t th[NT];
    scraper_ctx sc[NT];
    for (int i = 0; i < NT; i++) {
        sc[i] = (scraper_ctx){port, 25, 0};
        pthread_create(&th[i], NULL, scraper, &sc[i]);
    }
    int ok = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ok += sc[i].ok;
    }
    CHECK_EQ_INT(ok, NT * 25);
    CHECK(slm_metrics_server_requests(s) >= 5 + NT * 25);
    slm_metrics_server_stop(s);
    // stopped: the port is free again, and nothing listens
    resp = http(port, "GET", "/metrics");
    CHECK(resp == NULL);
    free(resp);
    CHECK(slm_metrics_server_start(want_addr, r, &s) == SLM_OK);
    slm_metrics_server_stop(s);
    slm_metrics_free(r);
}

// The registry expo_parse.py checks (values and labels are repeated there by hand).
static void dump_fixture(void) {
    slm_metrics *r = slm_metrics_new();
    slm_metric_inc(slm_metrics_counter(r, "fx_bytes_total", "Bytes sent, in bytes."), 1234567);
    slm_metric_family *g;
    const char *ln[] = {"rank", "note"};
    if (slm_metrics_family(r, SLM_METRIC_GAUGE, "fx_loss", "Loss \\ with\nnewline", 2, ln, 0, NULL,
                           &g))
        return;
    slm_metric *a, *b;
    slm_metrics_series(g, (const char *[]){"0", "quote \" back \\ nl \n end"}, &a);
    slm_metrics_series(g, (const char *[]){"1", "plain"}, &b);
    slm_metric_set(a, 0.1);
    slm_metric_set(b, -1e-9);
    double bounds[] = {0.001, 0.01, 0.1, 1};
    slm_metric_family *hf;
    const char *hl[] = {"rank"};
    slm_metrics_family(r, SLM_METRIC_HISTOGRAM, "fx_step_seconds", "Step time.", 1, hl, 4, bounds,
                       &hf);
    slm_metric *h;
    slm_metrics_series(hf, (const char *[]){"0"}, &h);
    double obs[] = {0.0005, 0.005, 0.05, 0.5, 5, 0.01};
    for (int i = 0; i < 6; i++)
        slm_metric_observe(h, obs[i]);
    slm_buf out = {0};
    slm_metrics_render(r, &out);
    fputs(out.data, stdout);
    slm_buf_free(&out);
    slm_metrics_free(r);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) {
        dump_fixture();
        return 0;
    }
    RUN(test_render_exact);
    RUN(test_values);
    RUN(test_errors);
    RUN(test_parse_addr);
    RUN(test_concurrent_updates);
    RUN(test_server);
    return TEST_SUMMARY();
}
