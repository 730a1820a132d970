// s3:// URIs, ~/.aws INI files (credentials and config profiles) and the client configuration
// resolution order (see objstore.h).
#include "objstore/objstore.h"

#include <stdlib.h>
#include <string.h>

bool slm_s3_is_uri(const char *s) {
    return s && strncmp(s, "s3://", 5) == 0;
}

slm_status slm_s3_uri_parse(const char *uri, char **bucket, char **prefix) {
    *bucket = *prefix = NULL;
    if (!slm_s3_is_uri(uri))
        return slm_fail(SLM_E_ARG, "%s: not an s3:// URI (expected s3://BUCKET/PREFIX)", uri);
    const char *b = uri + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    // S3 bucket names: 3-63 characters of lowercase letters, digits, '.', '-'.
    if (bl < 3 || bl > 63)
        return slm_fail(SLM_E_ARG, "%s: bucket name must have 3 to 63 characters", uri);
    for (size_t i = 0; i < bl; i++) {
        char ch = b[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
            return slm_fail(SLM_E_ARG,
                            "%s: bucket name may hold only a-z, 0-9, '.' and '-' (found '%c')", uri,
                            ch);
    }
    *bucket = slm_xmalloc(bl + 1);
    memcpy(*bucket, b, bl);
    (*bucket)[bl] = 0;
    const char *p = slash ? slash + 1 : "";
    while (*p == '/')
        p++;
    *prefix = slm_xstrdup(p);
    return SLM_OK;
}

void slm_aws_profile_free(slm_aws_profile *p) {
    if (!p) return;
    free(p->access_key);
    free(p->secret_key);
    free(p->session_token);
    free(p->region);
    free(p->endpoint_url);
    free(p->addressing_style);
    memset(p, 0, sizeof *p);
}

static char *dup_range(const char *a, const char *b) {
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
        b--;
    char *s = slm_xmalloc((size_t)(b - a) + 1);
    memcpy(s, a, (size_t)(b - a));
    s[b - a] = 0;
    return s;
}

static void set_once(char **field, char *v) {
    if (*field)
        free(v);
    else
        *field = v;
}

// INI as the AWS CLI reads it: "[section]" lines, "key = value" lines, '#' / ';' comments,
// and nested blocks ("s3 =" followed by indented "key = value" lines).
slm_status slm_aws_ini_parse(const char *text, size_t len, const char *name, bool config_style,
                             const char *label, slm_aws_profile *out) {
    const char *p = text, *end = text + len;
    bool in_section = false, in_s3 = false;
    int line_no = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line_no++;
        bool indented = p < le && (*p == ' ' || *p == '\t');
        const char *s = p;
        while (s < le && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s == le || *s == '#' || *s == ';') {
            p = nl ? nl + 1 : end;
            continue;
        }
        if (memchr(s, 0, (size_t)(le - s)))
            return slm_fail(SLM_E_FORMAT, "%s:%d: NUL byte in line", label, line_no);
        if (*s == '[') {
            const char *close = memchr(s, ']', (size_t)(le - s));
            if (!close)
                return slm_fail(SLM_E_FORMAT, "%s:%d: section header without ']'", label, line_no);
            char *sec = dup_range(s + 1, close);
            const char *sname = sec;
            if (config_style && strncmp(sec, "profile ", 8) == 0) {
                sname = sec + 8;
                while (*sname == ' ')
                    sname++;
            }
            in_section = strcmp(sname, name) == 0;
            in_s3 = false;
            free(sec);
            p = nl ? nl + 1 : end;
            continue;
        }
        const char *eq = memchr(s, '=', (size_t)(le - s));
        if (!eq)
            return slm_fail(SLM_E_FORMAT, "%s:%d: expected 'key = value' or '[section]'", label,
                            line_no);
        if (in_section) {
            char *k = dup_range(s, eq);
            char *v = dup_range(eq + 1, le);
            if (!indented) in_s3 = false;
            if (!indented && strcmp(k, "s3") == 0 && !*v) {
                in_s3 = true;
                free(v);
            } else if (indented && in_s3) {
                if (strcmp(k, "addressing_style") == 0)
                    set_once(&out->addressing_style, v);
                else if (strcmp(k, "endpoint_url") == 0)
                    set_once(&out->endpoint_url, v);
                else
                    free(v);
            } else if (strcmp(k, "aws_access_key_id") == 0) {
                set_once(&out->access_key, v);
            } else if (strcmp(k, "aws_secret_access_key") == 0) {
                set_once(&out->secret_key, v);
            } else if (strcmp(k, "aws_session_token") == 0) {
                set_once(&out->session_token, v);
            } else if (strcmp(k, "region") == 0) {
                set_once(&out->region, v);
            } else if (strcmp(k, "endpoint_url") == 0) {
                set_once(&out->endpoint_url, v);
            } else {
                free(v);
            }
            free(k);
        }
        p = nl ? nl + 1 : end;
    }
    return SLM_OK;
}

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *home_file(const char *env, const char *rel) {
    const char *v = env_nonempty(env);
    if (v) return slm_xstrdup(v);
    const char *home = env_nonempty("HOME");
    if (!home) return NULL;
    return slm_path_join(home, rel);
}

static slm_status read_profile(const char *path, const char *name, bool config_style,
                               slm_aws_profile *p) {
    if (!path || !slm_is_file(path)) return SLM_OK;
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &text, &len);
    if (st) return st;
    st = slm_aws_ini_parse(text, len, name, config_style, path, p);
    free(text);
    return st;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = env_nonempty(name);
    if (!v) return dflt;
    char *e = NULL;
    long x = strtol(v, &e, 10);
    if (*e || x < lo || x > hi) {
        slm_warn("%s=%s ignored (expected an integer in [%d, %d])", name, v, lo, hi);
        return dflt;
    }
    return (int)x;
}

static char *g_endpoint, *g_region;

void slm_s3_set_defaults(const char *endpoint, const char *region) {
    if (endpoint) {
        free(g_endpoint);
        g_endpoint = slm_xstrdup(endpoint);
    }
    if (region) {
        free(g_region);
        g_region = slm_xstrdup(region);
    }
}

void slm_s3_config_free(slm_s3_config *c) {
    if (!c) return;
    free(c->endpoint);
    free(c->region);
    free(c->access_key);
    if (c->secret_key) memset(c->secret_key, 0, strlen(c->secret_key));
    free(c->secret_key);
    if (c->session_token) memset(c->session_token, 0, strlen(c->session_token));
    free(c->session_token);
    free(c->profile);
    free(c->cred_source);
    memset(c, 0, sizeof *c);
}

slm_status slm_s3_config_load(slm_s3_config *c, const char *endpoint, const char *region) {
    memset(c, 0, sizeof *c);
    if (!endpoint) endpoint = g_endpoint;
    if (!region) region = g_region;
    const char *pname = env_nonempty("AWS_PROFILE");
    if (!pname) pname = "default";
    char *cred_path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    char *conf_path = home_file("AWS_CONFIG_FILE", ".aws/config");
    slm_aws_profile cp = {0}, fp = {0};
    slm_status st = read_profile(cred_path, pname, false, &cp);
    if (!st) st = read_profile(conf_path, pname, true, &fp);
    if (st) goto out;

    if (env_nonempty("AWS_ACCESS_KEY_ID") && env_nonempty("AWS_SECRET_ACCESS_KEY")) {
        c->access_key = slm_xstrdup(getenv("AWS_ACCESS_KEY_ID"));
        c->secret_key = slm_xstrdup(getenv("AWS_SECRET_ACCESS_KEY"));
        if (env_nonempty("AWS_SESSION_TOKEN"))
            c->session_token = slm_xstrdup(getenv("AWS_SESSION_TOKEN"));
        c->cred_source = slm_xstrdup("environment (AWS_ACCESS_KEY_ID)");
    } else {
        slm_aws_profile *src = cp.access_key && cp.secret_key   ? &cp
                               : fp.access_key && fp.secret_key ? &fp
                                                                : NULL;
        if (!src) {
            st = slm_fail(SLM_E_ARG,
                          "S3: no credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY unset "
                          "and profile [%s] has no aws_access_key_id + aws_secret_access_key in "
                          "%s or %s; HINT: export them or set AWS_PROFILE",
                          pname, cred_path ? cred_path : "~/.aws/credentials",
                          conf_path ? conf_path : "~/.aws/config");
            goto out;
        }
        c->access_key = slm_xstrdup(src->access_key);
        c->secret_key = slm_xstrdup(src->secret_key);
        if (src->session_token) c->session_token = slm_xstrdup(src->session_token);
        c->profile = slm_xstrdup(pname);
        slm_buf b = {0};
        slm_buf_appendf(&b, "%s [%s]", src == &cp ? cred_path : conf_path, pname);
        c->cred_source = b.data;
    }
    const char *rg = region && *region                    ? region
                     : env_nonempty("AWS_REGION")         ? env_nonempty("AWS_REGION")
                     : env_nonempty("AWS_DEFAULT_REGION") ? env_nonempty("AWS_DEFAULT_REGION")
                     : fp.region                          ? fp.region
                                                          : "us-east-1";
    c->region = slm_xstrdup(rg);
    const char *ep = endpoint && *endpoint                 ? endpoint
                     : env_nonempty("AWS_ENDPOINT_URL_S3") ? env_nonempty("AWS_ENDPOINT_URL_S3")
                     : env_nonempty("AWS_ENDPOINT_URL")    ? env_nonempty("AWS_ENDPOINT_URL")
                     : fp.endpoint_url                     ? fp.endpoint_url
                                                           : NULL;
    bool custom = ep != NULL;
    if (ep) {
        if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) {
            st = slm_fail(SLM_E_ARG, "S3 endpoint %s: expected http://HOST[:PORT] or https://...",
                          ep);
            goto out;
        }
        c->endpoint = slm_xstrdup(ep);
        size_t n = strlen(c->endpoint);
        while (n > 8 && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = 0;
    } else {
        slm_buf b = {0};
        slm_buf_appendf(&b, "https://s3.%s.amazonaws.com", c->region);
        c->endpoint = b.data;
    }
    const char *as = env_nonempty("SHARDLM_S3_ADDRESSING");
    if (!as) as = fp.addressing_style;
    if (as && strcmp(as, "path") == 0)
        c->addressing = SLM_S3_ADDR_PATH;
    else if (as && strcmp(as, "virtual") == 0)
        c->addressing = SLM_S3_ADDR_VIRTUAL;
    else
        c->addressing = custom ? SLM_S3_ADDR_PATH : SLM_S3_ADDR_VIRTUAL;
    c->max_conns = env_int("SHARDLM_S3_MAX_CONNS", 16, 1, 256);
    c->max_attempts = env_int("SHARDLM_S3_MAX_ATTEMPTS", 8, 1, 100);
    c->retry_budget_s = env_int("SHARDLM_S3_RETRY_BUDGET_S", 120, 1, 86400);
    c->backoff_base_s = 0.1;
    c->backoff_max_s = 10.0;
    c->timeout_s = 300.0;
    c->stall_s = env_int("SHARDLM_S3_STALL_S", 30, 1, 3600);
    c->part_bytes = (size_t)env_int("SHARDLM_S3_PART_MIB", 16, 5, 4096) << 20;
    c->multipart_bytes = (size_t)env_int("SHARDLM_S3_MULTIPART_MIB", 64, 5, 1 << 20) << 20;
    c->list_page = env_int("SHARDLM_S3_LIST_PAGE", 1000, 1, 1000);
    c->create_wait_s = env_int("SHARDLM_S3_CREATE_WAIT_S", 1, 0, 600);
out:
    slm_aws_profile_free(&cp);
    slm_aws_profile_free(&fp);
    free(cred_path);
    free(conf_path);
    if (st) slm_s3_config_free(c);
    return st;
}
