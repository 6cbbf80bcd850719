/*
 * Running the communication nodes of a transformed graph with the collectives of comm.h.
 * A collective node starts the (asynchronous) collective; its wait_tensor node waits and
 * puts the result into the layout the graph declares. Collectives work along dim 0 with
 * uneven counts, so a node along another dim moves that dim to the front first; the counts
 * are torch.chunk's pieces of the dim's global size (which a symbolic dim takes at run time).
 */
#include <time.h>

#include "tensor/tensor_impl.h"
#include "graph/graph_exec.h"

struct dt_pending_comm {
  dt_comm_target kind;
  dt_work *work;
  dt_tensor *send;   /* kept alive until the collective completes */
  dt_tensor *result; /* what the collective writes */
  int ndim;
  int64_t perm[DT_MAX_DIMS]; /* permutation applied before: undone after the wait */
  bool permuted;
  int64_t counts[2 * DT_COMM_MAX_THREADS];
  /* all_to_all: the received pieces' shapes are rebuilt from these */
  int dim, new_dim;
  int64_t full_dim;
  int64_t local_shape[DT_MAX_DIMS];
  int world;
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dt__pending_comm_free(dt_pending_comm *p) {
  if (!p) return;
  dt_work_destroy(p->work); /* waits first if still running */
  dt_tensor_release(p->send);
  dt_tensor_release(p->result);
  dt__free(p);
}

static int64_t chunk_len(int64_t size, int world, int r) {
  int64_t start, len;
  dt__chunk_range(size, world, r, &start, &len);
  return len;
}

/* x with dim moved to the front, contiguous (a new reference). */
static dt_status move_to_front(dt_tensor *x, int dim, dt_pending_comm *p, dt_tensor **out) {
  p->ndim = x->ndim;
  if (dim == 0) return dt_contiguous(x, out);
  int64_t perm[DT_MAX_DIMS];
  int k = 0;
  perm[k++] = dim;
  for (int d = 0; d < x->ndim; d++) {
    if (d != dim) perm[k++] = d;
  }
  /* Inverse permutation, applied after the collective. */
  for (int d = 0; d < x->ndim; d++) p->perm[perm[d]] = d;
  p->permuted = true;
  dt_tensor *view = NULL;
  dt_status st = dt_permute(x, x->ndim, perm, &view);
  if (!st) st = dt_contiguous(view, out);
  dt_tensor_release(view);
  return st;
}

static dt_status start(const dt_graph *g, int i, dt_tensor *x, bool consumable,
                       const int64_t *symbols, dt_comm *comm, dt_run_stats *stats,
                       dt_pending_comm *p) {
  const dt_node *n = &g->nodes[i];
  const dt_value_type *t = &n->types[0];
  int world = dt_comm_size(comm), rank = dt_comm_rank(comm);
  int dim = (int)n->ints[0];
  int64_t esize = (int64_t)dt_dtype_size(x->dtype);
  p->kind = (dt_comm_target)n->target;
  p->world = world;
  dt_status st = DT_OK;
  switch (n->target) {
  case DT_COMM_ALL_REDUCE:
    /* In place only on a value nobody else can see: its handle AND its storage are this
     * value's alone (a fresh view of an input or a parameter shares their storage). */
    if (consumable && dt_tensor_is_contiguous(x) && dt_tensor_refcount(x) == 1 &&
        atomic_load(&x->storage->refcount) == 1 && x->storage->owns_data) {
      p->result = dt_tensor_retain(x);
    } else {
      st = dt_clone(x, &p->result);
    }
    if (!st) st = dt_comm_all_reduce_async(comm, p->result, n->reduce_op, &p->work);
    if (stats) stats->comm_bytes[DT_COMM_ALL_REDUCE] += dt__tensor_numel(x) * esize;
    break;
  case DT_COMM_ALL_GATHER: {
    int64_t full = t->sym[dim] >= 0 ? symbols[t->sym[dim]] : t->shape[dim];
    for (int r = 0; r < world; r++) p->counts[r] = chunk_len(full, world, r);
    if (x->shape[dim] != p->counts[rank]) {
      return dt__error(
          DT_ERR_SHAPE,
          "dt_comm_all_gather_into_tensor: rank %d holds %lld of %lld along dim %d, expected %lld",
          rank, (long long)x->shape[dim], (long long)full, dim, (long long)p->counts[rank]);
    }
    st = move_to_front(x, dim, p, &p->send);
    if (!st) {
      int64_t shape[DT_MAX_DIMS];
      memcpy(shape, p->send->shape, sizeof shape);
      shape[0] = full;
      st = dt_empty(x->ndim, shape, x->dtype, &p->result);
    }
    if (!st) st = dt_comm_all_gather_uneven_async(comm, p->send, p->result, p->counts, &p->work);
    if (stats && !st) stats->comm_bytes[DT_COMM_ALL_GATHER] += dt__tensor_numel(p->result) * esize;
    break;
  }
  case DT_COMM_REDUCE_SCATTER: {
    int64_t full = x->shape[dim];
    for (int r = 0; r < world; r++) p->counts[r] = chunk_len(full, world, r);
    st = move_to_front(x, dim, p, &p->send);
    if (!st) {
      int64_t shape[DT_MAX_DIMS];
      memcpy(shape, p->send->shape, sizeof shape);
      shape[0] = p->counts[rank];
      st = dt_empty(x->ndim, shape, x->dtype, &p->result);
    }
    if (!st)
      st = dt_comm_reduce_scatter_uneven_async(comm, p->send, p->result, p->counts, n->reduce_op,
                                               &p->work);
    if (stats) stats->comm_bytes[DT_COMM_REDUCE_SCATTER] += dt__tensor_numel(x) * esize;
    break;
  }
  case DT_COMM_ALL_TO_ALL: {
    /* x is sharded along dim; the result is sharded along new_dim instead. Each piece
     * travels flattened, so uneven pieces of any shape fit one 1-D exchange. */
    int nd = (int)n->ints[1];
    int64_t full_dim = t->sym[dim] >= 0 ? symbols[t->sym[dim]] : t->shape[dim];
    int64_t full_new = x->shape[nd];
    p->dim = dim;
    p->new_dim = nd;
    p->ndim = x->ndim;
    p->full_dim = full_dim;
    memcpy(p->local_shape, x->shape, sizeof p->local_shape);
    p->local_shape[nd] = chunk_len(full_new, world, rank);
    int64_t *send_counts = p->counts, *recv_counts = p->counts + world;
    int64_t send_total = 0, recv_total = 0, rest = 1;
    for (int d = 0; d < x->ndim; d++) {
      if (d != dim && d != nd) rest *= x->shape[d];
    }
    for (int r = 0; r < world; r++) {
      send_counts[r] = rest * x->shape[dim] * chunk_len(full_new, world, r);
      recv_counts[r] = rest * chunk_len(full_dim, world, r) * p->local_shape[nd];
      send_total += send_counts[r];
      recv_total += recv_counts[r];
    }
    st = dt_empty(1, &send_total, x->dtype, &p->send);
    if (!st) st = dt_empty(1, &recv_total, x->dtype, &p->result);
    int64_t offset = 0, start_new = 0;
    for (int r = 0; r < world && !st; r++) {
      int64_t len = chunk_len(full_new, world, r);
      dt_tensor *piece = NULL, *flat = NULL, *slot = NULL;
      st = dt_narrow(x, nd, start_new, len, &piece);
      if (!st) st = dt_reshape(piece, 1, &send_counts[r], &flat);
      if (!st) st = dt_narrow(p->send, 0, offset, send_counts[r], &slot);
      if (!st) st = dt_copy_(slot, flat);
      dt_tensor_release(piece);
      dt_tensor_release(flat);
      dt_tensor_release(slot);
      offset += send_counts[r];
      start_new += len;
    }
    if (!st)
      st = dt_comm_all_to_all_async(comm, p->send, p->result, send_counts, recv_counts, &p->work);
    if (stats) stats->comm_bytes[DT_COMM_ALL_TO_ALL] += send_total * esize;
    break;
  }
  default:
    st = dt__error(DT_ERR_INTERNAL, "%s is not a collective", dt__comm_target_names[n->target]);
  }
  if (stats && !st) stats->comm_calls[n->target]++;
  return st;
}

dt_status dt__comm_node_start(const dt_graph *g, int i, dt_tensor *x, bool consumable,
                              const int64_t *symbols, dt_comm *comm, dt_run_stats *stats,
                              dt_pending_comm **out) {
  *out = NULL;
  double t0 = now_seconds();
  if (x->spec) {
    return dt__error(DT_ERR_INVALID, "%s: communication nodes take local tensors",
                     dt__comm_target_names[g->nodes[i].target]);
  }
  dt_pending_comm *p = dt__calloc(sizeof *p);
  if (!p) return dt__error(DT_ERR_NOMEM, "out of memory building a graph");
  dt_status st = start(g, i, x, consumable, symbols, comm, stats, p);
  if (stats) stats->comm_seconds += now_seconds() - t0;
  if (st) {
    dt__pending_comm_free(p);
    return st;
  }
  *out = p;
  return DT_OK;
}

dt_status dt__comm_node_wait(dt_pending_comm *p, dt_run_stats *stats, dt_tensor **out) {
  *out = NULL;
  double t0 = now_seconds();
  dt_status st = dt_work_wait(p->work);
  if (stats) stats->comm_seconds += now_seconds() - t0;
  if (st) return st;
  if (p->kind == DT_COMM_ALL_TO_ALL) {
    /* Piece s came from rank s: its dim holds rank s's rows; concatenate along dim. */
    dt_tensor *pieces[DT_COMM_MAX_THREADS];
    int64_t offset = 0;
    int made = 0;
    for (int s = 0; s < p->world && !st; s++) {
      int64_t shape[DT_MAX_DIMS];
      memcpy(shape, p->local_shape, sizeof shape);
      shape[p->dim] = chunk_len(p->full_dim, p->world, s);
      dt_tensor *flat = NULL;
      st = dt_narrow(p->result, 0, offset, p->counts[p->world + s], &flat);
      if (!st) st = dt_reshape(flat, p->ndim, shape, &pieces[made]);
      if (!st) made++;
      dt_tensor_release(flat);
      offset += p->counts[p->world + s];
    }
    if (!st) st = dt_cat(made, pieces, p->dim, out);
    for (int s = 0; s < made; s++) dt_tensor_release(pieces[s]);
    return st;
  }
  if (!p->permuted) {
    *out = dt_tensor_retain(p->result);
    return DT_OK;
  }
  dt_tensor *view = NULL;
  st = dt_permute(p->result, p->ndim, p->perm, &view);
  if (!st) st = dt_contiguous(view, out);
  dt_tensor_release(view);
  return st;
}
