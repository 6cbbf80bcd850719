/* Autograd memory: every step of a training-like loop frees its whole graph. After each step
 * no recorded node is alive (dt_autograd_live_nodes), the only autograd states are the
 * parameters' own, and the library holds exactly as many allocations as after the first
 * steps (a counting allocator): zero growth, asserted with counters, not timings or RSS.
 * Covers the identity and view ops (contiguous of a contiguous tensor returns its input
 * handle, which autograd used to point at a new node that saved it: a cycle that kept the
 * step's graph alive), in-place ops on non-leaves, and distributed ops on 2 thread ranks. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "comm_helpers.h"
/* Private header: memory stays flat: dt__autograd_live counts live autograd nodes. */
#include "ops/op_impl.h"
#include "counting_alloc.h" /* live_bytes, peak_bytes, live_blocks */

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

static void counting_on(void) {
  dt_set_allocator(&(dt_allocator){.alloc = count_alloc, .free = count_free});
}

static double value_at(dt_tensor *t, int64_t i) {
  double v[64];
  cr_assert_leq(dt_tensor_numel(t), 64);
  OK(dt_tensor_to_doubles(t, v, 64));
  return v[i];
}

/* ---- The reported leak --------------------------------------------------------------------- */

/* contiguous of an eager loss (a contiguous one-element tensor that requires grad): the
 * step's nodes must all go once the caller drops its tensors, the loss keeps its own history,
 * and the gradient is right. */
Test(autograd_memory, contiguous_of_a_loss_frees_the_step) {
  dt_tensor *w = NULL, *x = NULL;
  OK(dt_from_data((double[]){1, 2, 3, 4, 5, 6}, 2, (int64_t[]){3, 2}, DT_F64, &w));
  OK(dt_from_data((double[]){1, -1, 2, 0.5, 0, 3}, 2, (int64_t[]){2, 3}, DT_F64, &x));
  OK(dt_tensor_set_requires_grad(w, true));
  for (int step = 0; step < 3; step++) {
    dt_tensor *y = NULL, *loss = NULL, *c = NULL;
    OK(dt_mm(x, w, &y));
    OK(dt_sum(y, &loss));
    cr_assert_eq(dt_autograd_live_nodes(), 2);
    /* The loss is contiguous: the result is the loss itself (dt_contiguous's contract, and
     * PyTorch's contiguous returns self), with the loss's history and no new node. */
    OK(dt_contiguous(loss, &c));
    cr_assert_eq(c, loss);
    cr_assert(!dt_tensor_is_leaf(loss));
    cr_assert_eq(dt_autograd_live_nodes(), 2);
    OK(dt_backward(c, NULL));
    dt_tensor_release(y);
    dt_tensor_release(loss);
    dt_tensor_release(c);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "step %d: %lld nodes alive", step,
                 (long long)dt_autograd_live_nodes());
    /* d sum(x w) / d w[k][j] = sum_i x[i][k]: 3, 3, -1, -1, 3, 3 (times the steps so far). */
    dt_tensor *g = NULL;
    OK(dt_tensor_grad(w, &g));
    const double col[3] = {1 + 0.5, -1 + 0, 2 + 3};
    for (int k = 0; k < 3; k++) {
      for (int j = 0; j < 2; j++) {
        cr_assert_float_eq(value_at(g, 2 * k + j), (step + 1) * col[k], 1e-12);
      }
    }
    dt_tensor_release(g);
  }
  /* contiguous of a contiguous leaf leaves it a leaf with its gradient going to it. */
  OK(dt_tensor_zero_grad(w, true));
  dt_tensor *c = NULL, *loss = NULL;
  OK(dt_contiguous(w, &c));
  cr_assert(dt_tensor_is_leaf(w), "contiguous made its leaf input a non-leaf");
  cr_assert_eq(dt_autograd_live_nodes(), 0);
  OK(dt_sum(c, &loss));
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  dt_tensor_release(c);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
  dt_tensor *g = NULL;
  OK(dt_tensor_grad(w, &g));
  for (int i = 0; i < 6; i++) cr_assert_float_eq(value_at(g, i), 1.0, 1e-12);
  dt_tensor_release(g);
  dt_tensor_release(w);
  dt_tensor_release(x);
}

/* ---- Identity and view ops ----------------------------------------------------------------- */

/* y = op(h) for a float64 h of shape 2x3 (contiguous, or a transposed view when the op
 * wants one): each op's result is a new handle and h keeps its history. */
typedef dt_status (*unary_fn)(dt_tensor *h, dt_tensor **y);

static dt_status op_contiguous(dt_tensor *h, dt_tensor **y) { return dt_contiguous(h, y); }
static dt_status op_clone(dt_tensor *h, dt_tensor **y) { return dt_clone(h, y); }
static dt_status op_to_same(dt_tensor *h, dt_tensor **y) { return dt_to(h, DT_F64, y); }
static dt_status op_to_f32(dt_tensor *h, dt_tensor **y) { return dt_to(h, DT_F32, y); }
static dt_status op_detach(dt_tensor *h, dt_tensor **y) { return dt_detach(h, y); }
static dt_status op_reshape_alias(dt_tensor *h, dt_tensor **y) {
  return dt_reshape(h, 1, (int64_t[]){6}, y);
}
static dt_status op_reshape_same(dt_tensor *h, dt_tensor **y) {
  return dt_reshape(h, 2, (int64_t[]){2, 3}, y);
}
static dt_status op_view(dt_tensor *h, dt_tensor **y) {
  return dt_view(h, 2, (int64_t[]){3, 2}, y);
}
static dt_status op_expand_same(dt_tensor *h, dt_tensor **y) {
  return dt_expand(h, 2, (int64_t[]){2, 3}, y);
}
static dt_status op_expand(dt_tensor *h, dt_tensor **y) {
  return dt_expand(h, 3, (int64_t[]){4, 2, 3}, y);
}
static dt_status op_flatten(dt_tensor *h, dt_tensor **y) { return dt_flatten(h, 0, -1, y); }
static dt_status op_squeeze(dt_tensor *h, dt_tensor **y) { return dt_squeeze(h, y); }
static dt_status op_unsqueeze(dt_tensor *h, dt_tensor **y) { return dt_unsqueeze(h, 0, y); }
static dt_status op_transpose(dt_tensor *h, dt_tensor **y) { return dt_transpose(h, 0, 1, y); }
static dt_status op_permute(dt_tensor *h, dt_tensor **y) {
  return dt_permute(h, 2, (int64_t[]){1, 0}, y);
}
static dt_status op_narrow_all(dt_tensor *h, dt_tensor **y) { return dt_narrow(h, 1, 0, 3, y); }
static dt_status op_transposed_contiguous(dt_tensor *h, dt_tensor **y) {
  dt_tensor *t = NULL;
  dt_status st = dt_transpose(h, 0, 1, &t);
  if (!st) st = dt_contiguous(t, y);
  dt_tensor_release(t);
  return st;
}
static dt_status op_contiguous_twice(dt_tensor *h, dt_tensor **y) {
  dt_tensor *t = NULL;
  dt_status st = dt_contiguous(h, &t);
  if (!st) st = dt_contiguous(t, y);
  dt_tensor_release(t);
  return st;
}

typedef struct identity_case {
  const char *name;
  unary_fn fn;
  double grad;   /* d sum(op(h)) / d h, the same for every element */
  bool detaches; /* the result does not require grad */
} identity_case;

static const identity_case identity_cases[] = {
    {"contiguous (already contiguous)", op_contiguous, 1, false},
    {"contiguous of contiguous", op_contiguous_twice, 1, false},
    {"contiguous (of a transpose)", op_transposed_contiguous, 1, false},
    {"clone", op_clone, 1, false},
    {"to (same dtype)", op_to_same, 1, false},
    {"to (float32)", op_to_f32, 1, false},
    {"detach", op_detach, 0, true},
    {"reshape (aliasing)", op_reshape_alias, 1, false},
    {"reshape (same shape)", op_reshape_same, 1, false},
    {"view", op_view, 1, false},
    {"expand (same shape)", op_expand_same, 1, false},
    {"expand", op_expand, 4, false},
    {"flatten", op_flatten, 1, false},
    {"squeeze (nothing to squeeze)", op_squeeze, 1, false},
    {"unsqueeze", op_unsqueeze, 1, false},
    {"transpose", op_transpose, 1, false},
    {"permute", op_permute, 1, false},
    {"narrow (everything)", op_narrow_all, 1, false},
};

/* leaf -> h = leaf * 2 (a non-leaf) -> y = op(h) -> loss = sum(y) (or sum(h) when y is
 * detached), backward, with the gradient of the leaf and the counters checked every step. */
Test(autograd_memory, identity_and_view_ops_leave_nothing_alive) {
  counting_on();
  dt_tensor *leaf = NULL;
  OK(dt_from_data((double[]){0.5, -1, 2, 3, -0.25, 1}, 2, (int64_t[]){2, 3}, DT_F64, &leaf));
  OK(dt_tensor_set_requires_grad(leaf, true));
  for (size_t c = 0; c < sizeof identity_cases / sizeof identity_cases[0]; c++) {
    const identity_case *ic = &identity_cases[c];
    long warm = 0;
    for (int step = 0; step < 6; step++) {
      dt_tensor *h = NULL, *y = NULL, *loss = NULL;
      OK(dt_mul_scalar(leaf, 2.0, &h));
      cr_assert_eq(ic->fn(h, &y), DT_OK, "%s: %s", ic->name, dt_last_error());
      cr_assert(!dt_tensor_is_leaf(h), "%s changed its input's history", ic->name);
      cr_assert_eq(dt_tensor_requires_grad(y), !ic->detaches, "%s", ic->name);
      OK(dt_sum(ic->detaches ? h : y, &loss));
      OK(dt_backward(loss, NULL));
      dt_tensor_release(loss);
      dt_tensor_release(y);
      dt_tensor_release(h);
      cr_assert_eq(dt_autograd_live_nodes(), 0, "%s, step %d: %lld nodes alive", ic->name, step,
                   (long long)dt_autograd_live_nodes());
      cr_assert_eq(atomic_load(&dt__autograd_live), 1, "%s, step %d: %d autograd states", ic->name,
                   step, atomic_load(&dt__autograd_live));
      dt_tensor *g = NULL;
      OK(dt_tensor_grad(leaf, &g));
      cr_assert_not_null(g, "%s: no gradient", ic->name);
      double want = ic->detaches ? 2.0 : 2.0 * ic->grad;
      for (int i = 0; i < 6; i++) {
        cr_assert_float_eq(value_at(g, i), want, 1e-6, "%s: grad[%d] = %g, expected %g", ic->name,
                           i, value_at(g, i), want);
      }
      dt_tensor_release(g);
      OK(dt_tensor_zero_grad(leaf, true));
      if (step == 1) warm = atomic_load(&live_blocks);
    }
    cr_assert_eq(atomic_load(&live_blocks), warm, "%s: allocations grew from %ld to %ld", ic->name,
                 warm, atomic_load(&live_blocks));
  }
  dt_tensor_release(leaf);
  dt_set_allocator(NULL);
}

/* ---- In-place ops whose other argument saved self --------------------------------------- */

/* A non-leaf y = 1.5 a of four float64 values a = 0.5, 0.75, 1, 1.25. */
static void make_y(dt_tensor **a, dt_tensor **y) {
  OK(dt_from_data((double[]){0.5, 0.75, 1, 1.25}, 1, (int64_t[]){4}, DT_F64, a));
  OK(dt_tensor_set_requires_grad(*a, true));
  OK(dt_mul_scalar(*a, 1.5, y));
}

/* w = y * 2; y.add_(w): mul saved y's handle and y's new history (add_) leads to mul, a ring
 * y -> add_ -> mul -> y that used to keep 3 nodes alive when no backward ran. Without a
 * backward, with one (d sum(1.5 a + 3 a) / da = 4.5, checked against the closed form), and
 * with the caller holding a second reference to y (the walk then covers the whole history):
 * no node is left once the tensors go. */
Test(autograd_memory, inplace_add_of_a_tensor_that_saved_self_frees_its_nodes) {
  for (int variant = 0; variant < 3; variant++) {
    dt_tensor *a = NULL, *y = NULL, *w = NULL, *loss = NULL;
    make_y(&a, &y);
    if (variant == 2) dt_tensor_retain(y);
    OK(dt_mul_scalar(y, 2.0, &w));
    OK(dt_add_(y, w));
    cr_assert_eq(dt_autograd_live_nodes(), 3);
    for (int i = 0; i < 4; i++) {
      cr_assert_float_eq(value_at(y, i), 4.5 * (0.5 + 0.25 * i), 1e-12, "y[%d]", i);
    }
    OK(dt_sum(y, &loss));
    if (variant == 1) {
      OK(dt_backward(loss, NULL));
      dt_tensor *g = NULL;
      OK(dt_tensor_grad(a, &g));
      for (int i = 0; i < 4; i++) cr_assert_float_eq(value_at(g, i), 4.5, 1e-12);
      dt_tensor_release(g);
    }
    dt_tensor_release(loss);
    dt_tensor_release(w);
    if (variant == 2) dt_tensor_release(y);
    dt_tensor_release(y);
    dt_tensor_release(a);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "variant %d: %lld nodes alive", variant,
                 (long long)dt_autograd_live_nodes());
  }
}

/* y.mul_(y[0:1]): narrow saved y; the backward fails (mul_ saved the view, which the write
 * changed) and must not leak, nor must evaluation with grad mode on and no backward. */
Test(autograd_memory, inplace_mul_by_a_view_of_self_frees_its_nodes) {
  for (int run_backward = 0; run_backward < 2; run_backward++) {
    dt_tensor *a = NULL, *y = NULL, *v = NULL, *loss = NULL;
    make_y(&a, &y);
    OK(dt_narrow(y, 0, 0, 1, &v));
    OK(dt_mul_(y, v));
    for (int i = 0; i < 4; i++) {
      cr_assert_float_eq(value_at(y, i), 2.25 * 0.5 * (0.5 + 0.25 * i), 1e-12, "y[%d]", i);
    }
    OK(dt_sum(y, &loss));
    if (run_backward) cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
    dt_tensor_release(loss);
    dt_tensor_release(v);
    dt_tensor_release(y);
    dt_tensor_release(a);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "backward %d: %lld nodes alive", run_backward,
                 (long long)dt_autograd_live_nodes());
  }
}

/* p = y * c saved y before y was first rebased (y.add_(1) does not reach mul); y.add_(p) then
 * closes the ring through mul: found at the second rebase. Also a tensor without history
 * (z, no grad) rebased by z.add_(z * a): mul saved z's handle. Evaluation only. */
Test(autograd_memory, inplace_rebases_without_backward_leave_nothing_alive) {
  dt_tensor *a = NULL, *y = NULL, *c = NULL, *p = NULL, *z = NULL, *q = NULL;
  make_y(&a, &y);
  OK(dt_from_data((double[]){3, 3, 3, 3}, 1, (int64_t[]){4}, DT_F64, &c));
  OK(dt_mul(y, c, &p));
  OK(dt_add_scalar_(y, 1.0));
  OK(dt_add_(y, p));
  for (int i = 0; i < 4; i++) {
    cr_assert_float_eq(value_at(y, i), 6.0 * (0.5 + 0.25 * i) + 1, 1e-12, "y[%d]", i);
  }
  OK(dt_from_data((double[]){1, 2, 3, 4}, 1, (int64_t[]){4}, DT_F64, &z));
  OK(dt_mul(z, a, &q));
  OK(dt_add_(z, q));
  cr_assert(dt_tensor_requires_grad(z));
  for (int i = 0; i < 4; i++) {
    cr_assert_float_eq(value_at(z, i), (i + 1) * (1 + 0.5 + 0.25 * i), 1e-12, "z[%d]", i);
  }
  dt_tensor_release(q);
  dt_tensor_release(z);
  dt_tensor_release(p);
  dt_tensor_release(c);
  dt_tensor_release(y);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), 0, "%lld nodes alive",
               (long long)dt_autograd_live_nodes());
}

/* ---- A mixed MLP step ---------------------------------------------------------------------- */

enum { LAYERS = 12, WIDTH = 8, BATCH = 4 };

/* One step: linear, relu, a contiguous copy of a transpose and back, reshapes, an in-place
 * scale and an in-place add on non-leaves, clone, to(float32) and back, then a mean loss
 * whose contiguous alias is what backward starts from; SGD under no_grad. */
static void mixed_step(dt_tensor **w, dt_tensor **b, dt_tensor *x) {
  dt_tensor *h = dt_tensor_retain(x);
  for (int l = 0; l < LAYERS; l++) {
    dt_tensor *z = NULL, *a = NULL, *t = NULL, *tc = NULL, *back = NULL, *flat = NULL;
    dt_tensor *r = NULL, *cl = NULL, *lo = NULL, *hi = NULL, *c = NULL, *u = NULL;
    OK(dt_linear(h, w[l], b[l], &z));
    OK(dt_relu(z, &a));
    OK(dt_mul_scalar(a, 1.25, &u));
    OK(dt_mul_scalar_(u, 0.75)); /* in place on a non-leaf (relu's output is saved: not a) */
    OK(dt_transpose(u, 0, 1, &t));
    OK(dt_contiguous(t, &tc));
    OK(dt_transpose(tc, 0, 1, &back));
    OK(dt_contiguous(back, &c)); /* copies (back is a transposed view) */
    OK(dt_reshape(c, 1, (int64_t[]){BATCH * WIDTH}, &flat));
    OK(dt_view(flat, 2, (int64_t[]){BATCH, WIDTH}, &r));
    OK(dt_clone(r, &cl));
    OK(dt_add_(cl, z)); /* in place, with a non-leaf argument */
    OK(dt_to(cl, DT_F32, &lo));
    OK(dt_to(lo, DT_F64, &hi));
    dt_tensor *next = NULL;
    OK(dt_contiguous(hi, &next)); /* already contiguous */
    dt_tensor *all[] = {z, a, u, t, tc, back, flat, r, cl, lo, hi, c, h};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    h = next;
  }
  dt_tensor *loss = NULL, *lc = NULL;
  OK(dt_mean(h, &loss));
  OK(dt_contiguous(loss, &lc));
  dt_tensor_release(h);
  OK(dt_backward(lc, NULL));
  dt_tensor_release(lc);
  dt_tensor_release(loss);
  bool prev = dt_grad_mode_set(false);
  for (int l = 0; l < LAYERS; l++) {
    dt_tensor *g = NULL, *step = NULL;
    OK(dt_tensor_grad(w[l], &g));
    cr_assert_not_null(g, "layer %d: no gradient", l);
    OK(dt_mul_scalar(g, -0.01, &step));
    OK(dt_add_(w[l], step));
    dt_tensor_release(step);
    dt_tensor_release(g);
    OK(dt_tensor_zero_grad(w[l], true));
    OK(dt_tensor_zero_grad(b[l], true));
  }
  dt_grad_mode_set(prev);
}

Test(autograd_memory, mixed_mlp_loop_has_zero_growth) {
  counting_on();
  dt_tensor *w[LAYERS], *b[LAYERS], *x = NULL;
  for (int l = 0; l < LAYERS; l++) {
    OK(dt_rand(2, (int64_t[]){WIDTH, WIDTH}, DT_F64, 300 + (uint64_t)l, &w[l]));
    OK(dt_mul_scalar_(w[l], 0.5));
    OK(dt_zeros(1, (int64_t[]){WIDTH}, DT_F64, &b[l]));
    OK(dt_tensor_set_requires_grad(w[l], true));
    OK(dt_tensor_set_requires_grad(b[l], true));
  }
  OK(dt_rand(2, (int64_t[]){BATCH, WIDTH}, DT_F64, 11, &x));
  long warm = 0;
  enum { STEPS = 40 };
  for (int s = 0; s < STEPS; s++) {
    mixed_step(w, b, x);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "step %d: %lld nodes alive", s,
                 (long long)dt_autograd_live_nodes());
    cr_assert_eq(atomic_load(&dt__autograd_live), 2 * LAYERS, "step %d: %d autograd states", s,
                 atomic_load(&dt__autograd_live));
    if (s == 2) warm = atomic_load(&live_blocks);
  }
  cr_assert_eq(atomic_load(&live_blocks), warm, "allocations grew from %ld to %ld over %d steps",
               warm, atomic_load(&live_blocks), STEPS - 3);
  for (int l = 0; l < LAYERS; l++) {
    dt_tensor_release(w[l]);
    dt_tensor_release(b[l]);
  }
  dt_tensor_release(x);
  dt_set_allocator(NULL);
}

/* ---- Distributed, 2 thread ranks ----------------------------------------------------------- */

#define RANKS 2

typedef struct dist_counts {
  long warm[RANKS]; /* live blocks seen by each rank after its warm-up steps */
} dist_counts;

/* Tensor parallel step: x Shard(0) (rows), w Replicate, b Replicate; mm, relu, contiguous
 * (an alias of a contiguous shard), an in-place scale, redistribute to Replicate and back to
 * Shard(0), to_local, contiguous of the local piece, and a loss from full_tensor's
 * contiguous copy. After each step both ranks wait, then check that nothing is alive. */
static dt_status rank_dist_loop(dt_comm *world, void *arg) {
  dist_counts *counts = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_placement s0 = {DT_SHARD, 0, DT_REDUCE_SUM, 0}, rep = dt_replicate();
  dt_tensor *w_full = NULL, *x_full = NULL, *w = NULL, *b = NULL, *x = NULL, *b_full = NULL;
  RANK_OK(dt_rand(2, (int64_t[]){6, 6}, DT_F64, 5, &w_full));
  RANK_OK(dt_rand(1, (int64_t[]){6}, DT_F64, 6, &b_full));
  RANK_OK(dt_rand(2, (int64_t[]){5, 6}, DT_F64, 7, &x_full)); /* 5 rows: uneven shards */
  RANK_OK(dt_dist_distribute_tensor(mesh, w_full, 1, &rep, &w));
  RANK_OK(dt_dist_distribute_tensor(mesh, b_full, 1, &rep, &b));
  RANK_OK(dt_dist_distribute_tensor(mesh, x_full, 1, &s0, &x));
  RANK_OK(dt_tensor_set_requires_grad(w, true));
  RANK_OK(dt_tensor_set_requires_grad(b, true));
  enum { STEPS = 12 };
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *z = NULL, *a = NULL, *ac = NULL, *r = NULL, *sh = NULL, *local = NULL, *u = NULL;
    dt_tensor *lc = NULL, *full = NULL, *fc = NULL, *sq = NULL, *loss = NULL, *lossc = NULL;
    RANK_OK(dt_linear(x, w, b, &z));
    RANK_OK(dt_relu(z, &a));
    RANK_OK(dt_contiguous(a, &ac));
    RANK_OK(dt_mul_scalar(ac, 2.0, &u));
    RANK_OK(dt_mul_scalar_(u, 0.5)); /* in place on a non-leaf */
    RANK_OK(dt_dist_redistribute(u, 1, &rep, &r));
    RANK_OK(dt_dist_redistribute(r, 1, &s0, &sh));
    RANK_OK(dt_dist_to_local(sh, &local));
    RANK_OK(dt_contiguous(local, &lc));
    RANK_OK(dt_dist_full_tensor(sh, &full));
    RANK_OK(dt_contiguous(full, &fc));
    RANK_OK(dt_mul(fc, fc, &sq));
    RANK_OK(dt_sum(sq, &loss));
    RANK_OK(dt_contiguous(loss, &lossc));
    RANK_OK(dt_backward(lossc, NULL));
    dt_tensor *all[] = {z, a, ac, u, r, sh, local, lc, full, fc, sq, loss, lossc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    RANK_OK(dt_tensor_zero_grad(w, true));
    RANK_OK(dt_tensor_zero_grad(b, true));
    RANK_OK(dt_comm_barrier(world));
    long long nodes = (long long)dt_autograd_live_nodes();
    int states = atomic_load(&dt__autograd_live);
    if (s == 2) counts->warm[rank] = atomic_load(&live_blocks);
    RANK_OK(dt_comm_barrier(world));
    RANK_CHECK(nodes == 0, "step %d: %lld nodes alive", s, nodes);
    RANK_CHECK(states == 2 * RANKS, "step %d: %d autograd states (the parameters' %d)", s, states,
               2 * RANKS);
  }
  RANK_OK(dt_comm_barrier(world));
  long end = atomic_load(&live_blocks);
  RANK_OK(dt_comm_barrier(world));
  counts->warm[rank] = end - counts->warm[rank]; /* growth seen by this rank */
  dt_tensor *all[] = {w_full, x_full, b_full, w, b, x};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_memory, distributed_loop_on_two_ranks_has_zero_growth) {
  counting_on();
  dist_counts counts = {{0}};
  SPAWN_OK(RANKS, rank_dist_loop, &counts);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
  cr_assert_eq(atomic_load(&dt__autograd_live), 0);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(counts.warm[r], 0,
                 "rank %d: %ld more blocks alive after the loop than after 3 steps", r,
                 counts.warm[r]);
  }
  dt_set_allocator(NULL);
}
