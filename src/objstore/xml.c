// S3's XML answers through libxml2 (no network access, no entity expansion beyond the five
// predefined ones, no DTD loading): ListObjectsV2 and ListMultipartUploads pages, single element
// texts (UploadId, error Code / Message).
#include "objstore/objstore.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdlib.h>
#include <string.h>

static xmlDocPtr parse(const char *xml, size_t len) {
    if (len > (size_t)1 << 30) return NULL;
    return xmlReadMemory(xml, (int)len, "s3.xml", NULL,
                         XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static bool is(const xmlNode *n, const char *name) {
    return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static char *text_of(const xmlNode *n) {
    xmlChar *t = xmlNodeGetContent(n);
    char *s = slm_xstrdup(t ? (const char *)t : "");
    xmlFree(t);
    return s;
}

static const xmlNode *find(const xmlNode *n, const char *name) {
    for (; n; n = n->next) {
        if (is(n, name)) return n;
        const xmlNode *c = find(n->children, name);
        if (c) return c;
    }
    return NULL;
}

// Parses an S3 answer of operation `op` whose root element must be <root_name>; on success *d
// owns the document (xmlFreeDoc). Errors name the operation and what came instead.
static slm_status open_answer(const char *xml, size_t len, const char *op, const char *root_name,
                              xmlDocPtr *d, const xmlNode **root) {
    *d = parse(xml, len);
    if (!*d) return slm_fail(SLM_E_FORMAT, "%s answer is not XML (%zu bytes)", op, len);
    *root = xmlDocGetRootElement(*d);
    if (*root && is(*root, root_name)) return SLM_OK;
    slm_status st = slm_fail(SLM_E_FORMAT, "%s answer: root element is <%s>, expected <%s>", op,
                             *root ? (const char *)(*root)->name : "(none)", root_name);
    xmlFreeDoc(*d);
    *d = NULL;
    return st;
}

// <IsTruncated>true</IsTruncated>
static bool is_true(const xmlNode *n) {
    char *t = text_of(n);
    bool v = strcmp(t, "true") == 0;
    free(t);
    return v;
}

// Appends `o` to l->obj (takes ownership of its strings).
static void list_push(slm_s3_list *l, slm_s3_object o) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->obj = slm_xrealloc(l->obj, (size_t)l->cap * sizeof *l->obj);
    }
    l->obj[l->n++] = o;
}

slm_status slm_s3_xml_text(const char *xml, size_t len, const char *name, char **out) {
    *out = NULL;
    xmlDocPtr d = parse(xml, len);
    if (!d) return slm_fail(SLM_E_FORMAT, "S3 answer is not XML (%zu bytes)", len);
    const xmlNode *n = find(xmlDocGetRootElement(d), name);
    if (n) *out = text_of(n);
    xmlFreeDoc(d);
    return SLM_OK;
}

void slm_s3_list_free(slm_s3_list *l) {
    if (!l) return;
    for (int64_t i = 0; i < l->n; i++) {
        free(l->obj[i].key);
        free(l->obj[i].upload_id);
    }
    free(l->obj);
    for (int64_t i = 0; i < l->n_prefixes; i++)
        free(l->prefixes[i]);
    free(l->prefixes);
    memset(l, 0, sizeof *l);
}

// *dst = the text of n (a string it owns), freeing what *dst held.
static void take_text(char **dst, const xmlNode *n) {
    free(*dst);
    *dst = text_of(n);
}

// "ETag" without its quotes, truncated to fit o->etag.
static void set_etag(slm_s3_object *o, const xmlNode *c) {
    char *t = text_of(c);
    const char *s = t;
    if (*s == '"') s++;
    size_t k = strlen(s);
    if (k && s[k - 1] == '"') k--;
    if (k >= sizeof o->etag) k = sizeof o->etag - 1;
    memcpy(o->etag, s, k);
    o->etag[k] = 0;
    free(t);
}

// One <Contents> of a ListObjectsV2 answer into *o (o->key owned; nothing on error).
static slm_status parse_contents(const xmlNode *n, slm_s3_object *o) {
    *o = (slm_s3_object){0};
    o->size = -1;
    for (const xmlNode *c = n->children; c; c = c->next) {
        if (is(c, "Key")) {
            take_text(&o->key, c);
        } else if (is(c, "Size")) {
            char *t = text_of(c), *e = NULL;
            long long v = strtoll(t, &e, 10);
            bool okv = *t && !*e && v >= 0;
            free(t);
            if (!okv) {
                free(o->key);
                return slm_fail(SLM_E_FORMAT, "ListObjectsV2 answer: bad <Size>");
            }
            o->size = v;
        } else if (is(c, "ETag")) {
            set_etag(o, c);
        }
    }
    if (!o->key || o->size < 0) {
        free(o->key);
        return slm_fail(SLM_E_FORMAT, "ListObjectsV2 answer: <Contents> without <Key> or "
                                      "<Size>");
    }
    return SLM_OK;
}

slm_status slm_s3_xml_list(const char *xml, size_t len, slm_s3_list *l, bool *truncated,
                           char **next_token) {
    *truncated = false;
    *next_token = NULL;
    xmlDocPtr d;
    const xmlNode *root;
    slm_status st = open_answer(xml, len, "ListObjectsV2", "ListBucketResult", &d, &root);
    if (st) return st;
    for (const xmlNode *n = root->children; n && !st; n = n->next) {
        if (is(n, "IsTruncated")) {
            *truncated = is_true(n);
        } else if (is(n, "NextContinuationToken")) {
            take_text(next_token, n);
        } else if (is(n, "Contents")) {
            slm_s3_object o;
            st = parse_contents(n, &o);
            if (!st) list_push(l, o);
        } else if (is(n, "CommonPrefixes")) {
            const xmlNode *p = find(n->children, "Prefix");
            if (p) {
                l->prefixes =
                    slm_xrealloc(l->prefixes, (size_t)(l->n_prefixes + 1) * sizeof(char *));
                l->prefixes[l->n_prefixes++] = text_of(p);
            }
        }
    }
    if (st) {
        free(*next_token);
        *next_token = NULL;
    }
    xmlFreeDoc(d);
    return st;
}

slm_status slm_s3_xml_uploads(const char *xml, size_t len, slm_s3_list *l, bool *truncated,
                              char **next_key, char **next_upload_id) {
    *truncated = false;
    *next_key = *next_upload_id = NULL;
    xmlDocPtr d;
    const xmlNode *root;
    slm_status st =
        open_answer(xml, len, "ListMultipartUploads", "ListMultipartUploadsResult", &d, &root);
    if (st) return st;
    for (const xmlNode *n = root->children; n && !st; n = n->next) {
        if (is(n, "IsTruncated")) {
            *truncated = is_true(n);
        } else if (is(n, "NextKeyMarker")) {
            take_text(next_key, n);
        } else if (is(n, "NextUploadIdMarker")) {
            take_text(next_upload_id, n);
        } else if (is(n, "Upload")) {
            slm_s3_object o = {0};
            o.size = -1;
            for (const xmlNode *c = n->children; c; c = c->next)
                if (is(c, "Key"))
                    take_text(&o.key, c);
                else if (is(c, "UploadId"))
                    take_text(&o.upload_id, c);
            if (!o.key || !o.upload_id) {
                free(o.key);
                free(o.upload_id);
                st = slm_fail(SLM_E_FORMAT,
                              "ListMultipartUploads answer: <Upload> without <Key> or <UploadId>");
            } else {
                list_push(l, o);
            }
        }
    }
    if (st) {
        free(*next_key);
        free(*next_upload_id);
        *next_key = *next_upload_id = NULL;
    }
    xmlFreeDoc(d);
    return st;
}
