/* The local batch of a data-parallel module (issue 22.8) and requires_grad after the parallel
 * wrappers (issue 22.10). dt_parallel_fsdp and dt_parallel_ddp gather the ranks' row counts of a
 * local input: a torch.chunk split of 10 rows over 3 ranks (4, 4, 2) gives the global batch
 * of 10 (the output and the loss equal the unsharded model's on the whole batch), and a split
 * Shard(0) cannot describe (3, 4, 3) is refused on every rank with the counts in the message,
 * where before each rank saw another global shape. Modules make parameters without
 * requires_grad; fully_shard, data_parallel and parallelize_module all turn it on for every
 * parameter of the tree. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define IN 5
#define HIDDEN 7
#define OUT 3
#define BATCH 10

typedef struct input_arg {
  bool ddp;
  const int64_t *rows; /* per rank */
} input_arg;

static dt_status uneven_rank(dt_comm *world, void *varg) {
  input_arg *arg = varg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  dt_tensor *X = NULL, *x = NULL, *out = NULL, *full = NULL, *want = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){BATCH, IN}, DT_F32, 11, &X));
  int64_t start = 0;
  for (int r = 0; r < rank; r++) start += arg->rows[r];
  x = narrow_rows(X, start, arg->rows[rank]);
  dt_module *ref = NULL, *model = NULL;
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 3, &ref));
  RANK_OK(dt_module_forward(ref, X, &want));
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 3, &model));
  RANK_OK(arg->ddp ? dt_parallel_ddp(model, mesh, 0, NULL) : dt_parallel_fsdp(model, mesh, NULL));
  dt_status st = dt_module_forward(model, x, &out);
  bool chunked = arg->rows[0] == 4 && arg->rows[1] == 4 && arg->rows[2] == 2;
  if (!chunked) {
    const char *fn = arg->ddp ? "dt_parallel_ddp" : "dt_parallel_fsdp";
    RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), fn) &&
                   strstr(dt_last_error(), "[3, 4, 3]") && strstr(dt_last_error(), "[4, 4, 2]"),
               "status %d: %s", (int)st, dt_last_error());
  } else {
    RANK_OK(st);
    RANK_CHECK(dt_dist_global_shape(out)[0] == BATCH, "global batch %lld",
               (long long)dt_dist_global_shape(out)[0]);
    RANK_OK(dt_dist_full_tensor(out, &full));
    const float *a = dt_tensor_data(full), *b = dt_tensor_data(want);
    for (int64_t i = 0; i < BATCH * OUT; i++)
      RANK_CHECK(fabsf(a[i] - b[i]) <= 1e-5f * (1 + fabsf(b[i])), "[%lld] %g vs %g", (long long)i,
                 a[i], b[i]);
    /* The loss and the gradient over the uneven batch equal the whole batch's. */
    dt_tensor *loss = NULL, *ref_loss = NULL;
    RANK_OK(dt_mean(out, &loss));
    RANK_OK(dt_backward(loss, NULL));
    double got = 0, expect = 0;
    dt_tensor *lf = NULL;
    RANK_OK(dt_dist_full_tensor(loss, &lf));
    RANK_OK(dt_tensor_to_doubles(lf, &got, 1));
    RANK_OK(dt_mean(want, &ref_loss));
    RANK_OK(dt_tensor_to_doubles(ref_loss, &expect, 1));
    RANK_CHECK(fabs(got - expect) <= 1e-6 * (1 + fabs(expect)), "loss %.9g vs %.9g", got, expect);
    dt_tensor_release(lf);
    dt_tensor_release(loss);
    dt_tensor_release(ref_loss);
  }
  dt_tensor_release(X);
  dt_tensor_release(x);
  dt_tensor_release(out);
  dt_tensor_release(full);
  dt_tensor_release(want);
  dt_module_destroy(ref);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static const int64_t chunked[3] = {4, 4, 2}, other[3] = {3, 4, 3};

Test(data_parallel_input, fsdp_uneven_chunk_split) {
  input_arg a = {false, chunked};
  SPAWN_OK(3, uneven_rank, &a);
}
Test(data_parallel_input, ddp_uneven_chunk_split) {
  input_arg a = {true, chunked};
  SPAWN_OK(3, uneven_rank, &a);
}
Test(data_parallel_input, fsdp_refuses_another_split) {
  input_arg a = {false, other};
  SPAWN_OK(3, uneven_rank, &a);
}
Test(data_parallel_input, ddp_refuses_another_split) {
  input_arg a = {true, other};
  SPAWN_OK(3, uneven_rank, &a);
}

/* ---- requires_grad ------------------------------------------------------------------------- */

typedef struct grad_count {
  int params, requiring, buffers_requiring;
} grad_count;

static dt_status count_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  grad_count *c = user;
  if (is_buffer) {
    c->buffers_requiring += dt_tensor_requires_grad(t);
    return DT_OK;
  }
  c->params++;
  c->requiring += dt_tensor_requires_grad(t) && dt_tensor_is_leaf(t);
  return DT_OK;
}

/* Sequential(Linear, LayerNorm, Linear): the plan names only the first Linear, so the others
 * stay local under parallelize_module. */
static dt_status build(dt_module **out) {
  dt_module *parts[3] = {NULL};
  RANK_OK(dt_nn_linear(IN, HIDDEN, true, 1, &parts[0]));
  RANK_OK(dt_nn_layer_norm(HIDDEN, 1e-5, &parts[1]));
  RANK_OK(dt_nn_linear(HIDDEN, OUT, true, 2, &parts[2]));
  return dt_nn_sequential(3, parts, out);
}

static dt_status grad_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  for (int wrapper = -1; wrapper < 3; wrapper++) {
    dt_module *m = NULL;
    RANK_OK(build(&m));
    dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}}};
    if (wrapper == 0) RANK_OK(dt_parallel_tp_module(m, mesh, &plan, NULL));
    if (wrapper == 1) RANK_OK(dt_parallel_fsdp(m, mesh, NULL));
    if (wrapper == 2) RANK_OK(dt_parallel_ddp(m, mesh, 0, NULL));
    grad_count c = {0};
    RANK_OK(dt_module_visit_tensors(m, count_grad, &c));
    RANK_CHECK(c.params == 6, "%d parameters", c.params);
    /* A fresh module: none; after any wrapper: all. */
    RANK_CHECK(c.requiring == (wrapper < 0 ? 0 : 6), "wrapper %d: %d of 6 require grad", wrapper,
               c.requiring);
    RANK_CHECK(c.buffers_requiring == 0, "a buffer requires grad");
    dt_module_destroy(m);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(data_parallel_input, wrappers_agree_on_requires_grad) { SPAWN_OK(2, grad_rank, NULL); }
