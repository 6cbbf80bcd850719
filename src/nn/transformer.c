/*
 * Transformer modules (dtensor/transformer.h): the MLPs, the attention with rotary embeddings
 * and a KV cache, and the pre-norm decoder block. Each forward calls its children through
 * dt_module_forward (so the hooks of parallel wrappers run around them) and the op API (so
 * local and distributed tensors both work), and releases its temporaries before returning.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/ops.h"
#include "dtensor/transformer.h"
#include "nn/nn_impl.h"

/* The last position an attention takes: 2^53, where doubles stop counting exactly. */
#define DT_NN_MAX_POSITION (INT64_C(1) << 53)

static const int64_t *shape_of(dt_tensor *t) {
  return dt_tensor_is_distributed(t) ? dt_dist_global_shape(t) : dt_tensor_shape(t);
}

/* A local tensor made like `like`: itself when like is local, else Replicate on like's mesh
 * (the tables and masks every rank computes alike). Takes over the reference to local. */
static dt_status like_placed(dt_tensor *like, dt_tensor *local, dt_tensor **out) {
  if (!dt_tensor_is_distributed(like)) {
    *out = local;
    return DT_OK;
  }
  dt_mesh *mesh = dt_dist_mesh(like);
  dt_placement pl[DT_MESH_MAX_DIMS];
  int n = dt_mesh_ndim(mesh);
  for (int i = 0; i < n; i++) pl[i] = dt_replicate();
  dt_status st = dt_dist_from_local(mesh, local, n, pl, NULL, out);
  dt_tensor_release(local);
  return st;
}

static dt_status check_name(const char *fn, const char *what, const char *name) {
  if (name && !name[0]) return dt__error(DT_ERR_INVALID, "%s: %s is empty", fn, what);
  return DT_OK;
}

/* ---- MLP ---------------------------------------------------------------------------------- */

static dt_status mlp_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  dt_nn_mlp_kind kind = (dt_nn_mlp_kind)(intptr_t)dt_module_user(m);
  dt_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  if (kind == DT_NN_MLP_SWIGLU) {
    DT__KEEP(dt_module_forward(dt_module_child(m, 0), x, &a), a);
    DT__KEEP(dt_module_forward(dt_module_child(m, 1), x, &b), b);
    DT__KEEP(dt_silu(a, &c), c);
    DT__KEEP(dt_mul(c, b, &d), d);
    if (!st) st = dt_module_forward(dt_module_child(m, 2), d, out);
  } else {
    DT__KEEP(dt_module_forward(dt_module_child(m, 0), x, &a), a);
    DT__KEEP(kind == DT_NN_MLP_GELU ? dt_gelu(a, &b) : dt_gelu_tanh(a, &b), b);
    if (!st) st = dt_module_forward(dt_module_child(m, 1), b, out);
  }
  dt_tensor_list_release(tmp);
  return st;
}

/* Adds Linear(in, out) as child `name` of m. */
static dt_status add_linear(dt_module *m, const char *name, int64_t in, int64_t out, bool bias,
                            uint64_t seed) {
  dt_module *lin = NULL;
  dt_status st = dt_nn_linear(in, out, bias, seed, &lin);
  return st ? st : dt_module_add_child(m, name, lin);
}

dt_status dt_nn_transformer_mlp(int64_t dim, int64_t hidden, const dt_nn_mlp_options *options,
                                dt_module **out) {
  static const char fn[] = "dt_nn_transformer_mlp";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  dt_nn_mlp_options o = options ? *options : (dt_nn_mlp_options){0};
  if (dim < 1 || hidden < 1)
    return dt__error(DT_ERR_INVALID, "%s: dim and hidden must be >= 1 (got %lld, %lld)", fn,
                     (long long)dim, (long long)hidden);
  if (o.kind != DT_NN_MLP_SWIGLU && o.kind != DT_NN_MLP_GELU && o.kind != DT_NN_MLP_GELU_TANH)
    return dt__error(DT_ERR_INVALID, "%s: kind %d is not a dt_nn_mlp_kind", fn, (int)o.kind);
  bool swiglu = o.kind == DT_NN_MLP_SWIGLU;
  static const char *const swiglu_names[3] = {"gate_proj", "up_proj", "down_proj"};
  static const char *const gelu_names[3] = {"c_fc", "c_proj", NULL};
  const char *names[3];
  dt_status st = DT_OK;
  for (int i = 0; i < 3 && !st; i++) {
    names[i] = o.names[i] ? o.names[i] : (swiglu ? swiglu_names : gelu_names)[i];
    st = check_name(fn, "a child name", o.names[i]);
  }
  if (st) return st;
  dt_module *m = NULL;
  st = dt_module_create("MLP", mlp_forward, (void *)(intptr_t)o.kind, &m);
  if (st) return st;
  if (swiglu) {
    st = add_linear(m, names[0], dim, hidden, o.bias, o.seed);
    if (!st) st = add_linear(m, names[1], dim, hidden, o.bias, o.seed + 1);
    if (!st) st = add_linear(m, names[2], hidden, dim, o.bias, o.seed + 2);
  } else {
    st = add_linear(m, names[0], dim, hidden, o.bias, o.seed);
    if (!st) st = add_linear(m, names[1], hidden, dim, o.bias, o.seed + 1);
  }
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

/* ---- Attention ---------------------------------------------------------------------------- */

typedef struct attention_state {
  int64_t head_dim;
  int64_t window;      /* sliding window (0: none) */
  bool qk_norm;        /* children 4 and 5: RMSNorm over each head of q and k */
  dt_tensor *inv_freq; /* float32 [head_dim / 2], or NULL: no rotary embedding */
  dt_nn_attention_context ctx;
} attention_state;

static void attention_release(void *user) {
  attention_state *s = user;
  if (!s) return;
  dt_tensor_release(s->inv_freq);
  dt_tensor_release(s->ctx.mask);
  dt__free(s);
}

/* The rotary tables [T, head_dim] of positions p0 .. p0 + T - 1, as transformers computes them:
 * freqs = positions (float32) x inv_freq, emb = cat(freqs, freqs), cos(emb) and sin(emb). */
static dt_status rope_tables(const attention_state *s, int64_t p0, int64_t T, dt_dtype dtype,
                             dt_tensor_list *tmp, dt_tensor **cos_out, dt_tensor **sin_out) {
  dt_status st = DT_OK;
  dt_tensor *pos = NULL, *col = NULL, *freqs = NULL, *emb = NULL;
  DT__KEEP(dt_arange((double)p0, (double)(p0 + T), 1.0, DT_F32, &pos), pos);
  DT__KEEP(dt_unsqueeze(pos, 1, &col), col);
  DT__KEEP(dt_mul(col, s->inv_freq, &freqs), freqs);
  DT__KEEP(dt_cat(2, (dt_tensor *[]){freqs, freqs}, 1, &emb), emb);
  dt_tensor *c = NULL, *s2 = NULL;
  DT__KEEP(dt_cos(emb, &c), c);
  DT__KEEP(dt_sin(emb, &s2), s2);
  /* In the activations' dtype (transformers: cos.to(x.dtype)), so bfloat16 stays bfloat16. */
  if (!st) st = dt_to(c, dtype, cos_out);
  if (!st) st = dt_to(s2, dtype, sin_out);
  return st;
}

/* x * cos + rotate_half(x) * sin over the last dim of x [B, H, T, hd]. */
static dt_status rotate(dt_tensor *x, dt_tensor *c, dt_tensor *s, int64_t half, dt_tensor_list *tmp,
                        dt_tensor **out) {
  dt_status st = DT_OK;
  dt_tensor *x1 = NULL, *x2 = NULL, *nx2 = NULL, *rot = NULL, *a = NULL, *b = NULL;
  DT__KEEP(dt_narrow(x, 3, 0, half, &x1), x1);
  DT__KEEP(dt_narrow(x, 3, half, half, &x2), x2);
  DT__KEEP(dt_neg(x2, &nx2), nx2);
  DT__KEEP(dt_cat(2, (dt_tensor *[]){nx2, x1}, 3, &rot), rot);
  DT__KEEP(dt_mul(x, c, &a), a);
  DT__KEEP(dt_mul(rot, s, &b), b);
  if (!st) st = dt_add(a, b, out);
  return st;
}

/* [B, T, n * hd] -> [B, n, T, hd], n read off the features. */
static dt_status to_heads(const char *what, dt_tensor *x, int64_t hd, dt_tensor_list *tmp,
                          dt_tensor **out, int64_t *heads) {
  dt_status st = DT_OK;
  const int64_t *sh = shape_of(x);
  if (dt_tensor_ndim(x) != 3)
    return dt__error(DT_ERR_SHAPE,
                     "Attention: the %s projection is %d-D, expected [batch, seq, "
                     "features]",
                     what, dt_tensor_ndim(x));
  if (sh[2] % hd != 0)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "Attention: the %s projection has %lld features, not a whole number of heads "
                     "of %lld (under tensor parallelism the heads must split evenly over the "
                     "ranks)",
                     what, (long long)sh[2], (long long)hd);
  *heads = sh[2] / hd;
  dt_tensor *r = NULL;
  DT__KEEP(dt_reshape(x, 4, (int64_t[]){sh[0], sh[1], *heads, hd}, &r), r);
  if (!st) st = dt_transpose(r, 1, 2, out);
  if (!st && !dt_tensor_list_keep(tmp, *out)) st = DT_ERR_NOMEM;
  return st;
}

/* The mask [T, S] of queries at positions q0.. over keys at k0..: key j takes part for query i
 * when it is not after it and, with a window, less than `window` positions before it. */
static dt_status position_mask(int64_t q0, int64_t T, int64_t k0, int64_t S, int64_t window,
                               dt_tensor **out) {
  if (T > 0 && S > INT64_MAX / T)
    return dt__error(DT_ERR_INVALID, "Attention: a [%lld, %lld] mask overflows", (long long)T,
                     (long long)S);
  size_t n = (size_t)(T * S);
  uint8_t *bits = dt__alloc(n ? n : 1);
  if (!bits) return dt__error(DT_ERR_NOMEM, "Attention: out of memory (mask)");
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < S; j++) {
      int64_t d = (q0 + i) - (k0 + j);
      bits[i * S + j] = d >= 0 && (window == 0 || d < window);
    }
  dt_status st = dt_from_data(bits, 2, (int64_t[]){T, S}, DT_BOOL, out);
  dt__free(bits);
  return st;
}

/* Child i's forward; a failure's message says which child ("Attention q_proj: linear: ..."). */
static dt_status child_forward(dt_module *m, int i, dt_tensor *x, dt_tensor **out) {
  dt_status st = dt_module_forward(dt_module_child(m, i), x, out);
  if (st) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s %s", dt_module_type(m), dt_module_child_name(m, i));
    dt__error_prefix(prefix);
  }
  return st;
}

static dt_status attention_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  attention_state *s = dt_module_user(m);
  const dt_nn_attention_context *ctx = &s->ctx;
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *qh = NULL, *kh = NULL, *vh = NULL;
  dt_tensor *cs = NULL, *sn = NULL, *ka = NULL, *va = NULL;
  dt_tensor *a = NULL, *at = NULL, *ar = NULL, *mask = NULL;
  int64_t hd = s->head_dim, H = 0, Hk = 0, Hv = 0;
  if (!x) return dt__error(DT_ERR_INVALID, "Attention: input is NULL");
  if (dt_tensor_ndim(x) != 3)
    return dt__error(DT_ERR_SHAPE, "Attention: input is %d-D, expected [batch, seq, dim]",
                     dt_tensor_ndim(x));
  if (!dt_dtype_is_floating(dt_tensor_dtype(x)))
    return dt__error(DT_ERR_DTYPE, "Attention: input has dtype %s, expected a floating dtype",
                     dt_dtype_name(dt_tensor_dtype(x)));
  DT__KEEP(child_forward(m, 0, x, &q), q);
  DT__KEEP(child_forward(m, 1, x, &k), k);
  DT__KEEP(child_forward(m, 2, x, &v), v);
  if (!st) st = to_heads("query", q, hd, tmp, &qh, &H);
  if (!st) st = to_heads("key", k, hd, tmp, &kh, &Hk);
  if (!st) st = to_heads("value", v, hd, tmp, &vh, &Hv);
  if (!st && (Hk != Hv || H % Hk != 0))
    st = dt__error(DT_ERR_UNSUPPORTED,
                   "Attention: %lld query heads over %lld key and %lld value heads (the kv heads "
                   "must divide the query heads, on each rank under tensor parallelism)",
                   (long long)H, (long long)Hk, (long long)Hv);
  int64_t B = st ? 0 : shape_of(qh)[0], T = st ? 0 : shape_of(qh)[2];
  if (!st && s->qk_norm) { /* Qwen3: RMSNorm over each head, before the rotary embedding */
    dt_tensor *qn = NULL, *kn = NULL;
    DT__KEEP(dt_module_forward(dt_module_child(m, 4), qh, &qn), qn);
    DT__KEEP(dt_module_forward(dt_module_child(m, 5), kh, &kn), kn);
    qh = qn, kh = kn;
  }
  /* The first query's position: what the cache holds for this layer, committed and pending. */
  int64_t past = ctx->cache ? dt__nn_kv_cache_position(ctx->cache, ctx->layer) : ctx->position;
  if (!st && past > DT_NN_MAX_POSITION - T)
    st = dt__error(DT_ERR_INVALID,
                   "Attention: positions %lld..%lld pass 2^53, the last position a rotary table "
                   "or a mask can name exactly",
                   (long long)past, (long long)(past + T - 1));
  if (!st && s->inv_freq) {
    dt_tensor *c0 = NULL, *s0 = NULL;
    st = rope_tables(s, past, T, dt_tensor_dtype(qh), tmp, &c0, &s0);
    if (!st) st = like_placed(qh, c0, &cs), c0 = NULL;
    if (!st) st = like_placed(qh, s0, &sn), s0 = NULL;
    dt_tensor_release(c0), dt_tensor_release(s0);
    dt_tensor_list_keep(tmp, cs), dt_tensor_list_keep(tmp, sn);
    dt_tensor *qr = NULL, *kr = NULL;
    if (!st) st = rotate(qh, cs, sn, hd / 2, tmp, &qr);
    if (!st && !dt_tensor_list_keep(tmp, qr)) st = DT_ERR_NOMEM;
    if (!st) st = rotate(kh, cs, sn, hd / 2, tmp, &kr);
    if (!st && !dt_tensor_list_keep(tmp, kr)) st = DT_ERR_NOMEM;
    qh = qr, kh = kr;
  }
  /* Keys in ka start at position k0; with a window the cache keeps window - 1 positions, all a
   * later query can see besides its own. */
  int64_t held = 0, keep = s->window > 1 ? s->window - 1 : s->window;
  if (!st && ctx->cache) {
    int64_t held_v = 0;
    st = dt__nn_kv_cache_extend(ctx->cache, ctx->layer, 0, kh, keep, tmp, &ka, &held);
    if (!st) st = dt__nn_kv_cache_extend(ctx->cache, ctx->layer, 1, vh, keep, tmp, &va, &held_v);
  } else {
    ka = kh, va = vh;
  }
  int64_t k0 = past - held, S = held + T, w = s->window;
  dt_attention_options o = {0};
  bool plain_causal = k0 == past && (w == 0 || T <= w);
  bool all_visible = T == 1 && (w == 0 || S <= w);
  if (!st && ctx->mask) {
    mask = ctx->mask;
  } else if (!st && (plain_causal || all_visible)) {
    o.is_causal = plain_causal && T > 1;
  } else if (!st) {
    dt_tensor *m0 = NULL;
    st = position_mask(past, T, k0, S, w, &m0);
    if (!st)
      st = like_placed(qh, m0, &mask);
    else
      dt_tensor_release(m0);
    if (!st && !dt_tensor_list_keep(tmp, mask)) st = DT_ERR_NOMEM;
  }
  DT__KEEP(dt_scaled_dot_product_attention(qh, ka, va, mask, &o, &a, NULL), a);
  DT__KEEP(dt_transpose(a, 1, 2, &at), at);
  DT__KEEP(dt_reshape(at, 3, (int64_t[]){B, T, H * hd}, &ar), ar);
  if (!st) st = child_forward(m, 3, ar, out);
  dt_tensor_list_release(tmp);
  return st;
}

dt_status dt_nn_attention(int64_t dim, const dt_nn_attention_options *options, dt_module **out) {
  static const char fn[] = "dt_nn_attention";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!options) return dt__error(DT_ERR_INVALID, "%s: options is NULL (n_heads is required)", fn);
  dt_nn_attention_options o = *options;
  if (dim < 1 || o.n_heads < 1)
    return dt__error(DT_ERR_INVALID, "%s: dim and n_heads must be >= 1 (got %lld, %lld)", fn,
                     (long long)dim, (long long)o.n_heads);
  if (o.n_kv_heads == 0) o.n_kv_heads = o.n_heads;
  if (o.n_kv_heads < 1 || o.n_heads % o.n_kv_heads != 0)
    return dt__error(DT_ERR_INVALID, "%s: n_kv_heads %lld must be >= 1 and divide n_heads %lld", fn,
                     (long long)o.n_kv_heads, (long long)o.n_heads);
  if (o.head_dim == 0) {
    if (dim % o.n_heads != 0)
      return dt__error(DT_ERR_INVALID,
                       "%s: dim %lld is not a multiple of n_heads %lld: give head_dim", fn,
                       (long long)dim, (long long)o.n_heads);
    o.head_dim = dim / o.n_heads;
  }
  if (o.head_dim < 1 || o.head_dim > INT32_MAX / o.n_heads)
    return dt__error(DT_ERR_INVALID, "%s: head_dim %lld is out of range", fn,
                     (long long)o.head_dim);
  bool rotary = o.rope_inv_freq || o.rope_theta != 0;
  if (!isfinite(o.rope_theta) || o.rope_theta < 0 ||
      (o.rope_theta != 0 && !(o.rope_theta >= FLT_MIN && o.rope_theta <= FLT_MAX)))
    return dt__error(DT_ERR_INVALID,
                     "%s: rope_theta %g must be 0 (no rotary embedding) or a positive normal "
                     "float32 (the inverse frequencies are computed in float32)",
                     fn, o.rope_theta);
  if (rotary && o.head_dim % 2 != 0)
    return dt__error(DT_ERR_INVALID, "%s: rotary embeddings need an even head_dim (got %lld)", fn,
                     (long long)o.head_dim);
  if (!isfinite(o.qk_norm_eps) || o.qk_norm_eps < 0)
    return dt__error(DT_ERR_INVALID, "%s: qk_norm_eps %g must be finite and >= 0", fn,
                     o.qk_norm_eps);
  if (o.sliding_window < 0)
    return dt__error(DT_ERR_INVALID, "%s: sliding_window %lld is negative", fn,
                     (long long)o.sliding_window);
  int64_t half = o.head_dim / 2;
  if (o.rope_inv_freq &&
      (dt_tensor_is_distributed(o.rope_inv_freq) || dt_tensor_ndim(o.rope_inv_freq) != 1 ||
       dt_tensor_dtype(o.rope_inv_freq) != DT_F32 || dt_tensor_size(o.rope_inv_freq, 0) != half))
    return dt__error(DT_ERR_INVALID,
                     "%s: rope_inv_freq must be a local float32 [%lld] (head_dim / 2)", fn,
                     (long long)half);
  static const char *const defaults[6] = {"q_proj", "k_proj", "v_proj",
                                          "o_proj", "q_norm", "k_norm"};
  const char *names[6];
  dt_status st = DT_OK;
  for (int i = 0; i < 6 && !st; i++) {
    names[i] = o.names[i] ? o.names[i] : defaults[i];
    st = check_name(fn, "a child name", o.names[i]);
  }
  if (st) return st;
  attention_state *s = dt__calloc(sizeof *s);
  if (!s) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  s->head_dim = o.head_dim;
  s->window = o.sliding_window;
  s->qk_norm = o.qk_norm_eps > 0;
  if (o.rope_inv_freq) {
    st = dt_contiguous(o.rope_inv_freq, &s->inv_freq);
    dt_tensor *copy = NULL;
    if (!st) st = dt_clone(s->inv_freq, &copy);
    dt_tensor_release(s->inv_freq);
    s->inv_freq = copy;
  } else if (rotary) {
    float *inv = dt__alloc(sizeof(float) * (size_t)half);
    if (!inv) st = dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t i = 0; !st && i < half; i++)
      inv[i] = 1.0f / powf((float)o.rope_theta, (float)(2 * i) / (float)o.head_dim);
    if (!st) st = dt_from_data(inv, 1, &half, DT_F32, &s->inv_freq);
    dt__free(inv);
  }
  dt_module *m = NULL;
  if (!st) st = dt_module_create("Attention", attention_forward, s, &m);
  if (st) {
    attention_release(s);
    return st;
  }
  dt__module_set_release(m, attention_release);
  int64_t qf = o.n_heads * o.head_dim, kf = o.n_kv_heads * o.head_dim;
  st = add_linear(m, names[0], dim, qf, o.qkv_bias, o.seed);
  if (!st) st = add_linear(m, names[1], dim, kf, o.qkv_bias, o.seed + 1);
  if (!st) st = add_linear(m, names[2], dim, kf, o.qkv_bias, o.seed + 2);
  if (!st) st = add_linear(m, names[3], qf, dim, o.out_bias, o.seed + 3);
  for (int i = 4; i < 6 && !st && s->qk_norm; i++) {
    dt_module *n = NULL;
    st = dt_nn_rms_norm(o.head_dim, o.qk_norm_eps, &n);
    if (!st) st = dt_module_add_child(m, names[i], n);
  }
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status dt_nn_attention_set_context(dt_module *attention,
                                      const dt_nn_attention_context *context) {
  static const char fn[] = "dt_nn_attention_set_context";
  if (!dt__module_released_by(attention, attention_release))
    return dt__error(DT_ERR_INVALID, "%s: %s is not an Attention (dt_nn_attention)", fn,
                     attention ? dt_module_type(attention) : "NULL");
  dt_nn_attention_context c = context ? *context : (dt_nn_attention_context){0};
  if (c.cache && (c.layer < 0 || c.layer >= dt_nn_kv_cache_layers(c.cache)))
    return dt__error(DT_ERR_INVALID, "%s: layer %d is outside the cache's 0..%d", fn, c.layer,
                     dt_nn_kv_cache_layers(c.cache) - 1);
  if (c.position < 0 || c.position > DT_NN_MAX_POSITION)
    return dt__error(DT_ERR_INVALID, "%s: position %lld is outside 0..2^53", fn,
                     (long long)c.position);
  attention_state *s = dt_module_user(attention);
  dt_tensor_retain(c.mask);
  dt_tensor_release(s->ctx.mask);
  s->ctx = c;
  return DT_OK;
}

/* ---- The decoder block -------------------------------------------------------------------- */

static dt_status block_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  dt_tensor *n1 = NULL, *a = NULL, *h = NULL, *n2 = NULL, *f = NULL;
  DT__KEEP(dt_module_forward(dt_module_child(m, 0), x, &n1), n1);
  DT__KEEP(dt_module_forward(dt_module_child(m, 1), n1, &a), a);
  DT__KEEP(dt_add(x, a, &h), h);
  DT__KEEP(dt_module_forward(dt_module_child(m, 2), h, &n2), n2);
  DT__KEEP(dt_module_forward(dt_module_child(m, 3), n2, &f), f);
  if (!st) st = dt_add(h, f, out);
  dt_tensor_list_release(tmp);
  return st;
}

static dt_status make_norm(dt_nn_norm_kind kind, int64_t dim, double eps, dt_module **out) {
  return kind == DT_NN_NORM_RMS ? dt_nn_rms_norm(dim, eps, out) : dt_nn_layer_norm(dim, eps, out);
}

dt_status dt_nn_transformer_block(int64_t dim, const dt_nn_block_options *options,
                                  dt_module **out) {
  static const char fn[] = "dt_nn_transformer_block";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!options) return dt__error(DT_ERR_INVALID, "%s: options is NULL", fn);
  const dt_nn_block_options *o = options;
  if (o->norm != DT_NN_NORM_RMS && o->norm != DT_NN_NORM_LAYER)
    return dt__error(DT_ERR_INVALID, "%s: norm %d is not a dt_nn_norm_kind", fn, (int)o->norm);
  if (!(o->norm_eps > 0) || !isfinite(o->norm_eps))
    return dt__error(DT_ERR_INVALID, "%s: norm_eps must be positive and finite (got %g)", fn,
                     o->norm_eps);
  if (o->hidden < 1)
    return dt__error(DT_ERR_INVALID, "%s: hidden must be >= 1 (got %lld)", fn,
                     (long long)o->hidden);
  static const char *const defaults[4] = {"input_layernorm", "self_attn",
                                          "post_attention_layernorm", "mlp"};
  const char *names[4];
  dt_status st = DT_OK;
  for (int i = 0; i < 4 && !st; i++) {
    names[i] = o->names[i] ? o->names[i] : defaults[i];
    st = check_name(fn, "a child name", o->names[i]);
  }
  if (st) return st;
  dt_module *m = NULL, *part = NULL;
  st = dt_module_create("TransformerBlock", block_forward, NULL, &m);
  if (st) return st;
  st = make_norm(o->norm, dim, o->norm_eps, &part);
  if (!st) st = dt_module_add_child(m, names[0], part);
  if (!st) st = dt_nn_attention(dim, &o->attention, &part);
  if (!st) st = dt_module_add_child(m, names[1], part);
  if (!st) st = make_norm(o->norm, dim, o->norm_eps, &part);
  if (!st) st = dt_module_add_child(m, names[2], part);
  if (!st) st = dt_nn_transformer_mlp(dim, o->hidden, &o->mlp, &part);
  if (!st) st = dt_module_add_child(m, names[3], part);
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}
