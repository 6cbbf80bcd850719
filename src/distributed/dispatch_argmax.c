/*
 * argmax over every dim of a sharded tensor (issue 43): each shard's own winner is a candidate
 * (its value and its global flat index), the candidates are gathered along each mesh dim that
 * shards the tensor and every rank keeps the best one. A few bytes per rank instead of the
 * whole tensor gathered (PyTorch gathers per-shard candidates too).
 */
#include <math.h>

#include "distributed/dist_impl.h"
#include "tensor/dtype_impl.h"

bool dt__dist_argmax_candidates(const dt_op_call *g, int mesh_ndim, const dt_placement *current) {
  if (g->op != DT_OP_ARGMAX || g->n_ints > 0 || !g->inputs[0]) return false; /* with a dim */
  bool sharded = false;
  for (int m = 0; m < mesh_ndim; m++) {
    if (current[m].kind == DT_PARTIAL || current[m].kind == DT_STRIDED_SHARD) return false;
    sharded |= current[m].kind == DT_SHARD;
  }
  return sharded;
}

/* A candidate: {value, global flat index}, the index -1 for a shard with no elements. NaN is
 * the largest value (the first NaN wins, as the local kernel and PyTorch have it); ties go to
 * the lower index, the first occurrence. */
static bool better(const double *a, const double *b) {
  if (a[1] < 0 || b[1] < 0) return b[1] < 0 && a[1] >= 0;
  bool na = isnan(a[0]), nb = isnan(b[0]);
  if (na != nb) return na;
  if (!na && a[0] != b[0]) return a[0] > b[0];
  return a[1] < b[1];
}

/* This shard's candidate: the local kernel's winner, its value read on the host, its index
 * made global through the shard's offset. */
static dt_status local_candidate(dt_op_call *lc, const dt_dist_spec *spec, double *cand) {
  const dt_tensor *x = lc->inputs[0];
  cand[0] = 0, cand[1] = -1;
  if (dt__tensor_numel(x) == 0) return DT_OK;
  dt_status st = dt__dispatch_local(lc);
  if (st) return st;
  int64_t k = *(const int64_t *)dt_tensor_data(lc->outputs[0]);
  dt_tensor_release(lc->outputs[0]);
  lc->outputs[0] = NULL;
  dt_tensor *view = NULL, *host = NULL;
  st = dt__local_view(x, &view);
  if (!st) st = dt__dist_to_host("argmax", view, &host);
  dt_tensor_release(view);
  if (st) return st;
  cand[0] = dt__load_as_double(host->dtype, (const char *)dt_tensor_data(host) +
                                                k * (int64_t)dt__dtype_sizes[host->dtype]);
  dt_tensor_release(host);
  dt_mesh_info mi;
  dt__mesh_info(spec->mesh, &mi);
  int64_t shape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
  dt__local_region(spec->ndim, spec->shape, spec->mesh_ndim, mi.size, mi.coord, spec->placements,
                   shape, offset);
  /* Unravel k in the shard's shape, ravel it shifted in the global shape. */
  int64_t global = 0, stride = 1, local_rest = k;
  int64_t index[DT_MAX_DIMS];
  for (int d = spec->ndim - 1; d >= 0; d--) {
    index[d] = shape[d] > 0 ? local_rest % shape[d] : 0;
    local_rest = shape[d] > 0 ? local_rest / shape[d] : 0;
  }
  for (int d = spec->ndim - 1; d >= 0; d--) {
    global += (index[d] + offset[d]) * stride;
    stride *= spec->shape[d];
  }
  cand[1] = (double)global;
  return DT_OK;
}

/* A candidate is two float64s. */
#define CANDIDATE_BYTES 16

int64_t dt__dist_argmax_bytes(const dt_dist_spec *spec) {
  dt_mesh_info mi;
  dt__mesh_info(spec->mesh, &mi);
  int64_t bytes = 0;
  for (int m = 0; m < spec->mesh_ndim; m++) {
    if (spec->placements[m].kind == DT_SHARD) bytes += CANDIDATE_BYTES * mi.size[m];
  }
  return bytes;
}

dt_status dt__dist_argmax_run(dt_op_call *lc, const dt_dist_spec *spec,
                              const dt_dist_spec *out_spec) {
  double best[2];
  dt_status st = local_candidate(lc, spec, best);
  if (st) return st;
  dt_tensor *mine = NULL, *all = NULL;
  for (int m = 0; m < spec->mesh_ndim && !st; m++) {
    if (spec->placements[m].kind != DT_SHARD) continue;
    dt_comm *group = dt_mesh_group(spec->mesh, m);
    int n = dt_comm_size(group);
    st = dt__tensor_new(1, (int64_t[]){2}, DT_F64, &mine);
    if (!st) st = dt__tensor_new(1, (int64_t[]){2 * (int64_t)n}, DT_F64, &all);
    if (!st) {
      double *p = dt_tensor_data(mine);
      p[0] = best[0], p[1] = best[1];
      st = dt_comm_all_gather_into_tensor(group, mine, all);
    }
    if (!st) {
      const double *q = dt_tensor_data(all);
      for (int r = 0; r < n; r++) {
        if (better(q + 2 * r, best)) best[0] = q[2 * r], best[1] = q[2 * r + 1];
      }
    }
    dt_tensor_release(mine);
    dt_tensor_release(all);
    mine = all = NULL;
  }
  if (!st) st = dt__tensor_new(out_spec->ndim, out_spec->shape, DT_I64, &lc->outputs[0]);
  if (!st) *(int64_t *)dt_tensor_data(lc->outputs[0]) = (int64_t)best[1];
  return st;
}
