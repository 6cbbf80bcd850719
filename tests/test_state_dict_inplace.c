/* dt_state_dict_load copies in place (issue 22.2): after a few training steps of an MLP that
 * is local, tensor-parallel, fully sharded (with and without reshard after forward), data
 * parallel, or 2-D (FSDP x TP, DDP x TP), loading another state dict keeps every parameter's
 * handle, placements and requires_grad; the next forward equals a fresh local module built
 * from that state dict (the whole output), and an optimizer created before the load steps the
 * loaded values (the parameters after one step equal the fresh module's after the same step).
 * A shape or dtype that differs is refused with the tensor's name and nothing changes. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define IN 6
#define HIDDEN 10 /* uneven over 3 ranks */
#define OUT 4
#define BATCH 12
#define LR 0.1
#define TOL 2e-5

typedef enum layout { LOCAL, TP, FSDP, FSDP_KEEP, DDP, FSDP_TP, DDP_TP, N_LAYOUTS } layout;
static const char *const layout_names[N_LAYOUTS] = {
    "local", "tp", "fsdp", "fsdp (no reshard)", "ddp", "fsdp x tp", "ddp x tp"};
static const char *const names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};

typedef struct sd_arg {
  layout l;
  char path[128];
} sd_arg;

static dt_status whole(dt_tensor *t, dt_tensor **out) {
  if (dt_tensor_is_distributed(t)) return dt_dist_full_tensor(t, out);
  *out = dt_tensor_retain(t);
  return DT_OK;
}

static dt_status close_to(dt_tensor *got, dt_tensor *want, const char *what) {
  dt_tensor *g = NULL;
  RANK_OK(whole(got, &g));
  RANK_CHECK(dt_tensor_numel(g) == dt_tensor_numel(want), "%s: %lld elements, expected %lld", what,
             (long long)dt_tensor_numel(g), (long long)dt_tensor_numel(want));
  const float *a = dt_tensor_data(g), *b = dt_tensor_data(want);
  for (int64_t i = 0; i < dt_tensor_numel(g); i++) {
    if (fabsf(a[i] - b[i]) > TOL * (1 + fabsf(b[i]))) {
      dt_tensor_release(g);
      RANK_CHECK(false, "%s[%lld] = %.9g, reference %.9g", what, (long long)i, a[i], b[i]);
    }
  }
  dt_tensor_release(g);
  return DT_OK;
}

/* One SGD step on mse(model(x), y); DDP layouts reduce their gradients first. */
static dt_status train_step(dt_module *model, dt_optimizer *opt, dt_tensor *const *w, layout l,
                            dt_tensor *x, dt_tensor *y) {
  dt_tensor *out = NULL, *loss = NULL;
  RANK_OK(dt_optimizer_zero_grad(opt, true));
  RANK_OK(dt_module_forward(model, x, &out));
  RANK_OK(dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
  dt_tensor_release(out);
  RANK_OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  if (l == DDP || l == DDP_TP) RANK_OK(dt_parallel_ddp_reduce_gradients(4, w, 0, NULL, NULL));
  return dt_optimizer_step(opt);
}

static dt_status wrap(dt_module *model, dt_mesh *mesh, layout l) {
  dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
  if (l == TP || l == FSDP_TP || l == DDP_TP)
    RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
  dt_fsdp_options fo = {.keep_unsharded_after_forward = l == FSDP_KEEP};
  if (l == FSDP || l == FSDP_KEEP || l == FSDP_TP) RANK_OK(dt_parallel_fsdp(model, mesh, &fo));
  if (l == DDP || l == DDP_TP) RANK_OK(dt_parallel_ddp(model, mesh, 0, NULL));
  return DT_OK;
}

typedef struct leaves {
  int n;
  dt_tensor *t[4];
} leaves;

static dt_status collect_leaf(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  leaves *c = user;
  if (!is_buffer && c->n < 4) c->t[c->n++] = t;
  return DT_OK;
}

/* The fresh module built from the state dict, trained one step on the whole batch: its
 * output before the step and its parameters after it. */
static dt_status reference(const char *path, dt_tensor *x, dt_tensor *y, dt_tensor **out,
                           dt_tensor **after) {
  dt_module *ref = NULL;
  dt_safetensors *f = NULL;
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 99, &ref));
  RANK_OK(dt_safetensors_open(path, &f));
  RANK_OK(dt_state_dict_load(ref, f, NULL, NULL));
  dt_safetensors_destroy(f);
  leaves p = {0};
  RANK_OK(dt_module_visit_tensors(ref, collect_leaf, &p));
  for (int i = 0; i < 4; i++) RANK_OK(dt_tensor_set_requires_grad(p.t[i], true));
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(4, p.t, &(dt_sgd_options){.lr = LR}, &opt));
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_module_forward(ref, x, out);
  dt_grad_mode_set(prev);
  RANK_OK(st);
  RANK_OK(train_step(ref, opt, p.t, LOCAL, x, y));
  for (int i = 0; i < 4; i++) RANK_OK(dt_clone(p.t[i], &after[i]));
  dt_optimizer_destroy(opt);
  dt_module_destroy(ref);
  return DT_OK;
}

static dt_status sd_rank(dt_comm *world, void *varg) {
  sd_arg *arg = varg;
  layout l = arg->l;
  bool two_d = l == FSDP_TP || l == DDP_TP, dp = l != LOCAL && l != TP;
  dt_mesh *mesh = NULL;
  if (two_d) {
    RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  } else {
    RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  }
  dt_tensor *X = NULL, *Y = NULL, *x = NULL, *y = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){BATCH, IN}, DT_F32, 3, &X));
  RANK_OK(dt_randn(2, (int64_t[]){BATCH, OUT}, DT_F32, 4, &Y));
  if (dp) {
    /* This rank's rows of the batch, and the target placed like the output. */
    int ranks = dt_mesh_size(mesh, 0), c = dt_mesh_coordinate(mesh, 0);
    x = narrow_rows(X, c * (BATCH / ranks), BATCH / ranks);
    dt_placement p[2] = {dt_shard(0), dt_replicate()};
    RANK_OK(dt_dist_distribute_tensor(mesh, Y, dt_mesh_ndim(mesh), p, &y));
  } else {
    x = dt_tensor_retain(X);
    y = dt_tensor_retain(Y);
  }
  dt_module *model = NULL;
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 1, &model));
  RANK_OK(wrap(model, mesh, l));
  leaves w = {0};
  RANK_OK(dt_module_visit_tensors(model, collect_leaf, &w));
  RANK_CHECK(w.n == 4, "%d parameters", w.n);
  dt_placement before[4][2];
  for (int i = 0; i < 4; i++) {
    if (!dt_tensor_requires_grad(w.t[i])) RANK_OK(dt_tensor_set_requires_grad(w.t[i], true));
    if (dt_tensor_is_distributed(w.t[i]))
      memcpy(before[i], dt_dist_placements(w.t[i]), sizeof(dt_placement) * (two_d ? 2 : 1));
  }
  dt_optimizer *opt = NULL;
  RANK_OK(dt_optimizer_create_sgd(4, w.t, &(dt_sgd_options){.lr = LR}, &opt));
  for (int s = 0; s < 3; s++) RANK_OK(train_step(model, opt, w.t, l, x, y));

  dt_safetensors *f = NULL;
  RANK_OK(dt_safetensors_open(arg->path, &f));
  RANK_OK(dt_state_dict_load(model, f, NULL, NULL));
  dt_safetensors_destroy(f);
  /* The same handles, placements and requires_grad. */
  leaves now = {0};
  RANK_OK(dt_module_visit_tensors(model, collect_leaf, &now));
  for (int i = 0; i < 4; i++) {
    RANK_CHECK(now.t[i] == w.t[i], "%s: %s is another handle after the load", layout_names[l],
               names[i]);
    RANK_CHECK(dt_tensor_requires_grad(w.t[i]) && dt_tensor_is_leaf(w.t[i]),
               "%s: %s lost requires_grad", layout_names[l], names[i]);
    if (dt_tensor_is_distributed(w.t[i])) {
      const dt_placement *p = dt_dist_placements(w.t[i]);
      bool same = true;
      for (int d = 0; d < (two_d ? 2 : 1); d++)
        same = same && p[d].kind == before[i][d].kind && p[d].dim == before[i][d].dim;
      RANK_CHECK(same, "%s: %s changed placements", layout_names[l], names[i]);
    }
  }
  dt_tensor *ref_out = NULL, *ref_after[4] = {0}, *out = NULL;
  RANK_OK(reference(arg->path, X, Y, &ref_out, ref_after));
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_module_forward(model, x, &out);
  dt_grad_mode_set(prev);
  RANK_OK(st);
  RANK_OK(close_to(out, ref_out, "forward after the load"));
  RANK_OK(train_step(model, opt, w.t, l, x, y));
  for (int i = 0; i < 4; i++) RANK_OK(close_to(w.t[i], ref_after[i], names[i]));

  for (int i = 0; i < 4; i++) dt_tensor_release(ref_after[i]);
  dt_tensor_release(ref_out);
  dt_tensor_release(out);
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  dt_tensor_release(X);
  dt_tensor_release(Y);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void write_other_state_dict(char *path, size_t size) {
  snprintf(path, size, "/tmp/dt_state_dict_inplace_%d.safetensors", (int)getpid());
  dt_module *other = NULL;
  cr_assert_eq(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 7, &other), DT_OK);
  cr_assert_eq(dt_state_dict_save(other, path), DT_OK, "%s", dt_last_error());
  dt_module_destroy(other);
}

static void run_layout(layout l) {
  sd_arg arg = {.l = l};
  write_other_state_dict(arg.path, sizeof arg.path);
  int world = l == LOCAL ? 1 : l == FSDP_TP || l == DDP_TP ? 4 : 3;
  dt_status st = dt_comm_spawn(world, sd_rank, &arg);
  unlink(arg.path);
  cr_assert_eq(st, DT_OK, "%s on %d ranks: %s", layout_names[l], world, dt_last_error());
}

Test(state_dict_inplace, local) { run_layout(LOCAL); }
Test(state_dict_inplace, tensor_parallel) { run_layout(TP); }
Test(state_dict_inplace, fully_shard) { run_layout(FSDP); }
Test(state_dict_inplace, fully_shard_without_reshard) { run_layout(FSDP_KEEP); }
Test(state_dict_inplace, data_parallel) { run_layout(DDP); }
Test(state_dict_inplace, fsdp_x_tp) { run_layout(FSDP_TP); }
Test(state_dict_inplace, ddp_x_tp) { run_layout(DDP_TP); }

/* A tensor of another shape or dtype is refused, naming it, before anything is copied. */
Test(state_dict_inplace, refuses_shape_and_dtype_mismatch) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/dt_state_dict_mismatch_%d.safetensors", (int)getpid());
  dt_module *model = NULL;
  cr_assert_eq(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 1, &model), DT_OK);
  dt_tensor *keep = NULL;
  cr_assert_eq(dt_clone(dt_module_get_tensor(model, "0.weight"), &keep), DT_OK);
  for (int bad = 0; bad < 2; bad++) {
    dt_tensor *t[4];
    for (int i = 0; i < 4; i++) {
      dt_tensor *p = dt_module_get_tensor(model, names[i]);
      cr_assert_eq(dt_ones(dt_tensor_ndim(p), dt_tensor_shape(p), DT_F32, &t[i]), DT_OK);
    }
    dt_tensor_release(t[3]);
    if (bad == 0) cr_assert_eq(dt_ones(1, (int64_t[]){OUT + 1}, DT_F32, &t[3]), DT_OK);
    if (bad == 1) cr_assert_eq(dt_ones(1, (int64_t[]){OUT}, DT_F64, &t[3]), DT_OK);
    cr_assert_eq(dt_safetensors_save(path, 4, names, t, 0, NULL, NULL), DT_OK, "%s",
                 dt_last_error());
    for (int i = 0; i < 4; i++) dt_tensor_release(t[i]);
    dt_safetensors *f = NULL;
    cr_assert_eq(dt_safetensors_open(path, &f), DT_OK);
    cr_assert_eq(dt_state_dict_load(model, f, NULL, NULL), DT_ERR_INVALID);
    cr_assert(strstr(dt_last_error(), "dt_state_dict_load") && strstr(dt_last_error(), "2.bias") &&
                  strstr(dt_last_error(), bad ? "float64" : "[5]"),
              "%s", dt_last_error());
    dt_safetensors_destroy(f);
    /* Nothing was copied: 0.weight (read before 2.bias) is unchanged. */
    const float *a = dt_tensor_data(dt_module_get_tensor(model, "0.weight"));
    const float *b = dt_tensor_data(keep);
    for (int64_t i = 0; i < dt_tensor_numel(keep); i++) cr_assert_eq(a[i], b[i]);
  }
  unlink(path);
  dt_tensor_release(keep);
  dt_module_destroy(model);
}
