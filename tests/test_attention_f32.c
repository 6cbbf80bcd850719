/*
 * The float32 scaled_dot_product_attention (src/kernels/cpu/attention_f32.c: blocks through
 * sgemm, the online softmax in float32): output, log-sum-exp and the gradients of q, k, v
 * against a naive reference in double that builds each head's whole [T, S] probability
 * matrix, for causal and not, bool and float masks, grouped-query heads, one query, sequences
 * that are not a multiple of the blocks, S != T, head dims that change the block sizes,
 * strided inputs; bfloat16 and float16 widened to these kernels; a query that keeps no key (zeros,
 * as PyTorch); and the same bits on 1 and 2 threads.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "reference.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

typedef struct shape {
  int64_t B, H, Hk, T, S, E, Ev;
  bool causal;
  int mask;       /* 0: none, 1: bool [T, S], 2: float [B, 1, T, S] */
  bool strided;   /* q a transposed [B, T, H, E] view, k with a non-unit last stride */
  dt_dtype dtype; /* float32 (0) unless set: bfloat16 and float16 run widened to float32 */
} shape;

/* t converted to dtype (t itself for float32); releases t. */
static dt_tensor *as_dtype(dt_tensor *t, dt_dtype dtype) {
  if (dtype == DT_F32) return t;
  dt_tensor *c = NULL;
  OK(dt_to(t, dtype, &c));
  dt_tensor_release(t);
  return c;
}

/* The mask's value for (b, i, j): kept (bool) or added (float); one kept key per row. */
static bool mask_keep(int64_t i, int64_t j, int64_t S) {
  return (i * 7 + j * 3) % 5 != 0 || j == i % S;
}
static double mask_add(int64_t b, int64_t i, int64_t j) {
  return 0.25 * sin((double)(b + 3 * i + 5 * j));
}

typedef struct reference {
  double *out, *lse, *dq, *dk, *dv;
} reference;

/* Naive attention in double and its gradients for loss = sum(out * go) + sum(lse * gl). */
static reference naive(const shape *s, const double *q, const double *k, const double *v,
                       const double *go, const double *gl, const double *madd, double scale) {
  int64_t B = s->B, H = s->H, Hk = s->Hk, T = s->T, S = s->S, E = s->E, Ev = s->Ev;
  reference r = {calloc((size_t)(B * H * T * Ev), sizeof(double)),
                 calloc((size_t)(B * H * T), sizeof(double)),
                 calloc((size_t)(B * H * T * E), sizeof(double)),
                 calloc((size_t)(B * Hk * S * E), sizeof(double)),
                 calloc((size_t)(B * Hk * S * Ev), sizeof(double))};
  double *p = malloc(sizeof(double) * (size_t)(T * S)),
         *ds = malloc(sizeof(double) * (size_t)(T * S));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / Hk), qh = (b * H + h) * T, kvh = (b * Hk + kh) * S;
      for (int64_t i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
          double d = 0;
          for (int64_t e = 0; e < E; e++) d += q[(qh + i) * E + e] * k[(kvh + j) * E + e];
          bool keep = (!s->causal || j <= i) && (s->mask != 1 || mask_keep(i, j, S));
          p[i * S + j] =
              keep ? scale * d + (s->mask == 2 ? madd[(b * T + i) * S + j] : 0) : -INFINITY;
          mx = fmax(mx, p[i * S + j]);
        }
        for (int64_t j = 0; j < S; j++)
          sum += p[i * S + j] == -INFINITY ? 0 : exp(p[i * S + j] - mx);
        r.lse[qh + i] = mx + log(sum);
        for (int64_t j = 0; j < S; j++) p[i * S + j] = exp(p[i * S + j] - r.lse[qh + i]);
        for (int64_t e = 0; e < Ev; e++) {
          double a = 0;
          for (int64_t j = 0; j < S; j++) a += p[i * S + j] * v[(kvh + j) * Ev + e];
          r.out[(qh + i) * Ev + e] = a;
        }
        /* dS = P (dP - rowsum(go * out) + gl), dP = go v^T */
        double d = 0;
        for (int64_t e = 0; e < Ev; e++) d += go[(qh + i) * Ev + e] * r.out[(qh + i) * Ev + e];
        for (int64_t j = 0; j < S; j++) {
          double dp = 0;
          for (int64_t e = 0; e < Ev; e++) dp += go[(qh + i) * Ev + e] * v[(kvh + j) * Ev + e];
          ds[i * S + j] = p[i * S + j] * (dp - d + gl[qh + i]);
          for (int64_t e = 0; e < Ev; e++)
            r.dv[(kvh + j) * Ev + e] += p[i * S + j] * go[(qh + i) * Ev + e];
        }
      }
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++)
          for (int64_t e = 0; e < E; e++) {
            r.dq[(qh + i) * E + e] += scale * ds[i * S + j] * k[(kvh + j) * E + e];
            r.dk[(kvh + j) * E + e] += scale * ds[i * S + j] * q[(qh + i) * E + e];
          }
    }
  free(p), free(ds);
  return r;
}

/* |got - want| <= tol (|want| + max |want| of the tensor): relative, with the tensor's scale as
 * the floor for elements that cancel to near 0. */
static void expect_close(const char *what, const shape *s, const double *got, const double *want,
                         int64_t n, double tol) {
  double top = 0;
  for (int64_t i = 0; i < n; i++) top = fmax(top, fabs(want[i]));
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= tol * (fabs(want[i]) + top),
              "%s[%lld] %.9g vs %.9g (T %lld S %lld E %lld Ev %lld H %lld/%lld causal %d mask %d)",
              what, (long long)i, got[i], want[i], (long long)s->T, (long long)s->S,
              (long long)s->E, (long long)s->Ev, (long long)s->H, (long long)s->Hk, s->causal,
              s->mask);
}

/* q [B, H, T, E] (a transposed [B, T, H, E] when strided), k, v; requiring grad. */
static dt_tensor *input(const shape *s, int which, int64_t heads, int64_t seq, int64_t dim) {
  dt_tensor *t = NULL, *base = NULL;
  uint64_t seed = 100 + (uint64_t)which;
  if (s->strided && which == 0) {
    OK(dt_randn(4, (int64_t[]){s->B, seq, heads, dim}, DT_F32, seed, &base));
    base = as_dtype(base, s->dtype);
    OK(dt_transpose(base, 1, 2, &t));
  } else if (s->strided && which == 1) {
    OK(dt_randn(4, (int64_t[]){s->B, heads, dim, seq}, DT_F32, seed, &base));
    base = as_dtype(base, s->dtype);
    OK(dt_transpose(base, 2, 3, &t));
  } else {
    OK(dt_randn(4, (int64_t[]){s->B, heads, seq, dim}, DT_F32, seed, &t));
    t = as_dtype(t, s->dtype);
  }
  dt_tensor_release(base);
  OK(dt_tensor_set_requires_grad(t, true));
  return t;
}

static dt_tensor *make_mask(const shape *s) {
  dt_tensor *m = NULL;
  if (s->mask == 1) {
    uint8_t *keep = malloc((size_t)(s->T * s->S));
    for (int64_t i = 0; i < s->T; i++)
      for (int64_t j = 0; j < s->S; j++) keep[i * s->S + j] = mask_keep(i, j, s->S);
    OK(dt_from_data(keep, 2, (int64_t[]){s->T, s->S}, DT_BOOL, &m));
    free(keep);
  } else if (s->mask == 2) {
    float *add = malloc(sizeof(float) * (size_t)(s->B * s->T * s->S));
    for (int64_t b = 0; b < s->B; b++)
      for (int64_t i = 0; i < s->T; i++)
        for (int64_t j = 0; j < s->S; j++)
          add[(b * s->T + i) * s->S + j] = (float)mask_add(b, i, j);
    OK(dt_from_data(add, 4, (int64_t[]){s->B, 1, s->T, s->S}, DT_F32, &m));
    m = as_dtype(m, s->dtype);
    free(add);
  }
  return m;
}

static void check_case(shape s) {
  dt_tensor *q = input(&s, 0, s.H, s.T, s.E), *k = input(&s, 1, s.Hk, s.S, s.E);
  dt_tensor *v = input(&s, 2, s.Hk, s.S, s.Ev), *m = make_mask(&s);
  dt_tensor *go = NULL, *gl = NULL, *out = NULL, *lse = NULL;
  OK(dt_randn(4, (int64_t[]){s.B, s.H, s.T, s.Ev}, DT_F32, 7, &go));
  go = as_dtype(go, s.dtype);
  OK(dt_randn(3, (int64_t[]){s.B, s.H, s.T}, DT_F32, 8, &gl));
  dt_attention_options o = {.is_causal = s.causal};
  OK(dt_scaled_dot_product_attention(q, k, v, m, &o, &out, &lse));
  dt_tensor *a = NULL, *b = NULL, *sa = NULL, *sb = NULL, *loss = NULL;
  OK(dt_mul(out, go, &a));
  OK(dt_mul(lse, gl, &b));
  OK(dt_sum(a, &sa));
  OK(dt_sum(b, &sb));
  OK(dt_add(sa, sb, &loss));
  OK(dt_backward(loss, NULL));
  dt_tensor *gq = NULL, *gk = NULL, *gv = NULL;
  OK(dt_tensor_grad(q, &gq));
  OK(dt_tensor_grad(k, &gk));
  OK(dt_tensor_grad(v, &gv));
  double *qv = ref_values(q), *kv = ref_values(k), *vv = ref_values(v), *gov = ref_values(go),
         *glv = ref_values(gl);
  double *mv = s.mask == 2 ? ref_values(m) : NULL; /* the mask's values as rounded */
  reference r = naive(&s, qv, kv, vv, gov, glv, mv, 1 / sqrt((double)s.E));
  free(mv);
  double *ov = ref_values(out), *lv = ref_values(lse), *dq = ref_values(gq), *dk = ref_values(gk),
         *dv = ref_values(gv);
  int64_t nq = s.B * s.H * s.T, nk = s.B * s.Hk * s.S;
  /* the reference reads the rounded inputs; a 16-bit result is rounded once more (bfloat16:
   * 8 bits, float16: 11), and the backward reads the rounded output */
  double tol = s.dtype == DT_BF16 ? 2e-2 : s.dtype == DT_F16 ? 4e-3 : 1e-5;
  cr_assert_eq(dt_tensor_dtype(out), s.dtype);
  cr_assert_eq(dt_tensor_dtype(lse), DT_F32);
  expect_close("out", &s, ov, r.out, nq * s.Ev, tol);
  expect_close("lse", &s, lv, r.lse, nq, s.dtype == DT_F32 ? 1e-5 : 1e-6);
  expect_close("dq", &s, dq, r.dq, nq * s.E, tol);
  expect_close("dk", &s, dk, r.dk, nk * s.E, tol);
  expect_close("dv", &s, dv, r.dv, nk * s.Ev, tol);
  free(qv), free(kv), free(vv), free(gov), free(glv), free(ov), free(lv), free(dq), free(dk);
  free(dv), free(r.out), free(r.lse), free(r.dq), free(r.dk), free(r.dv);
  dt_tensor *all[] = {q, k, v, m, go, gl, out, lse, a, b, sa, sb, loss, gq, gk, gv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
}

Test(attention_f32, causal_and_full_against_naive_double) {
  check_case(
      (shape){2, 3, 3, 130, 130, 64, 64, true, 0, false, DT_F32}); /* 3 query blocks, last short */
  check_case((shape){1, 2, 2, 100, 100, 64, 64, false, 0, false, DT_F32});
  check_case((shape){1, 2, 2, 1, 1, 64, 64, true, 0, false, DT_F32});     /* T = 1 */
  check_case((shape){1, 2, 2, 1, 77, 64, 48, false, 0, false, DT_F32});   /* one query, decode */
  check_case((shape){2, 2, 1, 70, 150, 32, 40, false, 0, false, DT_F32}); /* S != T, GQA 2 over 1 */
  check_case((shape){1, 2, 2, 150, 70, 16, 16, true, 0, false, DT_F32});  /* T > S causal */
}

Test(attention_f32, masks_grouped_heads_and_block_sizes) {
  check_case((shape){2, 4, 2, 97, 97, 64, 64, true, 1, false, DT_F32});   /* bool mask, GQA */
  check_case((shape){2, 4, 1, 65, 90, 64, 32, false, 2, false, DT_F32});  /* float mask by batch */
  check_case((shape){1, 2, 2, 80, 80, 128, 128, true, 0, false, DT_F32}); /* 32-key blocks */
  check_case((shape){1, 2, 2, 300, 300, 8, 8, false, 1, false, DT_F32});  /* 256-key blocks */
  check_case(
      (shape){1, 1, 1, 40, 40, 300, 5, true, 0, false, DT_F32}); /* wide heads: 16-key blocks */
}

/* bfloat16 and float16 run the float32 kernels on widened copies (PyTorch's CPU attention
 * computes them in float32 too): against the double reference on the rounded inputs. */
Test(attention_f32, bfloat16_and_float16_widened) {
  check_case((shape){2, 3, 3, 130, 130, 64, 64, true, 0, false, DT_BF16});
  check_case((shape){2, 4, 1, 65, 90, 64, 32, false, 2, false, DT_BF16}); /* float mask, GQA */
  check_case((shape){1, 3, 3, 33, 45, 24, 8, false, 1, true, DT_F16});    /* bool mask, strided */
  check_case((shape){2, 4, 2, 97, 97, 64, 64, true, 2, false, DT_F16});
}

Test(attention_f32, strided_inputs) {
  check_case((shape){2, 4, 2, 70, 70, 16, 16, true, 0, true, DT_F32});
  check_case((shape){1, 3, 3, 33, 45, 24, 8, false, 2, true, DT_F32});
}

/* The gradients of q, k, v for loss = sum(out * w) (w may hold NaN), caller frees. */
static void no_key_grads(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *m, dt_tensor *w,
                         double **g) {
  dt_tensor *out = NULL, *ow = NULL, *sum = NULL, *leaves[3] = {q, k, v};
  for (int i = 0; i < 3; i++) OK(dt_tensor_zero_grad(leaves[i], true));
  OK(dt_scaled_dot_product_attention(q, k, v, m, NULL, &out, NULL));
  OK(dt_mul(out, w, &ow));
  OK(dt_sum(ow, &sum));
  OK(dt_backward(sum, NULL));
  for (int i = 0; i < 3; i++) {
    dt_tensor *gi = NULL;
    OK(dt_tensor_grad(leaves[i], &gi));
    g[i] = ref_values(gi);
    dt_tensor_release(gi);
  }
  dt_tensor_release(out), dt_tensor_release(ow), dt_tensor_release(sum);
}

/* A query that keeps no key: zero outputs (PyTorch's), lse -inf, and no gradient from it (its
 * q row's gradient 0, nothing added to k and v), as the double kernel. dv stays finite even
 * when the output gradient of that row is NaN (the sgemm's 0 * NaN made it NaN): the gradients
 * equal those of a loss that leaves the row out. */
Test(attention_f32, query_keeping_no_key) {
  int64_t T = 70, S = 70, E = 16;
  uint8_t *keep = malloc((size_t)(T * S));
  for (int64_t i = 0; i < T * S; i++) keep[i] = i / S != 5;
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *m = NULL, *out = NULL, *lse = NULL;
  OK(dt_from_data(keep, 2, (int64_t[]){T, S}, DT_BOOL, &m));
  OK(dt_randn(4, (int64_t[]){1, 1, T, E}, DT_F32, 1, &q));
  OK(dt_randn(4, (int64_t[]){1, 1, S, E}, DT_F32, 2, &k));
  OK(dt_randn(4, (int64_t[]){1, 1, S, E}, DT_F32, 3, &v));
  dt_tensor *leaves[3] = {q, k, v};
  for (int i = 0; i < 3; i++) OK(dt_tensor_set_requires_grad(leaves[i], true));
  OK(dt_scaled_dot_product_attention(q, k, v, m, NULL, &out, &lse));
  double *ov = ref_values(out), *lv = ref_values(lse);
  for (int64_t i = 0; i < T; i++) {
    for (int64_t e = 0; e < E; e++)
      cr_assert(i == 5 ? ov[i * E + e] == 0 : isfinite(ov[i * E + e]), "row %lld: %g", (long long)i,
                ov[i * E + e]);
    cr_assert_eq(lv[i] == -INFINITY, i == 5, "lse %lld: %g", (long long)i, lv[i]);
  }
  /* w: 1 on the rows that kept keys; on row 5 0 (the reference) or NaN. */
  float *wv = malloc(sizeof(float) * (size_t)(T * E));
  dt_tensor *w0 = NULL, *wn = NULL;
  for (int64_t i = 0; i < T * E; i++) wv[i] = i / E == 5 ? 0.0f : 1.0f;
  OK(dt_from_data(wv, 4, (int64_t[]){1, 1, T, E}, DT_F32, &w0));
  for (int64_t e = 0; e < E; e++) wv[5 * E + e] = NAN;
  OK(dt_from_data(wv, 4, (int64_t[]){1, 1, T, E}, DT_F32, &wn));
  double *want[3], *got[3];
  no_key_grads(q, k, v, m, w0, want);
  no_key_grads(q, k, v, m, wn, got);
  for (int g = 0; g < 3; g++)
    for (int64_t i = 0; i < T * E; i++) {
      cr_assert(isfinite(want[g][i]), "grad %d element %lld: %g", g, (long long)i, want[g][i]);
      cr_assert_eq(got[g][i], want[g][i], "grad %d element %lld: %g vs %g", g, (long long)i,
                   got[g][i], want[g][i]);
      if (g == 0 && i / E == 5) cr_assert_eq(got[g][i], 0.0);
    }
  for (int g = 0; g < 3; g++) free(want[g]), free(got[g]);
  free(keep), free(wv), free(ov), free(lv);
  dt_tensor *all[] = {q, k, v, m, out, lse, w0, wn};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
}

/* Outputs and gradients of a causal GQA case on 1 thread and on 2: the same bits. */
static void run_threads(int threads, float **got, int64_t *sizes) {
  OK(dt_set_num_threads(threads));
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *s = NULL;
  OK(dt_randn(4, (int64_t[]){2, 4, 200, 32}, DT_F32, 11, &q));
  OK(dt_randn(4, (int64_t[]){2, 2, 200, 32}, DT_F32, 12, &k));
  OK(dt_randn(4, (int64_t[]){2, 2, 200, 32}, DT_F32, 13, &v));
  dt_tensor *leaves[3] = {q, k, v};
  for (int i = 0; i < 3; i++) OK(dt_tensor_set_requires_grad(leaves[i], true));
  dt_attention_options o = {.is_causal = true};
  OK(dt_scaled_dot_product_attention(q, k, v, NULL, &o, &out, &lse));
  dt_tensor *sq = NULL;
  OK(dt_mul(out, out, &sq));
  OK(dt_sum(sq, &s));
  OK(dt_backward(s, NULL));
  dt_tensor *res[5] = {out, lse, NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) OK(dt_tensor_grad(leaves[i], &res[2 + i]));
  for (int i = 0; i < 5; i++) {
    sizes[i] = dt_tensor_numel(res[i]);
    got[i] = malloc(sizeof(float) * (size_t)sizes[i]);
    memcpy(got[i], dt_tensor_data(res[i]), sizeof(float) * (size_t)sizes[i]);
  }
  for (int i = 2; i < 5; i++) dt_tensor_release(res[i]);
  dt_tensor *all[] = {q, k, v, out, lse, sq, s};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  OK(dt_set_num_threads(0));
}

Test(attention_f32, same_bits_on_1_and_2_threads) {
  float *one[5], *two[5];
  int64_t n1[5], n2[5];
  run_threads(1, one, n1);
  run_threads(2, two, n2);
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(n1[i], n2[i]);
    cr_assert(memcmp(one[i], two[i], sizeof(float) * (size_t)n1[i]) == 0, "result %d differs", i);
    free(one[i]), free(two[i]);
  }
}

/* The gradients of q, k, v (as doubles, caller frees) for loss = sum(out * go), q, k, v and go
 * [B, H, T, E] of one dtype, causal. */
static void causal_grads(dt_tensor *const src[4], dt_dtype dtype, double *g[3]) {
  dt_tensor *t[4] = {NULL}, *out = NULL, *prod = NULL, *sum = NULL;
  for (int i = 0; i < 4; i++) {
    dt_tensor *c = NULL;
    OK(dt_to(src[i], dtype, &c));
    OK(dt_clone(c, &t[i])); /* a leaf of its own even when dtype is src's */
    dt_tensor_release(c);
    if (i < 3) OK(dt_tensor_set_requires_grad(t[i], true));
  }
  OK(dt_scaled_dot_product_attention(t[0], t[1], t[2], NULL,
                                     &(dt_attention_options){.is_causal = true}, &out, NULL));
  OK(dt_mul(out, t[3], &prod));
  OK(dt_sum(prod, &sum));
  OK(dt_backward(sum, NULL));
  for (int i = 0; i < 3; i++) {
    dt_tensor *gi = NULL;
    OK(dt_tensor_grad(t[i], &gi));
    cr_assert_eq(dt_tensor_dtype(gi), dtype);
    g[i] = ref_values(gi);
    dt_tensor_release(gi);
  }
  for (int i = 0; i < 4; i++) dt_tensor_release(t[i]);
  dt_tensor_release(out), dt_tensor_release(prod), dt_tensor_release(sum);
}

/* The backward of bfloat16 / float16 attention computes D = rowsum(go * out) in float32 from
 * the widened go and out (PyTorch's CPU kernel accumulates it in float32 too), never rounding
 * the products or D to the half dtype: D and dP = go v^T nearly cancel in dS = P (dP - D), so a
 * rounded D gave the first causal query (one key, P = 1: dq exactly 0) a dq of ~2^-8 of the
 * tensor's scale. Against the float32 attention on the same rounded q, k, v, go: the first
 * query's dq within 2^-14 of dq's largest element, and every gradient within 2^-7 (bfloat16)
 * or 2^-10 (float16) of its tensor's largest element (the output read by the backward is
 * rounded once, and each gradient once). */
Test(attention_f32, half_backward_row_sums_in_float32) {
  enum { B = 2, H = 2, T = 40, E = 32 };
  dt_dtype dtypes[2] = {DT_BF16, DT_F16};
  for (int d = 0; d < 2; d++) {
    dt_tensor *src[4] = {NULL};
    for (int i = 0; i < 4; i++) {
      dt_tensor *r = NULL;
      OK(dt_randn(4, (int64_t[]){B, H, T, E}, DT_F32, 40 + (uint64_t)i, &r));
      OK(dt_to(r, dtypes[d], &src[i])); /* the rounded inputs both runs read */
      dt_tensor_release(r);
    }
    double *half[3], *f32[3];
    causal_grads(src, dtypes[d], half);
    causal_grads(src, DT_F32, f32);
    double tol = dtypes[d] == DT_BF16 ? 0x1p-7 : 0x1p-10;
    for (int g = 0; g < 3; g++) {
      double top = 0, err = 0;
      for (int64_t i = 0; i < B * H * T * E; i++) {
        top = fmax(top, fabs(f32[g][i]));
        err = fmax(err, fabs(half[g][i] - f32[g][i]));
      }
      cr_assert(err <= tol * top, "%s grad %d: max error %.3g, largest %.3g",
                dt_dtype_name(dtypes[d]), g, err, top);
      if (g == 0)
        for (int64_t bh = 0; bh < B * H; bh++)
          for (int64_t e = 0; e < E; e++)
            cr_assert(fabs(half[0][bh * T * E + e]) <= 0x1p-14 * top,
                      "%s: dq of the first query [%lld, %lld] = %.3g (exactly 0 in exact "
                      "arithmetic), largest %.3g",
                      dt_dtype_name(dtypes[d]), (long long)bh, (long long)e,
                      half[0][bh * T * E + e], top);
      free(half[g]), free(f32[g]);
    }
    for (int i = 0; i < 4; i++) dt_tensor_release(src[i]);
  }
}
