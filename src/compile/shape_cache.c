/*
 * The shape-inference cache of a trace (dt_compile_options.no_shape_cache turns it off; the
 * analog of PyTorch's fake-tensor cache): the outcome of symbolic shape inference for one call,
 * keyed by everything the rule reads (the op, its attributes as given and as normalized, the
 * arguments' symbolic dims, which are hash-consed expression ids, the expressions a size note
 * gave its shape attribute, and the traced output metas). A call equal in all of these gets the
 * same output dims and guards without running the rule again or checking it against the traced
 * sizes. Symbol values are fixed during a trace, so a hit is exactly what a miss would compute:
 * results are identical either way.
 */
#include <string.h>

#include "compile/compile_impl.h"
#include "core/core_impl.h"

typedef struct cache_entry {
  uint64_t hash;
  int n_key;
  int64_t *key;
  dt_shape_outcome outcome;
  int next; /* the next entry of the bucket, or -1 */
} cache_entry;

#define N_BUCKETS 1024

struct dt_shape_cache {
  int buckets[N_BUCKETS];
  cache_entry *entries;
  int n, cap;
  int64_t scratch[4096];
  int n_scratch;
};

dt_shape_cache *dt__shape_cache_create(void) {
  dt_shape_cache *c = dt__calloc(sizeof *c);
  if (c) {
    for (int b = 0; b < N_BUCKETS; b++) c->buckets[b] = -1;
  }
  return c;
}

void dt__shape_cache_destroy(dt_shape_cache *c) {
  if (!c) return;
  for (int k = 0; k < c->n; k++) {
    dt__free(c->entries[k].key);
    dt__free((void *)c->entries[k].outcome.guards);
  }
  dt__free(c->entries);
  dt__free(c);
}

static bool push(dt_shape_cache *c, int64_t v) {
  if (c->n_scratch >= (int)(sizeof c->scratch / sizeof c->scratch[0])) return false;
  c->scratch[c->n_scratch++] = v;
  return true;
}

static bool push_call(dt_shape_cache *c, const dt_op_call *call) {
  bool ok = push(c, call->op) && push(c, call->flags) && push(c, call->dtype) &&
            push(c, call->n_ints) && push(c, call->n_int_list);
  for (int k = 0; ok && k < call->n_ints; k++) ok = push(c, call->ints[k]);
  for (int k = 0; ok && k < call->n_int_list && call->int_list; k++)
    ok = push(c, call->int_list[k]);
  for (int k = 0; ok && k < 2; k++) {
    int64_t bits;
    memcpy(&bits, &call->scalars[k], sizeof bits);
    ok = push(c, bits);
  }
  return ok;
}

/* The key of ctx's call in c->scratch; false when it does not fit (not cached). */
static bool make_key(dt_shape_cache *c, const dt_shape_ctx *ctx) {
  c->n_scratch = 0;
  bool ok = push_call(c, ctx->given) && push_call(c, ctx->done) && push(c, ctx->n_args) &&
            push(c, ctx->n_out) && push(c, ctx->size_exprs != NULL);
  for (int k = 0; ok && ctx->size_exprs && k < ctx->given->n_ints; k++)
    ok = push(c, ctx->size_exprs[k]);
  for (int k = 0; ok && k < ctx->n_args; k++) {
    ok = push(c, ctx->arg_dims[k] ? ctx->arg_ndim[k] : -1);
    for (int d = 0; ok && ctx->arg_dims[k] && d < ctx->arg_ndim[k]; d++)
      ok = push(c, ctx->arg_dims[k][d]);
  }
  for (int k = 0; ok && k < ctx->n_out; k++) {
    ok = push(c, ctx->metas[k].dtype) && push(c, ctx->metas[k].ndim);
    for (int d = 0; ok && d < ctx->metas[k].ndim; d++) ok = push(c, ctx->metas[k].shape[d]);
  }
  return ok;
}

static uint64_t key_hash(const dt_shape_cache *c) {
  return dt__hash_bytes(c->scratch, sizeof(int64_t) * (size_t)c->n_scratch);
}

bool dt__shape_cache_find(dt_shape_cache *c, const dt_shape_ctx *ctx, dt_shape_outcome *out) {
  if (!c || !make_key(c, ctx)) return false;
  uint64_t h = key_hash(c);
  for (int k = c->buckets[h % N_BUCKETS]; k >= 0; k = c->entries[k].next) {
    const cache_entry *e = &c->entries[k];
    if (e->hash == h && e->n_key == c->n_scratch &&
        memcmp(e->key, c->scratch, sizeof(int64_t) * (size_t)e->n_key) == 0) {
      *out = e->outcome;
      return true;
    }
  }
  return false;
}

void dt__shape_cache_add(dt_shape_cache *c, const dt_shape_ctx *ctx,
                         const dt_shape_outcome *outcome) {
  if (!c || !make_key(c, ctx)) return; /* not cached: only slower */
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 64;
    cache_entry *es = dt__alloc(sizeof *es * (size_t)cap);
    if (!es) return;
    if (c->n) memcpy(es, c->entries, sizeof *es * (size_t)c->n);
    dt__free(c->entries);
    c->entries = es;
    c->cap = cap;
  }
  int64_t *key = dt__alloc(sizeof(int64_t) * (size_t)(c->n_scratch + 1));
  dt_guard *guards = dt__alloc(sizeof(dt_guard) * (size_t)(outcome->n_guards + 1));
  if (!key || !guards) {
    dt__free(key);
    dt__free(guards);
    return;
  }
  if (outcome->n_guards)
    memcpy(guards, outcome->guards, sizeof(dt_guard) * (size_t)outcome->n_guards);
  memcpy(key, c->scratch, sizeof(int64_t) * (size_t)c->n_scratch);
  uint64_t h = key_hash(c);
  cache_entry *e = &c->entries[c->n];
  e->hash = h;
  e->n_key = c->n_scratch;
  e->key = key;
  e->outcome = *outcome;
  e->outcome.guards = guards;
  e->next = c->buckets[h % N_BUCKETS];
  c->buckets[h % N_BUCKETS] = c->n++;
}
