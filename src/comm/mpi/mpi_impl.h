/* MPI backend: one rank per process under mpirun. Private layer shared by its files.
 *
 *   mpi_backend.c   the backend table: init, split, destroy, abort (the top file).
 *   mpi_coll.c      one start function per collective, with the paths for counts beyond
 *                   what an MPI int can hold.
 *   mpi_work.c      operations in flight (wait/test with the timeout), the debug fingerprints
 *                   and the agreement check.
 *   mpi_runtime.c   MPI_Init_thread / MPI_Finalize (at exit), the serialising lock used when
 *                   MPI gives less than MPI_THREAD_MULTIPLE, error strings, dtype mapping,
 *                   the NaN-propagating max/min operators, the timeout watchdog.
 * Each file calls only the files listed below it. The files are compiled only when CMake
 * finds an MPI (CMakeLists.txt); the backend registry (comm/registry.c) lists the backend
 * then.
 *
 * Synchronous collectives call the blocking MPI function (as fast as raw MPI: libnbc's
 * nonblocking collectives are several times slower on shared memory) under the watchdog,
 * which aborts the job with a clear message when the group's timeout passes. Asynchronous
 * ones use the MPI_I* forms; their requests live in an mp_op that dt_work_wait/test drive
 * with MPI_Testall and short sleeps, checking the timeout themselves. */
#ifndef DT_MPI_IMPL_H
#define DT_MPI_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm_impl.h"

/* Tags on a group's communicator: user send/recv data, their debug headers, the
 * point-to-point pieces of collectives too large for one MPI call, and the rounds of the
 * agreement check. Distinct tags keep the streams from matching each other; each stays
 * FIFO per pair of ranks. */
enum { MP_TAG_DATA = 0, MP_TAG_HEADER = 1, MP_TAG_COLL = 2, MP_TAG_CHECK = 16 };
/* MP_TAG_CHECK + k (k < 32): round k of the agreement check (dt__mp_check_agreement). */

/* One rank's state of one group (dt_comm->state). */
typedef struct mp_comm {
  MPI_Comm comm;
} mp_comm;

/* What happens when the MPI calls of an operation complete. */
typedef enum mp_post {
  MP_POST_NONE,
  MP_POST_NARROW, /* tmp holds f32 results: (divide, then) round into dst's bf16/f16 */
  MP_POST_COPY,   /* tmp holds the results in dst's dtype: copy, then divide for avg */
  MP_POST_RECV,   /* a recv: check what arrived against what was expected */
} mp_post;

/* A p2p message's debug header: what the sender called. */
typedef struct mp_header {
  int32_t dtype;
  int32_t pad;
  int64_t count;
  char call[192];
} mp_header;

/* The MPI side of one operation in flight (work->backend_ptr[0]); freed when it completes.
 * One allocation holds the struct, the requests and the statuses. */
typedef struct mp_op {
  int nreq, cap;
  MPI_Request *reqs;
  MPI_Status *statuses; /* recv only */
  int *ints;            /* counts and displacements of v-collectives (live until done) */
  mp_post post;
  bool divide; /* avg: divide the results by `world` */
  int world;
  dt_dtype dtype;
  void *tmp;     /* dt__alloc'd scratch (widened or displaced results), or NULL */
  void *results; /* NARROW and COPY: where in tmp the results are */
  void *dst;     /* where the results go */
  int64_t n;     /* elements of dst */
  int64_t chunk; /* recv: elements per message */
  int peer;
  bool has_header; /* recv in debug mode: reqs[0] receives `header` */
  mp_header header;
} mp_op;

/* ---- mpi_runtime.c ------------------------------------------------------------------- */

/* Initialises MPI once per process (or adopts an MPI the program initialised). */
dt_status dt__mp_runtime_init(void);

/* The largest count one MPI call is given; INT_MAX unless DT_MPI_MAX_COUNT (a test hook)
 * says less, so that the large-count paths can be exercised with small buffers. */
extern int64_t dt__mp_max_count;

/* Below MPI_THREAD_MULTIPLE every MPI call of the backend holds a lock, taken and released by
 * these (no-ops otherwise). They are functions of mpi_runtime.c, not inline ones: an inline
 * body here would make this header call up into the runtime that includes it, and a call
 * costs nothing next to the MPI call it guards. */
void dt__mp_lock(void);
void dt__mp_unlock(void);

/* Sets dt_last_error to "<op>: <call> failed on group ...: <MPI's error string>" and returns
 * DT_ERR_MISMATCH for a truncated message, DT_ERR_COMM otherwise. */
dt_status dt__mp_fail(int rc, const dt_comm *comm, const char *op, const char *call);
/* MPI's text for the error code rc ("MPI error code N" when MPI has none), NUL-terminated. */
void dt__mp_error_text(int rc, char text[MPI_MAX_ERROR_STRING + 1]);

/* Prints `message` to stderr and ends the whole job with MPI_Abort. */
_Noreturn void dt__mp_abort_job(const char *message);

/* Aborts the job for a collective that did not finish within the group's timeout. */
_Noreturn void dt__mp_timeout(const dt_comm *comm, const dt_coll_args *args, uint64_t seq);

/* Monotonic clock in nanoseconds. */
int64_t dt__mp_now_ns(void);

/* start + timeout, saturating (timeouts of years mean "never"). */
static inline int64_t dt__mp_deadline(int64_t start_ns, int64_t timeout_ms) {
  if (timeout_ms > (INT64_MAX - start_ns) / 1000000) return INT64_MAX;
  return start_ns + timeout_ms * 1000000;
}

/* Polling a request: spin for 50 us, then sleep in steps growing to 1 ms so that a rank
 * waiting for a late (or dead) peer leaves the CPU to the others; past the group's timeout
 * (counted from init) the job is aborted with a message naming the collective. */
typedef struct mp_backoff {
  int64_t deadline_ns;
  int64_t spin_until_ns; /* 0 until the first clock reading */
  long sleep_ns;
  unsigned round;
} mp_backoff;
void dt__mp_backoff_init(mp_backoff *backoff, const dt_comm *comm);
/* Call after each unsuccessful test. */
void dt__mp_backoff_step(mp_backoff *backoff, const dt_comm *comm, const dt_coll_args *args,
                         uint64_t seq);

/* Groups (dt_comm handles) of this process not yet destroyed. A process that exits while
 * this is nonzero may be leaving peers inside a collective (see runtime_finalize). */
extern atomic_int dt__mp_live_groups;

/* Records the calling thread's latest collective, named when the process leaves mid-job. */
void dt__mp_note_collective(const dt_comm *comm, const char *op_name, uint64_t seq);

/* Brackets a blocking MPI call: the watchdog thread aborts the job if the call is still
 * running when the group's timeout passes. Not nestable within one thread. */
void dt__mp_watch_begin(const dt_comm *comm, const char *op_name, uint64_t seq);
void dt__mp_watch_end(void);

/* The MPI datatype that moves elements of `dtype` (bf16/f16 as 16-bit integers). */
MPI_Datatype dt__mp_move_type(dt_dtype dtype);

/* The datatype and operator reducing `dtype` with `op` (avg as sum); bf16/f16 must be
 * widened to f32 first. Integer sum/prod run unsigned so they wrap; float max/min use
 * operators that propagate NaN as the other backends do. */
void dt__mp_reduce_types(dt_dtype dtype, dt_reduce_op op, MPI_Datatype *type, MPI_Op *mpi_op);

/* ---- mpi_work.c ---------------------------------------------------------------------- */

/* The backend's wait and test of a work (dt_comm_backend.wait/.test). */
dt_status dt__mp_wait(dt_comm *comm, dt_work *work);
dt_status dt__mp_test(dt_comm *comm, dt_work *work, bool *done);

/* A new op with room for `nreq` requests (and statuses when `statuses`) and `nints` ints;
 * NULL when out of memory (error set, naming `op_name`). */
mp_op *dt__mp_op_new(int64_t nreq, bool statuses, int64_t nints, const char *op_name);
void dt__mp_op_free(mp_op *op);

/* data[i] /= world for n f32 or f64 elements (avg). */
void dt__mp_divide(dt_dtype dtype, void *data, int64_t n, int world);

/* Completes `op` for a work started in blocking mode (waits for its requests, if any, then
 * runs the post step) and frees it. */
dt_status dt__mp_op_finish_blocking(dt_comm *comm, dt_work *work, mp_op *op);

/* The end of a collective that completed or failed: on GPU memory, its staging copied back
 * and freed (dt__mp_cuda_end); returns `status` or the copy's error. Without CUDA nothing is
 * staged. */
dt_status dt__mp_finish_device(dt_work *w, dt_status status);

/* DT_DEBUG_COLLECTIVES: compares this rank's call with every other rank's (a blocking
 * MPI_Allgather of fingerprints); DT_ERR_MISMATCH on every rank when they differ. */
/* `async` is part of the fingerprint: MPI does not match a blocking collective with a
 * nonblocking one, so ranks must issue a collective in the same form. */
dt_status dt__mp_check_fingerprints(dt_comm *comm, const dt_coll_args *args, uint64_t seq,
                                    bool async);

/* Always on: every rank of the group checks, with fixed-size point-to-point messages (an AND
 * over the group of a 64-bit hash of the fingerprint and of its complement), that all ranks called
 * the same collective with the same sizes, dtype, op and root before any data moves, so that a
 * disagreement can never make MPI write past a buffer. Waits with mp_backoff (a late peer
 * costs no CPU). On a mismatch every rank exchanges full fingerprints and returns
 * DT_ERR_MISMATCH naming each rank's call. */
dt_status dt__mp_check_agreement(dt_comm *comm, const dt_coll_args *args, uint64_t seq, bool async);

/* ---- mpi_coll.c ----------------------------------------------------------------------- */

dt_status dt__mp_start(dt_comm *comm, dt_work *work);

/* mpi_cuda.c (a CUDA build): GPU tensors. dt__mp_cuda_begin, at the start of a collective
 * on device memory, synchronizes the caller's stream and, unless MPI is CUDA-aware for this
 * collective, stages the buffers through pinned host memory (w->args then points at it;
 * w->backend_ptr[1] holds the staging). dt__mp_cuda_end, once the collective completed or
 * failed, copies the received bytes back and frees the staging; it returns `status` or its
 * own error. */
#ifdef DT_HAVE_CUDA
bool dt__mp_cuda_aware(void);
dt_status dt__mp_cuda_begin(dt_comm *comm, dt_work *w);
dt_status dt__mp_cuda_end(dt_work *w, dt_status status);
#endif

#endif /* DT_MPI_IMPL_H */
