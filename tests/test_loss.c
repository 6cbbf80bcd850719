/* Losses: mse_loss and cross_entropy values (against numbers worked out by hand and a
 * reference written out in the test), their gradients, ignore_index, label smoothing, the
 * errors, and the distributed forms on 2, 3 and 4 ranks (batch-sharded, uneven shards: the
 * sum is a Partial(sum), the mean divides by the global count; class-sharded logits). */
#include <criterion/criterion.h>

#include "comm_helpers.h"

static dt_tensor *floats(int ndim, const int64_t *shape, const float *v) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_from_data(v, ndim, shape, DT_F32, &t), DT_OK, "%s", dt_last_error());
  return t;
}

static dt_tensor *longs(int64_t n, const int64_t *v) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){n}, DT_I64, &t), DT_OK, "%s", dt_last_error());
  return t;
}

static double scalar(dt_tensor *t) {
  double v = NAN;
  cr_assert_eq(dt_tensor_to_doubles(t, &v, 1), DT_OK, "%s", dt_last_error());
  return v;
}

Test(loss, mse_values_and_gradient) {
  float a[] = {1, 2, 3, 4, 5, 6}, b[] = {0.5f, 2, 1, 4, -1, 6.5f};
  dt_tensor *x = floats(2, (int64_t[]){2, 3}, a), *y = floats(2, (int64_t[]){2, 3}, b);
  cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
  dt_tensor *mean = NULL, *sum = NULL, *none = NULL, *g = NULL;
  /* squares: 0.25 0 4 0 36 0.25 -> sum 40.5, mean 6.75 */
  cr_assert_eq(dt_mse_loss(x, y, DT_LOSS_SUM, &sum), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_mse_loss(x, y, DT_LOSS_NONE, &none), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_mse_loss(x, y, DT_LOSS_MEAN, &mean), DT_OK, "%s", dt_last_error());
  cr_assert_float_eq(scalar(sum), 40.5, 1e-6);
  cr_assert_float_eq(scalar(mean), 6.75, 1e-6);
  double e[6];
  cr_assert_eq(dt_tensor_to_doubles(none, e, 6), DT_OK);
  cr_assert_float_eq(e[4], 36.0, 1e-6);
  cr_assert_eq(dt_backward(mean, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(g, e, 6), DT_OK);
  for (int i = 0; i < 6; i++) cr_assert_float_eq(e[i], 2.0 * (a[i] - b[i]) / 6.0, 1e-6, "%d", i);
  dt_tensor *bad = floats(1, (int64_t[]){6}, a), *out = NULL;
  cr_assert_eq(dt_mse_loss(x, bad, DT_LOSS_MEAN, &out), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "dt_mse_loss") && strstr(dt_last_error(), "[2, 3]"), "%s",
            dt_last_error());
  cr_assert_eq(dt_mse_loss(x, y, (dt_loss_reduction)7, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "reduction 7"), "%s", dt_last_error());
  dt_tensor *all[] = {x, y, mean, sum, none, g, bad};
  for (int i = 0; i < 7; i++) dt_tensor_release(all[i]);
}

/* Reference: loss of each row and d loss / d logits, in double, for reduction r. */
static double reference(const float *x, const int64_t *t, int64_t rows, int64_t classes,
                        const dt_cross_entropy_options *o, double *grad) {
  double total = 0, count = 0, eps = o->label_smoothing;
  double *rowloss = calloc((size_t)rows, sizeof *rowloss);
  for (int64_t i = 0; i < rows; i++) {
    if (o->ignore_index && t[i] == *o->ignore_index) continue;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < classes; j++) m = fmax(m, x[i * classes + j]);
    for (int64_t j = 0; j < classes; j++) s += exp(x[i * classes + j] - m);
    double lz = m + log(s), l = 0;
    for (int64_t j = 0; j < classes; j++) {
      double q = (j == t[i] ? 1 - eps : 0) + eps / (double)classes;
      l += q * (lz - x[i * classes + j]);
    }
    rowloss[i] = l;
    total += l;
    count += 1;
  }
  double scale = o->reduction == DT_LOSS_MEAN ? 1.0 / count : 1.0;
  for (int64_t i = 0; i < rows; i++) {
    bool ignored = o->ignore_index && t[i] == *o->ignore_index;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < classes; j++) m = fmax(m, x[i * classes + j]);
    for (int64_t j = 0; j < classes; j++) s += exp(x[i * classes + j] - m);
    for (int64_t j = 0; j < classes; j++) {
      double q = (j == t[i] ? 1 - eps : 0) + eps / (double)classes;
      grad[i * classes + j] = ignored ? 0 : scale * (exp(x[i * classes + j] - m) / s - q);
    }
  }
  free(rowloss);
  return o->reduction == DT_LOSS_MEAN ? total / count : total;
}

Test(loss, cross_entropy_known_value) {
  /* log(e + e^2 + e^3) - 3 = 0.40760596444... */
  dt_tensor *x = floats(2, (int64_t[]){1, 3}, (float[]){1, 2, 3}), *t = longs(1, (int64_t[]){2});
  dt_tensor *loss = NULL;
  cr_assert_eq(dt_cross_entropy(x, t, &loss), DT_OK, "%s", dt_last_error());
  cr_assert_float_eq(scalar(loss), 0.40760596444, 1e-6);
  cr_assert_eq(dt_tensor_ndim(loss), 0);
  dt_tensor_release(x);
  dt_tensor_release(t);
  dt_tensor_release(loss);
}

Test(loss, cross_entropy_options_and_gradients) {
  enum { R = 5, C = 4 };
  float xv[R * C];
  for (int i = 0; i < R * C; i++) xv[i] = (float)sin(i * 1.7) * 3.0f;
  int64_t tv[R] = {3, 0, 2, 0, 1};
  dt_cross_entropy_options cases[] = {
      {.reduction = DT_LOSS_MEAN},
      {.reduction = DT_LOSS_SUM},
      {.reduction = DT_LOSS_MEAN, .ignore_index = &(int64_t){0}},
      {.reduction = DT_LOSS_MEAN, .label_smoothing = 0.1},
      {.reduction = DT_LOSS_SUM, .ignore_index = &(int64_t){0}, .label_smoothing = 0.25},
  };
  for (int c = 0; c < 5; c++) {
    dt_tensor *x = floats(2, (int64_t[]){R, C}, xv), *t = longs(R, tv), *loss = NULL, *g = NULL;
    cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
    cr_assert_eq(dt_cross_entropy_ex(x, t, &cases[c], &loss), DT_OK, "%s", dt_last_error());
    double want_grad[R * C], got[R * C];
    double want = reference(xv, tv, R, C, &cases[c], want_grad);
    cr_assert_float_eq(scalar(loss), want, 1e-5 * fabs(want), "case %d", c);
    cr_assert_eq(dt_backward(loss, NULL), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
    cr_assert_eq(dt_tensor_to_doubles(g, got, R * C), DT_OK);
    for (int i = 0; i < R * C; i++)
      cr_assert_float_eq(got[i], want_grad[i], 1e-6, "case %d grad %d: %g vs %g", c, i, got[i],
                         want_grad[i]);
    dt_tensor_release(x);
    dt_tensor_release(t);
    dt_tensor_release(loss);
    dt_tensor_release(g);
  }
  /* reduction none: one loss per row, zero for an ignored row. */
  dt_tensor *x = floats(2, (int64_t[]){R, C}, xv), *t = longs(R, tv), *none = NULL;
  dt_cross_entropy_options o = {.reduction = DT_LOSS_NONE, .ignore_index = &(int64_t){0}};
  cr_assert_eq(dt_cross_entropy_ex(x, t, &o, &none), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_ndim(none), 1);
  cr_assert_eq(dt_tensor_size(none, 0), R);
  double rows[R];
  cr_assert_eq(dt_tensor_to_doubles(none, rows, R), DT_OK);
  cr_assert_eq(rows[1], 0.0);
  cr_assert_eq(rows[3], 0.0);
  cr_assert_gt(rows[0], 0.0);
  dt_tensor_release(x);
  dt_tensor_release(t);
  dt_tensor_release(none);
}

Test(loss, cross_entropy_errors) {
  dt_tensor *x = floats(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  dt_tensor *t = longs(2, (int64_t[]){1, 3}), *t1 = longs(3, (int64_t[]){0, 1, 2}), *out = NULL;
  cr_assert_eq(dt_cross_entropy(x, t, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "target[1] = 3 is out of range for 3 classes"), "%s",
            dt_last_error());
  cr_assert_null(out);
  cr_assert_eq(dt_cross_entropy(x, t1, &out), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "dt_cross_entropy_ex") && strstr(dt_last_error(), "[3]"), "%s",
            dt_last_error());
  cr_assert_eq(dt_cross_entropy(x, x, &out), DT_ERR_SHAPE);
  dt_tensor *tf = floats(1, (int64_t[]){2}, (float[]){0, 1});
  cr_assert_eq(dt_cross_entropy(x, tf, &out), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "int64"), "%s", dt_last_error());
  dt_cross_entropy_options o = {.label_smoothing = 1.5};
  dt_tensor *ok = longs(2, (int64_t[]){0, 1});
  cr_assert_eq(dt_cross_entropy_ex(x, ok, &o, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "label_smoothing 1.5"), "%s", dt_last_error());
  cr_assert_eq(dt_cross_entropy(NULL, ok, &out), DT_ERR_INVALID);
  /* Every target ignored: the mean is 0/0 = NaN, as in PyTorch. */
  dt_cross_entropy_options ign = {.ignore_index = &(int64_t){1}};
  dt_tensor *ones = longs(2, (int64_t[]){1, 1});
  cr_assert_eq(dt_cross_entropy_ex(x, ones, &ign, &out), DT_OK, "%s", dt_last_error());
  cr_assert(isnan(scalar(out)));
  dt_tensor *all[] = {x, t, t1, tf, ok, ones, out};
  for (int i = 0; i < 7; i++) dt_tensor_release(all[i]);
}

/* ---- Distributed ------------------------------------------------------------------------ */

enum { DR = 7, DC = 5 }; /* 7 rows: uneven shards on 2, 3 and 4 ranks */

typedef struct dist_arg {
  dt_placement logits, target;
  dt_cross_entropy_options o;
  bool expect_partial; /* the loss stays Partial(sum) */
} dist_arg;

static void dist_data(float *x, int64_t *t) {
  for (int i = 0; i < DR * DC; i++) x[i] = (float)cos(i * 0.9) * 2.0f;
  for (int i = 0; i < DR; i++) t[i] = (i * 3) % DC;
}

static dt_status dist_rank(dt_comm *world, void *varg) {
  dist_arg *a = varg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float xv[DR * DC];
  int64_t tv[DR];
  dist_data(xv, tv);
  dt_tensor *x = NULL, *t = NULL, *dx = NULL, *dtg = NULL, *loss = NULL, *full = NULL, *g = NULL,
            *gfull = NULL;
  RANK_OK(dt_from_data(xv, 2, (int64_t[]){DR, DC}, DT_F32, &x));
  RANK_OK(dt_from_data(tv, 1, (int64_t[]){DR}, DT_I64, &t));
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 1, &a->logits, &dx));
  RANK_OK(dt_dist_distribute_tensor(mesh, t, 1, &a->target, &dtg));
  RANK_OK(dt_tensor_set_requires_grad(dx, true));
  RANK_OK(dt_cross_entropy_ex(dx, dtg, &a->o, &loss));
  RANK_CHECK(dt_tensor_is_distributed(loss), "loss is local");
  dt_placement p = dt_dist_placements(loss)[0];
  if (a->expect_partial) {
    RANK_CHECK(p.kind == DT_PARTIAL && p.op == DT_REDUCE_SUM, "loss placement %d, not P(sum)",
               (int)p.kind);
  }
  RANK_OK(dt_backward(loss, NULL));
  bool prev = dt_grad_mode_set(false);
  RANK_OK(dt_dist_full_tensor(loss, &full));
  RANK_OK(dt_tensor_grad(dx, &g));
  RANK_OK(dt_dist_full_tensor(g, &gfull));
  dt_grad_mode_set(prev);
  double want_grad[DR * DC], got[DR * DC], value;
  double want = reference(xv, tv, DR, DC, &a->o, want_grad);
  RANK_OK(dt_tensor_to_doubles(full, &value, 1));
  RANK_CHECK(fabs(value - want) <= 1e-5 * fabs(want), "loss %.9g, reference %.9g", value, want);
  RANK_OK(dt_tensor_to_doubles(gfull, got, DR * DC));
  for (int i = 0; i < DR * DC; i++)
    RANK_CHECK(fabs(got[i] - want_grad[i]) <= 1e-6, "grad %d: %g vs %g", i, got[i], want_grad[i]);
  dt_tensor *all[] = {x, t, dx, dtg, loss, full, g, gfull};
  for (int i = 0; i < 8; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(loss, cross_entropy_distributed, .timeout = 60) {
  dt_cross_entropy_options mean_ignore = {.ignore_index = &(int64_t){0}};
  dt_cross_entropy_options sum_smooth = {.reduction = DT_LOSS_SUM, .label_smoothing = 0.2};
  dist_arg cases[] = {
      {dt_shard(0), dt_shard(0), mean_ignore, true},
      {dt_shard(0), dt_shard(0), sum_smooth, true},
      {dt_shard(0), dt_shard(0), {0}, true},
      {dt_replicate(), dt_replicate(), mean_ignore, false},
      {dt_shard(1), dt_replicate(), mean_ignore, false}, /* classes sharded: gathered */
  };
  for (int ranks = 2; ranks <= 4; ranks++) {
    for (int c = 0; c < 5; c++) {
      dt_status st = dt_comm_spawn(ranks, dist_rank, &cases[c]);
      cr_assert_eq(st, DT_OK, "%d ranks, case %d: %s", ranks, c, dt_last_error());
    }
  }
}

typedef struct mse_arg {
  int unused;
} mse_arg;

/* mse mean over a batch-sharded [7, 3]: Partial(sum) of shard sums / 21, exact. */
static dt_status mse_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float a[21], b[21];
  double want = 0;
  for (int i = 0; i < 21; i++) {
    a[i] = (float)i * 0.5f;
    b[i] = (float)(i % 4);
    want += ((double)a[i] - b[i]) * ((double)a[i] - b[i]) / 21.0;
  }
  dt_tensor *x = NULL, *y = NULL, *dx = NULL, *dy = NULL, *loss = NULL, *full = NULL;
  RANK_OK(dt_from_data(a, 2, (int64_t[]){7, 3}, DT_F32, &x));
  RANK_OK(dt_from_data(b, 2, (int64_t[]){7, 3}, DT_F32, &y));
  dt_placement s0 = dt_shard(0);
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 1, &s0, &dx));
  RANK_OK(dt_dist_distribute_tensor(mesh, y, 1, &s0, &dy));
  RANK_OK(dt_mse_loss(dx, dy, DT_LOSS_MEAN, &loss));
  RANK_CHECK(dt_dist_placements(loss)[0].kind == DT_PARTIAL,
             "mean of a Shard(0) input not Partial");
  RANK_OK(dt_dist_full_tensor(loss, &full));
  double v;
  RANK_OK(dt_tensor_to_doubles(full, &v, 1));
  RANK_CHECK(fabs(v - want) <= 1e-5 * want, "mse %.9g, want %.9g", v, want);
  dt_tensor *all[] = {x, y, dx, dy, loss, full};
  for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(loss, mse_distributed_uneven) {
  for (int ranks = 2; ranks <= 4; ranks++) SPAWN_OK(ranks, mse_rank, NULL);
}

/* ---- Vocabulary-parallel cross-entropy ------------------------------------------------- */

typedef struct vocab_arg {
  int64_t classes;
  dt_cross_entropy_options o;
  int64_t bytes; /* out: collective bytes of forward + backward on rank 0 */
} vocab_arg;

enum { VR = 6 };

/* Logits [6, C] Shard(1) (a colwise LM head's output), targets Replicate: loss and gradient
 * equal the reference, the gradient stays Shard(1), and the collectives' bytes do not depend
 * on C (they carry [N, 1] row statistics, never the logits). */
static dt_status vocab_rank(dt_comm *world, void *varg) {
  vocab_arg *a = varg;
  int64_t C = a->classes;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float *xv = malloc(sizeof(float) * (size_t)(VR * C));
  double *want_grad = malloc(sizeof(double) * (size_t)(VR * C));
  double *got = malloc(sizeof(double) * (size_t)(VR * C));
  for (int64_t i = 0; i < VR * C; i++) xv[i] = (float)sin(i * 0.37) * 4.0f;
  int64_t tv[VR] = {0, C - 1, 5, 5, 2, C / 2};
  dt_tensor *x = NULL, *t = NULL, *dx = NULL, *dtg = NULL, *loss = NULL, *full = NULL, *g = NULL,
            *gfull = NULL;
  dt_placement s1 = dt_shard(1), R = dt_replicate();
  RANK_OK(dt_from_data(xv, 2, (int64_t[]){VR, C}, DT_F32, &x));
  RANK_OK(dt_from_data(tv, 1, (int64_t[]){VR}, DT_I64, &t));
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 1, &s1, &dx));
  RANK_OK(dt_dist_distribute_tensor(mesh, t, 1, &R, &dtg));
  RANK_OK(dt_tensor_set_requires_grad(dx, true));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_cross_entropy_ex(dx, dtg, &a->o, &loss));
  RANK_OK(dt_backward(loss, NULL));
  RANK_OK(dt_comm_ledger_stop(ledger));
  if (dt_comm_rank(world) == 0) a->bytes = dt_comm_ledger_bytes(ledger, NULL);
  RANK_CHECK(dt_comm_ledger_count(ledger, "all_gather_into_tensor") == 0 &&
                 dt_comm_ledger_count(ledger, "all_gather_uneven") == 0,
             "the logits were gathered");
  dt_comm_ledger_destroy(ledger);
  bool prev = dt_grad_mode_set(false);
  RANK_OK(dt_dist_full_tensor(loss, &full));
  RANK_OK(dt_tensor_grad(dx, &g));
  RANK_CHECK(dt_dist_placements(g)[0].kind == DT_SHARD && dt_dist_placements(g)[0].dim == 1,
             "gradient not Shard(1)");
  RANK_OK(dt_dist_full_tensor(g, &gfull));
  dt_grad_mode_set(prev);
  double value;
  double want = reference(xv, tv, VR, C, &a->o, want_grad);
  RANK_OK(dt_tensor_to_doubles(full, &value, 1));
  RANK_CHECK(fabs(value - want) <= 1e-5 * fabs(want), "loss %.9g, reference %.9g", value, want);
  RANK_OK(dt_tensor_to_doubles(gfull, got, VR * C));
  for (int64_t i = 0; i < VR * C; i++)
    RANK_CHECK(fabs(got[i] - want_grad[i]) <= 1e-6, "grad %lld: %g vs %g", (long long)i, got[i],
               want_grad[i]);
  /* A target out of range fails on every rank (targets are replicated). */
  int64_t bad[VR] = {0, C, 0, 0, 0, 0};
  dt_tensor *bt = NULL, *dbt = NULL, *out = NULL;
  RANK_OK(dt_from_data(bad, 1, (int64_t[]){VR}, DT_I64, &bt));
  RANK_OK(dt_dist_distribute_tensor(mesh, bt, 1, &R, &dbt));
  dt_status st = dt_cross_entropy_ex(dx, dbt, &a->o, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "out of range"), "%s",
             dt_last_error());
  dt_tensor *all[] = {x, t, dx, dtg, loss, full, g, gfull, bt, dbt};
  for (int i = 0; i < 10; i++) dt_tensor_release(all[i]);
  free(xv);
  free(want_grad);
  free(got);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(loss, vocab_parallel_cross_entropy, .timeout = 60) {
  dt_cross_entropy_options opts[] = {
      {0},
      {.ignore_index = &(int64_t){5}, .label_smoothing = 0.1},
      {.reduction = DT_LOSS_SUM},
  };
  for (int ranks = 2; ranks <= 4; ranks++) {
    for (int c = 0; c < 3; c++) {
      vocab_arg small = {.classes = 50, .o = opts[c]}, large = {.classes = 400, .o = opts[c]};
      dt_status st = dt_comm_spawn(ranks, vocab_rank, &small);
      cr_assert_eq(st, DT_OK, "%d ranks, C=50, case %d: %s", ranks, c, dt_last_error());
      st = dt_comm_spawn(ranks, vocab_rank, &large);
      cr_assert_eq(st, DT_OK, "%d ranks, C=400, case %d: %s", ranks, c, dt_last_error());
      cr_assert_eq(small.bytes, large.bytes, "%d ranks case %d: %lld bytes at C=50, %lld at C=400",
                   ranks, c, (long long)small.bytes, (long long)large.bytes);
      cr_assert_lt(small.bytes, (int64_t)(VR * 50 * 4), "bytes %lld", (long long)small.bytes);
      /* Exactly the row max [N, 1] and the terms [N, 2] ([N, 3] with label smoothing), all
       * float32 and in the forward: the backward moves nothing. */
      int64_t terms = opts[c].label_smoothing != 0.0 ? 3 : 2;
      cr_assert_eq(small.bytes, (int64_t)(VR * (1 + terms) * 4), "%d ranks case %d: %lld bytes",
                   ranks, c, (long long)small.bytes);
      if (ranks == 4 && c == 1)
        cr_log_info("vocab-parallel: %lld collective bytes on rank 0 (N=6, C=50 or 400)",
                    (long long)small.bytes);
    }
  }
}
