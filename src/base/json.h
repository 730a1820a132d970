// base/json: checked readers for the fields of a parsed JSON document (cJSON), one family for
// every JSON file shardlm reads (config.json, dataset and checkpoint manifests, tokenizer.json).
//
// Every reader names, on failure, the file (`what`: a path, optionally followed by the position
// inside the document, e.g. "data/manifest.json: shards[3]"), the field and what was expected,
// and, when the field is present, what it held:
//   data/manifest.json: field "n_docs" is missing, expected an integer in [0, 9007199254740992]
//   config.json: field "tie_word_embeddings": expected true or false, got a number
//   run/manifest.json: field "step" is -3, expected an integer in [0, 9007199254740992]
// Status: SLM_E_FORMAT for every malformed field. Integers are JSON numbers, exact below 2^53.
#ifndef SLM_BASE_JSON_H
#define SLM_BASE_JSON_H

#include <cjson/cJSON.h>

#include "base/base.h"

// 2^53: the largest integer range a JSON number (a double) holds exactly.
#define SLM_JSON_MAX_EXACT 9007199254740992.0

// What a JSON value is, for messages: "a number", "a string", "a boolean", "null", "an array",
// "an object" (or "missing" for NULL).
const char *slm_json_kind(const cJSON *x);
// True when x is absent (NULL) or JSON null.
bool slm_json_absent_or_null(const cJSON *x);
// True when x is present and JSON true.
bool slm_json_true(const cJSON *x);
// The member `key` of `o` when it is an object / an array, else NULL.
const cJSON *slm_json_obj(const cJSON *o, const char *key);
const cJSON *slm_json_arr(const cJSON *o, const char *key);

// Checks an already-fetched value `x` named `field` (x may be NULL: "is missing"): a number in
// [lo, hi], a whole number when `integer`. Writes *out on success only.
slm_status slm_json_check_num(const char *what, const char *field, const cJSON *x, double lo,
                              double hi, bool integer, double *out);

// Required fields: absent is an error. Write *out on success only.
//   slm_json_num  a number in [lo, hi] (a whole one when `integer`)
//   slm_json_i64  an integer in [lo, min(hi, 2^53)]
//   slm_json_u64  an integer in [0, 2^53]
//   slm_json_str  a string (*out borrows from the document)
//   slm_json_hex64  a string of 16 hex digits (shardlm's XXH64 / seed form)
slm_status slm_json_num(const char *what, const cJSON *o, const char *key, double lo, double hi,
                        bool integer, double *out);
slm_status slm_json_i64(const char *what, const cJSON *o, const char *key, int64_t lo, int64_t hi,
                        int64_t *out);
slm_status slm_json_u64(const char *what, const cJSON *o, const char *key, uint64_t *out);
slm_status slm_json_str(const char *what, const cJSON *o, const char *key, const char **out);
slm_status slm_json_hex64(const char *what, const cJSON *o, const char *key, uint64_t *out);

// Optional fields: absent leaves *out unchanged (its default); present must be well-formed.
//   slm_json_opt_i32  a 32-bit integer; with `nullable`, null also leaves *out unchanged
//   slm_json_opt_f32  a number, rounded to float
//   slm_json_opt_bool true or false
slm_status slm_json_opt_i32(const char *what, const cJSON *o, const char *key, bool nullable,
                            int32_t *out);
slm_status slm_json_opt_f32(const char *what, const cJSON *o, const char *key, float *out);
slm_status slm_json_opt_bool(const char *what, const cJSON *o, const char *key, bool *out);

// Writes `o` as indented JSON text plus a final newline to `path` atomically
// (slm_file_write_atomic). Borrows `o`. Errors: SLM_E_NOMEM if cJSON cannot format it, SLM_E_IO.
slm_status slm_json_write_file(const char *path, const cJSON *o);

#endif
