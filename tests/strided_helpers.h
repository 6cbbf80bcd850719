/* Helpers for the StridedShard tests (test_strided_shard.c, test_strided_layers.c): a whole
 * tensor of known values, element-for-element comparisons of whole tensors, a placement check
 * and the comm-ledger counts of a block of calls. They return a dt_status through RANK_CHECK
 * and RANK_OK, so they run on a rank's thread. */
#ifndef DT_TESTS_STRIDED_HELPERS_H
#define DT_TESTS_STRIDED_HELPERS_H

#include "comm_helpers.h"
/* Private header: placements are compared exactly (split factor included) with
 * dt__placements_equal. */
#include "distributed/dist_impl.h"
#include "reference.h"

/* The whole tensor of the given shape with element i = i + 1 (exact in f32). */
static inline dt_tensor *iota(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (double)(i + 1);
  dt_tensor *t = ref_tensor(ndim, shape, DT_F32, v);
  free(v);
  return t;
}

/* Checks that t (local) holds the values of `expect` (local), element for element, within
 * tol * (1 + |expected|). */
static inline dt_status same_values_tol(const char *what, const dt_tensor *t,
                                        const dt_tensor *expect, double tol) {
  RANK_CHECK(dt_tensor_numel(t) == dt_tensor_numel(expect), "%s: %lld elements, expected %lld",
             what, (long long)dt_tensor_numel(t), (long long)dt_tensor_numel(expect));
  double *x = ref_values(t), *y = ref_values(expect);
  int64_t bad = -1;
  for (int64_t i = 0; i < dt_tensor_numel(t) && bad < 0; i++) {
    if (fabs(x[i] - y[i]) > tol * (1 + fabs(y[i]))) bad = i;
  }
  double got = bad >= 0 ? x[bad] : 0, want = bad >= 0 ? y[bad] : 0;
  free(x);
  free(y);
  RANK_CHECK(bad < 0, "%s: element %lld is %g, expected %g", what, (long long)bad, got, want);
  return DT_OK;
}

/* The global value of t (distributed, gathered first, or local) equals `expect` (a local
 * tensor of the same shape) within tol. */
static inline dt_status full_equals_tol(const char *what, dt_tensor *t, const dt_tensor *expect,
                                        double tol) {
  dt_tensor *full = NULL;
  if (dt_tensor_is_distributed(t)) {
    RANK_OK(dt_dist_full_tensor(t, &full));
  } else {
    full = dt_tensor_retain(t);
  }
  dt_status st = same_values_tol(what, full, expect, tol);
  dt_tensor_release(full);
  return st;
}

/* Mesh dim m of t's placements is `want`. */
static inline dt_status placement_is(const char *what, const dt_tensor *t, int m,
                                     dt_placement want) {
  char a[32], b[32];
  dt_placement got = dt_dist_placements(t)[m];
  RANK_CHECK(dt__placements_equal(1, &got, &want), "%s: mesh dim %d is %s, expected %s", what, m,
             dt_placement_format(got, a, sizeof a), dt_placement_format(want, b, sizeof b));
  return DT_OK;
}

/* ---- The naive reference of a shard (every nesting of Shard and StridedShard) ---------- */

/* torch.chunk of `length` items over n: chunk c starts at c * ceil(length / n), clipped. */
static inline void naive_chunk(int64_t length, int n, int c, int64_t *start, int64_t *count) {
  int64_t piece = (length + n - 1) / n;
  *start = c * piece < length ? c * piece : length;
  *count = length - *start < piece ? length - *start : piece;
}

/* The global indices of tensor dim d this rank holds, in local order: every mesh dim that
 * shards d, in mesh-dim order, keeps its chunk of the list (S), or its chunk of each of the
 * f blocks of the list (SS). Returns how many; idx holds up to `cap`. */
static inline int64_t naive_indices(int64_t length, int d, int mesh_ndim, const dt_placement *pl,
                                    const int *mesh_shape, const int *coord, int64_t *idx,
                                    int64_t cap) {
  int64_t count = length;
  for (int64_t i = 0; i < length && i < cap; i++) idx[i] = i;
  for (int m = 0; m < mesh_ndim; m++) {
    if (!dt__is_sharding(pl[m]) || pl[m].dim != d) continue;
    int64_t f = pl[m].kind == DT_STRIDED_SHARD ? pl[m].split_factor : 1;
    int64_t block = count / f, kept = 0, start, take;
    naive_chunk(block, mesh_shape[m], coord[m], &start, &take);
    for (int64_t b = 0; b < f; b++) {
      for (int64_t j = 0; j < take; j++) idx[kept++] = idx[b * block + start + j];
    }
    count = kept;
  }
  return count;
}

#define NAIVE_MAX_LEN 64

/* This rank's expected shard under `pl` of the whole 1-D or 2-D tensor of values v. */
static inline dt_tensor *naive_shard(int ndim, const int64_t *shape, const double *v, int mesh_ndim,
                                     const dt_placement *pl, const int *mesh_shape,
                                     const int *coord) {
  int64_t idx[2][NAIVE_MAX_LEN], count[2] = {1, 1}, cols = ndim == 2 ? shape[1] : 1;
  idx[1][0] = 0;
  for (int d = 0; d < ndim; d++)
    count[d] = naive_indices(shape[d], d, mesh_ndim, pl, mesh_shape, coord, idx[d], NAIVE_MAX_LEN);
  double *local = malloc(sizeof(double) * (size_t)(count[0] * count[1] + 1));
  for (int64_t i = 0; i < count[0]; i++) {
    for (int64_t j = 0; j < count[1]; j++)
      local[i * count[1] + j] = v[idx[0][i] * cols + idx[1][j]];
  }
  int64_t local_shape[2] = {count[0], count[1]};
  dt_tensor *t = ref_tensor(ndim, local_shape, DT_F32, local);
  free(local);
  return t;
}

/* Releases every tensor listed, in order. */
#define RELEASE_ALL(...)                                                                           \
  do {                                                                                             \
    dt_tensor *release_all_[] = {__VA_ARGS__};                                                     \
    for (size_t i_ = 0; i_ < sizeof release_all_ / sizeof release_all_[0]; i_++)                   \
      dt_tensor_release(release_all_[i_]);                                                         \
  } while (0)

/* What the comm ledger saw between LEDGER_BEGIN and LEDGER_END. */
typedef struct ledger_counts {
  int64_t calls, all_to_all, bytes;
} ledger_counts;

#define LEDGER_BEGIN(l) RANK_OK(dt_comm_ledger_start(&(l)))

/* Stops and destroys the ledger l, leaving its counts in `counts` (a ledger_counts). */
#define LEDGER_END(l, counts)                                                                      \
  do {                                                                                             \
    RANK_OK(dt_comm_ledger_stop(l));                                                               \
    (counts).calls = dt_comm_ledger_count(l, NULL);                                                \
    (counts).all_to_all = dt_comm_ledger_count(l, "all_to_all");                                   \
    (counts).bytes = dt_comm_ledger_bytes(l, NULL);                                                \
    dt_comm_ledger_destroy(l);                                                                     \
    (l) = NULL;                                                                                    \
  } while (0)

/* Stops and destroys the ledger l, failing the rank unless no collective ran. */
#define LEDGER_END_ZERO(l, what)                                                                   \
  do {                                                                                             \
    ledger_counts zero_counts_;                                                                    \
    LEDGER_END(l, zero_counts_);                                                                   \
    RANK_CHECK(zero_counts_.calls == 0, "%s: %lld collectives, expected none", what,               \
               (long long)zero_counts_.calls);                                                     \
  } while (0)

/* A 1-D mesh over every rank of world and the whole tensor iota([n]). */
static inline dt_status mesh_and_iota_1d(dt_comm *world, int64_t n, dt_mesh **mesh,
                                         dt_tensor **full) {
  RANK_OK(mesh_1d(world, mesh));
  *full = iota(1, &n);
  return DT_OK;
}

/* A 1-D mesh over the n ranks of world, the whole tensor full = iota(shape) (ndim >= 2), it
 * with dims 0 and 1 flattened in full_flat (when not NULL), x = full distributed Shard(1), and
 * (when y is not NULL) x viewed as full_flat's shape in y: StridedShard(0, shape[0]). The caller
 * releases the tensors and destroys the mesh. */
static inline dt_status flat_of_shard_1(dt_comm *world, int ndim, const int64_t *shape,
                                        dt_mesh **mesh, dt_tensor **full, dt_tensor **full_flat,
                                        dt_tensor **x, dt_tensor **y) {
  int64_t flat[DT_MAX_DIMS];
  flat[0] = shape[0] * shape[1];
  for (int d = 2; d < ndim; d++) flat[d - 1] = shape[d];
  RANK_OK(mesh_1d(world, mesh));
  *full = iota(ndim, shape);
  if (full_flat) RANK_OK(dt_reshape(*full, ndim - 1, flat, full_flat));
  RANK_OK(dt_dist_distribute_tensor(*mesh, *full, 1, (dt_placement[]){dt_shard(1)}, x));
  if (y) RANK_OK(dt_view(*x, ndim - 1, flat, y));
  return DT_OK;
}

/* A 1-D or 2-D tensor placed on a 2-D mesh (the nested and outer StridedShard tests). */
typedef struct strided_case {
  int mesh_shape[2];
  int ndim;
  int64_t shape[2];
  dt_placement pl[2];
} strided_case;

/* This rank's shard of t (shape and values) is the naive slice of the whole tensor `full`
 * under pl on a 2-D mesh. */
static inline dt_status strided_shard_is_naive(const char *what, dt_tensor *t, dt_tensor *full,
                                               int ndim, const int64_t *shape,
                                               const int *mesh_shape, const dt_placement *pl,
                                               const int *coord) {
  double *v = ref_values(full);
  dt_tensor *expect = naive_shard(ndim, shape, v, 2, pl, mesh_shape, coord);
  free(v);
  dt_tensor *local = NULL;
  RANK_OK(dt_dist_to_local(t, &local));
  RANK_CHECK(local->ndim == ndim && local->shape[0] == expect->shape[0] &&
                 (ndim == 1 || local->shape[1] == expect->shape[1]),
             "%s: local shape [%lld, ...], expected [%lld, ...]", what, (long long)local->shape[0],
             (long long)expect->shape[0]);
  dt_status st = same_values_tol(what, local, expect, 0);
  RELEASE_ALL(local, expect);
  return st;
}

/* Redistributes x (placed as c says) to `to`, checking the result's shard against the naive
 * slice, its whole value, and the ledger's bytes against explain's; *bytes gets them. */
static inline dt_status strided_move_checked(const char *what, dt_tensor *x, dt_tensor *full,
                                             const strided_case *c, const dt_placement *to,
                                             const int *coord, int64_t *bytes) {
  char plan[512];
  int64_t explained = -1;
  RANK_OK(dt_dist_redistribute_explain(x, 2, to, plan, sizeof plan, &explained));
  dt_comm_ledger *l = NULL;
  ledger_counts n;
  dt_tensor *y = NULL;
  LEDGER_BEGIN(l);
  RANK_OK(dt_dist_redistribute(x, 2, to, &y));
  LEDGER_END(l, n);
  RANK_CHECK(n.bytes == explained, "%s: ledger %lld bytes, explain %lld (%.200s)", what,
             (long long)n.bytes, (long long)explained, plan);
  *bytes = n.bytes;
  dt_status st = strided_shard_is_naive(what, y, full, c->ndim, c->shape, c->mesh_shape, to, coord);
  if (!st) st = full_equals_tol(what, y, full, 0);
  dt_tensor_release(y);
  return st;
}

/* The iota of c's shape distributed as c->pl on mesh: its shard is the naive slice, its whole
 * the iota, and from_local of the shard with the global shape gives the same tensor back.
 * The caller releases *full, *x, *local and *back. */
static inline dt_status strided_round_trip(dt_mesh *mesh, const strided_case *c, const int *coord,
                                           dt_tensor **full, dt_tensor **x, dt_tensor **local,
                                           dt_tensor **back) {
  *full = iota(c->ndim, c->shape);
  RANK_OK(dt_dist_distribute_tensor(mesh, *full, 2, c->pl, x));
  RANK_OK(strided_shard_is_naive("distribute_tensor", *x, *full, c->ndim, c->shape, c->mesh_shape,
                                 c->pl, coord));
  RANK_OK(full_equals_tol("full_tensor", *x, *full, 0));
  RANK_OK(dt_dist_to_local(*x, local));
  dt_dist_from_local_options opt = {.global_shape = c->shape, .global_ndim = c->ndim};
  RANK_OK(dt_dist_from_local(mesh, *local, 2, c->pl, &opt, back));
  return full_equals_tol("from_local", *back, *full, 0);
}

#endif
