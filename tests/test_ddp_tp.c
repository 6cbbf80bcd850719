/* 2-D DDP x TP (dt_parallel_tp_module on "tp", then dt_parallel_ddp on "dp", of a 2 x 2
 * mesh): PyTorch's training fixtures (../shared/fixtures/training) must give PyTorch's loss at
 * every step (relative 1e-5) and its final weights (relative 1e-4). The tensor-parallel
 * parameters keep their placements (Replicate on dp); after backward their gradients are
 * Partial(sum) over dp with the parameters' tp placement, and
 * dt_parallel_ddp_reduce_gradients all-reduces the tp-local pieces over dp in buckets. Also
 * with tp on the first mesh dim, and with DDP on a root that is itself a tensor-parallel
 * Linear (both hook pairs on one module).
 * Also: when a tensor-parallel module's output is made local on an N-D mesh (Replicate on
 * every other mesh dim) and when it stays distributed, against the unparallelized model. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define STEPS 20
#include "training_fixtures.h"
#include "fixture_mlp.h"
#include "fixture_main.h"
#define WEIGHT_RTOL 1e-4
#define WEIGHT_ATOL 1e-6
#define LOSS_RTOL 1e-5

/* The placements of each parameter after both calls, as [dp, tp]: tensor parallelism's. */
static const dt_placement want_p[4][2] = {
    {{.kind = DT_REPLICATE}, {.kind = DT_SHARD, .dim = 0}},
    {{.kind = DT_REPLICATE}, {.kind = DT_SHARD, .dim = 0}},
    {{.kind = DT_REPLICATE}, {.kind = DT_SHARD, .dim = 1}},
    {{.kind = DT_REPLICATE}, {.kind = DT_REPLICATE}},
};

typedef struct train_arg {
  const run *r;
  int64_t bucket_bytes; /* dt_ddp_options.bucket_bytes */
  int want_buckets;
  bool local_input; /* feed this rank's rows as a local tensor (the DDP hook wraps them) */
  int dp;           /* the data-parallel mesh dim (0: ("dp", "tp"); 1: tp first) */
  double losses[STEPS];
} train_arg;

static bool same_placement(dt_placement a, dt_placement b) {
  return a.kind == b.kind && (a.kind != DT_SHARD || a.dim == b.dim);
}

static dt_status compare_final(const run *r, dt_tensor *const *w) {
  return fixture_compare_final(r->name, w, param_names, 4, WEIGHT_RTOL, WEIGHT_ATOL, false);
}

/* The bytes of this rank's piece of each gradient (what the all-reduce over dp moves). */
static int64_t local_bytes(dt_tensor *const *w) {
  int64_t bytes = 0;
  for (int i = 0; i < 4; i++) {
    dt_tensor *local = NULL;
    if (dt_dist_to_local(w[i], &local) == DT_OK) bytes += dt_tensor_numel(local) * 4;
    dt_tensor_release(local);
  }
  return bytes;
}

static dt_status check_grads(dt_tensor *const *w, int dp, dt_placement_kind dp_kind,
                             const char *when) {
  for (int i = 0; i < 4; i++) {
    dt_tensor *g = NULL;
    RANK_OK(dt_tensor_grad(w[i], &g));
    RANK_CHECK(g && dt_tensor_is_distributed(g), "%s: %s has no distributed grad", when,
               param_names[i]);
    dt_placement pd = dt_dist_placements(g)[dp], pt = dt_dist_placements(g)[1 - dp];
    bool ok = pd.kind == dp_kind && (dp_kind != DT_PARTIAL || pd.op == DT_REDUCE_SUM) &&
              same_placement(pt, want_p[i][1]);
    dt_tensor_release(g);
    RANK_CHECK(ok, "%s: grad of %s is %d on dp, %d(%d) on tp", when, param_names[i], (int)pd.kind,
               (int)pt.kind, pt.dim);
  }
  return DT_OK;
}

static dt_status train(train_arg *arg, dt_mesh *mesh, double *losses) {
  const run *r = arg->r;
  dt_module *model = NULL;
  RANK_OK(build_model(r, &model));
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  int dp = arg->dp, tp = 1 - dp;
  RANK_OK(dt_parallel_tp_module_on_dim(model, mesh, tp, &plan, NULL));
  dt_ddp_options ddp_opt = {.bucket_bytes = arg->bucket_bytes};
  RANK_OK(dt_parallel_ddp(model, mesh, dp, &ddp_opt));

  params_ctx pc = {0};
  RANK_OK(dt_module_visit_tensors(model, collect, &pc));
  RANK_CHECK(pc.n == 4, "%d parameters", pc.n);
  dt_tensor *w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = pc.t[i];
    RANK_CHECK(strcmp(pc.names[i], param_names[i]) == 0, "parameter %d is %s", i, pc.names[i]);
    RANK_CHECK(dt_tensor_is_distributed(w[i]) && dt_tensor_is_leaf(w[i]) &&
                   dt_tensor_requires_grad(w[i]) && dt_dist_mesh(w[i]) == mesh,
               "%s is not a distributed leaf on the mesh requiring grad", param_names[i]);
    for (int d = 0; d < 2; d++) {
      RANK_CHECK(same_placement(dt_dist_placements(w[i])[d == 0 ? dp : tp], want_p[i][d]),
                 "%s: %s has kind %d", param_names[i], d == 0 ? "dp" : "tp",
                 (int)dt_dist_placements(w[i])[d == 0 ? dp : tp].kind);
    }
    dt_tensor_retain(w[i]);
  }
  int64_t grad_bytes = local_bytes(w);

  dt_safetensors *data = NULL;
  dt_tensor *x = NULL, *y = NULL;
  dt_placement batch[2];
  batch[dp] = dt_shard(0);
  batch[tp] = dt_replicate();
  RANK_OK(open_fixture(r->name, "data", &data));
  RANK_OK(dt_safetensors_load_distributed(data, "x", mesh, 2, batch, &x));
  RANK_OK(dt_safetensors_load_distributed(data, "y", mesh, 2, batch, &y));
  dt_safetensors_destroy(data);
  if (arg->local_input) {
    /* This rank's rows only: the DDP hook takes them as Shard(0) over dp. */
    dt_tensor *rows = NULL;
    RANK_OK(dt_dist_to_local(x, &rows));
    dt_tensor_release(x);
    x = rows;
  }

  dt_optimizer *opt = NULL;
  if (r->adamw) {
    dt_adam_options o = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    RANK_OK(dt_optimizer_create_adamw(4, w, &o, &opt));
  } else {
    dt_sgd_options o = {.lr = 0.05, .momentum = 0.9};
    RANK_OK(dt_optimizer_create_sgd(4, w, &o, &opt));
  }
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *out = NULL, *loss = NULL;
    dt_comm_ledger *fwd = NULL, *red = NULL;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    if (s == 0) RANK_OK(dt_comm_ledger_start(&fwd));
    RANK_OK(dt_module_forward(model, x, &out));
    if (s == 0) RANK_OK(dt_comm_ledger_stop(fwd));
    /* The output is split over dp: it stays distributed ([Shard(0), Replicate]). */
    RANK_CHECK(dt_tensor_is_distributed(out) &&
                   same_placement(dt_dist_placements(out)[dp], dt_shard(0)) &&
                   dt_dist_placements(out)[tp].kind == DT_REPLICATE,
               "step %d: output is not S(0) on dp, R on tp", s);
    RANK_OK(r->cross_entropy ? dt_cross_entropy(out, y, &loss)
                             : dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    dt_tensor_release(out);
    RANK_OK(dt_backward(loss, NULL));
    if (s == 0) RANK_OK(check_grads(w, dp, DT_PARTIAL, "after backward"));
    int buckets = -1;
    if (s == 0) RANK_OK(dt_comm_ledger_start(&red));
    RANK_OK(dt_parallel_ddp_reduce_gradients(4, w, dp, &ddp_opt, &buckets));
    if (s == 0) {
      RANK_OK(dt_comm_ledger_stop(red));
      /* The forward's only collective is the rowwise output's all-reduce over tp (its
       * Partial sum, bytes of this rank's rows); nothing moves over dp before the reduce. */
      int64_t fwd_all = dt_comm_ledger_count(fwd, "all_reduce");
      RANK_CHECK(fwd_all == 1 && dt_comm_ledger_count(fwd, "all_gather") == 0 &&
                     dt_comm_ledger_count(fwd, "all_gather_uneven") == 0,
                 "forward: %lld all_reduce", (long long)fwd_all);
      RANK_CHECK(buckets == arg->want_buckets, "%d buckets, expected %d", buckets,
                 arg->want_buckets);
      int64_t n = dt_comm_ledger_count(red, "all_reduce"),
              bytes = dt_comm_ledger_bytes(red, "all_reduce");
      RANK_CHECK(n == arg->want_buckets && bytes == grad_bytes,
                 "reduce: %lld all_reduce of %lld bytes, expected %d of %lld (tp-local)",
                 (long long)n, (long long)bytes, arg->want_buckets, (long long)grad_bytes);
      dt_comm_ledger_destroy(fwd);
      dt_comm_ledger_destroy(red);
      RANK_OK(check_grads(w, dp, DT_REPLICATE, "after reduce"));
    }
    RANK_OK(loss_value(loss, &losses[s]));
    dt_tensor_release(loss);
    RANK_OK(dt_optimizer_step(opt));
  }
  RANK_OK(compare_final(r, w));
  dt_optimizer_destroy(opt);
  for (int i = 0; i < 4; i++) dt_tensor_release(w[i]);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_module_destroy(model);
  return DT_OK;
}

static dt_status rank_main(dt_comm *world, void *varg) {
  train_arg *arg = varg;
  dt_mesh *mesh = NULL;
  double losses[STEPS];
  const char *names[2];
  names[arg->dp] = "dp";
  names[1 - arg->dp] = "tp";
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, names, &mesh));
  dt_status st = train(arg, mesh, losses);
  if (!st && dt_comm_rank(world) == 0) memcpy(arg->losses, losses, sizeof losses);
  dt_mesh_destroy(mesh);
  return st;
}

static void train_2x2(int64_t bucket_bytes, int want_buckets, bool local_input, int dp,
                      const char *what) {
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int i = 0; i < 2; i++) {
    train_arg arg = {.r = &runs[i],
                     .bucket_bytes = bucket_bytes,
                     .want_buckets = want_buckets,
                     .local_input = local_input,
                     .dp = dp};
    dt_status st = dt_comm_spawn(4, rank_main, &arg);
    cr_assert_eq(st, DT_OK, "%s %s: %s", runs[i].name, what, dt_last_error());
    double want[STEPS];
    cr_assert(expected_losses(runs[i].name, want), "cannot read expected.json");
    for (int s = 0; s < STEPS; s++) {
      cr_expect(fabs(arg.losses[s] - want[s]) <= LOSS_RTOL * fabs(want[s]),
                "%s %s step %d: loss %.9g, PyTorch %.9g", runs[i].name, what, s + 1, arg.losses[s],
                want[s]);
    }
  }
}

Test(ddp_tp, trains_like_pytorch_on_2x2, .timeout = 120) {
  train_2x2(0, 1, false, 0, "DDP(dp) x TP(tp), one bucket");
}

Test(ddp_tp, small_buckets_and_local_input_on_2x2, .timeout = 120) {
  /* One byte: each gradient is a bucket of its own. */
  train_2x2(1, 4, true, 0, "DDP(dp) x TP(tp), 1-byte buckets, local input");
}

/* ("tp", "dp"): dt_parallel_tp_module_on_dim(0), dt_parallel_ddp on dim 1. */
Test(ddp_tp, tp_on_the_first_mesh_dim, .timeout = 120) {
  train_2x2(0, 1, true, 1, "TP(dim 0) x DDP(dim 1), local input");
}

/* ---- When a tensor-parallel output is made local on an N-D mesh ---------------------------- */

#define IN 6
#define HID 4
#define OUT 3
#define ROWS 4

/* Compares t (local, or distributed and gathered) with want[rows x cols] restricted to
 * columns [c0, c0 + ncols). */
static dt_status same_values(dt_tensor *t, const double *want, int64_t cols, int64_t c0,
                             int64_t ncols, const char *what) {
  dt_tensor *full = NULL;
  if (dt_tensor_is_distributed(t)) {
    RANK_OK(dt_dist_full_tensor(t, &full));
  } else {
    full = dt_tensor_retain(t);
  }
  double got[ROWS * HID * 2];
  int64_t n = dt_tensor_numel(full);
  RANK_CHECK(n == ROWS * ncols, "%s: %lld elements, expected %lld", what, (long long)n,
             (long long)(ROWS * ncols));
  RANK_OK(dt_tensor_to_doubles(full, got, n));
  dt_tensor_release(full);
  for (int64_t i = 0; i < ROWS; i++) {
    for (int64_t j = 0; j < ncols; j++) {
      double a = got[i * ncols + j], b = want[i * cols + c0 + j];
      RANK_CHECK(fabs(a - b) <= 1e-5 * fabs(b) + 1e-6, "%s[%lld,%lld] is %.9g, expected %.9g", what,
                 (long long)i, (long long)j, a, b);
    }
  }
  return DT_OK;
}

static dt_status output_rule_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL;
  dt_module *ref = NULL, *tp = NULL, *kept = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  int tp_rank = dt_mesh_coordinate(mesh, 1), dp_rank = dt_mesh_coordinate(mesh, 0);
  /* The same seeds: three identical models; ref stays local (the reference). */
  RANK_OK(dt_nn_mlp(IN, HID, OUT, true, true, 7, &ref));
  RANK_OK(dt_nn_mlp(IN, HID, OUT, true, true, 7, &tp));
  RANK_OK(dt_nn_mlp(IN, HID, OUT, true, true, 7, &kept));
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  RANK_OK(dt_parallel_tp_module(tp, mesh, &plan, NULL));
  dt_tp_style_options keep[2] = {{.keep_distributed_output = true},
                                 {.keep_distributed_output = true}};
  RANK_OK(dt_parallel_tp_module(kept, mesh, &plan, keep));

  dt_tensor *x = NULL, *h_ref = NULL, *y_ref = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){ROWS, IN}, DT_F32, 11, &x));
  RANK_OK(dt_module_forward(dt_module_find(ref, "0"), x, &h_ref));
  RANK_OK(dt_module_forward(ref, x, &y_ref));
  double h_want[ROWS * HID], y_want[ROWS * OUT];
  RANK_OK(dt_tensor_to_doubles(h_ref, h_want, ROWS * HID));
  RANK_OK(dt_tensor_to_doubles(y_ref, y_want, ROWS * OUT));

  /* 1. A local input (Replicate on dp): every output is Replicate on dp, so it is made local
   * as on a 1-D mesh: the colwise Linear gives this rank's tp columns, the MLP the whole
   * output. */
  dt_tensor *h = NULL, *y = NULL;
  RANK_OK(dt_module_forward(dt_module_find(tp, "0"), x, &h));
  RANK_CHECK(!dt_tensor_is_distributed(h), "colwise output of a local input is distributed");
  RANK_OK(same_values(h, h_want, HID, tp_rank * (HID / 2), HID / 2, "colwise local"));
  RANK_OK(dt_module_forward(tp, x, &y));
  RANK_CHECK(!dt_tensor_is_distributed(y), "MLP output of a local input is distributed");
  RANK_OK(same_values(y, y_want, OUT, 0, OUT, "MLP local"));
  dt_tensor_release(h);
  dt_tensor_release(y);

  /* 2. A batch sharded over dp: the outputs stay distributed whatever the option says, with
   * the batch's Shard(0) on dp and the style's layout on tp. */
  dt_tensor *xd = NULL;
  dt_placement batch[2] = {dt_shard(0), dt_replicate()};
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 2, batch, &xd));
  RANK_OK(dt_module_forward(dt_module_find(tp, "0"), xd, &h));
  RANK_CHECK(dt_tensor_is_distributed(h) && same_placement(dt_dist_placements(h)[0], dt_shard(0)) &&
                 same_placement(dt_dist_placements(h)[1], dt_shard(1)),
             "colwise output of a dp-sharded input is not [S(0), S(1)]");
  RANK_OK(same_values(h, h_want, HID, 0, HID, "colwise dp-sharded"));
  RANK_OK(dt_module_forward(tp, xd, &y));
  RANK_CHECK(dt_tensor_is_distributed(y) && same_placement(dt_dist_placements(y)[0], dt_shard(0)) &&
                 dt_dist_placements(y)[1].kind == DT_REPLICATE,
             "MLP output of a dp-sharded input is not [S(0), R]");
  dt_tensor *rows = NULL;
  RANK_OK(dt_dist_to_local(y, &rows));
  double part[ROWS * OUT];
  RANK_CHECK(dt_tensor_numel(rows) == ROWS / 2 * OUT, "local rows");
  RANK_OK(dt_tensor_to_doubles(rows, part, ROWS / 2 * OUT));
  for (int k = 0; k < ROWS / 2 * OUT; k++) {
    double b = y_want[dp_rank * (ROWS / 2) * OUT + k];
    RANK_CHECK(fabs(part[k] - b) <= 1e-5 * fabs(b) + 1e-6, "dp rows [%d] %.9g vs %.9g", k, part[k],
               b);
  }
  RANK_OK(same_values(y, y_want, OUT, 0, OUT, "MLP dp-sharded"));
  dt_tensor_release(rows);
  dt_tensor_release(h);
  dt_tensor_release(y);

  /* 3. keep_distributed_output: a local input gives [R, S(1)] from the colwise Linear. */
  RANK_OK(dt_module_forward(dt_module_find(kept, "0"), x, &h));
  RANK_CHECK(dt_tensor_is_distributed(h) && dt_dist_placements(h)[0].kind == DT_REPLICATE &&
                 same_placement(dt_dist_placements(h)[1], dt_shard(1)),
             "kept colwise output is not [R, S(1)]");
  RANK_OK(same_values(h, h_want, HID, 0, HID, "colwise kept"));
  dt_tensor_release(h);

  dt_tensor_release(xd);
  dt_tensor_release(x);
  dt_tensor_release(h_ref);
  dt_tensor_release(y_ref);
  dt_module_destroy(ref);
  dt_module_destroy(tp);
  dt_module_destroy(kept);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(ddp_tp, tp_output_local_only_when_replicate_on_other_dims) {
  SPAWN_OK(4, output_rule_rank, NULL);
}

/* The root is itself a tensor-parallel Linear: the DDP hook, added last, is the outermost on
 * the same module, so this rank's local rows become [S(0), R] before the colwise hook; the
 * output and the reduced weight gradient equal the unparallelized Linear's on the whole
 * batch (mean of the squared output). */
static dt_status root_linear_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL;
  dt_module *ref = NULL, *lin = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  RANK_OK(dt_nn_linear(IN, HID, true, 5, &ref));
  RANK_OK(dt_nn_linear(IN, HID, true, 5, &lin));
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"", DT_TP_COLWISE}}};
  RANK_OK(dt_parallel_tp_module(lin, mesh, &plan, NULL));
  RANK_OK(dt_parallel_ddp(lin, mesh, 0, NULL));
  dt_tensor *x = NULL, *rows = NULL, *y_ref = NULL, *y = NULL, *sq = NULL, *loss = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){ROWS, IN}, DT_F32, 13, &x));
  RANK_OK(dt_module_forward(ref, x, &y_ref));
  double y_want[ROWS * HID];
  RANK_OK(dt_tensor_to_doubles(y_ref, y_want, ROWS * HID));
  /* This rank's half of the batch, as a local tensor. */
  dt_tensor *xd = NULL;
  dt_placement batch[2] = {dt_shard(0), dt_replicate()};
  RANK_OK(dt_dist_distribute_tensor(mesh, x, 2, batch, &xd));
  RANK_OK(dt_dist_to_local(xd, &rows));
  RANK_OK(dt_module_forward(lin, rows, &y));
  RANK_CHECK(dt_tensor_is_distributed(y) && same_placement(dt_dist_placements(y)[0], dt_shard(0)) &&
                 same_placement(dt_dist_placements(y)[1], dt_shard(1)),
             "root Linear output is not [S(0), S(1)]");
  RANK_OK(same_values(y, y_want, HID, 0, HID, "root Linear"));
  /* d mean(y^2) / dW = 2/(N*H) * sum_rows y_i x_j, from the reference values. */
  RANK_OK(dt_mul(y, y, &sq));
  RANK_OK(dt_mean(sq, &loss));
  RANK_OK(dt_backward(loss, NULL));
  dt_tensor *w = dt_module_get_tensor(lin, "weight"), *g = NULL, *full = NULL;
  int buckets = 0;
  RANK_OK(dt_parallel_ddp_reduce_gradients(1, &w, 0, NULL, &buckets));
  RANK_CHECK(buckets == 1, "%d buckets", buckets);
  RANK_OK(dt_tensor_grad(w, &g));
  RANK_CHECK(g && dt_dist_placements(g)[0].kind == DT_REPLICATE, "weight grad not Replicate on dp");
  RANK_OK(dt_dist_full_tensor(g, &full));
  double got[HID * IN], xv[ROWS * IN];
  RANK_OK(dt_tensor_to_doubles(full, got, HID * IN));
  RANK_OK(dt_tensor_to_doubles(x, xv, ROWS * IN));
  for (int o = 0; o < HID; o++) {
    for (int j = 0; j < IN; j++) {
      double want = 0;
      for (int i = 0; i < ROWS; i++) want += y_want[i * HID + o] * xv[i * IN + j];
      want *= 2.0 / (ROWS * HID);
      RANK_CHECK(fabs(got[o * IN + j] - want) <= 1e-5 * fabs(want) + 1e-6,
                 "dW[%d,%d] is %.9g, expected %.9g", o, j, got[o * IN + j], want);
    }
  }
  dt_tensor_release(full);
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(sq);
  dt_tensor_release(y);
  dt_tensor_release(y_ref);
  dt_tensor_release(rows);
  dt_tensor_release(xd);
  dt_tensor_release(x);
  dt_module_destroy(ref);
  dt_module_destroy(lin);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(ddp_tp, data_parallel_on_a_tensor_parallel_root) { SPAWN_OK(4, root_linear_rank, NULL); }

/* ---- Misuse -------------------------------------------------------------------------------- */

static dt_status bad_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL, *other = NULL;
  dt_module *mlp = NULL, *sharded = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &other));
  RANK_OK(dt_nn_mlp(4, 6, 2, true, true, 3, &mlp));
  RANK_OK(dt_nn_mlp(4, 6, 2, true, true, 3, &sharded));
  /* Only "0" is tensor-parallel, on another mesh: refused before "2" is touched. */
  dt_tp_plan first = {1, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}}};
  RANK_OK(dt_parallel_tp_module(mlp, other, &first, NULL));
  RANK_CHECK(dt_parallel_ddp(mlp, mesh, 0, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(),
                        "dt_parallel_ddp: parameter '0.weight' is distributed on another mesh"),
             "%s", dt_last_error());
  RANK_CHECK(!dt_tensor_is_distributed(dt_module_get_tensor(mlp, "2.weight")),
             "a refused dt_parallel_ddp replaced 2.weight");
  /* Tensor parallelism on the data-parallel dim: the parameter is sharded there. */
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  RANK_OK(dt_parallel_tp_module(sharded, mesh, &plan, NULL));
  RANK_CHECK(dt_parallel_ddp(sharded, mesh, 1, NULL) == DT_ERR_UNSUPPORTED &&
                 strstr(dt_last_error(), "'0.weight' is already distributed as Shard(0) on "
                                         "mesh dim 1"),
             "%s", dt_last_error());
  /* FSDP over dp, then DDP over dp. */
  RANK_OK(dt_parallel_fsdp(sharded, mesh, NULL));
  RANK_CHECK(dt_parallel_ddp(sharded, mesh, 0, NULL) == DT_ERR_UNSUPPORTED &&
                 strstr(dt_last_error(), "already distributed as Shard(1) on mesh dim 0"),
             "%s", dt_last_error());
  dt_module_destroy(mlp);
  dt_module_destroy(sharded);
  dt_mesh_destroy(other);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(ddp_tp, bad_arguments_on_2x2) { SPAWN_OK(4, bad_rank, NULL); }
