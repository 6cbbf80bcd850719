/*
 * libdtensor — trace analysis: reads any Chrome trace (ours or PyTorch's) and computes device
 * utilization, matrix share and comm overlap, draws it as an SVG timeline, and measures a
 * function's utilization (dt_benchmark_utilization).
 *
 * This is the top of the library: it reads files that the recorder (dtensor/profile.h) or any
 * other tool wrote, and nothing below it calls it.
 *
 * Analysis reads a trace file (object or bare-array form) into a dt_trace, then computes
 * utilization = union of device busy intervals / total time, as PyTorch's
 * torch/_functorch/benchmark_utils.py does, in C and fast (a million events in about a
 * second).
 *
 * Ownership: read/destroy pairs; destroy accepts NULL. Strings returned by accessors are
 * owned by the trace they come from and live as long as it does.
 */
#ifndef DTENSOR_TRACE_H
#define DTENSOR_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Analysis -------------------------------------------------------------------------- */

typedef struct dt_trace dt_trace;

/* The largest trace dt_trace_read_file reads: 4 GiB (the whole file is held in memory). */
#define DT_TRACE_DEFAULT_MAX_BYTES (4ull << 30)

/* Complete events must start and end within +-1e18 microseconds (31,000 years; PyTorch's
 * epoch-based timestamps are near 1.7e15), so that every span, sum and ratio the analysis
 * computes is finite. */
#define DT_TRACE_MAX_TIME_US 1e18

/* Reads a Chrome trace: `{"traceEvents":[...], ...}` or a bare `[...]` array (whose closing
 * bracket may be missing, as the format allows). Unknown keys and events other than complete
 * ("X") and metadata ("M") are skipped. The file may be a pipe or a device; at most
 * DT_TRACE_DEFAULT_MAX_BYTES are read, and input whose first byte cannot start a trace stops
 * being read there (so /dev/zero fails at once). The open never waits: a FIFO with no writer
 * is refused at once ("no writer"). Errors: DT_ERR_IO (cannot read the file, a directory, a
 * FIFO with no writer), DT_ERR_INVALID (larger than the limit; malformed JSON, a field of the
 * wrong type, a complete event without ts/dur/pid, a number or an event time out of range
 * (see DT_TRACE_MAX_TIME_US), nesting deeper than 512, with a message naming the byte
 * offset); DT_ERR_NOMEM. On failure *out is NULL. */
DT_API dt_status dt_trace_read_file(const char *path, dt_trace **out);

/* dt_trace_read_file reading at most max_bytes (0: DT_TRACE_DEFAULT_MAX_BYTES). */
DT_API dt_status dt_trace_read_file_ex(const char *path, uint64_t max_bytes, dt_trace **out);

/* The same from memory (size bytes, need not be NUL-terminated; the data is not kept). */
DT_API dt_status dt_trace_read_memory(const char *data, size_t size, dt_trace **out);

/* Frees a trace read by dt_trace_read_file/_memory. NULL is allowed. */
DT_API void dt_trace_destroy(dt_trace *trace);

/* Utilization figures of the complete events in processes whose process_labels contain the
 * device label. Events of category "user_annotation" (user ranges) are not device work and do
 * not count. All times are microseconds. */
typedef struct dt_trace_stats {
  int64_t events;     /* counted complete events */
  int processes;      /* processes carrying the device label */
  double start_us;    /* first counted event's start */
  double end_us;      /* last counted event's end */
  double total_us;    /* the given total, or end_us - start_us */
  double busy_us;     /* union of counted intervals: overlaps count once */
  double utilization; /* busy_us / total_us (0 when total_us is 0) */
  double mm_us;       /* union of matrix events (see dt_trace_is_matrix_name) */
  double mm_fraction; /* mm_us / total_us */
  double comm_us;     /* union of comm events: on a lane named "comm...", named "nccl...", or of
                         category "collective" (our GPU tracks: a collective on a rank's stream) */
  double comm_fraction;
  double compute_us;       /* union of the other counted events */
  double overlap_us;       /* time when comm and compute both run */
  double overlap_fraction; /* overlap_us / comm_us: the share of comm hidden by compute */
} dt_trace_stats;

/* The device label a NULL device_label stands for: "GPU" (PyTorch's, and the device processes
 * of our traces on a GPU) when a process label contains it, else "CPU" when one contains that
 * (libdtensor's traces on the CPU), else "GPU". A static string; NULL for a NULL trace. */
DT_API const char *dt_trace_device_label(const dt_trace *trace);

/* Computes the stats. device_label NULL means dt_trace_device_label(trace).
 * total_us <= 0 means the span of the counted events. Errors: DT_ERR_INVALID for NULL
 * arguments, an empty device_label (it would match every process), a total_us that is not
 * finite, or when no event counts and total_us <= 0 (the message names the label and lists
 * the labels the trace has, since a wrong device label is the usual cause). */
DT_API dt_status dt_trace_compute_stats(const dt_trace *trace, const char *device_label,
                                        double total_us, dt_trace_stats *out);

/* Communication of one process (rank) not hidden by its compute, over the window
 * [start_us, end_us] of trace time (events clipped to it; end_us <= start_us: the whole
 * trace): collective_us is the union of its events of category "collective" (or named
 * "nccl..."), kernel_us the union of its other events of category "kernel", overlap_us the
 * time both run, exposed_us = collective_us - overlap_us (the exposed, non-overlapped
 * communication), span_us the window's length (without a window, the time from its first to
 * its last event, user annotations excluded) and exposed_fraction = exposed_us / span_us (0
 * when span_us is 0). process indexes processes as dt_trace_process does. In our traces an async
 * collective's span runs from its issue to the wait that completes it, so compute between the two
 * overlaps it; a synchronous collective runs on the rank's own thread and is always exposed.
 * Errors: DT_ERR_INVALID (NULL trace or out, a window bound that is not finite), DT_ERR_INDEX
 * (process out of range). */
typedef struct dt_trace_comm_info {
  double collective_us;
  double kernel_us;
  double overlap_us;
  double exposed_us;
  double span_us;
  double exposed_fraction;
} dt_trace_comm_info;
DT_API dt_status dt_trace_process_comm(const dt_trace *trace, int process, double start_us,
                                       double end_us, dt_trace_comm_info *out);

/* True if an event of this name is matrix work: its name contains "gemm", "conv", "cutlass"
 * or "wgrad" (PyTorch's rule, case-sensitive), or, with an "aten::" prefix and a ".overload"
 * suffix removed, it is one of our matrix ops: mm, addmm, bmm, baddbmm, matmul, linear, mv,
 * addmv. */
DT_API bool dt_trace_is_matrix_name(const char *name);

/* Complete events in the trace (all processes), processes, and per-process lanes. */
DT_API int64_t dt_trace_event_count(const dt_trace *trace);
DT_API int dt_trace_process_count(const dt_trace *trace);

typedef struct dt_trace_process_info {
  const char *pid;    /* the pid as written: "3" or "Spans" */
  int64_t pid_number; /* the numeric pid (0 when the pid is a string) */
  const char *name;   /* process_name metadata, "" if none */
  const char *labels; /* process_labels metadata, "" if none */
  int lanes;          /* threads (tids) seen */
  int64_t events;     /* complete events */
  double busy_us;     /* union of its complete events, user annotations excluded */
} dt_trace_process_info;

typedef struct dt_trace_lane_info {
  const char *tid;    /* the tid as written */
  int64_t tid_number; /* numeric tid (0 when a string) */
  const char *name;   /* thread_name metadata, "" if none */
  int64_t events;
  double busy_us;
} dt_trace_lane_info;

/* Processes are indexed 0..count-1 in order of first appearance; lanes likewise within their
 * process. Errors: DT_ERR_INDEX for an index out of range, DT_ERR_INVALID for NULL. */
DT_API dt_status dt_trace_process(const dt_trace *trace, int index, dt_trace_process_info *out);
DT_API dt_status dt_trace_lane(const dt_trace *trace, int process, int lane,
                               dt_trace_lane_info *out);

/* Draws the trace as an SVG timeline: a row per process and lane, busy intervals as bars,
 * utilization for device_label (NULL: dt_trace_device_label) over total_us (<= 0: span) in the
 * title. The file is written as dt_profiler_write_chrome_trace writes its own. Errors:
 * DT_ERR_INVALID (NULL arguments, an empty device_label, a total_us that is not finite),
 * DT_ERR_IO. */
DT_API dt_status dt_trace_write_svg(const dt_trace *trace, const char *device_label,
                                    double total_us, const char *path);

/* ---- Benchmark utilization (torch/_functorch/benchmark_utils.py) ------------------------ */

typedef struct dt_benchmark_result {
  double time_us;     /* wall time of `runs` calls without the profiler */
  double profiled_us; /* wall time of `runs` calls with it */
  double busy_us;     /* device busy time in the profiled trace */
  double utilization; /* busy_us / time_us */
  double mm_fraction; /* matrix busy time / time_us */
  double comm_fraction;
  int64_t events; /* counted events in the trace */
} dt_benchmark_result;

/* dt_benchmark_write_chrome_trace into trace_dir/trace_name.json (trace_dir is created if missing),
 * then the trace's utilization and matrix share (device label "CPU") against the unprofiled time,
 * as PyTorch's benchmark_utilization. Errors as dt_benchmark_write_chrome_trace, and DT_ERR_INVALID
 * when the trace has no events (nothing in fn reached the recorder). */
DT_API dt_status dt_benchmark_utilization(dt_benchmark_fn fn, void *arg, const char *trace_dir,
                                          const char *trace_name, int runs,
                                          dt_benchmark_result *result);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_TRACE_H */
