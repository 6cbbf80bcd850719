/* dt_compile of the seed-004 embedding (issue 22.5): the joint forward+backward graph of
 * sum(embedding(idx, weight.to(float32))) with every dim dynamic, over the seed's index shapes
 * (2, 512), (3, 100), (1, 1), (8, 2048) in the seed's order and with (1, 1) traced first,
 * compiles once: no recompile. Each step's loss and weight.grad equal eager's (the function,
 * then dt_backward) bitwise and a naive reference (the gradient of a sum counts how often
 * each row was picked). On 1 rank with the seed's 202048 rows, and on 2 thread ranks with a
 * Replicate weight (the seed's placement). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "comm_helpers.h"
#include "compile_helpers.h"

static const int64_t seed_sizes[4][2] = {{2, 512}, {3, 100}, {1, 1}, {8, 2048}};

/* loss = sum(embedding(idx, weight.to(float32))). */
static dt_status seed_loss(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *w32 = NULL, *e = NULL;
  dt_status st = dt_to(in[0], DT_F32, &w32);
  if (!st) st = dt_embedding(w32, in[1], &e);
  if (!st) st = dt_sum(e, &out[0]);
  dt_tensor_release(w32);
  dt_tensor_release(e);
  return st;
}

typedef struct seed_case {
  int64_t vocab, embed;
  int order[4]; /* indices into seed_sizes, in call order */
} seed_case;

static int64_t pick(int64_t i, int s, int64_t vocab) { return (i * 7919 + s * 104729) % vocab; }

/* Indices of shape sizes[s] (a Replicate tensor on mesh when mesh is not NULL). */
static dt_status make_indices(dt_mesh *mesh, int s, int64_t vocab, dt_tensor **out) {
  dt_tensor *t = NULL;
  dt_status st = dt_empty(2, seed_sizes[s], DT_I64, &t);
  if (st) return st;
  int64_t *p = dt_tensor_data(t);
  for (int64_t i = 0; i < seed_sizes[s][0] * seed_sizes[s][1]; i++) p[i] = pick(i, s, vocab);
  if (!mesh) {
    *out = t;
    return DT_OK;
  }
  dt_placement r = dt_replicate();
  st = dt_dist_from_local(mesh, t, 1, &r, NULL, out);
  dt_tensor_release(t);
  return st;
}

/* The weight's value at element i. */
static float weight_at(int64_t i) { return (float)(i % 1009) * 0.25f; }

/* The loss and the weight's gradient for the indices of sizes[s], checked against naive loops:
 * the loss is the sum of the picked rows (in double, to a relative 1e-5), the gradient of row r
 * the count of picks of r in every column (exact). */
static dt_status check_naive(dt_tensor *loss, dt_tensor *grad, int s, int64_t vocab,
                             int64_t embed) {
  dt_tensor *l = NULL, *g = NULL;
  dt_status st = whole_contiguous(loss, &l);
  if (!st) st = whole_contiguous(grad, &g);
  int64_t n = seed_sizes[s][0] * seed_sizes[s][1];
  int32_t *count = calloc((size_t)vocab, sizeof *count);
  double want = 0.0;
  for (int64_t i = 0; i < n && count; i++) {
    int64_t row = pick(i, s, vocab);
    count[row]++;
    for (int64_t c = 0; c < embed; c++) want += weight_at(row * embed + c);
  }
  if (!st && !count) st = DT_ERR_NOMEM;
  if (!st && fabs(*(const float *)dt_tensor_data(l) - want) > 1e-5 * fabs(want) + 1e-3)
    st = DT_ERR_INTERNAL;
  const float *gp = g ? dt_tensor_data(g) : NULL;
  for (int64_t i = 0; !st && i < vocab * embed; i++) {
    if (gp[i] != (float)count[i / embed]) st = DT_ERR_INTERNAL;
  }
  free(count);
  dt_tensor_release(l);
  dt_tensor_release(g);
  return st;
}

/* One step: eager (the function, then dt_backward) and compiled, each from a cleared .grad;
 * loss and .grad bitwise equal, and equal to the naive reference. */
static dt_status check_step(dt_compiled *c, dt_tensor *weight, dt_mesh *mesh, int s,
                            const seed_case *sc) {
  long long rows = (long long)seed_sizes[s][0], cols = (long long)seed_sizes[s][1];
  dt_tensor *idx = NULL, *eloss = NULL, *closs = NULL, *eg = NULL, *cg = NULL;
  RANK_OK(make_indices(mesh, s, sc->vocab, &idx));
  dt_tensor *in[2] = {weight, idx};
  RANK_OK(dt_tensor_zero_grad(weight, true));
  RANK_OK(seed_loss(NULL, 2, in, 1, &eloss));
  RANK_OK(dt_backward(eloss, NULL));
  RANK_OK(dt_tensor_grad(weight, &eg));
  RANK_OK(dt_tensor_zero_grad(weight, true));
  RANK_OK(dt_compiled_call(c, 2, in, 1, &closs));
  RANK_OK(dt_tensor_grad(weight, &cg));
  RANK_CHECK(cg != NULL, "(%lld, %lld): the compiled step left no .grad", rows, cols);
  bool same_loss = false, same_grad = false;
  RANK_OK(same_whole(eloss, closs, &same_loss));
  RANK_OK(same_whole(eg, cg, &same_grad));
  RANK_CHECK(same_loss && same_grad, "(%lld, %lld): loss equal %d, grad equal %d", rows, cols,
             same_loss, same_grad);
  RANK_CHECK(check_naive(closs, cg, s, sc->vocab, sc->embed) == DT_OK,
             "(%lld, %lld): loss or grad differs from the naive reference", rows, cols);
  dt_tensor_release(idx);
  dt_tensor_release(eloss);
  dt_tensor_release(closs);
  dt_tensor_release(eg);
  dt_tensor_release(cg);
  return DT_OK;
}

/* The weight (the seed's values), requires grad: a Replicate DTensor on a 1-D mesh of the
 * world when mesh is not NULL. */
static dt_status make_weight(dt_mesh *mesh, const seed_case *sc, dt_tensor **local,
                             dt_tensor **out) {
  int64_t shape[2] = {sc->vocab, sc->embed};
  RANK_OK(dt_empty(2, shape, DT_F32, local));
  float *p = dt_tensor_data(*local);
  for (int64_t i = 0; i < sc->vocab * sc->embed; i++) p[i] = weight_at(i);
  if (mesh) {
    dt_placement r = dt_replicate();
    RANK_OK(dt_dist_from_local(mesh, *local, 1, &r, NULL, out));
  } else {
    *out = dt_tensor_retain(*local);
  }
  return dt_tensor_set_requires_grad(*out, true);
}

/* Compiles the seed's loss with every dim dynamic and options.backward, runs the four sizes in
 * sc's order: one compile, no recompile. */
static dt_status run_case(dt_mesh *mesh, const seed_case *sc) {
  dt_tensor *local = NULL, *weight = NULL;
  RANK_OK(make_weight(mesh, sc, &local, &weight));
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(seed_loss, NULL, 2, 1,
                     &(dt_compile_options){.dynamic = true, .backward = true}, &c));
  for (int k = 0; k < 4; k++) {
    dt_status st = check_step(c, weight, mesh, sc->order[k], sc);
    if (st) return st;
  }
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(c, &stats));
  RANK_CHECK(stats.compiles == 1 && stats.recompiles == 0 && stats.calls == 4,
             "compiles %lld recompiles %lld calls %lld (first reason: %s)",
             (long long)stats.compiles, (long long)stats.recompiles, (long long)stats.calls,
             stats.recompiles ? dt_compiled_recompile_reason(c, 0) : "none");
  char *text = NULL;
  RANK_OK(dt_compiled_to_string(c, 0, &text));
  /* The backward's sizes stay symbolic: the table's rows and the embedding dim of its output,
   * the index dims of the incoming gradient. */
  bool symbolic =
      strstr(text, "%embedding_backward : [s0, s1]") && strstr(text, "%expand : [s2, s3, s1]");
  RANK_CHECK(symbolic, "graph:\n%s", text);
  dt_free(text);
  dt_compiled_destroy(c);
  dt_tensor_release(weight);
  dt_tensor_release(local);
  return DT_OK;
}

/* The seed's vocabulary; an embedding dim of 8 instead of 256 keeps the test fast (every
 * backward makes a few weight-sized tensors), the shapes the compile sees are the same. */
static const seed_case seed_order = {202048, 8, {0, 1, 2, 3}};
static const seed_case one_first = {202048, 8, {2, 0, 3, 1}};

Test(compile_embedding, seed_joint_no_recompile) {
  cr_assert_eq(run_case(NULL, &seed_order), DT_OK, "%s", dt_last_error());
}

Test(compile_embedding, seed_joint_traced_at_one_by_one) {
  cr_assert_eq(run_case(NULL, &one_first), DT_OK, "%s", dt_last_error());
}

static dt_status replicate_rank(dt_comm *world, void *arg) {
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, &size, NULL, &mesh));
  dt_status st = run_case(mesh, arg);
  dt_mesh_destroy(mesh);
  return st;
}

Test(compile_embedding, seed_joint_replicate_2_ranks) {
  seed_case sc = {4096, 64, {0, 1, 2, 3}};
  SPAWN_OK(2, replicate_rank, &sc);
  seed_case first = {4096, 64, {2, 3, 0, 1}};
  SPAWN_OK(2, replicate_rank, &first);
}
