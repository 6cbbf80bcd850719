/* The public wrapper's fallbacks for optional backend kinds (barrier, scatter, gather).
 *
 * No shipped backend leaves an optional kind out, so without this test the fallbacks in
 * comm/collectives.c would never run. The test backend here is the threads backend with a
 * `supports` mask of only the required kinds and a start entry that counts the kinds it is
 * asked for. Each rank swaps its world handle onto it, runs the optional collectives, swaps
 * back and runs them again on the real backend: the values must be the same. */
#include <criterion/criterion.h>
#include <stdatomic.h>

/* Private header: optional backend entries fall back in the public wrapper: the test builds
 * backends from the real ones with entries removed. */
#include "comm/comm_impl.h"
#include "comm_helpers.h"

#define WORLD 4

static dt_comm_backend required_only; /* threads, supports = DT_COLL_REQUIRED */
static dt_comm_backend no_all_to_all; /* threads without ALL_TO_ALL, SCATTER, GATHER */
static atomic_int kind_calls[DT_COLL_KIND_COUNT];

static dt_status counting_start(dt_comm *comm, dt_work *work) {
  atomic_fetch_add(&kind_calls[work->args.kind], 1);
  return dt__threads_backend.start(comm, work);
}

static void setup_backends(void) {
  required_only = dt__threads_backend;
  required_only.name = "threads-required-only";
  required_only.supports = DT_COLL_REQUIRED;
  required_only.start = counting_start;
  no_all_to_all = required_only;
  no_all_to_all.name = "threads-without-all-to-all";
  no_all_to_all.supports = DT_COLL_REQUIRED & ~DT_COLL_BIT(DT_COLL_ALL_TO_ALL);
  for (int k = 0; k < DT_COLL_KIND_COUNT; k++) atomic_store(&kind_calls[k], 0);
}

/* Runs one scatter or gather (sync or async) with root `root` and returns its output on this
 * rank: scatter's out on every rank, gather's out on the root (NULL elsewhere). */
static dt_status rooted(dt_comm *comm, bool scatter, bool async, int root, dt_dtype dtype,
                        dt_tensor **result) {
  int rank = dt_comm_rank(comm);
  int64_t part_shape[] = {2, 3}, whole_shape[] = {2 * WORLD, 3};
  dt_tensor *whole = NULL, *part = NULL;
  dt_status st = DT_OK;
  *result = NULL;
  if (scatter) {
    part = test_tensor(2, part_shape, dtype, DT_REDUCE_SUM, 100); /* overwritten */
    if (rank == root) whole = test_tensor(2, whole_shape, dtype, DT_REDUCE_SUM, rank);
  } else {
    part = test_tensor(2, part_shape, dtype, DT_REDUCE_SUM, rank);
    if (rank == root) whole = test_tensor(2, whole_shape, dtype, DT_REDUCE_SUM, 100);
  }
  dt_work *work = NULL;
  if (scatter) {
    st = async ? dt_comm_scatter_async(comm, whole, part, root, &work)
               : dt_comm_scatter(comm, whole, part, root);
  } else {
    st = async ? dt_comm_gather_async(comm, part, whole, root, &work)
               : dt_comm_gather(comm, part, whole, root);
  }
  if (st == DT_OK && async) {
    st = dt_work_wait(work);
    dt_work_destroy(work);
  }
  if (st == DT_OK) {
    *result = scatter ? part : whole;
    if (scatter)
      part = NULL;
    else
      whole = NULL;
  }
  dt_tensor_release(part);
  dt_tensor_release(whole);
  return st;
}

static bool same_values(dt_tensor *a, dt_tensor *b) {
  int64_t n = dt_tensor_numel(a);
  if (n != dt_tensor_numel(b)) return false;
  size_t es = dt_dtype_size(dt_tensor_dtype(a));
  return memcmp(dt_tensor_data(a), dt_tensor_data(b), (size_t)n * es) == 0;
}

static atomic_int barrier_arrived[8];

static dt_status fallback_rank(dt_comm *world, void *arg) {
  (void)arg;
  const dt_comm_backend *real = world->backend;
  int rank = dt_comm_rank(world);
  const dt_dtype dtypes[] = {DT_F32, DT_I64, DT_BF16};
  for (int d = 0; d < 3; d++) {
    for (int root = 0; root < WORLD; root += WORLD - 1) {
      for (int variant = 0; variant < 4; variant++) {
        bool scatter = variant < 2, async = variant % 2 == 1;
        dt_tensor *got = NULL, *want = NULL;
        world->backend = &required_only;
        dt_status st = rooted(world, scatter, async, root, dtypes[d], &got);
        world->backend = real;
        RANK_OK(st);
        RANK_OK(rooted(world, scatter, async, root, dtypes[d], &want));
        bool has = scatter || rank == root;
        RANK_CHECK((got != NULL) == has && (want != NULL) == has, "rank %d: output presence", rank);
        if (has) {
          /* Expected values from the definition, not only from the real backend. */
          int64_t rows = dt_tensor_numel(want) / 3;
          for (int64_t i = 0; i < dt_tensor_numel(want); i++) {
            double expected =
                scatter ? test_value(dtypes[d], DT_REDUCE_SUM, root, (int64_t)rank * 6 + i)
                        : test_value(dtypes[d], DT_REDUCE_SUM, (int)(i / 6), i % 6);
            double value = dt__load_as_double(dtypes[d], (char *)dt_tensor_data(want) +
                                                             i * (int64_t)dt_dtype_size(dtypes[d]));
            RANK_CHECK(value == expected, "%s root %d element %lld of %lld rows: %g, want %g",
                       scatter ? "scatter" : "gather", root, (long long)i, (long long)rows, value,
                       expected);
          }
          RANK_CHECK(same_values(got, want), "%s%s root %d dtype %s: the fallback differs",
                     scatter ? "scatter" : "gather", async ? "_async" : "", root,
                     dt_dtype_name(dtypes[d]));
        }
        dt_tensor_release(got);
        dt_tensor_release(want);
      }
    }
  }
  /* A barrier returns only once every rank has arrived: each round's counter must be full
   * after it on every rank, for the sync and the async form. */
  world->backend = &required_only;
  for (int round = 0; round < 8; round++) {
    atomic_fetch_add(&barrier_arrived[round], 1);
    dt_status st;
    if (round % 2) {
      dt_work *work = NULL;
      st = dt_comm_barrier_async(world, &work);
      if (st == DT_OK) {
        st = dt_work_wait(work);
        dt_work_destroy(work);
      }
    } else {
      st = dt_comm_barrier(world);
    }
    int arrived = atomic_load(&barrier_arrived[round]);
    if (st != DT_OK || arrived != WORLD) {
      world->backend = real;
      RANK_OK(st);
      RANK_CHECK(arrived == WORLD, "barrier round %d: %d of %d ranks arrived", round, arrived,
                 WORLD);
    }
  }
  /* Without all_to_all there is nothing to build scatter from: a clear error, and the rank
   * is still usable (nothing was started). */
  world->backend = &no_all_to_all;
  int64_t shape[] = {2, 3};
  dt_tensor *out = test_tensor(2, shape, DT_F32, DT_REDUCE_SUM, rank);
  dt_tensor *in =
      rank == 0 ? test_tensor(2, (int64_t[]){2 * WORLD, 3}, DT_F32, DT_REDUCE_SUM, 0) : NULL;
  dt_status st = dt_comm_scatter(world, in, out, 0);
  world->backend = real;
  dt_tensor_release(in);
  dt_tensor_release(out);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED, "scatter without all_to_all returned %s",
             dt_status_string(st));
  RANK_CHECK(strstr(dt_last_error(), "scatter") &&
                 strstr(dt_last_error(), "threads-without-all-to-all"),
             "message: %s", dt_last_error());
  RANK_OK(dt_comm_barrier(world));
  return DT_OK;
}

Test(comm_fallback, optional_kinds_built_from_required_ones) {
  setup_backends();
  SPAWN_OK(WORLD, fallback_rank, NULL);
  /* The optional kinds never reached the backend; they went through all_reduce/all_to_all:
   * 3 dtypes x 2 roots x 2 (sync, async) x 2 (scatter, gather) x WORLD ranks all_to_alls and
   * 8 barriers x WORLD all_reduces. */
  cr_assert_eq(atomic_load(&kind_calls[DT_COLL_SCATTER]), 0);
  cr_assert_eq(atomic_load(&kind_calls[DT_COLL_GATHER]), 0);
  cr_assert_eq(atomic_load(&kind_calls[DT_COLL_BARRIER]), 0);
  cr_assert_eq(atomic_load(&kind_calls[DT_COLL_ALL_TO_ALL]), 3 * 2 * 2 * 2 * WORLD);
  cr_assert_eq(atomic_load(&kind_calls[DT_COLL_ALL_REDUCE]), 8 * WORLD);
}

Test(comm_fallback, shipped_backends_declare_every_kind) {
  /* The shipped backends implement every kind themselves; the required set is part of it. */
  cr_assert_eq(dt__threads_backend.supports & DT_COLL_ALL, DT_COLL_ALL);
  cr_assert_eq(dt__fake_backend.supports & DT_COLL_ALL, DT_COLL_ALL);
  cr_assert_eq(DT_COLL_REQUIRED & DT_COLL_ALL, DT_COLL_REQUIRED);
  cr_assert_neq(DT_COLL_REQUIRED & DT_COLL_BIT(DT_COLL_ALL_TO_ALL), 0u);
}
