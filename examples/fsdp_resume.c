/* Trains an MLP with FSDP on 2 ranks (threads backend), saves a distributed checkpoint with
 * the optimizer's state at step 3, then resumes it on 1 rank (local tensors, another seed)
 * and checks that steps 4..6 give the uninterrupted run's losses.
 *   example_fsdp_resume [CHECKPOINT_DIR]   (default: fsdp_resume_ckpt) */
#include <dtensor/dtensor.h>
#include <math.h>
#include <stdio.h>

enum { STEPS = 6, SAVE_AT = 3, MAXP = 8 };

typedef struct run {
  const char *dir;
  double loss[STEPS]; /* the 2-rank run's losses (rank 0 writes them) */
} run;

typedef struct params {
  int n;
  char fqn[MAXP][64];
  const char *names[MAXP];
  dt_tensor *tensors[MAXP];
} params;

static dt_status collect(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  params *p = user;
  if (is_buffer || p->n == MAXP) return DT_OK;
  snprintf(p->fqn[p->n], sizeof p->fqn[p->n], "%s", fqn); /* fqn is valid during the call */
  p->names[p->n] = p->fqn[p->n];
  p->tensors[p->n++] = t;
  return DT_OK;
}

/* One step on the batch of `step`: x [8, 8] and y [8, 4] from seeds; mesh NULL: local. */
static dt_status train_step(dt_module *model, dt_optimizer *opt, dt_mesh *mesh, int step,
                            double *loss_out) {
  dt_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL, *full = NULL;
  dt_placement rows[] = {dt_shard(0)};
  dt_status st = mesh ? dt_dist_rand(mesh, 2, (int64_t[]){8, 8}, DT_F32, 100 + step, 1, rows, &x)
                      : dt_rand(2, (int64_t[]){8, 8}, DT_F32, 100 + step, &x);
  if (!st)
    st = mesh ? dt_dist_rand(mesh, 2, (int64_t[]){8, 4}, DT_F32, 200 + step, 1, rows, &y)
              : dt_rand(2, (int64_t[]){8, 4}, DT_F32, 200 + step, &y);
  if (!st) st = dt_optimizer_zero_grad(opt, true);
  if (!st) st = dt_module_forward(model, x, &out);
  if (!st) st = dt_mse_loss(out, y, DT_LOSS_MEAN, &loss);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_optimizer_step(opt);
  if (!st) {
    if (mesh)
      st = dt_dist_full_tensor(loss, &full);
    else
      full = dt_tensor_retain(loss);
  }
  if (!st) *loss_out = *(const float *)dt_tensor_data(full);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(out);
  dt_tensor_release(loss);
  dt_tensor_release(full);
  return st;
}

/* Saves the model's parameters and opt's state dict into one checkpoint. */
static dt_status save(const char *dir, dt_mesh *mesh, const params *p, dt_optimizer *opt) {
  dt_optimizer_state_dict sd = {0};
  dt_status st = dt_optimizer_get_state_dict(opt, p->names, NULL, &sd);
  const char *names[64];
  dt_tensor *tensors[64];
  int n = 0;
  for (int i = 0; !st && i < p->n; i++, n++) names[n] = p->names[i], tensors[n] = p->tensors[i];
  for (int i = 0; !st && i < sd.count && n < 64; i++, n++)
    names[n] = sd.names[i], tensors[n] = sd.tensors[i];
  if (!st) st = dt_checkpoint_save(dir, mesh, n, names, tensors);
  dt_optimizer_state_dict_clear(&sd);
  return st;
}

static dt_status train_fsdp(dt_comm *world, void *arg) {
  run *r = arg;
  dt_mesh *mesh = NULL;
  dt_module *model = NULL;
  dt_optimizer *opt = NULL;
  params p = {0};
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"dp"}, &mesh);
  if (!st) st = dt_nn_mlp(8, 16, 4, true, true, /*seed=*/1, &model);
  if (!st) st = dt_parallel_fsdp(model, mesh, NULL);         /* parameters become Shard(0) leaves */
  if (!st) st = dt_module_visit_tensors(model, collect, &p); /* ... so list them after */
  if (!st) st = dt_optimizer_create_adamw(p.n, p.tensors, &(dt_adam_options){.lr = 1e-2}, &opt);
  for (int step = 0; !st && step < STEPS; step++) {
    double loss;
    st = train_step(model, opt, mesh, step, &loss);
    if (!st && dt_comm_rank(world) == 0) r->loss[step] = loss;
    if (!st && step + 1 == SAVE_AT) st = save(r->dir, mesh, &p, opt);
  }
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return st;
}

/* Resumes on 1 rank without a mesh: a model with other weights, loaded in place. */
static dt_status resume_local(const run *r) {
  dt_module *model = NULL;
  dt_optimizer *opt = NULL;
  dt_optimizer_state_dict sd = {0};
  params p = {0};
  dt_status st = dt_nn_mlp(8, 16, 4, true, true, /*seed=*/99, &model);
  if (!st) st = dt_module_visit_tensors(model, collect, &p);
  for (int i = 0; !st && i < p.n; i++) st = dt_tensor_set_requires_grad(p.tensors[i], true);
  if (!st) st = dt_optimizer_create_adamw(p.n, p.tensors, NULL, &opt); /* lr comes from the file */
  if (!st) st = dt_optimizer_get_state_dict(opt, p.names, NULL, &sd);
  if (!st) st = dt_checkpoint_load(r->dir, p.n, p.names, p.tensors);
  if (!st) st = dt_checkpoint_load(r->dir, sd.count, (const char *const *)sd.names, sd.tensors);
  if (!st) st = dt_optimizer_load_state_dict(opt, &sd);
  for (int step = SAVE_AT; !st && step < STEPS; step++) {
    double loss;
    st = train_step(model, opt, NULL, step, &loss);
    if (st) break;
    double diff = fabs(loss - r->loss[step]);
    printf("step %d  loss %.6f (2 ranks: %.6f, |diff| %.1e)\n", step + 1, loss, r->loss[step],
           diff);
    if (diff > 1e-5 * fabs(r->loss[step])) {
      fprintf(stderr, "resumed loss differs\n");
      st = DT_ERR_INTERNAL;
    }
  }
  dt_optimizer_state_dict_clear(&sd);
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  return st;
}

int main(int argc, char **argv) {
  run r = {.dir = argc > 1 ? argv[1] : "fsdp_resume_ckpt"};
  dt_status st = dt_comm_spawn(2, train_fsdp, &r);
  if (!st)
    for (int i = 0; i < STEPS; i++)
      printf("step %d  loss %.6f (FSDP, 2 ranks)\n", i + 1, r.loss[i]);
  if (!st) st = resume_local(&r);
  if (st) fprintf(stderr, "error: %s\n", dt_last_error());
  return st != 0;
}
