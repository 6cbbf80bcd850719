/*
 * Scaled dot-product attention, flash style: for each (batch, head) and tile of BR queries
 * the key/value tiles of BC positions are read in turn and folded into a running maximum, sum
 * and weighted sum of values (the online softmax), so the extra memory is a few tiles whatever
 * the sequence length. The backward recomputes each tile's probabilities from the saved
 * log-sum-exp. Tiles are packed into double buffers (any strides and floating dtype), and
 * every sum runs in double. float32 runs attention_f32.c's blocks on the BLAS instead. Also RMS
 * norm, which the decoder models need next to it.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/math/norm.h"

#define BR 32
#define BC 64

/* ---- RMS norm ----------------------------------------------------------------------------- */

dt_status dt__cpu_rms_norm(const dt_tensor *x, int ndims, const dt_tensor *weight, double eps,
                           dt_tensor *out) {
  int lead = x->ndim - ndims;
  int64_t len = dt__numel(ndims, x->shape + lead), rows = dt__numel(lead, x->shape);
  if (len == 0 || rows == 0) return DT_OK;
  double *buf = dt__alloc(sizeof(double) * (size_t)len);
  if (!buf)
    return dt__error(DT_ERR_NOMEM, "rms_norm: out of memory for a row of %lld", (long long)len);
  size_t xs = dt__dtype_sizes[x->dtype], os = dt__dtype_sizes[out->dtype];
  size_t ws = weight ? dt__dtype_sizes[weight->dtype] : 0;
  for (int64_t r = 0; r < rows; r++) {
    /* element offsets of row r: leading dims from r, trailing from the element index */
    int64_t xoff = 0, ooff = 0, rem = r;
    for (int d = lead - 1; d >= 0; d--) {
      xoff += (rem % x->shape[d]) * x->strides[d];
      ooff += (rem % x->shape[d]) * out->strides[d];
      rem /= x->shape[d];
    }
    double ss = 0;
    for (int64_t i = 0; i < len; i++) {
      int64_t xo = xoff, e = i;
      for (int d = x->ndim - 1; d >= lead; d--) {
        xo += (e % x->shape[d]) * x->strides[d];
        e /= x->shape[d];
      }
      buf[i] = dt__load_as_double(x->dtype, dt__tensor_base(x) + xo * (int64_t)xs);
      ss += buf[i] * buf[i];
    }
    double rs = dt__norm_rstd(ss, (double)len, eps);
    for (int64_t i = 0; i < len; i++) {
      int64_t oo = ooff, wo = 0, e = i;
      for (int d = x->ndim - 1; d >= lead; d--) {
        int64_t c = e % x->shape[d];
        oo += c * out->strides[d];
        if (weight) wo += c * weight->strides[d - lead];
        e /= x->shape[d];
      }
      double w = weight
                     ? dt__load_as_double(weight->dtype, dt__tensor_base(weight) + wo * (int64_t)ws)
                     : 1.0;
      dt__store_from_double(out->dtype, dt__tensor_base(out) + oo * (int64_t)os, buf[i] * rs * w);
    }
  }
  dt__free(buf);
  return DT_OK;
}

/* ---- Attention ------------------------------------------------------------------------------ */

/* Element (b, h, i, j) of a 4-D tensor, as double. */
static inline double at4(const dt_tensor *t, int64_t b, int64_t h, int64_t i, int64_t j) {
  int64_t off = b * t->strides[0] + h * t->strides[1] + i * t->strides[2] + j * t->strides[3];
  return dt__load_as_double(t->dtype,
                            dt__tensor_base(t) + off * (int64_t)dt__dtype_sizes[t->dtype]);
}

static inline void put4(dt_tensor *t, int64_t b, int64_t h, int64_t i, int64_t j, double v) {
  int64_t off = b * t->strides[0] + h * t->strides[1] + i * t->strides[2] + j * t->strides[3];
  dt__store_from_double(t->dtype, dt__tensor_base(t) + off * (int64_t)dt__dtype_sizes[t->dtype], v);
}

/* Rows [r0, r0 + n) of head (b, h) of t, columns [0, cols), into dst [n][cols]. */
static void pack(const dt_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t cols,
                 double *dst) {
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = at4(t, b, h, r0 + r, c);
}

/* The score adjustment of pair (i, j) of head (b, h): 0, -inf (dropped) or the float mask. */
static inline double mask_at(const dt_attention_args *a, int64_t b, int64_t h, int64_t i,
                             int64_t j) {
  if (a->causal && j > i) return -INFINITY;
  if (!a->mask) return 0;
  const int64_t *s = a->mask_strides;
  int64_t off = b * s[0] + h * s[1] + i * s[2] + j * s[3];
  const char *p = dt__tensor_base(a->mask) + off * (int64_t)dt__dtype_sizes[a->mask->dtype];
  if (a->mask->dtype == DT_BOOL) return *(const uint8_t *)p ? 0 : -INFINITY;
  return dt__load_as_double(a->mask->dtype, p);
}

/* The scores of a query tile against a key tile: s[r][c] = scale q_r.k_c + mask. */
static void tile_scores(const dt_attention_args *a, int64_t b, int64_t h, int64_t i0, int64_t nr,
                        int64_t j0, int64_t nc, const double *q, const double *k, double *s) {
  int64_t E = a->q->shape[3];
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++) {
      double m = mask_at(a, b, h, i0 + r, j0 + c);
      double dot = 0;
      if (m != -INFINITY)
        for (int64_t e = 0; e < E; e++) dot += q[r * E + e] * k[c * E + e];
      s[r * BC + c] = m == -INFINITY ? -INFINITY : a->scale * dot + m;
    }
}

typedef struct tiles {
  double *q, *k, *v, *s, *acc, *m, *l, *g, *dq, *lse, *dd;
} tiles;

static dt_status tiles_alloc(tiles *t, int64_t E, int64_t Ev) {
  size_t n =
      (size_t)(BR * E + BC * E + BC * Ev + BR * BC + BR * Ev + 2 * BR + BR * Ev + BR * E + 2 * BR);
  double *p = dt__alloc(sizeof(double) * n);
  if (!p) return dt__error(DT_ERR_NOMEM, "scaled_dot_product_attention: out of memory for tiles");
  t->q = p, p += BR * E;
  t->k = p, p += BC * E;
  t->v = p, p += BC * Ev;
  t->s = p, p += BR * BC;
  t->acc = p, p += BR * Ev;
  t->m = p, p += BR;
  t->l = p, p += BR;
  t->g = p, p += BR * Ev;
  t->dq = p, p += BR * E;
  t->lse = p, p += BR;
  t->dd = p;
  return DT_OK;
}

/* The last key a query tile can keep (causal: its last query's position). */
static int64_t key_end(const dt_attention_args *a, int64_t i0, int64_t nr, int64_t S) {
  if (!a->causal) return S;
  int64_t e = i0 + nr;
  return e < S ? e : S;
}

/* Keys j0.. (up to BC, before end) of head h's kv head packed into t->k and t->v, and the
 * scores of the query tile (packed in t->q) against them in t->s; returns how many keys. */
static int64_t key_tile(const dt_attention_args *a, tiles *t, int64_t b, int64_t h, int64_t i0,
                        int64_t nr, int64_t j0, int64_t end) {
  int64_t kh = h / (a->q->shape[1] / a->k->shape[1]);
  int64_t nc = end - j0 < BC ? end - j0 : BC;
  pack(a->k, b, kh, j0, nc, a->q->shape[3], t->k);
  pack(a->v, b, kh, j0, nc, a->v->shape[3], t->v);
  tile_scores(a, b, h, i0, nr, j0, nc, t->q, t->k, t->s);
  return nc;
}

static void forward_tile(const dt_attention_args *a, tiles *t, int64_t b, int64_t h, int64_t i0,
                         int64_t nr, dt_tensor *out, dt_tensor *lse) {
  int64_t E = a->q->shape[3], Ev = a->v->shape[3], S = a->k->shape[2];
  pack(a->q, b, h, i0, nr, E, t->q);
  for (int64_t r = 0; r < nr; r++) t->m[r] = -INFINITY, t->l[r] = 0;
  memset(t->acc, 0, sizeof(double) * (size_t)(nr * Ev));
  int64_t end = key_end(a, i0, nr, S);
  for (int64_t j0 = 0; j0 < end; j0 += BC) {
    int64_t nc = key_tile(a, t, b, h, i0, nr, j0, end);
    for (int64_t r = 0; r < nr; r++) {
      double *s = t->s + r * BC, mx = t->m[r];
      for (int64_t c = 0; c < nc; c++) /* a NaN score makes the row NaN (lse too) */
        mx = s[c] > mx || s[c] != s[c] ? s[c] : mx;
      if (mx == -INFINITY) continue; /* nothing kept yet */
      double alpha = exp(t->m[r] - mx), sum = 0;
      double *acc = t->acc + r * Ev;
      for (int64_t e = 0; e < Ev; e++) acc[e] *= alpha;
      for (int64_t c = 0; c < nc; c++) {
        double p = exp(s[c] - mx);
        sum += p;
        if (p != 0)
          for (int64_t e = 0; e < Ev; e++) acc[e] += p * t->v[c * Ev + e];
      }
      t->l[r] = t->l[r] * alpha + sum;
      t->m[r] = mx;
    }
  }
  for (int64_t r = 0; r < nr; r++) {
    double l = t->l[r]; /* 0: the query kept no key, and its output is 0 as PyTorch's */
    for (int64_t e = 0; e < Ev; e++)
      put4(out, b, h, i0 + r, e, l == 0 ? 0.0 : t->acc[r * Ev + e] / l);
    double v = l > 0 ? t->m[r] + log(l) : l == 0 ? -INFINITY : NAN;
    int64_t off = b * lse->strides[0] + h * lse->strides[1] + (i0 + r) * lse->strides[2];
    dt__store_from_double(lse->dtype,
                          dt__tensor_base(lse) + off * (int64_t)dt__dtype_sizes[lse->dtype], v);
  }
}

/* float16 and bfloat16 run the float32 kernels on float32 copies of their operands (as
 * PyTorch's CPU attention computes reduced-precision inputs in float32): w->a reads the
 * copies; w->tmp holds them for widen_release. */
typedef struct widened {
  dt_attention_args a;
  dt_tensor *tmp[4];
} widened;

static bool reduced(dt_dtype d) { return d == DT_F16 || d == DT_BF16; }

/* *out = a float32 copy of t (t's shape), or NULL when t is NULL. */
static dt_status widen(const dt_tensor *t, dt_tensor **out) {
  *out = NULL;
  if (!t) return DT_OK;
  dt_status st = dt__tensor_new(t->ndim, t->shape, DT_F32, out);
  if (!st) dt__cpu_copy(*out, t);
  return st;
}

static void widen_release(widened *w) {
  for (int i = 0; i < 4; i++) dt_tensor_release(w->tmp[i]);
}

static dt_status widen_args(const dt_attention_args *a, widened *w) {
  *w = (widened){.a = *a};
  const dt_tensor *mask = a->mask && a->mask->dtype != DT_BOOL ? a->mask : NULL;
  dt_status st = widen(a->q, &w->tmp[0]);
  if (!st) st = widen(a->k, &w->tmp[1]);
  if (!st) st = widen(a->v, &w->tmp[2]);
  if (!st) st = widen(mask, &w->tmp[3]);
  if (st) {
    widen_release(w);
    return st;
  }
  w->a.q = w->tmp[0], w->a.k = w->tmp[1], w->a.v = w->tmp[2];
  if (mask) {
    w->a.mask = w->tmp[3];
    /* the copy is contiguous: its strides seen as [B, H, T, S], 0 where it broadcasts */
    const dt_tensor *m = w->a.mask;
    for (int i = 0, lead = 4 - m->ndim; i < 4; i++) {
      w->a.mask_strides[i] = i < lead || a->mask_strides[i] == 0 ? 0 : m->strides[i - lead];
    }
  }
  return DT_OK;
}

/* The float32 forward for float16 / bfloat16 q, k, v: out rounded to its dtype, lse float32. */
static dt_status attention_widened(const dt_attention_args *a, dt_tensor *out, dt_tensor *lse) {
  widened w;
  dt_tensor *out32 = NULL;
  dt_status st = widen_args(a, &w);
  if (st) return st;
  st = dt__tensor_new(out->ndim, out->shape, DT_F32, &out32);
  if (!st) st = dt__cpu_attention_f32(&w.a, out32, lse);
  if (!st) dt__cpu_copy(out, out32);
  dt_tensor_release(out32);
  widen_release(&w);
  return st;
}

/* The float32 backward for float16 / bfloat16: gs widened too, dq, dk, dv rounded. */
static dt_status attention_backward_widened(const dt_attention_args *a, const dt_tensor *gs,
                                            dt_tensor *dq, dt_tensor *dk, dt_tensor *dv) {
  widened w;
  dt_tensor *g32 = NULL, *d32[3] = {NULL, NULL, NULL}, *d[3] = {dq, dk, dv};
  dt_status st = widen_args(a, &w);
  if (st) return st;
  st = widen(gs, &g32);
  for (int i = 0; i < 3 && !st; i++)
    if (d[i]) st = dt__tensor_new(d[i]->ndim, d[i]->shape, DT_F32, &d32[i]);
  if (!st) st = dt__cpu_attention_backward_f32(&w.a, g32, d32[0], d32[1], d32[2]);
  for (int i = 0; i < 3; i++) {
    if (!st && d[i]) dt__cpu_copy(d[i], d32[i]);
    dt_tensor_release(d32[i]);
  }
  dt_tensor_release(g32);
  widen_release(&w);
  return st;
}

dt_status dt__cpu_attention(const dt_attention_args *a, dt_tensor *out, dt_tensor *lse) {
  int64_t B = a->q->shape[0], H = a->q->shape[1], T = a->q->shape[2];
  if (dt__tensor_numel(out) == 0 && dt__tensor_numel(lse) == 0) return DT_OK;
  if (a->q->dtype == DT_F32 && out->dtype == DT_F32 && lse->dtype == DT_F32)
    return dt__cpu_attention_f32(a, out, lse);
  if (reduced(a->q->dtype) && lse->dtype == DT_F32) return attention_widened(a, out, lse);
  tiles t;
  dt_status st = tiles_alloc(&t, a->q->shape[3], a->v->shape[3]);
  if (st) return st;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i0 = 0; i0 < T; i0 += BR)
        forward_tile(a, &t, b, h, i0, T - i0 < BR ? T - i0 : BR, out, lse);
  dt__free(t.q);
  return DT_OK;
}

/* One query tile of head h against every key tile: dq of the tile, and dk, dv (double
 * accumulators [S][E], [S][Ev] of kv head h's group) added to. */
static void backward_tile(const dt_attention_args *a, tiles *t, int64_t b, int64_t h, int64_t i0,
                          int64_t nr, const dt_tensor *gs, double *dk, double *dv, dt_tensor *dq) {
  int64_t E = a->q->shape[3], Ev = a->v->shape[3], S = a->k->shape[2];
  pack(a->q, b, h, i0, nr, E, t->q);
  pack(gs, b, h, i0, nr, Ev, t->g);
  for (int64_t r = 0; r < nr; r++) {
    t->lse[r] = at4(gs, b, h, i0 + r, Ev);
    t->dd[r] = at4(gs, b, h, i0 + r, Ev + 1);
  }
  memset(t->dq, 0, sizeof(double) * (size_t)(nr * E));
  int64_t end = key_end(a, i0, nr, S);
  for (int64_t j0 = 0; j0 < end; j0 += BC) {
    int64_t nc = key_tile(a, t, b, h, i0, nr, j0, end);
    for (int64_t r = 0; r < nr; r++) {
      if (t->lse[r] == -INFINITY) continue;
      const double *g = t->g + r * Ev, *q = t->q + r * E;
      for (int64_t c = 0; c < nc; c++) {
        double p = exp(t->s[r * BC + c] - t->lse[r]);
        if (p == 0) continue;
        double dp = 0;
        for (int64_t e = 0; e < Ev; e++) {
          dv[(j0 + c) * Ev + e] += p * g[e];
          dp += g[e] * t->v[c * Ev + e];
        }
        double ds = p * (dp - t->dd[r]) * a->scale;
        for (int64_t e = 0; e < E; e++) {
          t->dq[r * E + e] += ds * t->k[c * E + e];
          dk[(j0 + c) * E + e] += ds * q[e];
        }
      }
    }
  }
  if (dq)
    for (int64_t r = 0; r < nr; r++)
      for (int64_t e = 0; e < E; e++) put4(dq, b, h, i0 + r, e, t->dq[r * E + e]);
}

dt_status dt__cpu_attention_backward(const dt_attention_args *a, const dt_tensor *gs, dt_tensor *dq,
                                     dt_tensor *dk, dt_tensor *dv) {
  int64_t B = a->q->shape[0], H = a->q->shape[1], T = a->q->shape[2], E = a->q->shape[3];
  int64_t Hk = a->k->shape[1], S = a->k->shape[2], Ev = a->v->shape[3], rep = H / Hk;
  if (a->q->dtype == DT_F32 && (!dq || dq->dtype == DT_F32) && (!dk || dk->dtype == DT_F32) &&
      (!dv || dv->dtype == DT_F32))
    return dt__cpu_attention_backward_f32(a, gs, dq, dk, dv);
  if (reduced(a->q->dtype)) return attention_backward_widened(a, gs, dq, dk, dv);
  tiles t;
  dt_status st = tiles_alloc(&t, E, Ev);
  if (st) return st;
  double *acc = dt__alloc(sizeof(double) * (size_t)(S * (E + Ev) + 1));
  if (!acc) {
    dt__free(t.q);
    return dt__error(DT_ERR_NOMEM, "scaled_dot_product_attention backward: out of memory");
  }
  double *dk_acc = acc, *dv_acc = acc + S * E;
  for (int64_t b = 0; b < B; b++)
    for (int64_t kh = 0; kh < Hk; kh++) {
      memset(acc, 0, sizeof(double) * (size_t)(S * (E + Ev)));
      for (int64_t h = kh * rep; h < (kh + 1) * rep; h++)
        for (int64_t i0 = 0; i0 < T; i0 += BR)
          backward_tile(a, &t, b, h, i0, T - i0 < BR ? T - i0 : BR, gs, dk_acc, dv_acc, dq);
      for (int64_t j = 0; j < S; j++) {
        if (dk)
          for (int64_t e = 0; e < E; e++) put4(dk, b, kh, j, e, dk_acc[j * E + e]);
        if (dv)
          for (int64_t e = 0; e < Ev; e++) put4(dv, b, kh, j, e, dv_acc[j * Ev + e]);
      }
    }
  dt__free(acc);
  dt__free(t.q);
  return DT_OK;
}
