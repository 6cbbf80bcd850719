/*
 * The pp group and the stage mesh of a pipeline-parallel layout (dt_pp_mesh_create): one world
 * split two ways, along the pp dim (the ranks that exchange activations) and across it (the
 * ranks of one stage, on which the stage's tensor- and data-parallel mesh is built).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "pipeline/pipeline_impl.h"

struct dt_pp_mesh {
  dt_comm *pp_group;
  dt_comm *stage_world; /* the ranks sharing this rank's pp coordinate; the stage mesh's world */
  dt_mesh *stage_mesh;
};

void dt_pp_mesh_destroy(dt_pp_mesh *pm) {
  if (!pm) return;
  dt_mesh_destroy(pm->stage_mesh);
  dt_comm_destroy(pm->stage_world);
  dt_comm_destroy(pm->pp_group);
  dt__free(pm);
}

dt_comm *dt_pp_mesh_group(const dt_pp_mesh *pm) { return pm ? pm->pp_group : NULL; }
dt_mesh *dt_pp_mesh_stage_mesh(const dt_pp_mesh *pm) { return pm ? pm->stage_mesh : NULL; }

dt_status dt_pp_mesh_create(dt_comm *world, int ndim, const int *shape,
                            const char *const *dim_names, const char *pp_name, dt_pp_mesh **out) {
  static const char fn[] = "dt_pp_mesh_create";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!world || !shape || !dim_names || !pp_name)
    return dt__error(DT_ERR_INVALID, "%s: NULL world, shape, dim_names or pp_name", fn);
  if (ndim < 1 || ndim > DT_MESH_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "%s: ndim %d outside 1..%d", fn, ndim, DT_MESH_MAX_DIMS);
  }
  int pp_dim = -1;
  int64_t total = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 1) return dt__error(DT_ERR_INVALID, "%s: shape[%d] = %d", fn, d, shape[d]);
    /* Stop before the product can overflow: it must equal the world's size, an int. */
    if (total <= INT_MAX) total *= shape[d];
    if (dim_names[d] && strcmp(dim_names[d], pp_name) == 0) {
      if (pp_dim >= 0) {
        return dt__error(DT_ERR_INVALID, "%s: mesh dims %d and %d are both named '%s'", fn, pp_dim,
                         d, pp_name);
      }
      pp_dim = d;
    }
  }
  if (pp_dim < 0) return dt__error(DT_ERR_INVALID, "%s: no mesh dim is named '%s'", fn, pp_name);
  int world_size = dt_comm_size(world), rank = dt_comm_rank(world);
  if (total != world_size) {
    return dt__error(DT_ERR_INVALID, "%s: the shape holds %s%lld ranks, the world has %d", fn,
                     total > INT_MAX ? "more than " : "",
                     (long long)(total > INT_MAX ? INT_MAX : total), world_size);
  }
  /* This rank's coordinates (row-major), its pp coordinate and its index over the others. */
  int coords[DT_MESH_MAX_DIMS], rest_shape[DT_MESH_MAX_DIMS];
  const char *rest_names[DT_MESH_MAX_DIMS];
  int rem = rank;
  for (int d = ndim - 1; d >= 0; d--) {
    coords[d] = rem % shape[d];
    rem /= shape[d];
  }
  int rest_index = 0, n_rest = 0;
  for (int d = 0; d < ndim; d++) {
    if (d == pp_dim) continue;
    rest_index = rest_index * shape[d] + coords[d];
    rest_shape[n_rest] = shape[d];
    rest_names[n_rest++] = dim_names[d];
  }
  dt_pp_mesh *pm = dt__calloc(sizeof *pm);
  if (!pm) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  dt_status st = dt_comm_split(world, rest_index, coords[pp_dim], &pm->pp_group);
  if (!st) st = dt_comm_split(world, coords[pp_dim], rank, &pm->stage_world);
  if (!st && n_rest > 0)
    st = dt_mesh_create(pm->stage_world, n_rest, rest_shape, rest_names, &pm->stage_mesh);
  if (!st && (!pm->pp_group || !pm->stage_world))
    st = dt__error(DT_ERR_INTERNAL, "%s: a split gave no group", fn);
  if (!st) {
    char name[64];
    snprintf(name, sizeof name, "%s", pp_name);
    dt_comm_set_name(pm->pp_group, name);
  }
  if (st) {
    dt_pp_mesh_destroy(pm);
    return st;
  }
  *out = pm;
  return DT_OK;
}
