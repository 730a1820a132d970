// The .slt tensor exchange format between C tests and the PyTorch reference (format described
// at the top of tests/reference/llama_ref.py): magic "SLMTNS1\n", u64 header length, a JSON
// index {"tensors": [{name, dtype, shape, offset}], "meta": {...}}, then 64-byte aligned raw
// little-endian data. Test-support code (not part of the product libraries).
#ifndef SLM_TENSORS_H
#define SLM_TENSORS_H

#include "base/base.h"

typedef enum { SLM_T_F32, SLM_T_I32, SLM_T_F64 } slm_tdtype;

// One tensor: name, dtype, shape, data (owned by the containing set).
typedef struct slm_tensor {
    char *name;
    slm_tdtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t numel;
    void *data;
} slm_tensor;

// A list of tensors plus an optional JSON meta object (raw text). Zeroed struct = empty set.
typedef struct slm_tensor_set {
    slm_tensor *t;
    int n, cap;
    char *meta_json; // owned; NULL means {}
} slm_tensor_set;

// Appends a copy of `data` (numel = product of shape) under `name`. ndim 0..4.
void slm_tset_add(slm_tensor_set *s, const char *name, slm_tdtype dtype, int ndim,
                  const int64_t *shape, const void *data);
// Sets the meta object from raw JSON text (copied).
void slm_tset_set_meta(slm_tensor_set *s, const char *json);
// Writes the set to `path` atomically. Errors: SLM_E_IO naming the path.
slm_status slm_tset_save(const slm_tensor_set *s, const char *path);
// Reads a .slt file into *s (which must be zeroed). Errors: SLM_E_IO, SLM_E_FORMAT naming the
// path and what is malformed.
slm_status slm_tset_load(slm_tensor_set *s, const char *path);
// Finds a tensor by name (NULL if absent).
const slm_tensor *slm_tset_get(const slm_tensor_set *s, const char *name);
void slm_tset_free(slm_tensor_set *s);

#endif
