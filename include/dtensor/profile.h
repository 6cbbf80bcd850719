/*
 * libdtensor — profiler: per-rank event recording and Chrome trace export. The analysis of a
 * trace (utilization, matrix share, comm overlap, SVG) is dtensor/trace.h, a module above
 * every other: the recorder sits low, next to core, because ops, comm and distributed record
 * into it.
 *
 * Recording. One profiler is active at a time. While it runs, the library records what it
 * does (dispatched ops, kernels, collectives, redistributions) and the user's ranges into
 * per-thread buffers; a threads-backend rank is a thread and says which rank it is with
 * dt_profiler_set_rank(). Recording costs one predictable branch when no profiler runs.
 * Start, stop, export and destroy must not race with threads that are still recording:
 * call them when the ranks are joined or between barriers.
 *
 * Export writes the Chrome Trace Event Format (JSON object form): one process per rank
 * labelled "CPU" (process_labels), a compute lane (tid 0) and a comm lane (tid 1) per rank,
 * complete events (ph "X") with ts and dur in microseconds. It opens in Perfetto UI and
 * chrome://tracing.
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
typedef enum dt_profiler_lane {
  DT_PROFILER_LANE_COMPUTE = 0,
  DT_PROFILER_LANE_COMM = 1,
} dt_profiler_lane;

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
DT_API dt_status dt_profiler_set_rank(int rank);

/* User ranges: push opens a named range on the calling thread, pop closes the innermost one
 * and records it (category "user_annotation", compute lane) if a profiler ran when it was
 * opened and still runs. The name is copied. Ranges nest up to 64 deep. Both cost almost
 * nothing when no profiler runs. Errors: DT_ERR_INVALID for a NULL name, nesting deeper than
 * 64, or a pop with no open range. */
DT_API dt_status dt_profiler_range_push(const char *name);
DT_API dt_status dt_profiler_range_pop(void);

/* Prepares memory for `events` more events (64 bytes each), touched now, so that recording
 * them costs no page faults. Memory of destroyed profilers is kept for the next one (up to
 * 16 MiB) as well; dt_profiler_release_memory frees all of it. Errors: DT_ERR_INVALID for a
 * negative count, DT_ERR_NOMEM. */
DT_API dt_status dt_profiler_reserve(int64_t events);
DT_API void dt_profiler_release_memory(void);

/* Events recorded so far for one rank (rank < 0: all ranks) on one lane (lane < 0: both),
 * and events dropped because memory ran out. */
DT_API int64_t dt_profiler_event_count(const dt_profiler *profiler, int rank, int lane);
DT_API int64_t dt_profiler_dropped_count(const dt_profiler *profiler);

/* Writes every rank's events into one Chrome trace file (the merged trace). The profiler may
 * be running or stopped (it must not be recorded into while writing). On failure no file is
 * left behind. Output files (these and dt_trace_write_svg) are written to a temporary beside
 * the path, fsynced and renamed over it: a new file gets mode 0666 less the umask (which is
 * never changed, so concurrent writers are safe), narrowed to the bits of this user's file it
 * replaces; a symbolic link at the path is replaced, never followed (its target is untouched);
 * an existing device is written in place, a FIFO too when a program reads it (else refused,
 * never waited on); a directory is refused. A write beyond RLIMIT_FSIZE fails
 * with DT_ERR_IO ("File too large") instead of killing the process with SIGXFSZ. Errors:
 * DT_ERR_INVALID (NULL arguments), DT_ERR_IO (cannot write the file). */
DT_API dt_status dt_profiler_write_chrome_trace(const dt_profiler *profiler, const char *path);

/* Writes one rank's events into a Chrome trace file of its own (for one file per rank).
 * A rank with no events gives a valid trace with only its metadata. */
DT_API dt_status dt_profiler_write_chrome_trace_rank(const dt_profiler *profiler, int rank,
                                                     const char *path);

/* ---- Benchmark helper (torch/_functorch/benchmark_utils.py) ----------------------------- */

/* The function measured. Returns DT_OK or an error, which stops the benchmark. */
typedef dt_status (*dt_benchmark_fn)(void *arg);

/* Runs fn 5 times to warm up, `runs` times timed without the profiler, then `runs` times
 * under a profiler whose trace goes to path (dt_benchmark_write_chrome_trace). Writes time_us, the
 * unprofiled wall time of the timed runs. Errors: fn's, DT_ERR_INVALID, DT_ERR_IO. */
DT_API dt_status dt_benchmark_write_chrome_trace(dt_benchmark_fn fn, void *arg, const char *path,
                                                 int runs, double *time_us);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_PROFILE_H */
