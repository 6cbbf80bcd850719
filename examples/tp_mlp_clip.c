/* A tensor-parallel MLP on 2 rank threads: a local (unsharded) LayerNorm, then a colwise
 * linear (weight and bias Shard(0)), GELU, and a rowwise linear (weight Shard(1), bias
 * Replicate); one AdamW over all six parameters, local and distributed, with
 * dt_clip_grad_norm before each step. The same program runs on 1 rank with plain tensors;
 * every step's loss and gradient norm and every final parameter must agree (1e-5 relative).
 * Exits 0 when they do, 1 otherwise (ctest example_tp_mlp_clip). */
#include <dtensor/dtensor.h>
#include <math.h>
#include <stdio.h>

enum { N = 6, D = 8, F = 12, O = 4, NP = 6, STEPS = 5, RANKS = 2 };
static const int64_t SHAPES[NP][2] = {{D}, {D}, {F, D}, {F}, {O, F}, {O}};
static const int NDIMS[NP] = {1, 1, 2, 1, 2, 1};

typedef struct result {
  double loss[STEPS], norm[STEPS];
  double params[NP][F * D]; /* every parameter whole, after the last step */
} result;

static result one_rank, two_ranks;

#define TRY(call)                                                                                  \
  do {                                                                                             \
    if (!st) st = (call);                                                                          \
  } while (0)

/* Runs STEPS steps; mesh NULL: plain tensors on this thread. */
static dt_status train(dt_mesh *mesh, result *res) {
  /* Placements of the parameters on the mesh; the LayerNorm's two (index 0, 1) stay local. */
  const dt_placement place[NP] = {dt_replicate(), dt_replicate(), dt_shard(0),
                                  dt_shard(0),    dt_shard(1),    dt_replicate()};
  dt_tensor *p[NP] = {0}, *x = NULL, *y = NULL;
  dt_optimizer *opt = NULL;
  dt_status st = DT_OK;
  for (int i = 0; i < NP; i++) {
    dt_tensor *r = NULL, *full = NULL;
    if (i == 0)
      TRY(dt_ones(1, SHAPES[i], DT_F32, &full));
    else {
      TRY(dt_randn(NDIMS[i], SHAPES[i], DT_F32, 20 + i, &r));
      TRY(dt_mul_scalar(r, 0.3, &full));
    }
    if (mesh && i >= 2)
      TRY(dt_dist_distribute_tensor(mesh, full, 1, &place[i], &p[i]));
    else if (!st)
      p[i] = dt_tensor_retain(full);
    TRY(dt_tensor_set_requires_grad(p[i], true));
    dt_tensor_release(r);
    dt_tensor_release(full);
  }
  /* The same batch on every rank (local), the target Replicate on the mesh. */
  TRY(dt_randn(2, (int64_t[]){N, D}, DT_F32, 1, &x));
  if (mesh)
    TRY(dt_dist_randn(mesh, 2, (int64_t[]){N, O}, DT_F32, 2, 1, (dt_placement[]){dt_replicate()},
                      &y));
  else
    TRY(dt_randn(2, (int64_t[]){N, O}, DT_F32, 2, &y));
  TRY(dt_optimizer_create_adamw(NP, p, &(dt_adam_options){.lr = 5e-2}, &opt));
  for (int step = 0; !st && step < STEPS; step++) {
    dt_tensor *h = NULL, *hd = NULL, *u = NULL, *g = NULL, *out = NULL, *loss = NULL, *lf = NULL;
    TRY(dt_optimizer_zero_grad(opt, true));
    TRY(dt_layer_norm(x, 1, (int64_t[]){D}, p[0], p[1], 1e-5, &h));
    /* The local activation enters the TP region as Replicate (ColwiseParallel's input). */
    if (mesh)
      TRY(dt_dist_from_local(mesh, h, 1, (dt_placement[]){dt_replicate()}, NULL, &hd));
    else if (!st)
      hd = dt_tensor_retain(h);
    TRY(dt_linear(hd, p[2], p[3], &u)); /* Shard(1) on the mesh */
    TRY(dt_gelu(u, &g));
    TRY(dt_linear(g, p[4], p[5], &out)); /* Partial(sum) + Replicate bias on the mesh */
    TRY(dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    TRY(dt_backward(loss, NULL));
    TRY(dt_clip_grad_norm(NP, p, 0.5, NULL, &res->norm[step]));
    TRY(dt_optimizer_step(opt));
    if (mesh)
      TRY(dt_dist_full_tensor(loss, &lf));
    else if (!st)
      lf = dt_tensor_retain(loss);
    TRY(dt_tensor_to_doubles(lf, &res->loss[step], 1));
    dt_tensor *all[] = {h, hd, u, g, out, loss, lf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  }
  for (int i = 0; i < NP; i++) {
    dt_tensor *full = NULL;
    if (mesh && i >= 2)
      TRY(dt_dist_full_tensor(p[i], &full));
    else if (!st)
      full = dt_tensor_retain(p[i]);
    TRY(dt_tensor_to_doubles(full, res->params[i], F * D));
    dt_tensor_release(full);
    dt_tensor_release(p[i]);
  }
  dt_optimizer_destroy(opt);
  dt_tensor_release(x);
  dt_tensor_release(y);
  return st;
}

static dt_status rank_main(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  result mine = {0};
  dt_status st = dt_mesh_create(world, 1, (int[]){RANKS}, (const char *[]){"tp"}, &mesh);
  TRY(train(mesh, &mine));
  if (!st && dt_comm_rank(world) == 0) two_ranks = mine;
  dt_mesh_destroy(mesh);
  return st;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-5 * fmax(1.0, fabs(b)); }

int main(void) {
  if (train(NULL, &one_rank) || dt_comm_spawn(RANKS, rank_main, NULL)) {
    fprintf(stderr, "error: %s\n", dt_last_error());
    return 1;
  }
  int ok = 1;
  for (int s = 0; s < STEPS; s++) {
    printf("step %d  loss %.6f (1 rank %.6f)  grad norm %.6f (1 rank %.6f)\n", s + 1,
           two_ranks.loss[s], one_rank.loss[s], two_ranks.norm[s], one_rank.norm[s]);
    ok &= close_to(two_ranks.loss[s], one_rank.loss[s]) &&
          close_to(two_ranks.norm[s], one_rank.norm[s]);
  }
  ok &= one_rank.norm[0] > 0.5; /* the clip did scale */
  ok &= one_rank.loss[STEPS - 1] < one_rank.loss[0];
  double max_diff = 0;
  for (int i = 0; i < NP; i++)
    for (int j = 0; j < SHAPES[i][0] * (NDIMS[i] == 2 ? SHAPES[i][1] : 1); j++) {
      max_diff = fmax(max_diff, fabs(two_ranks.params[i][j] - one_rank.params[i][j]));
      ok &= close_to(two_ranks.params[i][j], one_rank.params[i][j]);
    }
  printf("max |param(2 ranks) - param(1 rank)| = %.3g\n", max_diff);
  if (!ok) fprintf(stderr, "FAILED\n");
  return ok ? 0 : 1;
}
