/*
 * The distributed-tensor layer over the MPI backend: on a 1-D mesh of every rank and (for an
 * even world) a 2 x W/2 mesh, full tensors are distributed with several placements, dt_add,
 * dt_mm and dt_sum run on the distributed tensors (their redistributions and partial
 * reductions become MPI collectives), and dt_dist_full_tensor of each result must equal the op
 * on the full tensors computed locally. Odd shapes make the shards uneven.
 *
 * Prints "N passed, N failed" (summed over the ranks) and exits 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "mpi_check.h"

typedef dt_status (*binary_fn)(dt_tensor *a, dt_tensor *b, dt_tensor **out);
static dt_status op_add(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return dt_add(a, b, out); }
static dt_status op_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out) { return dt_mm(a, b, out); }
static dt_status op_sum(dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)b;
  return dt_sum(a, out);
}

/* True when two local tensors have the same shape and values within a float tolerance. */
static bool same_values(const dt_tensor *got, const dt_tensor *want, char *why, size_t size) {
  int nd = dt_tensor_ndim(want);
  if (dt_tensor_ndim(got) != nd ||
      memcmp(dt_tensor_shape(got), dt_tensor_shape(want), sizeof(int64_t) * (size_t)nd) != 0) {
    snprintf(why, size, "shape differs");
    return false;
  }
  int64_t n = dt_tensor_numel(want);
  double *a = malloc(sizeof *a * (size_t)(n + 1)), *b = malloc(sizeof *b * (size_t)(n + 1));
  bool ok = a && b && dt_tensor_to_doubles(got, a, n) == DT_OK &&
            dt_tensor_to_doubles(want, b, n) == DT_OK;
  for (int64_t i = 0; ok && i < n; i++) {
    if (fabs(a[i] - b[i]) > 1e-4 + 1e-4 * fabs(b[i])) {
      snprintf(why, size, "element %lld is %g, expected %g", (long long)i, a[i], b[i]);
      ok = false;
    }
  }
  free(a);
  free(b);
  return ok;
}

typedef struct op_case {
  const char *name;
  binary_fn fn;
  int64_t a_shape[2], b_shape[2];
} op_case;

static const op_case cases[] = {
    {"add", op_add, {7, 5}, {7, 5}},
    {"mm", op_mm, {7, 6}, {6, 5}},
    {"sum", op_sum, {9, 5}, {1, 1}},
};

/* Placement choice k on one mesh dim for a 2-D tensor: R, S(0), S(1), P(sum). */
static dt_placement choice(int k) {
  switch (k) {
  case 0: return dt_replicate();
  case 1: return dt_shard(0);
  case 2: return dt_shard(1);
  default: return dt_partial(DT_REDUCE_SUM);
  }
}

/* Replicate, then redistribute: Partial placements cannot be distributed directly, and the
 * redistribution is itself traffic over the backend. */
static dt_status distribute(dt_mesh *mesh, dt_tensor *full, int ndim, const dt_placement *p,
                            dt_tensor **out) {
  dt_placement rep[2] = {dt_replicate(), dt_replicate()};
  dt_tensor *r = NULL;
  dt_status st = dt_dist_distribute_tensor(mesh, full, ndim, rep, &r);
  if (st == DT_OK) st = dt_dist_redistribute(r, ndim, p, out);
  dt_tensor_release(r);
  return st;
}

static void run_mesh(dt_comm *world, int ndim, const int *shape) {
  dt_mesh *mesh = NULL;
  CHECK_OK(dt_mesh_create(world, ndim, shape, NULL, &mesh));
  if (!mesh) return;
  int combos = 1;
  for (int m = 0; m < ndim; m++) combos *= 4;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const op_case *oc = &cases[c];
    dt_tensor *a = NULL, *b = NULL, *want = NULL;
    /* Same seed on every rank: every rank holds the same full tensors. */
    CHECK_OK(dt_randn(2, oc->a_shape, DT_F32, 11 + c, &a));
    CHECK_OK(dt_randn(2, oc->b_shape, DT_F32, 23 + c, &b));
    CHECK_OK(oc->fn(a, b, &want));
    for (int ka = 0; ka < combos; ka++) {
      for (int kb = 0; kb < combos; kb += oc->fn == op_sum ? combos : 1) {
        dt_placement pa[2], pb[2];
        for (int m = 0, x = ka, y = kb; m < ndim; m++, x /= 4, y /= 4) {
          pa[m] = choice(x % 4);
          pb[m] = choice(y % 4);
        }
        dt_tensor *da = NULL, *db = NULL, *dout = NULL, *full = NULL;
        dt_status st = distribute(mesh, a, ndim, pa, &da);
        if (st == DT_OK) st = distribute(mesh, b, ndim, pb, &db);
        if (st == DT_OK) st = oc->fn(da, db, &dout);
        if (st == DT_OK) st = dt_dist_full_tensor(dout, &full);
        char why[160] = "";
        bool ok = st == DT_OK && same_values(full, want, why, sizeof why);
        char p0[16], p1[16], q0[16], q1[16];
        CHECK(ok, "%s on mesh of %d dims, a (%s,%s) b (%s,%s): %s %s", oc->name, ndim,
              dt_placement_format(pa[0], p0, sizeof p0),
              ndim > 1 ? dt_placement_format(pa[1], p1, sizeof p1) : "-",
              dt_placement_format(pb[0], q0, sizeof q0),
              ndim > 1 ? dt_placement_format(pb[1], q1, sizeof q1) : "-", dt_status_string(st),
              why);
        dt_tensor_release(da);
        dt_tensor_release(db);
        dt_tensor_release(dout);
        dt_tensor_release(full);
      }
    }
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(want);
  }
  dt_mesh_destroy(mesh);
}

/* Bad input on one rank fails every rank together (no rank is left waiting). */
static void one_bad_rank(dt_comm *world) {
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  CHECK_OK(dt_mesh_create(world, 1, (int[]){size}, NULL, &mesh));
  /* from_local with run_check: the last rank's shard is one row short. */
  int64_t rows = (int64_t)(rank == size - 1 ? 1 : 2);
  dt_tensor *local = NULL, *d = NULL;
  CHECK_OK(dt_full(2, (int64_t[]){rows, 3}, 1, DT_F32, &local));
  dt_dist_from_local_options o = {
      .global_shape = (int64_t[]){2 * (int64_t)size, 3}, .global_ndim = 2, .run_check = true};
  dt_status st = dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_shard(0)}, &o, &d);
  CHECK(st == DT_ERR_INVALID && d == NULL, "from_local(run_check) with a misfit rank: %s",
        dt_status_string(st));
  dt_tensor_release(local);
  /* distribute_tensor_from whose source tensor does not match the declaration. */
  dt_tensor *src = NULL;
  if (rank == 0) CHECK_OK(dt_zeros(2, (int64_t[]){4, 4}, DT_F32, &src));
  st = dt_dist_distribute_tensor_from(mesh, src, 0, 2, (int64_t[]){4, 3}, DT_F32, 1,
                                      (dt_placement[]){dt_shard(0)}, &d);
  CHECK(st == DT_ERR_INVALID && d == NULL, "distribute_tensor_from with a bad source: %s",
        dt_status_string(st));
  dt_tensor_release(src);
  dt_mesh_destroy(mesh);
}

int main(void) {
  dt_comm *world = NULL;
  if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK) {
    fprintf(stderr, "dt_comm_init(mpi) failed: %s\n", dt_last_error());
    return 1;
  }
  int size = dt_comm_size(world);
  mpi_rank_for_messages = dt_comm_rank(world);
  run_mesh(world, 1, (int[]){size});
  if (size % 2 == 0 && size > 2) run_mesh(world, 2, (int[]){2, size / 2});
  one_bad_rank(world);
  int code = mpi_check_finish(world);
  dt_comm_destroy(world);
  return code;
}
