// Test driver for the objstore client (not a test itself): one S3 operation per call, the
// configuration from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).
//   s3_tool mb BUCKET | put BUCKET KEY FILE | get BUCKET KEY FILE | range BUCKET KEY OFF LEN FILE
//   | head BUCKET KEY | heads BUCKET KEY... (one client: "KEY SIZE" lines, -1 for a missing
//     key, then the stats line; exit 3 when one was missing) | ls BUCKET PREFIX | rm BUCKET KEY |
//     wait BUCKET SECONDS | stats-put ...
//   | uploads BUCKET PREFIX (in-progress multipart uploads: "KEY UPLOAD_ID" lines)
//   | put-cancel BUCKET KEY FILE PARTS (a multipart PUT cancelled with slm_s3_cancel once PARTS
//     part PUTs were sent; prints "uploads before cancel: N" as another client lists them,
//     then the put's status; exit 0 when the put ended cancelled)
//   | put-cancel-create BUCKET KEY FILE HELD RELEASE (a multipart PUT cancelled while its
//     CreateMultipartUpload is in flight: once the file HELD exists (throttle_proxy.py holds the
//     answer) it prints "uploads before cancel: N", cancels, waits up to 1 s for the put to
//     end ("put ended before the answer: yes|no"), creates RELEASE (the answer goes out) and
//     prints the put's status; exit 0 when the put ended cancelled)
// Prints results on stdout; after put / get / ls also "stats requests=N retries=N throttled=N
// puts=N gets=N". Exit 0 on success, 1 with the error message on stderr, 3 for a missing key.
#include "objstore/objstore.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct put_job {
    slm_s3 *s;
    const char *bucket, *key, *path;
    slm_status st;
    char msg[512];
    atomic_bool done;
} put_job;

static void *put_thread(void *arg) {
    put_job *j = arg;
    j->st = slm_s3_put_file(j->s, j->bucket, j->key, j->path);
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", slm_errmsg());
    atomic_store(&j->done, true);
    return NULL;
}

static slm_status count_uploads(const char *bucket, const char *prefix, int64_t *n) {
    slm_s3 *s2 = NULL;
    slm_s3_list l;
    slm_status st = slm_s3_open_default(NULL, NULL, &s2);
    if (!st) st = slm_s3_list_uploads(s2, bucket, prefix, &l);
    if (!st) {
        *n = l.n;
        slm_s3_list_free(&l);
    }
    slm_s3_close(s2);
    return st;
}

static void stats(slm_s3 *s) {
    slm_s3_stats st;
    slm_s3_get_stats(s, &st);
    printf("stats requests=%lld retries=%lld throttled=%lld puts=%lld gets=%lld\n",
           (long long)st.requests, (long long)st.retries, (long long)st.throttled,
           (long long)st.puts, (long long)st.gets);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: s3_tool OP BUCKET ...\n");
        return 2;
    }
    const char *op = argv[1], *bucket = argv[2];
    slm_s3 *s = NULL;
    slm_status st = slm_s3_open_default(NULL, NULL, &s);
    if (st) {
        fprintf(stderr, "s3_tool: %s\n", slm_errmsg());
        return 1;
    }
    int rc = 0;
    if (strcmp(op, "mb") == 0) {
        st = slm_s3_create_bucket(s, bucket);
    } else if (strcmp(op, "put") == 0 && argc == 5) {
        st = slm_s3_put_file(s, bucket, argv[3], argv[4]);
        if (!st) stats(s);
    } else if (strcmp(op, "get") == 0 && argc == 5) {
        st = slm_s3_get_file(s, bucket, argv[3], argv[4]);
        if (!st) stats(s);
    } else if (strcmp(op, "range") == 0 && argc == 7) {
        int64_t off = atoll(argv[4]), len = atoll(argv[5]);
        char *buf = malloc((size_t)len + 1);
        slm_s3_range r = {.key = argv[3], .offset = off, .len = len, .dst = buf};
        st = slm_s3_get_ranges(s, bucket, &r, 1);
        if (!st) st = slm_file_write_atomic(argv[6], buf, (size_t)len);
        free(buf);
    } else if (strcmp(op, "head") == 0 && argc == 4) {
        int64_t size;
        bool found;
        st = slm_s3_head(s, bucket, argv[3], &size, &found);
        if (!st && !found) rc = 3;
        if (!st && found) printf("%lld\n", (long long)size);
    } else if (strcmp(op, "heads") == 0 && argc >= 4) {
        for (int i = 3; i < argc && !st; i++) {
            int64_t size;
            bool found;
            st = slm_s3_head(s, bucket, argv[i], &size, &found);
            if (!st) printf("%s %lld\n", argv[i], found ? (long long)size : -1LL);
            if (!st && !found) rc = 3;
        }
        if (!st) stats(s);
    } else if (strcmp(op, "ls") == 0 && argc == 4) {
        slm_s3_list l;
        st = slm_s3_list_objects(s, bucket, argv[3], NULL, &l);
        if (!st) {
            for (int64_t i = 0; i < l.n; i++)
                printf("%lld %s\n", (long long)l.obj[i].size, l.obj[i].key);
            slm_s3_list_free(&l);
            stats(s);
        }
    } else if (strcmp(op, "uploads") == 0 && argc == 4) {
        slm_s3_list l;
        st = slm_s3_list_uploads(s, bucket, argv[3], &l);
        if (!st) {
            for (int64_t i = 0; i < l.n; i++)
                printf("%s %s\n", l.obj[i].key, l.obj[i].upload_id);
            slm_s3_list_free(&l);
        }
    } else if (strcmp(op, "put-cancel") == 0 && argc == 6) {
        put_job j = {.s = s, .bucket = bucket, .key = argv[3], .path = argv[4]};
        int64_t parts = atoll(argv[5]);
        pthread_t th;
        pthread_create(&th, NULL, put_thread, &j);
        double until = slm_time_s() + 120;
        slm_s3_stats ss;
        do { // the stats are the other thread's counters: a racy read is good enough here
            usleep(20000);
            slm_s3_get_stats(s, &ss);
        } while (ss.puts < parts && slm_time_s() < until);
        int64_t before = -1;
        st = count_uploads(bucket, argv[3], &before);
        if (!st) printf("uploads before cancel: %lld\n", (long long)before);
        slm_s3_cancel(s, true);
        pthread_join(th, NULL);
        printf("put: %s\n", j.st ? j.msg : "completed");
        if (!st && j.st != SLM_E_INTERRUPTED) rc = 4;
    } else if (strcmp(op, "put-cancel-create") == 0 && argc == 7) {
        put_job j = {.s = s, .bucket = bucket, .key = argv[3], .path = argv[4]};
        pthread_t th;
        pthread_create(&th, NULL, put_thread, &j);
        double until = slm_time_s() + 60;
        while (access(argv[5], F_OK) != 0 && !atomic_load(&j.done) && slm_time_s() < until)
            usleep(10000);
        int64_t before = -1;
        st = count_uploads(bucket, argv[3], &before);
        if (!st) printf("uploads before cancel: %lld\n", (long long)before);
        slm_s3_cancel(s, true);
        until = slm_time_s() + 1.0;
        while (!atomic_load(&j.done) && slm_time_s() < until)
            usleep(10000);
        printf("put ended before the answer: %s\n", atomic_load(&j.done) ? "yes" : "no");
        FILE *f = fopen(argv[6], "w");
        if (f) fclose(f);
        pthread_join(th, NULL);
        printf("put: %s\n", j.st ? j.msg : "completed");
        if (!st && j.st != SLM_E_INTERRUPTED) rc = 4;
    } else if (strcmp(op, "rm") == 0 && argc == 4) {
        st = slm_s3_delete(s, bucket, argv[3]);
    } else if (strcmp(op, "wait") == 0 && argc == 4) {
        // Readiness: a signed ListObjectsV2 that answers 200, retried for up to SECONDS.
        double until = slm_time_s() + atof(argv[3]);
        for (;;) {
            slm_s3_list l;
            st = slm_s3_list_objects(s, bucket, "", NULL, &l);
            if (!st) {
                slm_s3_list_free(&l);
                break;
            }
            if (slm_time_s() > until) break;
            usleep(200000);
        }
    } else {
        fprintf(stderr, "s3_tool: bad arguments for %s\n", op);
        rc = 2;
    }
    if (st) {
        fprintf(stderr, "s3_tool: %s\n", slm_errmsg());
        rc = 1;
    }
    slm_s3_close(s);
    return rc;
}
