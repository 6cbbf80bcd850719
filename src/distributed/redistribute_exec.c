/*
 * Executing a redistribution plan on this rank's shard. Collectives work on flat
 * contiguous buffers along dim 0, so a step along tensor dim d first lays the shard out
 * with d in front ("d-major"), moves the bytes, then restores the dim order.
 */
#include <inttypes.h>

#include "distributed/redistribute_impl.h"
#include "kernels/cpu/cpu_kernels.h"

/* Views used while packing live on the stack: they borrow the storage of a tensor that
 * outlives them and are never retained or released, so packing allocates only the
 * buffers it fills. */
static dt_tensor stack_view(const dt_tensor *base, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset) {
  dt_tensor v = *base;
  v.spec = NULL;
  v.ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  v.offset = offset;
  return v;
}

/* t with dim d moved to the front. */
static dt_tensor front_of(const dt_tensor *t, int d) {
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  int k = 0;
  shape[k] = t->shape[d];
  strides[k++] = t->strides[d];
  for (int i = 0; i < t->ndim; i++) {
    if (i == d) continue;
    shape[k] = t->shape[i];
    strides[k++] = t->strides[i];
  }
  return stack_view(t, t->ndim, shape, strides, t->offset);
}

/* Reinterprets a fresh contiguous tensor as 1-D (it is ours: no one else sees it). */
static void flatten_in_place(dt_tensor *t) {
  int64_t numel = dt__tensor_numel(t);
  t->ndim = 1;
  t->shape[0] = numel;
  t->strides[0] = 1;
}

/* dt__dist_copy with host memory's case first, inline: the executor copies once per block, and
 * on a CPU mesh every block is host memory. */
static inline dt_status copy_local(dt_tensor *dst, const dt_tensor *src) {
  if (DT_LIKELY((dt__tensor_device_key(dst) | dt__tensor_device_key(src)) == 0)) {
    dt__cpu_copy(dst, src);
    return DT_OK;
  }
  return dt__dist_copy(dst, src);
}

/* A flat contiguous copy of t laid out d-major. */
static dt_status pack_front(const dt_tensor *t, int d, dt_tensor **out) {
  dt_tensor v = front_of(t, d);
  dt_status st = dt__dist_new_like(t, v.ndim, v.shape, v.dtype, out);
  if (st) return st;
  st = copy_local(*out, &v);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
    return st;
  }
  flatten_in_place(*out);
  return DT_OK;
}

/* A new tensor of `shape` whose d-major layout is the flat buffer `flat`. */
static dt_status unpack_front(const dt_tensor *flat, int ndim, const int64_t *shape, int d,
                              dt_tensor **out) {
  dt_tensor *result = NULL;
  dt_status st = dt__dist_new_like(flat, ndim, shape, flat->dtype, &result);
  if (st) return st;
  dt_tensor result_front = front_of(result, d);
  int64_t strides[DT_MAX_DIMS];
  dt__contiguous_strides(ndim, result_front.shape, strides);
  dt_tensor src = stack_view(flat, ndim, result_front.shape, strides, flat->offset);
  st = copy_local(&result_front, &src);
  if (st) {
    dt_tensor_release(result);
    return st;
  }
  *out = result;
  return DT_OK;
}

/* Local shard shape under `state` for this rank. */
static void shard_shape(const dt_dist_spec *spec, const dt_mesh_info *mi, const dt_placement *state,
                        int64_t *shape) {
  int64_t offset[DT_MAX_DIMS];
  dt__local_region(spec->ndim, spec->shape, spec->mesh_ndim, mi->size, mi->coord, state, shape,
                   offset);
}

/* The extent of tensor dim d that mesh dim m splits under `state` (m innermost for d): the
 * local size of d with m's split removed. */
static int64_t level_extent(const dt_dist_spec *spec, const dt_mesh_info *mi,
                            const dt_placement *state, int m, int d) {
  dt_placement without[DT_MESH_MAX_DIMS];
  memcpy(without, state, sizeof(dt_placement) * (size_t)spec->mesh_ndim);
  without[m] = dt_replicate();
  int64_t shape[DT_MAX_DIMS];
  shard_shape(spec, mi, without, shape);
  return shape[d];
}

/* The elements of local outside dims d and e (pass e = d for one dim). */
static int64_t numel_without(const dt_tensor *local, int d, int e) {
  int64_t numel = 1;
  for (int i = 0; i < local->ndim; i++) {
    if (i != d && i != e) numel *= local->shape[i];
  }
  return numel;
}

/* The elements each of the n ranks holds when dim d of `extent` is chunked over them
 * (torch.chunk), local's other dims whole: the counts of an uneven all_gather or
 * reduce_scatter along d, and their sum in *total. NULL (the error set) without memory. */
static int64_t *chunk_counts(const dt_tensor *local, int d, int64_t extent, int n, int64_t *total) {
  int64_t inner = numel_without(local, d, d);
  int64_t *cnt = dt__alloc(sizeof(int64_t) * (size_t)n);
  if (!cnt) {
    dt__error(DT_ERR_NOMEM, "dt_dist_redistribute: cannot allocate counts");
    return NULL;
  }
  /* Only the first chunks are non-empty (a small dim over many ranks): the rest are zeros. */
  int busy = (int)dt__chunk_nonempty(extent, n);
  for (int r = 0; r < busy; r++) {
    int64_t start, length;
    dt__chunk_range(extent, n, r, &start, &length);
    cnt[r] = length * inner;
  }
  memset(cnt + busy, 0, sizeof(int64_t) * (size_t)(n - busy));
  *total = extent * inner;
  return cnt;
}

/* The end of a step through flat d-major buffers: when st is OK, `received` unpacked into a
 * new tensor of out_shape; then both buffers and the counts are freed. */
static dt_status finish_packed(dt_status st, dt_tensor *sent, dt_tensor *received, int64_t *counts,
                               int ndim, const int64_t *out_shape, int d, dt_tensor **out) {
  if (!st) st = unpack_front(received, ndim, out_shape, d, out);
  dt_tensor_release(sent);
  dt_tensor_release(received);
  dt__free(counts);
  return st;
}

/* all_gather along dim 0, where the d-major layout is the natural one: straight into the
 * result, from the shard itself when it is contiguous. */
static dt_status gather_dim0(dt_comm *comm, dt_tensor *local, const int64_t *cnt, int64_t total,
                             const int64_t *out_shape, int ndim, dt_tensor **out) {
  dt_status st = dt__dist_new_like(local, ndim, out_shape, local->dtype, out);
  if (st) return st;
  dt_tensor out_flat = stack_view(*out, 1, &total, (int64_t[]){1}, 0);
  dt_tensor *packed = NULL;
  if (dt__is_contiguous(local->ndim, local->shape, local->strides)) {
    dt_tensor in_flat = stack_view(local, 1, &cnt[0], (int64_t[]){1}, local->offset);
    in_flat.shape[0] = dt__tensor_numel(local);
    st = dt_comm_all_gather_uneven(comm, &in_flat, &out_flat, cnt);
  } else {
    st = pack_front(local, 0, &packed);
    if (!st) st = dt_comm_all_gather_uneven(comm, packed, &out_flat, cnt);
  }
  dt_tensor_release(packed);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

static dt_status step_all_gather(dt_comm *comm, dt_tensor *local, int d, int64_t extent, int n,
                                 const int64_t *out_shape, int ndim, dt_tensor **out) {
  int64_t total;
  int64_t *cnt = chunk_counts(local, d, extent, n, &total);
  if (!cnt) return DT_ERR_NOMEM;
  if (d == 0) {
    dt_status st = gather_dim0(comm, local, cnt, total, out_shape, ndim, out);
    dt__free(cnt);
    return st;
  }
  dt_tensor *packed = NULL, *gathered = NULL;
  dt_status st = pack_front(local, d, &packed);
  if (!st) st = dt__dist_new_like(local, 1, &total, local->dtype, &gathered);
  if (!st) st = dt_comm_all_gather_uneven(comm, packed, gathered, cnt);
  return finish_packed(st, packed, gathered, cnt, ndim, out_shape, d, out);
}

static dt_status step_reduce_scatter(dt_comm *comm, dt_tensor *local, int d, int n, int coord,
                                     dt_reduce_op op, const int64_t *out_shape, int ndim,
                                     dt_tensor **out) {
  int64_t total;
  int64_t *cnt = chunk_counts(local, d, local->shape[d], n, &total);
  if (!cnt) return DT_ERR_NOMEM;
  dt_tensor *packed = NULL, *scattered = NULL;
  dt_status st = pack_front(local, d, &packed);
  if (!st) st = dt__dist_new_like(local, 1, &cnt[coord], local->dtype, &scattered);
  if (!st) st = dt_comm_reduce_scatter_uneven(comm, packed, scattered, cnt, op);
  return finish_packed(st, packed, scattered, cnt, ndim, out_shape, d, out);
}

static dt_status step_all_reduce(dt_comm *comm, dt_tensor *local, dt_reduce_op op,
                                 dt_tensor **out) {
  dt_tensor *copy = NULL;
  dt_status st = dt__dist_new_like(local, local->ndim, local->shape, local->dtype, &copy);
  if (!st) st = copy_local(copy, local);
  if (st) {
    dt_tensor_release(copy);
    return st;
  }
  dt_tensor flat = stack_view(copy, 1, (int64_t[]){dt__tensor_numel(copy)}, (int64_t[]){1}, 0);
  st = dt_comm_all_reduce(comm, &flat, op);
  if (st) {
    dt_tensor_release(copy);
    return st;
  }
  *out = copy;
  return DT_OK;
}

/* S(d) -> S(e) on one mesh dim: block r of e goes to rank r; from rank r comes its piece of
 * d with this rank's piece of e. Blocks travel d-major so received blocks stack along d. */
static dt_status step_all_to_all(dt_comm *comm, dt_tensor *local, int d, int e, int64_t extent_d,
                                 int n, int coord, const int64_t *out_shape, int ndim,
                                 dt_tensor **out) {
  int64_t extent_e = local->shape[e];
  int64_t *send = dt__alloc(sizeof(int64_t) * (size_t)n * 2);
  if (!send) return dt__error(DT_ERR_NOMEM, "dt_dist_redistribute: cannot allocate counts");
  int64_t *recv = send + n;
  int64_t other = numel_without(local, d, e); /* elements per (d, e) pair */
  int64_t my_e_start, my_e_len;
  dt__chunk_range(extent_e, n, coord, &my_e_start, &my_e_len);
  /* Only the first chunks of each dim are non-empty (a small dim over many ranks). */
  int busy_e = (int)dt__chunk_nonempty(extent_e, n), busy_d = (int)dt__chunk_nonempty(extent_d, n);
  memset(send, 0, sizeof(int64_t) * (size_t)n * 2);
  for (int r = 0; r < busy_e; r++) {
    int64_t s, l;
    dt__chunk_range(extent_e, n, r, &s, &l);
    send[r] = local->shape[d] * l * other;
  }
  for (int r = 0; r < busy_d; r++) {
    int64_t s, l;
    dt__chunk_range(extent_d, n, r, &s, &l);
    recv[r] = l * my_e_len * other;
  }
  int64_t send_total = local->shape[d] * extent_e * other;
  int64_t recv_total = extent_d * my_e_len * other;
  dt_tensor *sendbuf = NULL, *recvbuf = NULL;
  dt_status st = dt__dist_new_like(local, 1, &send_total, local->dtype, &sendbuf);
  if (!st) st = dt__dist_new_like(local, 1, &recv_total, local->dtype, &recvbuf);
  int64_t pos = 0;
  for (int r = 0; r < busy_e && !st; r++) {
    /* Block r: local narrowed to e-chunk r, laid out d-major, at sendbuf[pos..). */
    if (send[r] == 0) continue;
    int64_t s, l;
    dt__chunk_range(extent_e, n, r, &s, &l);
    int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
    memcpy(shape, local->shape, sizeof shape);
    shape[e] = l;
    dt_tensor narrow =
        stack_view(local, ndim, shape, local->strides, local->offset + s * local->strides[e]);
    dt_tensor narrow_front = front_of(&narrow, d);
    dt__contiguous_strides(ndim, narrow_front.shape, strides);
    dt_tensor dst = stack_view(sendbuf, ndim, narrow_front.shape, strides, pos);
    st = copy_local(&dst, &narrow_front);
    pos += send[r];
  }
  if (!st) st = dt_comm_all_to_all(comm, sendbuf, recvbuf, send, recv);
  return finish_packed(st, sendbuf, recvbuf, send, ndim, out_shape, d, out);
}

/* R -> S(d): this rank's chunk of d, as a view. */
static dt_status step_slice(dt_tensor *local, int d, int n, int coord, dt_tensor **out) {
  int64_t start, length;
  dt__chunk_range(local->shape[d], n, coord, &start, &length);
  int64_t shape[DT_MAX_DIMS];
  memcpy(shape, local->shape, sizeof shape);
  shape[d] = length;
  return dt__tensor_view(local, local->ndim, shape, local->strides,
                         local->offset + start * local->strides[d], out);
}

/* R -> P(op): sum keeps the value on coordinate 0 and zeros elsewhere (exact for every
 * dtype); avg, max and min keep the value everywhere. */
static dt_status step_to_partial(dt_tensor *local, dt_reduce_op op, int coord, dt_tensor **out) {
  if (op == DT_REDUCE_SUM && coord != 0) {
    dt_status st = dt__dist_new_like(local, local->ndim, local->shape, local->dtype, out);
    if (!st) st = dt__dist_fill(*out, 0.0);
    if (st) {
      dt_tensor_release(*out);
      *out = NULL;
    }
    return st;
  }
  *out = dt_tensor_retain(local);
  return DT_OK;
}

/* S(d) -> P(sum): a block of zeros shaped like the unsplit dim with this rank's chunk of d
 * copied in place; the blocks of the ranks sum to the whole, exactly for every dtype. */
static dt_status step_shard_to_partial(dt_tensor *local, int d, int64_t extent, int n, int coord,
                                       const int64_t *out_shape, int ndim, dt_tensor **out) {
  dt_tensor *result = NULL;
  dt_status st = dt__dist_new_like(local, ndim, out_shape, local->dtype, &result);
  if (!st) st = dt__dist_fill(result, 0.0);
  int64_t start, length;
  dt__chunk_range(extent, n, coord, &start, &length);
  if (!st && length > 0) {
    dt_tensor window = stack_view(result, ndim, local->shape, result->strides,
                                  result->offset + start * result->strides[d]);
    st = copy_local(&window, local);
  }
  if (st) {
    dt_tensor_release(result);
    return st;
  }
  *out = result;
  return DT_OK;
}

/* t with dim d viewed as two dims [f, shape[d] / f] (always a valid view). */
static dt_tensor split_dim(const dt_tensor *t, int d, int64_t f) {
  int64_t shape[DT_MAX_DIMS], strides[DT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (i == d) {
      shape[k] = f;
      strides[k++] = t->strides[i] * (t->shape[i] / f);
      shape[k] = t->shape[i] / f;
      strides[k++] = t->strides[i];
    } else {
      shape[k] = t->shape[i];
      strides[k++] = t->strides[i];
    }
  }
  return stack_view(t, t->ndim + 1, shape, strides, t->offset);
}

/* A fresh contiguous tensor of ndim + 1 dims seen as ndim dims, dims d and d + 1 merged. */
static void merge_in_place(dt_tensor *t, int d) {
  int64_t shape[DT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; i++) {
    shape[k] = t->shape[i];
    if (i == d) shape[k] *= t->shape[++i];
    k++;
  }
  t->ndim = k;
  memcpy(t->shape, shape, sizeof(int64_t) * (size_t)k);
  dt__contiguous_strides(k, t->shape, t->strides);
}

static dt_status check_split_rank(int ndim) {
  if (ndim + 1 > DT_MAX_DIMS) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_dist_redistribute: a StridedShard of a %d-dim tensor needs one more "
                     "dim than the %d supported",
                     ndim, DT_MAX_DIMS);
  }
  return DT_OK;
}

dt_status dt__strided_slice(dt_tensor *local, int d, int64_t f, int n, int coord, dt_tensor **out) {
  dt_status st = check_split_rank(local->ndim);
  if (st) return st;
  dt_tensor blocks = split_dim(local, d, f);
  int64_t start, length;
  dt__chunk_range(blocks.shape[d + 1], n, coord, &start, &length);
  blocks.offset += start * blocks.strides[d + 1];
  blocks.shape[d + 1] = length;
  st = dt__dist_new_like(local, blocks.ndim, blocks.shape, local->dtype, out);
  if (!st) st = copy_local(*out, &blocks);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
    return st;
  }
  merge_in_place(*out, d);
  return DT_OK;
}

/* out_shape (ndim dims) with dim d, of whole size extent, seen as f blocks: [.., f, extent / f,
 * ..] (ndim + 1 dims), the shape a strided dim's collective works on. */
static void blocks_shape(const int64_t *out_shape, int ndim, int d, int64_t f, int64_t extent,
                         int64_t *shape) {
  int k = 0;
  for (int i = 0; i < ndim; i++) {
    if (i == d) {
      shape[k++] = f;
      shape[k++] = extent / f;
    } else {
      shape[k++] = out_shape[i];
    }
  }
}

/* SS(d, f) -> R: the shard seen as [f, chunk] along d is gathered along the chunk dim, which
 * puts every block back together; the result seen as [f * L / f] is the whole dim. */
static dt_status step_strided_gather(dt_comm *comm, dt_tensor *local, int d, int64_t f,
                                     int64_t extent, int n, const int64_t *out_shape, int ndim,
                                     dt_tensor **out) {
  dt_status st = check_split_rank(ndim);
  if (st) return st;
  dt_tensor blocks = split_dim(local, d, f);
  int64_t shape[DT_MAX_DIMS];
  blocks_shape(out_shape, ndim, d, f, extent, shape);
  st = step_all_gather(comm, &blocks, d + 1, extent / f, n, shape, ndim + 1, out);
  if (!st) merge_in_place(*out, d);
  return st;
}

/* Where the elements of dim d (whole size `extent`, f blocks of extent / f) lie under S(d) and
 * under SS(d, f) on a mesh dim of n ranks, both cut with torch.chunk rules: element g is in
 * contiguous chunk g / piece and in strided chunk (g % block) / block_piece. A strided rank's
 * elements are ascending in g, so each contiguous chunk's share of them is one run. */
typedef struct strided_layout {
  int64_t f, block, block_piece, piece;
} strided_layout;

static strided_layout strided_layout_of(int64_t extent, int64_t f, int n) {
  strided_layout s = {f, extent / f, 0, (extent + n - 1) / n};
  s.block_piece = (s.block + n - 1) / n;
  return s;
}

/* How many of strided rank `coord`'s elements each contiguous chunk holds (counts[r] += ...). */
static void strided_rows_by_contiguous(const strided_layout *s, int n, int coord, int64_t *counts) {
  int64_t chunk_start, chunk_len;
  dt__chunk_range(s->block, n, coord, &chunk_start, &chunk_len);
  for (int64_t i = 0; i < s->f && s->piece > 0; i++) {
    for (int64_t j = 0; j < chunk_len; j++) counts[(i * s->block + chunk_start + j) / s->piece]++;
  }
}

/* For the elements g = start .. start + length - 1: how many each strided rank holds
 * (counts[q] += ...), and where element g lands when they are grouped by strided rank, in
 * ascending g within a group (order[g - start]). */
static void contiguous_rows_by_strided(const strided_layout *s, int n, int64_t start,
                                       int64_t length, int64_t *counts, int64_t *order) {
  int64_t *at = counts + n; /* scratch: each group's next free position */
  for (int64_t g = start; g < start + length; g++) counts[(g % s->block) / s->block_piece]++;
  at[0] = 0;
  for (int q = 1; q < n; q++) at[q] = at[q - 1] + counts[q - 1];
  for (int64_t g = start; g < start + length; g++)
    order[g - start] = at[(g % s->block) / s->block_piece]++;
}

/* SS(d, f) <-> S(d) on one mesh dim, one all_to_all. The strided side sends its elements, already
 * in global order, to the ranks whose contiguous chunk holds them and receives its strided
 * elements in global order, which is its local order. The contiguous side groups its elements
 * by strided rank before sending, or puts what arrives back in global order. Rows (all dims but
 * d) travel d-major, as for every step along d. */
static dt_status strided_shard_exchange(dt_comm *comm, dt_tensor *local, int d, int64_t f,
                                        int64_t extent, int n, int coord, bool to_strided,
                                        const int64_t *out_shape, int ndim, dt_tensor **out) {
  strided_layout s = strided_layout_of(extent, f, n);
  int64_t inner = 1;
  for (int i = 0; i < ndim; i++) {
    if (i != d) inner *= local->shape[i];
  }
  int64_t my_start, my_len;
  dt__chunk_range(extent, n, coord, &my_start, &my_len);
  /* by_strided (and its scratch), by_contiguous, then the contiguous side's order. */
  int64_t *cnt = dt__calloc(sizeof(int64_t) * ((size_t)n * 3 + (size_t)my_len));
  if (!cnt) return dt__error(DT_ERR_NOMEM, "dt_dist_redistribute: cannot allocate counts");
  int64_t *by_strided = cnt, *by_contiguous = cnt + 2 * n, *order = cnt + 3 * n;
  contiguous_rows_by_strided(&s, n, my_start, my_len, by_strided, order);
  strided_rows_by_contiguous(&s, n, coord, by_contiguous);
  int64_t *send = to_strided ? by_strided : by_contiguous;
  int64_t *recv = to_strided ? by_contiguous : by_strided;
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < n; r++) {
    send[r] *= inner;
    recv[r] *= inner;
    send_total += send[r];
    recv_total += recv[r];
  }
  size_t row = (size_t)inner * dt__dtype_sizes[local->dtype];
  dt_tensor *packed = NULL, *sendbuf = NULL, *recvbuf = NULL, *ordered = NULL;
  dt_status st = pack_front(local, d, &packed);
  if (!st && to_strided) {
    st = dt__dist_new_like(local, 1, &send_total, local->dtype, &sendbuf);
    if (!st) st = dt__dist_permute_rows(packed, sendbuf, order, my_len, row, true);
  } else if (!st) {
    sendbuf = dt_tensor_retain(packed);
  }
  if (!st) st = dt__dist_new_like(local, 1, &recv_total, local->dtype, &recvbuf);
  if (!st) st = dt_comm_all_to_all(comm, sendbuf, recvbuf, send, recv);
  if (!st && !to_strided) {
    st = dt__dist_new_like(local, 1, &recv_total, local->dtype, &ordered);
    if (!st) st = dt__dist_permute_rows(recvbuf, ordered, order, my_len, row, false);
  }
  if (!st) st = unpack_front(to_strided ? recvbuf : ordered, ndim, out_shape, d, out);
  dt_tensor_release(packed);
  dt_tensor_release(sendbuf);
  dt_tensor_release(recvbuf);
  dt_tensor_release(ordered);
  dt__free(cnt);
  return st;
}

/* P(op) -> SS(d, f): the local value, its elements of d grouped by the strided rank that will
 * hold them (ascending within a group, which is that rank's local order), reduce-scattered. */
static dt_status step_strided_reduce_scatter(dt_comm *comm, dt_tensor *local, int d, int64_t f,
                                             int n, int coord, dt_reduce_op op,
                                             const int64_t *out_shape, int ndim, dt_tensor **out) {
  int64_t extent = local->shape[d];
  strided_layout s = strided_layout_of(extent, f, n);
  int64_t inner = 1;
  for (int i = 0; i < ndim; i++) {
    if (i != d) inner *= local->shape[i];
  }
  int64_t *cnt = dt__calloc(sizeof(int64_t) * ((size_t)n * 2 + (size_t)extent));
  if (!cnt) return dt__error(DT_ERR_NOMEM, "dt_dist_redistribute: cannot allocate counts");
  int64_t *order = cnt + 2 * n;
  contiguous_rows_by_strided(&s, n, 0, extent, cnt, order);
  for (int r = 0; r < n; r++) cnt[r] *= inner;
  int64_t total = extent * inner;
  dt_tensor *packed = NULL, *grouped = NULL, *scattered = NULL;
  dt_status st = pack_front(local, d, &packed);
  if (!st) st = dt__dist_new_like(local, 1, &total, local->dtype, &grouped);
  if (!st) {
    st = dt__dist_permute_rows(packed, grouped, order, extent,
                               (size_t)inner * dt__dtype_sizes[local->dtype], true);
  }
  if (!st) st = dt__dist_new_like(local, 1, &cnt[coord], local->dtype, &scattered);
  if (!st) st = dt_comm_reduce_scatter_uneven(comm, grouped, scattered, cnt, op);
  if (!st) st = unpack_front(scattered, ndim, out_shape, d, out);
  dt_tensor_release(packed);
  dt_tensor_release(grouped);
  dt_tensor_release(scattered);
  dt__free(cnt);
  return st;
}

/* SS(d, f) <-> S(e) (to_strided: S(e) -> SS(d, f)); extent is the extent of the dim that is
 * sharded before the step (d's from SS, e's from S) at this mesh level. For e == d the exchange
 * above. For e != d, with d seen as [f, chunk], one all_to_all: from SS, from the chunk dim to e
 * (each rank receives every rank's chunks of its piece of e), the received chunks stacking
 * into whole blocks, which seen as one dim are d in order; to SS, the inverse, from e to the
 * chunk dim, whose chunks are this rank's strided chunks. */
static dt_status strided_shard_swap(dt_comm *comm, dt_tensor *local, int d, int64_t f, int e,
                                    bool to_strided, int64_t extent, int n, int coord,
                                    const int64_t *out_shape, int ndim, dt_tensor **out) {
  dt_status st = check_split_rank(ndim);
  if (st) return st;
  if (e == d)
    return strided_shard_exchange(comm, local, d, f, extent, n, coord, to_strided, out_shape, ndim,
                                  out);
  dt_tensor blocks = split_dim(local, d, f);
  int64_t shape[DT_MAX_DIMS];
  blocks_shape(out_shape, ndim, d, f, to_strided ? out_shape[d] : extent, shape);
  int chunk_dim = d + 1, other = e < d ? e : e + 1;
  st =
      step_all_to_all(comm, &blocks, to_strided ? other : chunk_dim, to_strided ? chunk_dim : other,
                      to_strided ? extent : extent / f, n, coord, shape, ndim + 1, out);
  if (!st) merge_in_place(*out, d);
  return st;
}

dt_status dt__redistribute_execute(dt_tensor *local, const dt_dist_spec *from,
                                   const dt_redistribute_plan *plan, dt_tensor **out) {
  dt_mesh_info mi;
  dt__mesh_info(from->mesh, &mi);
  dt_placement state[DT_MESH_MAX_DIMS];
  memcpy(state, from->placements, sizeof(dt_placement) * (size_t)from->mesh_ndim);
  dt_tensor *current = dt_tensor_retain(local);
  for (int i = 0; i < plan->n_steps; i++) {
    const dt_redistribute_step *step = &plan->steps[i];
    int m = step->mesh_dim;
    int n = (int)mi.size[m];
    int coord = (int)mi.coord[m];
    dt_placement after[DT_MESH_MAX_DIMS];
    memcpy(after, state, sizeof after);
    after[m] = step->to;
    int64_t out_shape[DT_MAX_DIMS];
    shard_shape(from, &mi, after, out_shape);
    dt_comm *comm = dt_mesh_group(from->mesh, m);
    dt_tensor *next = NULL;
    dt_status st = DT_OK;
    if (n == 1 && step->kind != DT_STEP_TO_PARTIAL) {
      next = dt_tensor_retain(current); /* one rank: every step keeps the data as it is */
    } else {
      switch (step->kind) {
      case DT_STEP_ALL_GATHER:
        if (step->from.kind == DT_STRIDED_SHARD) {
          st = step_strided_gather(comm, current, step->from.dim, step->from.split_factor,
                                   out_shape[step->from.dim], n, out_shape, from->ndim, &next);
          break;
        }
        st = step_all_gather(comm, current, step->from.dim,
                             level_extent(from, &mi, state, m, step->from.dim), n, out_shape,
                             from->ndim, &next);
        break;
      case DT_STEP_REDUCE_SCATTER:
        if (step->to.kind == DT_STRIDED_SHARD) {
          st = step_strided_reduce_scatter(comm, current, step->to.dim, step->to.split_factor, n,
                                           coord, step->from.op, out_shape, from->ndim, &next);
          break;
        }
        st = step_reduce_scatter(comm, current, step->to.dim, n, coord, step->from.op, out_shape,
                                 from->ndim, &next);
        break;
      case DT_STEP_ALL_REDUCE: st = step_all_reduce(comm, current, step->from.op, &next); break;
      case DT_STEP_ALL_TO_ALL:
        if (step->from.kind == DT_STRIDED_SHARD) {
          st = strided_shard_swap(comm, current, step->from.dim, step->from.split_factor,
                                  step->to.dim, false,
                                  level_extent(from, &mi, state, m, step->from.dim), n, coord,
                                  out_shape, from->ndim, &next);
          break;
        }
        if (step->to.kind == DT_STRIDED_SHARD) {
          st =
              strided_shard_swap(comm, current, step->to.dim, step->to.split_factor, step->from.dim,
                                 true, level_extent(from, &mi, state, m, step->from.dim), n, coord,
                                 out_shape, from->ndim, &next);
          break;
        }
        st = step_all_to_all(comm, current, step->from.dim, step->to.dim,
                             level_extent(from, &mi, state, m, step->from.dim), n, coord, out_shape,
                             from->ndim, &next);
        break;
      case DT_STEP_SLICE:
        if (step->to.kind == DT_STRIDED_SHARD) {
          st = dt__strided_slice(current, step->to.dim, step->to.split_factor, n, coord, &next);
          break;
        }
        st = step_slice(current, step->to.dim, n, coord, &next);
        break;
      case DT_STEP_TO_PARTIAL: st = step_to_partial(current, step->to.op, coord, &next); break;
      case DT_STEP_SHARD_TO_PARTIAL:
        st = step_shard_to_partial(current, step->from.dim,
                                   level_extent(from, &mi, state, m, step->from.dim), n, coord,
                                   out_shape, from->ndim, &next);
        break;
      default: st = dt__error(DT_ERR_INTERNAL, "dt_dist_redistribute: invalid step"); break;
      }
    }
    dt_tensor_release(current);
    if (st) return st;
    current = next;
    memcpy(state, after, sizeof after);
  }
  *out = current;
  return DT_OK;
}

void dt__redistribute_exact_bytes(const dt_dist_spec *from, dt_redistribute_plan *plan) {
  dt_mesh_info mi;
  dt__mesh_info(from->mesh, &mi);
  dt_placement state[DT_MESH_MAX_DIMS];
  memcpy(state, from->placements, sizeof(dt_placement) * (size_t)from->mesh_ndim);
  int64_t esize = (int64_t)dt__dtype_sizes[from->dtype];
  plan->bytes = 0;
  for (int i = 0; i < plan->n_steps; i++) {
    dt_redistribute_step *step = &plan->steps[i];
    int m = step->mesh_dim;
    dt_placement after[DT_MESH_MAX_DIMS];
    memcpy(after, state, sizeof after);
    after[m] = step->to;
    int64_t before_shape[DT_MAX_DIMS], after_shape[DT_MAX_DIMS];
    shard_shape(from, &mi, state, before_shape);
    shard_shape(from, &mi, after, after_shape);
    int64_t before = dt__numel(from->ndim, before_shape) * esize;
    int64_t result = dt__numel(from->ndim, after_shape) * esize;
    /* The cost model's bytes on the exact shard geometry of this rank. */
    step->bytes = dt__step_bytes(step->kind, mi.size[m], before, result);
    plan->bytes += step->bytes;
    memcpy(state, after, sizeof after);
  }
}
