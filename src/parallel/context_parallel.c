/*
 * Context parallelism's layouts (PyTorch's experimental context_parallel): which positions of a
 * sequence each cp rank holds (head-tail, the load-balanced layout for causal attention, or
 * contiguous), sharding a whole tensor into this rank's part and gathering the parts back.
 * Ring attention over these layouts is in ring_attention.c.
 */
#include <stdio.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"
#include "parallel/context_parallel_impl.h"
#include "tensor/tensor_impl.h"

/* ---- Layouts ------------------------------------------------------------------------------- */

/* Chunk c of a sequence of len positions cut into `chunks` by torch.chunk's rule. */
static void chunk_of(int64_t len, int64_t chunks, int64_t c, int64_t *start, int64_t *length) {
  /* Written so that no product or sum passes len (a len near INT64_MAX must not overflow):
   * chunk c starts at c * size, or at len when c >= len / size. */
  int64_t size = len / chunks + (len % chunks != 0);
  int64_t lo = size > 0 && c <= len / size ? c * size : len;
  int64_t hi = size > 0 && c + 1 <= len / size ? (c + 1) * size : len;
  *start = lo;
  *length = hi - lo;
}

void dt__cp_segments_of(int64_t seq_len, int size, int rank, dt_cp_layout layout,
                        dt__cp_segments *out) {
  memset(out, 0, sizeof *out);
  if (layout == DT_CP_LAYOUT_CONTIGUOUS) {
    out->n = 1;
    chunk_of(seq_len, size, rank, &out->start[0], &out->length[0]);
  } else {
    out->n = 2;
    chunk_of(seq_len, 2 * (int64_t)size, rank, &out->start[0], &out->length[0]);
    chunk_of(seq_len, 2 * (int64_t)size, 2 * (int64_t)size - 1 - rank, &out->start[1],
             &out->length[1]);
  }
  for (int i = 0; i < out->n; i++) {
    out->offset[i] = out->total;
    out->total += out->length[i];
  }
}

dt_status dt_parallel_cp_segments(int64_t seq_len, int cp_size, int cp_rank, dt_cp_layout layout,
                                  int64_t starts[2], int64_t lengths[2], int *n_segments) {
  if (!starts || !lengths || !n_segments)
    return dt__error(DT_ERR_INVALID, "dt_parallel_cp_segments: %s is NULL",
                     !starts    ? "starts"
                     : !lengths ? "lengths"
                                : "n_segments");
  if (seq_len < 0 || cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_cp_segments: seq_len %lld, cp_size %d, cp_rank %d (need "
                     "seq_len >= 0 and 0 <= cp_rank < cp_size)",
                     (long long)seq_len, cp_size, cp_rank);
  if (!dt__cp_layout_valid(layout))
    return dt__error(DT_ERR_INVALID, "dt_parallel_cp_segments: unknown layout %d", (int)layout);
  dt__cp_segments s;
  dt__cp_segments_of(seq_len, cp_size, cp_rank, layout, &s);
  *n_segments = s.n;
  for (int i = 0; i < 2; i++) {
    starts[i] = i < s.n ? s.start[i] : 0;
    lengths[i] = i < s.n ? s.length[i] : 0;
  }
  return DT_OK;
}

/* The mesh, cp dim, tensor and output checks shared by shard and unshard; *dim gets seq_dim
 * made non-negative. */
static dt_status check_common(const char *fn, dt_mesh *mesh, int cp_dim, const dt_tensor *t,
                              const char *arg, int64_t seq_dim, dt_cp_layout layout,
                              dt_tensor **out, int64_t *dim) {
  if (out) *out = NULL;
  if (!mesh || !t || !out)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", fn, !mesh ? "mesh" : !t ? arg : "out");
  if (cp_dim < 0 || cp_dim >= dt_mesh_ndim(mesh))
    return dt__error(DT_ERR_INVALID, "%s: cp_dim %d outside the mesh's %d dims", fn, cp_dim,
                     dt_mesh_ndim(mesh));
  if (dt_tensor_is_distributed(t))
    return dt__error(DT_ERR_UNSUPPORTED, "%s: %s is distributed (not built: pass a local tensor)",
                     fn, arg);
  if (!dt__cp_layout_valid(layout))
    return dt__error(DT_ERR_INVALID, "%s: unknown layout %d", fn, (int)layout);
  int nd = dt_tensor_ndim(t);
  if (seq_dim < -nd || seq_dim >= nd || nd == 0)
    return dt__error(DT_ERR_INDEX, "%s: seq_dim %lld outside the %d dims of %s", fn,
                     (long long)seq_dim, nd, arg);
  *dim = seq_dim < 0 ? seq_dim + nd : seq_dim;
  return DT_OK;
}

/* Rank `rank`'s part of full (seq_len positions on dim), as ops (recorded under grad mode). */
static dt_status shard_local(dt_tensor *full, int64_t dim, int size, int rank, dt_cp_layout layout,
                             dt_tensor **out) {
  dt__cp_segments s;
  dt__cp_segments_of(dt_tensor_size(full, (int)dim), size, rank, layout, &s);
  dt_tensor *parts[2] = {NULL, NULL};
  int n = 0;
  dt_status st = DT_OK;
  for (int i = 0; i < s.n && !st; i++)
    if (s.length[i] > 0 || (i == s.n - 1 && n == 0))
      st = dt_narrow(full, dim, s.start[i], s.length[i], &parts[n++]);
  if (!st) st = n == 1 ? dt_clone(parts[0], out) : dt_cat(n, parts, dim, out);
  for (int i = 0; i < n; i++) dt_tensor_release(parts[i]);
  return st;
}

dt_status dt_parallel_cp_shard_sequence(dt_mesh *mesh, int cp_dim, dt_tensor *full, int64_t seq_dim,
                                        dt_cp_layout layout, dt_tensor **out) {
  int64_t dim = 0;
  dt_status st = check_common("dt_parallel_cp_shard_sequence", mesh, cp_dim, full, "full", seq_dim,
                              layout, out, &dim);
  if (st) return st;
  return shard_local(full, dim, dt_mesh_size(mesh, cp_dim), dt_mesh_coordinate(mesh, cp_dim),
                     layout, out);
}

/* ---- Unshard ------------------------------------------------------------------------------- */

typedef struct unshard_state {
  int64_t dim;
  int size, rank;
  dt_cp_layout layout;
} unshard_state;

static dt_status unshard_backward(void *state, dt_tensor *grad_output, dt_tensor **grad_input) {
  unshard_state *s = state;
  return shard_local(grad_output, s->dim, s->size, s->rank, s->layout, grad_input);
}

static void unshard_release(void *state) { dt__free(state); }

static const dt_autograd_function unshard_function = {
    .name = "dt_parallel_cp_unshard_sequence",
    .backward = unshard_backward,
    .release = unshard_release,
};

enum { U_LEN, U_NDIM, U_DTYPE, U_SHAPE, U_FIELDS = U_SHAPE + DT_MAX_DIMS };

/* Every rank's length on dim, after checking that the other dims, the dtype and the lengths
 * agree with the layout (the same verdict on every rank: all of them check the gathered
 * descriptors). */
static dt_status gather_lengths(const char *fn, dt_comm *group, const dt_tensor *local, int64_t dim,
                                dt_cp_layout layout, int64_t *lens, int64_t *total) {
  int size = dt_comm_size(group);
  int64_t mine[U_FIELDS] = {0};
  int nd = dt_tensor_ndim(local);
  mine[U_LEN] = dt_tensor_size(local, (int)dim);
  mine[U_NDIM] = nd;
  mine[U_DTYPE] = dt_tensor_dtype(local);
  for (int d = 0; d < nd; d++) mine[U_SHAPE + d] = d == dim ? 0 : dt_tensor_size(local, d);
  dt_tensor *in = NULL, *all = NULL;
  int64_t *got = dt__alloc(sizeof(int64_t) * U_FIELDS * (size_t)size);
  dt_status st = got ? DT_OK : dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  if (!st) st = dt_from_data(mine, 1, (int64_t[]){U_FIELDS}, DT_I64, &in);
  if (!st) st = dt_empty(1, (int64_t[]){(int64_t)U_FIELDS * size}, DT_I64, &all);
  if (!st) st = dt_comm_all_gather_into_tensor(group, in, all);
  if (!st) memcpy(got, dt_tensor_data(all), sizeof(int64_t) * U_FIELDS * (size_t)size);
  dt_tensor_release(in), dt_tensor_release(all);
  *total = 0;
  for (int r = 0; r < size && !st; r++) {
    const int64_t *g = got + (size_t)r * U_FIELDS;
    for (int f = U_NDIM; f < U_FIELDS && !st; f++)
      if (g[f] != got[f])
        st = dt__error(DT_ERR_SHAPE,
                       "%s: cp rank %d's part differs from rank 0's outside the sequence dim "
                       "(ndim, dtype and other sizes must be equal)",
                       fn, r);
    lens[r] = g[U_LEN];
    *total += lens[r];
  }
  for (int r = 0; r < size && !st; r++) {
    dt__cp_segments s;
    dt__cp_segments_of(*total, size, r, layout, &s);
    if (s.total != lens[r])
      st = dt__error(DT_ERR_SHAPE,
                     "%s: cp rank %d holds %lld positions; the %s layout of %lld positions over "
                     "%d ranks gives it %lld",
                     fn, r, (long long)lens[r], dt__cp_layout_name(layout), (long long)*total, size,
                     (long long)s.total);
  }
  dt__free(got);
  return st;
}

/* Reorders gathered [T, ...] (ranks' parts in rank order on dim 0) into global order. */
static dt_status reorder(dt_tensor *gathered, const int64_t *lens, int size, dt_cp_layout layout,
                         int64_t total, dt_tensor **out) {
  int chunks = layout == DT_CP_LAYOUT_HEAD_TAIL ? 2 * size : size, n = 0;
  dt_tensor **pieces = dt__calloc(sizeof(dt_tensor *) * (size_t)chunks);
  if (!pieces) return dt__error(DT_ERR_NOMEM, "dt_parallel_cp_unshard_sequence: out of memory");
  dt_status st = DT_OK;
  for (int c = 0; c < chunks && !st; c++) {
    /* The owner of chunk c and where the chunk sits in the owner's part. */
    int owner = c < size ? c : chunks - 1 - c;
    int seg = c < size ? 0 : 1;
    int64_t base = 0;
    for (int r = 0; r < owner; r++) base += lens[r];
    dt__cp_segments s;
    dt__cp_segments_of(total, size, owner, layout, &s);
    if (s.length[seg] > 0)
      st = dt_narrow(gathered, 0, base + s.offset[seg], s.length[seg], &pieces[n++]);
  }
  if (!st) st = n == 0 ? dt_clone(gathered, out) : dt_cat(n, pieces, 0, out);
  dt__tensors_free(pieces, n);
  return st;
}

static dt_status unshard(dt_mesh *mesh, int cp_dim, dt_tensor *local, int64_t dim,
                         dt_cp_layout layout, dt_tensor **out) {
  const char *fn = "dt_parallel_cp_unshard_sequence";
  dt_comm *group = dt_mesh_group(mesh, cp_dim);
  int size = dt_comm_size(group);
  int64_t *lens = dt__alloc(sizeof(int64_t) * (size_t)size), total = 0;
  if (!lens) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  dt_tensor *moved = NULL, *in = NULL, *gathered = NULL, *ordered = NULL, *back = NULL;
  dt_status st = gather_lengths(fn, group, local, dim, layout, lens, &total);
  if (!st) st = dt_transpose(local, 0, dim, &moved);
  if (!st) st = dt_contiguous(moved, &in);
  if (!st) {
    int64_t shape[DT_MAX_DIMS];
    int nd = dt_tensor_ndim(in);
    memcpy(shape, dt_tensor_shape(in), sizeof(int64_t) * (size_t)nd);
    shape[0] = total;
    st = dt_empty(nd, shape, dt_tensor_dtype(in), &gathered);
  }
  if (!st) st = dt_comm_all_gather_uneven(group, in, gathered, lens);
  if (!st) st = reorder(gathered, lens, size, layout, total, &ordered);
  if (!st) st = dt_transpose(ordered, 0, dim, &back);
  if (!st) st = dt_contiguous(back, out);
  dt__free(lens);
  dt_tensor_release(moved), dt_tensor_release(in), dt_tensor_release(gathered);
  dt_tensor_release(ordered), dt_tensor_release(back);
  return st;
}

dt_status dt_parallel_cp_unshard_sequence(dt_mesh *mesh, int cp_dim, dt_tensor *local,
                                          int64_t seq_dim, dt_cp_layout layout, dt_tensor **out) {
  int64_t dim = 0;
  dt_status st = check_common("dt_parallel_cp_unshard_sequence", mesh, cp_dim, local, "local",
                              seq_dim, layout, out, &dim);
  if (st) return st;
  bool record = dt_grad_mode_enabled() && dt_tensor_requires_grad(local);
  bool prev = dt_grad_mode_set(false);
  dt_tensor *whole = NULL;
  st = unshard(mesh, cp_dim, local, dim, layout, &whole);
  dt_grad_mode_set(prev);
  if (!st && record) {
    /* whole was made with recording off, so it carries no autograd state yet. */
    unshard_state *s = dt__alloc(sizeof *s);
    if (!s) st = dt__error(DT_ERR_NOMEM, "dt_parallel_cp_unshard_sequence: out of memory");
    if (!st) {
      *s = (unshard_state){.dim = dim,
                           .size = dt_mesh_size(mesh, cp_dim),
                           .rank = dt_mesh_coordinate(mesh, cp_dim),
                           .layout = layout};
      st = dt__autograd_record_function(&unshard_function, s, local, whole);
    }
  }
  if (st) {
    dt_tensor_release(whole);
    return st;
  }
  *out = whole;
  return DT_OK;
}
