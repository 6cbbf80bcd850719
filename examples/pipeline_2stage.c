/* Trains an MLP split into 2 pipeline stages on 2 ranks (threads backend, 1F1B, 4
 * microbatches) and checks each step's loss against the whole model trained on 1 rank. */
#include <dtensor/dtensor.h>
#include <math.h>
#include <stdio.h>

enum { STEPS = 5, MAXP = 8 };

typedef struct params {
  int n;
  dt_tensor *t[MAXP];
} params;

static dt_status collect(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  params *p = user;
  if (is_buffer || p->n == MAXP) return DT_OK;
  p->t[p->n++] = t;
  return dt_tensor_set_requires_grad(t, true); /* module parameters start without grad */
}

static dt_status mse(dt_tensor *out, dt_tensor *target, void *user, dt_tensor **loss) {
  (void)user;
  return dt_mse_loss(out, target, DT_LOSS_MEAN, loss);
}

static dt_status batch(int step, dt_tensor **x, dt_tensor **y) {
  dt_status st = dt_rand(2, (int64_t[]){8, 6}, DT_F32, 100 + step, x);
  return st ? st : dt_rand(2, (int64_t[]){8, 3}, DT_F32, 200 + step, y);
}

static double ref_loss[STEPS];

static dt_status pp_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_module *model = NULL, *stages[2] = {NULL, NULL};
  dt_pp_schedule *sched = NULL;
  dt_pipeline *pipe = NULL;
  dt_optimizer *opt = NULL;
  params p = {0};
  dt_status st = dt_nn_mlp(6, 10, 3, true, true, 7, &model); /* Linear, ReLU, Linear */
  if (!st) st = dt_pp_split_model(model, 2, (int[]){2, 1}, stages);
  if (!st) st = dt_module_visit_tensors(stages[rank], collect, &p);
  if (!st) st = dt_optimizer_create_sgd(p.n, p.t, &(dt_sgd_options){.lr = 0.1}, &opt);
  if (!st) st = dt_pp_schedule_create(DT_PP_1F1B, 2, 1, 4, &sched);
  if (!st) st = dt_pipeline_create(world, sched, 1, &stages[rank], mse, NULL, NULL, &pipe);
  for (int step = 0; !st && step < STEPS; step++) {
    dt_tensor *x = NULL, *y = NULL;
    double loss = 0;
    st = batch(step, &x, &y);
    if (!st) st = dt_optimizer_zero_grad(opt, true);
    if (!st) st = dt_pipeline_step(pipe, rank == 0 ? x : NULL, rank == 1 ? y : NULL, &loss);
    if (!st) st = dt_optimizer_step(opt);
    if (!st && rank == 0) {
      printf("step %d  loss %.6f (1 rank: %.6f)\n", step + 1, loss, ref_loss[step]);
      if (fabs(loss - ref_loss[step]) > 1e-5 * fabs(ref_loss[step])) st = DT_ERR_INTERNAL;
    }
    dt_tensor_release(x);
    dt_tensor_release(y);
  }
  dt_pipeline_destroy(pipe);
  dt_pp_schedule_destroy(sched);
  dt_optimizer_destroy(opt);
  dt_module_destroy(stages[0]);
  dt_module_destroy(stages[1]);
  dt_module_destroy(model);
  return st;
}

static dt_status reference(void) {
  dt_module *model = NULL;
  dt_optimizer *opt = NULL;
  params p = {0};
  dt_status st = dt_nn_mlp(6, 10, 3, true, true, 7, &model);
  if (!st) st = dt_module_visit_tensors(model, collect, &p);
  if (!st) st = dt_optimizer_create_sgd(p.n, p.t, &(dt_sgd_options){.lr = 0.1}, &opt);
  for (int step = 0; !st && step < STEPS; step++) {
    dt_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    st = batch(step, &x, &y);
    if (!st) st = dt_optimizer_zero_grad(opt, true);
    if (!st) st = dt_module_forward(model, x, &out);
    if (!st) st = dt_mse_loss(out, y, DT_LOSS_MEAN, &loss);
    if (!st) st = dt_backward(loss, NULL);
    if (!st) st = dt_optimizer_step(opt);
    if (!st) ref_loss[step] = *(const float *)dt_tensor_data(loss);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_tensor_release(out);
    dt_tensor_release(loss);
  }
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  return st;
}

int main(void) {
  dt_status st = reference();
  if (!st) st = dt_comm_spawn(2, pp_rank, NULL);
  if (st) fprintf(stderr, "error: %s\n", dt_last_error());
  return st != 0;
}
