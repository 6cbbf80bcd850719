/* The public collectives: every argument is validated on the calling rank before anything
 * is communicated (so a bad call fails alone instead of hanging its peers), tensors become
 * flat buffers (dt_coll_args), and the backend moves the bytes. Optional backend entries
 * fall back here on the required ones. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "profile/profile_impl.h"
#include "tensor/device_impl.h"

/* ---- Argument checks ---------------------------------------------------------------------- */

static dt_status check_comm(const char *op, const dt_comm *comm) {
  if (DT_UNLIKELY(!comm)) return dt__error(DT_ERR_INVALID, "dt_comm_%s: comm is NULL", op);
  return DT_OK;
}

static dt_status check_tensor(const dt_comm *comm, const char *op, const char *arg,
                              const dt_tensor *t) {
  if (DT_UNLIKELY(!t)) return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s is NULL", op, arg);
  if (DT_UNLIKELY(t->storage->device != 0) && comm &&
      !dt__comm_moves_device(comm, (int)(t->storage->device & 0xffu))) {
    char name[48];
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_comm_%s: %s is on %s, but the %s backend of group '%s' moves only "
                     "memory of the devices it supports; copy it to the CPU with dt_to_device",
                     op, arg, dt__device_key_format(t->storage->device, name, sizeof name),
                     comm->backend->name, comm->name);
  }
  if (DT_UNLIKELY(!dt__is_contiguous(t->ndim, t->shape, t->strides))) {
    char shape[128], strides[128];
    return dt__error(
        DT_ERR_INVALID,
        "dt_comm_%s: %s must be contiguous (shape %s, strides %s); call dt_contiguous first", op,
        arg, dt__format_ints(shape, sizeof shape, t->ndim, t->shape),
        dt__format_ints(strides, sizeof strides, t->ndim, t->strides));
  }
  return DT_OK;
}

static dt_status check_rows_tensor(const dt_comm *comm, const char *op, const char *arg,
                                   const dt_tensor *t) {
  dt_status status = check_tensor(comm, op, arg, t);
  if (status != DT_OK) return status;
  if (DT_UNLIKELY(t->ndim < 1)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_%s: %s is a 0-d tensor; it needs a dim 0 to split along", op, arg);
  }
  return DT_OK;
}

static int64_t row_numel(const dt_tensor *t) { return dt__numel(t->ndim - 1, t->shape + 1); }

/* A rank's two tensors of one collective live on one device (backends copy between the ranks'
 * devices, never between a rank's own two). */
static dt_status check_same_device(const char *op, const char *a_name, const dt_tensor *a,
                                   const char *b_name, const dt_tensor *b) {
  if (DT_LIKELY(a->storage->device == b->storage->device)) return DT_OK;
  char da[48], db[48];
  return dt__error(DT_ERR_INVALID,
                   "dt_comm_%s: %s is on %s but %s is on %s; they must be on one device", op,
                   a_name, dt__device_key_format(a->storage->device, da, sizeof da), b_name,
                   dt__device_key_format(b->storage->device, db, sizeof db));
}

/* Checks that `b` has a's dtype and a's shape except dim 0, which must be `dim0`. */
static dt_status check_like(const char *op, const char *a_name, const dt_tensor *a,
                            const char *b_name, const dt_tensor *b, int64_t dim0, const char *why) {
  if (DT_UNLIKELY(a->dtype != b->dtype)) {
    return dt__error(DT_ERR_DTYPE, "dt_comm_%s: %s is %s but %s is %s; they must match", op, a_name,
                     dt_dtype_name(a->dtype), b_name, dt_dtype_name(b->dtype));
  }
  bool ok = a->ndim == b->ndim && b->shape[0] == dim0;
  for (int i = 1; ok && i < a->ndim; i++) ok = a->shape[i] == b->shape[i];
  if (DT_LIKELY(ok)) return DT_OK;
  int64_t expected[DT_MAX_DIMS];
  memcpy(expected, a->shape, sizeof expected);
  expected[0] = dim0;
  char got[128], want[128], base[128];
  return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s has shape %s, expected %s (%s; %s has shape %s)",
                   op, b_name, dt__format_ints(got, sizeof got, b->ndim, b->shape),
                   dt__format_ints(want, sizeof want, a->ndim, expected), why, a_name,
                   dt__format_ints(base, sizeof base, a->ndim, a->shape));
}

static dt_status check_root(const char *op, const dt_comm *comm, int root, const char *what) {
  if (DT_UNLIKELY(root < 0 || root >= comm->size)) {
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s %d is out of range for a group of %d ranks",
                     op, what, root, comm->size);
  }
  return DT_OK;
}

static dt_status check_op(const char *op, dt_reduce_op reduce, dt_dtype dtype) {
  if (DT_UNLIKELY((int)reduce < DT_REDUCE_SUM || reduce > DT_REDUCE_PROD)) {
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: op %d is not a dt_reduce_op", op, (int)reduce);
  }
  if (DT_UNLIKELY(reduce == DT_REDUCE_AVG && !dt_dtype_is_floating(dtype))) {
    return dt__error(DT_ERR_DTYPE, "dt_comm_%s: op avg needs a floating dtype, the tensor is %s",
                     op, dt_dtype_name(dtype));
  }
  return DT_OK;
}

/* Validates per-rank row counts (size entries, each >= 0) and returns their sum. */
static dt_status check_counts(const char *op, const char *arg, const dt_comm *comm,
                              const int64_t *counts, int64_t *sum) {
  if (!counts) return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s is NULL", op, arg);
  /* Every valid count is below max_rows + 1, a power of two: the OR of the counts is above
   * max_rows exactly when one of them is, which catches negative counts and counts so large
   * that a sum over the largest world could wrap around into a valid-looking size. The loop
   * has no branch (it vectorizes); a failure looks for the culprit afterwards. */
  const uint64_t max_rows = (uint64_t)INT64_MAX / 2 / DT_COMM_MAX_WORLD;
  _Static_assert((((uint64_t)INT64_MAX / 2 / DT_COMM_MAX_WORLD) &
                  (((uint64_t)INT64_MAX / 2 / DT_COMM_MAX_WORLD) + 1)) == 0,
                 "max_rows + 1 is a power of two");
  uint64_t bits = 0, total = 0;
  for (int r = 0; r < comm->size; r++) {
    bits |= (uint64_t)counts[r];
    total += (uint64_t)counts[r];
  }
  if (DT_UNLIKELY(bits > max_rows)) {
    int r = 0;
    while ((uint64_t)counts[r] <= max_rows) r++;
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s[%d] is %lld, expected 0..%llu", op, arg, r,
                     (long long)counts[r], (unsigned long long)max_rows);
  }
  *sum = (int64_t)total;
  return DT_OK;
}

static bool bytes_overlap(const dt_tensor *a, const dt_tensor *b) {
  const char *pa = dt__tensor_base(a), *pb = dt__tensor_base(b);
  size_t na = (size_t)dt__tensor_numel(a) * dt__dtype_sizes[a->dtype];
  size_t nb = (size_t)dt__tensor_numel(b) * dt__dtype_sizes[b->dtype];
  return na && nb && pa < pb + nb && pb < pa + na;
}

/* `part` may be exactly the rows [first_row, +rows of part) of `whole` (in place), or not
 * overlap it at all. */
static dt_status check_in_place(const char *op, const char *part_name, const dt_tensor *part,
                                const char *whole_name, const dt_tensor *whole, int64_t first_row) {
  if (!bytes_overlap(part, whole)) return DT_OK;
  const char *slice = dt__tensor_base(whole) +
                      first_row * row_numel(whole) * (int64_t)dt__dtype_sizes[whole->dtype];
  if (dt__tensor_base(part) == slice) return DT_OK;
  return dt__error(
      DT_ERR_INVALID,
      "dt_comm_%s: %s overlaps %s without being this rank's slice (rows from %lld) of it", op,
      part_name, whole_name, (long long)first_row);
}

/* ---- Running a collective --------------------------------------------------------------- */

static void work_init(dt_work *w, dt_comm *comm, const dt_coll_args *args, bool pooled) {
  w->comm = comm;
  w->args = *args;
  w->seq = 0;
  w->status = DT_OK;
  w->done = false;
  w->pooled = pooled;
  w->backend_ptr[0] = w->backend_ptr[1] = NULL;
  w->backend_int[0] = w->backend_int[1] = 0;
  w->owned = NULL;
  w->profile_start = 0;
  w->profile_bytes = 0;
}

/* barrier as an all_reduce of one int. */
static dt_status fallback_barrier(dt_comm *comm, dt_work *w) {
  w->scratch[0] = 0;
  w->args.kind = DT_COLL_ALL_REDUCE;
  w->args.dtype = DT_I32;
  w->args.op = DT_REDUCE_SUM;
  w->args.send = w->args.recv = w->scratch;
  w->args.count = 1;
  w->seq = comm->seq++;
  return comm->backend->start(comm, w);
}

/* scatter and gather as an all_to_all where only the root sends (receives) anything. */
static dt_status fallback_rooted(dt_comm *comm, dt_work *w) {
  int size = comm->size, root = w->args.root;
  bool scatter = w->args.kind == DT_COLL_SCATTER;
  int64_t *counts = dt__calloc(sizeof *counts * 2 * (size_t)size);
  if (!counts) return dt__error(DT_ERR_NOMEM, "dt_comm_%s: out of memory", w->args.op_name);
  int64_t *send_counts = counts, *recv_counts = counts + size;
  if (scatter) {
    if (comm->rank == root) {
      for (int d = 0; d < size; d++) send_counts[d] = w->args.count;
    }
    recv_counts[root] = w->args.count;
  } else {
    send_counts[root] = w->args.count;
    if (comm->rank == root) {
      for (int s = 0; s < size; s++) recv_counts[s] = w->args.count;
    }
  }
  w->owned = counts;
  /* A rank with nothing to send or receive still passes a valid (unused) pointer. */
  if (!w->args.send) w->args.send = w->args.recv;
  if (!w->args.recv) w->args.recv = (void *)w->args.send;
  w->args.kind = DT_COLL_ALL_TO_ALL;
  w->args.row_numel = 1;
  w->args.send_counts = send_counts;
  w->args.recv_counts = recv_counts;
  w->seq = comm->seq++;
  return comm->backend->start(comm, w);
}

static dt_status work_start(dt_comm *comm, dt_work *w) {
  const dt_comm_backend *backend = comm->backend;
  if (DT_UNLIKELY(!(backend->supports & DT_COLL_BIT(w->args.kind)))) {
    /* A fallback needs the kind it is built from; a backend missing a required kind is a
     * bug in that backend, reported rather than called through. */
    switch (w->args.kind) {
    case DT_COLL_BARRIER:
      if (backend->supports & DT_COLL_BIT(DT_COLL_ALL_REDUCE)) return fallback_barrier(comm, w);
      break;
    case DT_COLL_SCATTER:
    case DT_COLL_GATHER:
      if (backend->supports & DT_COLL_BIT(DT_COLL_ALL_TO_ALL)) return fallback_rooted(comm, w);
      break;
    default: break;
    }
    return dt__error(DT_ERR_UNSUPPORTED, "dt_comm_%s: the %s backend does not implement it",
                     w->args.op_name, backend->name);
  }
  if (w->args.kind != DT_COLL_SEND && w->args.kind != DT_COLL_RECV) w->seq = comm->seq++;
  return backend->start(comm, w);
}

_Thread_local dt_comm_observer_fn dt__comm_observer;
_Thread_local void *dt__comm_observer_user;

int64_t dt__coll_bytes(const dt_comm *comm, const dt_coll_args *args) {
  int64_t esize = (int64_t)dt_dtype_size(args->dtype), size = comm->size, rows = 0;
  switch (args->kind) {
  case DT_COLL_ALL_GATHER:
  case DT_COLL_REDUCE_SCATTER:
    if (!args->counts) return size * args->count * esize;
    for (int r = 0; r < size; r++) rows += args->counts[r];
    return rows * args->row_numel * esize;
  case DT_COLL_ALL_TO_ALL:
    if (!args->send_counts) return size * args->count * esize;
    for (int r = 0; r < size; r++) rows += args->send_counts[r];
    return rows * args->row_numel * esize;
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: return size * args->count * esize;
  case DT_COLL_BARRIER: return 0;
  default: return args->count * esize;
  }
}

/* Tells the profiler and the comm observer about a collective that ran synchronously. */
static void report(dt_comm *comm, const dt_coll_args *args, const dt__profile_scope *scope) {
  if (DT_UNLIKELY(scope->start != 0))
    dt__profile_end_bytes(scope, dt__coll_bytes(comm, args), comm->size);
  if (DT_UNLIKELY(dt__comm_observer != NULL)) {
    dt__comm_observer(args->op_name, dt__coll_bytes(comm, args), comm->size,
                      dt__comm_observer_user);
  }
}

static dt_status run(dt_comm *comm, const dt_coll_args *args, dt_work **work_out) {
  dt__profile_scope scope;
  dt__profile_begin(&scope, args->op_name, DT__PROFILE_CAT_COLLECTIVE, DT_PROFILER_LANE_COMM);
  if (!work_out) {
    /* Device memory: the collective as this rank's queue sees it (from reaching it to the
     * moment it may go on), unless the backend times its own queue (NCCL). */
    void *timing =
        DT_UNLIKELY(scope.start != 0 && args->device != 0) && !comm->backend->times_device
            ? dt__profile_device_begin(args->device, NULL, false)
            : NULL;
    dt_work w;
    work_init(&w, comm, args, false);
    dt_status status = work_start(comm, &w);
    if (status == DT_OK && !w.done) {
      status = comm->backend->wait(comm, &w);
      if (!w.done) dt__work_finish(&w, status);
    }
    if (status == DT_OK && w.status != DT_OK) status = dt__error(w.status, "%s", w.message);
    dt__free(w.owned);
    if (DT_UNLIKELY(timing != NULL)) {
      dt__profile_device_end(args->device, timing, args->op_name, DT__PROFILE_CAT_COLLECTIVE,
                             status == DT_OK ? dt__coll_bytes(comm, args) : -1);
    }
    if (status == DT_OK) report(comm, args, &scope);
    return status;
  }
  *work_out = NULL;
  dt_work *w = comm->free_works;
  if (w) {
    comm->free_works = w->next_free;
  } else {
    w = dt__alloc(sizeof *w);
    if (!w)
      return dt__error(DT_ERR_NOMEM, "dt_comm_%s: out of memory for a work handle", args->op_name);
  }
  work_init(w, comm, args, true);
  dt_status status = work_start(comm, w);
  if (status != DT_OK) {
    dt__free(w->owned);
    w->owned = NULL;
    w->next_free = comm->free_works;
    comm->free_works = w;
    return status;
  }
  /* The observer hears of an async collective at its issue; the profiler records its span
   * when the wait completes it (dt_work_wait), so the trace shows it in flight. */
  if (DT_UNLIKELY(scope.start != 0)) {
    w->profile_start = scope.start;
    w->profile_bytes = dt__coll_bytes(comm, args);
  }
  dt__profile_scope unrecorded = {.start = 0};
  report(comm, args, &unrecorded);
  *work_out = w;
  return DT_OK;
}

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    dt_status check_status_ = (expr);                                                              \
    if (DT_UNLIKELY(check_status_ != DT_OK)) return check_status_;                                 \
  } while (0)

/* The _async forms: work must not be NULL, and is NULL on every failure (documented). */
static dt_status async_work(const char *fn, dt_work **work) {
  if (!work) return dt__error(DT_ERR_INVALID, "%s: work is NULL", fn);
  *work = NULL;
  return DT_OK;
}

/* ---- all_reduce ------------------------------------------------------------------------- */

/* all_reduce and broadcast: one tensor, in place (broadcast sends from it on the root). */
static dt_status on_tensor(dt_coll_kind kind, dt_comm *comm, dt_tensor *t, dt_reduce_op op,
                           int root, dt_work **work) {
  bool reduce = kind == DT_COLL_ALL_REDUCE;
  const char *name = reduce ? "all_reduce" : "broadcast";
  CHECK(check_comm(name, comm));
  CHECK(check_tensor(comm, name, "tensor", t));
  CHECK(reduce ? check_op(name, op, t->dtype) : check_root(name, comm, root, "root"));
  void *data = dt__tensor_base(t);
  dt_coll_args args = {.kind = kind,
                       .dtype = t->dtype,
                       .op = op,
                       .root = root,
                       .send = reduce || comm->rank == root ? data : NULL,
                       .recv = data,
                       .count = dt__tensor_numel(t),
                       .row_numel = 1,
                       .op_name = name,
                       .device = t->storage->device};
  return run(comm, &args, work);
}

dt_status dt_comm_all_reduce(dt_comm *comm, dt_tensor *tensor, dt_reduce_op op) {
  return on_tensor(DT_COLL_ALL_REDUCE, comm, tensor, op, 0, NULL);
}

dt_status dt_comm_all_reduce_async(dt_comm *comm, dt_tensor *tensor, dt_reduce_op op,
                                   dt_work **work) {
  CHECK(async_work("dt_comm_all_reduce", work));
  return on_tensor(DT_COLL_ALL_REDUCE, comm, tensor, op, 0, work);
}

/* ---- all_gather ------------------------------------------------------------------------- */

/* The checks every row-split collective from `in` to `out` starts with. */
static dt_status check_row_pair(const char *name, dt_comm *comm, const dt_tensor *in,
                                const dt_tensor *out) {
  CHECK(check_comm(name, comm));
  CHECK(check_rows_tensor(comm, name, "in", in));
  CHECK(check_rows_tensor(comm, name, "out", out));
  return check_same_device(name, "in", in, "out", out);
}

/* The rows the ranks before `rank` hold when rank r holds counts[r]. */
/* A collective of rows from in to out (all_gather, reduce_scatter, all_to_all): count
 * elements, rows of in's row size, on in's device. The caller adds op and counts. */
static dt_coll_args rows_args(dt_coll_kind kind, const char *name, const dt_tensor *in,
                              const dt_tensor *out, int64_t count) {
  return (dt_coll_args){.kind = kind,
                        .dtype = in->dtype,
                        .send = dt__tensor_base(in),
                        .recv = dt__tensor_base(out),
                        .count = count,
                        .row_numel = row_numel(in),
                        .op_name = name,
                        .device = in->storage->device};
}

static int64_t rows_before(const int64_t *counts, int rank) {
  int64_t first = 0;
  for (int r = 0; r < rank; r++) first += counts[r];
  return first;
}

static dt_status all_gather(const char *name, dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                            const int64_t *counts, dt_work **work) {
  CHECK(check_row_pair(name, comm, in, out));
  int64_t total = in->shape[0] * comm->size, first = in->shape[0] * comm->rank;
  if (counts) {
    CHECK(check_counts(name, "counts", comm, counts, &total));
    if (in->shape[0] != counts[comm->rank]) {
      return dt__error(DT_ERR_INVALID, "dt_comm_%s: in has %lld rows but counts[%d] is %lld", name,
                       (long long)in->shape[0], comm->rank, (long long)counts[comm->rank]);
    }
    first = rows_before(counts, comm->rank);
  }
  CHECK(check_like(name, "in", in, "out", out, total,
                   counts ? "dim 0 = sum of counts" : "dim 0 = group size x in dim 0"));
  CHECK(check_in_place(name, "in", in, "out", out, first));
  dt_coll_args args = rows_args(DT_COLL_ALL_GATHER, name, in, out, dt__tensor_numel(in));
  args.counts = counts;
  return run(comm, &args, work);
}

dt_status dt_comm_all_gather_into_tensor(dt_comm *comm, const dt_tensor *in, dt_tensor *out) {
  return all_gather("all_gather_into_tensor", comm, in, out, NULL, NULL);
}

dt_status dt_comm_all_gather_into_tensor_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                               dt_work **work) {
  CHECK(async_work("dt_comm_all_gather_into_tensor", work));
  return all_gather("all_gather_into_tensor", comm, in, out, NULL, work);
}

dt_status dt_comm_all_gather_uneven(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                    const int64_t *counts) {
  if (!counts) return dt__error(DT_ERR_INVALID, "dt_comm_all_gather_uneven: counts is NULL");
  return all_gather("all_gather_uneven", comm, in, out, counts, NULL);
}

dt_status dt_comm_all_gather_uneven_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                          const int64_t *counts, dt_work **work) {
  if (!work) return dt__error(DT_ERR_INVALID, "dt_comm_all_gather_uneven: work is NULL");
  *work = NULL;
  if (!counts) return dt__error(DT_ERR_INVALID, "dt_comm_all_gather_uneven: counts is NULL");
  return all_gather("all_gather_uneven", comm, in, out, counts, work);
}

/* ---- reduce_scatter --------------------------------------------------------------------- */

static dt_status reduce_scatter(const char *name, dt_comm *comm, const dt_tensor *in,
                                dt_tensor *out, const int64_t *counts, dt_reduce_op op,
                                dt_work **work) {
  CHECK(check_row_pair(name, comm, in, out));
  CHECK(check_op(name, op, in->dtype));
  int64_t rows = out->shape[0], total = out->shape[0] * comm->size;
  int64_t first = out->shape[0] * comm->rank;
  if (counts) {
    CHECK(check_counts(name, "counts", comm, counts, &total));
    rows = counts[comm->rank];
    first = rows_before(counts, comm->rank);
  }
  CHECK(check_like(name, "in", in, "in", in, total,
                   counts ? "dim 0 = sum of counts" : "dim 0 = group size x out dim 0"));
  CHECK(check_like(name, "in", in, "out", out, rows,
                   counts ? "dim 0 = counts[rank]" : "dim 0 = in dim 0 / group size"));
  CHECK(check_in_place(name, "out", out, "in", in, first));
  dt_coll_args args = rows_args(DT_COLL_REDUCE_SCATTER, name, in, out, dt__tensor_numel(out));
  args.op = op;
  args.counts = counts;
  return run(comm, &args, work);
}

dt_status dt_comm_reduce_scatter_tensor(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                        dt_reduce_op op) {
  return reduce_scatter("reduce_scatter_tensor", comm, in, out, NULL, op, NULL);
}

dt_status dt_comm_reduce_scatter_tensor_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                              dt_reduce_op op, dt_work **work) {
  CHECK(async_work("dt_comm_reduce_scatter_tensor", work));
  return reduce_scatter("reduce_scatter_tensor", comm, in, out, NULL, op, work);
}

dt_status dt_comm_reduce_scatter_uneven(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                        const int64_t *counts, dt_reduce_op op) {
  if (!counts) return dt__error(DT_ERR_INVALID, "dt_comm_reduce_scatter_uneven: counts is NULL");
  return reduce_scatter("reduce_scatter_uneven", comm, in, out, counts, op, NULL);
}

dt_status dt_comm_reduce_scatter_uneven_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                              const int64_t *counts, dt_reduce_op op,
                                              dt_work **work) {
  if (!work) return dt__error(DT_ERR_INVALID, "dt_comm_reduce_scatter_uneven: work is NULL");
  *work = NULL;
  if (!counts) return dt__error(DT_ERR_INVALID, "dt_comm_reduce_scatter_uneven: counts is NULL");
  return reduce_scatter("reduce_scatter_uneven", comm, in, out, counts, op, work);
}

/* ---- all_to_all ------------------------------------------------------------------------- */

static dt_status all_to_all(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                            const int64_t *send_counts, const int64_t *recv_counts,
                            dt_work **work) {
  static const char name[] = "all_to_all";
  CHECK(check_row_pair(name, comm, in, out));
  if ((send_counts == NULL) != (recv_counts == NULL)) {
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: %s is NULL but %s is not; pass both or neither",
                     name, send_counts ? "recv_counts" : "send_counts",
                     send_counts ? "send_counts" : "recv_counts");
  }
  int64_t block = 0;
  if (send_counts) {
    int64_t sent = 0, received = 0;
    CHECK(check_counts(name, "send_counts", comm, send_counts, &sent));
    CHECK(check_counts(name, "recv_counts", comm, recv_counts, &received));
    CHECK(check_like(name, "in", in, "in", in, sent, "dim 0 = sum of send_counts"));
    CHECK(check_like(name, "in", in, "out", out, received, "dim 0 = sum of recv_counts"));
  } else {
    if (in->shape[0] % comm->size != 0) {
      return dt__error(DT_ERR_INVALID,
                       "dt_comm_%s: in dim 0 (%lld) is not divisible by the group size %d; pass "
                       "send_counts and recv_counts for uneven splits",
                       name, (long long)in->shape[0], comm->size);
    }
    CHECK(check_like(name, "in", in, "out", out, in->shape[0], "equal splits keep the shape"));
    block = in->shape[0] / comm->size * row_numel(in);
  }
  if (bytes_overlap(in, out)) {
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: in and out overlap; all_to_all is not in place",
                     name);
  }
  dt_coll_args args = rows_args(DT_COLL_ALL_TO_ALL, name, in, out, block);
  args.send_counts = send_counts;
  args.recv_counts = recv_counts;
  return run(comm, &args, work);
}

dt_status dt_comm_all_to_all(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                             const int64_t *send_counts, const int64_t *recv_counts) {
  return all_to_all(comm, in, out, send_counts, recv_counts, NULL);
}

dt_status dt_comm_all_to_all_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                                   const int64_t *send_counts, const int64_t *recv_counts,
                                   dt_work **work) {
  CHECK(async_work("dt_comm_all_to_all", work));
  return all_to_all(comm, in, out, send_counts, recv_counts, work);
}

/* ---- broadcast, scatter, gather --------------------------------------------------------- */

dt_status dt_comm_broadcast(dt_comm *comm, dt_tensor *tensor, int root) {
  return on_tensor(DT_COLL_BROADCAST, comm, tensor, DT_REDUCE_SUM, root, NULL);
}

dt_status dt_comm_broadcast_async(dt_comm *comm, dt_tensor *tensor, int root, dt_work **work) {
  CHECK(async_work("dt_comm_broadcast", work));
  return on_tensor(DT_COLL_BROADCAST, comm, tensor, DT_REDUCE_SUM, root, work);
}

/* scatter and gather: every rank passes `part` (scatter's out, gather's in); the root also
 * passes `whole`, group size times part along dim 0 (scatter's in, gather's out). */
static dt_status rooted(dt_coll_kind kind, dt_comm *comm, const dt_tensor *in, dt_tensor *out,
                        int root, dt_work **work) {
  bool scatter = kind == DT_COLL_SCATTER;
  const char *name = scatter ? "scatter" : "gather";
  const char *part_name = scatter ? "out" : "in", *whole_name = scatter ? "in" : "out";
  const dt_tensor *part = scatter ? out : in, *whole = scatter ? in : out;
  CHECK(check_comm(name, comm));
  CHECK(check_root(name, comm, root, "root"));
  CHECK(check_rows_tensor(comm, name, part_name, part));
  void *whole_base = NULL;
  if (comm->rank == root) {
    char on_root[32], why[64];
    snprintf(on_root, sizeof on_root, "%s (on the root)", whole_name);
    snprintf(why, sizeof why, "dim 0 = group size x %s dim 0", part_name);
    CHECK(check_rows_tensor(comm, name, on_root, whole));
    CHECK(check_same_device(name, part_name, part, on_root, whole));
    CHECK(check_like(name, part_name, part, whole_name, whole, part->shape[0] * comm->size, why));
    if (bytes_overlap(in, out)) {
      return dt__error(DT_ERR_INVALID, "dt_comm_%s: in and out overlap on the root", name);
    }
    whole_base = dt__tensor_base(whole);
  }
  dt_coll_args args = {.kind = kind,
                       .dtype = part->dtype,
                       .root = root,
                       .send = scatter ? whole_base : dt__tensor_base(part),
                       .recv = scatter ? dt__tensor_base(part) : whole_base,
                       .count = dt__tensor_numel(part),
                       .row_numel = row_numel(part),
                       .op_name = name,
                       .device = part->storage->device};
  return run(comm, &args, work);
}

dt_status dt_comm_scatter(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root) {
  return rooted(DT_COLL_SCATTER, comm, in, out, root, NULL);
}

dt_status dt_comm_scatter_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root,
                                dt_work **work) {
  CHECK(async_work("dt_comm_scatter", work));
  return rooted(DT_COLL_SCATTER, comm, in, out, root, work);
}

dt_status dt_comm_gather(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root) {
  return rooted(DT_COLL_GATHER, comm, in, out, root, NULL);
}

dt_status dt_comm_gather_async(dt_comm *comm, const dt_tensor *in, dt_tensor *out, int root,
                               dt_work **work) {
  CHECK(async_work("dt_comm_gather", work));
  return rooted(DT_COLL_GATHER, comm, in, out, root, work);
}

/* ---- barrier, send, recv ---------------------------------------------------------------- */

static dt_status barrier(dt_comm *comm, dt_work **work) {
  CHECK(check_comm("barrier", comm));
  dt_coll_args args = {.kind = DT_COLL_BARRIER, .dtype = DT_U8, .op_name = "barrier"};
  return run(comm, &args, work);
}

dt_status dt_comm_barrier(dt_comm *comm) { return barrier(comm, NULL); }

dt_status dt_comm_barrier_async(dt_comm *comm, dt_work **work) {
  CHECK(async_work("dt_comm_barrier", work));
  return barrier(comm, work);
}

static dt_status point_to_point(const char *name, dt_comm *comm, const dt_tensor *t, int peer,
                                bool is_send, dt_work **work) {
  CHECK(check_comm(name, comm));
  CHECK(check_tensor(comm, name, "tensor", t));
  CHECK(check_root(name, comm, peer, is_send ? "dst" : "src"));
  if (peer == comm->rank) {
    return dt__error(DT_ERR_INVALID, "dt_comm_%s: rank %d cannot %s itself", name, peer,
                     is_send ? "send to" : "receive from");
  }
  void *data = dt__tensor_base(t);
  dt_coll_args args = {.kind = is_send ? DT_COLL_SEND : DT_COLL_RECV,
                       .dtype = t->dtype,
                       .root = peer,
                       .send = is_send ? data : NULL,
                       .recv = is_send ? NULL : data,
                       .count = dt__tensor_numel(t),
                       .row_numel = 1,
                       .op_name = name,
                       .device = t->storage->device};
  return run(comm, &args, work);
}

dt_status dt_comm_send(dt_comm *comm, const dt_tensor *tensor, int dst) {
  return point_to_point("send", comm, tensor, dst, true, NULL);
}

dt_status dt_comm_send_async(dt_comm *comm, const dt_tensor *tensor, int dst, dt_work **work) {
  CHECK(async_work("dt_comm_send", work));
  return point_to_point("send", comm, tensor, dst, true, work);
}

dt_status dt_comm_recv(dt_comm *comm, dt_tensor *tensor, int src) {
  return point_to_point("recv", comm, tensor, src, false, NULL);
}

dt_status dt_comm_recv_async(dt_comm *comm, dt_tensor *tensor, int src, dt_work **work) {
  CHECK(async_work("dt_comm_recv", work));
  return point_to_point("recv", comm, tensor, src, false, work);
}

/* ---- all_gather_object ------------------------------------------------------------------ */

/* Any backend: gather the lengths, then the bytes with an uneven all_gather. */
static dt_status all_gather_object_fallback(dt_comm *comm, const void *data, size_t nbytes,
                                            dt_objects **out) {
  static const char name[] = "all_gather_object";
  int size = comm->size;
  int64_t *lengths = dt__alloc(sizeof *lengths * (size_t)size);
  if (!lengths) return dt__error(DT_ERR_NOMEM, "dt_comm_%s: out of memory", name);
  int64_t mine = (int64_t)nbytes;
  dt_coll_args args = {.kind = DT_COLL_ALL_GATHER,
                       .dtype = DT_I64,
                       .send = &mine,
                       .recv = lengths,
                       .count = 1,
                       .row_numel = 1,
                       .op_name = name};
  dt_status status = run(comm, &args, NULL);
  if (status != DT_OK) {
    dt__free(lengths);
    return status;
  }
  size_t total = 0;
  for (int r = 0; r < size; r++) total += (size_t)lengths[r];
  dt_objects *objects = dt__objects_alloc(size, total);
  if (!objects) {
    dt__free(lengths);
    /* The peers go on to the second exchange: abort rather than leave them waiting. */
    comm->backend->abort(comm, "dt_comm_all_gather_object: out of memory on one rank");
    return dt__error(DT_ERR_NOMEM, "dt_comm_%s: out of memory for %zu bytes", name, total);
  }
  size_t *lens = (size_t *)objects->lengths, *offs = (size_t *)objects->offsets;
  size_t offset = 0;
  for (int r = 0; r < size; r++) {
    lens[r] = (size_t)lengths[r];
    offs[r] = offset;
    offset += lens[r];
  }
  static const unsigned char empty = 0;
  dt_coll_args bytes = {.kind = DT_COLL_ALL_GATHER,
                        .dtype = DT_U8,
                        .send = data ? data : &empty,
                        .recv = (void *)objects->data,
                        .count = mine,
                        .row_numel = 1,
                        .counts = lengths,
                        .op_name = name};
  status = run(comm, &bytes, NULL);
  dt__free(lengths);
  if (status != DT_OK) {
    dt__free(objects);
    return status;
  }
  *out = objects;
  return DT_OK;
}

dt_status dt_comm_all_gather_object(dt_comm *comm, const void *data, size_t nbytes,
                                    dt_objects **out) {
  static const char name[] = "all_gather_object";
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_%s: out is NULL", name);
  *out = NULL;
  CHECK(check_comm(name, comm));
  if (!data && nbytes > 0) return dt__error(DT_ERR_INVALID, "dt_comm_%s: data is NULL", name);
  if (comm->backend->all_gather_object) {
    return comm->backend->all_gather_object(comm, data, nbytes, out);
  }
  return all_gather_object_fallback(comm, data, nbytes, out);
}
