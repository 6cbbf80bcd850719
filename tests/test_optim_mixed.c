/* One optimizer over a mix of local and distributed parameters (a tensor-parallel model leaves
 * the modules its plan does not name local, as PyTorch's optimizers take plain tensors beside
 * DTensors): AdamW over a local and a Shard(0) parameter on 2 ranks equals two separate
 * optimizers bitwise and the whole-tensor computation bitwise; a non-finite local gradient on
 * one rank skips the step on every rank; the state dict round-trips through a checkpoint;
 * clip_grad_norm counts a local gradient once against a naive norm; distributed parameters on
 * two meshes are refused. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "fs_helpers.h"

enum { NL = 5, ROWS = 6, COLS = 2, ND = ROWS * COLS, STEPS = 3 };

static double local_grad(int s, int i) { return sin(1.3 * i + 0.7 * s); }
static double dist_grad(int s, int i) { return cos(0.9 * i + 0.4 * s) * (1 + i % 3); }

/* A float32 leaf requiring grad from values: local, or distributed with placement pl. */
static dt_status make_param(dt_mesh *mesh, const dt_placement *pl, int ndim, const int64_t *shape,
                            const float *v, dt_tensor **out) {
  dt_tensor *full = NULL;
  dt_status st = dt_from_data(v, ndim, shape, DT_F32, &full);
  if (!st && mesh) st = dt_dist_distribute_tensor(mesh, full, 1, pl, out);
  if (!st && !mesh) *out = dt_tensor_retain(full);
  dt_tensor_release(full);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  return st;
}

/* Sets p's gradient to the values v, placed like p. */
static dt_status set_grad_values(dt_tensor *p, const float *v) {
  dt_tensor *full = NULL, *g = NULL;
  bool dist = dt_tensor_is_distributed(p);
  int ndim = dist ? dt_dist_ndim(p) : dt_tensor_ndim(p);
  const int64_t *shape = dist ? dt_dist_global_shape(p) : dt_tensor_shape(p);
  dt_status st = dt_from_data(v, ndim, shape, DT_F32, &full);
  if (!st && dist) {
    dt_mesh *mesh = dt_dist_mesh(p);
    st = dt_dist_distribute_tensor(mesh, full, dt_mesh_ndim(mesh), dt_dist_placements(p), &g);
  }
  if (!st) st = dt_tensor_set_grad(p, g ? g : full);
  dt_tensor_release(full);
  dt_tensor_release(g);
  return st;
}

/* The whole tensor's values (gathered when distributed). */
static dt_status values(dt_tensor *t, double *out, int64_t n) {
  dt_tensor *full = NULL;
  dt_status st = dt_tensor_is_distributed(t) ? dt_dist_full_tensor(t, &full) : DT_OK;
  if (!st) st = dt_tensor_to_doubles(full ? full : t, out, n);
  dt_tensor_release(full);
  return st;
}

static dt_status same_bits(dt_tensor *a, dt_tensor *b, int64_t n, const char *what) {
  double x[ND], y[ND];
  RANK_OK(values(a, x, n));
  RANK_OK(values(b, y, n));
  for (int64_t i = 0; i < n; i++)
    RANK_CHECK(x[i] == y[i], "%s[%lld]: %.9g vs %.9g", what, (long long)i, x[i], y[i]);
  return DT_OK;
}

/* The parameters of one setup: [0] local [NL], [1] a [ROWS, COLS] (Shard(0) on the mesh, or
 * local for the whole-tensor reference), from the same values. */
static dt_status make_pair(dt_mesh *mesh, dt_tensor **p) {
  float vl[NL], vd[ND];
  for (int i = 0; i < NL; i++) vl[i] = (float)(0.3 * i - 0.5);
  for (int i = 0; i < ND; i++) vd[i] = (float)(0.1 * i - 0.4);
  dt_placement s0 = dt_shard(0);
  RANK_OK(make_param(NULL, NULL, 1, (int64_t[]){NL}, vl, &p[0]));
  return make_param(mesh, &s0, 2, (int64_t[]){ROWS, COLS}, vd, &p[1]);
}

static dt_status set_step_grads(dt_tensor **p, int s) {
  float gl[NL], gd[ND];
  for (int i = 0; i < NL; i++) gl[i] = (float)local_grad(s, i);
  for (int i = 0; i < ND; i++) gd[i] = (float)dist_grad(s, i);
  RANK_OK(set_grad_values(p[0], gl));
  return set_grad_values(p[1], gd);
}

typedef struct mixed_arg {
  char dir[64];
} mixed_arg;

/* The mixed optimizer's state dict through a checkpoint into a fresh optimizer over fresh
 * parameters (other values, another lr): one more step of each gives the same bits. */
static dt_status round_trip(dt_mesh *mesh, const char *dir, dt_tensor **p, dt_optimizer *opt) {
  static const char *const pnames[2] = {"ln.weight", "fc.weight"};
  dt_tensor *q[2] = {0};
  float zl[NL] = {0}, zd[ND] = {0};
  dt_placement s0 = dt_shard(0);
  RANK_OK(make_param(NULL, NULL, 1, (int64_t[]){NL}, zl, &q[0]));
  RANK_OK(make_param(mesh, &s0, 2, (int64_t[]){ROWS, COLS}, zd, &q[1]));
  dt_optimizer *fresh = NULL;
  RANK_OK(dt_optimizer_create_adamw(2, q, &(dt_adam_options){.lr = 0.5}, &fresh));
  const char *names[32];
  dt_tensor *tensors[32];
  dt_optimizer_state_dict sd = {0}, sd2 = {0};
  RANK_OK(dt_optimizer_get_state_dict(opt, pnames, NULL, &sd));
  RANK_CHECK(sd.count + 2 <= 32, "%d entries", sd.count);
  names[0] = pnames[0], names[1] = pnames[1], tensors[0] = p[0], tensors[1] = p[1];
  for (int e = 0; e < sd.count; e++) names[2 + e] = sd.names[e], tensors[2 + e] = sd.tensors[e];
  RANK_OK(dt_checkpoint_save(dir, mesh, 2 + sd.count, names, tensors));
  RANK_OK(dt_optimizer_get_state_dict(fresh, pnames, NULL, &sd2));
  RANK_CHECK(sd2.count == sd.count, "%d vs %d entries", sd2.count, sd.count);
  tensors[0] = q[0], tensors[1] = q[1];
  for (int e = 0; e < sd2.count; e++) names[2 + e] = sd2.names[e], tensors[2 + e] = sd2.tensors[e];
  RANK_OK(dt_checkpoint_load(dir, 2 + sd2.count, names, tensors));
  RANK_OK(dt_optimizer_load_state_dict(fresh, &sd2));
  RANK_CHECK(dt_optimizer_steps_taken(fresh) == STEPS, "%lld steps",
             (long long)dt_optimizer_steps_taken(fresh));
  for (int k = 0; k < 2; k++) {
    dt_tensor *a = NULL, *b = NULL;
    RANK_OK(dt_optimizer_state(opt, k, "exp_avg_sq", &a, NULL));
    RANK_OK(dt_optimizer_state(fresh, k, "exp_avg_sq", &b, NULL));
    RANK_CHECK(dt_tensor_is_distributed(b) == (k == 1), "state %d placed wrongly", k);
    dt_status st = same_bits(a, b, k ? ND : NL, "loaded exp_avg_sq");
    dt_tensor_release(a);
    dt_tensor_release(b);
    RANK_OK(st);
  }
  RANK_OK(set_step_grads(p, STEPS));
  RANK_OK(set_step_grads(q, STEPS));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_optimizer_step(fresh));
  RANK_OK(same_bits(p[0], q[0], NL, "resumed local"));
  RANK_OK(same_bits(p[1], q[1], ND, "resumed sharded"));
  dt_optimizer_state_dict_clear(&sd);
  dt_optimizer_state_dict_clear(&sd2);
  dt_optimizer_destroy(fresh);
  dt_tensor_release(q[0]);
  dt_tensor_release(q[1]);
  return DT_OK;
}

static dt_status adamw_mixed_rank(dt_comm *world, void *varg) {
  mixed_arg *arg = varg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_adam_options o = {.lr = 0.1, .weight_decay = 0.05};
  /* mixed: one optimizer; split: one per kind; whole: both local, the reference. */
  dt_tensor *mixed[2] = {0}, *split[2] = {0}, *whole[2] = {0};
  RANK_OK(make_pair(mesh, mixed));
  RANK_OK(make_pair(mesh, split));
  RANK_OK(make_pair(NULL, whole));
  dt_optimizer *om = NULL, *os_local = NULL, *os_dist = NULL, *ow = NULL;
  RANK_OK(dt_optimizer_create_adamw(2, mixed, &o, &om));
  RANK_OK(dt_optimizer_create_adamw(1, &split[0], &o, &os_local));
  RANK_OK(dt_optimizer_create_adamw(1, &split[1], &o, &os_dist));
  RANK_OK(dt_optimizer_create_adamw(2, whole, &o, &ow));
  dt_tensor *state = NULL;
  RANK_OK(dt_optimizer_state(om, 0, "exp_avg", &state, NULL));
  RANK_CHECK(!dt_tensor_is_distributed(state), "the local parameter's state is distributed");
  dt_tensor_release(state);
  RANK_OK(dt_optimizer_state(om, 1, "exp_avg", &state, NULL));
  RANK_CHECK(dt_tensor_is_distributed(state), "the sharded parameter's state is local");
  dt_tensor_release(state);
  for (int s = 0; s < STEPS; s++) {
    RANK_OK(set_step_grads(mixed, s));
    RANK_OK(set_step_grads(split, s));
    RANK_OK(set_step_grads(whole, s));
    RANK_OK(dt_optimizer_step(om));
    RANK_OK(dt_optimizer_step(os_local));
    RANK_OK(dt_optimizer_step(os_dist));
    RANK_OK(dt_optimizer_step(ow));
  }
  RANK_OK(same_bits(mixed[0], split[0], NL, "local vs separate optimizer"));
  RANK_OK(same_bits(mixed[1], split[1], ND, "sharded vs separate optimizer"));
  RANK_OK(same_bits(mixed[0], whole[0], NL, "local vs whole tensor"));
  RANK_OK(same_bits(mixed[1], whole[1], ND, "sharded vs whole tensor"));
  /* The step moved the values (the comparison is not of untouched parameters). */
  double before = 0.1 * 3 - 0.4, after[ND];
  RANK_OK(values(mixed[1], after, ND));
  RANK_CHECK(fabs(after[3] - before) > 1e-3, "sharded parameter not updated: %g", after[3]);

  /* A NaN in the local gradient on rank 1 only: every rank skips, nothing changes. */
  double snap_l[NL], snap_d[ND], now_l[NL], now_d[ND];
  RANK_OK(values(mixed[0], snap_l, NL));
  RANK_OK(values(mixed[1], snap_d, ND));
  RANK_OK(set_step_grads(mixed, 7));
  if (dt_comm_rank(world) == 1) {
    float bad[NL] = {0, 1, NAN, 2, 3};
    RANK_OK(set_grad_values(mixed[0], bad));
  }
  bool skipped = false;
  RANK_OK(
      dt_optimizer_step_ex(om, &(dt_optimizer_step_options){.skip_if_nonfinite = true}, &skipped));
  RANK_CHECK(skipped, "rank %d did not skip", dt_comm_rank(world));
  RANK_OK(values(mixed[0], now_l, NL));
  RANK_OK(values(mixed[1], now_d, ND));
  RANK_CHECK(!memcmp(snap_l, now_l, sizeof now_l) && !memcmp(snap_d, now_d, sizeof now_d),
             "a skipped step changed a parameter");

  RANK_OK(round_trip(mesh, arg->dir, mixed, om));
  dt_optimizer *all[] = {om, os_local, os_dist, ow};
  for (int i = 0; i < 4; i++) dt_optimizer_destroy(all[i]);
  for (int k = 0; k < 2; k++) {
    dt_tensor_release(mixed[k]);
    dt_tensor_release(split[k]);
    dt_tensor_release(whole[k]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim_mixed, adamw_local_and_shard0_on_2_ranks) {
  mixed_arg arg;
  snprintf(arg.dir, sizeof arg.dir, "/tmp/dt_optim_mixed_XXXXXX");
  cr_assert(mkdtemp(arg.dir) != NULL);
  SPAWN_OK(2, adamw_mixed_rank, &arg);
  cr_assert_eq(fs_remove_tree(arg.dir), 0, "removing %s: %s", arg.dir, strerror(errno));
}

/* clip_grad_norm over a local [3], a Shard(0) [4, 2] and a Replicate [3] gradient on 2 ranks.
 * Local gradients equal on every rank count once: the naive norm of the three whole
 * gradients, with one all_reduce. Local gradients that differ per rank (g * (rank + 1)) give
 * every rank the same norm, their squares averaged: sqrt(35 + 14 + (9 + 36) / 2), what PyTorch's
 * get_total_norm gives for a plain tensor beside DTensors (it replicates the plain norm). */
static dt_status clip_mixed_rank(dt_comm *world, void *arg) {
  bool differ = *(bool *)arg;
  int r = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  float zl[3] = {0}, zd[8] = {0};
  float gl[3] = {1, 2, 2}, gd[8], gr[3] = {1, 2, 3};
  for (int i = 0; i < 8; i++) gd[i] = 0.5f * (float)i;
  if (differ)
    for (int i = 0; i < 3; i++) gl[i] *= (float)(r + 1);
  dt_placement s0 = dt_shard(0), rep = dt_replicate();
  dt_tensor *p[3] = {0};
  RANK_OK(make_param(NULL, NULL, 1, (int64_t[]){3}, zl, &p[0]));
  RANK_OK(make_param(mesh, &s0, 2, (int64_t[]){4, 2}, zd, &p[1]));
  RANK_OK(make_param(mesh, &rep, 1, (int64_t[]){3}, zl, &p[2]));
  RANK_OK(set_grad_values(p[0], gl));
  RANK_OK(set_grad_values(p[1], gd));
  RANK_OK(set_grad_values(p[2], gr));
  double squares = 0; /* naive: every element of the whole gradients once */
  for (int i = 0; i < 8; i++) squares += (double)gd[i] * gd[i];
  for (int i = 0; i < 3; i++) squares += (double)gr[i] * gr[i];
  if (differ) {
    squares += (9.0 + 36.0) / 2;
  } else {
    for (int i = 0; i < 3; i++) squares += (double)gl[i] * gl[i];
  }
  double want = sqrt(squares), norm = 0, max_norm = differ ? 100.0 : 2.0;
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  RANK_OK(dt_clip_grad_norm(3, p, max_norm, NULL, &norm));
  RANK_OK(dt_comm_ledger_stop(ledger));
  RANK_CHECK(dt_comm_ledger_count(ledger, NULL) == 1, "%lld collectives",
             (long long)dt_comm_ledger_count(ledger, NULL));
  dt_comm_ledger_destroy(ledger);
  RANK_CHECK(fabs(norm - want) <= 1e-12 * want, "rank %d: norm %.15g, want %.15g", r, norm, want);
  double coef = max_norm / (norm + 1e-6);
  coef = coef < 1 ? coef : 1;
  const float *gs[3] = {gl, gd, gr};
  int64_t ns[3] = {3, 8, 3};
  for (int k = 0; k < 3; k++) {
    dt_tensor *g = NULL;
    double got[8];
    RANK_OK(dt_tensor_grad(p[k], &g));
    dt_status st = values(g, got, ns[k]);
    dt_tensor_release(g);
    RANK_OK(st);
    for (int i = 0; i < ns[k]; i++) {
      double w = gs[k][i] * coef;
      RANK_CHECK(fabs(got[i] - w) <= 1e-6 * (1 + fabs(w)), "grad %d[%d] %.9g, want %.9g", k, i,
                 got[i], w);
    }
    dt_tensor_release(p[k]);
  }
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(optim_mixed, clip_grad_norm_counts_local_once) {
  bool differ = false;
  SPAWN_OK(2, clip_mixed_rank, &differ);
  differ = true;
  SPAWN_OK(2, clip_mixed_rank, &differ);
}

/* Distributed parameters on two mesh objects, with a local one: refused by the optimizers and
 * by clip_grad_norm (their collectives need one mesh), naming both parameters. */
static dt_status two_meshes_rank(dt_comm *world, void *arg) {
  (void)arg;
  int w = dt_comm_size(world);
  dt_mesh *m1 = NULL, *m2 = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){w}, NULL, &m1));
  RANK_OK(dt_mesh_create(world, 1, (int[]){w}, NULL, &m2));
  float z[4] = {0};
  dt_placement s0 = dt_shard(0);
  dt_tensor *p[3] = {0};
  RANK_OK(make_param(NULL, NULL, 1, (int64_t[]){4}, z, &p[0]));
  RANK_OK(make_param(m1, &s0, 1, (int64_t[]){4}, z, &p[1]));
  RANK_OK(make_param(m2, &s0, 1, (int64_t[]){4}, z, &p[2]));
  dt_optimizer *opt = NULL;
  dt_status st = dt_optimizer_create_adamw(3, p, NULL, &opt);
  RANK_CHECK(st == DT_ERR_INVALID && !opt, "create_adamw: %s", dt_status_string(st));
  const char *msg = dt_last_error();
  RANK_CHECK(strstr(msg, "dt_optimizer_create_adamw") && strstr(msg, "parameter 2") &&
                 strstr(msg, "parameter 1") && strstr(msg, "one mesh"),
             "message: %s", msg);
  RANK_OK(set_grad_values(p[1], z));
  RANK_OK(set_grad_values(p[2], z));
  st = dt_clip_grad_norm(3, p, 1.0, NULL, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_clip_grad_norm"), "clip: %s",
             dt_last_error());
  /* One mesh with the local parameter is fine. */
  RANK_OK(dt_optimizer_create_sgd(2, p, NULL, &opt));
  dt_optimizer_destroy(opt);
  for (int k = 0; k < 3; k++) dt_tensor_release(p[k]);
  dt_mesh_destroy(m1);
  dt_mesh_destroy(m2);
  return DT_OK;
}

Test(optim_mixed, two_meshes_refused) { SPAWN_OK(2, two_meshes_rank, NULL); }
