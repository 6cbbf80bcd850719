/* MPI backend: starting each collective.
 *
 * Counts in dt_coll_args are int64; MPI takes int counts and displacements. Each collective
 * has up to three paths:
 *   1. everything fits (the usual case): one MPI call, in the caller's buffers;
 *   2. data-movement kinds (all_gather, all_to_all, scatter, gather) whose counts share a
 *      common factor: the same MPI call over a contiguous datatype of U elements, so counts
 *      and displacements are in units of U (type signatures still match, since each rank's
 *      message is the same sequence of elements whatever unit it picked);
 *   3. otherwise pieces of at most dt__mp_max_count elements: all_reduce and broadcast
 *      chunk the buffer, reduce_scatter reduces each rank's slice to it with MPI_Reduce
 *      (MPI's predefined reductions work on predefined datatypes only), and the movement
 *      kinds become point-to-point messages on MP_TAG_COLL.
 * bf16 and f16 reduce in f32: the input is widened into scratch, MPI sums floats, and the
 * result is rounded once into the output (as the threads backend does); avg divides the sum.
 *
 * In-place forms: MPI_IN_PLACE must be passed by every rank or none, but each rank chooses
 * in-place use here by itself. all_reduce is in place on every rank (MPI_IN_PLACE); an
 * in-place all_gather sends a copy of this rank's slice, an in-place reduce_scatter
 * receives into scratch and copies, so that no MPI call is given overlapping buffers. */
#include <string.h>

#include "comm/mpi/mpi_impl.h"
#include "tensor/tensor_impl.h"

typedef struct ctx {
  dt_comm *comm;
  dt_work *w;
  const dt_coll_args *a;
  MPI_Comm mc;
  bool blocking; /* synchronous call: blocking MPI functions under the watchdog */
  mp_op *op;
  size_t elem;
  int64_t max;      /* dt__mp_max_count */
  int64_t *scratch; /* per-rank element counts and offsets, freed when start returns */
} ctx;

#define AT(ptr, elems, elem_size) ((char *)(ptr) + (int64_t)(elems) * (int64_t)(elem_size))

static int64_t nchunks(int64_t n, int64_t max) { return n <= 0 ? 0 : (n + max - 1) / max; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}
static bool is_half(dt_dtype d) { return d == DT_BF16 || d == DT_F16; }

static void widen(dt_dtype dtype, const void *src, float *dst, int64_t n) {
  const uint16_t *s = src;
  if (dtype == DT_BF16) {
    for (int64_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(s[i]);
  } else {
    for (int64_t i = 0; i < n; i++) dst[i] = dt_f16_to_f32(s[i]);
  }
}

/* A unit of U elements (1 <= U <= max) dividing g such that `largest` / U fits in an int
 * count; 0 when there is none. Larger units first: they leave the smallest counts. */
static int64_t pick_unit(int64_t g, int64_t largest, int64_t max) {
  if (g <= 0) return 1;
  int64_t k = (g + max - 1) / max;
  for (int tries = 0; tries < 4096 && k <= g; tries++, k++) {
    if (g % k != 0) continue;
    int64_t u = g / k;
    return largest / u <= max ? u : 0;
  }
  return 0;
}

/* ---- Issuing MPI calls ------------------------------------------------------------------ */

static void enter(ctx *x) {
  if (x->blocking) dt__mp_watch_begin(x->comm, x->a->op_name, x->w->seq);
  dt__mp_lock();
}

static void leave(ctx *x) {
  dt__mp_unlock();
  if (x->blocking) dt__mp_watch_end();
}

static MPI_Request *next_request(ctx *x) {
  DT_ASSERT(x->op && x->op->nreq < x->op->cap);
  return &x->op->reqs[x->op->nreq++];
}

static dt_status check(ctx *x, int rc, const char *call) {
  if (DT_LIKELY(rc == MPI_SUCCESS)) return DT_OK;
  dt_status status = dt__mp_fail(rc, x->comm, x->a->op_name, call);
  if (x->op && x->op->nreq > 0) {
    /* Requests already posted reference the caller's buffers and the peers expect the
     * rest: there is no clean way back. */
    dt__mp_abort_job(dt_last_error());
  }
  return status;
}

#define ISSUE(x, name, blocking_call, nonblocking_call)                                            \
  do {                                                                                             \
    enter(x);                                                                                      \
    int issue_rc_ = (x)->blocking ? (blocking_call) : (nonblocking_call);                          \
    leave(x);                                                                                      \
    dt_status issue_status_ = check(x, issue_rc_, name);                                           \
    if (issue_status_ != DT_OK) return issue_status_;                                              \
  } while (0)

static dt_status p2p(ctx *x, bool send, void *buf, int64_t n, MPI_Datatype type, int peer,
                     int tag) {
  /* Always at least one message, so that a count disagreement cannot shift later
   * messages onto the wrong operation. */
  int64_t pieces = n == 0 ? 1 : nchunks(n, x->max);
  for (int64_t c = 0; c < pieces; c++) {
    int m = (int)min64(x->max, n - c * x->max);
    void *at = AT(buf, c * x->max, x->elem);
    dt__mp_lock();
    int rc = send ? MPI_Isend(at, m, type, peer, tag, x->mc, next_request(x))
                  : MPI_Irecv(at, m, type, peer, tag, x->mc, next_request(x));
    dt__mp_unlock();
    dt_status status = check(x, rc, send ? "MPI_Isend" : "MPI_Irecv");
    if (status != DT_OK) return status;
  }
  return DT_OK;
}

static int64_t p2p_messages(int64_t n, int64_t max) { return n == 0 ? 1 : nchunks(n, max); }

static dt_status new_op(ctx *x, int64_t nreq, bool statuses, int64_t nints) {
  x->op = dt__mp_op_new(nreq, statuses, nints, x->a->op_name);
  if (!x->op) return DT_ERR_NOMEM;
  x->op->dtype = x->a->dtype;
  x->op->world = x->comm->size;
  return DT_OK;
}

/* Hands the started operation to the work: done now (blocking, or nothing pending) or
 * pending for wait/test. */
static dt_status finish(ctx *x) {
  dt_work *w = x->w;
  mp_op *op = x->op;
  x->op = NULL;
  if (!op) {
    w->done = true;
    w->status = DT_OK;
    return DT_OK;
  }
  if (x->blocking || op->nreq == 0) return dt__mp_op_finish_blocking(x->comm, w, op);
  w->backend_ptr[0] = op;
  w->backend_int[0] = dt__mp_now_ns();
  return DT_OK;
}

/* Scratch for this rank's temporaries: element counts and offsets per rank. */
static dt_status per_rank(ctx *x, int arrays) {
  x->scratch = dt__alloc(sizeof(int64_t) * (size_t)x->comm->size * (size_t)arrays + 1);
  if (!x->scratch) return dt__error(DT_ERR_NOMEM, "%s: out of memory", x->a->op_name);
  return DT_OK;
}

/* The point-to-point form of an exchange with every peer r: recv_counts[r] elements from it
 * into recv at recv_offsets[r], and send_counts[r] elements from send at send_offsets[r] to
 * it. NULL send_counts: every peer gets this rank's own block, recv_counts[me] elements from
 * send (all_gather). This rank's own block is not copied here. */
static dt_status exchange_p2p(ctx *x, MPI_Datatype type, const void *send,
                              const int64_t *send_counts, const int64_t *send_offsets, void *recv,
                              const int64_t *recv_counts, const int64_t *recv_offsets) {
  int size = x->comm->size, me = x->comm->rank;
  int64_t nreq = 0;
  for (int r = 0; r < size; r++) {
    int64_t out = send_counts ? send_counts[r] : recv_counts[me];
    if (r != me) nreq += p2p_messages(out, x->max) + p2p_messages(recv_counts[r], x->max);
  }
  dt_status status = new_op(x, nreq, false, 0);
  for (int r = 0; r < size && status == DT_OK; r++) {
    if (r == me) continue;
    status =
        p2p(x, false, AT(recv, recv_offsets[r], x->elem), recv_counts[r], type, r, MP_TAG_COLL);
  }
  for (int r = 0; r < size && status == DT_OK; r++) {
    if (r == me) continue;
    void *from = send_counts ? AT(send, send_offsets[r], x->elem) : (void *)send;
    status =
        p2p(x, true, from, send_counts ? send_counts[r] : recv_counts[me], type, r, MP_TAG_COLL);
  }
  return status;
}

/* A contiguous datatype of `unit` elements of type (type itself for 1), freed by
 * finish_unit_call. */
static MPI_Datatype unit_type_of(MPI_Datatype type, int64_t unit) {
  if (unit <= 1) return type;
  MPI_Datatype unit_type;
  dt__mp_lock();
  MPI_Type_contiguous((int)unit, type, &unit_type);
  MPI_Type_commit(&unit_type);
  dt__mp_unlock();
  return unit_type;
}

/* After an MPI call over unit_type (returned rc): frees unit_type if unit_type_of made it (a
 * datatype in use by pending operations is only marked for freeing), checks rc and hands the
 * operation to the work. */
static dt_status finish_unit_call(ctx *x, int rc, const char *call, MPI_Datatype type,
                                  MPI_Datatype unit_type) {
  if (unit_type != type) MPI_Type_free(&unit_type);
  dt_status status = check(x, rc, call);
  if (status != DT_OK) return status;
  return finish(x);
}

/* ---- all_reduce, broadcast, barrier ------------------------------------------------------ */

static dt_status all_reduce(ctx *x) {
  const dt_coll_args *a = x->a;
  int64_t n = a->count, k = nchunks(n, x->max);
  MPI_Datatype type;
  MPI_Op mop;
  dt__mp_reduce_types(a->dtype, a->op, &type, &mop);
  bool avg = a->op == DT_REDUCE_AVG;
  void *buf = a->recv;
  size_t unit = x->elem;
  if (is_half(a->dtype) || !x->blocking) {
    dt_status status = new_op(x, x->blocking ? 0 : k, false, 0);
    if (status != DT_OK) return status;
    x->op->dst = a->recv;
    x->op->n = n;
    x->op->divide = avg;
    if (is_half(a->dtype)) {
      x->op->tmp = dt__alloc(sizeof(float) * (size_t)n + 1);
      if (!x->op->tmp) return dt__error(DT_ERR_NOMEM, "%s: out of memory", a->op_name);
      widen(a->dtype, a->recv, x->op->tmp, n);
      x->op->post = MP_POST_NARROW;
      x->op->results = x->op->tmp;
      buf = x->op->tmp;
      unit = sizeof(float);
    }
  }
  for (int64_t c = 0; c < k; c++) {
    int m = (int)min64(x->max, n - c * x->max);
    void *at = AT(buf, c * x->max, unit);
    ISSUE(x, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, at, m, type, mop, x->mc),
          MPI_Iallreduce(MPI_IN_PLACE, at, m, type, mop, x->mc, next_request(x)));
  }
  /* The synchronous fast path has no op: divide here. */
  if (!x->op && avg) dt__mp_divide(a->dtype, a->recv, n, x->comm->size);
  return finish(x);
}

static dt_status broadcast(ctx *x) {
  const dt_coll_args *a = x->a;
  int64_t n = a->count, k = nchunks(n, x->max);
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  if (!x->blocking) {
    dt_status status = new_op(x, k, false, 0);
    if (status != DT_OK) return status;
  }
  for (int64_t c = 0; c < k; c++) {
    int m = (int)min64(x->max, n - c * x->max);
    void *at = AT(a->recv, c * x->max, x->elem);
    ISSUE(x, "MPI_Bcast", MPI_Bcast(at, m, type, a->root, x->mc),
          MPI_Ibcast(at, m, type, a->root, x->mc, next_request(x)));
  }
  return finish(x);
}

static dt_status barrier(ctx *x) {
  if (!x->blocking) {
    dt_status status = new_op(x, 1, false, 0);
    if (status != DT_OK) return status;
  }
  ISSUE(x, "MPI_Barrier", MPI_Barrier(x->mc), MPI_Ibarrier(x->mc, next_request(x)));
  return finish(x);
}

/* ---- all_gather ------------------------------------------------------------------------- */

/* MPI_Allgather and MPI_Alltoall: count elements to or from every rank. */
typedef int (*even_exchange_fn)(const void *send, int send_count, MPI_Datatype send_type,
                                void *recv, int recv_count, MPI_Datatype recv_type, MPI_Comm mc);

/* The common synchronous case of an even all_gather or all_to_all that fits one call:
 * straight into MPI, nothing allocated. */
static dt_status even_exchange(ctx *x, const char *name, even_exchange_fn exchange) {
  const dt_coll_args *a = x->a;
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  int m = (int)a->count;
  ISSUE(x, name, exchange(a->send, m, type, a->recv, m, type, x->mc), MPI_ERR_OTHER);
  return finish(x);
}

static dt_status all_gather(ctx *x) {
  const dt_coll_args *a = x->a;
  int size = x->comm->size, me = x->comm->rank;
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  if (x->blocking && !a->counts && a->count * size <= x->max &&
      a->send != AT(a->recv, a->count * me, x->elem))
    return even_exchange(x, "MPI_Allgather", MPI_Allgather);
  dt_status status = per_rank(x, 2);
  if (status != DT_OK) return status;
  int64_t *e = x->scratch, *off = x->scratch + size, total = 0, g = 0;
  for (int r = 0; r < size; r++) {
    e[r] = a->counts ? a->counts[r] * a->row_numel : a->count;
    off[r] = total;
    total += e[r];
    g = gcd64(g, e[r]);
  }
  bool in_place = a->send == AT(a->recv, off[me], x->elem);
  bool even = !a->counts;
  int64_t unit = total <= x->max ? 1 : pick_unit(g, total, x->max);

  if (even && total <= x->max) {
    status = new_op(x, x->blocking ? 0 : 1, false, 0);
  } else if (unit > 0) {
    status = new_op(x, x->blocking ? 0 : 1, false, 2 * (int64_t)size);
  } else {
    const void *mine = in_place ? AT(a->recv, off[me], x->elem) : a->send;
    status = exchange_p2p(x, type, mine, NULL, NULL, a->recv, e, off);
    if (status != DT_OK) return status;
    if (!in_place)
      memcpy(AT(a->recv, off[me], x->elem), a->send, (size_t)(e[me] * (int64_t)x->elem));
    return finish(x);
  }
  if (status != DT_OK) return status;

  const void *send = a->send;
  if (in_place) {
    x->op->tmp = dt__alloc((size_t)(e[me] * (int64_t)x->elem) + 1);
    if (!x->op->tmp) return dt__error(DT_ERR_NOMEM, "%s: out of memory", a->op_name);
    memcpy(x->op->tmp, a->send, (size_t)(e[me] * (int64_t)x->elem));
    send = x->op->tmp;
  }
  if (even && total <= x->max) {
    int m = (int)a->count;
    ISSUE(x, "MPI_Allgather", MPI_Allgather(send, m, type, a->recv, m, type, x->mc),
          MPI_Iallgather(send, m, type, a->recv, m, type, x->mc, next_request(x)));
    return finish(x);
  }
  MPI_Datatype unit_type = unit_type_of(type, unit);
  int *counts = x->op->ints, *displs = x->op->ints + size;
  for (int r = 0; r < size; r++) {
    counts[r] = (int)(e[r] / unit);
    displs[r] = (int)(off[r] / unit);
  }
  enter(x);
  int rc = x->blocking ? MPI_Allgatherv(send, counts[me], unit_type, a->recv, counts, displs,
                                        unit_type, x->mc)
                       : MPI_Iallgatherv(send, counts[me], unit_type, a->recv, counts, displs,
                                         unit_type, x->mc, next_request(x));
  leave(x);
  return finish_unit_call(x, rc, "MPI_Allgatherv", type, unit_type);
}

/* ---- reduce_scatter --------------------------------------------------------------------- */

static dt_status reduce_scatter(ctx *x) {
  const dt_coll_args *a = x->a;
  int size = x->comm->size, me = x->comm->rank;
  MPI_Datatype type;
  MPI_Op mop;
  dt__mp_reduce_types(a->dtype, a->op, &type, &mop);
  if (x->blocking && !a->counts && !is_half(a->dtype) && a->count * size <= x->max &&
      a->recv != AT(a->send, a->count * me, x->elem)) {
    int m = (int)a->count;
    ISSUE(x, "MPI_Reduce_scatter_block",
          MPI_Reduce_scatter_block(a->send, a->recv, m, type, mop, x->mc), MPI_ERR_OTHER);
    if (a->op == DT_REDUCE_AVG) dt__mp_divide(a->dtype, a->recv, a->count, size);
    return finish(x);
  }
  dt_status status = per_rank(x, 2);
  if (status != DT_OK) return status;
  int64_t *e = x->scratch, *off = x->scratch + size, total = 0;
  for (int r = 0; r < size; r++) {
    e[r] = a->counts ? a->counts[r] * a->row_numel : a->count;
    off[r] = total;
    total += e[r];
  }
  bool fits = total <= x->max;
  int64_t nreq = 0;
  if (!fits) {
    for (int r = 0; r < size; r++) nreq += nchunks(e[r], x->max);
  } else {
    nreq = 1;
  }
  status = new_op(x, x->blocking ? 0 : nreq, false, a->counts && fits ? size : 0);
  if (status != DT_OK) return status;
  mp_op *op = x->op;
  op->dst = a->recv;
  op->n = e[me];
  op->divide = a->op == DT_REDUCE_AVG;
  const void *send = a->send;
  void *recv = a->recv;
  size_t unit = x->elem;
  if (is_half(a->dtype)) {
    op->tmp = dt__alloc(sizeof(float) * (size_t)(total + e[me]) + 1);
    if (!op->tmp) return dt__error(DT_ERR_NOMEM, "%s: out of memory", a->op_name);
    widen(a->dtype, a->send, op->tmp, total);
    send = op->tmp;
    recv = (float *)op->tmp + total;
    op->results = recv;
    op->post = MP_POST_NARROW;
    unit = sizeof(float);
  } else if (a->recv == AT(a->send, off[me], x->elem) && e[me] > 0) {
    op->tmp = dt__alloc((size_t)(e[me] * (int64_t)x->elem) + 1);
    if (!op->tmp) return dt__error(DT_ERR_NOMEM, "%s: out of memory", a->op_name);
    recv = op->tmp;
    op->results = op->tmp;
    op->post = MP_POST_COPY;
  }
  if (fits && !a->counts) {
    int m = (int)a->count;
    ISSUE(x, "MPI_Reduce_scatter_block", MPI_Reduce_scatter_block(send, recv, m, type, mop, x->mc),
          MPI_Ireduce_scatter_block(send, recv, m, type, mop, x->mc, next_request(x)));
  } else if (fits) {
    for (int r = 0; r < size; r++) op->ints[r] = (int)e[r];
    ISSUE(x, "MPI_Reduce_scatter", MPI_Reduce_scatter(send, recv, op->ints, type, mop, x->mc),
          MPI_Ireduce_scatter(send, recv, op->ints, type, mop, x->mc, next_request(x)));
  } else {
    /* Too large for one call: reduce each rank's slice to it, piece by piece. */
    for (int r = 0; r < size; r++) {
      for (int64_t c = 0; c < nchunks(e[r], x->max); c++) {
        int m = (int)min64(x->max, e[r] - c * x->max);
        const void *from = AT(send, off[r] + c * x->max, unit);
        void *to = r == me ? AT(recv, c * x->max, unit) : NULL;
        ISSUE(x, "MPI_Reduce", MPI_Reduce(from, to, m, type, mop, r, x->mc),
              MPI_Ireduce(from, to, m, type, mop, r, x->mc, next_request(x)));
      }
    }
  }
  return finish(x);
}

/* ---- all_to_all ------------------------------------------------------------------------- */

static dt_status all_to_all(ctx *x) {
  const dt_coll_args *a = x->a;
  int size = x->comm->size, me = x->comm->rank;
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  if (x->blocking && !a->send_counts && a->count * size <= x->max)
    return even_exchange(x, "MPI_Alltoall", MPI_Alltoall);
  dt_status status = per_rank(x, 4);
  if (status != DT_OK) return status;
  int64_t *sc = x->scratch, *rc = sc + size, *sd = rc + size, *rd = sd + size;
  int64_t sent = 0, received = 0, g = 0;
  for (int r = 0; r < size; r++) {
    sc[r] = a->send_counts ? a->send_counts[r] * a->row_numel : a->count;
    rc[r] = a->recv_counts ? a->recv_counts[r] * a->row_numel : a->count;
    sd[r] = sent;
    rd[r] = received;
    sent += sc[r];
    received += rc[r];
    g = gcd64(gcd64(g, sc[r]), rc[r]);
  }
  /* The path must be the same on every rank. With equal splits it follows from the count,
   * which every rank shares; uneven split sizes are known only pairwise, so uneven
   * all_to_all is always point-to-point (what Open MPI's own alltoallv does anyway). */
  bool even = !a->send_counts;
  int64_t unit = 0;
  if (even) unit = sent <= x->max ? 1 : pick_unit(g, sent, x->max);
  if (unit > 0) {
    status = new_op(x, x->blocking ? 0 : 1, false, 0);
    if (status != DT_OK) return status;
    MPI_Datatype unit_type = unit_type_of(type, unit);
    int m = (int)(a->count / unit);
    enter(x);
    int code = x->blocking ? MPI_Alltoall(a->send, m, unit_type, a->recv, m, unit_type, x->mc)
                           : MPI_Ialltoall(a->send, m, unit_type, a->recv, m, unit_type, x->mc,
                                           next_request(x));
    leave(x);
    return finish_unit_call(x, code, "MPI_Alltoall", type, unit_type);
  }
  status = exchange_p2p(x, type, a->send, sc, sd, a->recv, rc, rd);
  if (status != DT_OK) return status;
  memcpy(AT(a->recv, rd[me], x->elem), AT(a->send, sd[me], x->elem),
         (size_t)(min64(sc[me], rc[me]) * (int64_t)x->elem));
  return finish(x);
}

/* ---- scatter and gather ----------------------------------------------------------------- */

static dt_status rooted(ctx *x) {
  const dt_coll_args *a = x->a;
  int size = x->comm->size, me = x->comm->rank, root = a->root;
  bool scatter = a->kind == DT_COLL_SCATTER;
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  int64_t n = a->count, total = n * size;
  int64_t unit = total <= x->max ? 1 : pick_unit(n, total, x->max);
  dt_status status;
  if (unit > 0) {
    status = new_op(x, x->blocking ? 0 : 1, false, 0);
    if (status != DT_OK) return status;
    MPI_Datatype unit_type = unit_type_of(type, unit);
    int m = (int)(n / unit);
    enter(x);
    int code;
    if (scatter) {
      code = x->blocking ? MPI_Scatter(a->send, m, unit_type, a->recv, m, unit_type, root, x->mc)
                         : MPI_Iscatter(a->send, m, unit_type, a->recv, m, unit_type, root, x->mc,
                                        next_request(x));
    } else {
      code = x->blocking ? MPI_Gather(a->send, m, unit_type, a->recv, m, unit_type, root, x->mc)
                         : MPI_Igather(a->send, m, unit_type, a->recv, m, unit_type, root, x->mc,
                                       next_request(x));
    }
    leave(x);
    return finish_unit_call(x, code, scatter ? "MPI_Scatter" : "MPI_Gather", type, unit_type);
  }
  int64_t per = p2p_messages(n, x->max);
  status = new_op(x, me == root ? per * (size - 1) : per, false, 0);
  if (status != DT_OK) return status;
  if (me != root) {
    status = p2p(x, !scatter, scatter ? a->recv : (void *)a->send, n, type, root, MP_TAG_COLL);
    if (status != DT_OK) return status;
    return finish(x);
  }
  for (int r = 0; r < size; r++) {
    if (r == me) continue;
    void *at = scatter ? AT(a->send, n * r, x->elem) : AT(a->recv, n * r, x->elem);
    status = p2p(x, scatter, at, n, type, r, MP_TAG_COLL);
    if (status != DT_OK) return status;
  }
  if (scatter) {
    memcpy(a->recv, AT(a->send, n * me, x->elem), (size_t)(n * (int64_t)x->elem));
  } else {
    memcpy(AT(a->recv, n * me, x->elem), a->send, (size_t)(n * (int64_t)x->elem));
  }
  return finish(x);
}

/* ---- send and recv ---------------------------------------------------------------------- */

static dt_status send_recv(ctx *x) {
  const dt_coll_args *a = x->a;
  bool send = a->kind == DT_COLL_SEND, header = x->comm->debug;
  MPI_Datatype type = dt__mp_move_type(a->dtype);
  int64_t nreq = p2p_messages(a->count, x->max) + (header ? 1 : 0);
  dt_status status = new_op(x, nreq, !send, 0);
  if (status != DT_OK) return status;
  mp_op *op = x->op;
  op->peer = a->root;
  op->chunk = x->max;
  if (header) {
    /* The sender tells the receiver what it called; the receiver compares on arrival. */
    if (send) {
      op->header.dtype = (int32_t)a->dtype;
      op->header.count = a->count;
      dt__coll_describe(a, x->comm->size, op->header.call, sizeof op->header.call);
    }
    op->has_header = !send;
    dt__mp_lock();
    int rc = send ? MPI_Isend(&op->header, (int)sizeof op->header, MPI_BYTE, a->root, MP_TAG_HEADER,
                              x->mc, next_request(x))
                  : MPI_Irecv(&op->header, (int)sizeof op->header, MPI_BYTE, a->root, MP_TAG_HEADER,
                              x->mc, next_request(x));
    dt__mp_unlock();
    status = check(x, rc, send ? "MPI_Isend" : "MPI_Irecv");
    if (status != DT_OK) return status;
  }
  if (!send) op->post = MP_POST_RECV;
  status = p2p(x, send, send ? (void *)a->send : a->recv, a->count, type, a->root, MP_TAG_DATA);
  if (status != DT_OK) return status;
  return finish(x);
}

/* ---- Entry ------------------------------------------------------------------------------ */

dt_status dt__mp_start(dt_comm *comm, dt_work *w) {
  ctx x = {.comm = comm,
           .w = w,
           .a = &w->args,
           .mc = ((mp_comm *)comm->state)->comm,
           .blocking = !w->pooled,
           .elem = dt__dtype_sizes[w->args.dtype],
           .max = dt__mp_max_count};
  dt_coll_kind kind = w->args.kind;
  dt_status status = DT_OK;
#ifdef DT_HAVE_CUDA
  if (w->args.device & 0xffu) {
    status = dt__mp_cuda_begin(comm, w); /* GPU memory: staged, or handed to a CUDA-aware MPI */
    if (status != DT_OK) return status;
  }
#endif
  if (kind != DT_COLL_SEND && kind != DT_COLL_RECV) {
    /* No data moves before the ranks agree on the call (see dt__mp_check_agreement):
     * Open MPI writes past a receive buffer when sizes disagree. Point-to-point needs no
     * check: a receive's own count bounds what MPI writes. */
    dt__mp_note_collective(comm, w->args.op_name, w->seq);
    status = comm->debug ? dt__mp_check_fingerprints(comm, &w->args, w->seq, w->pooled)
                         : dt__mp_check_agreement(comm, &w->args, w->seq, w->pooled);
    if (status != DT_OK) return dt__mp_finish_device(w, status);
    /* The agreement exchange is itself a barrier. */
    if (kind == DT_COLL_BARRIER && !comm->debug) {
      w->done = true;
      w->status = DT_OK;
      return DT_OK;
    }
  }
  switch (kind) {
  case DT_COLL_ALL_REDUCE: status = all_reduce(&x); break;
  case DT_COLL_BROADCAST: status = broadcast(&x); break;
  case DT_COLL_BARRIER: status = barrier(&x); break;
  case DT_COLL_ALL_GATHER: status = all_gather(&x); break;
  case DT_COLL_REDUCE_SCATTER: status = reduce_scatter(&x); break;
  case DT_COLL_ALL_TO_ALL: status = all_to_all(&x); break;
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: status = rooted(&x); break;
  case DT_COLL_SEND:
  case DT_COLL_RECV: status = send_recv(&x); break;
  default:
    status =
        dt__error(DT_ERR_UNSUPPORTED, "%s: not a collective of the MPI backend", w->args.op_name);
  }
  /* On failure nothing is pending (a partly started operation aborted the job). */
  dt__mp_op_free(x.op);
  dt__free(x.scratch);
  return status != DT_OK || w->done ? dt__mp_finish_device(w, status) : status;
}
