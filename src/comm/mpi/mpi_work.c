/* MPI backend, below the collectives (mpi_coll.c) and the backend table (mpi_backend.c):
 * operations in flight (their requests, completion with a timeout, wait/test) and the checks
 * that every rank called the same collective (debug fingerprints, the agreement check). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_impl.h"
#include "tensor/tensor_impl.h"

/* ---- Operations in flight ------------------------------------------------------------- */

mp_op *dt__mp_op_new(int64_t nreq, bool statuses, int64_t nints, const char *op_name) {
  if (nreq > INT_MAX / 2) {
    dt__error(DT_ERR_UNSUPPORTED, "%s: %lld MPI messages needed; too many for one operation",
              op_name, (long long)nreq);
    return NULL;
  }
  size_t bytes = sizeof(mp_op) + sizeof(MPI_Request) * (size_t)nreq;
  if (statuses) bytes += sizeof(MPI_Status) * (size_t)nreq;
  bytes += sizeof(int) * (size_t)nints;
  mp_op *op = dt__calloc(bytes);
  if (!op) {
    dt__error(DT_ERR_NOMEM, "%s: out of memory for %lld MPI requests", op_name, (long long)nreq);
    return NULL;
  }
  op->cap = (int)nreq;
  op->reqs = (MPI_Request *)(op + 1);
  for (int i = 0; i < op->cap; i++) op->reqs[i] = MPI_REQUEST_NULL;
  char *next = (char *)(op->reqs + nreq);
  if (statuses) {
    op->statuses = (MPI_Status *)next;
    next += sizeof(MPI_Status) * (size_t)nreq;
  }
  op->ints = (int *)next;
  op->post = MP_POST_NONE;
  return op;
}

void dt__mp_op_free(mp_op *op) {
  if (!op) return;
  dt__free(op->tmp);
  dt__free(op);
}

void dt__mp_divide(dt_dtype dtype, void *data, int64_t n, int world) {
  if (dtype == DT_F64) {
    double *d = data;
    for (int64_t i = 0; i < n; i++) d[i] /= (double)world;
  } else {
    float *f = data;
    for (int64_t i = 0; i < n; i++) f[i] /= (float)world;
  }
}

/* A recv completed: did the sender send what this rank expected? */
static dt_status check_recv(dt_comm *comm, const dt_work *w, const mp_op *op) {
  const dt_coll_args *a = &w->args;
  char mine[256];
  if (op->has_header) {
    if (op->header.dtype != (int32_t)a->dtype || op->header.count != a->count) {
      char theirs[sizeof op->header.call + 1];
      memcpy(theirs, op->header.call, sizeof op->header.call);
      theirs[sizeof op->header.call] = '\0';
      return dt__error(DT_ERR_MISMATCH,
                       "send/recv mismatch between rank %d and rank %d of group '%s': rank %d "
                       "called %s; rank %d called %s",
                       op->peer, comm->rank, comm->name, op->peer, theirs, comm->rank,
                       dt__coll_describe(a, comm->size, mine, sizeof mine));
    }
  }
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  int first = op->has_header ? 1 : 0;
  int64_t received = 0;
  bool whole = true;
  for (int i = first; i < op->nreq; i++) {
    int got = 0;
    MPI_Get_count(&op->statuses[i], type, &got);
    int64_t expected = a->count - (int64_t)(i - first) * op->chunk;
    if (expected > op->chunk) expected = op->chunk;
    if (got == MPI_UNDEFINED) got = 0;
    if (got != expected) whole = false;
    received += got;
  }
  if (whole) return DT_OK;
  return dt__error(DT_ERR_MISMATCH,
                   "send/recv mismatch between rank %d and rank %d of group '%s': rank %d "
                   "called %s but rank %d sent %lld elements",
                   op->peer, comm->rank, comm->name, comm->rank,
                   dt__coll_describe(a, comm->size, mine, sizeof mine), op->peer,
                   (long long)received);
}

/* Runs the post step of a completed op. */
static dt_status op_post(dt_comm *comm, const dt_work *w, mp_op *op) {
  switch (op->post) {
  case MP_POST_NARROW: {
    float *src = op->results;
    if (op->divide) dt__mp_divide(DT_F32, src, op->n, op->world);
    uint16_t *dst = op->dst;
    if (op->dtype == DT_BF16) {
      for (int64_t i = 0; i < op->n; i++) dst[i] = dt_f32_to_bf16(src[i]);
    } else {
      for (int64_t i = 0; i < op->n; i++) dst[i] = dt_f32_to_f16(src[i]);
    }
    return DT_OK;
  }
  case MP_POST_COPY:
    memcpy(op->dst, op->results, (size_t)op->n * dt__dtype_sizes[op->dtype]);
    if (op->divide) dt__mp_divide(op->dtype, op->dst, op->n, op->world);
    return DT_OK;
  case MP_POST_RECV: return check_recv(comm, w, op);
  case MP_POST_NONE:
    if (op->divide) dt__mp_divide(op->dtype, op->dst, op->n, op->world);
    return DT_OK;
  }
  return DT_OK;
}

/* The first error among the statuses of a failed MPI_Testall. */
static int status_error(int rc, const mp_op *op) {
  if (rc != MPI_ERR_IN_STATUS || !op->statuses) return rc;
  for (int i = 0; i < op->nreq; i++) {
    int e = op->statuses[i].MPI_ERROR;
    if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) return e;
  }
  return rc;
}

/* Tests (and with `blocking`, waits for) the op of work w. A wait spins on MPI_Testall for
 * a while, then sleeps in growing steps up to 1 ms, so oversubscribed ranks leave the CPU
 * to the peers they wait for. Past the group's timeout (counted from the start of the wait,
 * as on the threads backend: compute overlapped with an async collective does not count)
 * the job is aborted with a clear message. */
static dt_status progress(dt_comm *comm, dt_work *w, mp_op *op, bool blocking, bool *done) {
  mp_backoff backoff;
  dt__mp_backoff_init(&backoff, comm);
  for (;;) {
    int flag = 0;
    dt__mp_lock();
    int rc =
        MPI_Testall(op->nreq, op->reqs, &flag, op->statuses ? op->statuses : MPI_STATUSES_IGNORE);
    dt__mp_unlock();
    if (rc != MPI_SUCCESS) {
      *done = true;
      return dt__mp_fail(status_error(rc, op), comm, w->args.op_name, "MPI_Testall");
    }
    if (flag) {
      *done = true;
      return op_post(comm, w, op);
    }
    if (!blocking) {
      *done = false;
      return DT_OK;
    }
    dt__mp_backoff_step(&backoff, comm, &w->args, w->seq);
  }
}

dt_status dt__mp_op_finish_blocking(dt_comm *comm, dt_work *w, mp_op *op) {
  dt_status status = DT_OK;
  if (op->nreq > 0) {
    /* A synchronous call: block in MPI (as fast as it gets) under the watchdog. */
    dt__mp_watch_begin(comm, w->args.op_name, w->seq);
    dt__mp_lock();
    int rc = MPI_Waitall(op->nreq, op->reqs, op->statuses ? op->statuses : MPI_STATUSES_IGNORE);
    dt__mp_unlock();
    dt__mp_watch_end();
    if (rc != MPI_SUCCESS) {
      status = dt__mp_fail(status_error(rc, op), comm, w->args.op_name, "MPI_Waitall");
    }
  }
  if (status == DT_OK) status = op_post(comm, w, op);
  dt__mp_op_free(op);
  if (status == DT_OK) {
    w->done = true;
    w->status = DT_OK;
  }
  return status;
}

dt_status dt__mp_finish_device(dt_work *w, dt_status status) {
#ifdef DT_HAVE_CUDA
  if (w->backend_ptr[1]) return dt__mp_cuda_end(w, status);
#else
  (void)w;
#endif
  return status;
}

dt_status dt__mp_wait(dt_comm *comm, dt_work *w) {
  mp_op *op = w->backend_ptr[0];
  if (!op) return dt__mp_finish_device(w, w->status);
  bool done = false;
  dt_status status = progress(comm, w, op, true, &done);
  dt__mp_op_free(op);
  w->backend_ptr[0] = NULL;
  return dt__mp_finish_device(w, status);
}

dt_status dt__mp_test(dt_comm *comm, dt_work *w, bool *done) {
  mp_op *op = w->backend_ptr[0];
  if (!op) {
    *done = true;
    return dt__mp_finish_device(w, w->status);
  }
  dt_status status = progress(comm, w, op, false, done);
  if (*done) {
    dt__mp_op_free(op);
    w->backend_ptr[0] = NULL;
    status = dt__mp_finish_device(w, status);
  }
  return status;
}

/* ---- Debug fingerprints ----------------------------------------------------------------- */

/* What must agree across the group, normalised as dt__coll_same_call compares it, and how
 * the rank describes its call. */
typedef struct mp_fingerprint {
  int32_t kind, dtype, op, root;
  int64_t count, row_numel;
  uint64_t counts_hash;
  uint64_t seq;
  int32_t has_counts, async;
  char call[192];
} mp_fingerprint;

#define FINGERPRINT_KEY offsetof(mp_fingerprint, call)

/* The key part of the fingerprint (everything before `call`); cheap, no text. */
static void fingerprint_key(const dt_comm *comm, const dt_coll_args *a, uint64_t seq, bool async,
                            mp_fingerprint *fp) {
  memset(fp, 0, sizeof *fp);
  fp->kind = (int32_t)a->kind;
  fp->seq = seq;
  fp->async = async;
  if (a->kind == DT_COLL_BARRIER || a->kind == DT_COLL_SPLIT) return;
  fp->dtype = (int32_t)a->dtype;
  const int64_t *counts = a->counts;
  switch (a->kind) {
  case DT_COLL_ALL_REDUCE: fp->op = (int32_t)a->op; break;
  case DT_COLL_REDUCE_SCATTER: fp->op = (int32_t)a->op; break;
  case DT_COLL_BROADCAST:
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: fp->root = a->root; break;
  case DT_COLL_ALL_TO_ALL:
    /* Per-rank split sizes legitimately differ; they are cross-checked separately. */
    counts = NULL;
    fp->has_counts = a->send_counts != NULL;
    if (a->send_counts)
      fp->row_numel = a->row_numel;
    else
      fp->count = a->count;
    return;
  default: break;
  }
  if (counts) {
    fp->has_counts = 1;
    fp->row_numel = a->row_numel;
    uint64_t h = 0x5eed;
    for (int r = 0; r < comm->size; r++) h = dt__hash_mix(h, (uint64_t)counts[r]);
    fp->counts_hash = h;
  } else {
    fp->count = a->count;
  }
}

static void fingerprint(const dt_comm *comm, const dt_coll_args *a, uint64_t seq, bool async,
                        mp_fingerprint *fp) {
  fingerprint_key(comm, a, seq, async, fp);
  dt__coll_describe(a, comm->size, fp->call, sizeof fp->call);
  if (async) { /* tell the forms apart in the mismatch message */
    size_t used = strlen(fp->call);
    snprintf(fp->call + used, sizeof fp->call - used, " [async]");
  }
}

static dt_status gather_blocking(dt_comm *comm, const char *op_name, uint64_t seq, const void *send,
                                 void *recv, int bytes) {
  MPI_Comm mc = ((mp_comm *)comm->state)->comm;
  dt__mp_watch_begin(comm, op_name, seq);
  dt__mp_lock();
  int rc = MPI_Allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, mc);
  dt__mp_unlock();
  dt__mp_watch_end();
  if (rc != MPI_SUCCESS) return dt__mp_fail(rc, comm, op_name, "MPI_Allgather (fingerprints)");
  return DT_OK;
}

/* all_to_all: rank s's send_counts[d] must equal rank d's recv_counts[s]. Every rank learns
 * the first bad pair any rank saw, so every rank fails alike. */
static dt_status check_all_to_all(dt_comm *comm, const dt_coll_args *a, uint64_t seq) {
  int size = comm->size;
  MPI_Comm mc = ((mp_comm *)comm->state)->comm;
  int64_t *incoming = dt__alloc(sizeof *incoming * (size_t)size);
  int64_t *reports = dt__alloc(sizeof *reports * 4 * (size_t)size);
  if (!incoming || !reports) {
    dt__free(incoming);
    dt__free(reports);
    dt__mp_abort_job("dt_comm_all_to_all: out of memory while checking fingerprints");
  }
  dt__mp_watch_begin(comm, a->op_name, seq);
  dt__mp_lock();
  int rc = MPI_Alltoall(a->send_counts, 1, MPI_INT64_T, incoming, 1, MPI_INT64_T, mc);
  dt__mp_unlock();
  dt__mp_watch_end();
  dt_status status = DT_OK;
  if (rc != MPI_SUCCESS) {
    status = dt__mp_fail(rc, comm, a->op_name, "MPI_Alltoall (fingerprints)");
    goto done;
  }
  int64_t mine[4] = {-1, -1, 0, 0};
  for (int s = 0; s < size; s++) {
    if (incoming[s] != a->recv_counts[s]) {
      mine[0] = s;
      mine[1] = comm->rank;
      mine[2] = incoming[s];
      mine[3] = a->recv_counts[s];
      break;
    }
  }
  status = gather_blocking(comm, a->op_name, seq, mine, reports, (int)sizeof mine);
  if (status != DT_OK) goto done;
  for (int r = 0; r < size; r++) {
    const int64_t *rep = reports + 4 * r;
    if (rep[0] >= 0) {
      status = dt__error(DT_ERR_MISMATCH,
                         "collective mismatch in group '%s' at sequence number %llu: all_to_all: "
                         "rank %lld sends %lld rows to rank %lld, which expects %lld from it",
                         comm->name, (unsigned long long)seq, (long long)rep[0], (long long)rep[2],
                         (long long)rep[1], (long long)rep[3]);
      break;
    }
  }
done:
  dt__free(incoming);
  dt__free(reports);
  return status;
}

dt_status dt__mp_check_fingerprints(dt_comm *comm, const dt_coll_args *a, uint64_t seq,
                                    bool async) {
  int size = comm->size;
  mp_fingerprint mine;
  fingerprint(comm, a, seq, async, &mine);
  mp_fingerprint *all = dt__alloc(sizeof *all * (size_t)size);
  if (!all) {
    /* The peers are about to exchange fingerprints with this rank: do not leave them. */
    dt__mp_abort_job("out of memory while checking collective fingerprints");
  }
  dt_status status = gather_blocking(comm, a->op_name, seq, &mine, all, (int)sizeof mine);
  bool same = true;
  for (int r = 0; status == DT_OK && r < size && same; r++) {
    same = memcmp(&all[r], &all[0], FINGERPRINT_KEY) == 0;
  }
  if (status == DT_OK && !same) {
    char message[1000];
    size_t used =
        (size_t)snprintf(message, sizeof message,
                         "collective mismatch in group '%s' (id %llu) at sequence "
                         "number %llu:",
                         comm->name, (unsigned long long)comm->id, (unsigned long long)seq);
    for (int r = 0; r < size && used < sizeof message; r++) {
      all[r].call[sizeof all[r].call - 1] = '\0';
      used += (size_t)snprintf(message + used, sizeof message - used, "%s rank %d called %s",
                               r ? ";" : "", r, all[r].call);
    }
    status = dt__error(DT_ERR_MISMATCH, "%s", message);
  }
  dt__free(all);
  if (status == DT_OK && a->kind == DT_COLL_ALL_TO_ALL && a->send_counts) {
    status = check_all_to_all(comm, a, seq);
  }
  return status;
}

_Static_assert(FINGERPRINT_KEY % sizeof(uint64_t) == 0, "the key is hashed in 64-bit words");

/* value = AND of every rank's value, by dissemination: in round k each rank sends what it
 * has to rank + 2^k and ANDs in what rank - 2^k sends; after ceil(log2 size) rounds each
 * holds the AND of all (AND is idempotent, so ranks counted twice do no harm). Point to
 * point rather than MPI_Iallreduce, whose libnbc schedule costs microseconds; one tag per
 * round keeps rounds of consecutive checks from matching each other (FIFO per tag and
 * pair). Every message is 16 bytes on every rank. */
static dt_status and_over_group(dt_comm *comm, const dt_coll_args *a, uint64_t seq,
                                uint64_t value[2]) {
  MPI_Comm mc = ((mp_comm *)comm->state)->comm;
  int size = comm->size, me = comm->rank;
  mp_backoff backoff;
  dt__mp_backoff_init(&backoff, comm);
  for (int round = 0, step = 1; step < size; round++, step *= 2) {
    uint64_t out[2] = {value[0], value[1]}, in[2] = {0, 0};
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int tag = MP_TAG_CHECK + round;
    dt__mp_lock();
    int rc = MPI_Irecv(in, 2, MPI_UINT64_T, (me - step + size) % size, tag, mc, &reqs[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend(out, 2, MPI_UINT64_T, (me + step) % size, tag, mc, &reqs[1]);
    dt__mp_unlock();
    if (rc != MPI_SUCCESS) {
      /* A request already posted points at this frame: there is no clean way back. */
      dt__mp_fail(rc, comm, a->op_name, "MPI_Isend/MPI_Irecv (agreement)");
      dt__mp_abort_job(dt_last_error());
    }
    for (;;) {
      int flag = 0;
      dt__mp_lock();
      rc = MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
      dt__mp_unlock();
      if (rc != MPI_SUCCESS) {
        dt__mp_fail(rc, comm, a->op_name, "MPI_Testall (agreement)");
        dt__mp_abort_job(dt_last_error());
      }
      if (flag) break;
      dt__mp_backoff_step(&backoff, comm, a, seq);
    }
    value[0] &= in[0];
    value[1] &= in[1];
  }
  return DT_OK;
}

dt_status dt__mp_check_agreement(dt_comm *comm, const dt_coll_args *a, uint64_t seq, bool async) {
  mp_fingerprint fp;
  fingerprint_key(comm, a, seq, async, &fp);
  uint64_t words[FINGERPRINT_KEY / sizeof(uint64_t)];
  memcpy(words, &fp, sizeof words);
  uint64_t h = 0x6d70692d6b6579;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++) h = dt__hash_mix(h, words[i]);
  /* AND over the ranks of h and of ~h: a bit where two ranks differ is 0 in both, so the
   * ranks agree exactly when the two ANDs cover every bit. Every rank gets the same two
   * words, hence the same verdict. The message has the same size on every rank whatever
   * the arguments, so MPI never sees a size disagreement here. */
  uint64_t all[2] = {h, ~h};
  dt_status status = and_over_group(comm, a, seq, all);
  if (status != DT_OK) return status;
  if ((all[0] | all[1]) == UINT64_MAX) return DT_OK;
  /* Every rank saw the disagreement: all of them exchange the full fingerprints so that the
   * message names what each rank called. */
  status = dt__mp_check_fingerprints(comm, a, seq, async);
  if (status != DT_OK) return status;
  return dt__error(DT_ERR_MISMATCH,
                   "collective mismatch in group '%s' at sequence number %llu: %s: the ranks' "
                   "call fingerprints differ",
                   comm->name, (unsigned long long)seq, a->op_name);
}
