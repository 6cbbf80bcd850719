/* StridedShard (issue 16, pattern 5): flattening a tensor sharded on a non-leading dim moves
 * nothing, and the strided placement it gives converts back, redistributes and carries
 * gradients with the values of the whole tensors. */
#include <criterion/criterion.h>

#include "strided_helpers.h"

/* This file compares within 1e-5. */
#define same_values(what, t, expect) same_values_tol(what, t, expect, 1e-5)
#define full_equals(what, t, expect) full_equals_tol(what, t, expect, 1e-5)

/* ---- Pattern 5 on 4 ranks, even and uneven --------------------------------------------- */

typedef struct flat_case {
  int64_t rows, cols;
} flat_case;

static dt_status flatten_rank(dt_comm *world, void *arg) {
  const flat_case *c = arg;
  int rank = dt_comm_rank(world);
  int n = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  int64_t shape[2] = {c->rows, c->cols}, flat = c->rows * c->cols;
  dt_tensor *full = NULL, *full_flat = NULL;
  dt_tensor *x = NULL, *y = NULL, *back = NULL, *z = NULL, *local = NULL;
  RANK_OK(flat_of_shard_1(world, 2, shape, &mesh, &full, &full_flat, &x, NULL));
  dt_placement strided = dt_strided_shard(0, (int)c->rows);

  /* The flatten moves nothing and gives StridedShard(0, rows). */
  dt_comm_ledger *ledger = NULL;
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_view(x, 1, &flat, &y));
  LEDGER_END_ZERO(ledger, "view [rows, cols] S(1) -> [rows * cols]");
  RANK_OK(placement_is("flatten", y, 0, strided));
  RANK_OK(full_equals("flatten", y, full_flat));

  /* This rank holds elements {i * cols + j : j in its chunk of cols} in that order. */
  int64_t start, length;
  dt__chunk_range(c->cols, n, rank, &start, &length);
  RANK_OK(dt_dist_to_local(y, &local));
  RANK_CHECK(dt_tensor_numel(local) == c->rows * length, "local has %lld elements, expected %lld",
             (long long)dt_tensor_numel(local), (long long)(c->rows * length));
  double *v = ref_values(local);
  for (int64_t i = 0; i < c->rows; i++) {
    for (int64_t j = 0; j < length; j++) {
      double want = (double)(i * c->cols + start + j + 1);
      double got = v[i * length + j];
      if (got != want) free(v);
      RANK_CHECK(got == want, "rank %d local element (%lld, %lld) is %g, expected %g", rank,
                 (long long)i, (long long)j, got, want);
    }
  }
  free(v);
  dt_tensor_release(local);

  /* A pointwise op keeps it, for free. */
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_mul(y, y, &z));
  LEDGER_END_ZERO(ledger, "mul on StridedShard");
  RANK_OK(placement_is("mul", z, 0, strided));
  dt_tensor *squares = NULL;
  RANK_OK(dt_mul(full_flat, full_flat, &squares));
  RANK_OK(full_equals("mul", z, squares));
  dt_tensor_release(squares);

  /* The inverse view gives Shard(1) back, for free. */
  LEDGER_BEGIN(ledger);
  RANK_OK(dt_view(y, 2, shape, &back));
  LEDGER_END_ZERO(ledger, "view back to [rows, cols]");
  RANK_OK(placement_is("view back", back, 0, dt_shard(1)));
  RANK_OK(full_equals("view back", back, full));

  /* Redistributions: to Replicate and to Shard(0), with explain's bytes what the ledger
   * measures; and back from Replicate (a local slice). */
  dt_placement targets[2] = {dt_replicate(), dt_shard(0)};
  for (int k = 0; k < 2; k++) {
    char text[256];
    int64_t explained = -1;
    RANK_OK(dt_dist_redistribute_explain(y, 1, &targets[k], text, sizeof text, &explained));
    dt_tensor *moved = NULL, *again = NULL;
    ledger_counts counts;
    LEDGER_BEGIN(ledger);
    RANK_OK(dt_dist_redistribute(y, 1, &targets[k], &moved));
    LEDGER_END(ledger, counts);
    int64_t bytes = counts.bytes;
    RANK_CHECK(bytes == explained, "to %d: explain says %lld bytes, the ledger %lld\n%s", k,
               (long long)explained, (long long)bytes, text);
    /* To Shard(0) is an all_to_all of this rank's chunks: a rank holding none sends none. */
    dt_tensor *held = NULL;
    RANK_OK(dt_dist_to_local(y, &held));
    bool holds = dt_tensor_numel(held) > 0;
    dt_tensor_release(held);
    RANK_CHECK(bytes > 0 || (k == 1 && !holds), "to %d: nothing moved", k);
    RANK_OK(full_equals("redistributed", moved, full_flat));
    LEDGER_BEGIN(ledger);
    RANK_OK(dt_dist_redistribute(moved, 1, &strided, &again));
    LEDGER_END(ledger, counts);
    if (k == 0)
      RANK_CHECK(counts.calls == 0, "R -> StridedShard: %lld collectives", (long long)counts.calls);
    RANK_OK(placement_is("back to strided", again, 0, strided));
    RANK_OK(full_equals("back to strided", again, full_flat));
    dt_tensor_release(moved);
    dt_tensor_release(again);
  }

  /* distribute_tensor and from_local with the strided placement directly. */
  dt_tensor *d = NULL, *d_local = NULL, *f = NULL;
  RANK_OK(dt_dist_distribute_tensor(mesh, full_flat, 1, &strided, &d));
  RANK_OK(dt_dist_to_local(y, &local));
  RANK_OK(dt_dist_to_local(d, &d_local));
  RANK_OK(same_values("distribute_tensor StridedShard", d_local, local));
  dt_dist_from_local_options options = {.global_shape = &flat, .global_ndim = 1};
  RANK_OK(dt_dist_from_local(mesh, d_local, 1, &strided, &options, &f));
  RANK_OK(full_equals("from_local StridedShard", f, full_flat));
  RELEASE_ALL(f, d_local, local, d);

  RELEASE_ALL(back, z, y, x, full_flat, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_shard, flatten_of_shard_1_moves_nothing) {
  flat_case c = {6, 4};
  SPAWN_OK(4, flatten_rank, &c);
}

Test(strided_shard, uneven_columns) {
  flat_case c = {6, 5}; /* chunks 2, 2, 1, 0 of every row */
  SPAWN_OK(4, flatten_rank, &c);
  flat_case d = {3, 3}; /* chunks 1, 1, 1, 0 */
  SPAWN_OK(4, flatten_rank, &d);
}

/* ---- A 2-D mesh ---------------------------------------------------------------------------- */

static dt_status mesh_2d_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  int64_t shape[2] = {6, 4}, flat = 24;
  dt_tensor *full = iota(2, shape), *full_flat = NULL;
  RANK_OK(dt_reshape(full, 1, &flat, &full_flat));
  /* (R, S(1)) flattens to (R, SS(0, 6)) for free; (S(0), S(1)) gives valid placements and
   * the right values whatever it costs. */
  dt_placement cases[2][2] = {{dt_replicate(), dt_shard(1)}, {dt_shard(0), dt_shard(1)}};
  for (int k = 0; k < 2; k++) {
    dt_tensor *x = NULL, *y = NULL, *back = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, full, 2, cases[k], &x));
    dt_comm_ledger *ledger = NULL;
    LEDGER_BEGIN(ledger);
    RANK_OK(dt_flatten(x, 0, -1, &y));
    ledger_counts counts;
    LEDGER_END(ledger, counts);
    if (k == 0) {
      RANK_CHECK(counts.calls == 0, "(R, S(1)) flatten: %lld collectives", (long long)counts.calls);
      RANK_OK(placement_is("(R, S(1)) flatten", y, 0, dt_replicate()));
      RANK_OK(placement_is("(R, S(1)) flatten", y, 1, dt_strided_shard(0, 6)));
    }
    RANK_CHECK(dt__placements_valid(2, dt_dist_placements(y)), "case %d: invalid placements", k);
    RANK_OK(full_equals("2-D flatten", y, full_flat));
    RANK_OK(dt_view(y, 2, shape, &back));
    RANK_OK(full_equals("2-D view back", back, full));
    dt_tensor *moved = NULL;
    RANK_OK(dt_dist_redistribute(y, 2, (dt_placement[]){dt_shard(0), dt_replicate()}, &moved));
    RANK_OK(full_equals("2-D redistribute", moved, full_flat));
    RELEASE_ALL(moved, back, y, x);
  }
  dt_tensor_release(full_flat);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_shard, mesh_2x2) { SPAWN_OK(4, mesh_2d_rank, NULL); }

/* ---- Gradient through the flatten ------------------------------------------------------ */

static dt_status grad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  int64_t shape[2] = {6, 4};
  dt_tensor *full = NULL, *x = NULL, *y = NULL, *sq = NULL, *loss = NULL, *grad = NULL;
  RANK_OK(flat_of_shard_1(world, 2, shape, &mesh, &full, NULL, &x, NULL));
  RANK_OK(dt_tensor_set_requires_grad(x, true));
  RANK_OK(dt_view(x, 1, (int64_t[]){24}, &y));
  RANK_OK(dt_mul(y, y, &sq));
  RANK_OK(dt_sum(sq, &loss));
  RANK_OK(dt_backward(loss, NULL));
  RANK_OK(dt_tensor_grad(x, &grad));
  RANK_CHECK(grad != NULL, "x has no gradient");
  RANK_OK(placement_is("gradient", grad, 0, dt_shard(1)));
  dt_tensor *twice = NULL; /* d/dx sum(x^2) = 2x */
  RANK_OK(dt_add(full, full, &twice));
  RANK_OK(full_equals("gradient", grad, twice));
  RELEASE_ALL(twice, grad, loss, sq, y, x, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_shard, gradient_through_the_flatten) { SPAWN_OK(4, grad_rank, NULL); }

/* ---- Text and errors ------------------------------------------------------------------------ */

Test(strided_shard, format) {
  char buf[32];
  cr_assert_str_eq(dt_placement_format(dt_strided_shard(0, 6), buf, sizeof buf), "SS(0,6)");
}

static dt_status errors_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh));
  int64_t shape[1] = {24};
  dt_tensor *full = iota(1, shape), *out = NULL;
  /* 5 does not divide 24. */
  dt_status st = dt_dist_distribute_tensor(
      mesh, full, 2, (dt_placement[]){dt_replicate(), dt_strided_shard(0, 5)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "dt_dist_distribute_tensor") &&
                 strstr(dt_last_error(), "split factor"),
             "split factor 5: %s", dt_last_error());
  /* A strided dim sharded by a later mesh dim that does not take whole chunks (2 ranks, 3
   * chunks). */
  st = dt_dist_distribute_tensor(mesh, full, 2,
                                 (dt_placement[]){dt_strided_shard(0, 3), dt_shard(0)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "StridedShard"),
             "nested strided: %s", dt_last_error());
  st = dt_dist_distribute_tensor(mesh, full, 2,
                                 (dt_placement[]){dt_replicate(), dt_strided_shard(0, 0)}, &out);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), ">= 1"), "factor 0: %s",
             dt_last_error());
  st = dt_dist_rand(mesh, 1, shape, DT_F32, 1, 2,
                    (dt_placement[]){dt_replicate(), dt_strided_shard(0, 6)}, &out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "dist_rand"), "rand: %s",
             dt_last_error());
  /* dist_full makes it (a constant has no positions). */
  RANK_OK(dt_dist_constant(mesh, 1, shape, 2.0, DT_F32, 2,
                           (dt_placement[]){dt_replicate(), dt_strided_shard(0, 6)}, &out));
  dt_tensor *twos = NULL;
  RANK_OK(dt_full(1, shape, 2.0, DT_F32, &twos));
  RANK_OK(full_equals("dist_full strided", out, twos));
  RELEASE_ALL(twos, out, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_shard, errors) { SPAWN_OK(4, errors_rank, NULL); }

/* ---- visualize_sharding ------------------------------------------------------------------- */

static dt_status visualize_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  int64_t shape[2] = {3, 4};
  dt_tensor *full = NULL, *x = NULL, *y = NULL; /* y: [12] SS(0,3) on 2 ranks */
  RANK_OK(flat_of_shard_1(world, 2, shape, &mesh, &full, NULL, &x, &y));
  char text[512];
  RANK_OK(dt_dist_visualize_sharding(y, text, sizeof text));
  /* Blocks of 4: rank 0 holds 0:2, 4:6, 8:10; rank 1 the others. */
  const char *want = "global shape [12], placements (SS(0,3))\n"
                     "0:2 -> ranks 0\n2:4 -> ranks 1\n4:6 -> ranks 0\n6:8 -> ranks 1\n"
                     "8:10 -> ranks 0\n10:12 -> ranks 1\n";
  RANK_CHECK(strcmp(text, want) == 0, "got\n%.400s", text);
  RELEASE_ALL(y, x, full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(strided_shard, visualize) { SPAWN_OK(2, visualize_rank, NULL); }
