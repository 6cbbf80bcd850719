/* visualize_sharding and from_local's cross-rank check. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "distributed/dist_impl.h"

DT_PRINTF(4, 5) static void append(char *buf, size_t size, size_t *used, const char *fmt, ...) {
  if (*used + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *used, size - *used, fmt, ap);
  va_end(ap);
  if (n > 0) *used = *used + (size_t)n < size ? *used + (size_t)n : size - 1;
}

/* For tensor dim d: how many pieces a rank holds (*blocks: the blocks of a StridedShard it holds
 * a chunk of, 1 when none shards d) and how far apart they start (*block_len, the block). The
 * Shards of d before the StridedShard cut the extent its blocks come from (evenly); those after
 * it (the outer form) take f / their sizes consecutive blocks (dt__local_region). */
static void pieces_of(const dt_dist_spec *s, const dt_mesh_info *mi, int d, int64_t *blocks,
                      int64_t *block_len) {
  *blocks = 1, *block_len = s->shape[d];
  int64_t outer = 1, later = 1, f = 0;
  for (int m = 0; m < s->mesh_ndim; m++) {
    dt_placement p = s->placements[m];
    if (p.kind == DT_STRIDED_SHARD && p.dim == d) f = p.split_factor;
    if (p.kind == DT_SHARD && p.dim == d) *(f ? &later : &outer) *= mi->size[m];
  }
  if (f == 0) return;
  *blocks = f / later > 0 ? f / later : 1;
  *block_len = s->shape[d] / outer / f > 0 ? s->shape[d] / outer / f : 1;
}

/* Whether index i of a dim lies in one of a rank's pieces (`blocks` of `len` elements each,
 * starting at off + k * block_len). */
static bool in_pieces(int64_t i, int64_t off, int64_t len, int64_t blocks, int64_t block_len) {
  for (int64_t k = 0; k < blocks; k++) {
    int64_t start = off + k * block_len;
    if (start <= i && i < start + len) return true;
  }
  return false;
}

/* The block of the global tensor that rank r (row-major over the mesh) holds. */
static void region_of_rank(const dt_dist_spec *s, const dt_mesh_info *mi, int64_t r, int64_t *shape,
                           int64_t *off) {
  int64_t coord[DT_MESH_MAX_DIMS] = {0};
  for (int m = mi->ndim - 1; m >= 0; m--) {
    coord[m] = r % mi->size[m];
    r /= mi->size[m];
  }
  dt__local_region(s->ndim, s->shape, s->mesh_ndim, mi->size, coord, s->placements, shape, off);
}

/* Adds the bounds of a rank's pieces of a dim (its [off, off + len) in each of f blocks of
 * `block` elements) to the cuts. */
static void add_cuts(int64_t *cuts, int *n, int64_t off, int64_t len, int64_t f, int64_t block) {
  for (int64_t k = 0; k < f; k++) {
    int64_t bounds[2] = {k * block + off, k * block + off + len};
    for (int b = 0; b < 2 && *n < 64; b++) {
      bool seen = false;
      for (int i = 0; i < *n; i++) seen |= cuts[i] == bounds[b];
      if (!seen) cuts[(*n)++] = bounds[b];
    }
  }
}

dt_status dt_dist_visualize_sharding(const dt_tensor *t, char *buf, size_t size) {
  if (!t || !buf || size == 0)
    return dt__error(DT_ERR_INVALID, "dt_dist_visualize_sharding: NULL argument or empty buffer");
  if (!t->spec)
    return dt__error(DT_ERR_INVALID, "dt_dist_visualize_sharding: the tensor is not distributed");
  const dt_dist_spec *s = t->spec;
  if (s->ndim < 1 || s->ndim > 2) {
    return dt__error(
        DT_ERR_INVALID,
        "dt_dist_visualize_sharding: only 1-D and 2-D tensors can be shown (got %d dims)", s->ndim);
  }
  dt_mesh_info mi;
  dt__mesh_info(s->mesh, &mi);
  int64_t world = 1;
  for (int m = 0; m < mi.ndim; m++) world *= mi.size[m];
  /* Every rank's block; the distinct row and column boundaries make the grid. */
  int64_t rows = s->shape[0], cols = s->ndim == 2 ? s->shape[1] : 1;
  /* A StridedShard dim is blocks; a rank holds the same piece of each of some of them. */
  int64_t fr, row_block, fc = 1, col_block = cols;
  pieces_of(s, &mi, 0, &fr, &row_block);
  if (s->ndim == 2) pieces_of(s, &mi, 1, &fc, &col_block);
  int64_t rcuts[66], ccuts[66];
  int nr = 0, nc = 0;
  rcuts[nr++] = 0, rcuts[nr++] = rows, ccuts[nc++] = 0, ccuts[nc++] = cols;
  for (int64_t r = 0; r < world && r < 4096; r++) {
    int64_t shape[DT_MAX_DIMS], off[DT_MAX_DIMS];
    region_of_rank(s, &mi, r, shape, off);
    add_cuts(rcuts, &nr, off[0], shape[0] / fr, fr, row_block);
    if (s->ndim == 2) add_cuts(ccuts, &nc, off[1], shape[1] / fc, fc, col_block);
  }
  for (int i = 0; i < nr; i++) /* sort the cuts */
    for (int j = i + 1; j < nr; j++)
      if (rcuts[j] < rcuts[i]) {
        int64_t x = rcuts[i];
        rcuts[i] = rcuts[j];
        rcuts[j] = x;
      }
  for (int i = 0; i < nc; i++)
    for (int j = i + 1; j < nc; j++)
      if (ccuts[j] < ccuts[i]) {
        int64_t x = ccuts[i];
        ccuts[i] = ccuts[j];
        ccuts[j] = x;
      }
  size_t used = 0;
  buf[0] = '\0';
  char p[32];
  append(buf, size, &used, "global shape [%" PRId64 "%s", rows, s->ndim == 2 ? ", " : "]");
  if (s->ndim == 2) append(buf, size, &used, "%" PRId64 "]", cols);
  append(buf, size, &used, ", placements (");
  for (int m = 0; m < s->mesh_ndim; m++)
    append(buf, size, &used, "%s%s", m ? ", " : "",
           dt_placement_format(s->placements[m], p, sizeof p));
  append(buf, size, &used, ")\n");
  for (int i = 0; i + 1 < nr; i++) {
    if (rcuts[i] == rcuts[i + 1] && nr > 2) continue;
    for (int j = 0; j + 1 < nc; j++) {
      if (ccuts[j] == ccuts[j + 1] && nc > 2) continue;
      if (s->ndim == 2) {
        append(buf, size, &used,
               "rows %" PRId64 ":%" PRId64 ", cols %" PRId64 ":%" PRId64 " -> ranks", rcuts[i],
               rcuts[i + 1], ccuts[j], ccuts[j + 1]);
      } else {
        append(buf, size, &used, "%" PRId64 ":%" PRId64 " -> ranks", rcuts[i], rcuts[i + 1]);
      }
      int listed = 0;
      for (int64_t r = 0; r < world && r < 4096; r++) {
        int64_t shape[DT_MAX_DIMS], off[DT_MAX_DIMS];
        region_of_rank(s, &mi, r, shape, off);
        bool holds = in_pieces(rcuts[i], off[0], shape[0] / fr, fr, row_block);
        if (s->ndim == 2)
          holds = holds && in_pieces(ccuts[j], off[1], shape[1] / fc, fc, col_block);
        if (holds) {
          append(buf, size, &used, "%s %" PRId64, listed ? "," : "", r);
          listed++;
        }
      }
      if (!listed) append(buf, size, &used, " (none)");
      append(buf, size, &used, "\n");
    }
  }
  return DT_OK;
}

/* What each rank reports for from_local's check. */
typedef struct shard_report {
  int32_t ok;
  int32_t ndim;
  int32_t dtype;
  int32_t pad;
  int64_t global[DT_MAX_DIMS];
  int64_t shape[DT_MAX_DIMS];
  int64_t offset[DT_MAX_DIMS];
  uint64_t hash;
} shard_report;

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

dt_status dt__from_local_check(dt_mesh *mesh, const dt_tensor *local,
                               const dt_placement *placements, const int64_t *global_shape,
                               bool fits) {
  /* Errors name the public function the check runs in, then the option that asked for it. */
  const char *op = "dt_dist_from_local: run_check";
  dt_mesh_info mi;
  dt__mesh_info(mesh, &mi);
  shard_report me = {0};
  me.ndim = local->ndim;
  me.dtype = (int32_t)local->dtype;
  int64_t expect[DT_MAX_DIMS];
  dt__local_region(local->ndim, global_shape, mi.ndim, mi.size, mi.coord, placements, expect,
                   me.offset);
  memcpy(me.shape, local->shape, sizeof(int64_t) * (size_t)local->ndim); /* the rest stay 0 */
  memcpy(me.global, global_shape, sizeof(int64_t) * (size_t)local->ndim);
  me.ok = fits;
  dt_tensor *copy = NULL;
  dt_status st = dt__dist_to_host(op, local, &copy); /* a device mesh's shard too */
  if (st) return st;
  me.hash = hash_bytes((const unsigned char *)dt__tensor_base(copy),
                       (size_t)dt__tensor_numel(copy) * dt__dtype_sizes[copy->dtype]);
  dt_tensor_release(copy);
  dt_objects *all = NULL;
  st = dt_comm_all_gather_object(dt_mesh_world(mesh), &me, sizeof me, &all);
  if (st) return st;
  bool partial = false;
  for (int m = 0; m < mi.ndim; m++) partial |= placements[m].kind == DT_PARTIAL;
  for (int r = 0; r < all->count && !st; r++) {
    shard_report x;
    if (all->lengths[r] != sizeof x) {
      st = dt__error(DT_ERR_INVALID, "%s: rank %d sent a malformed report", op, r);
      break;
    }
    memcpy(&x, all->data + all->offsets[r], sizeof x);
    shard_report first;
    memcpy(&first, all->data + all->offsets[0], sizeof first);
    if (x.ndim != first.ndim || x.dtype != first.dtype ||
        memcmp(x.global, first.global, sizeof x.global) != 0) {
      char a[160], b[160];
      st = dt__error(DT_ERR_INVALID, "%s: rank %d declares %s %s but rank 0 declares %s %s", op, r,
                     dt__format_ints(a, sizeof a, x.ndim, x.global),
                     dt_dtype_name((dt_dtype)x.dtype),
                     dt__format_ints(b, sizeof b, first.ndim, first.global),
                     dt_dtype_name((dt_dtype)first.dtype));
      break;
    }
    if (!x.ok || x.ndim != me.ndim) {
      char a[160];
      st = dt__error(DT_ERR_INVALID, "%s: rank %d's local shape %s does not fit the global shape",
                     op, r, dt__format_ints(a, sizeof a, x.ndim, x.shape));
      break;
    }
    for (int q = 0; q < r && !partial; q++) {
      shard_report y;
      memcpy(&y, all->data + all->offsets[q], sizeof y);
      if (memcmp(x.offset, y.offset, sizeof x.offset) == 0 &&
          memcmp(x.shape, y.shape, sizeof x.shape) == 0 && x.hash != y.hash) {
        st = dt__error(DT_ERR_INVALID,
                       "%s: ranks %d and %d hold the same replicated block with different values",
                       op, q, r);
        break;
      }
    }
  }
  dt_free(all);
  return st;
}
