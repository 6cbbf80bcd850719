/* The trace module stands alone: dtensor/trace.h is enough to read and analyse a trace, and
 * string pids and tids (keyed by core's dt__hash_bytes) keep processes and lanes apart. */
#include <criterion/criterion.h>
#include <string.h>

#include "dtensor/trace.h"

Test(trace_module, string_ids_stay_apart) {
  const char *text =
      "{\"traceEvents\":["
      "{\"ph\":\"X\",\"name\":\"mm\",\"pid\":\"a\",\"tid\":\"x\",\"ts\":0,\"dur\":2},"
      "{\"ph\":\"X\",\"name\":\"k\",\"pid\":\"b\",\"tid\":\"x\",\"ts\":1,\"dur\":3},"
      "{\"ph\":\"X\",\"name\":\"k\",\"pid\":\"a\",\"tid\":\"y\",\"ts\":5,\"dur\":1},"
      "{\"ph\":\"X\",\"name\":\"k\",\"pid\":\"a\",\"tid\":\"x\",\"ts\":7,\"dur\":1},"
      "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":\"b\",\"args\":{\"name\":\"B\"}}"
      "]}";
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_trace_event_count(trace), 4);
  cr_assert_eq(dt_trace_process_count(trace), 2);
  dt_trace_process_info a, b;
  cr_assert_eq(dt_trace_process(trace, 0, &a), DT_OK);
  cr_assert_eq(dt_trace_process(trace, 1, &b), DT_OK);
  cr_assert_str_eq(a.pid, "a");
  cr_assert_str_eq(b.pid, "b");
  cr_assert_str_eq(b.name, "B");
  cr_assert_eq(a.lanes, 2);
  cr_assert_eq(a.events, 3);
  cr_assert_float_eq(a.busy_us, 4.0, 1e-9);
  cr_assert_eq(b.lanes, 1);
  cr_assert_float_eq(b.busy_us, 3.0, 1e-9);
  dt_trace_lane_info lane;
  cr_assert_eq(dt_trace_lane(trace, 0, 1, &lane), DT_OK);
  cr_assert_str_eq(lane.tid, "y");
  cr_assert_eq(lane.events, 1);
  dt_trace_destroy(trace);
}

Test(trace_module, scanner_reports_byte_offset) {
  const char *text = "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\\q\"}]}";
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_ERR_INVALID);
  cr_assert_null(trace);
  cr_assert(strstr(dt_last_error(), "byte 35: bad escape") != NULL, "%s", dt_last_error());
}
