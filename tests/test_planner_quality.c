/* Planner quality: for a fixed random sample of (op, shapes, placements) on 1-D and 2-D
 * meshes, the bytes the propagator's choice moves (each argument's redistribution as the
 * planner finds it) against the exhaustive minimum over every choice the rules allow (one
 * candidate per mesh dim, in every combination) with the planner's path for each. Prints
 * the fraction of cases at the optimum and fails below the fraction measured when the
 * test was written (a regression), or when a choice moves more than the minimum on a
 * 1-D mesh. No ranks run: the propagator and the planner work on global geometry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

/* Private header: the planner is optimal on small cases: its plans and the propagator are
 * internal. */
#include "distributed/propagate_impl.h"

/* The fractions at the optimum measured when this test was written; a change that lowers
 * either is a regression. */
#define MIN_OPTIMAL_1D 1.0
#define MIN_OPTIMAL_2D 1.0
#define N_CASES 2000

static uint64_t rng_state = 0x16u;
static uint64_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int64_t uniform(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(next_random() % (uint64_t)(hi - lo + 1));
}

typedef struct sample {
  dt_op_call call;
  int n_args;
  dt_tensor *args[DT_DIST_MAX_ARGS];
  dt_tensor *list[DT_DIST_MAX_ARGS];
  char text[160];
} sample;

static dt_tensor *tensor_of(int ndim, const int64_t *shape) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_empty(ndim, shape, DT_F32, &t), DT_OK, "%s", dt_last_error());
  return t;
}

static void random_shape(int ndim, int64_t *shape) {
  for (int d = 0; d < ndim; d++) shape[d] = uniform(1, 9);
}

/* A random call of one op family on small random shapes. */
static void make_sample(sample *s) {
  memset(s, 0, sizeof *s);
  int64_t a[4], b[4], c[4];
  int family = (int)uniform(0, 11);
  dt_op_call *call = &s->call;
  call->n_outputs = 1;
  switch (family) {
  case 0: { /* unary, monotone or linear */
    static const dt_op ops[] = {DT_OP_EXP, DT_OP_RELU, DT_OP_NEG, DT_OP_TANH};
    call->op = ops[uniform(0, 3)];
    int nd = (int)uniform(1, 3);
    random_shape(nd, a);
    s->args[0] = tensor_of(nd, a);
    s->n_args = 1;
    break;
  }
  case 1: { /* binary with broadcasting */
    static const dt_op ops[] = {DT_OP_ADD, DT_OP_MUL, DT_OP_SUB};
    call->op = ops[uniform(0, 2)];
    call->scalars[0] = 1;
    int nd = (int)uniform(1, 3), nb = (int)uniform(1, nd);
    random_shape(nd, a);
    for (int d = 0; d < nb; d++) b[d] = uniform(0, 3) == 0 ? 1 : a[nd - nb + d];
    s->args[0] = tensor_of(nd, a);
    s->args[1] = tensor_of(nb, b);
    s->n_args = 2;
    break;
  }
  case 2: { /* reductions over one dim */
    static const dt_op ops[] = {DT_OP_SUM_DIM, DT_OP_AMAX, DT_OP_MEAN_DIM};
    call->op = ops[uniform(0, 2)];
    int nd = (int)uniform(1, 3);
    random_shape(nd, a);
    call->n_ints = 1;
    call->ints[0] = uniform(0, nd - 1);
    if (uniform(0, 1)) call->flags |= DT_OP_FLAG_KEEPDIM;
    s->args[0] = tensor_of(nd, a);
    s->n_args = 1;
    break;
  }
  case 3: /* mm */
    call->op = DT_OP_MM;
    random_shape(3, a);
    s->args[0] = tensor_of(2, (int64_t[]){a[0], a[1]});
    s->args[1] = tensor_of(2, (int64_t[]){a[1], a[2]});
    s->n_args = 2;
    break;
  case 4: { /* matmul with 1-D, 2-D and batched operands */
    call->op = DT_OP_MATMUL;
    int na = (int)uniform(1, 3), nb = (int)uniform(1, 3);
    if (na == 3 && nb == 3) nb = 2;
    int64_t k = uniform(1, 9);
    random_shape(na, a);
    random_shape(nb, b);
    a[na - 1] = k;
    b[nb >= 2 ? nb - 2 : 0] = k;
    s->args[0] = tensor_of(na, a);
    s->args[1] = tensor_of(nb, b);
    s->n_args = 2;
    break;
  }
  case 5: { /* linear, with or without bias */
    call->op = DT_OP_LINEAR;
    int nx = (int)uniform(1, 3);
    random_shape(nx, a);
    int64_t out = uniform(1, 9);
    s->args[0] = tensor_of(nx, a);
    s->args[1] = tensor_of(2, (int64_t[]){out, a[nx - 1]});
    s->n_args = 2;
    if (uniform(0, 1)) {
      s->args[2] = tensor_of(1, &out);
      s->n_args = 3;
    }
    break;
  }
  case 6: /* addmm */
    call->op = DT_OP_ADDMM;
    call->scalars[0] = 1;
    call->scalars[1] = 1;
    random_shape(3, a);
    s->args[0] = uniform(0, 1) ? tensor_of(1, &a[2]) : tensor_of(2, (int64_t[]){a[0], a[2]});
    s->args[1] = tensor_of(2, (int64_t[]){a[0], a[1]});
    s->args[2] = tensor_of(2, (int64_t[]){a[1], a[2]});
    s->n_args = 3;
    break;
  case 7: { /* softmax / log_softmax */
    call->op = uniform(0, 1) ? DT_OP_SOFTMAX : DT_OP_LOG_SOFTMAX;
    int nd = (int)uniform(1, 3);
    random_shape(nd, a);
    call->n_ints = 1;
    call->ints[0] = uniform(0, nd - 1);
    s->args[0] = tensor_of(nd, a);
    s->n_args = 1;
    break;
  }
  case 8:
  case 9: { /* cat / stack of 2 or 3 */
    bool stack = family == 9;
    call->op = stack ? DT_OP_STACK : DT_OP_CAT;
    int nd = (int)uniform(1, 2), n = (int)uniform(2, 3);
    random_shape(nd, a);
    int dim = (int)uniform(0, stack ? nd : nd - 1);
    for (int i = 0; i < n; i++) {
      memcpy(c, a, sizeof c);
      if (!stack) c[dim] = uniform(1, 5);
      s->list[i] = tensor_of(nd, c);
      s->args[i] = s->list[i];
    }
    s->n_args = n;
    call->input_list = s->list;
    call->n_input_list = n;
    call->n_ints = 1;
    call->ints[0] = dim;
    break;
  }
  case 10: /* transpose */
    call->op = DT_OP_TRANSPOSE;
    random_shape(2, a);
    s->args[0] = tensor_of(2, a);
    s->n_args = 1;
    call->n_ints = 2;
    call->ints[0] = 0;
    call->ints[1] = 1;
    break;
  default: /* view: merge two dims */
    call->op = DT_OP_VIEW;
    random_shape(2, a);
    s->args[0] = tensor_of(2, a);
    s->n_args = 1;
    call->n_ints = 1;
    call->ints[0] = a[0] * a[1];
    call->int_list = call->ints;
    call->n_int_list = 1;
    break;
  }
  if (call->op != DT_OP_CAT && call->op != DT_OP_STACK) {
    call->n_inputs = s->n_args;
    for (int i = 0; i < s->n_args; i++) call->inputs[i] = s->args[i];
  }
  (void)b;
}

static dt_placement random_placement(int ndim) {
  switch (uniform(0, 4)) {
  case 0:
  case 1: return ndim > 0 ? dt_shard((int)uniform(0, ndim - 1)) : dt_replicate();
  case 2: return dt_partial(DT_REDUCE_SUM);
  case 3: return uniform(0, 3) == 0 ? dt_partial(DT_REDUCE_MAX) : dt_replicate();
  default: return dt_replicate();
  }
}

/* The bytes the planner moves for every argument of a choice. */
static int64_t choice_bytes(const dt_propagation *p, const dt_propagation_result *r) {
  int64_t total = 0;
  for (int i = 0; i < p->n_args; i++) {
    if (!p->args[i] || dt__placements_equal(p->mesh_ndim, p->current[i], r->targets[i])) continue;
    const dt_tensor *t = p->args[i];
    dt_redistribute_geometry g =
        dt__redistribute_geometry(t->ndim, t->shape, t->dtype, p->mesh_ndim, p->mesh_size);
    dt_redistribute_plan plan;
    if (dt__redistribute_plan(&g, p->current[i], r->targets[i], &plan)) return INT64_MAX;
    total += plan.bytes;
  }
  return total;
}

typedef struct minimum {
  const dt_propagation *p;
  int64_t bytes;
  dt_propagation_result best;
} minimum;

static void visit(void *user, const dt_propagation_result *choice) {
  minimum *m = user;
  int64_t b = choice_bytes(m->p, choice);
  if (b < m->bytes) {
    m->bytes = b;
    m->best = *choice;
  }
}

static void debug_print(const dt_propagation *p, const dt_propagation_result *r, const char *what) {
  char buf[32], b2[32];
  fprintf(stderr, "  %s:", what);
  for (int i = 0; i < p->n_args; i++) {
    fprintf(stderr, " [%s,%s]", dt_placement_format(r->targets[i][0], buf, sizeof buf),
            p->mesh_ndim > 1 ? dt_placement_format(r->targets[i][1], b2, sizeof b2) : "");
    const dt_tensor *t = p->args[i];
    dt_redistribute_geometry g =
        dt__redistribute_geometry(t->ndim, t->shape, t->dtype, p->mesh_ndim, p->mesh_size);
    dt_redistribute_plan plan;
    dt__redistribute_plan(&g, p->current[i], r->targets[i], &plan);
    fprintf(stderr, "(%lld)", (long long)plan.bytes);
    if (plan.n_steps > 1) {
      char steps[512];
      dt__redistribute_plan_format(&plan, steps, sizeof steps);
      fprintf(stderr, "\n    arg %d: %s\n   ", i, steps);
    }
  }
  fprintf(stderr, " out [%s,%s]\n", dt_placement_format(r->out[0], buf, sizeof buf),
          p->mesh_ndim > 1 ? dt_placement_format(r->out[1], b2, sizeof b2) : "");
}

typedef struct tally {
  int cases, optimal;
  int64_t chosen_bytes, minimum_bytes;
  double seconds; /* in dt__propagate */
} tally;

static void run_sample(int mesh_ndim, const int64_t *mesh, tally *t, bool strict) {
  sample s;
  make_sample(&s);
  dt_tensor_meta metas[DT_OP_MAX_META];
  const dt_op_def *def = &dt__op_table[s.call.op];
  dt_status st = def->infer(&s.call, metas);
  cr_assert_eq(st, DT_OK, "%s: %s", def->name, dt_last_error());
  dt_propagation p = {.call = &s.call,
                      .n_args = s.n_args,
                      .n_out = s.call.n_outputs,
                      .out = metas,
                      .mesh_ndim = mesh_ndim};
  memcpy(p.mesh_size, mesh, sizeof(int64_t) * (size_t)mesh_ndim);
  int used = 0;
  for (int i = 0; i < s.n_args; i++) {
    p.args[i] = s.args[i];
    for (int m = 0; m < mesh_ndim; m++) p.current[i][m] = random_placement(s.args[i]->ndim);
    char buf[32];
    used +=
        snprintf(s.text + used, sizeof s.text - (size_t)used, " [%s%s",
                 dt_placement_format(p.current[i][0], buf, sizeof buf), mesh_ndim > 1 ? "," : "]");
    if (mesh_ndim > 1 && used < (int)sizeof s.text) {
      used += snprintf(s.text + used, sizeof s.text - (size_t)used, "%s]",
                       dt_placement_format(p.current[i][1], buf, sizeof buf));
    }
  }
  dt_propagation_result r;
  /* The fastest of a few runs: the machine is shared, the minimum is the cost. */
  double fastest = HUGE_VAL;
  for (int k = 0; k < 5; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(dt__propagate(&p, &r), DT_OK, "%s", def->name);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (seconds < fastest) fastest = seconds;
  }
  t->seconds += fastest;
  int64_t chosen = choice_bytes(&p, &r);
  minimum m = {.p = &p, .bytes = INT64_MAX};
  cr_assert_eq(dt__propagate_each_choice(&p, visit, &m), DT_OK, "%s", def->name);
  t->cases++;
  t->chosen_bytes += chosen;
  t->minimum_bytes += m.bytes;
  if (chosen <= m.bytes) {
    t->optimal++;
  } else if (strict || getenv("PLANNER_DEBUG")) {
    /* A logged error makes the run fail: only where the optimum is required (1-D). */
    if (strict)
      cr_log_error("%s%s on a mesh of %lld: chose %lld bytes, the minimum is %lld", def->name,
                   s.text, (long long)mesh[0], (long long)chosen, (long long)m.bytes);
    if (getenv("PLANNER_DEBUG")) {
      fprintf(stderr, "%s%s on a %lldx%lld mesh: chose %lld bytes, the minimum is %lld\n",
              def->name, s.text, (long long)mesh[0], (long long)(mesh_ndim > 1 ? mesh[1] : 1),
              (long long)chosen, (long long)m.bytes);
      for (int i = 0; i < s.n_args; i++) {
        fprintf(stderr, "  arg %d shape", i);
        for (int d = 0; d < s.args[i]->ndim; d++)
          fprintf(stderr, " %lld", (long long)dt_tensor_shape(s.args[i])[d]);
        fprintf(stderr, "\n");
      }
      debug_print(&p, &r, "chosen");
      debug_print(&p, &m.best, "best");
    }
  }
  for (int i = 0; i < s.n_args; i++) dt_tensor_release(s.args[i]);
}

Test(planner_quality, chosen_bytes_against_the_exhaustive_minimum, .timeout = 120) {
  static const int64_t meshes_1d[][1] = {{2}, {3}, {4}};
  static const int64_t meshes_2d[][2] = {{2, 2}, {2, 3}, {3, 2}};
  tally one = {0}, two = {0};
  for (int k = 0; k < N_CASES / 2; k++) run_sample(1, meshes_1d[k % 3], &one, true);
  for (int k = 0; k < N_CASES / 2; k++) run_sample(2, meshes_2d[k % 3], &two, false);
  double f1 = (double)one.optimal / one.cases, f2 = (double)two.optimal / two.cases;
  printf("planner quality: 1-D meshes %d/%d at the optimum (%.2f %%), %lld bytes chosen vs "
         "%lld minimum; 2-D meshes %d/%d (%.2f %%), %lld vs %lld\n",
         one.optimal, one.cases, 100 * f1, (long long)one.chosen_bytes,
         (long long)one.minimum_bytes, two.optimal, two.cases, 100 * f2,
         (long long)two.chosen_bytes, (long long)two.minimum_bytes);
  printf("propagation: %.2f us per call on 1-D meshes, %.2f us on 2-D meshes\n",
         1e6 * one.seconds / one.cases, 1e6 * two.seconds / two.cases);
  cr_expect_geq(f1, MIN_OPTIMAL_1D, "1-D meshes: %.4f at the optimum", f1);
  cr_expect_geq(f2, MIN_OPTIMAL_2D, "2-D meshes: %.4f at the optimum", f2);
}
