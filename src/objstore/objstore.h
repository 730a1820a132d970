// objstore: an S3 client (Amazon S3 and S3-compatible servers) over libcurl's multi interface,
// with its own AWS Signature Version 4 signer (OpenSSL SHA-256 / HMAC), credential and profile
// resolution (environment, ~/.aws/credentials, ~/.aws/config), bounded retries with exponential
// backoff and full jitter, and a per-client concurrency limit.
//
// Operations: PUT (single, or multipart with parallel parts and an abort on failure), GET of a
// whole object or of byte ranges (several at once), HEAD, ListObjectsV2 with pagination, DELETE.
// Addressing: path-style (ENDPOINT/BUCKET/KEY, the default for a custom endpoint) or
// virtual-host (BUCKET.HOST/KEY, the default for AWS).
//
// Why not curl's CURLOPT_AWS_SIGV4: in curl 7.88 it does not sort or percent-encode the query
// string, breaks on value-less parameters (`?uploads`) and omits x-amz-content-sha256.
// XML responses (ListObjectsV2, InitiateMultipartUpload, errors) are read with libxml2: a
// well-kept parser that handles entities, namespaces and CDATA correctly, outside our core.
//
// Threads: one slm_s3 client is used by one thread at a time (a background uploader opens its
// own). Messages never contain the secret key or the session token.
// This module knows nothing of checkpoints, datasets or MPI.
#ifndef SLM_OBJSTORE_H
#define SLM_OBJSTORE_H

#include "base/base.h"

// ---------------------------------------------------------------------------------------------
// URIs

// True if `s` starts with "s3://".
bool slm_s3_is_uri(const char *s);
// Splits "s3://BUCKET/PREFIX" into bucket and prefix (both owned by the caller; the prefix
// has no leading '/', keeps a trailing one, may be ""). Errors: SLM_E_ARG naming the URI
// (not s3://, empty or invalid bucket name).
slm_status slm_s3_uri_parse(const char *uri, char **bucket, char **prefix);

// ---------------------------------------------------------------------------------------------
// AWS Signature Version 4 (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv.html)

// One request to sign. Names and values are raw (not yet encoded); the signer encodes query
// names / values (RFC 3986 unreserved kept), sorts them, lowercases and sorts header names,
// trims values and collapses inner runs of spaces.
typedef struct slm_sigv4_req {
    const char *method;        // "GET", "PUT", ...
    const char *canonical_uri; // the URI path, already percent-encoded once ("/bucket/a%20b")
    const char *const *query;  // [2 * n_query] name, value ("" for value-less "?uploads")
    int n_query;
    const char *const *headers; // [2 * n_headers] name, value; every header that is signed
    int n_headers;
    const char *payload_sha256; // 64 lowercase hex digits, or "UNSIGNED-PAYLOAD"
    const char *amz_date;       // ISO 8601 basic "YYYYMMDDTHHMMSSZ"
    const char *region, *service;
    const char *access_key, *secret_key;
} slm_sigv4_req;

// Results of slm_sigv4_sign (owned; slm_sigv4_out_free releases them).
typedef struct slm_sigv4_out {
    slm_buf canonical_request; // the canonical request text
    slm_buf string_to_sign;
    slm_buf signed_headers;  // "host;x-amz-content-sha256;x-amz-date"
    char signature[65];      // lowercase hex HMAC-SHA256
    slm_buf authorization;   // the Authorization header value
    slm_buf canonical_query; // the sorted, encoded query string (also used in the URL)
} slm_sigv4_out;

// Signs `r`. Errors: SLM_E_ARG for a missing field or more than 64 headers / queries.
slm_status slm_sigv4_sign(const slm_sigv4_req *r, slm_sigv4_out *out);
void slm_sigv4_out_free(slm_sigv4_out *o);
// Percent-encodes `s` per SigV4 (A-Z a-z 0-9 - _ . ~ kept; '/' kept when keep_slash), appends.
void slm_sigv4_uri_encode(slm_buf *out, const char *s, size_t len, bool keep_slash);
// SHA-256 of data as 64 lowercase hex digits into out[65].
void slm_sha256_hex(const void *data, size_t len, char out[65]);

// ---------------------------------------------------------------------------------------------
// Configuration and credentials

typedef enum { SLM_S3_ADDR_AUTO, SLM_S3_ADDR_PATH, SLM_S3_ADDR_VIRTUAL } slm_s3_addressing;

typedef struct slm_s3_config {
    char *endpoint;      // "http://127.0.0.1:8333", "https://s3.eu-west-1.amazonaws.com"
    char *region;        // signing region
    char *access_key;    // key id (may appear in messages)
    char *secret_key;    // never printed
    char *session_token; // NULL unless temporary credentials (sent as x-amz-security-token)
    char *profile;       // profile the credentials came from (NULL: environment)
    char *cred_source;   // "environment", "~/.aws/credentials [p]", ... (for messages)
    slm_s3_addressing addressing;
    int max_conns;         // concurrent requests per client (default 16, env SHARDLM_S3_MAX_CONNS)
    int max_attempts;      // attempts per request (default 8, env SHARDLM_S3_MAX_ATTEMPTS)
    double retry_budget_s; // total time one request may spend retrying (default 120)
    double backoff_base_s; // first backoff ceiling (default 0.1 s), doubled per attempt
    double backoff_max_s;  // backoff ceiling (default 10 s)
    double timeout_s;      // one attempt's timeout (default 300 s; 10 s to connect)
    int stall_s; // an attempt that moves no byte for this long is aborted and retried (default
                 // 30, env SHARDLM_S3_STALL_S): a server that accepts and never answers
                 // costs stall_s per attempt, within retry_budget_s, not timeout_s
    size_t part_bytes;      // multipart part size (default 16 MiB, at least 5 MiB)
    size_t multipart_bytes; // objects at least this large go multipart (default 64 MiB)
    int list_page;          // ListObjectsV2 max-keys per page (default 1000)
    int create_wait_s; // after a cancel, the seconds a CreateMultipartUpload already sent may still
                       // take to return its UploadId, so that upload can be aborted (default 1,
                       // env SHARDLM_S3_CREATE_WAIT_S; 0: dropped at once)
} slm_s3_config;

// Parsed ~/.aws INI data for one profile (the fuzzed parser). Fields NULL when absent.
typedef struct slm_aws_profile {
    char *access_key, *secret_key, *session_token, *region, *endpoint_url, *addressing_style;
} slm_aws_profile;
// Reads profile `name` from the INI text `text` (credentials file style "[name]" when
// config_style is false, config file style "[profile name]" / "[default]" when true), filling
// fields not already set. Nested "s3 =" blocks give addressing_style / endpoint_url.
// Errors: SLM_E_FORMAT naming `label` and the line for a malformed line.
slm_status slm_aws_ini_parse(const char *text, size_t len, const char *name, bool config_style,
                             const char *label, slm_aws_profile *out);
void slm_aws_profile_free(slm_aws_profile *p);

// Resolves a configuration. `endpoint` / `region` (NULL: not given) win over the environment:
// endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's
// https://s3.REGION.amazonaws.com; region: AWS_REGION, AWS_DEFAULT_REGION, the profile's, else
// us-east-1; credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else
// profile AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials),
// then of AWS_CONFIG_FILE (~/.aws/config). Addressing: SHARDLM_S3_ADDRESSING (path|virtual),
// the profile's s3 addressing_style, else path for a custom endpoint and virtual for AWS.
// Errors: SLM_E_ARG when no credentials are found (naming every place looked at), SLM_E_FORMAT
// for a malformed file.
slm_status slm_s3_config_load(slm_s3_config *c, const char *endpoint, const char *region);
// Process-wide endpoint / region used by slm_s3_config_load when its arguments are NULL
// (tools/ sets them from --s3-endpoint / --s3-region once at start-up, before any thread).
// NULL leaves a value unset; the strings are copied.
void slm_s3_set_defaults(const char *endpoint, const char *region);
void slm_s3_config_free(slm_s3_config *c);

// ---------------------------------------------------------------------------------------------
// XML responses (libxml2)

typedef struct slm_s3_object {
    char *key;       // owned
    int64_t size;    // bytes (-1 in a ListMultipartUploads result)
    char etag[72];   // as sent, quotes removed
    char *upload_id; // ListMultipartUploads: the upload's UploadId (owned); else NULL
} slm_s3_object;

typedef struct slm_s3_list {
    slm_s3_object *obj; // [n], owned
    int64_t n, cap;
    char **prefixes; // common prefixes [n_prefixes] (with a delimiter)
    int64_t n_prefixes;
} slm_s3_list;
void slm_s3_list_free(slm_s3_list *l);

// Appends a ListObjectsV2 result page's <Contents> and <CommonPrefixes> to `l`; *truncated and
// *next_token (owned, NULL when absent) give the pagination state.
// Errors: SLM_E_FORMAT (not XML, not a ListBucketResult, a bad Size).
slm_status slm_s3_xml_list(const char *xml, size_t len, slm_s3_list *l, bool *truncated,
                           char **next_token);
// Appends a ListMultipartUploads result page's <Upload> entries (key + upload_id; size -1) to
// `l`; *truncated, *next_key and *next_upload_id (owned, NULL when absent) give the pagination
// state (NextKeyMarker / NextUploadIdMarker). Errors: SLM_E_FORMAT (not XML, not a
// ListMultipartUploadsResult, an <Upload> without <Key> or <UploadId>).
slm_status slm_s3_xml_uploads(const char *xml, size_t len, slm_s3_list *l, bool *truncated,
                              char **next_key, char **next_upload_id);
// Extracts the text of the first element named `name` (anywhere) into *out (owned; NULL if
// absent). Errors: SLM_E_FORMAT for text that is not XML.
slm_status slm_s3_xml_text(const char *xml, size_t len, const char *name, char **out);

// ---------------------------------------------------------------------------------------------
// The client

typedef struct slm_s3 slm_s3;

// Counters since the client was opened (for logs, tests and benchmarks).
typedef struct slm_s3_stats {
    int64_t requests;  // attempts sent (retries included)
    int64_t retries;   // attempts repeated after a retryable failure
    int64_t throttled; // 503 SlowDown / 429 answers among them
    int64_t puts;      // PUT requests (single objects and parts)
    int64_t gets;      // GET requests
    int64_t bytes_up, bytes_down;
} slm_s3_stats;

// Opens a client over a copy of `c`. Errors: SLM_E_NOMEM / SLM_E_IO if curl cannot start.
slm_status slm_s3_open(const slm_s3_config *c, slm_s3 **out);
// Resolves the configuration (slm_s3_config_load) and opens. Errors: those of both.
slm_status slm_s3_open_default(const char *endpoint, const char *region, slm_s3 **out);
void slm_s3_close(slm_s3 *s);
// Cancel switch, safe to call from any thread: while on, every request of `s` (running ones
// within ~0.2 s, the request loop's poll interval) ends with SLM_E_INTERRUPTED "cancelled"
// instead of waiting out its retries; a multipart upload so cut short is then aborted
// (AbortMultipartUpload: one attempt of at most 2 s, so no parts are left on a reachable
// server; a frozen one keeps them until a lifecycle rule cleans them). A CreateMultipartUpload
// already sent is given create_wait_s (1 s) more to answer, so an upload the server created is
// aborted too.
// Off again: requests run as before.
void slm_s3_cancel(slm_s3 *s, bool on);
void slm_s3_get_stats(const slm_s3 *s, slm_s3_stats *out);
// The configuration in use (borrowed).
const slm_s3_config *slm_s3_get_config(const slm_s3 *s);

// PUT of an in-memory object (borrowed). Errors (all operations): SLM_E_IO naming
// s3://BUCKET/KEY, the operation, the HTTP status with S3's error code and message, or the
// connection error, after the retries; 403s also name the access key id and region.
slm_status slm_s3_put(slm_s3 *s, const char *bucket, const char *key, const void *data, size_t len);
// One piece of an object assembled from several buffers (slm_s3_put_segments).
typedef struct slm_s3_seg {
    const void *data; // borrowed
    size_t len;       // bytes
} slm_s3_seg;
// PUT of the concatenation of `n` buffers as one object, without copying them: a single PUT
// below multipart_bytes, else a multipart upload whose parts may span buffers (as
// slm_s3_put_file). The checkpoint uploader sends a host's rank files as one object this way.
slm_status slm_s3_put_segments(slm_s3 *s, const char *bucket, const char *key,
                               const slm_s3_seg *segs, int n);
// PUT of a local file: single PUT below multipart_bytes, else a multipart upload with up to
// max_conns parts in flight (the file is mapped, not copied); on a failure the upload is
// aborted (AbortMultipartUpload) so no parts linger.
slm_status slm_s3_put_file(slm_s3 *s, const char *bucket, const char *key, const char *path);
// GET of a whole object into a new buffer (*data owned, NUL-terminated, *len bytes).
// *found false (and SLM_OK) for a 404 when found is non-NULL; an error otherwise.
slm_status slm_s3_get(slm_s3 *s, const char *bucket, const char *key, char **data, size_t *len,
                      bool *found);
// One byte range of an object (for slm_s3_get_ranges).
typedef struct slm_s3_range {
    const char *key;
    int64_t offset, len; // bytes
    void *dst;           // [len] bytes, filled (borrowed)
} slm_s3_range;
// GETs every range (Range: bytes=a-b), up to max_conns at once. Errors: SLM_E_IO naming the
// object; a short answer is an error ("truncated: got N of M bytes").
slm_status slm_s3_get_ranges(slm_s3 *s, const char *bucket, const slm_s3_range *r, int n);
// GET of a whole object into a local file (written to PATH.tmp.PID, fsynced, renamed).
slm_status slm_s3_get_file(slm_s3 *s, const char *bucket, const char *key, const char *path);
// HEAD: *size (bytes) and *found (false for 404, SLM_OK). A 404 HEAD has no body, so it is
// followed by one ListObjectsV2 of the bucket (once per client and bucket): a missing bucket
// is an error (SLM_E_IO, NoSuchBucket naming the bucket and the endpoint), not *found false.
slm_status slm_s3_head(slm_s3 *s, const char *bucket, const char *key, int64_t *size, bool *found);
// ListObjectsV2 of every key under `prefix` (all pages), into *out (caller frees with
// slm_s3_list_free). `delimiter` NULL for a flat listing.
slm_status slm_s3_list_objects(slm_s3 *s, const char *bucket, const char *prefix,
                               const char *delimiter, slm_s3_list *out);
// ListMultipartUploads (GET BUCKET?uploads) of every in-progress multipart upload under
// `prefix` (all pages), into *out: obj[i].key and obj[i].upload_id. For tests and clean-up.
slm_status slm_s3_list_uploads(slm_s3 *s, const char *bucket, const char *prefix, slm_s3_list *out);
// DELETE (a missing key is not an error, as in S3).
slm_status slm_s3_delete(slm_s3 *s, const char *bucket, const char *key);
// PUT of a bucket (CreateBucket; "already owned by you" is fine). For tests and set-up.
slm_status slm_s3_create_bucket(slm_s3 *s, const char *bucket);

#endif
