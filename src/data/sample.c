// Instruction samples: the JSONL records of `prep --format prompt-completion|chat`, chat
// templates (built-in llama2 / llama3, or a template file) and their encoding into token ids
// with per-token flags (SLM_TOKF_TARGET on completion / assistant tokens, SLM_TOKF_START on the
// sample's first token). Format and rules: docs/formats.md "Instruction data".
//
// A rendered sample is a list of segments, each encoded on its own (so a mask boundary is always
// a token boundary): template text (special tokens in it are matched), message content (never
// matched: a "<|eot_id|>" typed by a user stays text) or a bare token id (BOS / EOS). A segment
// is a target when it is part of an assistant reply (content and the reply's closing marker).
#include "data/data.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slm_xstrndup(const char *s, size_t n) {
    char *p = slm_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

#define TPL_LLAMA2 1
#define TPL_GENERIC 2

struct slm_chat_template {
    int kind;
    char *name;
    char *begin;                 // generic: text at the start of every sample (may be "")
    char *prefix[3], *suffix[3]; // generic, per role: text around the content (NULL: role refused)
    bool trim;                   // strip leading / trailing whitespace of every content
    bool check_special;          // built-in: each special marker must be one token of the tokenizer
    const char *const *markers;  // built-in: those markers (NULL-terminated; static)
    const char *stop;            // built-in: the marker that ends a reply (static; NULL: none)
};

static const char *const k_llama3_markers[] = {"<|begin_of_text|>", "<|start_header_id|>",
                                               "<|end_header_id|>", "<|eot_id|>", NULL};
static const char *const k_chatml_markers[] = {"<|im_start|>", "<|im_end|>", NULL};

static const char *const k_roles[3] = {"system", "user", "assistant"};

const char *slm_chat_role_name(int role) {
    return role >= 0 && role < 3 ? k_roles[role] : "?";
}

void slm_chat_template_free(slm_chat_template *t) {
    if (!t) return;
    free(t->name);
    free(t->begin);
    for (int r = 0; r < 3; r++) {
        free(t->prefix[r]);
        free(t->suffix[r]);
    }
    free(t);
}

const char *slm_chat_template_name(const slm_chat_template *t) {
    return t->name;
}

// A "{name}" placeholder in template text s other than the one {content} (which the caller has
// cut out): only {content} is substituted, so "{role}" or Jinja's "{{ content }}" would be
// written literally into every sample. Returns the first such "{" or NULL.
static const char *other_placeholder(const char *s, size_t *len) {
    for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{')) {
        const char *q = p + 1;
        while (*q == '{' || *q == ' ')
            q++;
        const char *id = q;
        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
               *q == '_' || *q == '.' || *q == '[' || *q == ']' || *q == '\'')
            q++;
        if (q == id) continue;
        while (*q == ' ')
            q++;
        if (*q == '}') {
            while (q[1] == '}')
                q++;
            *len = (size_t)(q - p) + 1;
            return p;
        }
    }
    return NULL;
}

// Splits "PREFIX{content}SUFFIX" of role r into the template; exactly one "{content}", and no
// other placeholder ("{role}", "{{content}}") around it.
static slm_status split_role(slm_chat_template *t, int r, const char *s, const char *what) {
    const char *p = strstr(s, "{content}");
    if (!p || strstr(p + 9, "{content}"))
        return slm_fail(SLM_E_FORMAT,
                        "%s: field \"%s\": expected exactly one {content} in it (the only "
                        "placeholder; Jinja's {{ content }} is not one)",
                        what, k_roles[r]);
    if (p > s && p[-1] == '{' && p[9] == '}')
        return slm_fail(SLM_E_FORMAT,
                        "%s: field \"%s\": {{content}} would write the braces around every "
                        "content; the placeholder is {content} (single braces)",
                        what, k_roles[r]);
    t->prefix[r] = slm_xstrndup(s, (size_t)(p - s));
    t->suffix[r] = slm_xstrdup(p + 9);
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        const char *o = other_placeholder(k ? t->suffix[r] : t->prefix[r], &n);
        if (o)
            return slm_fail(SLM_E_FORMAT,
                            "%s: field \"%s\": unknown placeholder \"%.*s\"; only {content} is "
                            "substituted (write the role's text itself, e.g. \"%s: {content}\")",
                            what, k_roles[r], (int)(n > 40 ? 40 : n), o, k_roles[r]);
    }
    return SLM_OK;
}

// Template file: {"begin": "...", "system": "...{content}...", "user": ..., "assistant": ...,
// "trim": bool}; "user" and "assistant" required.
static slm_status parse_template_text(const char *path, const char *text, size_t len,
                                      slm_chat_template *t) {
    slm_status st = SLM_OK;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return slm_fail(SLM_E_FORMAT,
                        "--chat-template %s: not a JSON object (expected {\"begin\": ..., "
                        "\"system\": ..., \"user\": ..., \"assistant\": ..., \"trim\": ...}; "
                        "or use llama2 / llama3)",
                        path);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (strcmp(k, "begin") && strcmp(k, "system") && strcmp(k, "user") &&
            strcmp(k, "assistant") && strcmp(k, "trim")) {
            st = slm_fail(SLM_E_FORMAT,
                          "--chat-template %s: unknown field \"%.40s\" (known: begin, system, "
                          "user, assistant, trim)",
                          path, k);
            break;
        }
        if (!strcmp(k, "trim") ? !cJSON_IsBool(it) : !cJSON_IsString(it)) {
            st = slm_fail(SLM_E_FORMAT, "--chat-template %s: field \"%s\" must be a %s", path, k,
                          strcmp(k, "trim") ? "string" : "boolean");
            break;
        }
    }
    if (!st) {
        it = cJSON_GetObjectItemCaseSensitive(root, "begin");
        t->begin = slm_xstrdup(it ? it->valuestring : "");
        size_t n = 0;
        const char *o = other_placeholder(t->begin, &n);
        if (o)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: field \"begin\": unknown placeholder \"%.*s\" (begin is written "
                          "as is; no placeholder is substituted in it)",
                          path, (int)(n > 40 ? 40 : n), o);
        t->trim = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "trim"));
        for (int r = 0; r < 3 && !st; r++) {
            it = cJSON_GetObjectItemCaseSensitive(root, k_roles[r]);
            if (!it && r > 0)
                st = slm_fail(SLM_E_FORMAT, "--chat-template %s: missing field \"%s\"", path,
                              k_roles[r]);
            else if (it)
                st = split_role(t, r, it->valuestring, path);
        }
    }
    cJSON_Delete(root);
    return st;
}

slm_status slm_chat_template_parse(const char *text, size_t len, const char *name,
                                   slm_chat_template **out) {
    *out = NULL;
    slm_chat_template *t = slm_xcalloc(1, sizeof *t);
    t->kind = TPL_GENERIC;
    const char *slash = strrchr(name, '/');
    t->name = slm_xstrdup(slash ? slash + 1 : name);
    slm_status st = parse_template_text(name, text, len, t);
    if (st) {
        slm_chat_template_free(t);
        return st;
    }
    *out = t;
    return SLM_OK;
}

slm_status slm_chat_template_load_opt(const char *spec, const char *opt, slm_chat_template **out) {
    slm_status st = slm_chat_template_load(spec, out);
    const char *ours = "--chat-template";
    if (!st || strncmp(slm_errmsg(), ours, strlen(ours))) return st;
    char *msg = slm_xstrdup(slm_errmsg() + strlen(ours)); // the message after the option name
    st = slm_fail(st, "%s%s", opt, msg);
    free(msg);
    return st;
}

// A built-in template of the generic kind: `begin`, per role prefix_fmt (with %s for the role
// name) and `suffix`; `markers` must be special tokens of the tokenizer, `stop` ends a reply.
static void builtin_generic(slm_chat_template *t, const char *name, const char *begin,
                            const char *prefix_fmt, const char *suffix, const char *const *markers,
                            const char *stop) {
    t->kind = TPL_GENERIC;
    t->name = slm_xstrdup(name);
    t->begin = slm_xstrdup(begin);
    for (int r = 0; r < 3; r++) {
        char b[96];
        snprintf(b, sizeof b, prefix_fmt, k_roles[r]);
        t->prefix[r] = slm_xstrdup(b);
        t->suffix[r] = slm_xstrdup(suffix);
    }
    t->check_special = true;
    t->markers = markers;
    t->stop = stop;
}

slm_status slm_chat_template_load(const char *spec, slm_chat_template **out) {
    *out = NULL;
    slm_chat_template *t = slm_xcalloc(1, sizeof *t);
    slm_status st = SLM_OK;
    if (!strcmp(spec, "llama2")) {
        // Meta's Llama-2 chat form (as transformers' llama-2 template): <s>[INST] <<SYS>>\n
        // SYSTEM\n<</SYS>>\n\nUSER [/INST] ASSISTANT </s> per exchange, the reply between spaces
        // (render_llama2).
        t->kind = TPL_LLAMA2;
        t->name = slm_xstrdup("llama2");
        t->trim = true;
    } else if (!strcmp(spec, "llama3")) {
        // Llama 3 header form: <|begin_of_text|>, then per message
        // <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>.
        builtin_generic(t, "llama3", "<|begin_of_text|>",
                        "<|start_header_id|>%s<|end_header_id|>\n\n", "<|eot_id|>",
                        k_llama3_markers, "<|eot_id|>");
        t->trim = true;
    } else if (!strcmp(spec, "chatml")) {
        // ChatML (Qwen, SmolLM2, ...): per message <|im_start|>ROLE\nCONTENT<|im_end|>\n, the
        // content as given (no trimming); a reply ends at <|im_end|>.
        builtin_generic(t, "chatml", "", "<|im_start|>%s\n", "<|im_end|>\n", k_chatml_markers,
                        "<|im_end|>");
    } else if (slm_is_file(spec)) {
        free(t);
        char *text = NULL;
        size_t len = 0;
        st = slm_file_read_all(spec, &text, &len);
        if (st) return slm_fail_wrap(st, "--chat-template %s", spec);
        st = slm_chat_template_parse(text, len, spec, out);
        free(text);
        return st;
    } else {
        st = slm_fail(SLM_E_ARG,
                      "--chat-template %s: not llama2, llama3, chatml or an existing template file",
                      spec);
    }
    if (st) {
        slm_chat_template_free(t);
        return st;
    }
    *out = t;
    return SLM_OK;
}

// --- Parsing ----------------------------------------------------------------------------------

void slm_sample_free(slm_sample *s) {
    for (int i = 0; i < s->n_msgs; i++)
        free(s->msgs[i].content);
    free(s->msgs);
    memset(s, 0, sizeof *s);
}

static void add_msg(slm_sample *s, int role, const char *content) {
    s->msgs = slm_xrealloc(s->msgs, (size_t)(s->n_msgs + 1) * sizeof *s->msgs);
    s->msgs[s->n_msgs].role = role;
    s->msgs[s->n_msgs].content = slm_xstrdup(content);
    s->n_msgs++;
}

static int role_of(const char *r) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(r, k_roles[i])) return i;
    return -1;
}

// A string field of o, or NULL with a reason in why.
static const char *str_field(const cJSON *o, const char *k, char *why, size_t cap,
                             const char *where) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x)
        snprintf(why, cap, "%sno \"%s\" field", where, k);
    else if (!cJSON_IsString(x) || !x->valuestring)
        snprintf(why, cap, "%sfield \"%s\" is not a string", where, k);
    else
        return x->valuestring;
    return NULL;
}

bool slm_sample_from_json(const cJSON *j, int format, slm_sample *s, char *why, size_t cap) {
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(j)) {
        snprintf(why, cap, "not a JSON object");
        return false;
    }
    if (format == SLM_PREP_PROMPT_COMPLETION) {
        const char *p = str_field(j, "prompt", why, cap, "");
        const char *c = p ? str_field(j, "completion", why, cap, "") : NULL;
        if (!c) return false;
        s->prompt_completion = true;
        add_msg(s, 1, p);
        add_msg(s, 2, c);
        return true;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!m) {
        snprintf(why, cap, "no \"messages\" field");
        return false;
    }
    if (!cJSON_IsArray(m)) {
        snprintf(why, cap, "field \"messages\" is not an array");
        return false;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        char where[48];
        snprintf(where, sizeof where, "messages[%d]: ", i);
        if (!cJSON_IsObject(e)) {
            snprintf(why, cap, "%snot an object", where);
            goto bad;
        }
        const char *r = str_field(e, "role", why, cap, where);
        const char *c = r ? str_field(e, "content", why, cap, where) : NULL;
        if (!c) goto bad;
        int role = role_of(r);
        if (role < 0) {
            snprintf(why, cap, "%srole \"%.40s\", expected system, user or assistant", where, r);
            goto bad;
        }
        if (role == 0 && i > 0) {
            snprintf(why, cap, "%sa system message is only allowed first", where);
            goto bad;
        }
        add_msg(s, role, c);
        i++;
    }
    if (s->n_msgs == 0) {
        snprintf(why, cap, "\"messages\" is empty");
        goto bad;
    }
    return true;
bad:
    slm_sample_free(s);
    return false;
}

// --- Rendering --------------------------------------------------------------------------------

static void add_seg(slm_sample_segs *g, char *text, int32_t id, bool target, bool special) {
    g->segs = slm_xrealloc(g->segs, (size_t)(g->n + 1) * sizeof *g->segs);
    g->segs[g->n++] = (slm_sample_seg){text, text ? strlen(text) : 0, id, target, special, false};
}

void slm_sample_segs_free(slm_sample_segs *g) {
    for (int i = 0; i < g->n; i++)
        free(g->segs[i].text);
    free(g->segs);
    memset(g, 0, sizeof *g);
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Copy of s, trimmed of ASCII whitespace at both ends when `trim` (Jinja's trim / Python strip).
static char *content_copy(const char *s, bool trim) {
    size_t n = strlen(s);
    if (!trim) return slm_xstrndup(s, n);
    size_t a = 0;
    while (a < n && is_ws(s[a]))
        a++;
    while (n > a && is_ws(s[n - 1]))
        n--;
    return slm_xstrndup(s + a, n - a);
}

static char *concat3(const char *a, const char *b, const char *c) {
    slm_buf x = {0};
    slm_buf_append(&x, a, strlen(a));
    slm_buf_append(&x, b, strlen(b));
    slm_buf_append(&x, c, strlen(c));
    slm_buf_append(&x, "", 1);
    return x.data;
}

// Llama-2: optional system message folded into the first user turn; user / assistant must
// alternate, starting with user. <s> and </s> are the tokenizer's BOS / EOS ids.
static bool render_llama2(const slm_sample *s, bool gen, int32_t bos, int32_t eos,
                          slm_sample_segs *g, char *why, size_t cap) {
    int i0 = s->n_msgs > 0 && s->msgs[0].role == 0 ? 1 : 0;
    for (int i = i0; i < s->n_msgs; i++) {
        const slm_chat_msg *m = &s->msgs[i];
        int want = (i - i0) % 2 == 0 ? 1 : 2;
        if (m->role != want) {
            snprintf(why, cap,
                     "messages[%d]: role %s, but the llama2 template needs user and assistant "
                     "to alternate, starting with user (after an optional system message)",
                     i, k_roles[m->role]);
            return false;
        }
        if (m->role == 1) {
            char *content;
            if (i == i0 && i0 == 1) {
                char *sys = concat3("<<SYS>>\n", s->msgs[0].content, "\n<</SYS>>\n\n");
                char *all = concat3(sys, m->content, "");
                content = content_copy(all, true);
                free(sys);
                free(all);
            } else {
                content = content_copy(m->content, true);
            }
            add_seg(g, NULL, bos, false, false);
            add_seg(g, concat3("[INST] ", content, " [/INST]"), -1, false, false);
            free(content);
        } else {
            // transformers' Llama-2 template and Meta's chat_completion: " " + reply.strip() +
            // " " then </s> (the trailing space is a token of its own before </s>)
            char *content = content_copy(m->content, true);
            add_seg(g, concat3(" ", content, " "), -1, true, false);
            g->segs[g->n - 1].joined = true;
            free(content);
            add_seg(g, NULL, eos, true, false);
        }
    }
    (void)gen; // the reply follows " [/INST]" directly: nothing to add for generation
    return true;
}

bool slm_sample_render(const slm_chat_template *t, const slm_sample *s, bool gen, int32_t bos,
                       int32_t eos, slm_sample_segs *g, char *why, size_t cap) {
    memset(g, 0, sizeof *g);
    bool ok = true;
    if (!t) { // prompt-completion without a template: [BOS] prompt completion [EOS]
        if (!s->prompt_completion) {
            snprintf(why, cap, "--format chat needs --chat-template");
            return false;
        }
        if (bos >= 0) add_seg(g, NULL, bos, false, false);
        add_seg(g, slm_xstrdup(s->msgs[0].content), -1, false, false);
        if (!gen) {
            add_seg(g, slm_xstrdup(s->msgs[1].content), -1, true, false);
            if (eos >= 0) add_seg(g, NULL, eos, true, false);
        }
        return true;
    }
    int n = s->n_msgs;
    if (gen && n > 0 && s->msgs[n - 1].role == 2) n--; // generation: the reply is to be written
    slm_sample cut = *s;
    cut.n_msgs = n;
    if (t->kind == TPL_LLAMA2) {
        ok = render_llama2(&cut, gen, bos, eos, g, why, cap);
    } else {
        if (t->begin[0]) add_seg(g, slm_xstrdup(t->begin), -1, false, true);
        for (int i = 0; i < n && ok; i++) {
            const slm_chat_msg *m = &s->msgs[i];
            if (!t->prefix[m->role]) {
                snprintf(why, cap, "messages[%d]: role %s is not in chat template %s", i,
                         k_roles[m->role], t->name);
                ok = false;
                break;
            }
            bool tg = m->role == 2;
            if (t->prefix[m->role][0]) add_seg(g, slm_xstrdup(t->prefix[m->role]), -1, false, true);
            add_seg(g, content_copy(m->content, t->trim), -1, tg, false);
            if (t->suffix[m->role][0]) add_seg(g, slm_xstrdup(t->suffix[m->role]), -1, tg, true);
        }
        if (ok && gen && t->prefix[2][0]) add_seg(g, slm_xstrdup(t->prefix[2]), -1, false, true);
    }
    if (!ok) slm_sample_segs_free(g);
    return ok;
}

// --- Encoding ---------------------------------------------------------------------------------

// A built-in template's markers (llama3, chatml) must each be one special token of the
// tokenizer (else the template would silently become plain text).
static slm_status check_markers(const slm_chat_template *t, const slm_tokenizer *tok) {
    const char *const *k_markers = t->markers;
    for (size_t i = 0; k_markers[i]; i++) {
        slm_ivec v = {0};
        slm_status st = slm_tokenizer_encode(tok, k_markers[i], strlen(k_markers[i]),
                                             SLM_ENC_ALLOW_SPECIAL, &v);
        bool one = !st && v.len == 1;
        slm_ivec_free(&v);
        if (st) return st;
        if (!one)
            return slm_fail(SLM_E_ARG,
                            "chat template %s needs the special token %s, which the tokenizer "
                            "does not have (use the model's own tokenizer, or a template file)",
                            t->name, k_markers[i]);
    }
    return SLM_OK;
}

slm_status slm_chat_template_check(const slm_chat_template *t, const slm_tokenizer *tok) {
    if (t && t->check_special) return check_markers(t, tok);
    if (t && t->kind == TPL_LLAMA2 &&
        (slm_tokenizer_bos_id(tok) < 0 || slm_tokenizer_eos_id(tok) < 0))
        return slm_fail(SLM_E_ARG, "chat template llama2 needs a tokenizer with BOS and EOS ids");
    return SLM_OK;
}

slm_status slm_sample_encode(const slm_sample_segs *g, const slm_tokenizer *tok, slm_ivec *ids,
                             slm_buf *flags) {
    size_t first = ids->len;
    for (int i = 0; i < g->n; i++) {
        const slm_sample_seg *sg = &g->segs[i];
        size_t before = ids->len;
        if (sg->id >= 0) {
            slm_ivec_push(ids, sg->id);
        } else if (sg->len) {
            bool drop =
                sg->joined && sg->text[0] == ' ' && slm_tokenizer_type(tok) == SLM_TOK_SPM_BPE;
            slm_status st = slm_tokenizer_encode(tok, sg->text + drop, sg->len - drop,
                                                 sg->special ? SLM_ENC_ALLOW_SPECIAL : 0, ids);
            if (st) return st;
        }
        uint8_t f = sg->target ? SLM_TOKF_TARGET : 0;
        for (size_t k = before; k < ids->len; k++)
            slm_buf_append(flags, &f, 1);
    }
    if (ids->len > first) flags->data[flags->len - (ids->len - first)] |= SLM_TOKF_START;
    return SLM_OK;
}

slm_status slm_chat_prompt_ids(const slm_chat_template *t, const slm_tokenizer *tok,
                               const char *system, const char *user, slm_ivec *ids,
                               int32_t *stop_id) {
    slm_status st = slm_chat_template_check(t, tok);
    if (st) return st;
    slm_sample s = {0};
    if (system) add_msg(&s, 0, system);
    add_msg(&s, 1, user);
    slm_sample_segs g;
    char why[256];
    bool ok = slm_sample_render(t, &s, true, slm_tokenizer_bos_id(tok), slm_tokenizer_eos_id(tok),
                                &g, why, sizeof why);
    slm_sample_free(&s);
    if (!ok) return slm_fail(SLM_E_ARG, "chat template %s: %s", t->name, why);
    slm_buf flags = {0};
    st = slm_sample_encode(&g, tok, ids, &flags);
    slm_buf_free(&flags);
    slm_sample_segs_free(&g);
    if (st) return st;
    *stop_id = slm_tokenizer_eos_id(tok);
    const char *end = t->stop ? t->stop : t->kind == TPL_GENERIC ? t->suffix[2] : NULL;
    if (end && *end) {
        slm_ivec v = {0};
        if (!slm_tokenizer_encode(tok, end, strlen(end), SLM_ENC_ALLOW_SPECIAL, &v) && v.len == 1)
            *stop_id = v.data[0];
        slm_ivec_free(&v);
    }
    return SLM_OK;
}

// --- Jinja ------------------------------------------------------------------------------------

// Appends `s` as a Jinja string literal: '...' with \\, \' and control characters escaped.
static void jinja_str(slm_buf *b, const char *s) {
    slm_buf_append(b, "'", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p == '\'')
            slm_buf_appendf(b, "\\%c", *p);
        else if (*p == '\n')
            slm_buf_append(b, "\\n", 2);
        else if (*p == '\r')
            slm_buf_append(b, "\\r", 2);
        else if (*p == '\t')
            slm_buf_append(b, "\\t", 2);
        else if (*p < 0x20)
            slm_buf_appendf(b, "\\x%02x", *p);
        else
            slm_buf_append(b, p, 1);
    }
    slm_buf_append(b, "'", 1);
}

// Every literal is a string expression between whitespace-trimming tags, so no text of the
// template itself is ever trimmed by Jinja's whitespace control.
char *slm_chat_template_to_jinja(const slm_chat_template *t) {
    slm_buf b = {0};
    if (t->kind == TPL_LLAMA2) {
        slm_buf_appendf(
            &b, "%s",
            "{%- if messages and messages[0]['role'] == 'system' -%}"
            "{%- set sys = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' -%}"
            "{%- set msgs = messages[1:] -%}"
            "{%- else -%}{%- set sys = '' -%}{%- set msgs = messages -%}{%- endif -%}"
            "{%- for m in msgs -%}"
            "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
            "{{- raise_exception('the llama2 template needs user and assistant to alternate, "
            "starting with user (after an optional system message)') -}}{%- endif -%}"
            "{%- if m['role'] == 'user' -%}"
            "{{- bos_token + '[INST] ' + ((sys + m['content']) if loop.first else m['content'])"
            " | trim + ' [/INST]' -}}"
            "{%- else -%}{{- ' ' + m['content'] | trim + ' ' + eos_token -}}{%- endif -%}"
            "{%- endfor -%}");
        slm_buf_append(&b, "", 1);
        return b.data;
    }
    const char *content = t->trim ? "message['content'] | trim" : "message['content']";
    if (t->begin[0]) {
        slm_buf_appendf(&b, "{{- ");
        jinja_str(&b, t->begin);
        slm_buf_appendf(&b, " -}}");
    }
    slm_buf_appendf(&b, "{%%- for message in messages -%%}");
    bool first = true;
    for (int r = 0; r < 3; r++) {
        if (!t->prefix[r]) continue;
        slm_buf_appendf(&b, "{%%- %s message['role'] == '%s' -%%}{{- ", first ? "if" : "elif",
                        k_roles[r]);
        jinja_str(&b, t->prefix[r]);
        slm_buf_appendf(&b, " + %s + ", content);
        jinja_str(&b, t->suffix[r]);
        slm_buf_appendf(&b, " -}}");
        first = false;
    }
    slm_buf_appendf(&b,
                    "{%%- else -%%}{{- raise_exception('role ' + message['role'] + ' is not in "
                    "chat template %s') -}}{%%- endif -%%}{%%- endfor -%%}",
                    t->name);
    if (t->prefix[2][0]) {
        slm_buf_appendf(&b, "{%%- if add_generation_prompt -%%}{{- ");
        jinja_str(&b, t->prefix[2]);
        slm_buf_appendf(&b, " -}}{%%- endif -%%}");
    }
    slm_buf_append(&b, "", 1);
    return b.data;
}
