/* A compiled call under grad mode without options.backward is recorded for autograd (issue
 * 22.6), as PyTorch records a compiled forward: the seed's embedding over a weight that requires
 * grad (1 rank, and a Replicate weight on 2 thread ranks), with the loss and dt_backward outside
 * the compiled function, at three index shapes with one compile: the output requires grad, and
 * the weight's .grad equals eager's bitwise and a naive count of the picked rows. A function of
 * two outputs over a non-leaf input and a captured parameter: every .grad equals eager's. */
#include <criterion/criterion.h>
#include <math.h>

#include "comm_helpers.h"
#include "compile_helpers.h"

/* ---- The seed: embedding(idx, weight.to(float32)), the loss outside --------------------- */

static dt_status seed_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *w32 = NULL;
  dt_status st = dt_to(in[0], DT_F32, &w32);
  if (!st) st = dt_embedding(w32, in[1], &out[0]);
  dt_tensor_release(w32);
  return st;
}

#define VOCAB 1000
#define EMBED 8

static const int64_t sizes[3][2] = {{2, 51}, {3, 10}, {1, 1}};

static int64_t pick(int64_t i, int s) { return (i * 7919 + s * 104729) % VOCAB; }

/* loss = sum(f(weight, idx)) and its backward, f compiled (c) or eager (c NULL); *grad gets the
 * weight's .grad (cleared before). */
static dt_status step(dt_compiled *c, dt_tensor *weight, dt_tensor *idx, dt_tensor **loss,
                      dt_tensor **grad) {
  dt_tensor *in[2] = {weight, idx}, *e = NULL;
  RANK_OK(dt_tensor_zero_grad(weight, true));
  RANK_OK(c ? dt_compiled_call(c, 2, in, 1, &e) : seed_fn(NULL, 2, in, 1, &e));
  RANK_CHECK(dt_tensor_requires_grad(e), "the %s output does not require grad",
             c ? "compiled" : "eager");
  RANK_OK(dt_sum(e, loss));
  RANK_OK(dt_backward(*loss, NULL));
  RANK_OK(dt_tensor_grad(weight, grad));
  RANK_CHECK(*grad != NULL, "no .grad");
  dt_tensor_release(e);
  return DT_OK;
}

static dt_status seed_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  if (world) {
    int size = dt_comm_size(world);
    RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  }
  int64_t wshape[2] = {VOCAB, EMBED};
  dt_tensor *local = ramp_f32(2, wshape, 1), *weight = NULL;
  RANK_CHECK(local != NULL, "weight");
  dt_placement r = dt_replicate();
  if (mesh)
    RANK_OK(dt_dist_from_local(mesh, local, 1, &r, NULL, &weight));
  else
    weight = dt_tensor_retain(local);
  RANK_OK(dt_tensor_set_requires_grad(weight, true));
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(seed_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c));
  for (int s = 0; s < 3; s++) {
    dt_tensor *il = NULL, *idx = NULL;
    RANK_OK(dt_empty(2, sizes[s], DT_I64, &il));
    int64_t *p = dt_tensor_data(il), n = sizes[s][0] * sizes[s][1];
    for (int64_t i = 0; i < n; i++) p[i] = pick(i, s);
    if (mesh)
      RANK_OK(dt_dist_from_local(mesh, il, 1, &r, NULL, &idx));
    else
      idx = dt_tensor_retain(il);
    dt_tensor *el = NULL, *eg = NULL, *cl = NULL, *cg = NULL, *g = NULL;
    RANK_OK(step(NULL, weight, idx, &el, &eg));
    RANK_OK(step(c, weight, idx, &cl, &cg));
    bool same_loss = false, same_grad = false;
    RANK_OK(same_whole(el, cl, &same_loss));
    RANK_OK(same_whole(eg, cg, &same_grad));
    RANK_CHECK(same_loss && same_grad, "size %d: loss equal %d, grad equal %d", s, same_loss,
               same_grad);
    /* The gradient of a sum of picked rows counts the picks of each row. */
    RANK_OK(whole_contiguous(cg, &g));
    const float *gp = dt_tensor_data(g);
    for (int64_t row = 0; row < VOCAB; row++) {
      int count = 0;
      for (int64_t i = 0; i < n; i++) count += pick(i, s) == row;
      for (int64_t k = 0; k < EMBED; k++)
        RANK_CHECK(gp[row * EMBED + k] == (float)count, "size %d: grad[%lld][%lld] = %g, %d picks",
                   s, (long long)row, (long long)k, gp[row * EMBED + k], count);
    }
    dt_tensor *rel[] = {il, idx, el, eg, cl, cg, g};
    for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) dt_tensor_release(rel[k]);
  }
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(c, &stats));
  RANK_CHECK(stats.compiles == 1 && stats.recompiles == 0 && stats.eager_calls == 0,
             "compiles %lld recompiles %lld eager %lld", (long long)stats.compiles,
             (long long)stats.recompiles, (long long)stats.eager_calls);
  dt_compiled_destroy(c);
  dt_tensor_release(weight);
  dt_tensor_release(local);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_grad_call, seed_embedding_1_rank) {
  cr_assert_eq(seed_rank(NULL, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_autograd_live_nodes(), 0, "no autograd node left");
}

Test(compile_grad_call, seed_embedding_replicate_2_ranks) {
  SPAWN_OK(2, seed_rank, NULL);
  cr_assert_eq(dt_autograd_live_nodes(), 0, "no autograd node left");
}

/* ---- Two outputs, a non-leaf input, a captured parameter --------------------------------- */

/* h = tanh(linear(x, w)) with w captured (a constant of the trace), y = h * v (v an input);
 * returns (h, y). */
static dt_status two_out(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in, (void)n_out;
  dt_tensor *w = user, *l = NULL;
  dt_status st = dt_linear(in[0], w, NULL, &l);
  if (!st) st = dt_tanh(l, &out[0]);
  if (!st) st = dt_mul(out[0], in[1], &out[1]);
  dt_tensor_release(l);
  return st;
}

/* loss = sum(h) + sum(y * y) over x = a * 2, from cleared grads; the grads of a, w, v. */
static void mlp_step(dt_compiled *c, dt_tensor *a, dt_tensor *w, dt_tensor *v, dt_tensor **g) {
  dt_tensor *leaves[3] = {a, w, v};
  for (int k = 0; k < 3; k++) cr_assert_eq(dt_tensor_zero_grad(leaves[k], true), DT_OK);
  dt_tensor *x = NULL, *o[2] = {0}, *s1 = NULL, *yy = NULL, *s2 = NULL, *loss = NULL;
  cr_assert_eq(dt_mul_scalar(a, 2.0, &x), DT_OK);
  dt_tensor *in[2] = {x, v};
  cr_assert_eq(c ? dt_compiled_call(c, 2, in, 2, o) : two_out(w, 2, in, 2, o), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_sum(o[0], &s1), DT_OK);
  cr_assert_eq(dt_mul(o[1], o[1], &yy), DT_OK);
  cr_assert_eq(dt_sum(yy, &s2), DT_OK);
  cr_assert_eq(dt_add(s1, s2, &loss), DT_OK);
  cr_assert_eq(dt_backward(loss, NULL), DT_OK, "%s", dt_last_error());
  for (int k = 0; k < 3; k++) cr_assert_eq(dt_tensor_grad(leaves[k], &g[k]), DT_OK);
  dt_tensor *rel[] = {x, o[0], o[1], s1, yy, s2, loss};
  for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) dt_tensor_release(rel[k]);
}

Test(compile_grad_call, two_outputs_non_leaf_input_captured_parameter) {
  int64_t ws[2] = {5, 4}, vs[2] = {3, 5};
  dt_tensor *w = ramp_f32(2, ws, 2), *c_w = NULL;
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  c_w = w;
  dt_compiled *c = NULL;
  dt_compile_options opt = {.n_marks = 1, .marks = (dt_compile_mark[]){{0, 0, true}}};
  cr_assert_eq(dt_compile(two_out, c_w, 2, 2, &opt, &c), DT_OK);
  for (int round = 0; round < 2; round++) {
    int64_t as[2] = {3, 4};
    dt_tensor *a = ramp_f32(2, as, 3 + round), *v = ramp_f32(2, vs, 5 + round);
    cr_assert_eq(dt_tensor_set_requires_grad(a, true), DT_OK);
    cr_assert_eq(dt_tensor_set_requires_grad(v, true), DT_OK);
    dt_tensor *eg[3] = {0}, *cg[3] = {0};
    mlp_step(NULL, a, w, v, eg);
    mlp_step(c, a, w, v, cg);
    const char *names[3] = {"a", "w (captured)", "v"};
    for (int k = 0; k < 3; k++) {
      cr_assert_not_null(cg[k], "no .grad of %s", names[k]);
      dt_tensor *e = NULL, *g = NULL;
      cr_assert_eq(whole_contiguous(eg[k], &e), DT_OK);
      cr_assert_eq(whole_contiguous(cg[k], &g), DT_OK);
      cr_assert_eq(dt_tensor_numel(e), dt_tensor_numel(g));
      /* Two outputs: their gradients reach the recomputed graph in two passes, so sums may
       * round in another order than eager's one pass. */
      const float *pe = dt_tensor_data(e), *pg = dt_tensor_data(g);
      for (int64_t i = 0; i < dt_tensor_numel(e); i++)
        cr_assert(fabsf(pe[i] - pg[i]) <= 1e-6f * (1.0f + fabsf(pe[i])),
                  "grad of %s [%lld]: %g vs %g", names[k], (long long)i, pg[i], pe[i]);
      dt_tensor_release(e);
      dt_tensor_release(g);
      dt_tensor_release(eg[k]);
      dt_tensor_release(cg[k]);
    }
    dt_tensor_release(a);
    dt_tensor_release(v);
  }
  dt_compile_stats stats;
  cr_assert_eq(dt_compiled_stats(c, &stats), DT_OK);
  cr_assert_eq(stats.compiles, 1);
  dt_compiled_destroy(c);
  dt_tensor_release(w);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}
