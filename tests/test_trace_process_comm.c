/* dt_trace_process_comm's argument checks on a small in-memory trace. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- dt_trace_process_comm's arguments ---------------------------------------------------- */

Test(trace_process_comm, trace_process_comm_arguments) {
  const char *json =
      "{\"traceEvents\":["
      "{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"name\":\"all_reduce\",\"cat\":\"collective\","
      "\"ts\":0,\"dur\":10},"
      "{\"ph\":\"X\",\"pid\":0,\"tid\":2,\"name\":\"mm\",\"cat\":\"kernel\",\"ts\":5,\"dur\":10},"
      "{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"name\":\"all_gather\",\"cat\":\"collective\","
      "\"ts\":8,\"dur\":4}]}";
  dt_trace *trace = NULL;
  OK(dt_trace_read_memory(json, strlen(json), &trace));
  dt_trace_comm_info info;
  OK(dt_trace_process_comm(trace, 0, 0, 0, &info));
  /* collectives [0, 12], kernel [5, 15]: overlap 7, exposed 5, span 15 */
  cr_assert(fabs(info.collective_us - 12) < 1e-9, "collective %g", info.collective_us);
  cr_assert(fabs(info.kernel_us - 10) < 1e-9, "kernel %g", info.kernel_us);
  cr_assert(fabs(info.overlap_us - 7) < 1e-9, "overlap %g", info.overlap_us);
  cr_assert(fabs(info.exposed_us - 5) < 1e-9, "exposed %g", info.exposed_us);
  cr_assert(fabs(info.span_us - 15) < 1e-9, "span %g", info.span_us);
  /* a window [6, 9]: collective 3, kernel 3, overlap 3, exposed 0 */
  OK(dt_trace_process_comm(trace, 0, 6, 9, &info));
  cr_assert(fabs(info.exposed_us) < 1e-9 && fabs(info.span_us - 3) < 1e-9, "window: %g %g",
            info.exposed_us, info.span_us);
  cr_assert_eq(dt_trace_process_comm(NULL, 0, 0, 0, &info), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_process_comm(trace, 0, 0, 0, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_process_comm(trace, 1, 0, 0, &info), DT_ERR_INDEX);
  cr_assert_eq(dt_trace_process_comm(trace, -1, 0, 0, &info), DT_ERR_INDEX);
  cr_assert(strstr(dt_last_error(), "dt_trace_process_comm"), "%s", dt_last_error());
  cr_assert_eq(dt_trace_process_comm(trace, 0, NAN, 1, &info), DT_ERR_INVALID);
  cr_assert_eq(dt_trace_process_comm(trace, 0, 0, INFINITY, &info), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_trace_process_comm"), "%s", dt_last_error());
  dt_trace_destroy(trace);
}
