/* Autograd of the distributed conversions and autograd's safety (threads backend, 2 ranks):
 * the backward of redistribute, from_local, to_local, full_tensor and distribute_tensor
 * follows PyTorch's DTensor (gradients go back to the input's placements; a Partial input's
 * gradient is Replicate); a backward that one rank skips fails on its peer instead of hanging;
 * a 300,000-node chain is freed without recursion on a rank thread; a 100-layer MLP trained
 * for 1,000 iterations leaves no node, autograd state or allocation behind. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <time.h>

#include "comm_helpers.h"
/* Private header: no autograd node outlives its graph: dt__autograd_live counts live nodes. */
#include "ops/op_impl.h"

#define RANKS 2

/* X is 5x3 (uneven over 2 ranks: shards of 3 and 2 rows). */
static const double X[15] = {1, -2, 3, 0.5, 4, -1, 2, 2, -3, 1.5, -0.5, 6, -4, 1, 2.5};

static dt_status x_full(dt_tensor **out) {
  return dt_from_data(X, 2, (int64_t[]){5, 3}, DT_F64, out);
}

static dt_placement shard0(void) { return (dt_placement){DT_SHARD, 0, DT_REDUCE_SUM, 0}; }

/* loss = sum(t * t), whose gradient is 2 t. */
static dt_status square_sum(dt_tensor *t, dt_tensor **loss) {
  dt_tensor *sq = NULL;
  dt_status st = dt_mul(t, t, &sq);
  if (!st) st = dt_sum(sq, loss);
  dt_tensor_release(sq);
  return st;
}

/* Checks t (gathered first when distributed) against scale * X[i] (or expect when given). */
static dt_status check_values(const char *what, dt_tensor *t, double scale, const double *expect,
                              int64_t n) {
  RANK_CHECK(t != NULL, "%s: no gradient", what);
  dt_tensor *full = NULL;
  if (dt_tensor_is_distributed(t)) {
    RANK_OK(dt_dist_full_tensor(t, &full));
  } else {
    full = dt_tensor_retain(t);
  }
  double got[64];
  RANK_CHECK(dt_tensor_numel(full) == n, "%s: %lld elements, expected %lld", what,
             (long long)dt_tensor_numel(full), (long long)n);
  dt_status st = dt_tensor_to_doubles(full, got, 64);
  dt_tensor_release(full);
  RANK_OK(st);
  for (int64_t i = 0; i < n; i++) {
    double want = expect ? expect[i] : scale * X[i];
    RANK_CHECK(fabs(got[i] - want) <= 1e-12 * (1 + fabs(want)), "%s[%lld] = %.17g, expected %.17g",
               what, (long long)i, got[i], want);
  }
  return DT_OK;
}

static dt_status check_placement(const char *what, dt_tensor *t, dt_placement_kind kind, int dim) {
  RANK_CHECK(dt_tensor_is_distributed(t), "%s: gradient is not distributed", what);
  const dt_placement *p = dt_dist_placements(t);
  RANK_CHECK(p[0].kind == kind && (kind != DT_SHARD || p[0].dim == dim),
             "%s: placement kind %d dim %d, expected kind %d dim %d", what, (int)p[0].kind,
             p[0].dim, (int)kind, dim);
  return DT_OK;
}

/* A leaf distributed X with placement p (distributed before it requires grad: a leaf). */
static dt_status dist_leaf(dt_mesh *mesh, dt_placement p, dt_tensor **out) {
  dt_tensor *full = NULL;
  dt_status st = x_full(&full);
  if (!st) st = dt_dist_distribute_tensor(mesh, full, 1, &p, out);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  dt_tensor_release(full);
  return st;
}

/* A leaf Partial(sum) tensor whose rank r holds (r + 1) X: its value is 3 X on 2 ranks. */
static dt_status partial_leaf(dt_mesh *mesh, int rank, dt_tensor **out) {
  dt_tensor *full = NULL, *local = NULL;
  dt_status st = x_full(&full);
  if (!st) st = dt_mul_scalar(full, rank + 1.0, &local);
  dt_placement p = dt_partial(DT_REDUCE_SUM);
  if (!st) st = dt_dist_from_local(mesh, local, 1, &p, NULL, out);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  dt_tensor_release(full);
  dt_tensor_release(local);
  return st;
}

/* Backward of loss, then the gradient of t. */
static dt_status backward_grad(dt_tensor *loss, dt_tensor *t, dt_tensor **grad) {
  dt_status st = dt_backward(loss, NULL);
  if (!st) st = dt_tensor_grad(t, grad);
  return st;
}

static dt_status rank_redistribute(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *y = NULL, *loss = NULL, *g = NULL;
  dt_placement r = dt_replicate();
  /* Shard(0) -> Replicate: the gradient comes back Shard(0). */
  RANK_OK(dist_leaf(mesh, shard0(), &x));
  RANK_OK(dt_dist_redistribute(x, 1, &r, &y));
  RANK_CHECK(dt_tensor_requires_grad(y) && !dt_tensor_is_leaf(y), "redistribute not recorded");
  RANK_OK(square_sum(y, &loss));
  RANK_OK(backward_grad(loss, x, &g));
  RANK_OK(check_placement("S(0)->R: grad", g, DT_SHARD, 0));
  RANK_OK(check_values("S(0)->R: grad", g, 2.0, NULL, 15));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  /* Partial -> Replicate: the gradient of a Partial input comes back Replicate. */
  RANK_OK(partial_leaf(mesh, dt_comm_rank(world), &x));
  RANK_OK(dt_dist_redistribute(x, 1, &r, &y));
  RANK_OK(square_sum(y, &loss)); /* y = 3 X: the gradient is 6 X */
  RANK_OK(backward_grad(loss, x, &g));
  RANK_OK(check_placement("P->R: grad", g, DT_REPLICATE, 0));
  RANK_OK(check_values("P->R: grad", g, 6.0, NULL, 15));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static dt_status rank_from_local(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  /* Shard(0): rank r's 2x3 block of the first 4 rows of X; its gradient is 2 * block. */
  dt_tensor *local = NULL, *d = NULL, *loss = NULL, *g = NULL;
  RANK_OK(dt_from_data(X + 6 * rank, 2, (int64_t[]){2, 3}, DT_F64, &local));
  RANK_OK(dt_tensor_set_requires_grad(local, true));
  dt_placement s = shard0();
  RANK_OK(dt_dist_from_local(mesh, local, 1, &s, NULL, &d));
  RANK_CHECK(dt_tensor_requires_grad(d), "from_local not recorded");
  RANK_OK(square_sum(d, &loss));
  RANK_OK(backward_grad(loss, local, &g));
  RANK_CHECK(g && !dt_tensor_is_distributed(g), "from_local: the local tensor's gradient is %s",
             g ? "distributed" : "missing");
  double want[6];
  for (int i = 0; i < 6; i++) want[i] = 2 * X[6 * rank + i];
  RANK_OK(check_values("from_local S(0): grad", g, 0, want, 6));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(d);
  dt_tensor_release(local);
  /* Replicate weight, sharded activations: the weight's gradient is Partial until
   * from_local's backward needs it Replicate; then every rank gets the full sum
   * X^T @ ones(5, 2): grad_w[i][j] = sum over rows of X[., i]. */
  dt_tensor *w = NULL, *dw = NULL, *x = NULL, *full = NULL, *y = NULL;
  RANK_OK(dt_full(2, (int64_t[]){3, 2}, 0.5, DT_F64, &w));
  RANK_OK(dt_tensor_set_requires_grad(w, true));
  dt_placement r = dt_replicate();
  RANK_OK(dt_dist_from_local(mesh, w, 1, &r, NULL, &dw));
  RANK_OK(x_full(&full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, &s, &x));
  RANK_OK(dt_mm(x, dw, &y));
  RANK_OK(dt_sum(y, &loss));
  RANK_OK(backward_grad(loss, w, &g));
  double cols[3] = {0, 0, 0};
  for (int i = 0; i < 15; i++) cols[i % 3] += X[i];
  double want_w[6] = {cols[0], cols[0], cols[1], cols[1], cols[2], cols[2]};
  RANK_OK(check_values("from_local R weight: grad", g, 0, want_w, 6));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_tensor_release(full);
  dt_tensor_release(dw);
  dt_tensor_release(w);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static dt_status rank_to_local(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  /* Each rank's loss is its own shard's sum of squares (a local loss, a local backward):
   * the gradient is from_local'd with the forward's Shard(0) and uneven global shape. */
  dt_tensor *x = NULL, *l = NULL, *loss = NULL, *g = NULL;
  RANK_OK(dist_leaf(mesh, shard0(), &x));
  RANK_OK(dt_dist_to_local(x, &l));
  RANK_CHECK(dt_tensor_requires_grad(l) && !dt_tensor_is_distributed(l), "to_local not recorded");
  RANK_OK(square_sum(l, &loss));
  RANK_CHECK(!dt_tensor_is_distributed(loss), "a local loss expected");
  RANK_OK(backward_grad(loss, x, &g));
  RANK_OK(check_placement("to_local: grad", g, DT_SHARD, 0));
  RANK_OK(check_values("to_local: grad", g, 2.0, NULL, 15));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(l);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static dt_status rank_full_tensor(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *f = NULL, *loss = NULL, *g = NULL;
  /* Shard(0): the local full gradient is cut back into Shard(0) blocks. */
  RANK_OK(dist_leaf(mesh, shard0(), &x));
  RANK_OK(dt_dist_full_tensor(x, &f));
  RANK_CHECK(dt_tensor_requires_grad(f) && !dt_tensor_is_distributed(f),
             "full_tensor not recorded");
  RANK_OK(square_sum(f, &loss));
  RANK_OK(backward_grad(loss, x, &g));
  RANK_OK(check_placement("full_tensor S(0): grad", g, DT_SHARD, 0));
  RANK_OK(check_values("full_tensor S(0): grad", g, 2.0, NULL, 15));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(f);
  dt_tensor_release(x);
  /* Partial: full_tensor sums (3 X), the gradient (6 X) comes back Replicate. */
  RANK_OK(partial_leaf(mesh, dt_comm_rank(world), &x));
  RANK_OK(dt_dist_full_tensor(x, &f));
  RANK_OK(square_sum(f, &loss));
  RANK_OK(backward_grad(loss, x, &g));
  RANK_OK(check_placement("full_tensor P: grad", g, DT_REPLICATE, 0));
  RANK_OK(check_values("full_tensor P: grad", g, 6.0, NULL, 15));
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(f);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

/* distribute_tensor makes a new leaf (PyTorch's behaviour): it requires grad when the source
 * does, takes the gradient itself (distributed, with its placements), and the source gets
 * none. */
static dt_status rank_distribute_tensor(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *full = NULL, *d = NULL, *loss = NULL, *g = NULL, *gfull = NULL;
  RANK_OK(x_full(&full));
  RANK_OK(dt_tensor_set_requires_grad(full, true));
  dt_placement s = shard0();
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, &s, &d));
  RANK_CHECK(dt_tensor_requires_grad(d) && dt_tensor_is_leaf(d),
             "distribute_tensor: the result is not a leaf requiring grad");
  RANK_OK(square_sum(d, &loss));
  RANK_OK(backward_grad(loss, d, &g));
  RANK_CHECK(g && dt_tensor_is_distributed(g), "distribute_tensor: the leaf's gradient is %s",
             g ? "local" : "missing");
  RANK_OK(dt_dist_full_tensor(g, &gfull));
  RANK_OK(check_values("distribute_tensor: grad", gfull, 2.0, NULL, 15));
  dt_tensor *source_grad = NULL;
  RANK_OK(dt_tensor_grad(full, &source_grad));
  RANK_CHECK(!source_grad, "distribute_tensor: the local source got a gradient");
  dt_tensor_release(gfull);
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(d);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_dist_conversions, redistribute_backward) { SPAWN_OK(RANKS, rank_redistribute, NULL); }
Test(autograd_dist_conversions, from_local_backward) { SPAWN_OK(RANKS, rank_from_local, NULL); }
Test(autograd_dist_conversions, to_local_backward) { SPAWN_OK(RANKS, rank_to_local, NULL); }
Test(autograd_dist_conversions, full_tensor_backward) { SPAWN_OK(RANKS, rank_full_tensor, NULL); }
Test(autograd_dist_conversions, distribute_tensor_backward) {
  SPAWN_OK(RANKS, rank_distribute_tensor, NULL);
}

/* ---- Safety ------------------------------------------------------------------------------ */

typedef struct skip_arg {
  atomic_int rank0_done;
  dt_status rank0_status;
  double rank0_seconds;
  bool rank0_grad_untouched;
} skip_arg;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 runs a backward that communicates (the backward of Replicate -> Shard(0) is an
 * all-gather); rank 1 does not, but stays alive until rank 0 is done (a peer that skipped
 * the backward, not a dead one). */
static dt_status rank_skip_backward(dt_comm *world, void *varg) {
  skip_arg *arg = varg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *y = NULL, *loss = NULL, *g = NULL;
  dt_placement s = shard0();
  RANK_OK(dist_leaf(mesh, dt_replicate(), &x));
  RANK_OK(dt_dist_redistribute(x, 1, &s, &y)); /* R -> S(0): no communication */
  RANK_OK(square_sum(y, &loss));
  if (dt_comm_rank(world) == 0) {
    double start = now_seconds();
    arg->rank0_status = dt_backward(loss, NULL);
    arg->rank0_seconds = now_seconds() - start;
    arg->rank0_grad_untouched = dt_tensor_grad(x, &g) == DT_OK && g == NULL;
    atomic_store(&arg->rank0_done, 1);
  } else {
    double start = now_seconds();
    while (!atomic_load(&arg->rank0_done) && now_seconds() - start < 30) {
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
  }
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_dist_conversions, backward_skipped_by_a_peer_fails_instead_of_hanging) {
  setenv("DT_COMM_TIMEOUT_MS", "300", 1); /* this test's process only */
  skip_arg arg = {0};
  dt_comm_spawn(RANKS, rank_skip_backward, &arg); /* the failed collective may fail the run */
  cr_assert(atomic_load(&arg.rank0_done), "rank 0 did not finish its backward");
  cr_assert(arg.rank0_status == DT_ERR_TIMEOUT || arg.rank0_status == DT_ERR_ABORTED ||
                arg.rank0_status == DT_ERR_MISMATCH,
            "rank 0's backward returned %s", dt_status_string(arg.rank0_status));
  cr_assert_lt(arg.rank0_seconds, 10.0, "rank 0 waited %.1f s", arg.rank0_seconds);
  cr_assert(arg.rank0_grad_untouched, "a failed backward must not change .grad");
}

/* A chain of 300,000 recorded ops freed by releasing its end, then a backward through a
 * chain of 30,000: on a rank thread (8 MiB of stack), freeing must not recurse. (The
 * recursive release this replaced survived 100,000 nodes in a Debug build, ~80 bytes of
 * stack per node, and crashed at 300,000.) */
static dt_status rank_long_chain(dt_comm *world, void *arg) {
  (void)world;
  (void)arg;
  enum { LENGTH = 300000 };
  int64_t before = dt_autograd_live_nodes();
  dt_tensor *x = NULL, *cur = NULL, *loss = NULL, *g = NULL;
  RANK_OK(dt_full(1, (int64_t[]){1}, 3.0, DT_F64, &x));
  RANK_OK(dt_tensor_set_requires_grad(x, true));
  cur = dt_tensor_retain(x);
  for (int i = 0; i < LENGTH; i++) {
    dt_tensor *next = NULL;
    dt_status st = dt_add_scalar(cur, 1.0, &next);
    dt_tensor_release(cur);
    cur = next;
    RANK_OK(st);
  }
  RANK_CHECK(dt_autograd_live_nodes() == before + LENGTH, "%lld nodes alive, expected %lld",
             (long long)dt_autograd_live_nodes(), (long long)(before + LENGTH));
  /* Without a backward: the whole graph goes with its last tensor. */
  dt_tensor_release(cur);
  RANK_CHECK(dt_autograd_live_nodes() == before, "%lld nodes alive after release, expected %lld",
             (long long)dt_autograd_live_nodes(), (long long)before);
  /* With a backward through a shorter chain: the engine is iterative too. */
  cur = dt_tensor_retain(x);
  for (int i = 0; i < LENGTH / 10; i++) {
    dt_tensor *next = NULL;
    dt_status st = dt_mul_scalar(cur, 1.0, &next);
    dt_tensor_release(cur);
    cur = next;
    RANK_OK(st);
  }
  RANK_OK(dt_sum(cur, &loss));
  RANK_OK(backward_grad(loss, x, &g));
  double v = 0;
  RANK_OK(dt_tensor_to_doubles(g, &v, 1));
  RANK_CHECK(v == 1.0, "grad %g, expected 1", v);
  dt_tensor_release(g);
  dt_tensor_release(loss);
  dt_tensor_release(cur);
  dt_tensor_release(x);
  RANK_CHECK(dt_autograd_live_nodes() == before, "%lld nodes alive at the end",
             (long long)dt_autograd_live_nodes());
  return DT_OK;
}

Test(autograd_dist_conversions, long_chain_freed_without_recursion_on_a_rank_thread) {
  SPAWN_OK(1, rank_long_chain, NULL);
}

/* A tensor saved for backward and then modified in place (under no_grad, as an optimizer
 * does) makes the backward fail naming the op; distributed tensors as well. */
static dt_status rank_modified_saved(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *loss = NULL, *g = NULL;
  RANK_OK(dist_leaf(mesh, shard0(), &x));
  RANK_OK(dist_leaf(mesh, shard0(), &w));
  RANK_OK(dt_mul(x, w, &y)); /* saves x and w */
  RANK_OK(dt_sum(y, &loss));
  RANK_CHECK(dt_mul_scalar_(w, 2.0) == DT_ERR_INVALID, "in-place on a leaf requiring grad");
  RANK_CHECK(strstr(dt_last_error(), "mul_.Scalar") || strstr(dt_last_error(), "mul_"), "%s",
             dt_last_error());
  bool prev = dt_grad_mode_set(false);
  RANK_OK(dt_mul_scalar_(w, 2.0));
  dt_grad_mode_set(prev);
  RANK_CHECK(dt_backward(loss, NULL) == DT_ERR_INVALID, "backward after an in-place update");
  RANK_CHECK(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "modified in place"),
             "%s", dt_last_error());
  RANK_OK(dt_tensor_grad(x, &g));
  RANK_CHECK(g == NULL, "a failed backward changed .grad");
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(w);
  dt_tensor_release(x);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_dist_conversions, saved_distributed_tensor_modified_in_place_fails_backward) {
  SPAWN_OK(RANKS, rank_modified_saved, NULL);
}

/* ---- Memory ------------------------------------------------------------------------------ */

/* Counts the allocations alive through the library's allocator hook. */
static atomic_llong live_allocations;

static void *counting_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  void *p = NULL;
  if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
                     size ? size : 1) != 0)
    return NULL;
  atomic_fetch_add(&live_allocations, 1);
  return p;
}

static void counting_free(void *p, void *user) {
  (void)user;
  if (!p) return;
  atomic_fetch_sub(&live_allocations, 1);
  free(p);
}

/* A 100-layer MLP (width 4, batch 2), forward + backward + zero_grad 1,000 times: after
 * every iteration no node is alive, the autograd states are the parameters' own, and the
 * library holds as many allocations at the end as after the first iterations. */
Test(autograd_dist_conversions, mlp_100_layers_1000_iterations_keeps_memory_flat) {
  enum { LAYERS = 100, WIDTH = 4, BATCH = 2, ITERS = 1000 };
  dt_set_allocator(&(dt_allocator){counting_alloc, counting_free, NULL});
  dt_tensor *w[LAYERS], *b[LAYERS], *x = NULL;
  for (int l = 0; l < LAYERS; l++) {
    cr_assert_eq(dt_rand(2, (int64_t[]){WIDTH, WIDTH}, DT_F32, 100 + l, &w[l]), DT_OK);
    cr_assert_eq(dt_mul_scalar_(w[l], 0.4), DT_OK); /* activations stay O(1) through 100 layers */
    cr_assert_eq(dt_zeros(1, (int64_t[]){WIDTH}, DT_F32, &b[l]), DT_OK);
    cr_assert_eq(dt_tensor_set_requires_grad(w[l], true), DT_OK);
    cr_assert_eq(dt_tensor_set_requires_grad(b[l], true), DT_OK);
  }
  cr_assert_eq(dt_rand(2, (int64_t[]){BATCH, WIDTH}, DT_F32, 7, &x), DT_OK);
  long long warm = 0;
  for (int it = 0; it < ITERS; it++) {
    dt_tensor *h = dt_tensor_retain(x), *loss = NULL;
    for (int l = 0; l < LAYERS; l++) {
      dt_tensor *z = NULL, *a = NULL;
      cr_assert_eq(dt_linear(h, w[l], b[l], &z), DT_OK, "%s", dt_last_error());
      cr_assert_eq(dt_relu(z, &a), DT_OK, "%s", dt_last_error());
      dt_tensor_release(z);
      dt_tensor_release(h);
      h = a;
    }
    cr_assert_eq(dt_mean(h, &loss), DT_OK);
    dt_tensor_release(h);
    cr_assert_eq(dt_backward(loss, NULL), DT_OK, "%s", dt_last_error());
    dt_tensor_release(loss);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "iteration %d: %lld nodes alive", it,
                 (long long)dt_autograd_live_nodes());
    cr_assert_eq(atomic_load(&dt__autograd_live), 2 * LAYERS, "iteration %d: %d autograd states",
                 it, atomic_load(&dt__autograd_live));
    for (int l = 0; l < LAYERS; l++) {
      cr_assert_eq(dt_tensor_zero_grad(w[l], true), DT_OK);
      cr_assert_eq(dt_tensor_zero_grad(b[l], true), DT_OK);
    }
    if (it == 9) warm = atomic_load(&live_allocations);
  }
  long long end = atomic_load(&live_allocations);
  cr_assert_eq(end, warm, "allocations alive: %lld after 10 iterations, %lld after %d", warm, end,
               ITERS);
  for (int l = 0; l < LAYERS; l++) {
    dt_tensor_release(w[l]);
    dt_tensor_release(b[l]);
  }
  dt_tensor_release(x);
  cr_assert_eq(atomic_load(&dt__autograd_live), 0);
}
