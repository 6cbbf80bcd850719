/*
 * The local batch of a data-parallel module (dt_parallel_fsdp, dt_parallel_ddp): each rank's
 * rows, wrapped as Shard(0) over the data-parallel mesh dim. The ranks' row counts are
 * gathered first (one all_gather of one int64 over that dim), so a batch split unevenly gets
 * its true global size, or a clear error, instead of a different global shape on each rank.
 */
#include <inttypes.h>
#include <stdio.h>

#include "core/core_impl.h"
#include "dtensor/comm.h"
#include "dtensor/dist.h"
#include "parallel/parallel_impl.h"

/* "[3, 5, 4]" into buf. */
static void format_rows(const int64_t *rows, int w, char *buf, size_t size) {
  size_t at = 0;
  for (int r = 0; r < w && at + 24 < size; r++)
    at += (size_t)snprintf(buf + at, size - at, "%s%" PRId64, r ? ", " : "[", rows[r]);
  snprintf(buf + at, size - at, "]");
}

dt_status dt__parallel_batch_input(const char *fn, dt_mesh *mesh, int dim, dt_tensor *in,
                                   dt_tensor **out) {
  *out = NULL;
  if (dt_tensor_is_distributed(in)) {
    *out = dt_tensor_retain(in);
    return DT_OK;
  }
  int ndim = dt_tensor_ndim(in);
  if (ndim < 1) {
    return dt__error(DT_ERR_INVALID,
                     "%s: input hook: a local input needs a batch dim, got a scalar", fn);
  }
  int w = dt_mesh_size(mesh, dim);
  dt_tensor *mine = NULL, *all = NULL;
  int64_t rows = dt_tensor_shape(in)[0];
  dt_status st = dt_from_data(&rows, 1, (int64_t[]){1}, DT_I64, &mine);
  if (!st) st = dt_empty(1, (int64_t[]){w}, DT_I64, &all);
  if (!st) st = dt_comm_all_gather_into_tensor(dt_mesh_group(mesh, dim), mine, all);
  int64_t total = 0;
  const int64_t *each = st ? NULL : dt_tensor_data(all);
  for (int r = 0; each && r < w; r++) total += each[r];
  bool chunked = true; /* the sizes torch.chunk gives the total, which Shard(0) describes */
  for (int r = 0; each && r < w; r++) chunked = chunked && each[r] == dt__chunk_rows(total, w, r);
  if (!st && !chunked) {
    char got[256], want[256];
    int64_t expect[64];
    int shown = w < 64 ? w : 64;
    for (int r = 0; r < shown; r++) expect[r] = dt__chunk_rows(total, w, r);
    format_rows(each, shown, got, sizeof got);
    format_rows(expect, shown, want, sizeof want);
    st = dt__error(DT_ERR_INVALID,
                   "%s: input hook: the local batches over mesh dim %d have %s rows, which do not "
                   "split a batch of %" PRId64 " as Shard(0) does (%s); pass a distributed input "
                   "for other splits",
                   fn, dim, got, total, want);
  }
  if (!st) {
    dt_placement p[DT_MAX_DIMS];
    int64_t global[DT_MAX_DIMS];
    for (int d = 0; d < dt_mesh_ndim(mesh); d++) p[d] = dt_replicate();
    p[dim] = dt_shard(0);
    for (int d = 0; d < ndim; d++) global[d] = dt_tensor_shape(in)[d];
    global[0] = total;
    dt_dist_from_local_options o = {.global_shape = global, .global_ndim = ndim};
    st = dt_dist_from_local(mesh, in, dt_mesh_ndim(mesh), p, &o, out);
  }
  dt_tensor_release(mine);
  dt_tensor_release(all);
  return st;
}
