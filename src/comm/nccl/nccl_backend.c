/* The NCCL backend ("nccl"): one rank per GPU, behind the comm interface (comm_impl.h). A
 * group is an ncclComm_t made non-blocking (ncclConfig_t.blocking = 0), a communication
 * stream on the rank's GPU, and the abort state its world shares in this process.
 *
 * A collective is ordered after the caller's work (an event on the calling thread's current
 * stream, which the communication stream waits for), queued on the communication stream, and
 * followed by a `done` event. The host does not wait at the start: compute queued before the
 * wait overlaps the communication. dt_work_wait polls the event and ncclCommGetAsyncError
 * until the deadline (the group's timeout), as c10d's watchdog does: an NCCL error, a CUDA
 * error or the deadline aborts the world (ncclCommAbort on each rank's communicator, by its
 * own thread) and every pending and later collective of the world returns DT_ERR_ABORTED (the
 * rank whose deadline passed: DT_ERR_TIMEOUT). Ranks of one process (threads under
 * dt_comm_spawn) share the abort at once and also see their bootstrap world's abort (a rank
 * whose function failed); ranks in other processes each reach their own deadline or the error
 * NCCL reports to them. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/nccl/nccl_impl.h"
#include "kernels/cuda/cuda_impl.h"
#include "profile/profile_event.h"

/* ---- Worlds: the abort every group of one world shares ---------------------------------- */

nc_world *dt__nc_world_new(int refs) {
  nc_world *w = dt__calloc(sizeof *w);
  if (!w) return NULL;
  atomic_init(&w->refcount, refs);
  atomic_init(&w->aborted, 0);
  pthread_mutex_init(&w->lock, NULL);
  return w;
}

void dt__nc_world_release(nc_world *w, int refs) {
  if (w && atomic_fetch_sub(&w->refcount, refs) == refs) {
    pthread_mutex_destroy(&w->lock);
    dt__free(w);
  }
}

static void world_abort(nc_world *w, const char *reason) {
  pthread_mutex_lock(&w->lock);
  if (!atomic_load(&w->aborted)) {
    snprintf(w->reason, sizeof w->reason, "%s", reason);
    atomic_store(&w->aborted, 1);
  }
  pthread_mutex_unlock(&w->lock);
}

/* ---- A rank's group ----------------------------------------------------------------------- */

int64_t dt__nc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool world_aborted(const nc_comm *nc) {
  if (atomic_load(&nc->world->aborted)) return true;
  const dt_comm *watch = nc->watch;
  if (watch && watch->backend->is_aborted && watch->backend->is_aborted(watch)) {
    world_abort(nc->world, "the bootstrap world was aborted (a rank failed or called "
                           "dt_comm_abort)");
    return true;
  }
  return false;
}

/* This rank's communicator aborted (once), by its own thread. */
static void abort_comm(nc_comm *nc) {
  if (nc->comm && !nc->comm_aborted) {
    (void)ncclCommAbort(nc->comm);
    nc->comm_aborted = true;
  }
}

static dt_status aborted_error(dt_comm *comm, const char *op) {
  nc_comm *nc = comm->state;
  abort_comm(nc);
  char reason[512];
  pthread_mutex_lock(&nc->world->lock);
  snprintf(reason, sizeof reason, "%s", nc->world->reason);
  pthread_mutex_unlock(&nc->world->lock);
  return dt__error(DT_ERR_ABORTED, "%s: group '%s' (nccl, cuda:%d) is aborted: %s", op, comm->name,
                   nc->device, reason);
}

/* Aborts the world for `reason` and returns `status` with it. */
static dt_status fail(dt_comm *comm, dt_status status, const char *op, const char *reason) {
  nc_comm *nc = comm->state;
  world_abort(nc->world, reason);
  abort_comm(nc);
  return dt__error(status, "%s: %s", op, reason);
}

static dt_status nccl_failure(dt_comm *comm, const char *op, const char *what, ncclResult_t r) {
  nc_comm *nc = comm->state;
  char reason[512];
  snprintf(reason, sizeof reason, "%s on rank %d of group '%s' (cuda:%d): %s (%.300s)", what,
           comm->rank, comm->name, nc->device, ncclGetErrorString(r),
           nc->comm ? ncclGetLastError(nc->comm) : "");
  return fail(comm, DT_ERR_ABORTED, op, reason);
}

/* Waits while a non-blocking call on c is still in progress (r == ncclInProgress), until
 * deadline_ns; then DT_OK, or the error (the world aborted). */
static dt_status settle(dt_comm *comm, ncclComm_t c, ncclResult_t r, const char *op,
                        const char *what, int64_t deadline_ns) {
  while (r == ncclInProgress) {
    if (dt__nc_now_ns() > deadline_ns) {
      char reason[256];
      snprintf(reason, sizeof reason, "%s did not finish within the group's timeout (%lld ms)",
               what, (long long)comm->timeout_ms);
      return fail(comm, DT_ERR_TIMEOUT, op, reason);
    }
    sched_yield();
    ncclResult_t q = ncclCommGetAsyncError(c, &r);
    if (q != ncclSuccess) r = q;
  }
  if (r != ncclSuccess) return nccl_failure(comm, op, what, r);
  return DT_OK;
}

static dt_status take_event(nc_comm *nc, const char *op, cudaEvent_t *out) {
  if (nc->n_events > 0) {
    *out = nc->events[--nc->n_events];
    return DT_OK;
  }
  cudaError_t e = cudaEventCreateWithFlags(out, cudaEventDisableTiming);
  return e == cudaSuccess ? DT_OK : dt__cuda_error(op, "cudaEventCreateWithFlags", e);
}

static void give_event(nc_comm *nc, cudaEvent_t e) {
  if (nc->n_events < (int)(sizeof nc->events / sizeof nc->events[0])) {
    nc->events[nc->n_events++] = e;
  } else {
    (void)cudaEventDestroy(e);
  }
}

/* ---- Collectives --------------------------------------------------------------------------- */

static ncclDataType_t nc_type(dt_dtype dtype) {
  switch (dtype) {
  case DT_F32: return ncclFloat32;
  case DT_F64: return ncclFloat64;
  case DT_BF16: return ncclBfloat16;
  case DT_F16: return ncclFloat16;
  case DT_I64: return ncclInt64;
  case DT_I32: return ncclInt32;
  default: return ncclUint8; /* u8, bool */
  }
}

/* bool: sum and max are "or" (max of 0/1), prod and min "and" (min). */
static ncclRedOp_t nc_op(dt_reduce_op op, dt_dtype dtype) {
  bool boolean = dtype == DT_BOOL;
  switch (op) {
  case DT_REDUCE_SUM: return boolean ? ncclMax : ncclSum;
  case DT_REDUCE_AVG: return ncclAvg;
  case DT_REDUCE_MAX: return ncclMax;
  case DT_REDUCE_MIN: return ncclMin;
  case DT_REDUCE_PROD: return boolean ? ncclMin : ncclProd;
  }
  return ncclSum;
}

static int64_t prefix(const int64_t *counts, int upto) {
  int64_t sum = 0;
  for (int i = 0; i < upto; i++) sum += counts[i];
  return sum;
}

/* A copy of this rank's own block inside a group (no NCCL call). */
static ncclResult_t local_copy(nc_comm *nc, void *dst, const void *src, size_t bytes) {
  if (dst == src || bytes == 0) return ncclSuccess;
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nc->stream) == cudaSuccess
             ? ncclSuccess
             : ncclUnhandledCudaError;
}

/* The grouped forms: uneven all_gather and all_to_all as send/recv pairs, uneven
 * reduce_scatter as one ncclReduce per owner. Zero-row blocks are skipped on both ends (the
 * counts agree across ranks). */
static ncclResult_t issue_grouped(dt_comm *comm, const dt_coll_args *a) {
  nc_comm *nc = comm->state;
  ncclDataType_t t = nc_type(a->dtype);
  size_t es = dt_dtype_size(a->dtype);
  int me = comm->rank, n = comm->size;
  const char *send = a->send;
  char *recv = a->recv;
  ncclResult_t r = ncclGroupStart();
  for (int p = 0; p < n && r == ncclSuccess; p++) {
    switch (a->kind) {
    case DT_COLL_ALL_GATHER: {
      size_t mine = (size_t)(a->counts[me] * a->row_numel),
             theirs = (size_t)(a->counts[p] * a->row_numel);
      char *at = recv + (size_t)(prefix(a->counts, p) * a->row_numel) * es;
      if (p == me) {
        r = local_copy(nc, at, send, mine * es);
      } else {
        if (mine) r = ncclSend(send, mine, t, p, nc->comm, nc->stream);
        if (r == ncclSuccess && theirs) r = ncclRecv(at, theirs, t, p, nc->comm, nc->stream);
      }
      break;
    }
    case DT_COLL_REDUCE_SCATTER: {
      size_t block = (size_t)(a->counts[p] * a->row_numel);
      const char *from = send + (size_t)(prefix(a->counts, p) * a->row_numel) * es;
      if (block)
        r = ncclReduce(from, recv, block, t, nc_op(a->op, a->dtype), p, nc->comm, nc->stream);
      break;
    }
    default: { /* DT_COLL_ALL_TO_ALL */
      size_t out_rows, in_rows, out_at, in_at;
      if (a->send_counts) {
        out_rows = (size_t)(a->send_counts[p] * a->row_numel);
        in_rows = (size_t)(a->recv_counts[p] * a->row_numel);
        out_at = (size_t)(prefix(a->send_counts, p) * a->row_numel);
        in_at = (size_t)(prefix(a->recv_counts, p) * a->row_numel);
      } else {
        out_rows = in_rows = (size_t)a->count;
        out_at = in_at = (size_t)p * (size_t)a->count;
      }
      if (p == me) {
        r = local_copy(nc, recv + in_at * es, send + out_at * es, out_rows * es);
      } else {
        if (out_rows) r = ncclSend(send + out_at * es, out_rows, t, p, nc->comm, nc->stream);
        if (r == ncclSuccess && in_rows) {
          r = ncclRecv(recv + in_at * es, in_rows, t, p, nc->comm, nc->stream);
        }
      }
      break;
    }
    }
  }
  ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

static ncclResult_t issue(dt_comm *comm, const dt_coll_args *a) {
  nc_comm *nc = comm->state;
  ncclDataType_t t = nc_type(a->dtype);
  size_t count = (size_t)a->count;
  switch (a->kind) {
  case DT_COLL_ALL_REDUCE:
    return ncclAllReduce(a->send, a->recv, count, t, nc_op(a->op, a->dtype), nc->comm, nc->stream);
  case DT_COLL_BROADCAST:
    return ncclBroadcast(a->send ? a->send : a->recv, a->recv, count, t, a->root, nc->comm,
                         nc->stream);
  case DT_COLL_ALL_GATHER:
    if (a->counts) return issue_grouped(comm, a);
    return ncclAllGather(a->send, a->recv, count, t, nc->comm, nc->stream);
  case DT_COLL_REDUCE_SCATTER:
    if (a->counts) return issue_grouped(comm, a);
    return ncclReduceScatter(a->send, a->recv, count, t, nc_op(a->op, a->dtype), nc->comm,
                             nc->stream);
  case DT_COLL_ALL_TO_ALL: return issue_grouped(comm, a);
  case DT_COLL_SEND: return ncclSend(a->send, count, t, a->root, nc->comm, nc->stream);
  case DT_COLL_RECV: return ncclRecv(a->recv, count, t, a->root, nc->comm, nc->stream);
  case DT_COLL_BARRIER:
    return ncclAllReduce(nc->scratch, nc->scratch, 1, ncclInt32, ncclSum, nc->comm, nc->stream);
  default: return ncclInvalidArgument;
  }
}

/* The buffers are this rank's GPU's memory (NCCL moves nothing else). */
static dt_status check_memory(dt_comm *comm, const dt_coll_args *a) {
  nc_comm *nc = comm->state;
  if (a->kind == DT_COLL_BARRIER) return DT_OK;
  int kind = (int)(a->device & 0xffu), index = (int)(a->device >> 8);
  if (kind != DT_DEVICE_CUDA) {
    char name[48];
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_comm_%s: the tensor is on %s, but the nccl backend moves GPU memory only; "
                     "copy it to cuda:%d with dt_to_device, or use the threads or mpi backend",
                     a->op_name, dt__device_key_format(a->device, name, sizeof name), nc->device);
  }
  if (index != nc->device) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_%s: the tensor is on cuda:%d, but rank %d of group '%s' uses cuda:%d "
                     "(NCCL moves the memory of the rank's own GPU)",
                     a->op_name, index, comm->rank, comm->name, nc->device);
  }
  return DT_OK;
}

static dt_status nc_start(dt_comm *comm, dt_work *w) {
  nc_comm *nc = comm->state;
  const char *op = w->args.op_name;
  dt_status status = check_memory(comm, &w->args);
  if (status != DT_OK) return status;
  if (world_aborted(nc)) return aborted_error(comm, op);
  cudaStream_t caller;
  status = dt__cuda_stream(op, nc->device, &caller);
  if (status != DT_OK) return status;
  /* After the caller's queued work: the communication stream waits for its stream. */
  cudaEvent_t ready, done;
  status = take_event(nc, op, &ready);
  if (status != DT_OK) return status;
  cudaError_t e = cudaEventRecord(ready, caller);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(nc->stream, ready, 0);
  give_event(nc, ready);
  if (e != cudaSuccess) return dt__cuda_error(op, "ordering after the caller's stream", e);
  int64_t start = dt__nc_now_ns();
  /* The profiler's device track: the collective on the communication stream. */
  uint32_t key = (uint32_t)DT_DEVICE_CUDA | (uint32_t)nc->device << 8;
  void *timing = dt__profile_device_begin(key, nc->stream, true);
  status = settle(comm, nc->comm, issue(comm, &w->args), op, "queuing the collective",
                  start + comm->timeout_ms * 1000000LL);
  dt__profile_device_end(key, timing, op, DT__PROFILE_CAT_COLLECTIVE,
                         status == DT_OK ? dt__coll_bytes(comm, &w->args) : -1);
  if (status != DT_OK) return status;
  status = take_event(nc, op, &done);
  if (status != DT_OK) return status;
  e = cudaEventRecord(done, nc->stream);
  if (e != cudaSuccess) {
    give_event(nc, done);
    return dt__cuda_error(op, "cudaEventRecord", e);
  }
  w->backend_ptr[0] = done;
  w->backend_int[0] = start;
  return DT_OK;
}

/* Polls the work's event and the communicator until done, an error, or the deadline. */
static dt_status nc_complete(dt_comm *comm, dt_work *w, bool blocking, bool *done) {
  nc_comm *nc = comm->state;
  const char *op = w->args.op_name;
  cudaEvent_t event = w->backend_ptr[0];
  int64_t deadline = w->backend_int[0] + comm->timeout_ms * 1000000LL;
  *done = true;
  for (int spins = 0;; spins++) {
    if (world_aborted(nc)) {
      (void)cudaEventDestroy(event);
      return aborted_error(comm, op);
    }
    cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) {
      give_event(nc, event);
      return DT_OK;
    }
    if (q != cudaErrorNotReady) {
      char reason[384];
      snprintf(reason, sizeof reason, "CUDA error on rank %d (cuda:%d) during %s: %s: %s",
               comm->rank, nc->device, op, cudaGetErrorName(q), cudaGetErrorString(q));
      (void)cudaGetLastError();
      (void)cudaEventDestroy(event);
      return fail(comm, DT_ERR_ABORTED, op, reason);
    }
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(nc->comm, &r) == ncclSuccess && r != ncclSuccess &&
        r != ncclInProgress) {
      (void)cudaEventDestroy(event);
      return nccl_failure(comm, op, op, r);
    }
    if (!blocking) {
      *done = false;
      return DT_OK;
    }
    if (dt__nc_now_ns() > deadline) {
      char reason[512];
      snprintf(reason, sizeof reason,
               "%s: timed out: rank %d waited %lld ms in %s (group '%s' of %d ranks, nccl "
               "backend, cuda:%d); the communicator is aborted",
               op, comm->rank, (long long)comm->timeout_ms, op, comm->name, comm->size, nc->device);
      (void)cudaEventDestroy(event);
      world_abort(nc->world, reason);
      abort_comm(nc);
      return dt__error(DT_ERR_TIMEOUT, "%s", reason);
    }
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
    }
  }
}

static dt_status nc_wait(dt_comm *comm, dt_work *w) {
  bool done = false;
  return nc_complete(comm, w, true, &done);
}

static dt_status nc_test(dt_comm *comm, dt_work *w, bool *done) {
  return nc_complete(comm, w, false, done);
}

/* ---- Groups: creation, split, destroy, abort -------------------------------------------- */

ncclConfig_t dt__nc_config(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* every call returns at once; progress is polled with a deadline */
  return config;
}

/* A rank's group around a ready communicator (taken over), or NULL (out of memory or a CUDA
 * error, with the status in *status; the communicator is then aborted). */
dt_comm *dt__nc_wrap(ncclComm_t c, int device, nc_world *world, dt_comm *watch, dt_status *status) {
  const char *op = "nccl";
  nc_comm *nc = dt__calloc(sizeof *nc);
  dt_comm *comm = NULL;
  int rank = 0, size = 0;
  *status = DT_OK;
  if (!nc) {
    *status = dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
    goto fail;
  }
  nc->comm = c;
  nc->device = device;
  nc->world = world;
  nc->watch = watch;
  cudaError_t e = cudaStreamCreateWithFlags(&nc->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&nc->scratch, sizeof *nc->scratch);
  /* The barrier is an all_reduce of this int in place: zero it, so that it never reads (and
   * sums) uninitialised memory. */
  if (e == cudaSuccess) e = cudaMemsetAsync(nc->scratch, 0, sizeof *nc->scratch, nc->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nc->stream);
  if (e != cudaSuccess) {
    *status = dt__cuda_error(op, "the communication stream and scratch", e);
    goto fail;
  }
  if (ncclCommUserRank(c, &rank) != ncclSuccess || ncclCommCount(c, &size) != ncclSuccess) {
    *status = dt__error(DT_ERR_COMM, "%s: ncclCommUserRank/ncclCommCount failed", op);
    goto fail;
  }
  comm = dt__comm_new(&dt__nccl_backend, rank, size, 0, nc);
  if (!comm) {
    *status = dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
    goto fail;
  }
  return comm;
fail:
  (void)ncclCommAbort(c);
  if (nc) {
    if (nc->stream) (void)cudaStreamDestroy(nc->stream);
    if (nc->scratch) (void)cudaFree(nc->scratch);
    dt__free(nc);
  }
  return NULL;
}

static dt_status nc_split(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                          dt_comm **out) {
  (void)hint;
  static const char op[] = "dt_comm_split";
  nc_comm *nc = comm->state;
  if (world_aborted(nc)) return aborted_error(comm, op);
  dt_status status = dt__cuda_use_device(op, nc->device);
  if (status != DT_OK) return status;
  ncclConfig_t config = dt__nc_config();
  ncclComm_t fresh = NULL;
  int64_t deadline = dt__nc_now_ns() + comm->timeout_ms * 1000000LL;
  ncclResult_t r =
      ncclCommSplit(nc->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &fresh, &config);
  status = settle(comm, nc->comm, r, op, "ncclCommSplit", deadline);
  if (status == DT_OK && fresh) {
    ncclResult_t state = ncclInProgress;
    (void)ncclCommGetAsyncError(fresh, &state);
    status = settle(comm, fresh, state, op, "ncclCommSplit (the new communicator)", deadline);
  }
  if (status != DT_OK) {
    if (fresh) (void)ncclCommAbort(fresh);
    return status;
  }
  if (!fresh) return DT_OK; /* a negative color: no group */
  atomic_fetch_add(&nc->world->refcount, 1);
  *out = dt__nc_wrap(fresh, nc->device, nc->world, nc->watch, &status);
  if (!*out) dt__nc_world_release(nc->world, 1);
  return status;
}

/* dt_comm_destroy's work on a group this backend owns (comm.c is above the backends). */
void dt__nc_destroy_group(dt_comm *comm) {
  comm->backend->destroy(comm);
  dt__comm_free(comm);
}

static void nc_destroy(dt_comm *comm) {
  nc_comm *nc = comm->state;
  if (nc->comm && !nc->comm_aborted) {
    /* Finalize flushes what was issued; it may need the peers, so it gets the deadline too. */
    ncclResult_t r = ncclCommFinalize(nc->comm);
    int64_t deadline = dt__nc_now_ns() + comm->timeout_ms * 1000000LL;
    while (r == ncclInProgress && dt__nc_now_ns() < deadline) {
      sched_yield();
      if (ncclCommGetAsyncError(nc->comm, &r) != ncclSuccess) break;
    }
    if (r == ncclSuccess) {
      (void)ncclCommDestroy(nc->comm);
    } else {
      (void)ncclCommAbort(nc->comm);
    }
  }
  (void)cudaStreamDestroy(nc->stream);
  (void)cudaFree(nc->scratch);
  for (int i = 0; i < nc->n_events; i++) (void)cudaEventDestroy(nc->events[i]);
  dt__nc_world_release(nc->world, 1);
  if (nc->bootstrap) dt__nc_destroy_group(nc->bootstrap);
  dt__free(nc);
}

static void nc_abort(dt_comm *comm, const char *reason) {
  nc_comm *nc = comm->state;
  char message[512];
  snprintf(message, sizeof message, "rank %d of group '%s' called dt_comm_abort: %s", comm->rank,
           comm->name, reason ? reason : "no reason given");
  world_abort(nc->world, message);
  abort_comm(nc);
}

static bool nc_is_aborted(const dt_comm *comm) {
  return atomic_load(&((const nc_comm *)comm->state)->world->aborted) != 0;
}

/* all_gather_object: the bytes staged through device memory (NCCL moves nothing else): an
 * all_gather of the lengths, then an uneven all_gather of the bytes. One all_gather of count
 * elements of dtype from send into recv (counts: every rank's count; NULL: all equal), on the
 * device of key, run to its end. */
static dt_status gather_on_device(dt_comm *comm, const char *op, uint32_t key, dt_dtype dtype,
                                  const void *send, void *recv, int64_t count,
                                  const int64_t *counts) {
  dt_work w;
  memset(&w, 0, sizeof w);
  w.comm = comm;
  w.args = (dt_coll_args){.kind = DT_COLL_ALL_GATHER,
                          .dtype = dtype,
                          .send = send,
                          .recv = recv,
                          .count = count,
                          .row_numel = 1,
                          .counts = counts,
                          .op_name = op,
                          .device = key};
  w.seq = comm->seq++;
  dt_status status = nc_start(comm, &w);
  return status == DT_OK ? nc_wait(comm, &w) : status;
}

/* A copy on the communicator's stream, ordered with the collectives queued there; `wait`: the
 * host waits for the stream (the bytes are read back, or the staging is freed next). */
static cudaError_t stream_copy(nc_comm *nc, void *dst, const void *src, size_t bytes,
                               enum cudaMemcpyKind kind, bool wait) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nc->stream);
  return e == cudaSuccess && wait ? cudaStreamSynchronize(nc->stream) : e;
}

static dt_status nc_all_gather_object(dt_comm *comm, const void *data, size_t nbytes,
                                      dt_objects **out) {
  static const char op[] = "all_gather_object";
  nc_comm *nc = comm->state;
  int n = comm->size;
  uint32_t key = (uint32_t)DT_DEVICE_CUDA | (uint32_t)nc->device << 8;
  int64_t *lengths = dt__alloc(sizeof *lengths * (size_t)n), mine = (int64_t)nbytes;
  int64_t *dlen = NULL;
  unsigned char *dbytes = NULL;
  dt_objects *objects = NULL;
  dt_status status = dt__cuda_use_device(op, nc->device);
  if (status == DT_OK && !lengths)
    status = dt__error(DT_ERR_NOMEM, "dt_comm_%s: out of memory", op);
  /* The staging comes from the caching allocator and every copy runs on the communication
   * stream: a synchronous cudaMemcpy on the legacy stream is not ordered with that
   * non-blocking stream, and cudaMalloc/cudaFree synchronise the device. */
  cudaError_t e = cudaSuccess;
  if (status == DT_OK) {
    dlen = dt__cuda_device_alloc(nc->device, sizeof *dlen * (size_t)(n + 1));
    e = dlen ? stream_copy(nc, dlen + n, &mine, sizeof mine, cudaMemcpyHostToDevice, false)
             : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) status = fail(comm, DT_ERR_ABORTED, op, "staging the lengths failed");
  }
  if (status == DT_OK) status = gather_on_device(comm, op, key, DT_I64, dlen + n, dlen, 1, NULL);
  if (status == DT_OK && stream_copy(nc, lengths, dlen, sizeof *lengths * (size_t)n,
                                     cudaMemcpyDeviceToHost, true) != cudaSuccess) {
    status = fail(comm, DT_ERR_ABORTED, op, "reading the lengths back failed");
  }
  size_t total = 0;
  for (int r = 0; status == DT_OK && r < n; r++) total += (size_t)lengths[r];
  if (status == DT_OK) {
    objects = dt__objects_alloc(n, total);
    dbytes = objects ? dt__cuda_device_alloc(nc->device, total + nbytes + 1) : NULL;
    e = dbytes ? cudaSuccess : cudaErrorMemoryAllocation;
    if (e == cudaSuccess && nbytes)
      e = stream_copy(nc, dbytes + total, data, nbytes, cudaMemcpyHostToDevice, false);
    /* The peers go on to the second exchange: abort rather than leave them waiting. */
    if (e != cudaSuccess) status = fail(comm, DT_ERR_NOMEM, op, "out of memory on one rank");
  }
  if (status == DT_OK)
    status = gather_on_device(comm, op, key, DT_U8, dbytes + total, dbytes, mine, lengths);
  if (status == DT_OK && total &&
      stream_copy(nc, (void *)objects->data, dbytes, total, cudaMemcpyDeviceToHost, true) !=
          cudaSuccess) {
    status = fail(comm, DT_ERR_ABORTED, op, "reading the bytes back failed");
  }
  if (status == DT_OK) {
    size_t *lens = (size_t *)objects->lengths, *offs = (size_t *)objects->offsets, offset = 0;
    for (int r = 0; r < n; r++) {
      lens[r] = (size_t)lengths[r];
      offs[r] = offset;
      offset += lens[r];
    }
    *out = objects;
    objects = NULL;
  }
  /* Back to the cache only once the communication stream is done with the staging. */
  if (dlen || dbytes) (void)cudaStreamSynchronize(nc->stream);
  dt__cuda_device_free(nc->device, dlen);
  dt__cuda_device_free(nc->device, dbytes);
  dt__free(objects);
  dt__free(lengths);
  return status;
}

/* A group runs on its communicator's GPU: a CUDA mesh over it puts this rank's tensors there. */
static int nc_device_index(const dt_comm *comm, int kind) {
  return kind == DT_DEVICE_CUDA ? ((const nc_comm *)comm->state)->device : -1;
}

const dt_comm_backend dt__nccl_backend = {
    .name = "nccl",
    .supports = DT_COLL_REQUIRED | DT_COLL_BIT(DT_COLL_BARRIER),
    .devices = 1u << DT_DEVICE_CUDA,
    .device_index = nc_device_index,
    .times_device = true,
    .start = nc_start,
    .wait = nc_wait,
    .test = nc_test,
    .split = nc_split,
    .destroy = nc_destroy,
    .abort = nc_abort,
    .is_aborted = nc_is_aborted,
    .all_gather_object = nc_all_gather_object,
};
