/* The KV cache of transformer attention (dtensor/transformer.h): per layer the committed keys
 * and values and, during a model's forward, the pending ones (committed + appended), which a
 * commit makes the cache's and a discard drops, so that a forward failing part-way changes
 * nothing. */
#include "core/core_impl.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"
#include "nn/nn_impl.h"
#include "tensor/tensor_impl.h"

struct dt_nn_kv_cache {
  int n_layers;
  int64_t length;
  dt_tensor **held;    /* [2][n_layers]: committed keys, then values */
  dt_tensor **pending; /* [2][n_layers]: committed + appended, or NULL */
  /* [n_layers]: positions each layer appended since the last commit (its keys). The held
   * tensors may keep only the last positions (a sliding window), so positions are counted
   * here, not read off the tensors. */
  int64_t *appended;
};

dt_status dt_nn_kv_cache_create(int n_layers, dt_nn_kv_cache **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_nn_kv_cache_create: out is NULL");
  *out = NULL;
  if (n_layers < 1 || n_layers > (1 << 20))
    return dt__error(DT_ERR_INVALID, "dt_nn_kv_cache_create: n_layers %d is outside 1..%d",
                     n_layers, 1 << 20);
  dt_nn_kv_cache *c = dt__calloc(sizeof *c);
  if (c) c->held = dt__calloc(sizeof(dt_tensor *) * 4 * (size_t)n_layers);
  if (c) c->appended = dt__calloc(sizeof(int64_t) * (size_t)n_layers);
  if (!c || !c->held || !c->appended) {
    if (c) dt__free(c->held), dt__free(c->appended);
    dt__free(c);
    return dt__error(DT_ERR_NOMEM, "dt_nn_kv_cache_create: out of memory");
  }
  c->pending = c->held + 2 * n_layers;
  c->n_layers = n_layers;
  *out = c;
  return DT_OK;
}

void dt_nn_kv_cache_discard(dt_nn_kv_cache *c) {
  if (!c) return;
  for (int i = 0; i < 2 * c->n_layers; i++) {
    dt_tensor_release(c->pending[i]);
    c->pending[i] = NULL;
  }
  for (int l = 0; l < c->n_layers; l++) c->appended[l] = 0;
}

void dt_nn_kv_cache_destroy(dt_nn_kv_cache *c) {
  if (!c) return;
  dt__tensors_free(c->held, 4 * c->n_layers);
  dt__free(c->appended);
  dt__free(c);
}

int64_t dt_nn_kv_cache_length(const dt_nn_kv_cache *c) { return c ? c->length : 0; }
int dt_nn_kv_cache_layers(const dt_nn_kv_cache *c) { return c ? c->n_layers : 0; }

static int64_t positions(dt_tensor *t);

int64_t dt_nn_kv_cache_held(const dt_nn_kv_cache *c, int layer) {
  if (!c || layer < 0 || layer >= c->n_layers) return 0;
  return positions(c->held[layer]);
}

/* Positions along dim 2 of a cached [B, Hk, S, hd] (the global size when distributed). */
static int64_t positions(dt_tensor *t) {
  if (!t) return 0;
  return dt_tensor_is_distributed(t) ? dt_dist_global_shape(t)[2] : dt_tensor_size(t, 2);
}

dt_status dt_nn_kv_cache_commit(dt_nn_kv_cache *c) {
  if (!c) return dt__error(DT_ERR_INVALID, "dt_nn_kv_cache_commit: cache is NULL");
  int64_t n = -1;
  int with = 0;
  for (int l = 0; l < c->n_layers; l++) {
    dt_tensor *k = c->pending[l], *v = c->pending[c->n_layers + l];
    if (!k && !v) continue;
    with++;
    if (!k || !v || positions(k) != positions(v) || (n >= 0 && c->appended[l] != n)) {
      int64_t got = c->appended[l];
      dt_nn_kv_cache_discard(c);
      return dt__error(DT_ERR_INVALID,
                       "dt_nn_kv_cache_commit: layer %d appended %lld positions%s, other layers "
                       "%lld (every layer must append the same positions, keys and values); "
                       "the pending positions were discarded",
                       l, (long long)got, k && v ? "" : " of keys or values alone", (long long)n);
    }
    n = c->appended[l];
  }
  if (with == 0) return DT_OK;
  if (with != c->n_layers) {
    dt_nn_kv_cache_discard(c);
    return dt__error(DT_ERR_INVALID,
                     "dt_nn_kv_cache_commit: %d of the cache's %d layers appended positions "
                     "(every layer must); the pending positions were discarded",
                     with, c->n_layers);
  }
  for (int i = 0; i < 2 * c->n_layers; i++) {
    dt_tensor_release(c->held[i]);
    c->held[i] = c->pending[i];
    c->pending[i] = NULL;
  }
  for (int l = 0; l < c->n_layers; l++) c->appended[l] = 0;
  c->length += n;
  return DT_OK;
}

int64_t dt__nn_kv_cache_position(const dt_nn_kv_cache *c, int layer) {
  return c->length + c->appended[layer];
}

dt_status dt__nn_kv_cache_extend(dt_nn_kv_cache *c, int layer, int which, dt_tensor *x,
                                 int64_t keep_last, dt_tensor_list *tmp, dt_tensor **out,
                                 int64_t *held) {
  int slot = which * c->n_layers + layer;
  dt_tensor *base = c->pending[slot] ? c->pending[slot] : c->held[slot];
  *held = positions(base);
  dt_status st = DT_OK;
  if (base && dt_tensor_dtype(base) != dt_tensor_dtype(x))
    return dt__error(DT_ERR_DTYPE,
                     "Attention: the KV cache's layer %d holds %s %s, this forward's are %s (a "
                     "cache keeps one dtype)",
                     layer, dt_dtype_name(dt_tensor_dtype(base)), which ? "values" : "keys",
                     dt_dtype_name(dt_tensor_dtype(x)));
  if (base) {
    st = dt_cat(2, (dt_tensor *[]){base, x}, 2, out);
    if (!st && !dt_tensor_list_keep(tmp, *out)) st = DT_ERR_NOMEM;
  } else {
    *out = x;
  }
  /* A sliding window keeps only the last keep_last positions for the next forwards. */
  dt_tensor *kept = NULL, *detached = NULL, *tail = NULL;
  int64_t n = st ? 0 : positions(*out);
  if (!st && keep_last > 0 && n > keep_last) {
    st = dt_narrow(*out, 2, n - keep_last, keep_last, &tail);
  } else if (!st) {
    tail = dt_tensor_retain(*out);
  }
  if (!st) st = dt_contiguous(tail, &kept);
  dt_tensor_release(tail);
  if (!st) st = dt_detach(kept, &detached);
  dt_tensor_release(kept);
  if (st) return st;
  dt_tensor_release(c->pending[slot]);
  c->pending[slot] = detached;
  if (which == 0)
    c->appended[layer] +=
        dt_tensor_is_distributed(x) ? dt_dist_global_shape(x)[2] : dt_tensor_size(x, 2);
  return DT_OK;
}
