/* Specs of distributed tensors, placements, and the geometry of shards. */
#include <inttypes.h>
#include <stdio.h>

#include "core/refcount.h"
#include "distributed/dist_impl.h"
#include "mesh/mesh_impl.h"

const char *dt_placement_format(dt_placement p, char *buf, size_t size) {
  if (!buf || size == 0) return "";
  switch (p.kind) {
  case DT_REPLICATE: snprintf(buf, size, "R"); break;
  case DT_SHARD: snprintf(buf, size, "S(%d)", p.dim); break;
  case DT_PARTIAL: snprintf(buf, size, "P(%s)", dt_reduce_op_name(p.op)); break;
  case DT_STRIDED_SHARD: snprintf(buf, size, "SS(%d,%d)", p.dim, p.split_factor); break;
  default: snprintf(buf, size, "invalid"); break;
  }
  return buf;
}

bool dt__placements_valid(int mesh_ndim, const dt_placement *placements) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (dt__strided_conflict(placements, mesh_ndim, m, placements[m])) return false;
  }
  return true;
}

bool dt__strided_nested(int mesh_ndim, const dt_placement *placements) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (placements[m].kind != DT_STRIDED_SHARD) continue;
    for (int j = 0; j < mesh_ndim; j++) {
      if (placements[j].kind == DT_SHARD && placements[j].dim == placements[m].dim) return true;
    }
  }
  return false;
}

bool dt__strided_outer(int mesh_ndim, const dt_placement *placements) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (placements[m].kind != DT_STRIDED_SHARD) continue;
    for (int j = m + 1; j < mesh_ndim; j++) {
      if (placements[j].kind == DT_SHARD && placements[j].dim == placements[m].dim) return true;
    }
  }
  return false;
}

/* For the StridedShard on mesh dim m: how many pieces the earlier Shards of its dim cut it
 * into (*outer), the extent each leaves when they are even (*extent, else -1), and how many
 * pieces the later Shards of its dim cut the rank's chunks into (*later). */
static void strided_extent(const int64_t *shape, int mesh_ndim, const int64_t *mesh_size,
                           const dt_placement *placements, int m, int64_t *outer, int64_t *extent,
                           int64_t *later) {
  int d = placements[m].dim;
  *outer = 1, *later = 1;
  for (int j = 0; j < mesh_ndim; j++) {
    if (placements[j].kind != DT_SHARD || placements[j].dim != d) continue;
    if (j < m)
      *outer *= mesh_size[j];
    else
      *later *= mesh_size[j];
  }
  *extent = shape[d] % *outer == 0 ? shape[d] / *outer : -1;
}

bool dt__strided_fits(int ndim, const int64_t *shape, int mesh_ndim, const int64_t *mesh_size,
                      const dt_placement *placements) {
  for (int m = 0; m < mesh_ndim; m++) {
    dt_placement p = placements[m];
    if (p.kind != DT_STRIDED_SHARD) continue;
    if (p.dim < 0 || p.dim >= ndim) return false;
    int64_t outer, extent, later;
    strided_extent(shape, mesh_ndim, mesh_size, placements, m, &outer, &extent, &later);
    if (extent < 0 || extent % p.split_factor != 0 || p.split_factor % later != 0) return false;
  }
  return true;
}

dt_status dt__check_strided(const char *op, int ndim, const int64_t *shape, int mesh_ndim,
                            const int64_t *mesh_size, const dt_placement *placements) {
  for (int m = 0; m < mesh_ndim; m++) {
    dt_placement p = placements[m];
    if (p.kind != DT_STRIDED_SHARD) continue;
    if (p.dim < 0 || p.dim >= ndim || shape[p.dim] % p.split_factor != 0) {
      return dt__error(DT_ERR_INVALID,
                       "%s: placement %d is StridedShard(%d, %d) but tensor dim %d has %lld "
                       "elements (the split factor must divide it)",
                       op, m, p.dim, p.split_factor, p.dim,
                       (long long)(p.dim >= 0 && p.dim < ndim ? shape[p.dim] : 0));
    }
    int64_t outer, extent, later;
    strided_extent(shape, mesh_ndim, mesh_size, placements, m, &outer, &extent, &later);
    if (extent < 0) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: placement %d is StridedShard(%d, %d) nested under Shard(%d) on earlier "
                       "mesh dims that cut tensor dim %d (%lld elements) into %lld uneven pieces "
                       "(supported only when they are even)",
                       op, m, p.dim, p.split_factor, p.dim, p.dim, (long long)shape[p.dim],
                       (long long)outer);
    }
    if (extent % p.split_factor != 0) {
      return dt__error(DT_ERR_INVALID,
                       "%s: placement %d is StridedShard(%d, %d) nested under Shard(%d): each "
                       "rank's %lld elements of tensor dim %d are not a whole number of %d blocks",
                       op, m, p.dim, p.split_factor, p.dim, (long long)extent, p.dim,
                       p.split_factor);
    }
    if (p.split_factor % later != 0) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: placement %d is StridedShard(%d, %d) followed by Shard(%d) on later "
                       "mesh dims of %lld ranks in all, which do not divide the split factor "
                       "(supported only when each rank takes whole chunks)",
                       op, m, p.dim, p.split_factor, p.dim, (long long)later);
    }
  }
  return DT_OK;
}

dt_status dt__check_placements(const char *op, int mesh_ndim, int ndim, int n_placements,
                               const dt_placement *placements, dt_placement *normalized) {
  if (n_placements != mesh_ndim) {
    return dt__error(DT_ERR_INVALID,
                     "%s: %d placements given for a %d-d mesh (one per mesh dim expected)", op,
                     n_placements, mesh_ndim);
  }
  if (n_placements > 0 && !placements)
    return dt__error(DT_ERR_INVALID, "%s: placements is NULL", op);
  for (int i = 0; i < n_placements; i++) {
    dt_placement p = placements[i];
    switch (p.kind) {
    case DT_REPLICATE:
      p.dim = 0;
      p.op = DT_REDUCE_SUM;
      break;
    case DT_SHARD:
      if (p.dim < -ndim || p.dim >= ndim || ndim == 0) {
        return dt__error(DT_ERR_INVALID, "%s: placement %d is Shard(%d) but the tensor has %d dims",
                         op, i, p.dim, ndim);
      }
      if (p.dim < 0) p.dim += ndim;
      p.op = DT_REDUCE_SUM;
      break;
    case DT_PARTIAL:
      if (p.op != DT_REDUCE_SUM && p.op != DT_REDUCE_AVG && p.op != DT_REDUCE_MAX &&
          p.op != DT_REDUCE_MIN) {
        return dt__error(
            DT_ERR_INVALID,
            "%s: placement %d is Partial with reduce op %d (sum, avg, max or min expected)", op, i,
            (int)p.op);
      }
      p.dim = 0;
      break;
    case DT_STRIDED_SHARD:
      if (p.dim < -ndim || p.dim >= ndim || ndim == 0) {
        return dt__error(DT_ERR_INVALID,
                         "%s: placement %d is StridedShard(%d, %d) but the tensor has %d dims", op,
                         i, p.dim, p.split_factor, ndim);
      }
      if (p.split_factor < 1) {
        return dt__error(DT_ERR_INVALID,
                         "%s: placement %d is StridedShard(%d, %d): the split factor must be >= 1",
                         op, i, p.dim, p.split_factor);
      }
      if (p.dim < 0) p.dim += ndim;
      if (p.split_factor == 1) p = dt_shard(p.dim); /* one block: a plain shard */
      break;
    default:
      return dt__error(DT_ERR_INVALID, "%s: placement %d has an invalid kind %d", op, i,
                       (int)p.kind);
    }
    normalized[i] = p;
  }
  for (int i = 0; i < n_placements; i++) {
    if (dt__strided_conflict(normalized, n_placements, i, normalized[i])) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: placement %d is a StridedShard of tensor dim %d, which another mesh "
                       "dim also shards with a StridedShard (not supported)",
                       op, i, normalized[i].dim);
    }
  }
  return DT_OK;
}

void dt__local_region(int ndim, const int64_t *global_shape, int mesh_ndim,
                      const int64_t *mesh_size, const int64_t *coord,
                      const dt_placement *placements, int64_t *local_shape, int64_t *offset) {
  for (int d = 0; d < ndim; d++) {
    local_shape[d] = global_shape[d];
    offset[d] = 0;
  }
  /* Per dim carrying a StridedShard: how many blocks the rank holds a chunk of and their length
   * (0 blocks: none), for the later Shards of the dim (the outer form). */
  int64_t blocks[DT_MAX_DIMS] = {0}, block_len[DT_MAX_DIMS] = {0};
  for (int m = 0; m < mesh_ndim; m++) {
    if (placements[m].kind == DT_STRIDED_SHARD) {
      /* The rank's chunk of each of the f blocks of the extent the earlier Shards of d left. */
      int d = placements[m].dim;
      int64_t f = placements[m].split_factor, start, length;
      dt__chunk_range(local_shape[d] / f, mesh_size[m], coord[m], &start, &length);
      blocks[d] = f, block_len[d] = local_shape[d] / f;
      offset[d] += start;
      local_shape[d] = f * length;
      continue;
    }
    if (placements[m].kind != DT_SHARD) continue;
    int d = placements[m].dim;
    int64_t start, length;
    if (blocks[d] > 0 && blocks[d] % mesh_size[m] == 0) {
      /* After a StridedShard of d: consecutive whole chunks, blocks / n of them. */
      int64_t g = blocks[d] / mesh_size[m], chunk = local_shape[d] / blocks[d];
      offset[d] += coord[m] * g * block_len[d];
      local_shape[d] = g * chunk;
      blocks[d] = g;
      continue;
    }
    dt__chunk_range(local_shape[d], mesh_size[m], coord[m], &start, &length);
    offset[d] += start;
    local_shape[d] = length;
  }
}

static uint64_t spec_hash(const dt_dist_spec *s) {
  uint64_t h = dt__hash_mix(0x5eed, s->mesh_id);
  for (int i = 0; i < s->mesh_ndim; i++) {
    h = dt__hash_mix(h, (uint64_t)s->placements[i].kind |
                            ((uint64_t)(uint32_t)s->placements[i].dim << 8) |
                            ((uint64_t)s->placements[i].op << 40));
    /* SS(0,6) and SS(0,4) of one shape hold different elements: different specs. */
    if (s->placements[i].kind == DT_STRIDED_SHARD)
      h = dt__hash_mix(h, (uint64_t)(uint32_t)s->placements[i].split_factor);
  }
  h = dt__hash_mix(h, (uint64_t)s->dtype | ((uint64_t)s->ndim << 8));
  for (int i = 0; i < s->ndim; i++) h = dt__hash_mix(h, (uint64_t)s->shape[i]);
  return h;
}

dt_status dt__spec_create(dt_mesh *mesh, const dt_placement *placements, int ndim,
                          const int64_t *shape, dt_dtype dtype, dt_dist_spec **out) {
  dt_dist_spec *s = dt__alloc(sizeof *s);
  if (!s) return dt__error(DT_ERR_NOMEM, "cannot allocate a distributed tensor spec");
  memset(s, 0, sizeof *s);
  atomic_init(&s->refcount, 1);
  s->mesh = dt__mesh_retain(mesh); /* tensors keep their mesh alive (see mesh_impl.h) */
  s->mesh_id = dt_mesh_id(mesh);
  s->mesh_ndim = dt_mesh_ndim(mesh);
  memcpy(s->placements, placements, sizeof(dt_placement) * (size_t)s->mesh_ndim);
  s->ndim = ndim;
  if (ndim > 0) memcpy(s->shape, shape, sizeof(int64_t) * (size_t)ndim);
  s->dtype = dtype;
  s->hash = spec_hash(s);
  *out = s;
  return DT_OK;
}

dt_dist_spec *dt__spec_retain(dt_dist_spec *spec) {
  if (spec) dt__ref_take(&spec->refcount);
  return spec;
}

void dt__spec_release(dt_dist_spec *spec) {
  if (spec && dt__ref_drop(&spec->refcount)) {
    dt__mesh_release(spec->mesh);
    dt__free(spec);
  }
}

dt_status dt__dist_wrap(dt_tensor *local, dt_dist_spec *spec, dt_tensor **out) {
  dt_status st =
      dt__tensor_view(local, local->ndim, local->shape, local->strides, local->offset, out);
  if (st) return st;
  (*out)->spec = dt__spec_retain(spec);
  return DT_OK;
}

dt_status dt__local_view(const dt_tensor *t, dt_tensor **out) {
  return dt__tensor_view(t, t->ndim, t->shape, t->strides, t->offset, out);
}

/* ---- Public inspection --------------------------------------------------------------------- */

dt_mesh *dt_dist_mesh(const dt_tensor *t) { return t && t->spec ? t->spec->mesh : NULL; }

const dt_placement *dt_dist_placements(const dt_tensor *t) {
  return t && t->spec ? t->spec->placements : NULL;
}

int dt_dist_ndim(const dt_tensor *t) {
  if (!t) return 0;
  return t->spec ? t->spec->ndim : t->ndim;
}

const int64_t *dt_dist_global_shape(const dt_tensor *t) {
  if (!t) return NULL;
  dt__size_read(t, -1, "dt_dist_global_shape");
  return t->spec ? t->spec->shape : t->shape;
}
