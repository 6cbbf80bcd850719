/*
 * batch_norm_training on distributed tensors (synchronized batch norm, PyTorch's
 * SyncBatchNorm): a batch (or spatial) dim sharded across ranks keeps its shard and the
 * per-channel mean and variance are those of the whole batch; a channel shard stays local.
 * The output and the gradients of x, weight and bias (a loss sum(y * g) backward) gathered
 * with full_tensor must equal batch_norm_training on the whole tensors, on 1-D and 2-D meshes
 * with uneven shards (one of them empty). Ranks are threads.
 */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "distributed/dist_impl.h"
#include "reference.h"

typedef struct bn_case {
  int mesh_ndim;
  int mesh_shape[2];
  int ndim;
  int64_t shape[3];
  dt_placement x[2];
  bool affine;
} bn_case;

/* loss = sum(batch_norm_training(x, w, b) * g): g makes every output's gradient differ. */
static dt_status loss_of(dt_tensor *x, dt_tensor *w, dt_tensor *b, dt_tensor *g, dt_tensor **y,
                         dt_tensor **loss) {
  dt_tensor *t = NULL;
  dt_status st = dt_batch_norm_training(x, w, b, 1e-5, y);
  if (!st) st = dt_mul(*y, g, &t);
  if (!st) st = dt_sum(t, loss);
  dt_tensor_release(t);
  return st;
}

static dt_status expect_close(const char *what, const bn_case *c, dt_tensor *dist,
                              dt_tensor *whole) {
  dt_tensor *full = NULL;
  RANK_CHECK(dist != NULL, "%s: missing", what);
  RANK_OK(dt_dist_full_tensor(dist, &full));
  int64_t n = dt_tensor_numel(whole);
  RANK_CHECK(dt_tensor_numel(full) == n, "%s: %lld elements, expected %lld", what,
             (long long)dt_tensor_numel(full), (long long)n);
  double *a = ref_values(full), *e = ref_values(whole);
  dt_status st = DT_OK;
  for (int64_t i = 0; i < n && !st; i++) {
    if (!(fabs(a[i] - e[i]) <= 1e-9 * (1 + fabs(e[i])))) {
      char p0[16], p1[16];
      st = dt__error(DT_ERR_INTERNAL,
                     "%s, x placed [%s, %s] on %dx%d: element %lld is %.12g, "
                     "expected %.12g",
                     what, dt_placement_format(c->x[0], p0, sizeof p0),
                     c->mesh_ndim > 1 ? dt_placement_format(c->x[1], p1, sizeof p1) : "-",
                     c->mesh_shape[0], c->mesh_ndim > 1 ? c->mesh_shape[1] : 1, (long long)i, a[i],
                     e[i]);
    }
  }
  free(a);
  free(e);
  dt_tensor_release(full);
  return st;
}

static dt_status grad_of(dt_tensor *t, dt_tensor **g) { return dt_tensor_grad(t, g); }

static dt_status bn_rank(dt_comm *world, void *arg) {
  const bn_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh_shape, NULL, &mesh));
  int64_t channels = c->shape[1];
  dt_tensor *x = ref_random(c->ndim, c->shape, DT_F64, -2, 2, 5);
  dt_tensor *g = ref_random(c->ndim, c->shape, DT_F64, -1, 1, 6);
  dt_tensor *w = c->affine ? ref_random(1, &channels, DT_F64, 0.5, 2, 7) : NULL;
  dt_tensor *b = c->affine ? ref_random(1, &channels, DT_F64, -1, 1, 8) : NULL;
  /* The whole tensors. */
  dt_tensor *y = NULL, *loss = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  RANK_OK(dt_tensor_set_requires_grad(x, true));
  if (w) RANK_OK(dt_tensor_set_requires_grad(w, true));
  if (b) RANK_OK(dt_tensor_set_requires_grad(b, true));
  RANK_OK(loss_of(x, w, b, g, &y, &loss));
  RANK_OK(dt_backward(loss, NULL));
  RANK_OK(grad_of(x, &gx));
  if (w) RANK_OK(grad_of(w, &gw));
  if (b) RANK_OK(grad_of(b, &gb));
  /* Distributed: x as the case places it, the rest replicated. */
  dt_placement rep[2] = {dt_replicate(), dt_replicate()};
  dt_tensor *dx = NULL, *dg = NULL, *dw = NULL, *db = NULL, *dy = NULL, *dloss = NULL;
  dt_tensor *whole[4] = {x, g, w, b}, **made[4] = {&dx, &dg, &dw, &db};
  for (int i = 0; i < 4; i++) {
    if (!whole[i]) continue;
    dt_tensor *d = NULL;
    RANK_OK(dt_detach(whole[i], &d));
    dt_status st = dt_dist_distribute_tensor(mesh, d, c->mesh_ndim, i == 0 ? c->x : rep, made[i]);
    dt_tensor_release(d);
    RANK_OK(st);
    if (i != 1) RANK_OK(dt_tensor_set_requires_grad(*made[i], true));
  }
  RANK_OK(loss_of(dx, dw, db, dg, &dy, &dloss));
  /* The batch stays sharded: nothing gathered x. */
  for (int m = 0; m < c->mesh_ndim; m++) {
    char p[16], q[16];
    dt_placement got = dt_dist_placements(dy)[m];
    RANK_CHECK(dt__placements_equal(1, &got, &c->x[m]),
               "mesh dim %d: the output is placed %s, x was %s", m,
               dt_placement_format(got, p, sizeof p), dt_placement_format(c->x[m], q, sizeof q));
  }
  RANK_OK(expect_close("output", c, dy, y));
  RANK_OK(dt_backward(dloss, NULL));
  dt_tensor *dgx = NULL, *dgw = NULL, *dgb = NULL;
  RANK_OK(grad_of(dx, &dgx));
  RANK_OK(expect_close("grad of x", c, dgx, gx));
  if (w) {
    RANK_OK(grad_of(dw, &dgw));
    RANK_OK(expect_close("grad of weight", c, dgw, gw));
    RANK_OK(grad_of(db, &dgb));
    RANK_OK(expect_close("grad of bias", c, dgb, gb));
  }
  dt_tensor *all[] = {x, g, w, b, y, loss, gx, gw, gb, dx, dg, dw, db, dy, dloss, dgx, dgw, dgb};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run(bn_case c) {
  SPAWN_OK(c.mesh_ndim == 1 ? c.mesh_shape[0] : c.mesh_shape[0] * c.mesh_shape[1], bn_rank, &c);
}

#define S(d) dt_shard(d)
#define R dt_replicate()

Test(sync_batch_norm, batch_sharded_on_3_ranks) {
  run((bn_case){1, {3}, 2, {7, 5}, {S(0)}, true});
  run((bn_case){1, {3}, 3, {7, 4, 3}, {S(0)}, true});
  run((bn_case){1, {3}, 2, {7, 5}, {S(0)}, false});
}

Test(sync_batch_norm, spatial_dim_sharded) {
  run((bn_case){1, {3}, 3, {4, 3, 7}, {S(2)}, true});
  run((bn_case){2, {2, 3}, 3, {5, 4, 7}, {S(0), S(2)}, true});
}

Test(sync_batch_norm, an_empty_batch_shard) {
  /* 3 rows on 4 ranks: the last shard is empty. */
  run((bn_case){1, {4}, 2, {3, 5}, {S(0)}, true});
}

Test(sync_batch_norm, channel_shard_stays_local) {
  run((bn_case){1, {3}, 2, {7, 5}, {S(1)}, true});
  run((bn_case){1, {4}, 3, {6, 5, 2}, {S(1)}, true});
}

Test(sync_batch_norm, two_d_meshes) {
  run((bn_case){2, {2, 2}, 2, {7, 5}, {S(0), S(1)}, true}); /* data x channel parallel */
  run((bn_case){2, {2, 2}, 2, {7, 5}, {S(1), S(0)}, true});
  run((bn_case){2, {2, 2}, 2, {7, 5}, {S(0), S(0)}, true}); /* batch over both */
  run((bn_case){2, {2, 3}, 3, {9, 4, 3}, {S(0), S(0)}, true});
  run((bn_case){2, {2, 3}, 3, {9, 5, 3}, {S(0), R}, true});
}
