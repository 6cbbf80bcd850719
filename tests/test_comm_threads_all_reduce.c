/* The threads backend's fused 2-rank f32 all_reduce with odd sizes, and both ranks passing
 * the same buffer. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- Threads all_reduce on 2 ranks (the fused f32 sum) with odd sizes and shared buffers -- */

static dt_tensor *shared_buffer; /* one tensor both ranks pass */

static dt_status all_reduce_rank(dt_comm *world, void *arg) {
  (void)arg;
  int r = dt_comm_rank(world);
  int64_t sizes[] = {0, 1, 3, 17, 1001};
  for (int k = 0; k < 5; k++) {
    dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX};
    for (int o = 0; o < 3; o++) {
      dt_tensor *t = NULL;
      RANK_OK(dt_empty(1, &sizes[k], DT_F32, &t));
      float *p = dt_tensor_data(t);
      for (int64_t i = 0; i < sizes[k]; i++) p[i] = (float)(i % 5 + r * 10);
      RANK_OK(dt_comm_all_reduce(world, t, ops[o]));
      for (int64_t i = 0; i < sizes[k]; i++) {
        float x = (float)(i % 5), y = (float)(i % 5 + 10);
        float want = ops[o] == DT_REDUCE_SUM ? x + y : ops[o] == DT_REDUCE_AVG ? (x + y) / 2 : y;
        RANK_CHECK(p[i] == want, "n %lld op %d: [%lld] = %g, expected %g", (long long)sizes[k], o,
                   (long long)i, p[i], want);
      }
      dt_tensor_release(t);
    }
  }
  /* A view at an offset of a larger buffer, contiguous: only the view changes. */
  int64_t n = 8, four = 4;
  dt_tensor *big = NULL, *view = NULL;
  RANK_OK(dt_ones(1, &n, DT_F32, &big));
  RANK_OK(dt_narrow(big, 0, 2, four, &view));
  RANK_OK(dt_comm_all_reduce(world, view, DT_REDUCE_SUM));
  float *b = dt_tensor_data(big);
  for (int i = 0; i < 8; i++) {
    float want = i >= 2 && i < 6 ? 2.0f : 1.0f;
    RANK_CHECK(b[i] == want, "view: big[%d] = %g, expected %g", i, b[i], want);
  }
  /* Non-contiguous: an error naming the function. */
  dt_tensor *m = NULL, *mt = NULL;
  RANK_OK(dt_ones(2, (int64_t[]){2, 3}, DT_F32, &m));
  RANK_OK(dt_transpose(m, 0, 1, &mt));
  dt_status st = dt_comm_all_reduce(world, mt, DT_REDUCE_SUM);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "all_reduce"), "%s: %s",
             dt_status_string(st), dt_last_error());
  dt_tensor_release(mt);
  dt_tensor_release(m);
  dt_tensor_release(view);
  dt_tensor_release(big);
  /* An async all_reduce destroyed without a wait: the destroy waits, the values are there. */
  dt_tensor *a = NULL;
  RANK_OK(dt_full(1, &n, 1.5 + r, DT_F32, &a));
  dt_work *work = NULL;
  RANK_OK(dt_comm_all_reduce_async(world, a, DT_REDUCE_SUM, &work));
  dt_work_destroy(work);
  float *ap = dt_tensor_data(a);
  for (int i = 0; i < 8; i++) RANK_CHECK(ap[i] == 4.0f, "async: [%d] = %g", i, ap[i]);
  dt_tensor_release(a);
  return DT_OK;
}

Test(comm_threads_all_reduce, threads_all_reduce_two_ranks_odd_sizes) {
  SPAWN_OK(2, all_reduce_rank, NULL);
}

/* Both ranks pass the same tensor: every rank's contribution is that buffer, so the sum is
 * twice it (the fused pass must not read a value the other rank already doubled). */
static dt_status shared_rank(dt_comm *world, void *arg) {
  (void)arg;
  RANK_OK(dt_comm_barrier(world));
  RANK_OK(dt_comm_all_reduce(world, shared_buffer, DT_REDUCE_SUM));
  return DT_OK;
}

Test(comm_threads_all_reduce, threads_all_reduce_same_buffer_on_both_ranks) {
  int64_t n = 4099;
  OK(dt_empty(1, &n, DT_F32, &shared_buffer));
  float *p = dt_tensor_data(shared_buffer);
  for (int64_t i = 0; i < n; i++) p[i] = (float)(i % 13);
  dt_status st = dt_comm_spawn(2, shared_rank, NULL);
  if (st == DT_OK) {
    for (int64_t i = 0; i < n; i++)
      cr_assert_eq(p[i], (float)(2 * (i % 13)), "[%lld] = %g", (long long)i, p[i]);
  } else {
    cr_assert(strstr(dt_last_error(), "all_reduce"), "%s", dt_last_error());
  }
  dt_tensor_release(shared_buffer);
}
