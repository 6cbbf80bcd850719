/*
 * libFuzzer target for the Chrome trace reader and the analysis behind `dtensor trace`.
 * Any input must give DT_OK with a usable trace, or an error status with a message and no
 * trace; never a crash, a leak, a hang or undefined behaviour (built with ASan + UBSan).
 * Build and run with fuzz/run.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dt_trace *trace = (dt_trace *)1;
  dt_status st = dt_trace_read_memory((const char *)data, size, &trace);
  if (st != DT_OK) {
    if (trace != NULL || dt_last_error()[0] == '\0') abort(); /* contract: no trace, a message */
    return 0;
  }
  dt_trace_stats stats;
  const char *labels[] = {"GPU", "CPU", ""};
  for (int i = 0; i < 3; i++) {
    if (dt_trace_compute_stats(trace, labels[i], i == 2 ? 1000.0 : 0.0, &stats) == DT_OK) {
      /* Unions can never exceed their parts or go negative. */
      if (stats.busy_us < 0 || stats.mm_us > stats.busy_us + 1e-6 * (1 + stats.busy_us) ||
          stats.overlap_us < 0) {
        abort();
      }
      /* Bounded event times keep every figure finite (the JSON output prints them all). */
      const double figures[] = {stats.start_us,    stats.end_us,      stats.total_us,
                                stats.busy_us,     stats.utilization, stats.mm_us,
                                stats.mm_fraction, stats.comm_us,     stats.comm_fraction,
                                stats.compute_us,  stats.overlap_us,  stats.overlap_fraction};
      for (size_t k = 0; k < sizeof figures / sizeof *figures; k++) {
        if (!isfinite(figures[k])) abort();
      }
    }
  }
  int64_t total = 0;
  for (int p = 0; p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info process;
    if (dt_trace_process(trace, p, &process)) abort();
    for (int l = 0; l < process.lanes; l++) {
      dt_trace_lane_info lane;
      if (dt_trace_lane(trace, p, l, &lane)) abort();
      total += lane.events;
      if (strlen(lane.name) > size || strlen(lane.tid) > size + 1) abort();
    }
    if (strlen(process.name) > size || strlen(process.labels) > size) abort();
  }
  if (total != dt_trace_event_count(trace)) abort();
  dt_trace_destroy(trace);
  return 0;
}
