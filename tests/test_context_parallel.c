/*
 * Context parallelism (parallel.h): the head-tail and contiguous layouts, sharding and
 * unsharding a sequence, and ring attention on 2, 3 and 4 rank threads (and a 2 x 2 dp x cp
 * mesh): its outputs, log-sum-exps and the gradients of q, k and v against
 * dt_scaled_dot_product_attention on the whole tensors, causal or not, with boolean, float and
 * key-padding masks, grouped-query heads, and sequence lengths the ranks do not divide.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

static double *values_of(dt_tensor *t) {
  int64_t n = dt_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (dt_tensor_to_doubles(t, v, n)) {
    free(v);
    return NULL;
  }
  return v;
}

/* ---- Layouts --------------------------------------------------------------------------------- */

Test(context_parallel, segments_follow_torch_chunk) {
  int64_t st[2], len[2];
  int n = 0;
  /* 13 positions, head-tail over 2 ranks: 4 chunks of 4, 4, 4, 1. */
  OK(dt_parallel_cp_segments(13, 2, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(n == 2 && st[0] == 0 && len[0] == 4 && st[1] == 12 && len[1] == 1);
  OK(dt_parallel_cp_segments(13, 2, 1, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(n == 2 && st[0] == 4 && len[0] == 4 && st[1] == 8 && len[1] == 4);
  /* 5 positions over 4 ranks: 8 chunks of 1, the last three empty. */
  OK(dt_parallel_cp_segments(5, 4, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(st[0] == 0 && len[0] == 1 && len[1] == 0);
  OK(dt_parallel_cp_segments(5, 4, 3, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(st[0] == 3 && len[0] == 1 && st[1] == 4 && len[1] == 1);
  OK(dt_parallel_cp_segments(10, 3, 2, DT_CP_LAYOUT_CONTIGUOUS, st, len, &n));
  cr_assert(n == 1 && st[0] == 8 && len[0] == 2);
  cr_assert_eq(dt_parallel_cp_segments(10, 3, 3, DT_CP_LAYOUT_CONTIGUOUS, st, len, &n),
               DT_ERR_INVALID);
  cr_assert_eq(dt_parallel_cp_segments(10, 3, 0, (dt_cp_layout)7, st, len, &n), DT_ERR_INVALID);
  cr_assert_eq(dt_parallel_cp_segments(10, 3, 0, DT_CP_LAYOUT_CONTIGUOUS, NULL, len, &n),
               DT_ERR_INVALID);
}

/* Shard [2, T, 3] on dim 1 against the segments read one element at a time, then unshard back;
 * the unshard's backward is this rank's part of the gradient. */
static dt_status shard_rank(dt_comm *world, void *arg) {
  (void)arg;
  int size = dt_comm_size(world), rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){size}, (const char *[]){"cp"}, &mesh));
  for (int layout = 0; layout < 2; layout++) {
    int64_t T = 17;
    dt_tensor *x = NULL, *part = NULL, *whole = NULL, *w = NULL, *y = NULL, *loss = NULL, *g = NULL;
    RANK_OK(dt_randn(3, (int64_t[]){2, T, 3}, DT_F64, 5, &x));
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, 0, x, -2, (dt_cp_layout)layout, &part));
    int64_t st[2], len[2];
    int n = 0;
    RANK_OK(dt_parallel_cp_segments(T, size, rank, (dt_cp_layout)layout, st, len, &n));
    RANK_CHECK(dt_tensor_size(part, 1) == len[0] + (n > 1 ? len[1] : 0), "part length");
    int64_t local = 0;
    for (int s = 0; s < n; s++)
      for (int64_t i = 0; i < len[s]; i++, local++)
        for (int64_t b = 0; b < 2; b++)
          for (int64_t c = 0; c < 3; c++) {
            double a = 0, e = 0;
            RANK_OK(dt_tensor_get(part, (int64_t[]){b, local, c}, &a));
            RANK_OK(dt_tensor_get(x, (int64_t[]){b, st[s] + i, c}, &e));
            RANK_CHECK(a == e, "layout %d position %lld", layout, (long long)(st[s] + i));
          }
    RANK_OK(dt_tensor_set_requires_grad(part, true));
    RANK_OK(dt_parallel_cp_unshard_sequence(mesh, 0, part, 1, (dt_cp_layout)layout, &whole));
    double *a = values_of(whole), *e = values_of(x);
    RANK_CHECK(a && e, "values");
    for (int64_t i = 0; i < dt_tensor_numel(x); i++)
      RANK_CHECK(a[i] == e[i], "unshard %lld", (long long)i);
    free(a), free(e);
    /* d sum(whole * w) / d part = this rank's part of w. */
    dt_tensor *wp = NULL, *gp = NULL;
    RANK_OK(dt_randn(3, (int64_t[]){2, T, 3}, DT_F64, 6, &w));
    RANK_OK(dt_mul(whole, w, &y));
    RANK_OK(dt_sum(y, &loss));
    RANK_OK(dt_backward(loss, NULL));
    RANK_OK(dt_tensor_grad(part, &g));
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, 0, w, 1, (dt_cp_layout)layout, &wp));
    a = values_of(g), e = values_of(wp);
    for (int64_t i = 0; i < dt_tensor_numel(wp); i++)
      RANK_CHECK(a[i] == e[i], "grad %lld", (long long)i);
    free(a), free(e);
    dt_tensor *all[] = {x, part, whole, w, y, loss, g, wp, gp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  }
  /* A rank whose part is not the layout's share: every rank refuses. */
  dt_tensor *bad = NULL, *whole = NULL;
  RANK_OK(dt_zeros(2, (int64_t[]){rank == 0 ? 3 : 2, 4}, DT_F32, &bad));
  dt_status st = dt_parallel_cp_unshard_sequence(mesh, 0, bad, 0, DT_CP_LAYOUT_HEAD_TAIL, &whole);
  RANK_CHECK(st == DT_ERR_SHAPE && strstr(dt_last_error(), "cp rank"), "%s", dt_last_error());
  RANK_CHECK(whole == NULL, "output on failure");
  dt_tensor_release(bad);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(context_parallel, shard_and_unshard_on_3_ranks) { SPAWN_OK(3, shard_rank, NULL); }

/* ---- Ring attention against the whole tensors -------------------------------------------- */

enum { MASK_NONE, MASK_BOOL, MASK_FLOAT, MASK_KEY_PADDING, MASK_NO_KEY };

typedef struct cp_case {
  int dp, cp;
  dt_dtype dtype;
  bool causal;
  int mask;
  int64_t B, H, Hk, T, S, E, Ev;
  dt_cp_layout layout;
  bool loss_on_whole; /* the loss on the unsharded output (every rank), else on each part */
} cp_case;

/* mask of the case for the whole problem (the same on every rank): bool [T, S] keeping the
 * diagonal and key 0 (MASK_NO_KEY: rows 2, 7, 12, ... keep nothing), float [1, H, T, S], or key
 * padding [B, 1, 1, S] keeping key 0. */
static dt_status make_mask(const cp_case *c, dt_tensor **out) {
  *out = NULL;
  if (c->mask == MASK_FLOAT) {
    dt_tensor *m = NULL;
    dt_status st = dt_randn(4, (int64_t[]){1, c->H, c->T, c->S}, c->dtype, 31, &m);
    if (!st) st = dt_mul_scalar(m, 0.5, out);
    dt_tensor_release(m);
    return st;
  }
  if (c->mask == MASK_NONE) return DT_OK;
  bool padding = c->mask == MASK_KEY_PADDING;
  int64_t rows = padding ? c->B : c->T, n = rows * c->S;
  uint8_t *b = malloc((size_t)n);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < c->S; j++)
      b[r * c->S + j] = padding ? j < c->S - 1 - r * 2 || j == 0
                        : c->mask == MASK_NO_KEY && r % 5 == 2
                            ? 0
                            : (r * 7 + j * 3) % 5 != 0 || j == r || j == 0;
  dt_status st = padding ? dt_from_data(b, 4, (int64_t[]){c->B, 1, 1, c->S}, DT_BOOL, out)
                         : dt_from_data(b, 2, (int64_t[]){c->T, c->S}, DT_BOOL, out);
  free(b);
  return st;
}

/* |a - e| <= tol (1 + |e|) element by element (equal infinities pass: lse -inf). */
static dt_status compare_close(dt_tensor *a, dt_tensor *e, double tol, const char *what) {
  RANK_CHECK(dt_tensor_numel(a) == dt_tensor_numel(e), "%s: sizes %lld and %lld", what,
             (long long)dt_tensor_numel(a), (long long)dt_tensor_numel(e));
  double *x = values_of(a), *y = values_of(e);
  RANK_CHECK(x && y, "%s: values", what);
  for (int64_t i = 0; i < dt_tensor_numel(a); i++) {
    if (x[i] != y[i] && !(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])))) {
      double xi = x[i], yi = y[i];
      free(x), free(y);
      RANK_CHECK(false, "%s element %lld: %.17g, expected %.17g", what, (long long)i, xi, yi);
    }
  }
  free(x), free(y);
  return DT_OK;
}

/* loss = sum(out * wo) + sum(lse * wl). */
static dt_status loss_of(dt_tensor *out, dt_tensor *lse, dt_tensor *wo, dt_tensor *wl,
                         dt_tensor **loss) {
  dt_tensor *a = NULL, *b = NULL, *sa = NULL, *sb = NULL;
  dt_status st = dt_mul(out, wo, &a);
  if (!st) st = dt_mul(lse, wl, &b);
  if (!st) st = dt_sum(a, &sa);
  if (!st) st = dt_sum(b, &sb);
  if (!st) st = dt_add(sa, sb, loss);
  dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(sa), dt_tensor_release(sb);
  return st;
}

/* This dp rank's batch rows of a whole [dp * B, ...] tensor drawn with seed. */
static dt_status draw(const cp_case *c, int dp_coord, int64_t h, int64_t t, int64_t e,
                      uint64_t seed, dt_tensor **out) {
  dt_tensor *all = NULL, *rows = NULL;
  dt_status st = dt_randn(4, (int64_t[]){c->dp * c->B, h, t, e}, c->dtype, seed, &all);
  if (!st) st = dt_narrow(all, 0, dp_coord * c->B, c->B, &rows);
  if (!st) st = dt_contiguous(rows, out);
  dt_tensor_release(all), dt_tensor_release(rows);
  return st;
}

static dt_status case_rank(dt_comm *world, void *arg) {
  const cp_case *c = arg;
  /* Half precision: each block's output and gradients are rounded before they are merged. */
  double tol = c->dtype == DT_F64 ? 1e-12 : c->dtype == DT_F32 ? 1e-5 : 5e-2;
  dt_mesh *mesh = NULL;
  if (c->dp > 1)
    RANK_OK(dt_mesh_create(world, 2, (int[]){c->dp, c->cp}, (const char *[]){"dp", "cp"}, &mesh));
  else
    RANK_OK(dt_mesh_create(world, 1, (int[]){c->cp}, (const char *[]){"cp"}, &mesh));
  int cp_dim = c->dp > 1 ? 1 : 0, dpc = c->dp > 1 ? dt_mesh_coordinate(mesh, 0) : 0;
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *wo = NULL, *wl = NULL, *mask = NULL;
  RANK_OK(draw(c, dpc, c->H, c->T, c->E, 11, &q));
  RANK_OK(draw(c, dpc, c->Hk, c->S, c->E, 12, &k));
  RANK_OK(draw(c, dpc, c->Hk, c->S, c->Ev, 13, &v));
  RANK_OK(draw(c, dpc, c->H, c->T, c->Ev, 14, &wo));
  RANK_OK(dt_randn(3, (int64_t[]){c->B, c->H, c->T}, c->dtype, 15 + (uint64_t)dpc, &wl));
  RANK_OK(make_mask(c, &mask));
  /* The reference: SDPA on the whole sequence. */
  dt_tensor *qr = NULL, *kr = NULL, *vr = NULL, *outr = NULL, *lser = NULL, *lossr = NULL;
  dt_tensor *gq = NULL, *gk = NULL, *gv = NULL;
  RANK_OK(dt_clone(q, &qr));
  RANK_OK(dt_clone(k, &kr));
  RANK_OK(dt_clone(v, &vr));
  RANK_OK(dt_tensor_set_requires_grad(qr, true));
  RANK_OK(dt_tensor_set_requires_grad(kr, true));
  RANK_OK(dt_tensor_set_requires_grad(vr, true));
  dt_attention_options ao = {.is_causal = c->causal};
  RANK_OK(dt_scaled_dot_product_attention(qr, kr, vr, mask, &ao, &outr, &lser));
  RANK_OK(loss_of(outr, lser, wo, wl, &lossr));
  RANK_OK(dt_backward(lossr, NULL));
  RANK_OK(dt_tensor_grad(qr, &gq));
  RANK_OK(dt_tensor_grad(kr, &gk));
  RANK_OK(dt_tensor_grad(vr, &gv));
  /* Context parallel: each rank's part of q, k, v. */
  dt_tensor *ql = NULL, *kl = NULL, *vl = NULL, *out = NULL, *lse = NULL, *loss = NULL;
  dt_tensor *wol = NULL, *wll = NULL, *ow = NULL, *lw = NULL;
  RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, q, 2, c->layout, &ql));
  RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, k, 2, c->layout, &kl));
  RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, v, 2, c->layout, &vl));
  RANK_OK(dt_tensor_set_requires_grad(ql, true));
  RANK_OK(dt_tensor_set_requires_grad(kl, true));
  RANK_OK(dt_tensor_set_requires_grad(vl, true));
  dt_cp_attention_options o = {.is_causal = c->causal, .layout = c->layout};
  RANK_OK(dt_parallel_cp_attention(mesh, cp_dim, ql, kl, vl, mask, &o, &out, &lse));
  RANK_OK(dt_parallel_cp_unshard_sequence(mesh, cp_dim, out, 2, c->layout, &ow));
  RANK_OK(dt_parallel_cp_unshard_sequence(mesh, cp_dim, lse, 2, c->layout, &lw));
  if (c->loss_on_whole) {
    RANK_OK(loss_of(ow, lw, wo, wl, &loss));
  } else {
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, wo, 2, c->layout, &wol));
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, wl, 2, c->layout, &wll));
    RANK_OK(loss_of(out, lse, wol, wll, &loss));
  }
  RANK_OK(dt_backward(loss, NULL));
  dt_status st = compare_close(ow, outr, tol, "out");
  if (!st) st = compare_close(lw, lser, tol, "lse");
  dt_tensor *grads[3] = {NULL, NULL, NULL}, *wants[3] = {NULL, NULL, NULL};
  dt_tensor *leaves[3] = {ql, kl, vl}, *whole[3] = {gq, gk, gv};
  const char *names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3 && !st; i++) {
    RANK_OK(dt_tensor_grad(leaves[i], &grads[i]));
    RANK_CHECK(grads[i] != NULL, "%s missing", names[i]);
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, cp_dim, whole[i], 2, c->layout, &wants[i]));
    st = compare_close(grads[i], wants[i], tol, names[i]);
  }
  dt_tensor *all[] = {q,  k,        v,        wo,       wl,       mask,     qr,      kr,
                      vr, outr,     lser,     lossr,    gq,       gk,       gv,      ql,
                      kl, vl,       out,      lse,      loss,     wol,      wll,     ow,
                      lw, grads[0], grads[1], grads[2], wants[0], wants[1], wants[2]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return st;
}

static void run(cp_case c) {
  if (!c.Hk) c.Hk = c.H;
  if (!c.S) c.S = c.T;
  if (!c.dp) c.dp = 1;
  SPAWN_OK(c.dp * c.cp, case_rank, &c);
}

Test(context_parallel, ring_attention_causal_equals_whole) {
  for (int cp = 2; cp <= 4; cp++) {
    run((cp_case){
        .cp = cp, .dtype = DT_F64, .causal = true, .B = 2, .H = 2, .T = 8 * cp, .E = 4, .Ev = 3});
    run((cp_case){.cp = cp,
                  .dtype = DT_F32,
                  .causal = true,
                  .B = 1,
                  .H = 4,
                  .Hk = 2,
                  .T = 8 * cp,
                  .E = 5,
                  .Ev = 4,
                  .loss_on_whole = true});
  }
}

Test(context_parallel, ring_attention_non_causal_equals_whole) {
  for (int cp = 2; cp <= 4; cp++) {
    run((cp_case){.cp = cp, .dtype = DT_F64, .B = 2, .H = 2, .T = 6 * cp, .E = 3, .Ev = 5});
    run((cp_case){.cp = cp,
                  .dtype = DT_F32,
                  .B = 1,
                  .H = 2,
                  .Hk = 1,
                  .T = 4 * cp,
                  .E = 4,
                  .Ev = 4,
                  .layout = DT_CP_LAYOUT_CONTIGUOUS});
  }
  /* Cross attention: more keys than queries. */
  run((cp_case){.cp = 3, .dtype = DT_F64, .B = 1, .H = 2, .T = 9, .S = 15, .E = 3, .Ev = 2});
}

Test(context_parallel, ring_attention_bfloat16) {
  run((cp_case){
      .cp = 2, .dtype = DT_BF16, .causal = true, .B = 1, .H = 2, .T = 12, .E = 4, .Ev = 4});
}

Test(context_parallel, ring_attention_uneven_lengths) {
  /* 13 over 2 ranks (chunks 4, 4, 4, 1), 17 over 3, 5 over 4 (three empty chunks). */
  run((cp_case){
      .cp = 2, .dtype = DT_F64, .causal = true, .B = 1, .H = 2, .T = 13, .E = 4, .Ev = 3});
  run((cp_case){.cp = 3,
                .dtype = DT_F64,
                .causal = true,
                .B = 2,
                .H = 1,
                .T = 17,
                .E = 3,
                .Ev = 3,
                .loss_on_whole = true});
  run((cp_case){.cp = 4, .dtype = DT_F64, .causal = true, .B = 1, .H = 2, .T = 5, .E = 2, .Ev = 2});
  run((cp_case){.cp = 3,
                .dtype = DT_F32,
                .causal = true,
                .B = 1,
                .H = 2,
                .T = 11,
                .E = 4,
                .Ev = 4,
                .layout = DT_CP_LAYOUT_CONTIGUOUS});
}

Test(context_parallel, ring_attention_masks) {
  for (int cp = 2; cp <= 4; cp += 2) {
    run((cp_case){.cp = cp,
                  .dtype = DT_F64,
                  .causal = true,
                  .mask = MASK_BOOL,
                  .B = 1,
                  .H = 2,
                  .T = 13,
                  .E = 3,
                  .Ev = 3});
    run((cp_case){
        .cp = cp, .dtype = DT_F64, .mask = MASK_FLOAT, .B = 2, .H = 2, .T = 12, .E = 3, .Ev = 2});
    run((cp_case){.cp = cp,
                  .dtype = DT_F32,
                  .causal = true,
                  .mask = MASK_KEY_PADDING,
                  .B = 2,
                  .H = 2,
                  .T = 16,
                  .E = 4,
                  .Ev = 4});
  }
}

/* Queries that keep no key in any block: zero outputs and lse -inf, as the whole SDPA (the
 * merge wrote NaN there), and no gradient from them. */
Test(context_parallel, ring_attention_queries_keeping_no_key) {
  run((cp_case){
      .cp = 2, .dtype = DT_F64, .mask = MASK_NO_KEY, .B = 1, .H = 2, .T = 13, .E = 3, .Ev = 2});
  run((cp_case){.cp = 3,
                .dtype = DT_F32,
                .causal = true,
                .mask = MASK_NO_KEY,
                .B = 2,
                .H = 2,
                .T = 12,
                .E = 4,
                .Ev = 4,
                .loss_on_whole = true});
}

Test(context_parallel, ring_attention_on_a_dp_cp_mesh) {
  run((cp_case){
      .dp = 2, .cp = 2, .dtype = DT_F64, .causal = true, .B = 2, .H = 2, .T = 12, .E = 4, .Ev = 3});
  run((cp_case){.dp = 2,
                .cp = 2,
                .dtype = DT_F32,
                .causal = true,
                .mask = MASK_BOOL,
                .B = 1,
                .H = 4,
                .Hk = 2,
                .T = 11,
                .E = 4,
                .Ev = 4,
                .loss_on_whole = true});
}

/* ---- Errors: the same verdict on every rank, nothing returned, the ring still usable -------- */

static dt_status expect(dt_status got, dt_status want, const char *needle, dt_tensor *out,
                        const char *what) {
  RANK_CHECK(got == want, "%s: got %s (%s)", what, dt_status_string(got), dt_last_error());
  RANK_CHECK(strstr(dt_last_error(), needle), "%s: message '%s' lacks '%s'", what, dt_last_error(),
             needle);
  RANK_CHECK(out == NULL, "%s: an output on failure", what);
  return DT_OK;
}

static dt_status errors_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"cp"}, &mesh));
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *q5 = NULL, *k5 = NULL, *v64 = NULL, *m = NULL;
  dt_tensor *out = NULL, *dq = NULL;
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, 4, 3}, DT_F32, 1, &q));
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, 4, 3}, DT_F32, 2, &k));
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, 4, 3}, DT_F32, 3, &v));
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, rank == 1 ? 5 : 4, 3}, DT_F32, 1, &q5));
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, 5, 3}, DT_F32, 2, &k5));
  RANK_OK(dt_randn(4, (int64_t[]){1, 2, 4, 3}, DT_F64, 3, &v64));
  RANK_OK(dt_zeros(2, (int64_t[]){7, 8}, DT_BOOL, &m));
  dt_cp_attention_options causal = {.is_causal = true};
  /* 9 positions: head-tail gives 3 + 2 and 3 + 1, not 4 and 5. */
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, q5, k, v, NULL, NULL, &out, NULL), DT_ERR_SHAPE,
                 "shard the sequence", out, "wrong share"));
  RANK_OK(
      expect(dt_parallel_cp_attention(mesh, 0, rank == 0 ? NULL : q, k, v, NULL, NULL, &out, NULL),
             DT_ERR_INVALID, rank == 0 ? "q is NULL" : "cp rank 0 refused", out, "NULL q"));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, q, k5, k5, NULL, &causal, &out, NULL),
                 DT_ERR_SHAPE, "as many keys as queries", out, "causal S != T"));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, q, k, v64, NULL, NULL, &out, NULL), DT_ERR_DTYPE,
                 "v has dtype float64", out, "dtype"));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, q, k, v, m, NULL, &out, NULL), DT_ERR_SHAPE,
                 "does not broadcast", out, "mask"));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 1, q, k, v, NULL, NULL, &out, NULL), DT_ERR_INVALID,
                 "cp_dim 1", out, "cp_dim"));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, q, k, v, NULL,
                                          &(dt_cp_attention_options){.scale = -1}, &out, NULL),
                 DT_ERR_INVALID, "scale", out, "scale"));
  dt_placement r = dt_replicate();
  RANK_OK(dt_dist_distribute_tensor(mesh, q, 1, &r, &dq));
  RANK_OK(expect(dt_parallel_cp_attention(mesh, 0, dq, k, v, NULL, NULL, &out, NULL),
                 DT_ERR_UNSUPPORTED, "q is distributed", out, "distributed"));
  RANK_CHECK(dt_parallel_cp_attention(mesh, 0, q, k, v, NULL, NULL, NULL, NULL) == DT_ERR_INVALID,
             "NULL out");
  /* After all that, a good call on the same group. */
  RANK_OK(dt_parallel_cp_attention(mesh, 0, q, k, v, NULL, &causal, &out, NULL));
  RANK_CHECK(dt_tensor_size(out, 2) == 4, "output rows");
  dt_tensor *all[] = {q, k, v, q5, k5, v64, m, out, dq};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(context_parallel, refuses_bad_arguments_on_every_rank) { SPAWN_OK(2, errors_rank, NULL); }

/* ---- The work each rank does ------------------------------------------------------------ */

/* Causal, T = 8n: head-tail gives every rank 2n + 1 of the n(2n + 1) attended chunk pairs;
 * contiguous gives rank i i + 1 of n(n + 1) / 2. Each rank sends n - 1 blocks of k and v. */
static dt_status balance_rank(dt_comm *world, void *arg) {
  (void)arg;
  int n = dt_comm_size(world), rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){n}, (const char *[]){"cp"}, &mesh));
  for (int layout = 0; layout < 2; layout++) {
    dt_tensor *whole = NULL, *part = NULL, *out = NULL;
    RANK_OK(dt_randn(4, (int64_t[]){1, 2, 8 * n, 4}, DT_F32, 3, &whole));
    RANK_OK(dt_parallel_cp_shard_sequence(mesh, 0, whole, 2, (dt_cp_layout)layout, &part));
    dt_cp_attention_stats s;
    memset(&s, 0xff, sizeof s);
    dt_cp_attention_options o = {.is_causal = true, .layout = (dt_cp_layout)layout, .stats = &s};
    RANK_OK(dt_parallel_cp_attention(mesh, 0, part, part, part, NULL, &o, &out, NULL));
    int want = layout == DT_CP_LAYOUT_HEAD_TAIL ? 2 * n + 1 : rank + 1;
    int pairs = layout == DT_CP_LAYOUT_HEAD_TAIL ? 4 * n : n;
    RANK_CHECK(s.pairs_attended == want && s.pairs_attended + s.pairs_skipped == pairs,
               "layout %d: %d attended, %d skipped (want %d of %d)", layout, s.pairs_attended,
               s.pairs_skipped, want, pairs);
    RANK_CHECK(s.bytes_sent == (int64_t)(n - 1) * 2 * dt_tensor_numel(part) * 4, "bytes %lld",
               (long long)s.bytes_sent);
    RANK_CHECK(s.compute_us > 0 && s.wait_us >= 0, "times %g %g", s.compute_us, s.wait_us);
    dt_tensor_release(whole), dt_tensor_release(part), dt_tensor_release(out);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(context_parallel, head_tail_balances_the_causal_work) {
  SPAWN_OK(2, balance_rank, NULL);
  SPAWN_OK(4, balance_rank, NULL);
}
