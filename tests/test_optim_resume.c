/* Exact resumption (issue 22.3): an MLP trained N steps on 4 fully-sharded ranks saves a
 * distributed checkpoint of its parameters and its optimizer's state dict (every slot, the
 * step counts, the hyperparameters) at step K; a fresh model with other weights and an
 * optimizer created with other hyperparameters loads it on 4 FSDP ranks, on 3, on 2
 * tensor-parallel ranks and on 1 rank and continues: every loss equals the uninterrupted
 * run's (bitwise on the same layout, relative 1e-5 across layouts, whose reductions add in
 * another order), for SGD with momentum, AdamW and Lion, each under a learning-rate schedule
 * (warmup then cosine) whose state travels in the checkpoint too. Resuming without the optimizer's
 * state (the control) gives other losses. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"
#include "fs_helpers.h"

#define IN 8
#define HIDDEN 10 /* uneven over 3 and 4 ranks */
#define OUT 5
#define BATCH 12
#define STEPS 8
#define K 4
#define RTOL 1e-5

typedef enum layout { FSDP4, FSDP3, TP2, LOCAL1 } layout;
static const char *const layout_names[] = {"fsdp on 4", "fsdp on 3", "tp on 2", "1 rank"};
static const int layout_world[] = {4, 3, 2, 1};

typedef struct resume_arg {
  const char *optimizer; /* "sgd", "adamw", "lion" */
  layout l;
  bool save;          /* the uninterrupted run: saves at step K */
  bool load;          /* starts from the checkpoint at step K */
  bool skip_optim_sd; /* the control: loads the parameters only */
  char dir[128];
  double losses[STEPS]; /* rank 0's */
} resume_arg;

typedef struct named {
  int n;
  dt_tensor *t[4];
  char names[4][32];
} named;

static dt_status collect_named(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  named *c = user;
  if (is_buffer || c->n >= 4) return DT_OK;
  snprintf(c->names[c->n], sizeof c->names[0], "%s", fqn);
  c->t[c->n++] = t;
  return DT_OK;
}

/* The optimizer; a loading run asks for other hyperparameters, which the state dict restores. */
static dt_status make_optimizer(const char *name, bool other, dt_tensor *const *w,
                                dt_optimizer **opt) {
  double lr = other ? 0.5 : strcmp(name, "sgd") == 0 ? 0.05 : 1e-2;
  dt_optimizer_hyperparameter h[3] = {{"lr", lr}};
  int n = 1;
  if (strcmp(name, "sgd") == 0) h[n++] = (dt_optimizer_hyperparameter){"momentum", 0.9};
  if (strcmp(name, "sgd") != 0) h[n++] = (dt_optimizer_hyperparameter){"weight_decay", 0.05};
  if (strcmp(name, "lion") == 0) h[n++] = (dt_optimizer_hyperparameter){"beta1", other ? 0.5 : 0.8};
  RANK_OK(dt_optimizer_create(name, 4, w, n, h, opt));
  /* A schedule: warmup then cosine to a floor; the loading run attaches another, which the
   * checkpoint's replaces. */
  dt_lr_schedule s = {DT_LR_DECAY_COSINE, lr, lr / 10, 2, STEPS, 0};
  dt_lr_schedule wrong = {DT_LR_DECAY_LINEAR, 0.5, 0, 0, 100, 0};
  return dt_optimizer_set_lr_schedule(*opt, other ? &wrong : &s);
}

static dt_status batch(dt_mesh *mesh, layout l, int s, dt_tensor **x, dt_tensor **y) {
  dt_tensor *X = NULL, *Y = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){BATCH, IN}, DT_F32, 100 + (uint64_t)s, &X));
  RANK_OK(dt_randn(2, (int64_t[]){BATCH, OUT}, DT_F32, 200 + (uint64_t)s, &Y));
  if (l == FSDP4 || l == FSDP3) {
    int ranks = dt_mesh_size(mesh, 0), c = dt_mesh_coordinate(mesh, 0);
    *x = narrow_rows(X, c * (BATCH / ranks), BATCH / ranks);
    RANK_OK(dt_dist_distribute_tensor(mesh, Y, 1, (dt_placement[]){dt_shard(0)}, y));
    dt_tensor_release(X);
    dt_tensor_release(Y);
  } else {
    *x = X;
    *y = Y;
  }
  return DT_OK;
}

/* The checkpoint's names and tensors: the parameters under their FQNs, then the optimizer's
 * state dict. */
static dt_status checkpoint_list(named *w, dt_optimizer_state_dict *sd, const char **names,
                                 dt_tensor **tensors) {
  for (int i = 0; i < 4; i++) {
    names[i] = w->names[i];
    tensors[i] = w->t[i];
  }
  for (int e = 0; e < sd->count; e++) {
    names[4 + e] = sd->names[e];
    tensors[4 + e] = sd->tensors[e];
  }
  return DT_OK;
}

static dt_status resume_rank(dt_comm *world, void *varg) {
  resume_arg *arg = varg;
  layout l = arg->l;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_module *model = NULL;
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, arg->load ? 2 : 1, &model));
  if (l == TP2) {
    dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
    RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
  } else if (l != LOCAL1) {
    RANK_OK(dt_parallel_fsdp(model, mesh, NULL));
  }
  named w = {0};
  RANK_OK(dt_module_visit_tensors(model, collect_named, &w));
  RANK_CHECK(w.n == 4, "%d parameters", w.n);
  /* The wrappers make every parameter require grad; a local module's are made so here. */
  for (int i = 0; i < 4; i++) {
    RANK_CHECK(l == LOCAL1 || dt_tensor_requires_grad(w.t[i]), "%s", w.names[i]);
    RANK_OK(dt_tensor_set_requires_grad(w.t[i], true));
  }
  dt_optimizer *opt = NULL;
  RANK_OK(make_optimizer(arg->optimizer, arg->load, w.t, &opt));
  const char *pnames[4] = {w.names[0], w.names[1], w.names[2], w.names[3]};
  const char *names[32];
  dt_tensor *tensors[32];
  int first = 0;
  if (arg->load) {
    dt_optimizer_state_dict sd = {0};
    RANK_OK(dt_optimizer_get_state_dict(opt, pnames, NULL, &sd));
    RANK_CHECK(sd.count + 4 <= 32, "%d entries", sd.count);
    RANK_OK(checkpoint_list(&w, &sd, names, tensors));
    int count = arg->skip_optim_sd ? 4 : 4 + sd.count;
    RANK_OK(dt_checkpoint_load(arg->dir, count, names, tensors));
    if (!arg->skip_optim_sd) RANK_OK(dt_optimizer_load_state_dict(opt, &sd));
    dt_optimizer_state_dict_clear(&sd);
    first = K;
  }
  for (int s = first; s < STEPS; s++) {
    if (arg->save && s == K) {
      dt_optimizer_state_dict sd = {0};
      RANK_OK(dt_optimizer_get_state_dict(opt, pnames, NULL, &sd));
      RANK_OK(checkpoint_list(&w, &sd, names, tensors));
      RANK_OK(dt_checkpoint_save(arg->dir, mesh, 4 + sd.count, names, tensors));
      dt_optimizer_state_dict_clear(&sd);
    }
    dt_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    RANK_OK(batch(mesh, l, s, &x, &y));
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    RANK_OK(dt_module_forward(model, x, &out));
    RANK_OK(dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    RANK_OK(dt_backward(loss, NULL));
    bool prev = dt_grad_mode_set(false);
    dt_tensor *full = NULL;
    if (dt_tensor_is_distributed(loss)) RANK_OK(dt_dist_full_tensor(loss, &full));
    RANK_OK(dt_tensor_to_doubles(full ? full : loss, &arg->losses[s], 1));
    dt_grad_mode_set(prev);
    dt_tensor_release(full);
    RANK_OK(dt_optimizer_step(opt));
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_tensor_release(out);
    dt_tensor_release(loss);
  }
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

/* Rank 0's losses are what the test reads: the other ranks write to their own copy. */
static dt_status resume_entry(dt_comm *world, void *varg) {
  resume_arg mine = *(resume_arg *)varg;
  dt_status st = resume_rank(world, &mine);
  if (!st && dt_comm_rank(world) == 0)
    memcpy(((resume_arg *)varg)->losses, mine.losses, sizeof mine.losses);
  return st;
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

static void resume_everywhere(const char *optimizer) {
  resume_arg base = {.optimizer = optimizer, .l = FSDP4, .save = true};
  snprintf(base.dir, sizeof base.dir, "/tmp/dt_optim_resume_XXXXXX");
  cr_assert(mkdtemp(base.dir) != NULL);
  cr_assert_eq(dt_comm_spawn(4, resume_entry, &base), DT_OK, "%s uninterrupted: %s", optimizer,
               dt_last_error());
  for (int l = FSDP4; l <= LOCAL1; l++) {
    resume_arg r = {.optimizer = optimizer, .l = (layout)l, .load = true};
    memcpy(r.dir, base.dir, sizeof r.dir);
    cr_assert_eq(dt_comm_spawn(layout_world[l], resume_entry, &r), DT_OK, "%s resumed %s: %s",
                 optimizer, layout_names[l], dt_last_error());
    double worst = 0;
    for (int s = K; s < STEPS; s++) {
      double d = fabs(r.losses[s] - base.losses[s]) / fabs(base.losses[s]);
      worst = d > worst ? d : worst;
      if (l == FSDP4) {
        cr_expect_eq(r.losses[s], base.losses[s],
                     "%s resumed %s, step %d: loss %.9g, "
                     "uninterrupted %.9g",
                     optimizer, layout_names[l], s + 1, r.losses[s], base.losses[s]);
      } else {
        cr_expect(d <= RTOL, "%s resumed %s, step %d: loss %.9g, uninterrupted %.9g (rel %.2g)",
                  optimizer, layout_names[l], s + 1, r.losses[s], base.losses[s], d);
      }
    }
    cr_log_info("%s resumed at step %d %s: largest relative loss difference %.2g", optimizer, K,
                layout_names[l], worst);
  }
  /* The control: without the optimizer's state the continuation differs. */
  resume_arg c = {.optimizer = optimizer, .l = LOCAL1, .load = true, .skip_optim_sd = true};
  memcpy(c.dir, base.dir, sizeof c.dir);
  cr_assert_eq(dt_comm_spawn(1, resume_entry, &c), DT_OK, "%s", dt_last_error());
  double worst = 0;
  for (int s = K + 1; s < STEPS; s++) {
    double d = fabs(c.losses[s] - base.losses[s]) / fabs(base.losses[s]);
    worst = d > worst ? d : worst;
  }
  cr_expect_gt(worst, 1e-3, "%s: resuming without the optimizer state should differ (%.2g)",
               optimizer, worst);
  remove_dir(base.dir);
}

Test(optim_resume, sgd_momentum, .timeout = 60) { resume_everywhere("sgd"); }
Test(optim_resume, adamw, .timeout = 60) { resume_everywhere("adamw"); }
Test(optim_resume, lion, .timeout = 60) { resume_everywhere("lion"); }
