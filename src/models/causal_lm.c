/*
 * The causal language model over a family's module tree: the root's forward (embedding,
 * blocks, final norm, head), dt_hf_model_forward with the KV cache (each Attention given its
 * layer of the cache; the appended positions committed only when the whole forward succeeded),
 * the causal-LM loss, and the cache itself.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/loss.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"
#include "nn/nn_impl.h"

static const int64_t *shape_of(dt_tensor *t) {
  return dt_tensor_is_distributed(t) ? dt_dist_global_shape(t) : dt_tensor_shape(t);
}

/* A local tensor every rank makes alike, replicated on the model's mesh (itself, retained,
 * without one). */
static dt_status replicated(const dt_hf_model *m, dt_tensor *local, dt_tensor **out) {
  if (!m->mesh) {
    *out = dt_tensor_retain(local);
    return DT_OK;
  }
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  for (int i = 0; i < nd; i++) pl[i] = dt_replicate();
  return dt_dist_distribute_tensor(m->mesh, local, nd, pl, out);
}

typedef struct placeholder_walk {
  const dt_hf_model *m;
  dt_module *sub;
  dt_tensor *zero; /* float32 [1, 1] */
} placeholder_walk;

static dt_status placeholder(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  placeholder_walk *w = user;
  if (is_buffer || dt_tensor_is_distributed(t)) return DT_OK;
  if (w->m->family->keeps_local && w->m->family->keeps_local(fqn)) return DT_OK;
  const char *dot = strrchr(fqn, '.');
  char owner[192];
  snprintf(owner, sizeof owner, "%.*s", dot ? (int)(dot - fqn) : 0, fqn);
  dt_module *mod = dt_module_find(w->sub, owner);
  int nd = dt_tensor_ndim(t);
  dt_tensor *z = NULL, *view = NULL;
  dt_status st = dt_view(w->zero, nd, (int64_t[]){1, 1}, &z);
  if (!st) st = dt_expand(z, nd, dt_tensor_shape(t), &view);
  if (!st) st = dt_module_set_tensor(mod, dot ? dot + 1 : fqn, view);
  dt_tensor_release(z);
  dt_tensor_release(view);
  return st;
}

dt_status dt__hf_placeholders(const dt_hf_model *m, dt_module *sub) {
  if (!m->mesh) return DT_OK;
  placeholder_walk w = {m, sub, NULL};
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_zeros(2, (int64_t[]){1, 1}, DT_F32, &w.zero);
  if (!st) st = dt_module_visit_tensors(sub, placeholder, &w);
  dt_grad_mode_set(prev);
  dt_tensor_release(w.zero);
  return st;
}

dt_status dt__hf_add_blocks(dt_hf_model *m, dt_module *parent, const char *name,
                            const dt_nn_block_options *o, const char *attn_name,
                            dt__hf_block_maker make) {
  int64_t n = m->cfg.num_layers;
  m->block = dt__calloc(sizeof(dt_module *) * (size_t)(n ? n : 1));
  m->attn = dt__calloc(sizeof(dt_module *) * (size_t)(n ? n : 1));
  if (!m->block || !m->attn) return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory");
  dt_module *list = NULL;
  dt_status st = dt_nn_module_list(0, NULL, &list);
  if (!st) st = dt_module_add_child(parent, name, list);
  for (int64_t l = 0; l < n && !st; l++) {
    char index[24];
    snprintf(index, sizeof index, "%lld", (long long)l);
    st = make ? make(m, o, &m->block[l])
              : dt_nn_transformer_block(m->cfg.hidden_size, o, &m->block[l]);
    if (!st) st = dt__hf_placeholders(m, m->block[l]);
    if (!st) st = dt_module_add_child(list, index, m->block[l]);
    if (!st) m->attn[l] = dt_module_find(m->block[l], attn_name);
  }
  return st;
}

/* The tied head's weight: the embedding's, gathered over the FSDP dim (recorded by autograd,
 * whose backward reduce-scatters its gradient onto the shard). */
static dt_status tied_weight(const dt_hf_model *m, dt_tensor **out) {
  dt_tensor *w = dt_module_parameter(m->embed, "weight");
  if (m->fsdp_dim < 0 || !dt_tensor_is_distributed(w) ||
      dt_dist_placements(w)[m->fsdp_dim].kind != DT_SHARD) {
    *out = dt_tensor_retain(w);
    return DT_OK;
  }
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  memcpy(pl, dt_dist_placements(w), sizeof(dt_placement) * (size_t)nd);
  pl[m->fsdp_dim] = dt_replicate();
  return dt_dist_redistribute(w, nd, pl, out);
}

dt_status dt__hf_lm_forward(dt_module *root, dt_tensor *ids, dt_tensor **out) {
  dt_hf_model *m = dt_module_user(root);
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  dt_tensor *x = NULL, *h = NULL, *w = NULL;
  DT__KEEP(dt_module_forward(m->embed, ids, &x), x);
  if (m->pos) {
    int64_t T = st ? 0 : shape_of(ids)[1];
    dt_tensor *local = NULL, *pos = NULL, *p = NULL, *sum = NULL;
    DT__KEEP(dt_arange((double)m->past, (double)(m->past + T), 1.0, DT_I64, &local), local);
    DT__KEEP(replicated(m, local, &pos), pos);
    DT__KEEP(dt_module_forward(m->pos, pos, &p), p);
    DT__KEEP(dt_add(x, p, &sum), sum);
    x = sum;
  }
  for (int64_t l = 0; l < m->cfg.num_layers && !st; l++) {
    dt_tensor *next = NULL;
    DT__KEEP(dt_module_forward(m->block[l], x, &next), next);
    x = next;
  }
  DT__KEEP(dt_module_forward(m->norm, x, &h), h);
  if (m->head) {
    if (!st) st = dt_module_forward(m->head, h, out);
  } else {
    /* The head's input whole over tp, as a colwise Linear's hooks would make it (a sequence-
     * parallel norm leaves it Shard(1)); the weight is the vocabulary-parallel embedding's. */
    dt_tensor *hr = h;
    if (!st && m->tp_dim >= 0 && dt_dist_placements(h)[m->tp_dim].kind != DT_REPLICATE) {
      dt_placement pl[DT_MAX_DIMS];
      int nd = dt_mesh_ndim(m->mesh);
      memcpy(pl, dt_dist_placements(h), sizeof(dt_placement) * (size_t)nd);
      pl[m->tp_dim] = dt_replicate();
      DT__KEEP(dt_dist_redistribute(h, nd, pl, &hr), hr);
    }
    DT__KEEP(tied_weight(m, &w), w);
    if (!st) st = dt_linear(hr, w, NULL, out);
  }
  dt_tensor_list_release(tmp);
  return st;
}

/* input_ids as the forward takes them: checked, and with a mesh distributed (batch split over
 * the FSDP dim). */
static dt_status prepare_ids(const dt_hf_model *m, const char *fn, dt_tensor *ids,
                             dt_tensor **out) {
  if (dt_tensor_ndim(ids) != 2 || dt_tensor_dtype(ids) != DT_I64)
    return dt__error(DT_ERR_INVALID,
                     "%s: input_ids must be a 2-D int64 tensor [batch, seq] (got %d-D %s)", fn,
                     dt_tensor_ndim(ids), dt_dtype_name(dt_tensor_dtype(ids)));
  if (dt_tensor_is_distributed(ids)) {
    if (dt_dist_mesh(ids) != m->mesh)
      return dt__error(DT_ERR_INVALID, "%s: input_ids live on another mesh than the model", fn);
    *out = dt_tensor_retain(ids);
    return DT_OK;
  }
  int64_t n = dt_tensor_numel(ids);
  for (int64_t i = 0; i < n; i++) {
    int64_t idx[2] = {i / dt_tensor_size(ids, 1), i % dt_tensor_size(ids, 1)};
    double v = 0;
    dt_tensor_get(ids, idx, &v);
    if (!(v >= 0 && v < (double)m->cfg.vocab_size))
      return dt__error(DT_ERR_INVALID, "%s: input_ids[%lld][%lld] = %.0f is outside [0, %lld)", fn,
                       (long long)idx[0], (long long)idx[1], v, (long long)m->cfg.vocab_size);
  }
  if (!m->mesh) {
    *out = dt_tensor_retain(ids);
    return DT_OK;
  }
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  for (int i = 0; i < nd; i++) pl[i] = dt_replicate();
  if (m->fsdp_dim >= 0) pl[m->fsdp_dim] = dt_shard(0);
  return dt_dist_distribute_tensor(m->mesh, ids, nd, pl, out);
}

/* Sets every Attention's context: its layer of `cache`, or none (NULL). */
static dt_status set_contexts(dt_hf_model *m, dt_nn_kv_cache *cache) {
  dt_status st = DT_OK;
  for (int64_t l = 0; l < m->cfg.num_layers && !st; l++) {
    dt_nn_attention_context c = {.cache = cache, .layer = (int)l};
    st = dt_nn_attention_set_context(m->attn[l], cache ? &c : NULL);
  }
  return st;
}

/* The root's forward over prepared ids after `cache` (NULL: positions from 0), the cache
 * extended only when the whole forward succeeded. */
static dt_status forward_ids(dt_hf_model *m, dt_tensor *ids, dt_hf_kv_cache *cache,
                             dt_tensor **logits) {
  const dt_hf_config *c = &m->cfg;
  const int64_t *gshape = shape_of(ids);
  int64_t B = gshape[0], T = gshape[1], past = cache ? dt_nn_kv_cache_length(cache->cache) : 0;
  if (T < 1) return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: input_ids has no positions");
  if (past + T > c->max_positions)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_forward: positions up to %lld exceed max_positions %lld",
                     (long long)(past + T), (long long)c->max_positions);
  if (cache && past > 0 && cache->batch != B)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: batch %lld differs from the cache's",
                     (long long)B);
  m->past = past;
  dt_status st = set_contexts(m, cache ? cache->cache : NULL);
  if (!st) st = dt_module_forward(m->root, ids, logits);
  if (cache) {
    if (!st) st = dt_nn_kv_cache_commit(cache->cache);
    if (st) dt_nn_kv_cache_discard(cache->cache);
    if (!st) cache->batch = B;
  }
  /* No Attention keeps a cache the caller may free before the next forward. */
  dt_status reset = set_contexts(m, NULL);
  if (!st) st = reset;
  if (st) {
    dt_tensor_release(*logits);
    *logits = NULL;
  }
  return st;
}

dt_status dt_hf_model_forward(dt_hf_model *m, dt_tensor *input_ids, dt_hf_kv_cache *cache,
                              dt_tensor **logits) {
  if (!logits) return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: logits is NULL");
  *logits = NULL;
  if (!m || !input_ids)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: %s is NULL", m ? "input_ids" : "model");
  if (cache && cache->n_layers != m->cfg.num_layers)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: the cache was made for another model");
  dt_tensor *ids = NULL;
  dt_status st = prepare_ids(m, "dt_hf_model_forward", input_ids, &ids);
  if (!st) st = forward_ids(m, ids, cache, logits);
  dt_tensor_release(ids);
  return st;
}

dt_status dt_hf_model_loss(dt_hf_model *m, dt_tensor *input_ids, dt_tensor **loss) {
  if (!loss) return dt__error(DT_ERR_INVALID, "dt_hf_model_loss: loss is NULL");
  *loss = NULL;
  if (!m || !input_ids)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_loss: %s is NULL", m ? "input_ids" : "model");
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_tensor *ids = NULL, *logits = NULL, *lg = NULL, *flat = NULL, *tg = NULL, *tflat = NULL;
  dt_status st = DT_OK;
  DT__KEEP(prepare_ids(m, "dt_hf_model_loss", input_ids, &ids), ids);
  int64_t B = st ? 0 : shape_of(ids)[0], T = st ? 0 : shape_of(ids)[1];
  if (!st && T < 2)
    st = dt__error(DT_ERR_INVALID, "dt_hf_model_loss: input_ids needs 2 or more positions");
  /* The mean over no predictions is 0 / 0: NaN, which a training loop would step on. */
  if (!st && B < 1)
    st = dt__error(DT_ERR_INVALID,
                   "dt_hf_model_loss: input_ids [%lld, %lld] has no rows: no target positions to "
                   "average over",
                   (long long)B, (long long)T);
  DT__KEEP(forward_ids(m, ids, NULL, &logits), logits);
  DT__KEEP(dt_narrow(logits, 1, 0, T - 1, &lg), lg);
  DT__KEEP(dt_reshape(lg, 2, (int64_t[]){B * (T - 1), m->cfg.vocab_size}, &flat), flat);
  DT__KEEP(dt_narrow(ids, 1, 1, T - 1, &tg), tg);
  DT__KEEP(dt_reshape(tg, 1, (int64_t[]){B * (T - 1)}, &tflat), tflat);
  if (!st) st = dt_cross_entropy(flat, tflat, loss);
  dt_tensor_list_release(tmp);
  return st;
}

dt_status dt_hf_kv_cache_create(const dt_hf_model *m, dt_hf_kv_cache **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_hf_kv_cache_create: out is NULL");
  *out = NULL;
  if (!m) return dt__error(DT_ERR_INVALID, "dt_hf_kv_cache_create: model is NULL");
  dt_hf_kv_cache *c = dt__calloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "dt_hf_kv_cache_create: out of memory");
  dt_status st = dt_nn_kv_cache_create((int)m->cfg.num_layers, &c->cache);
  if (st) {
    dt__free(c);
    return st;
  }
  c->n_layers = (int)m->cfg.num_layers;
  c->batch = -1;
  *out = c;
  return DT_OK;
}

void dt_hf_kv_cache_destroy(dt_hf_kv_cache *c) {
  if (!c) return;
  dt_nn_kv_cache_destroy(c->cache);
  dt__free(c);
}

int64_t dt_hf_kv_cache_length(const dt_hf_kv_cache *c) {
  return c ? dt_nn_kv_cache_length(c->cache) : 0;
}
