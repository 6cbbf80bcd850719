/*
 * libdtensor — process groups and collectives.
 *
 * A dt_comm is a process group: this rank's view of a set of `size` ranks numbered
 * 0..size-1. Three backends implement it behind one interface:
 *
 *   "threads"  ranks are threads of one process (dt_comm_spawn). Collectives read the peers'
 *              buffers directly (zero copy). The default, used by tests and the demo.
 *   "mpi"      one rank per process under mpirun (built when CMake finds an MPI, else
 *              DT_ERR_UNSUPPORTED). Synchronous collectives are the blocking MPI calls;
 *              async ones the MPI_I* forms. A timeout or dt_comm_abort ends the whole job
 *              (MPI_Abort) with a clear message on stderr instead of hanging. See
 *              docs/mpi_backend.md.
 *   "nccl"     one rank per GPU (a build with CUDA and NCCL): dt_comm_nccl_create over a
 *              threads world (one rank per thread) or an MPI world (one per process), or
 *              dt_comm_init under mpirun. Moves GPU memory only. See docs/gpu-distributed.md.
 *   "fake"     one process impersonating rank r of W (dt_comm_init): every collective
 *              validates its arguments and completes at once WITHOUT moving data. Output
 *              tensors are left exactly as they were (their shapes are the caller's).
 *
 * Rules that hold for every collective:
 *   - Every rank of the group calls the same collectives in the same order, with matching
 *     dtypes, sizes and roots. Mismatches are detected where the backend can (always on
 *     the threads backend; with DT_DEBUG_COLLECTIVES=1 on the others) and return
 *     DT_ERR_MISMATCH on every rank, with a message naming what each rank called.
 *   - Tensors are borrowed and must be contiguous (DT_ERR_INVALID otherwise). Counts are
 *     rows along dim 0; every other dim must agree between input and output.
 *   - Bad arguments (NULL, wrong dtype or size for the group, root out of range,
 *     non-contiguous) fail on the calling rank BEFORE any communication, so they never
 *     hang the group; the message names the collective and the argument.
 *   - A collective whose peers do not arrive within the group's timeout returns
 *     DT_ERR_TIMEOUT (message: op, group, sequence number, missing ranks) and aborts the
 *     group. After an abort (dt_comm_abort, a failing rank under dt_comm_spawn, a timeout)
 *     pending and later collectives return DT_ERR_ABORTED instead of hanging.
 *   - Each collective has an `_async` form that starts it and hands back a dt_work. Until
 *     the work completes, the tensors AND the count arrays passed to it must stay alive
 *     and untouched (as with MPI's nonblocking calls). The synchronous form is the async
 *     form followed by dt_work_wait. On the MPI backend every rank must issue a given
 *     collective in the same form (all sync or all async): MPI matches a blocking
 *     collective only with blocking ones (DT_DEBUG_COLLECTIVES=1 reports a mix). A dt_comm handle
 * (and its works) belongs to one thread at a time: the rank that uses it.
 *
 * Reduction dtypes: every dtype. bf16 and f16 accumulate in f32. Integer sum and prod wrap
 * around. For bool, sum and max are logical or, prod and min logical and. avg needs a
 * floating dtype (DT_ERR_DTYPE otherwise). max/min propagate NaN.
 */
#ifndef DTENSOR_COMM_H
#define DTENSOR_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_comm dt_comm;
typedef struct dt_work dt_work;

/* Reduction operators of all_reduce and reduce_scatter. */
typedef enum dt_reduce_op {
  DT_REDUCE_SUM = 0,
  DT_REDUCE_AVG = 1,
  DT_REDUCE_MAX = 2,
  DT_REDUCE_MIN = 3,
  DT_REDUCE_PROD = 4,
} dt_reduce_op;

/* "sum", "avg", "max", "min", "prod"; "invalid" otherwise. */
DT_API const char *dt_reduce_op_name(dt_reduce_op op);

/* Default timeout of a group: 10 minutes. DT_COMM_TIMEOUT_MS overrides it for new groups. */
#define DT_COMM_DEFAULT_TIMEOUT_MS 600000

/* Most ranks a threads-backend world may have, and most ranks of any group. */
#define DT_COMM_MAX_THREADS 1024
#define DT_COMM_MAX_WORLD 1048576

/* ---- Creating groups ------------------------------------------------------------------ */

/* The function each rank runs under dt_comm_spawn. `world` is this rank's handle to the whole
 * group; it is owned by dt_comm_spawn and valid until fn returns (dt_comm_destroy on it does
 * nothing). Return DT_OK, or an error status to fail the run. */
typedef dt_status (*dt_rank_fn)(dt_comm *world, void *arg);

/* Runs fn(world, arg) on world_size threads (threads backend), one per rank, and returns
 * when all have returned. Returns DT_OK if every rank returned DT_OK, else the first
 * failing status in time, with dt_last_error() set to "rank R: <that rank's message>".
 * A rank whose fn fails aborts the world: the others' pending and later collectives return
 * DT_ERR_ABORTED. A rank that returns while peers wait for it in a collective makes that
 * collective fail with DT_ERR_ABORTED too, rather than hang. Sub-groups made with
 * dt_comm_split and meshes made on `world` must be destroyed before fn returns: a rank that
 * leaves some is reported through the log callback (DT_LOG_WARN, "dt_comm_spawn: rank R
 * returned without destroying M meshes ... and G groups ..."; the status is unchanged), and
 * they must not be used after it.
 * Errors: DT_ERR_INVALID (world_size outside 1..DT_COMM_MAX_THREADS, NULL fn),
 * DT_ERR_NOMEM, DT_ERR_INTERNAL (thread creation failed). */
DT_API dt_status dt_comm_spawn(int world_size, dt_rank_fn fn, void *arg);

/* Options of dt_comm_init. Zero-initialise (`dt_comm_options o = {0};`) and set what you
 * need: zero / NULL fields mean "default". */
typedef struct dt_comm_options {
  /* "fake", "mpi", "nccl" or "threads"; NULL: the DT_BACKEND environment variable, else
   * "threads". */
  const char *backend;
  /* fake: the rank to impersonate and the world size (default rank 0 of 1). With
   * world_size 0 the environment variables DT_FAKE_RANK and DT_FAKE_WORLD are used (a value
   * that is not a whole integer in range makes dt_comm_init fail with DT_ERR_INVALID). */
  int rank;
  int world_size;
  /* Timeout of every collective in ms; 0: DT_COMM_TIMEOUT_MS, else 10 minutes (a
   * DT_COMM_TIMEOUT_MS that is not a positive integer is logged once and ignored). */
  int64_t timeout_ms;
} dt_comm_options;

/* Creates the world group of this process for a process backend and hands it to the
 * caller (destroy with dt_comm_destroy). opts may be NULL (all defaults).
 *   "fake":    rank opts->rank of opts->world_size (1..DT_COMM_MAX_WORLD).
 *   "threads": a world of one rank (use dt_comm_spawn for more; world_size > 1 is an error).
 *   "mpi":     this process's rank of MPI_COMM_WORLD (a duplicate of it; opts->rank and
 *              world_size are ignored). Initialises MPI on first use (MPI_THREAD_MULTIPLE
 *              when offered; below that the backend serialises its MPI calls and the
 *              program must not call MPI concurrently) and finalises it at exit if it did;
 *              an MPI the program initialised itself is used as is. DT_ERR_UNSUPPORTED in a
 *              build without MPI.
 * Errors: DT_ERR_INVALID (NULL out, unknown backend name, rank outside the world),
 * DT_ERR_UNSUPPORTED, DT_ERR_NOMEM. On failure *out is NULL. */
DT_API dt_status dt_comm_init(const dt_comm_options *opts, dt_comm **out);

/* An NCCL group over the ranks of `bootstrap` (a build with CUDA and NCCL): the threads world
 * under dt_comm_spawn (one rank per thread) or an MPI world (one rank per process). Collective
 * over bootstrap: every rank calls it. Rank r of bootstrap is rank r of the new group, on GPU
 * `device`, or with -1 on its index among the bootstrap's ranks on its host. The ranks agree on
 * the GPUs before any NCCL call, so a refusal reaches every rank: NCCL refuses two ranks on
 * one GPU (same host and PCI bus id) and so does this, with DT_ERR_UNSUPPORTED saying so
 * (ranks sharing a GPU can use the threads backend on CUDA tensors). The group moves the
 * memory of its rank's GPU only; its collectives are queued on a communication stream after
 * the calling thread's current stream and polled with the group's timeout (inherited from
 * bootstrap): an NCCL or CUDA error or the deadline aborts the world (ncclCommAbort) and
 * pending and later collectives return DT_ERR_ABORTED. bootstrap must outlive the group (it is
 * used only at creation, and under dt_comm_spawn its abort is followed). Destroy the group with
 * dt_comm_destroy. Errors: DT_ERR_INVALID (NULL, device < -1 or past the count),
 * DT_ERR_UNSUPPORTED (no NCCL in this build, no CUDA device on a rank, two ranks on one GPU),
 * DT_ERR_COMM / DT_ERR_TIMEOUT (NCCL's initialisation failed or did not finish), DT_ERR_NOMEM
 * and the bootstrap's collective errors. On failure *out is NULL. */
DT_API dt_status dt_comm_nccl_create(dt_comm *bootstrap, int device, dt_comm **out);

/* Splits comm into disjoint sub-groups, one per distinct color >= 0, ordered by (key,
 * rank in comm). Collective: every rank of comm must call it. A rank passing a negative
 * color joins no group and gets *out = NULL with DT_OK. The new group inherits comm's
 * timeout. Destroy it with dt_comm_destroy. On the fake backend every rank is assumed to
 * pass the caller's color, so the result has comm's size and rank.
 * Errors: DT_ERR_INVALID (NULL), DT_ERR_NOMEM, and the collective errors (timeout,
 * abort). */
DT_API dt_status dt_comm_split(dt_comm *comm, int color, int key, dt_comm **out);

/* Releases this rank's handle. Sub-group state shared between ranks lives until its last
 * member destroys its handle. Pending works must be waited or released first. NULL is
 * allowed; the world handle given by dt_comm_spawn is ignored (dt_comm_spawn owns it).
 * Meshes made on the group must be destroyed first: any left is reported through the log
 * callback (DT_LOG_WARN, naming the group, the rank and the count). */
DT_API void dt_comm_destroy(dt_comm *comm);

/* Aborts the group and every group of its world: pending and later collectives on every
 * rank return DT_ERR_ABORTED with a message carrying `reason` (may be NULL). On the MPI
 * backend this ends the job; on the fake backend (no peers) it does nothing. NULL comm is
 * ignored. */
DT_API void dt_comm_abort(dt_comm *comm, const char *reason);

/* This rank's number in the group, the group's size, the backend name ("threads", "fake",
 * "mpi"). comm must be valid. */
DT_API int dt_comm_rank(const dt_comm *comm);
DT_API int dt_comm_size(const dt_comm *comm);
DT_API const char *dt_comm_backend_name(const dt_comm *comm);

/* A number identifying the group, unique within the process; on the threads backend it is
 * equal on every rank of the group. */
DT_API uint64_t dt_comm_id(const dt_comm *comm);

/* A name used in error messages ("world", "mesh 1 dim 'tp'"); set it per rank (copied,
 * truncated to 63 characters). */
DT_API const char *dt_comm_name(const dt_comm *comm);
DT_API void dt_comm_set_name(dt_comm *comm, const char *name);

/* Timeout (ms, > 0) of this rank's collectives on the group. Errors: DT_ERR_INVALID. */
DT_API dt_status dt_comm_set_timeout(dt_comm *comm, int64_t timeout_ms);
DT_API int64_t dt_comm_timeout(const dt_comm *comm);

/* ---- Asynchronous work handles --------------------------------------------------------- */

/* Blocks until the collective completes and returns its status (DT_OK, or DT_ERR_TIMEOUT,
 * DT_ERR_ABORTED, DT_ERR_MISMATCH, DT_ERR_COMM with dt_last_error() set). May be called
 * again: returns the same status. Errors: DT_ERR_INVALID for NULL. */
DT_API dt_status dt_work_wait(dt_work *work);

/* Sets *done without blocking (it may progress the collective a little). Once *done is
 * true, dt_work_wait returns the final status at once. Errors: DT_ERR_INVALID (NULL). */
DT_API dt_status dt_work_test(dt_work *work, bool *done);

/* Destroys a work handle, waiting for the collective first if it has not completed (so
 * the buffers are no longer in use when it returns). NULL is allowed. */
DT_API void dt_work_destroy(dt_work *work);

/* ---- Collectives ------------------------------------------------------------------------
 * Each returns DT_OK or an error (see the rules at the top). The `_async` form hands the
 * caller a work through *work (set to NULL on failure) that must be destroyed with
 * dt_work_destroy. */

/* Reduces `tensor` element-wise over all ranks, in place: afterwards every rank holds the
 * result. Errors: DT_ERR_INVALID (NULL, non-contiguous, bad op), DT_ERR_DTYPE (avg on a
 * non-floating dtype). */
DT_API dt_status dt_comm_all_reduce(dt_comm *comm, dt_tensor *tensor, dt_reduce_op op);
DT_API dt_status dt_comm_all_reduce_async(dt_comm *comm, dt_tensor *tensor, dt_reduce_op op,
                                          dt_work **work);

/* Concatenates every rank's `in` along dim 0 into `out` (rank order):
 * out dim 0 = size * in dim 0, other dims and dtype equal. In place when `in` is exactly
 * this rank's slice of `out` (a dt_narrow view of it); any other overlap is an error.
 * Errors: DT_ERR_INVALID (NULL, shapes), DT_ERR_DTYPE (dtypes differ). */
DT_API dt_status dt_comm_all_gather_into_tensor(dt_comm *comm, const dt_tensor *in, dt_tensor *out);
DT_API dt_status dt_comm_all_gather_into_tensor_async(dt_comm *comm, const dt_tensor *in,
                                                      dt_tensor *out, dt_work **work);

/* Uneven all_gather: rank r contributes counts[r] rows (in dim 0 must be counts[rank]);
 * out dim 0 = sum(counts), rank r's rows start at counts[0] + ... + counts[r-1]. counts has
 * size entries, equal on every rank. In place as for dt_comm_all_gather_into_tensor. */
DT_API dt_status dt_comm_all_gather_uneven(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                           const int64_t *counts);
DT_API dt_status dt_comm_all_gather_uneven_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                                 const int64_t *counts, dt_work **work);

/* Reduces every rank's `in` element-wise and leaves slice `rank` of the result (along dim
 * 0) in `out`: in dim 0 = size * out dim 0. In place when `out` is exactly this rank's
 * slice of `in`. */
DT_API dt_status dt_comm_reduce_scatter_tensor(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                               dt_reduce_op op);
DT_API dt_status dt_comm_reduce_scatter_tensor_async(dt_comm *comm, const dt_tensor *in,
                                                     dt_tensor *out, dt_reduce_op op,
                                                     dt_work **work);

/* Uneven reduce_scatter: in dim 0 = sum(counts), out dim 0 = counts[rank]; rank r gets
 * rows [counts[0] + ... + counts[r-1], + counts[r]) of the reduction. counts equal on
 * every rank. */
DT_API dt_status dt_comm_reduce_scatter_uneven(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                               const int64_t *counts, dt_reduce_op op);
DT_API dt_status dt_comm_reduce_scatter_uneven_async(dt_comm *comm, const dt_tensor *in,
                                                     dt_tensor *out, const int64_t *counts,
                                                     dt_reduce_op op, dt_work **work);

/* Personalised exchange along dim 0: this rank sends rows [sum(send_counts[0..d)), +
 * send_counts[d]) of `in` to rank d and receives recv_counts[s] rows from rank s into
 * `out` in rank order. send_counts[d] on rank s must equal recv_counts[s] on rank d
 * (DT_ERR_MISMATCH otherwise). Both counts NULL mean equal splits (dim 0 divisible by size);
 * one NULL and one not is DT_ERR_INVALID.
 * in and out must not overlap. */
DT_API dt_status dt_comm_all_to_all(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                    const int64_t *send_counts, const int64_t *recv_counts);
DT_API dt_status dt_comm_all_to_all_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                          const int64_t *send_counts, const int64_t *recv_counts,
                                          dt_work **work);

/* Copies root's `tensor` into every other rank's `tensor` (same shape and dtype). */
DT_API dt_status dt_comm_broadcast(dt_comm *comm, dt_tensor *tensor, int root);
DT_API dt_status dt_comm_broadcast_async(dt_comm *comm, dt_tensor *tensor, int root,
                                         dt_work **work);

/* Rank r receives slice r (along dim 0) of root's `in` into `out`: in dim 0 = size * out
 * dim 0. `in` is read on root only; other ranks may pass NULL. */
DT_API dt_status dt_comm_scatter(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root);
DT_API dt_status dt_comm_scatter_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root,
                                       dt_work **work);

/* Root receives every rank's `in` concatenated along dim 0 into `out` (dim 0 = size * in
 * dim 0). `out` is written on root only; other ranks may pass NULL. */
DT_API dt_status dt_comm_gather(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root);
DT_API dt_status dt_comm_gather_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root,
                                      dt_work **work);

/* Returns once every rank of the group has entered the barrier. */
DT_API dt_status dt_comm_barrier(dt_comm *comm);
DT_API dt_status dt_comm_barrier_async(dt_comm *comm, dt_work **work);

/* Point to point. The k-th send from rank s to rank d matches the k-th recv on d from s
 * (FIFO per ordered pair, no tags); dtype and element count must match (DT_ERR_MISMATCH
 * on both ranks otherwise). send/recv do not count as group collectives (they do not
 * advance the group's sequence number). Sending to oneself is an error. */
DT_API dt_status dt_comm_send(dt_comm *comm, const dt_tensor *tensor, int dst);
DT_API dt_status dt_comm_send_async(dt_comm *comm, const dt_tensor *tensor, int dst,
                                    dt_work **work);
DT_API dt_status dt_comm_recv(dt_comm *comm, dt_tensor *tensor, int src);
DT_API dt_status dt_comm_recv_async(dt_comm *comm, dt_tensor *tensor, int src, dt_work **work);

/* ---- Gathering byte strings ---------------------------------------------------------- */

/* What dt_comm_all_gather_object returns: `count` (= group size) byte strings; string r starts
 * at data + offsets[r] and has lengths[r] bytes. One allocation; free with
 * dt_free. */
typedef struct dt_objects {
  int count;
  const size_t *lengths;
  const size_t *offsets;
  const unsigned char *data;
} dt_objects;

/* Gathers `nbytes` bytes from every rank (any length per rank, 0 allowed; data may be NULL
 * when nbytes is 0) and hands the caller every rank's bytes in rank order. Synchronous
 * only: the result's size is known only after a first exchange. On the fake backend every
 * entry is a copy of this rank's bytes. Errors: DT_ERR_INVALID (NULL out, NULL data with
 * nbytes > 0), DT_ERR_NOMEM and the collective errors. On failure *out is NULL. */
DT_API dt_status dt_comm_all_gather_object(dt_comm *comm, const void *data, size_t nbytes,
                                           dt_objects **out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_COMM_H */
