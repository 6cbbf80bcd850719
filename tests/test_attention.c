/*
 * The fused ops of the decoder models: rms_norm and scaled_dot_product_attention (flash-style
 * tiles, causal or masked, grouped-query, with the log-sum-exp), against naive loops in double,
 * their gradients against finite differences, and the attention distributed by batch and by
 * heads against the whole tensor.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "reference.h"
#include "gradcheck.h"

Test(rms_norm, equals_naive_loops) {
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *xt = NULL;
  OK(dt_randn(3, (int64_t[]){3, 7, 5}, DT_F32, 3, &x));
  OK(dt_transpose(x, 1, 2, &xt)); /* [3, 5, 7], not contiguous */
  OK(dt_randn(1, (int64_t[]){7}, DT_F32, 4, &w));
  OK(dt_rms_norm(xt, 1, (int64_t[]){7}, w, 1e-5, &y));
  double *xv = ref_values(xt), *wv = ref_values(w), *yv = ref_values(y);
  for (int r = 0; r < 15; r++) {
    double ss = 0;
    for (int i = 0; i < 7; i++) ss += xv[r * 7 + i] * xv[r * 7 + i];
    double rs = 1 / sqrt(ss / 7 + 1e-5);
    for (int i = 0; i < 7; i++)
      cr_assert_float_eq(yv[r * 7 + i], xv[r * 7 + i] * rs * wv[i], 1e-5, "row %d col %d", r, i);
  }
  free(xv), free(wv), free(yv);
  dt_tensor_release(y);
  /* Two normalized dims, no weight. */
  OK(dt_rms_norm(xt, 2, (int64_t[]){5, 7}, NULL, 0.5, &y));
  xv = ref_values(xt), yv = ref_values(y);
  for (int b = 0; b < 3; b++) {
    double ss = 0;
    for (int i = 0; i < 35; i++) ss += xv[b * 35 + i] * xv[b * 35 + i];
    for (int i = 0; i < 35; i++)
      cr_assert_float_eq(yv[b * 35 + i], xv[b * 35 + i] / sqrt(ss / 35 + 0.5), 1e-5);
  }
  free(xv), free(yv);
  dt_tensor_release(y);
  cr_assert_eq(dt_rms_norm(xt, 1, (int64_t[]){5}, w, 1e-5, &y), DT_ERR_SHAPE);
  cr_assert_eq(dt_rms_norm(xt, 1, (int64_t[]){7}, w, -1, &y), DT_ERR_INVALID);
  dt_tensor_release(x), dt_tensor_release(xt), dt_tensor_release(w);
}

static dt_status f_rms(dt_tensor **x, dt_tensor **out) {
  return dt_rms_norm(x[0], 1, (int64_t[]){6}, x[1], 1e-3, out);
}
static dt_status f_rms2(dt_tensor **x, dt_tensor **out) {
  return dt_rms_norm(x[0], 2, (int64_t[]){3, 4}, NULL, 1e-3, out);
}

Test(rms_norm, gradients_match_finite_differences) {
  grad_check(
      &(grad_case){"rms_norm", f_rms, 2, {3, 1}, {{2, 3, 6}, {6}}, {NONCONTIG, PLAIN}, 0, 0});
  grad_check(&(grad_case){"rms_norm 2 dims", f_rms2, 1, {3}, {{5, 3, 4}}, {PLAIN}, 0, 0});
}

/* ---- attention --------------------------------------------------------------------------- */

/* Naive attention in double: out [B, H, T, Ev], lse [B, H, T]. mask: NULL, or [T, S] bool. */
static void naive_attention(const double *q, const double *k, const double *v, const uint8_t *mask,
                            bool causal, double scale, int64_t B, int64_t H, int64_t Hk, int64_t T,
                            int64_t S, int64_t E, int64_t Ev, double *out, double *lse) {
  double *s = malloc(sizeof(double) * (size_t)S);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / Hk);
      for (int64_t i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
          bool keep = (!causal || j <= i) && (!mask || mask[i * S + j]);
          double d = 0;
          for (int64_t e = 0; e < E; e++)
            d += q[((b * H + h) * T + i) * E + e] * k[((b * Hk + kh) * S + j) * E + e];
          s[j] = keep ? scale * d : -INFINITY;
          mx = fmax(mx, s[j]);
        }
        for (int64_t j = 0; j < S; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
        lse[(b * H + h) * T + i] = mx + log(sum);
        for (int64_t e = 0; e < Ev; e++) {
          double a = 0;
          for (int64_t j = 0; j < S; j++)
            if (s[j] != -INFINITY) a += exp(s[j] - mx) / sum * v[((b * Hk + kh) * S + j) * Ev + e];
          out[((b * H + h) * T + i) * Ev + e] = a;
        }
      }
    }
  free(s);
}

static void check_against_naive(int64_t B, int64_t H, int64_t Hk, int64_t T, int64_t S, int64_t E,
                                int64_t Ev, bool causal, bool with_mask, double scale) {
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *m = NULL, *out = NULL, *lse = NULL;
  OK(dt_randn(4, (int64_t[]){B, H, T, E}, DT_F32, 1, &q));
  OK(dt_randn(4, (int64_t[]){B, Hk, S, E}, DT_F32, 2, &k));
  OK(dt_randn(4, (int64_t[]){B, Hk, S, Ev}, DT_F32, 3, &v));
  uint8_t *mask = NULL;
  if (with_mask) {
    mask = malloc((size_t)(T * S));
    for (int64_t i = 0; i < T * S; i++) mask[i] = (i * 7 + i / S) % 5 != 0 || i % S == 0;
    OK(dt_from_data(mask, 2, (int64_t[]){T, S}, DT_BOOL, &m));
  }
  dt_attention_options o = {.is_causal = causal, .scale = scale};
  OK(dt_scaled_dot_product_attention(q, k, v, m, &o, &out, &lse));
  double *qv = ref_values(q), *kv = ref_values(k), *vv = ref_values(v), *ov = ref_values(out),
         *lv = ref_values(lse);
  double *want = malloc(sizeof(double) * (size_t)(B * H * T * Ev));
  double *wl = malloc(sizeof(double) * (size_t)(B * H * T));
  naive_attention(qv, kv, vv, mask, causal, scale > 0 ? scale : 1 / sqrt((double)E), B, H, Hk, T, S,
                  E, Ev, want, wl);
  for (int64_t i = 0; i < B * H * T * Ev; i++)
    cr_assert_float_eq(ov[i], want[i], 1e-5, "out[%lld]: %g vs %g", (long long)i, ov[i], want[i]);
  for (int64_t i = 0; i < B * H * T; i++)
    cr_assert_float_eq(lv[i], wl[i], 1e-5, "lse[%lld]: %g vs %g", (long long)i, lv[i], wl[i]);
  free(qv), free(kv), free(vv), free(ov), free(lv), free(want), free(wl), free(mask);
  dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(m);
  dt_tensor_release(out), dt_tensor_release(lse);
}

Test(attention, equals_naive_loops_across_tiles) {
  /* T and S past one tile (32 queries, 64 keys), grouped-query 6 over 3, odd sizes. */
  check_against_naive(2, 6, 3, 37, 70, 5, 3, false, false, 0);
  check_against_naive(2, 6, 3, 70, 70, 5, 3, true, false, 0);
  check_against_naive(1, 4, 4, 33, 67, 4, 6, false, true, 0.3);
  check_against_naive(1, 2, 1, 40, 40, 8, 8, true, true, 0);
  check_against_naive(1, 1, 1, 1, 9, 3, 2, false, false, 0); /* one query: decode */
}

Test(attention, refuses_bad_arguments) {
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL, *m = NULL;
  OK(dt_zeros(4, (int64_t[]){1, 4, 3, 2}, DT_F32, &q));
  OK(dt_zeros(4, (int64_t[]){1, 3, 5, 2}, DT_F32, &k));
  OK(dt_zeros(4, (int64_t[]){1, 3, 5, 2}, DT_F32, &v));
  cr_assert_eq(dt_scaled_dot_product_attention(q, k, v, NULL, NULL, &out, NULL), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "Hk dividing H"), "%s", dt_last_error());
  dt_tensor_release(k), dt_tensor_release(v);
  OK(dt_zeros(4, (int64_t[]){1, 2, 5, 2}, DT_F32, &k));
  OK(dt_zeros(4, (int64_t[]){1, 2, 5, 2}, DT_F64, &v));
  cr_assert_eq(dt_scaled_dot_product_attention(q, k, v, NULL, NULL, &out, NULL), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "value has dtype float64 (expected the query's dtype float32)"),
            "%s", dt_last_error());
  /* An integer query: the message said "expected the query's floating dtype int64". */
  dt_tensor *qi = NULL;
  OK(dt_zeros(4, (int64_t[]){1, 4, 3, 2}, DT_I64, &qi));
  cr_assert_eq(dt_scaled_dot_product_attention(qi, k, v, NULL, NULL, &out, NULL), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "query has dtype int64 (expected a floating dtype)"), "%s",
            dt_last_error());
  dt_tensor_release(qi);
  dt_tensor_release(v);
  OK(dt_zeros(4, (int64_t[]){1, 2, 5, 2}, DT_F32, &v));
  OK(dt_zeros(2, (int64_t[]){3, 4}, DT_BOOL, &m));
  cr_assert_eq(dt_scaled_dot_product_attention(q, k, v, m, NULL, &out, NULL), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "attn_mask"), "%s", dt_last_error());
  cr_assert_eq(dt_scaled_dot_product_attention(q, k, v, NULL, NULL, NULL, NULL), DT_ERR_INVALID);
  dt_attention_options bad = {.scale = -1};
  cr_assert_eq(dt_scaled_dot_product_attention(q, k, v, NULL, &bad, &out, NULL), DT_ERR_INVALID);
  dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(m);
}

static dt_status f_attn(dt_tensor **x, dt_tensor **out) {
  dt_attention_options o = {.is_causal = true};
  return dt_scaled_dot_product_attention(x[0], x[1], x[2], NULL, &o, out, NULL);
}
static dt_status f_attn_lse(dt_tensor **x, dt_tensor **out) {
  /* out and lse both reach the loss: lse's own gradient is checked too */
  dt_tensor *o = NULL, *l = NULL, *lu = NULL;
  dt_status st = dt_scaled_dot_product_attention(x[0], x[1], x[2], x[3], NULL, &o, &l);
  if (!st) st = dt_unsqueeze(l, -1, &lu);
  if (!st) st = dt_mul(o, lu, out);
  dt_tensor_release(o), dt_tensor_release(l), dt_tensor_release(lu);
  return st;
}

Test(attention, gradients_match_finite_differences) {
  /* 35 queries: two query tiles; grouped-query 4 over 2; non-contiguous key. */
  grad_check(&(grad_case){"sdpa causal gqa",
                          f_attn,
                          3,
                          {4, 4, 4},
                          {{1, 4, 35, 3}, {1, 2, 35, 3}, {1, 2, 35, 2}},
                          {PLAIN, NONCONTIG, PLAIN},
                          1e-6,
                          1e-5});
  grad_check(&(grad_case){"sdpa float mask and lse",
                          f_attn_lse,
                          4,
                          {4, 4, 4, 2},
                          {{2, 2, 5, 3}, {2, 2, 7, 3}, {2, 2, 7, 4}, {5, 7}},
                          {PLAIN, PLAIN, PLAIN, CONSTANT},
                          1e-6,
                          1e-5});
}

/* A [5, 7] bool mask: queries 1 and 3 keep no key; query 0 keeps key 2 only, which a causal
 * mask drops as well. */
static dt_tensor *no_key_mask(void) {
  uint8_t keep[35];
  for (int i = 0; i < 35; i++) {
    int r = i / 7, c = i % 7;
    keep[i] = r == 0 ? c == 2 : r != 1 && r != 3 && (c + 2 * r) % 3 != 0;
  }
  dt_tensor *m = NULL;
  OK(dt_from_data(keep, 2, (int64_t[]){5, 7}, DT_BOOL, &m));
  return m;
}
static dt_status attn_no_key(dt_tensor **x, bool causal, dt_tensor **out, dt_tensor **lse) {
  dt_tensor *m = no_key_mask();
  dt_attention_options o = {.is_causal = causal};
  dt_status st = dt_scaled_dot_product_attention(x[0], x[1], x[2], m, &o, out, lse);
  dt_tensor_release(m);
  return st;
}
static dt_status f_attn_no_key(dt_tensor **x, dt_tensor **out) {
  return attn_no_key(x, false, out, NULL);
}
static dt_status f_attn_no_key_causal(dt_tensor **x, dt_tensor **out) {
  return attn_no_key(x, true, out, NULL);
}

/* Queries that keep no key output 0 with lse -inf (PyTorch 2.15's F.scaled_dot_product_attention
 * gives zeros for a fully masked row, and for S = 0 keys), in float64 and float32 (both gave
 * NaN, and float32's dv was NaN under a loss that reads that output); their gradients match
 * finite differences in float64 and float32's match float64's. */
Test(attention, queries_keeping_no_key_output_zeros) {
  grad_check(&(grad_case){"sdpa rows keeping no key",
                          f_attn_no_key,
                          3,
                          {4, 4, 4},
                          {{1, 2, 5, 3}, {1, 2, 7, 3}, {1, 2, 7, 4}},
                          {PLAIN, NONCONTIG, PLAIN},
                          1e-6,
                          1e-5});
  grad_check(&(grad_case){"sdpa causal over a mask",
                          f_attn_no_key_causal,
                          3,
                          {4, 4, 4},
                          {{1, 2, 5, 3}, {1, 2, 7, 3}, {1, 2, 7, 4}},
                          {PLAIN, PLAIN, PLAIN},
                          1e-6,
                          1e-5});
  int64_t shapes[3][4] = {{1, 2, 5, 3}, {1, 2, 7, 3}, {1, 2, 7, 4}};
  double *grads[2][3], *outs[2];
  uint8_t keep[35];
  dt_tensor *m = no_key_mask();
  double *mv = ref_values(m);
  for (int i = 0; i < 35; i++) keep[i] = mv[i] != 0;
  for (int f = 0; f < 2; f++) {
    dt_dtype dtype = f ? DT_F64 : DT_F32;
    dt_tensor *x[3], *out = NULL, *lse = NULL, *sq = NULL, *sum = NULL;
    for (int i = 0; i < 3; i++) {
      dt_tensor *d = ref_random(4, shapes[i], DT_F64, -1, 1, 20 + (uint64_t)i);
      OK(dt_to(d, dtype, &x[i]));
      OK(dt_tensor_set_requires_grad(x[i], true));
      dt_tensor_release(d);
    }
    OK(attn_no_key(x, true, &out, &lse));
    double *xv[3] = {ref_values(x[0]), ref_values(x[1]), ref_values(x[2])};
    double want[2 * 5 * 4], wl[2 * 5];
    naive_attention(xv[0], xv[1], xv[2], keep, true, 1 / sqrt(3.0), 1, 2, 2, 5, 7, 3, 4, want, wl);
    double *o = ref_values(out), *l = ref_values(lse);
    for (int64_t r = 0; r < 10; r++) {
      bool none = r % 5 < 2 || r % 5 == 3;
      cr_assert(none ? l[r] == -INFINITY && wl[r] == -INFINITY : fabs(l[r] - wl[r]) < 1e-5,
                "%s lse[%lld] %g vs %g", dt_dtype_name(dtype), (long long)r, l[r], wl[r]);
      for (int64_t e = 0; e < 4; e++)
        cr_assert(none ? o[r * 4 + e] == 0 : fabs(o[r * 4 + e] - want[r * 4 + e]) < 1e-5,
                  "%s out[%lld][%lld] %g vs %g", dt_dtype_name(dtype), (long long)r, (long long)e,
                  o[r * 4 + e], want[r * 4 + e]);
    }
    /* sum(out^2): the rows that kept no key pass a gradient 2 out = 0 (NaN before). */
    OK(dt_mul(out, out, &sq));
    OK(dt_sum(sq, &sum));
    OK(dt_backward(sum, NULL));
    for (int i = 0; i < 3; i++) {
      dt_tensor *g = NULL;
      OK(dt_tensor_grad(x[i], &g));
      grads[f][i] = ref_values(g);
      dt_tensor_release(g);
    }
    outs[f] = o;
    free(l), free(xv[0]), free(xv[1]), free(xv[2]);
    for (int i = 0; i < 3; i++) dt_tensor_release(x[i]);
    dt_tensor_release(out), dt_tensor_release(lse), dt_tensor_release(sq), dt_tensor_release(sum);
  }
  for (int i = 0; i < 3; i++) {
    int64_t n = shapes[i][1] * shapes[i][2] * shapes[i][3];
    for (int64_t e = 0; e < n; e++)
      cr_assert(isfinite(grads[0][i][e]) && fabs(grads[0][i][e] - grads[1][i][e]) < 1e-5,
                "grad %d element %lld: float32 %g, float64 %g", i, (long long)e, grads[0][i][e],
                grads[1][i][e]);
    free(grads[0][i]), free(grads[1][i]);
  }
  free(outs[0]), free(outs[1]), free(mv);
  dt_tensor_release(m);
}

/* S = 0 keys: every query keeps no key, zero outputs and lse -inf, a zero gradient for q. */
Test(attention, no_keys_output_zeros) {
  for (int f = 0; f < 2; f++) {
    dt_dtype dtype = f ? DT_F64 : DT_F32;
    dt_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *sum = NULL, *gq = NULL;
    OK(dt_randn(4, (int64_t[]){1, 2, 3, 4}, dtype, 1, &q));
    OK(dt_zeros(4, (int64_t[]){1, 2, 0, 4}, dtype, &k));
    OK(dt_zeros(4, (int64_t[]){1, 2, 0, 5}, dtype, &v));
    OK(dt_tensor_set_requires_grad(q, true));
    for (int causal = 0; causal < 2; causal++) {
      dt_attention_options o = {.is_causal = causal};
      OK(dt_scaled_dot_product_attention(q, k, v, NULL, &o, &out, &lse));
      cr_assert_eq(dt_tensor_numel(out), 30);
      double *ov = ref_values(out), *lv = ref_values(lse);
      for (int i = 0; i < 30; i++)
        cr_assert_eq(ov[i], 0.0, "%s out[%d] %g", dt_dtype_name(dtype), i, ov[i]);
      for (int i = 0; i < 6; i++)
        cr_assert_eq(lv[i], -INFINITY, "%s lse[%d] %g", dt_dtype_name(dtype), i, lv[i]);
      free(ov), free(lv);
      if (causal) {
        OK(dt_sum(out, &sum));
        OK(dt_backward(sum, NULL));
        OK(dt_tensor_grad(q, &gq));
        double *g = ref_values(gq);
        for (int i = 0; i < 24; i++) cr_assert_eq(g[i], 0.0, "dq[%d] %g", i, g[i]);
        free(g);
      }
      dt_tensor_release(out), dt_tensor_release(lse);
    }
    dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(sum);
    dt_tensor_release(gq);
  }
}

/* On 2 ranks: batch-sharded and head-sharded inputs give the whole tensor's output and
 * gradients, with no collective in the forward. */
static dt_status dist_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"x"}, &mesh));
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL, *want = NULL;
  RANK_OK(dt_randn(4, (int64_t[]){3, 4, 9, 5}, DT_F64, 1, &q));
  /* As many kv heads as query heads (grouped-query heads: grouped_query_heads_sharded_by_heads). */
  RANK_OK(dt_randn(4, (int64_t[]){3, 4, 9, 5}, DT_F64, 2, &k));
  RANK_OK(dt_randn(4, (int64_t[]){3, 4, 9, 3}, DT_F64, 3, &v));
  dt_attention_options o = {.is_causal = true};
  RANK_OK(dt_scaled_dot_product_attention(q, k, v, NULL, &o, &want, NULL));
  for (int dim = 0; dim < 2; dim++) {
    dt_tensor *dq = NULL, *dk = NULL, *dv = NULL, *full = NULL;
    dt_placement p = dt_shard(dim);
    RANK_OK(dt_dist_distribute_tensor(mesh, q, 1, &p, &dq));
    RANK_OK(dt_dist_distribute_tensor(mesh, k, 1, &p, &dk));
    RANK_OK(dt_dist_distribute_tensor(mesh, v, 1, &p, &dv));
    dt_comm_ledger *ledger = NULL;
    RANK_OK(dt_comm_ledger_start(&ledger));
    RANK_OK(dt_scaled_dot_product_attention(dq, dk, dv, NULL, &o, &out, NULL));
    RANK_OK(dt_comm_ledger_stop(ledger));
    RANK_CHECK(dt_comm_ledger_bytes(ledger, NULL) == 0, "dim %d: the forward communicated", dim);
    RANK_CHECK(dt_dist_placements(out)[0].kind == DT_SHARD && dt_dist_placements(out)[0].dim == dim,
               "output not sharded on dim %d", dim);
    dt_comm_ledger_destroy(ledger);
    RANK_OK(dt_dist_full_tensor(out, &full));
    double *a = ref_values(full), *b = ref_values(want);
    for (int64_t i = 0; i < dt_tensor_numel(want); i++)
      RANK_CHECK(fabs(a[i] - b[i]) < 1e-12, "dim %d element %lld", dim, (long long)i);
    free(a), free(b);
    dt_tensor_release(dq), dt_tensor_release(dk), dt_tensor_release(dv);
    dt_tensor_release(full), dt_tensor_release(out);
    out = NULL;
  }
  /* The backward op by heads: dq of sum(out * out) against the local gradient. */
  dt_tensor *lq = NULL, *lo = NULL, *lsq = NULL, *ls = NULL, *lg = NULL;
  dt_tensor *sq = NULL, *so = NULL, *ssq = NULL, *ss = NULL, *sg = NULL, *sgf = NULL;
  RANK_OK(dt_clone(q, &lq));
  RANK_OK(dt_tensor_set_requires_grad(lq, true));
  RANK_OK(dt_scaled_dot_product_attention(lq, k, v, NULL, &o, &lo, NULL));
  RANK_OK(dt_mul(lo, lo, &lsq));
  RANK_OK(dt_sum(lsq, &ls));
  RANK_OK(dt_backward(ls, NULL));
  RANK_OK(dt_tensor_grad(lq, &lg));
  dt_placement heads = dt_shard(1);
  dt_tensor *dk = NULL, *dv = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, q, 1, &heads, &sq));
  RANK_OK(dt_dist_distribute_tensor(mesh, k, 1, &heads, &dk));
  RANK_OK(dt_dist_distribute_tensor(mesh, v, 1, &heads, &dv));
  RANK_OK(dt_tensor_set_requires_grad(sq, true));
  RANK_OK(dt_scaled_dot_product_attention(sq, dk, dv, NULL, &o, &so, NULL));
  RANK_OK(dt_mul(so, so, &ssq));
  RANK_OK(dt_sum(ssq, &ss));
  RANK_OK(dt_backward(ss, NULL));
  RANK_OK(dt_tensor_grad(sq, &sg));
  RANK_OK(dt_dist_full_tensor(sg, &sgf));
  double *a = ref_values(sgf), *b = ref_values(lg);
  for (int64_t i = 0; i < dt_tensor_numel(lg); i++)
    RANK_CHECK(fabs(a[i] - b[i]) < 1e-12, "grad element %lld", (long long)i);
  free(a), free(b);
  dt_tensor *all[] = {lq, lo, lsq, ls, lg, sq, so, ssq, ss, sg, sgf, dk, dv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(want);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(attention, sharded_by_batch_or_heads_on_2_ranks) { SPAWN_OK(2, dist_rank, NULL); }

/* Grouped-query heads sharded by heads: 6 query heads over 3 kv heads on 3 ranks (2 and 1 per
 * rank) and 8 over 4 on a 2x2 mesh whose two dims both shard the heads stay sharded on heads
 * with no collective in the forward, and the output and dq equal the whole tensor's; 6 over 3
 * on 2 ranks (3 kv heads do not split in 2) is not sharded by heads but still right. */
typedef struct gqa_case {
  int mesh_ndim, mesh[2];
  int64_t H, Hk;
  bool by_heads; /* expected to run sharded by heads with no collective */
} gqa_case;

static dt_status gqa_rank(dt_comm *world, void *arg) {
  const gqa_case *g = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, g->mesh_ndim, g->mesh, NULL, &mesh));
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *want = NULL, *lq = NULL, *lo = NULL, *ls = NULL;
  dt_tensor *lg = NULL;
  RANK_OK(dt_randn(4, (int64_t[]){2, g->H, 7, 4}, DT_F64, 21, &q));
  RANK_OK(dt_randn(4, (int64_t[]){2, g->Hk, 7, 4}, DT_F64, 22, &k));
  RANK_OK(dt_randn(4, (int64_t[]){2, g->Hk, 7, 3}, DT_F64, 23, &v));
  dt_attention_options o = {.is_causal = true};
  RANK_OK(dt_scaled_dot_product_attention(q, k, v, NULL, &o, &want, NULL));
  RANK_OK(dt_clone(q, &lq));
  RANK_OK(dt_tensor_set_requires_grad(lq, true));
  RANK_OK(dt_scaled_dot_product_attention(lq, k, v, NULL, &o, &lo, NULL));
  RANK_OK(dt_sum(lo, &ls));
  RANK_OK(dt_backward(ls, NULL));
  RANK_OK(dt_tensor_grad(lq, &lg));
  dt_placement p[2] = {dt_shard(1), dt_shard(1)};
  dt_tensor *dq = NULL, *dk = NULL, *dv = NULL, *out = NULL, *full = NULL, *s = NULL;
  dt_tensor *grad = NULL, *gf = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, q, g->mesh_ndim, p, &dq));
  RANK_OK(dt_dist_distribute_tensor(mesh, k, g->mesh_ndim, p, &dk));
  RANK_OK(dt_dist_distribute_tensor(mesh, v, g->mesh_ndim, p, &dv));
  RANK_OK(dt_tensor_set_requires_grad(dq, true));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_scaled_dot_product_attention(dq, dk, dv, NULL, &o, &out, NULL));
  RANK_OK(dt_comm_ledger_stop(ledger));
  int64_t moved = dt_comm_ledger_bytes(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  if (g->by_heads) {
    RANK_CHECK(moved == 0, "H %lld over Hk %lld: the forward moved %lld bytes", (long long)g->H,
               (long long)g->Hk, (long long)moved);
    for (int m = 0; m < g->mesh_ndim; m++)
      RANK_CHECK(dt_dist_placements(out)[m].kind == DT_SHARD && dt_dist_placements(out)[m].dim == 1,
                 "output not sharded on the heads on mesh dim %d", m);
  } else {
    RANK_CHECK(moved > 0, "H %lld over Hk %lld cannot run sharded by heads as it is",
               (long long)g->H, (long long)g->Hk);
  }
  RANK_OK(dt_dist_full_tensor(out, &full));
  RANK_OK(dt_sum(out, &s));
  RANK_OK(dt_backward(s, NULL));
  RANK_OK(dt_tensor_grad(dq, &grad));
  RANK_OK(dt_dist_full_tensor(grad, &gf));
  double *a = ref_values(full), *b = ref_values(want), *ga = ref_values(gf), *gb = ref_values(lg);
  dt_status st = DT_OK;
  for (int64_t i = 0; i < dt_tensor_numel(want) && !st; i++)
    if (!(fabs(a[i] - b[i]) < 1e-12))
      st = dt__error(DT_ERR_INTERNAL, "output element %lld", (long long)i);
  for (int64_t i = 0; i < dt_tensor_numel(lg) && !st; i++)
    if (!(fabs(ga[i] - gb[i]) < 1e-12))
      st = dt__error(DT_ERR_INTERNAL, "dq element %lld", (long long)i);
  free(a), free(b), free(ga), free(gb);
  dt_tensor *all[] = {q, k, v, want, lq, lo, ls, lg, dq, dk, dv, out, full, s, grad, gf};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return st;
}

Test(attention, grouped_query_heads_sharded_by_heads) {
  gqa_case three = {1, {3, 1}, 6, 3, true};
  SPAWN_OK(3, gqa_rank, &three);
  gqa_case nested = {2, {2, 2}, 8, 4, true};
  SPAWN_OK(4, gqa_rank, &nested);
  gqa_case uneven = {1, {2, 1}, 6, 3, false};
  SPAWN_OK(2, gqa_rank, &uneven);
}

/* q [1, 1, 3, E] of `dtype` from sin values (one NaN at element `nan_at` when >= 0). */
static dt_tensor *edge_tensor(int64_t T, int64_t E, dt_dtype dtype, int64_t nan_at) {
  int64_t n = T * E;
  double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) x[i] = i == nan_at ? NAN : sin(0.37 * (double)(i + 1));
  dt_tensor *d = NULL, *t = NULL;
  OK(dt_from_data(x, 4, (int64_t[]){1, 1, T, E}, DT_F64, &d));
  OK(dt_to(d, dtype, &t));
  dt_tensor_release(d);
  free(x);
  return t;
}

/* E = 0: the scores are empty sums (0), so every query averages the values, in float32 and in
 * float64 alike (float64 gave NaN and lse -inf: the default scale 1/sqrt(0) = inf times 0). */
Test(attention, zero_head_dim_averages_the_values) {
  for (int f = 0; f < 2; f++) {
    dt_dtype dtype = f ? DT_F64 : DT_F32;
    dt_tensor *q = edge_tensor(3, 0, dtype, -1), *k = edge_tensor(4, 0, dtype, -1),
              *v = edge_tensor(4, 2, dtype, -1), *out = NULL, *lse = NULL;
    OK(dt_scaled_dot_product_attention(q, k, v, NULL, NULL, &out, &lse));
    double *o = ref_values(out), *l = ref_values(lse), *vv = ref_values(v);
    for (int64_t e = 0; e < 2; e++) {
      double mean = (vv[e] + vv[2 + e] + vv[4 + e] + vv[6 + e]) / 4;
      for (int64_t i = 0; i < 3; i++)
        cr_assert_float_eq(o[i * 2 + e], mean, 1e-6, "%s out[%lld][%lld] %g, mean %g",
                           dt_dtype_name(dtype), (long long)i, (long long)e, o[i * 2 + e], mean);
    }
    for (int64_t i = 0; i < 3; i++)
      cr_assert_float_eq(l[i], log(4.0), 1e-6, "%s lse %g", dt_dtype_name(dtype), l[i]);
    free(o), free(l), free(vv);
    dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v);
    dt_tensor_release(out), dt_tensor_release(lse);
  }
}

/* A NaN in a query: its row's output and lse are NaN and the key gradient is NaN, in float64 as
 * in float32 (float64 reported lse -inf, "kept no key", and its backward then gave that row
 * zero gradients: the NaN vanished). The other rows stay finite. */
Test(attention, nan_input_propagates_in_both_dtypes) {
  for (int f = 0; f < 2; f++) {
    dt_dtype dtype = f ? DT_F64 : DT_F32;
    dt_tensor *q = edge_tensor(3, 2, dtype, 2), *k = edge_tensor(4, 2, dtype, -1),
              *v = edge_tensor(4, 2, dtype, -1), *out = NULL, *lse = NULL, *sum = NULL, *gk = NULL;
    OK(dt_tensor_set_requires_grad(k, true));
    OK(dt_scaled_dot_product_attention(q, k, v, NULL, NULL, &out, &lse));
    double *o = ref_values(out), *l = ref_values(lse);
    for (int64_t i = 0; i < 3; i++) {
      cr_assert_eq(isnan(l[i]), i == 1, "%s lse[%lld] = %g", dt_dtype_name(dtype), (long long)i,
                   l[i]);
      cr_assert_eq(isnan(o[i * 2]), i == 1, "%s out[%lld] = %g", dt_dtype_name(dtype), (long long)i,
                   o[i * 2]);
    }
    OK(dt_sum(out, &sum));
    OK(dt_backward(sum, NULL));
    OK(dt_tensor_grad(k, &gk));
    double *g = ref_values(gk);
    cr_assert(isnan(g[0]), "%s dk[0] = %g (expected NaN)", dt_dtype_name(dtype), g[0]);
    free(o), free(l), free(g);
    dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(out);
    dt_tensor_release(lse), dt_tensor_release(sum), dt_tensor_release(gk);
  }
}

/* A scale beyond float32's range: refused for float32 and the 16-bit dtypes computed in
 * float32 (the kernel's float scale was inf and every output NaN), computed for float64. */
Test(attention, refuses_a_scale_that_overflows_float32) {
  dt_attention_options big = {.scale = 1e300};
  dt_dtype dtypes[] = {DT_F32, DT_BF16, DT_F16, DT_F64};
  for (int f = 0; f < 4; f++) {
    dt_dtype dtype = dtypes[f];
    dt_tensor *q = edge_tensor(3, 2, dtype, -1), *k = edge_tensor(4, 2, dtype, -1),
              *v = edge_tensor(4, 2, dtype, -1), *out = NULL;
    dt_status st = dt_scaled_dot_product_attention(q, k, v, NULL, &big, &out, NULL);
    if (dtype != DT_F64) {
      cr_assert_eq(st, DT_ERR_INVALID, "%d", st);
      cr_assert(strstr(dt_last_error(), "scale 1e+300 overflows float32"), "%s", dt_last_error());
      cr_assert_null(out);
    } else {
      OK(st);
      double *o = ref_values(out);
      for (int i = 0; i < 6; i++) cr_assert(isfinite(o[i]), "out[%d] = %g", i, o[i]);
      free(o);
    }
    dt_tensor_release(q), dt_tensor_release(k), dt_tensor_release(v), dt_tensor_release(out);
  }
}
