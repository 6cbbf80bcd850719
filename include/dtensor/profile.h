/*
 * libdtensor — profiler: per-rank event recording, Chrome trace export, and the analysis of
 * any Chrome trace (ours or PyTorch's): device utilization, matrix share, comm overlap.
 *
 * Recording. One profiler is active at a time. While it runs, the library records what it
 * does (dispatched ops, kernels, collectives, redistributions) and the user's ranges into
 * per-thread buffers; a threads-backend rank is a thread and says which rank it is with
 * dt_profile_set_rank(). Recording costs one predictable branch when no profiler runs.
 * Start, stop, export and destroy must not race with threads that are still recording:
 * call them when the ranks are joined or between barriers.
 *
 * Export writes the Chrome Trace Event Format (JSON object form): one process per rank
 * labelled "CPU" (process_labels), a compute lane (tid 0) and a comm lane (tid 1) per rank,
 * complete events (ph "X") with ts and dur in microseconds. It opens in Perfetto UI and
 * chrome://tracing.
 *
 * Analysis reads a trace file (object or bare-array form) into a dt_trace, then computes
 * utilization = union of device busy intervals / total time, as PyTorch's
 * torch/_functorch/benchmark_utils.py does, in C and fast (a million events in about a
 * second).
 *
 * Ownership: create/destroy pairs; destroy accepts NULL. Strings returned by accessors are
 * owned by the object they come from and live as long as it does.
 */
#ifndef DTENSOR_PROFILE_H
#define DTENSOR_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Recording ------------------------------------------------------------------------- */

typedef struct dt_profiler dt_profiler;

/* The two lanes (Chrome trace threads) of a rank. */
typedef enum dt_profile_lane {
  DT_PROFILE_LANE_COMPUTE = 0,
  DT_PROFILE_LANE_COMM = 1,
} dt_profile_lane;

/* Creates a stopped profiler. Errors: DT_ERR_INVALID (out NULL), DT_ERR_NOMEM. */
DT_API dt_status dt_profiler_create(dt_profiler **out);

/* Destroys a profiler and its events (stopping it first if it runs). NULL is a no-op. */
DT_API void dt_profiler_destroy(dt_profiler *profiler);

/* Starts recording into this profiler. Starting a stopped profiler again appends to its
 * events. Errors: DT_ERR_INVALID if another profiler is running or profiler is NULL. */
DT_API dt_status dt_profiler_start(dt_profiler *profiler);

/* Stops recording. Errors: DT_ERR_INVALID if this profiler is not running. */
DT_API dt_status dt_profiler_stop(dt_profiler *profiler);

/* Says which rank the calling thread is, for the events it records from now on (default 0).
 * The threads backend calls it at the start of every rank thread. Errors: DT_ERR_INVALID for
 * a negative rank. */
DT_API dt_status dt_profile_set_rank(int rank);

/* User ranges: push opens a named range on the calling thread, pop closes the innermost one
 * and records it (category "user_annotation", compute lane) if a profiler ran when it was
 * opened and still runs. The name is copied. Ranges nest up to 64 deep. Both cost almost
 * nothing when no profiler runs. Errors: DT_ERR_INVALID for a NULL name, nesting deeper than
 * 64, or a pop with no open range. */
DT_API dt_status dt_profile_range_push(const char *name);
DT_API dt_status dt_profile_range_pop(void);

/* Prepares memory for `events` more events (64 bytes each), touched now, so that recording
 * them costs no page faults. Memory of destroyed profilers is kept for the next one (up to
 * 16 MiB) as well; dt_profile_release_memory frees all of it. Errors: DT_ERR_INVALID for a
 * negative count, DT_ERR_NOMEM. */
DT_API dt_status dt_profile_reserve(int64_t events);
DT_API void dt_profile_release_memory(void);

/* Events recorded so far for one rank (rank < 0: all ranks) on one lane (lane < 0: both),
 * and events dropped because memory ran out. */
DT_API int64_t dt_profiler_event_count(const dt_profiler *profiler, int rank, int lane);
DT_API int64_t dt_profiler_dropped_count(const dt_profiler *profiler);

/* Writes every rank's events into one Chrome trace file (the merged trace). The profiler may
 * be running or stopped (it must not be recorded into while writing). On failure no file is
 * left behind. Output files (these and dt_trace_write_svg) are written to a temporary beside
 * the path and renamed over it: a new file gets mode 0666 less the umask (which is never
 * changed, so concurrent writers are safe), a replaced file keeps its permission bits, a
 * symbolic link is followed and its target replaced (a link whose target does not exist is
 * refused), an existing device or FIFO is written in place. A write beyond RLIMIT_FSIZE fails
 * with DT_ERR_IO ("File too large") instead of killing the process with SIGXFSZ. Errors:
 * DT_ERR_INVALID (NULL arguments), DT_ERR_IO (cannot write the file). */
DT_API dt_status dt_profiler_write_chrome_trace(const dt_profiler *profiler, const char *path);

/* Writes one rank's events into a Chrome trace file of its own (for one file per rank).
 * A rank with no events gives a valid trace with only its metadata. */
DT_API dt_status dt_profiler_write_chrome_trace_rank(const dt_profiler *profiler, int rank,
                                                     const char *path);

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
 * being read there (so /dev/zero fails at once). Errors: DT_ERR_IO (cannot read the file),
 * DT_ERR_INVALID (larger than the limit; malformed JSON, a field of the wrong type, a
 * complete event without ts/dur/pid, a number or an event time out of range (see
 * DT_TRACE_MAX_TIME_US), nesting deeper than 512, with a message naming the byte offset);
 * DT_ERR_NOMEM. On failure *out is NULL. */
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
  double comm_us;     /* union of comm events: on a lane named "comm...", or named "nccl..." */
  double comm_fraction;
  double compute_us;       /* union of the other counted events */
  double overlap_us;       /* time when comm and compute both run */
  double overlap_fraction; /* overlap_us / comm_us: the share of comm hidden by compute */
} dt_trace_stats;

/* Computes the stats. device_label NULL means "GPU" (PyTorch's); our traces say "CPU".
 * total_us <= 0 means the span of the counted events. Errors: DT_ERR_INVALID for NULL
 * arguments, a total_us that is not finite, or when no event counts and total_us <= 0 (the
 * message lists the labels the trace has, since a wrong --device-label is the usual cause). */
DT_API dt_status dt_trace_compute_stats(const dt_trace *trace, const char *device_label,
                                        double total_us, dt_trace_stats *out);

/* True if an event of this name is matrix work: its name contains "gemm", "conv", "cutlass"
 * or "wgrad" (PyTorch's rule, case-sensitive), or, with an "aten::" prefix and a ".overload"
 * suffix removed, it is one of our matrix ops: mm, addmm, bmm, baddbmm, matmul, linear, mv,
 * addmv. */
DT_API bool dt_trace_is_matrix_name(const char *name);

/* Complete events in the trace (all processes), processes, and per-process lanes. */
DT_API int64_t dt_trace_event_count(const dt_trace *trace);
DT_API int dt_trace_process_count(const dt_trace *trace);

typedef struct dt_trace_process {
  const char *pid;    /* the pid as written: "3" or "Spans" */
  int64_t pid_number; /* the numeric pid (0 when the pid is a string) */
  const char *name;   /* process_name metadata, "" if none */
  const char *labels; /* process_labels metadata, "" if none */
  int lanes;          /* threads (tids) seen */
  int64_t events;     /* complete events */
  double busy_us;     /* union of its complete events, user annotations excluded */
} dt_trace_process;

typedef struct dt_trace_lane {
  const char *tid;    /* the tid as written */
  int64_t tid_number; /* numeric tid (0 when a string) */
  const char *name;   /* thread_name metadata, "" if none */
  int64_t events;
  double busy_us;
} dt_trace_lane;

/* Processes are indexed 0..count-1 in order of first appearance; lanes likewise within their
 * process. Errors: DT_ERR_INDEX for an index out of range, DT_ERR_INVALID for NULL. */
DT_API dt_status dt_trace_get_process(const dt_trace *trace, int index, dt_trace_process *out);
DT_API dt_status dt_trace_get_lane(const dt_trace *trace, int process, int lane,
                                   dt_trace_lane *out);

/* Draws the trace as an SVG timeline: a row per process and lane, busy intervals as bars,
 * utilization for device_label (NULL: "GPU") over total_us (<= 0: span) in the title. The
 * file is written as dt_profiler_write_chrome_trace writes its own. Errors: DT_ERR_INVALID
 * (NULL arguments, a total_us that is not finite), DT_ERR_IO. */
DT_API dt_status dt_trace_write_svg(const dt_trace *trace, const char *device_label,
                                    double total_us, const char *path);

/* ---- Benchmark utilities (torch/_functorch/benchmark_utils.py) -------------------------- */

/* The function measured. Returns DT_OK or an error, which stops the benchmark. */
typedef dt_status (*dt_benchmark_fn)(void *arg);

typedef struct dt_benchmark_result {
  double time_us;     /* wall time of `runs` calls without the profiler */
  double profiled_us; /* wall time of `runs` calls with it */
  double busy_us;     /* device busy time in the profiled trace */
  double utilization; /* busy_us / time_us */
  double mm_fraction; /* matrix busy time / time_us */
  double comm_fraction;
  int64_t events; /* counted events in the trace */
} dt_benchmark_result;

/* Runs fn 5 times to warm up, `runs` times timed without the profiler, then `runs` times
 * under a profiler whose trace goes to path (dt_dump_chrome_trace). Writes time_us, the
 * unprofiled wall time of the timed runs. Errors: fn's, DT_ERR_INVALID, DT_ERR_IO. */
DT_API dt_status dt_dump_chrome_trace(dt_benchmark_fn fn, void *arg, const char *path, int runs,
                                      double *time_us);

/* dt_dump_chrome_trace into trace_dir/trace_name.json (trace_dir is created if missing), then
 * the trace's utilization and matrix share (device label "CPU") against the unprofiled time,
 * as PyTorch's benchmark_utilization. Errors as dt_dump_chrome_trace, and DT_ERR_INVALID when
 * the trace has no events (nothing in fn reached the recorder). */
DT_API dt_status dt_benchmark_utilization(dt_benchmark_fn fn, void *arg, const char *trace_dir,
                                          const char *trace_name, int runs,
                                          dt_benchmark_result *result);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_PROFILE_H */
