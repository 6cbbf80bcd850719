/* MPI backend: the backend table, the world (dt_comm_init), splits, destroy and abort. Calls
 * down into mpi_coll.c (start), mpi_work.c (wait/test, the checks) and mpi_runtime.c. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_impl.h"
#include "tensor/tensor_impl.h"

/* ---- Groups ------------------------------------------------------------------------------ */

static dt_status wrap_comm(MPI_Comm mc, const char *what, dt_comm **out);

static dt_status mp_split(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                          dt_comm **out) {
  (void)hint; /* MPI learns the groups from the peers */
  static const char name[] = "dt_comm_split";
  uint64_t seq = comm->seq++;
  if (comm->debug) {
    dt_coll_args args = {.kind = DT_COLL_SPLIT, .root = color, .count = key, .op_name = name};
    dt_status status = dt__mp_check_fingerprints(comm, &args, seq, false);
    if (status != DT_OK) return status;
  }
  MPI_Comm mc = ((mp_comm *)comm->state)->comm, fresh = MPI_COMM_NULL;
  dt__mp_watch_begin(comm, name, seq);
  dt__mp_lock();
  int rc = MPI_Comm_split(mc, color < 0 ? MPI_UNDEFINED : color, key, &fresh);
  dt__mp_unlock();
  dt__mp_watch_end();
  if (rc != MPI_SUCCESS) return dt__mp_fail(rc, comm, name, "MPI_Comm_split");
  if (fresh == MPI_COMM_NULL) return DT_OK;
  return wrap_comm(fresh, name, out);
}

static void mp_destroy(dt_comm *comm) {
  mp_comm *mc = comm->state;
  if (!mc) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mc->comm != MPI_COMM_NULL) {
    dt__mp_lock();
    MPI_Comm_free(&mc->comm);
    dt__mp_unlock();
  }
  dt__free(mc);
  comm->state = NULL;
  atomic_fetch_sub(&dt__mp_live_groups, 1);
}

static void mp_abort(dt_comm *comm, const char *reason) {
  char message[1024];
  snprintf(message, sizeof message,
           "DT_ERR_ABORTED: rank %d of group '%s' called dt_comm_abort: %s; aborting the MPI job",
           comm->rank, comm->name, reason ? reason : "no reason given");
  dt__mp_abort_job(message);
}

const dt_comm_backend dt__mpi_backend = {
    .name = "mpi",
    .supports = DT_COLL_ALL,
#ifdef DT_HAVE_CUDA
    .devices = 1u << DT_DEVICE_CUDA, /* staged or CUDA-aware (mpi_cuda.c) */
#endif
    .start = dt__mp_start,
    .wait = dt__mp_wait,
    .test = dt__mp_test,
    .split = mp_split,
    .destroy = mp_destroy,
    .abort = mp_abort,
    .all_gather_object = NULL, /* the generic two-step exchange */
};

/* A dt_comm owning `mc` (errors returned, not fatal). Frees mc on failure. */
static dt_status wrap_comm(MPI_Comm mc, const char *what, dt_comm **out) {
  int rank = 0, size = 1;
  dt__mp_lock();
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  MPI_Comm_rank(mc, &rank);
  MPI_Comm_size(mc, &size);
  dt__mp_unlock();
  mp_comm *state = dt__calloc(sizeof *state);
  dt_comm *comm = state ? dt__comm_new(&dt__mpi_backend, rank, size, 0, state) : NULL;
  if (!comm) {
    dt__free(state);
    dt__mp_lock();
    MPI_Comm_free(&mc);
    dt__mp_unlock();
    return dt__error(DT_ERR_NOMEM, "%s: out of memory", what);
  }
  state->comm = mc;
  atomic_fetch_add(&dt__mp_live_groups, 1);
  *out = comm;
  return DT_OK;
}

dt_status dt__mpi_init(const dt_comm_options *opts, dt_comm **out) {
  (void)opts; /* rank and world size come from mpirun */
  dt_status status = dt__mp_runtime_init();
  if (status != DT_OK) return status;
  MPI_Comm mc = MPI_COMM_NULL;
  dt__mp_lock();
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &mc);
  dt__mp_unlock();
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING + 1];
    dt__mp_error_text(rc, text);
    return dt__error(DT_ERR_COMM, "dt_comm_init: MPI_Comm_dup(MPI_COMM_WORLD) failed: %s", text);
  }
  return wrap_comm(mc, "dt_comm_init", out);
}
