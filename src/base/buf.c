// Growable byte and int32 buffers, and the monotonic clock.
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double slm_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void slm_buf_reserve(slm_buf *b, size_t cap) {
    if (cap + 1 <= b->cap) return;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < cap + 1)
        nc *= 2;
    b->data = slm_xrealloc(b->data, nc);
    b->cap = nc;
}

void slm_buf_append(slm_buf *b, const void *data, size_t len) {
    slm_buf_reserve(b, b->len + len);
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
}

void slm_buf_appendf(slm_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        slm_buf_reserve(b, b->len + (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void slm_buf_free(slm_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void slm_ivec_reserve(slm_ivec *v, size_t cap) {
    if (cap <= v->cap) return;
    size_t nc = v->cap ? v->cap : 16;
    while (nc < cap)
        nc *= 2;
    v->data = slm_xrealloc(v->data, nc * sizeof(int32_t));
    v->cap = nc;
}

void slm_ivec_push(slm_ivec *v, int32_t x) {
    if (v->len == v->cap) slm_ivec_reserve(v, v->len + 1);
    v->data[v->len++] = x;
}

void slm_ivec_free(slm_ivec *v) {
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}
