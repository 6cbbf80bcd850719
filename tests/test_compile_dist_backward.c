/* dt_compile with options.backward on distributed tensors (issue 14): a tensor-parallel step
 * on 2 ranks of the threads backend: a colwise Linear (weight Shard(0)), relu, a rowwise
 * Linear (weight Shard(1)) and an mse loss against a replicated target, the input replicated
 * with a dynamic batch. The redistributions dispatch makes (the Partial(sum) difference made
 * Replicate, which autograd saves) are redistribute nodes of the joint graph, so the compiled
 * step's loss and both weights' gradients equal eager's (whole tensors compared bytewise) at
 * three batches, called twice per batch with different values (nothing baked as a constant),
 * with zero recompiles. SHOW_VARIANT=1 prints the traced variant. */
#include <criterion/criterion.h>
#include <string.h>

#include "comm_helpers.h"
#include "compile_helpers.h"

#define F 6
#define H 8
#define O 3

typedef struct model {
  dt_tensor *w1, *w2; /* distributed, require grad */
} model;

static dt_status make_model(dt_mesh *mesh, model *m) {
  dt_tensor *f1 = ramp_f32(2, (int64_t[]){H, F}, 1), *f2 = ramp_f32(2, (int64_t[]){O, H}, 2);
  dt_status st = dt_dist_distribute_tensor(mesh, f1, 1, (dt_placement[]){dt_shard(0)}, &m->w1);
  if (!st) st = dt_dist_distribute_tensor(mesh, f2, 1, (dt_placement[]){dt_shard(1)}, &m->w2);
  if (!st) st = dt_tensor_set_requires_grad(m->w1, true);
  if (!st) st = dt_tensor_set_requires_grad(m->w2, true);
  dt_tensor_release(f1);
  dt_tensor_release(f2);
  return st;
}

/* in[0]: x [B, F] Replicate; in[1]: y [B, O] Replicate. */
static dt_status tp_step(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in, (void)n_out;
  model *m = user;
  dt_tensor *h = NULL, *a = NULL, *p = NULL;
  dt_status st = dt_linear(in[0], m->w1, NULL, &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, m->w2, NULL, &p);
  if (!st) st = dt_mse_loss(p, in[1], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(p);
  return st;
}

static dt_status rank_fn(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(mesh_1d(world, &mesh));
  model eager = {0}, comp = {0};
  RANK_OK(make_model(mesh, &eager));
  RANK_OK(make_model(mesh, &comp));
  dt_compile_mark marks[2] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true}};
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(tp_step, &comp, 2, 1,
                     &(dt_compile_options){.n_marks = 2, .marks = marks, .backward = true}, &c));
  static const int64_t batches[] = {4, 7, 2};
  float previous = 0;
  for (int call = 0; call < 6; call++) {
    int64_t b = batches[call / 2];
    int salt = 3 + call; /* the second call of a batch takes other values */
    dt_tensor *fx = ramp_f32(2, (int64_t[]){b, F}, salt),
              *fy = ramp_f32(2, (int64_t[]){b, O}, 9 + call);
    dt_tensor *in[2] = {NULL, NULL}, *le = NULL, *lc = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, fx, 1, (dt_placement[]){dt_replicate()}, &in[0]));
    RANK_OK(dt_dist_distribute_tensor(mesh, fy, 1, (dt_placement[]){dt_replicate()}, &in[1]));
    RANK_OK(dt_tensor_set_grad(eager.w1, NULL));
    RANK_OK(dt_tensor_set_grad(eager.w2, NULL));
    RANK_OK(dt_tensor_set_grad(comp.w1, NULL));
    RANK_OK(dt_tensor_set_grad(comp.w2, NULL));
    RANK_OK(tp_step(&eager, 2, in, 1, &le));
    RANK_OK(dt_backward(le, NULL));
    RANK_OK(dt_compiled_call(c, 2, in, 1, &lc));
    bool eq = false;
    RANK_OK(same_whole(lc, le, &eq));
    RANK_CHECK(eq, "loss at batch %lld (call %d)", (long long)b, call);
    dt_tensor *ge = NULL, *gc = NULL;
    for (int w = 0; w < 2; w++) {
      RANK_OK(dt_tensor_grad(w ? eager.w2 : eager.w1, &ge));
      RANK_OK(dt_tensor_grad(w ? comp.w2 : comp.w1, &gc));
      RANK_CHECK(ge && gc, "grad of w%d at batch %lld", w + 1, (long long)b);
      RANK_CHECK(dt_dist_placements(gc)[0].kind == dt_dist_placements(ge)[0].kind,
                 "placement of grad w%d", w + 1);
      RANK_OK(same_whole(gc, ge, &eq));
      RANK_CHECK(eq, "grad of w%d at batch %lld (call %d)", w + 1, (long long)b, call);
      dt_tensor_release(ge);
      dt_tensor_release(gc);
    }
    /* The loss differs between the two calls of a batch: the values are not constants. */
    dt_tensor *whole = NULL;
    RANK_OK(dt_dist_full_tensor(lc, &whole));
    float loss = *(const float *)dt_tensor_data(whole);
    dt_tensor_release(whole);
    RANK_CHECK(call % 2 == 0 || loss != previous, "same loss %g at both calls of batch %lld",
               (double)loss, (long long)b);
    previous = loss;
    dt_tensor *all[] = {fx, fy, in[0], in[1], le, lc};
    for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
  }
  /* The redistributions are nodes of the graph, printed with their steps. */
  char *text = NULL;
  RANK_OK(dt_compiled_to_string(c, 0, &text));
  RANK_CHECK(strstr(text, "redistribute(%") && strstr(text, "to=[R]") &&
                 strstr(text, "all_reduce(mesh dim 0: P(sum) -> R)"),
             "redistribute nodes in:\n%s", text);
  if (getenv("SHOW_VARIANT") && dt_comm_rank(world) == 0) fprintf(stderr, "%s\n", text);
  dt_free(text);
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(c, &stats));
  RANK_CHECK(stats.recompiles == 0 && stats.compiles == 1, "recompiles %lld: %s",
             (long long)stats.recompiles,
             dt_compiled_recompile_reason(c, 0) ? dt_compiled_recompile_reason(c, 0) : "-");
  dt_compiled_destroy(c);
  dt_tensor *all[] = {eager.w1, eager.w2, comp.w1, comp.w2};
  for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_dist_backward, tp_colwise_rowwise_mse_2_ranks) { SPAWN_OK(2, rank_fn, NULL); }
