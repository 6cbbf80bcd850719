/* Async collective spans in the profiler: a work destroyed without a wait still ends its span. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- Async collective spans: a work destroyed without a wait still ends its span ----------- */

static dt_status async_span_rank(dt_comm *world, void *arg) {
  (void)arg;
  int r = dt_comm_rank(world);
  RANK_OK(dt_profiler_set_rank(r));
  int64_t n = 256;
  dt_tensor *t = NULL;
  RANK_OK(dt_ones(1, &n, DT_F32, &t));
  dt_work *waited = NULL, *unwaited = NULL;
  RANK_OK(dt_comm_all_reduce_async(world, t, DT_REDUCE_SUM, &waited));
  RANK_OK(dt_comm_all_reduce_async(world, t, DT_REDUCE_SUM, &unwaited));
  RANK_OK(dt_work_wait(waited));
  RANK_OK(dt_work_wait(waited)); /* a second wait records nothing more */
  dt_work_destroy(waited);
  dt_work_destroy(unwaited);
  float *p = dt_tensor_data(t);
  RANK_CHECK(p[0] == 4.0f && p[n - 1] == 4.0f, "values %g %g", p[0], p[n - 1]);
  dt_tensor_release(t);
  return DT_OK;
}

Test(profile_async_spans, async_spans_waited_and_unwaited) {
  dt_profiler *prof = NULL;
  OK(dt_profiler_create(&prof));
  OK(dt_profiler_start(prof));
  SPAWN_OK(2, async_span_rank, NULL);
  OK(dt_profiler_stop(prof));
  for (int r = 0; r < 2; r++) {
    int64_t spans = dt_profiler_event_count(prof, r, DT_PROFILER_LANE_COMM);
    /* each work: its issue-to-completion span, plus the wait's own span when the wait found it
     * still running; never more (a second wait adds nothing) */
    cr_assert(spans >= 2 && spans <= 4, "rank %d: %lld collective spans, expected 2 to 4", r,
              (long long)spans);
  }
  dt_profiler_destroy(prof);
}
