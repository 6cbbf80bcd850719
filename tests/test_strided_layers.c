/* StridedShard follow-ups (issue 16): the layers above the dist layer compare placements with
 * their split factor or refuse a strided shard clearly; SS(d,f) -> S(e) is one all_to_all of
 * the local bytes, priced by the one cost model; a sum over a strided dim is a free
 * Partial(sum); specs and plans that differ only by the split factor are cached apart. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "strided_helpers.h"

/* This file compares within 1e-4. */
#define full_equals(what, t, expect) full_equals_tol(what, t, expect, 1e-4)

/* ---- SS -> S by all_to_all --------------------------------------------------------------- */

typedef struct a2a_case {
  int64_t rows, cols;
  int target_dim; /* of the flat [rows * cols] (0) or of [rows, cols] seen strided (1) */
} a2a_case;

/* x = [rows, cols] S(1) on n ranks viewed as [rows * cols] SS(0, rows); moved to S(0) with
 * one all_to_all of this rank's bytes, equal to explain's figure, with the right values. */
static dt_status flat_to_shard_rank(dt_comm *world, void *arg) {
  const a2a_case *c = arg;
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  int64_t shape[2] = {c->rows, c->cols}, flat = c->rows * c->cols;
  dt_tensor *full = NULL, *full_flat = NULL, *x = NULL, *y = NULL, *moved = NULL;
  RANK_OK(flat_of_shard_1(world, 2, shape, &mesh, &full, &full_flat, &x, &y));
  RANK_OK(placement_is("flatten", y, 0, dt_strided_shard(0, (int)c->rows)));
  dt_tensor *local = NULL;
  RANK_OK(dt_dist_to_local(y, &local));
  int64_t local_bytes = dt_tensor_numel(local) * 4;
  dt_tensor_release(local);
  char text[512];
  int64_t explained = -1;
  dt_placement to = dt_shard(0);
  RANK_OK(dt_dist_redistribute_explain(y, 1, &to, text, sizeof text, &explained));
  dt_comm_ledger *ledger = NULL;
  ledger_counts counts;
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_dist_redistribute(y, 1, &to, &moved));
  LEDGER_END(ledger, counts);
  int64_t calls = counts.calls, a2a = counts.all_to_all, bytes = counts.bytes;
  RANK_CHECK(calls == 1 && a2a == 1, "%lld collectives (%lld all_to_all), expected one all_to_all",
             (long long)calls, (long long)a2a);
  RANK_CHECK(bytes == local_bytes, "moved %lld bytes, expected this rank's %lld (B/n)",
             (long long)bytes, (long long)local_bytes);
  RANK_CHECK(bytes == explained, "explain says %lld bytes, the ledger %lld\n%.300s",
             (long long)explained, (long long)bytes, text);
  RANK_CHECK(strstr(text, "all_to_all") != NULL, "explain: %.300s", text);
  RANK_OK(placement_is("moved", moved, 0, dt_shard(0)));
  RANK_OK(full_equals("SS -> S(0)", moved, full_flat));
  /* This rank's shard is exactly its torch.chunk of the flat tensor. */
  int64_t start, length;
  dt__chunk_range(flat, n, dt_comm_rank(world), &start, &length);
  RANK_OK(dt_dist_to_local(moved, &local));
  double *v = ref_values(local);
  bool ok = dt_tensor_numel(local) == length;
  for (int64_t i = 0; ok && i < length; i++) ok = v[i] == (double)(start + i + 1);
  free(v);
  dt_tensor_release(local);
  RANK_CHECK(ok, "rank %d's shard is not elements %lld..%lld", dt_comm_rank(world),
             (long long)start, (long long)(start + length));
  RELEASE_ALL(moved, y, x, full_flat, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, ss_to_shard_same_dim_is_one_all_to_all) {
  a2a_case even = {6, 4, 0}, uneven = {6, 5, 0}, small = {3, 3, 0};
  SPAWN_OK(4, flat_to_shard_rank, &even);
  SPAWN_OK(4, flat_to_shard_rank, &uneven); /* chunks 2, 2, 1, 0 of every block */
  SPAWN_OK(4, flat_to_shard_rank, &small);
  SPAWN_OK(2, flat_to_shard_rank, &uneven);
}

/* [rows * cols, 3] made by flattening [rows, cols, 3] S(1): SS(0, rows) -> S(1) is an
 * all_to_all from the chunk dim to dim 1 (3 columns over n ranks, uneven on 2 and 4). */
static dt_status other_dim_rank(dt_comm *world, void *arg) {
  const a2a_case *c = arg;
  dt_mesh *mesh = NULL;
  int64_t shape[3] = {c->rows, c->cols, 3}; /* viewed as [rows * cols, 3] */
  dt_tensor *full = NULL, *full_flat = NULL, *x = NULL, *y = NULL, *moved = NULL;
  RANK_OK(flat_of_shard_1(world, 3, shape, &mesh, &full, &full_flat, &x, &y));
  RANK_OK(placement_is("flatten", y, 0, dt_strided_shard(0, (int)c->rows)));
  char text[512];
  int64_t explained = -1;
  dt_placement to = dt_shard(1);
  RANK_OK(dt_dist_redistribute_explain(y, 1, &to, text, sizeof text, &explained));
  dt_comm_ledger *ledger = NULL;
  ledger_counts counts;
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_dist_redistribute(y, 1, &to, &moved));
  LEDGER_END(ledger, counts);
  int64_t calls = counts.calls, a2a = counts.all_to_all, bytes = counts.bytes;
  RANK_CHECK(calls == 1 && a2a == 1, "%lld collectives, %lld all_to_all", (long long)calls,
             (long long)a2a);
  RANK_CHECK(bytes == explained, "explain says %lld bytes, the ledger %lld\n%.300s",
             (long long)explained, (long long)bytes, text);
  RANK_OK(placement_is("moved", moved, 0, dt_shard(1)));
  RANK_OK(full_equals("SS(0) -> S(1)", moved, full_flat));
  RELEASE_ALL(moved, y, x, full_flat, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, ss_to_shard_other_dim_is_one_all_to_all) {
  a2a_case even = {4, 4, 1}, uneven = {3, 5, 1};
  SPAWN_OK(4, other_dim_rank, &even);
  SPAWN_OK(2, other_dim_rank, &uneven);
  SPAWN_OK(3, other_dim_rank, &even);
}

/* ---- Sum over a strided dim -------------------------------------------------------------- */

static dt_status sum_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  int64_t shape[3] = {3, 5, 2};
  dt_tensor *full = NULL, *full_flat = NULL, *x = NULL, *y = NULL;
  /* y: [15, 2] SS(0, 3) on 4 ranks, chunks 2, 2, 1, 0 of each block */
  RANK_OK(flat_of_shard_1(world, 3, shape, &mesh, &full, &full_flat, &x, &y));
  RANK_OK(placement_is("flatten", y, 0, dt_strided_shard(0, 3)));
  /* Over the strided dim: a Partial(sum), nothing moved; over the other: the same SS. */
  int64_t dims[2][1] = {{0}, {1}};
  dt_placement want[2] = {dt_partial(DT_REDUCE_SUM), dt_strided_shard(0, 3)};
  for (int k = 0; k < 2; k++) {
    dt_tensor *s = NULL, *ref = NULL;
    dt_comm_ledger *ledger = NULL;
    LEDGER_BEGIN(ledger);
    RANK_OK(dt_sum_dims(y, 1, dims[k], false, &s));
    LEDGER_END_ZERO(ledger, k ? "sum over dim 1" : "sum over dim 0");
    RANK_OK(placement_is("sum", s, 0, want[k]));
    RANK_OK(dt_sum_dims(full_flat, 1, dims[k], false, &ref));
    RANK_OK(full_equals("sum", s, ref));
    dt_tensor_release(ref);
    dt_tensor_release(s);
  }
  /* amax over the strided dim needs a non-empty chunk on every rank: 5 over 4 ranks leaves
   * rank 3 none, so it is reduced first, with the right value. */
  dt_tensor *m = NULL, *ref = NULL;
  RANK_OK(dt_amax(y, 1, (int64_t[]){0}, false, &m));
  RANK_CHECK(dt_dist_placements(m)[0].kind != DT_PARTIAL, "amax with an empty chunk is Partial");
  RANK_OK(dt_amax(full_flat, 1, (int64_t[]){0}, false, &ref));
  RANK_OK(full_equals("amax", m, ref));
  RELEASE_ALL(ref, m, y, x, full_flat, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, sum_over_strided_dim_is_free_partial) { SPAWN_OK(4, sum_rank, NULL); }

/* ---- Caches keep split factors apart ----------------------------------------------------- */

/* [24] SS(0,6) and SS(0,4) have one global shape and placement kind: their specs and their
 * redistribution plans must not share a cache entry. */
static dt_status cache_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_tensor *full = NULL;
  RANK_OK(mesh_and_iota_1d(world, 24, &mesh, &full));
  int factors[3] = {6, 4, 3};
  for (int k = 0; k < 3; k++) {
    dt_tensor *x = NULL, *r = NULL, *sq = NULL, *ref = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, full, 1,
                                      (dt_placement[]){dt_strided_shard(0, factors[k])}, &x));
    RANK_OK(dt_dist_redistribute(x, 1, (dt_placement[]){dt_replicate()}, &r));
    RANK_OK(full_equals("to R", r, full));
    RANK_OK(dt_mul(x, x, &sq)); /* op cache keyed by the spec */
    RANK_OK(placement_is("mul", sq, 0, dt_strided_shard(0, factors[k])));
    RANK_OK(dt_mul(full, full, &ref));
    RANK_OK(full_equals("mul", sq, ref));
    RELEASE_ALL(ref, sq, r, x);
  }
  /* Replicate -> SS(0,f) for several f: each its own plan. */
  dt_tensor *rep = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_replicate()}, &rep));
  for (int k = 0; k < 3; k++) {
    dt_tensor *s = NULL;
    RANK_OK(dt_dist_redistribute(rep, 1, (dt_placement[]){dt_strided_shard(0, factors[k])}, &s));
    RANK_OK(placement_is("R -> SS", s, 0, dt_strided_shard(0, factors[k])));
    RANK_OK(full_equals("R -> SS", s, full));
    dt_tensor_release(s);
  }
  dt_tensor_release(rep);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, caches_tell_split_factors_apart) { SPAWN_OK(4, cache_rank, NULL); }

/* ---- Layers above: optimizer, parallelize, TP transform, checkpoints ---------------------- */

/* A gradient SS(0,4) of a parameter SS(0,6) holds other elements: the step redistributes it
 * to SS(0,6) first (comparing whole placements, split factor included), so each element
 * steps by its own gradient. */
static dt_status optim_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_tensor *full = NULL, *p = NULL, *g = NULL, *g_same = NULL;
  RANK_OK(mesh_and_iota_1d(world, 24, &mesh, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 6)}, &p));
  RANK_OK(dt_tensor_set_requires_grad(p, true));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 4)}, &g));
  RANK_OK(dt_tensor_set_grad(p, g));
  dt_optimizer *opt = NULL;
  dt_sgd_options so = {.lr = 0.5};
  RANK_OK(dt_optimizer_create_sgd(1, &p, &so, &opt));
  /* p - 0.5 * p = 0.5 * p, element by element (a local update of mismatched blocks would mix
   * elements). */
  RANK_OK(dt_optimizer_step(opt));
  dt_tensor *half = NULL, *zero = NULL;
  RANK_OK(dt_mul_scalar(full, 0.5, &half));
  RANK_OK(full_equals("stepped with a redistributed gradient", p, half));
  /* The same split factor steps without redistributing: 0.5 * p - 0.5 * p = 0. */
  RANK_OK(
      dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 6)}, &g_same));
  RANK_OK(dt_tensor_set_grad(p, g_same));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_mul_scalar(full, 0.0, &zero));
  RANK_OK(full_equals("stepped", p, zero));
  RELEASE_ALL(half, zero);
  dt_optimizer_destroy(opt);
  RELEASE_ALL(g_same, g, p, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, optimizer_compares_split_factors) { SPAWN_OK(4, optim_rank, NULL); }

static dt_status parallelize_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_module *lin = NULL, *model = NULL;
  RANK_OK(dt_nn_linear(4, 6, true, 7, &lin));
  RANK_OK(dt_nn_sequential(1, &lin, &model));
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}}};
  dt_placement ss = dt_strided_shard(1, 2);
  dt_tp_style_options o = {.output_layout = &ss, .keep_distributed_output = true};
  dt_status st = dt_parallel_tp_module(model, mesh, &plan, &o);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_parallel_tp_module") &&
                 strstr(dt_last_error(), "output_layout") && strstr(dt_last_error(), "SS(1,2)"),
             "status %d: %s", (int)st, dt_last_error());
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, parallelize_refuses_strided_layouts) { SPAWN_OK(2, parallelize_rank, NULL); }

static dt_status flatten_forward(dt_module *self, dt_tensor *input, dt_tensor **out) {
  (void)self;
  return dt_flatten(input, 0, -1, out);
}

typedef struct tp_case {
  const dt_program *prog;
  dt_tensor *x, *expect;
} tp_case;

static dt_status tp_rank(dt_comm *world, void *arg) {
  const tp_case *c = arg;
  dt_tp_plan plan = {1, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}}};
  dt_program *tp = NULL;
  dt_tensor *y = NULL;
  RANK_OK(dt_parallel_tp_transform(c->prog, dt_comm_rank(world), dt_comm_size(world), &plan, &tp));
  dt_run_options ro = {.comm = world};
  RANK_OK(dt_program_run(tp, 1, &c->x, 1, &y, &ro));
  RANK_OK(full_equals("TP linear + flatten", y, c->expect));
  dt_tensor_release(y);
  dt_program_destroy(tp);
  return DT_OK;
}

/* A colwise Linear's [3, 6] Shard(1) output flattened: eager dispatch would make it
 * SS(0, 3), which a graph value cannot hold; the transform gathers instead and the run
 * gives the model's values. */
Test(strided_layers, tp_transform_never_places_strided) {
  dt_module *layers[2] = {NULL}, *model = NULL;
  cr_assert_eq(dt_nn_linear(4, 6, true, 11, &layers[0]), DT_OK);
  cr_assert_eq(dt_module_create("Flatten", flatten_forward, NULL, &layers[1]), DT_OK);
  cr_assert_eq(dt_nn_sequential(2, layers, &model), DT_OK);
  dt_tensor *x = ref_random(2, (int64_t[]){3, 4}, DT_F32, -1, 1, 5), *y = NULL;
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK, "%s", dt_last_error());
  dt_program *prog = NULL;
  cr_assert_eq(dt_export(model, x, NULL, &prog), DT_OK, "%s", dt_last_error());
  tp_case c = {prog, x, y};
  SPAWN_OK(2, tp_rank, &c);
  SPAWN_OK(4, tp_rank, &c);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_program_destroy(prog);
  dt_module_destroy(model);
}

static dt_status checkpoint_rank(dt_comm *world, void *arg) {
  const char *dir = arg;
  dt_mesh *mesh = NULL;
  dt_tensor *full = NULL, *x = NULL;
  RANK_OK(mesh_and_iota_1d(world, 12, &mesh, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_strided_shard(0, 3)}, &x));
  const char *names[1] = {"w"};
  dt_status st = dt_checkpoint_save(dir, mesh, 1, names, &x);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dt_checkpoint_save") &&
                 strstr(dt_last_error(), "SS(0,3)"),
             "save: status %d, %s", (int)st, dt_last_error());
  dt_tensor_release(x);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_layers, checkpoint_refuses_strided_clearly) {
  char dir[] = "/tmp/dt_strided_ckpt_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  SPAWN_OK(2, checkpoint_rank, dir);
  rmdir(dir);
}
