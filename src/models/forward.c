/*
 * The forward pass of both architectures, written with the op API so that it runs on local
 * and distributed tensors alike and is recorded by autograd: embeddings, the decoder layers
 * (attention with the KV cache, the MLP), the final norm and the LM head; and the causal-LM
 * loss.
 */
#include <math.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/loss.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"
#include "tensor/tensor_impl.h"

/* Tensors made during one forward, released together at its end. */
typedef struct tape {
  dt_tensor **t;
  int n, cap;
} tape;

/* Keeps t (may be NULL) on the tape and returns it; on a full tape that cannot grow the
 * tensor is released and NULL returned (the caller's next op fails on the NULL argument). */
static dt_tensor *keep(tape *tp, dt_tensor *t) {
  if (!t) return NULL;
  if (tp->n == tp->cap) {
    void *arrays[1] = {&tp->t};
    size_t sizes[1] = {sizeof(dt_tensor *)};
    if (!dt__reserve_arrays(tp->n, &tp->cap, 64, 1, arrays, sizes)) {
      dt_tensor_release(t);
      return NULL;
    }
  }
  tp->t[tp->n++] = t;
  return t;
}

static void tape_clear(tape *tp) {
  dt__tensors_free(tp->t, tp->n);
  memset(tp, 0, sizeof *tp);
}

/* Shorthand: run an op whose result goes through `r`, keep it. */
#define RUN(call, r)                                                                               \
  (st ? st : ((st = (call)), st ? st : (keep(tp, r) ? DT_OK : (st = DT_ERR_NOMEM))))

typedef struct fwd {
  dt_hf_model *m;
  tape *tp;
  int64_t B, T, past;
  dt_tensor *mask;      /* [T, past + T] bool, true where a query may look (chunks after a cache) */
  dt_tensor *cos, *sin; /* Llama: rotary tables [T, head_dim] of this forward's positions */
  /* With a cache: each layer's keys and values after this forward ([n_layers] each), moved
   * into the cache only when the whole forward succeeded, so that a forward failing at any op
   * leaves the cache exactly as it was. */
  dt_tensor **next_k, **next_v;
} fwd;

/* Parameter `index` as used by the forward (gathered over FSDP), on the tape; NULL for -1. */
static dt_status param(fwd *f, int index, dt_tensor **out) {
  *out = NULL;
  if (index < 0) return DT_OK;
  dt_status st = dt__hf_param_use(f->m, index, out);
  if (!st && !keep(f->tp, *out)) st = dt__error(DT_ERR_NOMEM, "dt_hf_model_forward: out of memory");
  return st;
}

static dt_status norm(fwd *f, dt_tensor *x, int wi, int bi, dt_tensor **out) {
  dt_tensor *w = NULL, *b = NULL;
  dt_status st = param(f, wi, &w);
  if (!st) st = param(f, bi, &b);
  if (st) return st;
  const int64_t shape[1] = {f->m->cfg.hidden_size};
  if (f->m->cfg.arch == DT_HF_LLAMA)
    st = dt_rms_norm(x, 1, shape, w, f->m->cfg.norm_eps, out);
  else
    st = dt_layer_norm(x, 1, shape, w, b, f->m->cfg.norm_eps, out);
  if (!st && !keep(f->tp, *out)) st = DT_ERR_NOMEM;
  return st;
}

/* A projection: Llama's Linear (weight [out, in]) or GPT-2's Conv1D (weight [in, out]). */
static dt_status project(fwd *f, dt_tensor *x, int wi, int bi, dt_tensor **out) {
  tape *tp = f->tp;
  dt_tensor *w = NULL, *b = NULL, *y = NULL;
  dt_status st = param(f, wi, &w);
  if (!st) st = param(f, bi, &b);
  if (f->m->cfg.arch == DT_HF_LLAMA) return RUN(dt_linear(x, w, b, out), *out);
  RUN(dt_matmul(x, w, &y), y);
  return RUN(dt_add(y, b, out), *out);
}

/* [B, T, n*hd] -> [B, n, T, hd]. */
static dt_status to_heads(fwd *f, dt_tensor *x, int64_t n, dt_tensor **out) {
  tape *tp = f->tp;
  dt_status st = DT_OK;
  dt_tensor *v = NULL;
  RUN(dt_view(x, 4, (int64_t[]){f->B, f->T, n, f->m->cfg.head_dim}, &v), v);
  return RUN(dt_transpose(v, 1, 2, out), *out);
}

/* Llama's rotary embedding on [B, n, T, hd]: x * cos + rotate_half(x) * sin. */
static dt_status rotary(fwd *f, dt_tensor *x, dt_tensor **out) {
  tape *tp = f->tp;
  dt_status st = DT_OK;
  int64_t half = f->m->cfg.head_dim / 2;
  dt_tensor *c = f->cos, *s = f->sin, *x1 = NULL, *x2 = NULL, *nx2 = NULL, *rot = NULL, *a = NULL,
            *b = NULL;
  RUN(dt_narrow(x, 3, 0, half, &x1), x1);
  RUN(dt_narrow(x, 3, half, half, &x2), x2);
  RUN(dt_neg(x2, &nx2), nx2);
  RUN(dt_cat(2, (dt_tensor *[]){nx2, x1}, 3, &rot), rot);
  RUN(dt_mul(x, c, &a), a);
  RUN(dt_mul(rot, s, &b), b);
  return RUN(dt_add(a, b, out), *out);
}

/* The fused attention (grouped-query: the kv heads are read in place, never repeated; under TP
 * it runs sharded by heads when the query and kv heads both split evenly): causal when the
 * cache is empty, every cached key for one new query, else the offset causal mask. */
static dt_status attention(fwd *f, dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor **out) {
  dt_attention_options o = {.is_causal = f->past == 0 && f->T > 1};
  dt_tensor *mask = f->past > 0 && f->T > 1 ? f->mask : NULL;
  dt_status st = dt_scaled_dot_product_attention(q, k, v, mask, &o, out, NULL);
  if (!st && !keep(f->tp, *out)) st = DT_ERR_NOMEM;
  return st;
}

/* The cached keys/values `cached` (NULL: none yet) with the new ones appended (dim 2): *out for
 * this forward's attention, and a detached contiguous copy in *next for the cache, which the
 * caller commits only once the whole forward succeeded. */
static dt_status cache_append(fwd *f, dt_tensor *cached, dt_tensor *x, dt_tensor **out,
                              dt_tensor **next) {
  tape *tp = f->tp;
  dt_status st = DT_OK;
  if (!cached) {
    *out = x;
  } else {
    RUN(dt_cat(2, (dt_tensor *[]){cached, x}, 2, out), *out);
  }
  if (st) return st;
  dt_tensor *kept = NULL;
  st = dt_contiguous(*out, &kept);
  if (st) return st;
  st = dt_detach(kept, next);
  dt_tensor_release(kept);
  return st;
}

static dt_status layer(fwd *f, int64_t l, dt_hf_kv_cache *cache, dt_tensor *x, dt_tensor **out) {
  tape *tp = f->tp;
  const dt_hf_config *c = &f->m->cfg;
  const int *li = f->m->layer_index + l * L_COUNT;
  bool llama = c->arch == DT_HF_LLAMA;
  dt_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *qh = NULL, *kh = NULL, *vh = NULL;
  dt_tensor *qr = NULL, *kr = NULL, *ka = NULL, *va = NULL, *a = NULL;
  dt_tensor *at = NULL, *ar = NULL, *o = NULL, *x1 = NULL, *h2 = NULL, *d = NULL;
  dt_status st = norm(f, x, li[L_NORM1_W], li[L_NORM1_B], &h);
  if (!st) st = project(f, h, li[L_Q_W], li[L_Q_B], &q);
  if (!st) st = project(f, h, li[L_K_W], li[L_K_B], &k);
  if (!st) st = project(f, h, li[L_V_W], li[L_V_B], &v);
  if (!st) st = to_heads(f, q, c->num_heads, &qh);
  if (!st) st = to_heads(f, k, c->num_kv_heads, &kh);
  if (!st) st = to_heads(f, v, c->num_kv_heads, &vh);
  if (!st && llama) st = rotary(f, qh, &qr);
  if (!st && llama) st = rotary(f, kh, &kr);
  if (!llama) qr = qh, kr = kh;
  if (!st && cache) st = cache_append(f, cache->k[l], kr, &ka, &f->next_k[l]);
  if (!st && cache) st = cache_append(f, cache->v[l], vh, &va, &f->next_v[l]);
  if (!cache) ka = kr, va = vh;
  if (!st) st = attention(f, qr, ka, va, &a);
  RUN(dt_transpose(a, 1, 2, &at), at);
  RUN(dt_reshape(at, 3, (int64_t[]){f->B, f->T, c->num_heads * c->head_dim}, &ar), ar);
  if (!st) st = project(f, ar, li[L_O_W], li[L_O_B], &o);
  RUN(dt_add(x, o, &x1), x1);
  if (!st) st = norm(f, x1, li[L_NORM2_W], li[L_NORM2_B], &h2);
  if (llama) {
    dt_tensor *g = NULL, *u = NULL, *sg = NULL, *gu = NULL;
    if (!st) st = project(f, h2, li[L_GATE_W], li[L_GATE_B], &g);
    if (!st) st = project(f, h2, li[L_UP_W], li[L_UP_B], &u);
    RUN(dt_silu(g, &sg), sg);
    RUN(dt_mul(sg, u, &gu), gu);
    if (!st) st = project(f, gu, li[L_DOWN_W], li[L_DOWN_B], &d);
  } else {
    dt_tensor *u = NULL, *g = NULL;
    if (!st) st = project(f, h2, li[L_UP_W], li[L_UP_B], &u);
    RUN(dt_gelu_tanh(u, &g), g);
    if (!st) st = project(f, g, li[L_DOWN_W], li[L_DOWN_B], &d);
  }
  return RUN(dt_add(x1, d, out), *out);
}

/* The attention mask [T, past + T] of a chunk after cached positions: query i (position
 * past + i) sees key j <= past + i (true: takes part). Needed only when past > 0 and T > 1. */
static dt_status make_mask(fwd *f) {
  if (f->past == 0 || f->T == 1) return DT_OK;
  int64_t S = f->past + f->T;
  size_t n = (size_t)(f->T * S);
  uint8_t *bits = dt__alloc(n ? n : 1);
  if (!bits) return dt__error(DT_ERR_NOMEM, "dt_hf_model_forward: out of memory");
  for (int64_t i = 0; i < f->T; i++)
    for (int64_t j = 0; j < S; j++) bits[i * S + j] = j <= f->past + i;
  dt_tensor *local = NULL;
  dt_status st = dt_from_data(bits, 2, (int64_t[]){f->T, S}, DT_BOOL, &local);
  dt__free(bits);
  if (!st) st = dt__hf_replicated(f->m, local, &f->mask);
  dt_tensor_release(local);
  if (!st && !keep(f->tp, f->mask)) st = DT_ERR_NOMEM;
  return st;
}

/* input_ids as the forward takes them: checked, and with a mesh distributed (batch split
 * over the FSDP dim). */
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

static dt_status forward_ids(dt_hf_model *m, dt_tensor *ids, dt_hf_kv_cache *cache, tape *tp,
                             dt_tensor **logits) {
  const dt_hf_config *c = &m->cfg;
  const int64_t *gshape =
      dt_tensor_is_distributed(ids) ? dt_dist_global_shape(ids) : dt_tensor_shape(ids);
  fwd f = {m, tp, gshape[0], gshape[1], cache ? cache->length : 0, NULL, NULL, NULL, NULL, NULL};
  if (f.T < 1) return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: input_ids has no positions");
  if (f.past + f.T > c->max_positions)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_forward: positions up to %lld exceed max_positions %lld",
                     (long long)(f.past + f.T), (long long)c->max_positions);
  if (cache && cache->length > 0 && cache->k[0] &&
      (dt_tensor_is_distributed(cache->k[0]) ? dt_dist_global_shape(cache->k[0])[0]
                                             : dt_tensor_size(cache->k[0], 0)) != f.B)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_forward: batch %lld differs from the cache's",
                     (long long)f.B);
  dt_status st = DT_OK;
  if (cache) {
    f.next_k = dt__calloc(sizeof(dt_tensor *) * 2 * (size_t)c->num_layers);
    if (!f.next_k) return dt__error(DT_ERR_NOMEM, "dt_hf_model_forward: out of memory");
    f.next_v = f.next_k + c->num_layers;
  }
  st = make_mask(&f);
  if (!st && c->arch == DT_HF_LLAMA) {
    st = dt__hf_rope_tables(m, f.past, f.T, &f.cos, &f.sin);
    bool kept_cos = !st && keep(tp, f.cos), kept_sin = !st && keep(tp, f.sin);
    if (!st && (!kept_cos || !kept_sin))
      st = dt__error(DT_ERR_NOMEM, "dt_hf_model_forward: out of memory");
  }
  dt_tensor *emb = NULL, *x = NULL, *h = NULL, *head = NULL;
  if (!st) st = param(&f, m->global_index[G_EMBED], &emb);
  RUN(dt_embedding(emb, ids, &x), x);
  if (!st && c->arch == DT_HF_GPT2) {
    dt_tensor *wpe = NULL, *pos = NULL, *x2 = NULL;
    st = param(&f, m->global_index[G_POS], &wpe);
    RUN(dt_narrow(wpe, 0, f.past, f.T, &pos), pos);
    RUN(dt_add(x, pos, &x2), x2);
    x = x2;
  }
  for (int64_t l = 0; l < c->num_layers && !st; l++) {
    dt_tensor *next = NULL;
    st = layer(&f, l, cache, x, &next);
    x = next;
  }
  if (!st) st = norm(&f, x, m->global_index[G_NORM_W], m->global_index[G_NORM_B], &h);
  if (!st) st = param(&f, m->global_index[G_HEAD], &head);
  if (!st) st = dt_linear(h, head, NULL, logits);
  if (!st && cache) {
    for (int64_t l = 0; l < c->num_layers; l++) {
      dt_tensor_release(cache->k[l]), dt_tensor_release(cache->v[l]);
      cache->k[l] = f.next_k[l], cache->v[l] = f.next_v[l];
      f.next_k[l] = f.next_v[l] = NULL;
    }
    cache->length += f.T;
  }
  if (cache) dt__tensors_free(f.next_k, 2 * (int)c->num_layers);
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
  tape tp = {0};
  dt_tensor *ids = NULL;
  dt_status st = prepare_ids(m, "dt_hf_model_forward", input_ids, &ids);
  if (!st) st = forward_ids(m, ids, cache, &tp, logits);
  dt_tensor_release(ids);
  tape_clear(&tp);
  return st;
}

dt_status dt_hf_model_loss(dt_hf_model *m, dt_tensor *input_ids, dt_tensor **loss) {
  if (!loss) return dt__error(DT_ERR_INVALID, "dt_hf_model_loss: loss is NULL");
  *loss = NULL;
  if (!m || !input_ids)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_loss: %s is NULL", m ? "input_ids" : "model");
  tape tpv = {0}, *tp = &tpv;
  dt_tensor *ids = NULL, *logits = NULL, *lg = NULL, *flat = NULL, *tg = NULL, *tflat = NULL;
  dt_status st = prepare_ids(m, "dt_hf_model_loss", input_ids, &ids);
  keep(tp, ids);
  if (st) {
    tape_clear(tp);
    return st;
  }
  const int64_t *gs =
      dt_tensor_is_distributed(ids) ? dt_dist_global_shape(ids) : dt_tensor_shape(ids);
  int64_t B = gs[0], T = gs[1];
  if (T < 2)
    st = dt__error(DT_ERR_INVALID, "dt_hf_model_loss: input_ids needs 2 or more positions");
  /* The mean over no predictions is 0 / 0: NaN, which a training loop would step on. */
  if (!st && B < 1)
    st = dt__error(DT_ERR_INVALID,
                   "dt_hf_model_loss: input_ids [%lld, %lld] has no rows: no target positions to "
                   "average over",
                   (long long)B, (long long)T);
  if (!st) st = forward_ids(m, ids, NULL, tp, &logits);
  if (!st) keep(tp, logits);
  RUN(dt_narrow(logits, 1, 0, T - 1, &lg), lg);
  RUN(dt_reshape(lg, 2, (int64_t[]){B * (T - 1), m->cfg.vocab_size}, &flat), flat);
  RUN(dt_narrow(ids, 1, 1, T - 1, &tg), tg);
  RUN(dt_reshape(tg, 1, (int64_t[]){B * (T - 1)}, &tflat), tflat);
  if (!st) st = dt_cross_entropy(flat, tflat, loss);
  tape_clear(tp);
  return st;
}
