/* Export of forwards that convert between local and distributed tensors (issue 10). Those
 * calls (from_local, to_local, redistribute, full_tensor, distribute_tensor and the hooks of
 * parallelize_module) run outside the op table, so the tracer never records them; their
 * result used to become a "_tensor_constant" and the exported program returned the traced
 * output for any new input. A conversion of a traced value must now make dt_export fail with
 * DT_ERR_UNSUPPORTED naming the call, while conversions of values that do not depend on the
 * trace (and redistributions inside a distributed op) still export and run correctly on a
 * second input. Ranks are threads (dt_comm_spawn). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "reference.h"

#define WORLD 2

static double max_abs_diff(const dt_tensor *a, const dt_tensor *b) {
  if (dt_tensor_numel(a) != dt_tensor_numel(b)) return INFINITY;
  double *x = ref_values(a), *y = ref_values(b), m = 0;
  for (int64_t i = 0; i < dt_tensor_numel(a); i++) m = fmax(m, fabs(x[i] - y[i]));
  free(x);
  free(y);
  return m;
}

/* A local copy of the whole of t (t itself when it is local). */
static dt_status whole(dt_tensor *t, dt_tensor **out) {
  if (dt_tensor_is_distributed(t)) return dt_dist_full_tensor(t, out);
  *out = dt_tensor_retain(t);
  return DT_OK;
}

/* Exports `model` on x1 and runs the program on x2; the result must equal the eager forward
 * on x2 (nonzero difference from x1's output shows the check means something). */
static dt_status expect_export_runs(dt_module *model, dt_tensor *x1, dt_tensor *x2) {
  dt_program *prog = NULL;
  dt_tensor *eager1 = NULL, *eager2 = NULL, *ran = NULL, *a = NULL, *b = NULL, *c = NULL;
  RANK_OK(dt_module_forward(model, x1, &eager1));
  RANK_OK(dt_module_forward(model, x2, &eager2));
  RANK_OK(dt_export(model, x1, NULL, &prog));
  RANK_OK(dt_program_run(prog, 1, &x2, 1, &ran, NULL));
  RANK_OK(whole(ran, &a));
  RANK_OK(whole(eager2, &b));
  RANK_OK(whole(eager1, &c));
  double diff = max_abs_diff(a, b), inputs_matter = max_abs_diff(b, c);
  RANK_CHECK(inputs_matter > 0.1, "the two inputs give outputs %g apart", inputs_matter);
  RANK_CHECK(diff <= 1e-6, "the program differs from eager on a second input by %g", diff);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_tensor_release(ran);
  dt_tensor_release(eager1);
  dt_tensor_release(eager2);
  dt_program_destroy(prog);
  return DT_OK;
}

/* dt_export must refuse with DT_ERR_UNSUPPORTED and a message naming `call`. When it does
 * not, the program it made is run on x2 to report how wrong it is. */
static dt_status expect_export_refused(dt_module *model, dt_tensor *x1, dt_tensor *x2,
                                       const char *call) {
  dt_program *prog = NULL;
  dt_status st = dt_export(model, x1, NULL, &prog);
  if (st == DT_OK) {
    dt_tensor *eager = NULL, *ran = NULL, *a = NULL, *b = NULL;
    RANK_OK(dt_module_forward(model, x2, &eager));
    RANK_OK(dt_program_run(prog, 1, &x2, 1, &ran, NULL));
    RANK_OK(whole(ran, &a));
    RANK_OK(whole(eager, &b));
    double diff = max_abs_diff(a, b);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(ran);
    dt_tensor_release(eager);
    dt_program_destroy(prog);
    RANK_CHECK(false, "export with %s succeeded; on a second input it is off by %g", call, diff);
  }
  char msg[300];
  snprintf(msg, sizeof msg, "%s", dt_last_error());
  RANK_CHECK(st == DT_ERR_UNSUPPORTED, "%s: status %s (%s)", call, dt_status_string(st), msg);
  RANK_CHECK(prog == NULL, "%s: a program was handed out on failure", call);
  RANK_CHECK(strstr(msg, "export") && strstr(msg, call) && strstr(msg, "traced"),
             "%s: unclear message: %s", call, msg);
  /* The model still works eagerly after the refused export. */
  dt_tensor *y = NULL;
  RANK_OK(dt_module_forward(model, x2, &y));
  dt_tensor_release(y);
  return DT_OK;
}

/* ---- Forwards with one distribution call each ---------------------------------------------- */

typedef enum which_call {
  CALL_FROM_LOCAL,
  CALL_REDISTRIBUTE,
  CALL_FULL_TENSOR,
  CALL_TO_LOCAL,
  CALL_DISTRIBUTE_TENSOR,
  CALL_CONSTANT_FROM_LOCAL, /* from_local of a tensor the trace does not hold */
  CALL_COUNT
} which_call;

static const char *const call_names[CALL_COUNT] = {
    "from_local", "redistribute",      "full_tensor",
    "to_local",   "distribute_tensor", "from_local of a constant",
};

typedef struct forward_user {
  dt_mesh *mesh;
  which_call which;
} forward_user;

/* relu(x) (a traced value), then the conversion under test, then x2 = y * 3 (an op after it,
 * so a constant in its place would be visible). */
static dt_status convert_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  const forward_user *u = dt_module_user(m);
  dt_tensor *h = NULL, *y = NULL, *c = NULL, *d = NULL;
  dt_placement r = dt_replicate(), s0 = dt_shard(0);
  dt_status st = dt_relu(x, &h);
  switch (u->which) {
  case CALL_FROM_LOCAL:
    if (!st) st = dt_dist_from_local(u->mesh, h, 1, &r, NULL, &y);
    break;
  case CALL_REDISTRIBUTE:
    if (!st) st = dt_dist_redistribute(h, 1, &r, &y);
    break;
  case CALL_FULL_TENSOR:
    if (!st) st = dt_dist_full_tensor(h, &y);
    break;
  case CALL_TO_LOCAL:
    if (!st) st = dt_dist_to_local(h, &y);
    break;
  case CALL_DISTRIBUTE_TENSOR:
    if (!st) st = dt_dist_distribute_tensor(u->mesh, h, 1, &s0, &y);
    break;
  case CALL_CONSTANT_FROM_LOCAL:
    /* ones -> from_local -> add: the conversion's input is not traced, so its result is
     * rightly a constant of the graph. */
    if (!st) st = dt_ones(dt_tensor_ndim(x), dt_tensor_shape(x), DT_F32, &c);
    if (!st) st = dt_dist_from_local(u->mesh, c, 1, &r, NULL, &d);
    if (!st) st = dt_add(h, d, &y);
    break;
  default: st = DT_ERR_INTERNAL;
  }
  if (!st) st = dt_mul_scalar(y, 3.0, out);
  dt_tensor_release(h);
  dt_tensor_release(y);
  dt_tensor_release(c);
  dt_tensor_release(d);
  return st;
}

/* The input of each case: local for calls that take a local tensor, else distributed. */
static dt_status make_input(dt_mesh *mesh, which_call which, uint64_t seed, dt_tensor **out) {
  int64_t shape[2] = {4, 6};
  dt_tensor *local = ref_random(2, shape, DT_F32, -2, 2, seed);
  if (!local) return dt__error(DT_ERR_NOMEM, "test: no input");
  bool distributed = which == CALL_REDISTRIBUTE || which == CALL_FULL_TENSOR ||
                     which == CALL_TO_LOCAL || which == CALL_CONSTANT_FROM_LOCAL;
  if (!distributed) {
    *out = local;
    return DT_OK;
  }
  dt_placement p = which == CALL_CONSTANT_FROM_LOCAL ? dt_replicate() : dt_shard(0);
  dt_status st = dt_dist_distribute_tensor(mesh, local, 1, &p, out);
  dt_tensor_release(local);
  return st;
}

static dt_status convert_rank(dt_comm *world, void *arg) {
  which_call which = (which_call)(intptr_t)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){WORLD}, (const char *const[]){"tp"}, &mesh));
  forward_user user = {mesh, which};
  dt_module *model = NULL;
  RANK_OK(dt_module_create("Convert", convert_forward, &user, &model));
  dt_tensor *x1 = NULL, *x2 = NULL;
  RANK_OK(make_input(mesh, which, 5, &x1));
  RANK_OK(make_input(mesh, which, 6, &x2));
  dt_status st = which == CALL_CONSTANT_FROM_LOCAL
                     ? expect_export_runs(model, x1, x2)
                     : expect_export_refused(model, x1, x2, call_names[which]);
  dt_tensor_release(x1);
  dt_tensor_release(x2);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return st;
}

Test(export_conversions, from_local_of_a_traced_value_is_refused) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_FROM_LOCAL);
}
Test(export_conversions, redistribute_of_a_traced_value_is_refused) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_REDISTRIBUTE);
}
Test(export_conversions, full_tensor_of_a_traced_value_is_refused) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_FULL_TENSOR);
}
Test(export_conversions, to_local_of_a_traced_value_is_refused) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_TO_LOCAL);
}
Test(export_conversions, distribute_tensor_of_a_traced_value_is_refused) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_DISTRIBUTE_TENSOR);
}
Test(export_conversions, from_local_of_a_constant_still_exports_and_follows_the_input) {
  SPAWN_OK(WORLD, convert_rank, (void *)(intptr_t)CALL_CONSTANT_FROM_LOCAL);
}

/* ---- parallelize_module -----------------------------------------------------------------------
 */

static dt_status parallelize_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_module *model = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){WORLD}, (const char *const[]){"tp"}, &mesh));
  RANK_OK(dt_nn_mlp(6, 18, 6, true, true, 21, &model));
  int64_t shape[2] = {4, 6};
  dt_tensor *x1 = ref_random(2, shape, DT_F32, -2, 2, 7),
            *x2 = ref_random(2, shape, DT_F32, -2, 2, 8);
  /* Before parallelizing, export is exact on a second input. */
  RANK_OK(expect_export_runs(model, x1, x2));
  dt_tp_plan_entry entries[2] = {{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}};
  dt_tp_plan plan = {2, entries};
  RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
  RANK_OK(expect_export_refused(model, x1, x2, "from_local"));
  char msg[300];
  snprintf(msg, sizeof msg, "%s", dt_last_error());
  RANK_CHECK(strstr(msg, "parallelize_module") && strstr(msg, "'0'"),
             "the message names the hook: %s", msg);
  dt_tensor_release(x1);
  dt_tensor_release(x2);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(export_conversions, parallelized_module_is_refused) {
  SPAWN_OK(WORLD, parallelize_rank, NULL);
}

/* ---- Redistributions inside a distributed op are part of the op: still exported ------------- */

/* x (S(0)) + p (S(1)): the add redistributes inside its dispatch. */
static dt_status add_param_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_add(x, dt_module_parameter(m, "p"), out);
}

static dt_status inner_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_module *model = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){WORLD}, (const char *const[]){"tp"}, &mesh));
  RANK_OK(dt_module_create("AddParam", add_param_forward, NULL, &model));
  int64_t shape[2] = {4, 6};
  dt_placement s0 = dt_shard(0), s1 = dt_shard(1);
  dt_tensor *p = ref_random(2, shape, DT_F32, -1, 1, 3), *pd = NULL;
  dt_tensor *l1 = ref_random(2, shape, DT_F32, -2, 2, 9),
            *l2 = ref_random(2, shape, DT_F32, -2, 2, 10);
  dt_tensor *x1 = NULL, *x2 = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, p, 1, &s1, &pd));
  RANK_OK(dt_module_add_parameter(model, "p", pd));
  RANK_OK(dt_dist_distribute_tensor(mesh, l1, 1, &s0, &x1));
  RANK_OK(dt_dist_distribute_tensor(mesh, l2, 1, &s0, &x2));
  RANK_OK(expect_export_runs(model, x1, x2));
  dt_tensor_release(p);
  dt_tensor_release(pd);
  dt_tensor_release(l1);
  dt_tensor_release(l2);
  dt_tensor_release(x1);
  dt_tensor_release(x2);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(export_conversions, redistribution_inside_a_distributed_op_still_exports) {
  SPAWN_OK(WORLD, inner_rank, NULL);
}
