// The /metrics HTTP server over libmicrohttpd (contract in metrics.h). We bind and listen on the
// socket ourselves (so a port in use is reported with the system's reason, and port 0's pick is
// known), then hand it to libmicrohttpd, whose internal thread answers the requests.
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/metrics.h"

#if MHD_VERSION < 0x00097002
typedef int slm_mhd_result; // libmicrohttpd < 0.9.71 returns int from handlers
#else
typedef enum MHD_Result slm_mhd_result;
#endif

struct slm_metrics_server {
    struct MHD_Daemon *d;
    slm_metrics *reg;
    int fd, port;
    char addr[300];
    _Atomic uint64_t requests;
};

slm_status slm_metrics_parse_addr(const char *addr, char *host, size_t host_cap, int *port) {
    const char *expect = "expected HOST:PORT, :PORT or [IPV6]:PORT with PORT in 0..65535 (0 "
                         "picks a free port), e.g. 127.0.0.1:9400";
    if (!addr || !*addr) return slm_fail(SLM_E_ARG, "metrics address \"\": %s", expect);
    const char *colon, *h = addr;
    size_t hlen;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':')
            return slm_fail(SLM_E_ARG, "metrics address \"%s\": %s", addr, expect);
        h = addr + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
        if (hlen == 0) return slm_fail(SLM_E_ARG, "metrics address \"%s\": %s", addr, expect);
    } else {
        colon = strrchr(addr, ':');
        if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
            return slm_fail(SLM_E_ARG, "metrics address \"%s\": %s", addr, expect);
        hlen = (size_t)(colon - addr);
    }
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p))
        return slm_fail(SLM_E_ARG, "metrics address \"%s\": bad port \"%s\"; %s", addr, p, expect);
    long v = strtol(p, NULL, 10);
    if (v > 65535)
        return slm_fail(SLM_E_ARG, "metrics address \"%s\": port %ld > 65535; %s", addr, v, expect);
    if (hlen == 0) h = "127.0.0.1", hlen = strlen(h);
    if (hlen + 1 > host_cap)
        return slm_fail(SLM_E_ARG, "metrics address \"%s\": host name too long", addr);
    for (size_t i = 0; i < hlen; i++)
        if (h[i] == ' ' || h[i] == '/' || h[i] == '[' || h[i] == ']')
            return slm_fail(SLM_E_ARG, "metrics address \"%s\": bad host; %s", addr, expect);
    memcpy(host, h, hlen);
    host[hlen] = 0;
    *port = (int)v;
    return SLM_OK;
}

static slm_mhd_result answer(struct MHD_Connection *c, unsigned code, const char *type,
                             const char *body, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    slm_mhd_result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static slm_mhd_result handle(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload,
                             size_t *upload_size, void **con_cls) {
    (void)version, (void)upload;
    slm_metrics_server *s = cls;
    if (*con_cls == NULL) { // first call of a request: headers only
        *con_cls = s;
        return MHD_YES;
    }
    if (*upload_size) { // ignore a body
        *upload_size = 0;
        return MHD_YES;
    }
    atomic_fetch_add(&s->requests, 1);
    const char *text = "text/plain; charset=utf-8";
    bool get = !strcmp(method, "GET"), head = !strcmp(method, "HEAD");
    if (!get && !head) {
        const char *m = "method not allowed: GET /metrics\n";
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, m, strlen(m));
    }
    if (strcmp(url, "/metrics") != 0) {
        const char *m = "not found: the metrics are at /metrics\n";
        return answer(c, MHD_HTTP_NOT_FOUND, text, m, strlen(m));
    }
    slm_buf b = {0};
    slm_buf_reserve(&b, 16384);
    slm_metrics_render(s->reg, &b);
    slm_mhd_result ret =
        answer(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    slm_buf_free(&b);
    return ret;
}

// Resolves, binds and listens; *fd_out and the chosen port on success.
static slm_status listen_on(const char *addr, const char *host, int port, int *fd_out,
                            int *port_out) {
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai)
        return slm_fail(SLM_E_ARG, "metrics address %s: cannot resolve host \"%s\": %s", addr, host,
                        gai_strerror(gai));
    int err = 0, fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return slm_fail(SLM_E_IO, "metrics: cannot listen on %s: %s%s", addr, strerror(err),
                        err == EADDRINUSE ? " (another process holds the port: choose another "
                                            "--metrics-addr, or PORT 0 for a free one)"
                                          : "");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int got = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        got = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    *port_out = got;
    return SLM_OK;
}

slm_status slm_metrics_server_start(const char *addr, slm_metrics *r, slm_metrics_server **out) {
    *out = NULL;
    char host[256];
    int port;
    slm_status st = slm_metrics_parse_addr(addr, host, sizeof host, &port);
    if (st) return st;
    slm_metrics_server *s = slm_xcalloc(1, sizeof *s);
    s->reg = r;
    s->fd = -1;
    st = listen_on(addr, host, port, &s->fd, &s->port);
    if (st) {
        free(s);
        return st;
    }
    snprintf(s->addr, sizeof s->addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, s->port);
    s->d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, handle, s,
                         MHD_OPTION_LISTEN_SOCKET, s->fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!s->d) {
        close(s->fd);
        free(s);
        return slm_fail(SLM_E_IO, "metrics: cannot start the HTTP server on %s", addr);
    }
    *out = s;
    return SLM_OK;
}

int slm_metrics_server_port(const slm_metrics_server *s) {
    return s->port;
}

const char *slm_metrics_server_addr(const slm_metrics_server *s) {
    return s->addr;
}

uint64_t slm_metrics_server_requests(const slm_metrics_server *s) {
    return atomic_load(&s->requests);
}

void slm_metrics_server_stop(slm_metrics_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d); // joins its thread and closes the listen socket it was given
    free(s);
}
