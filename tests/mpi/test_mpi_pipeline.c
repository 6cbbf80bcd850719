/*
 * Pipeline parallelism over the MPI backend (one process per pp rank): the transfers between
 * stages are MPI point-to-point. Each process builds the same MLP (seeded), computes the
 * unpipelined reference (the whole batch's mean MSE, its gradients by parameter name), then
 * splits the model into world-size stages (two per rank for interleaved 1F1B), keeps its own
 * and runs GPipe, 1F1B and interleaved 1F1B steps: the loss equals the whole batch's and every
 * parameter's gradient equals the reference's (rtol 1e-5). A second step after zeroing the
 * gradients allocates no new receive buffers.
 *
 * Prints "N passed, N failed" (summed over the ranks) and exits 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "mpi_check.h"
#include "pipeline_mlp.h"

static dt_status mse(dt_tensor *y, dt_tensor *target, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(y, target, DT_LOSS_MEAN, loss);
}

typedef struct grads {
  int n;
  char names[MAX_PARAMS][32];
  double values[MAX_PARAMS][HIDDEN * HIDDEN];
  int64_t numel[MAX_PARAMS];
} grads;

static dt_status grab(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  grads *r = user;
  if (is_buffer || r->n == MAX_PARAMS) return DT_OK;
  dt_tensor *g = NULL;
  dt_status st = dt_tensor_grad(t, &g);
  if (st || !g) return st ? st : DT_ERR_INVALID;
  int i = r->n++;
  snprintf(r->names[i], sizeof r->names[i], "%s", fqn);
  r->numel[i] = dt_tensor_numel(g);
  st = r->numel[i] <= HIDDEN * HIDDEN ? dt_tensor_to_doubles(g, r->values[i], r->numel[i])
                                      : DT_ERR_INVALID;
  dt_tensor_release(g);
  return st;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-5 * fabs(b) + 1e-7; }

static void check_stage(dt_module *stage, const grads *ref, const char *label) {
  static grads got;
  memset(&got, 0, sizeof got);
  CHECK_OK(dt_module_visit_tensors(stage, grab, &got));
  for (int i = 0; i < got.n; i++) {
    int k = 0;
    while (k < ref->n && strcmp(ref->names[k], got.names[i]) != 0) k++;
    CHECK(k < ref->n && ref->numel[k] == got.numel[i], "%s: %s is not a parameter", label,
          got.names[i]);
    if (k == ref->n) continue;
    int bad = 0;
    for (int64_t e = 0; e < got.numel[i]; e++)
      bad += !close_to(got.values[i][e], ref->values[k][e]);
    CHECK(bad == 0, "%s: %s: %d of %lld gradient elements differ", label, got.names[i], bad,
          (long long)got.numel[i]);
  }
}

static void zero_grads(dt_module *stage) {
  for (int c = 0; c < dt_module_child_count(stage); c++) {
    dt_module *child = dt_module_child(stage, c);
    dt_tensor *w = dt_module_parameter(child, "weight"), *b = dt_module_parameter(child, "bias");
    if (w) CHECK_OK(dt_tensor_zero_grad(w, true));
    if (b) CHECK_OK(dt_tensor_zero_grad(b, true));
  }
}

static void run(dt_comm *world, dt_pp_schedule_kind kind, int v, int m, dt_tensor *x, dt_tensor *y,
                double ref_loss, const grads *ref) {
  int p = dt_comm_size(world), rank = dt_comm_rank(world), n_stages = p * v;
  char label[64];
  snprintf(label, sizeof label, "kind %d, %d x %d stages, %d microbatches", (int)kind, p, v, m);
  dt_module *model = NULL, *stages[16] = {0}, *mine[8] = {0};
  CHECK_OK(build_model(&model));
  CHECK_OK(dt_pp_split_model(model, n_stages, NULL, stages));
  dt_module_destroy(model);
  int n_mine = 0;
  for (int s = 0; s < n_stages; s++) {
    if (s % p == rank)
      mine[n_mine++] = stages[s];
    else
      dt_module_destroy(stages[s]);
  }
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  CHECK_OK(dt_pp_schedule_create(kind, p, v, m, &sched));
  CHECK_OK(dt_pipeline_create(world, sched, n_mine, mine, mse, NULL, NULL, &pipe));
  bool last = rank == (n_stages - 1) % p;
  for (int step = 0; step < 2 && pipe; step++) {
    int64_t buffers = dt_pipeline_buffers_allocated(pipe);
    double loss = 0;
    CHECK_OK(dt_pipeline_step(pipe, rank == 0 ? x : NULL, last ? y : NULL, &loss));
    CHECK(close_to(loss, ref_loss), "%s: loss %.9g, whole batch %.9g", label, loss, ref_loss);
    for (int i = 0; i < n_mine; i++) check_stage(mine[i], ref, label);
    if (step == 1) {
      CHECK(dt_pipeline_buffers_allocated(pipe) == buffers, "%s: new buffers in step 2", label);
    }
    CHECK(dt_pipeline_bytes_sent(pipe) > 0 || p == 1, "%s: nothing crossed MPI", label);
    for (int i = 0; i < n_mine; i++) zero_grads(mine[i]);
  }
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  for (int i = 0; i < n_mine; i++) dt_module_destroy(mine[i]);
}

int main(void) {
  dt_comm *world = NULL;
  if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK) {
    fprintf(stderr, "dt_comm_init(mpi) failed: %s\n", dt_last_error());
    return 1;
  }
  mpi_rank_for_messages = dt_comm_rank(world);
  dt_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
  CHECK_OK(dt_randn(2, (int64_t[]){ROWS, IN}, DT_F32, 5, &x));
  CHECK_OK(dt_randn(2, (int64_t[]){ROWS, OUT}, DT_F32, 6, &y));
  /* The reference: the whole model on the whole batch, in this process. */
  static grads ref;
  double ref_loss = 0;
  dt_module *model = NULL;
  CHECK_OK(build_model(&model));
  CHECK_OK(dt_module_forward(model, x, &out));
  CHECK_OK(mse(out, y, NULL, &loss));
  CHECK_OK(dt_tensor_to_doubles(loss, &ref_loss, 1));
  CHECK_OK(dt_backward(loss, NULL));
  CHECK_OK(dt_module_visit_tensors(model, grab, &ref));
  dt_tensor_release(out);
  dt_tensor_release(loss);
  dt_module_destroy(model);
  int p = dt_comm_size(world);
  run(world, DT_PP_GPIPE, 1, 4, x, y, ref_loss, &ref);
  run(world, DT_PP_1F1B, 1, 3, x, y, ref_loss, &ref);
  run(world, DT_PP_1F1B, 1, 8, x, y, ref_loss, &ref);
  run(world, DT_PP_INTERLEAVED_1F1B, 2, 2 * p, x, y, ref_loss, &ref);
  dt_tensor_release(x);
  dt_tensor_release(y);
  int rc = mpi_check_finish(world);
  dt_comm_destroy(world);
  return rc;
}
