/* Device mesh: row-major layout of a group's ranks over an N-D shape, one sub-group per
 * dimension made with dt_comm_split (color: the rank with that coordinate zeroed, key: the
 * coordinate), so any backend that can split can build a mesh. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "dtensor/mesh.h"

struct dt_mesh {
  uint64_t id;
  int ndim;
  int shape[DT_MESH_MAX_DIMS];
  int strides[DT_MESH_MAX_DIMS]; /* row-major, in ranks */
  int coords[DT_MESH_MAX_DIMS];
  bool named;
  char names[DT_MESH_MAX_DIMS][DT_MESH_MAX_NAME + 1];
  dt_comm *world;
  dt_comm *groups[DT_MESH_MAX_DIMS];
};

static char *format_shape(char *buf, size_t size, int ndim, const int *shape) {
  int64_t wide[DT_MESH_MAX_DIMS];
  for (int i = 0; i < ndim; i++) wide[i] = shape[i];
  return dt__format_ints(buf, size, ndim, wide);
}

static dt_status check_args(const dt_comm *world, int ndim, const int *shape,
                            const char *const *names) {
  static const char op[] = "dt_mesh_create";
  if (!world) return dt__error(DT_ERR_INVALID, "%s: world is NULL", op);
  if (ndim < 1 || ndim > DT_MESH_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "%s: ndim is %d, expected 1..%d", op, ndim, DT_MESH_MAX_DIMS);
  }
  if (!shape) return dt__error(DT_ERR_INVALID, "%s: shape is NULL", op);
  int64_t product = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 1) {
      return dt__error(DT_ERR_INVALID, "%s: shape[%d] is %d, expected >= 1", op, d, shape[d]);
    }
    product *= shape[d];
    if (product > world->size) break;
  }
  if (product != world->size) {
    char buf[128];
    return dt__error(DT_ERR_INVALID,
                     "%s: mesh shape %s holds %lld ranks but group '%s' has %d; the product of "
                     "the shape must equal the group size",
                     op, format_shape(buf, sizeof buf, ndim, shape), (long long)product,
                     world->name, world->size);
  }
  if (!names) return DT_OK;
  for (int d = 0; d < ndim; d++) {
    if (!names[d] || !names[d][0]) {
      return dt__error(DT_ERR_INVALID, "%s: dim_names[%d] is %s", op, d,
                       names[d] ? "empty" : "NULL");
    }
    if (strlen(names[d]) > DT_MESH_MAX_NAME) {
      return dt__error(DT_ERR_INVALID, "%s: dim_names[%d] \"%.40s\" is longer than %d characters",
                       op, d, names[d], DT_MESH_MAX_NAME);
    }
    for (int e = 0; e < d; e++) {
      if (strcmp(names[d], names[e]) == 0) {
        return dt__error(DT_ERR_INVALID, "%s: dim_names[%d] and dim_names[%d] are both \"%s\"", op,
                         e, d, names[d]);
      }
    }
  }
  return DT_OK;
}

dt_status dt_mesh_create(dt_comm *world, int ndim, const int *shape, const char *const *dim_names,
                         dt_mesh **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_mesh_create: out is NULL");
  *out = NULL;
  dt_status status = check_args(world, ndim, shape, dim_names);
  if (status != DT_OK) return status;
  dt_mesh *mesh = dt__calloc(sizeof *mesh);
  if (!mesh) return dt__error(DT_ERR_NOMEM, "dt_mesh_create: out of memory");
  /* Equal on every rank: the world's id and how many meshes this rank made on it. */
  mesh->id = (world->id << 24) | (++world->meshes_created & 0xffffff);
  mesh->ndim = ndim;
  mesh->world = world;
  mesh->named = dim_names != NULL;
  int stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    mesh->shape[d] = shape[d];
    mesh->strides[d] = stride;
    mesh->coords[d] = world->rank / stride % shape[d];
    stride *= shape[d];
    if (dim_names) snprintf(mesh->names[d], sizeof mesh->names[d], "%s", dim_names[d]);
  }
  for (int d = 0; d < ndim; d++) {
    int color = world->rank - mesh->coords[d] * mesh->strides[d];
    dt_split_hint hint = {.size = shape[d], .rank = mesh->coords[d]};
    status = dt__comm_split_ex(world, color, mesh->coords[d], &hint, &mesh->groups[d]);
    if (status != DT_OK) {
      dt__error_prefix("dt_mesh_create");
      dt_mesh_destroy(mesh);
      return status;
    }
    if (dim_names) {
      snprintf(mesh->groups[d]->name, sizeof mesh->groups[d]->name, "mesh %llu dim '%s'",
               (unsigned long long)mesh->id, dim_names[d]);
    } else {
      snprintf(mesh->groups[d]->name, sizeof mesh->groups[d]->name, "mesh %llu dim %d",
               (unsigned long long)mesh->id, d);
    }
  }
  *out = mesh;
  return DT_OK;
}

void dt_mesh_destroy(dt_mesh *mesh) {
  if (!mesh) return;
  for (int d = 0; d < mesh->ndim; d++) dt_comm_destroy(mesh->groups[d]);
  dt__free(mesh);
}

/* Getters answer 0 / NULL for a NULL mesh rather than crash. */
uint64_t dt_mesh_id(const dt_mesh *mesh) { return mesh ? mesh->id : 0; }
int dt_mesh_ndim(const dt_mesh *mesh) { return mesh ? mesh->ndim : 0; }
const int *dt_mesh_shape(const dt_mesh *mesh) { return mesh ? mesh->shape : NULL; }
dt_comm *dt_mesh_world(const dt_mesh *mesh) { return mesh ? mesh->world : NULL; }

static bool dim_ok(const dt_mesh *mesh, int dim) { return mesh && dim >= 0 && dim < mesh->ndim; }

int dt_mesh_size(const dt_mesh *mesh, int dim) { return dim_ok(mesh, dim) ? mesh->shape[dim] : -1; }

int dt_mesh_coordinate(const dt_mesh *mesh, int dim) {
  return dim_ok(mesh, dim) ? mesh->coords[dim] : -1;
}

dt_comm *dt_mesh_group(const dt_mesh *mesh, int dim) {
  return dim_ok(mesh, dim) ? mesh->groups[dim] : NULL;
}

int dt_mesh_rank_at(const dt_mesh *mesh, const int *coords) {
  if (!mesh || !coords) return -1;
  int rank = 0;
  for (int d = 0; d < mesh->ndim; d++) {
    if (coords[d] < 0 || coords[d] >= mesh->shape[d]) return -1;
    rank += coords[d] * mesh->strides[d];
  }
  return rank;
}

const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim) {
  return dim_ok(mesh, dim) && mesh->named ? mesh->names[dim] : NULL;
}

dt_status dt_mesh_dim_by_name(const dt_mesh *mesh, const char *name, int *dim) {
  static const char op[] = "dt_mesh_dim_by_name";
  if (!mesh || !name || !dim) {
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, !mesh ? "mesh" : !name ? "name" : "dim");
  }
  *dim = -1;
  if (mesh->named) {
    for (int d = 0; d < mesh->ndim; d++) {
      if (strcmp(mesh->names[d], name) == 0) {
        *dim = d;
        return DT_OK;
      }
    }
  }
  char list[DT_MESH_MAX_DIMS * (DT_MESH_MAX_NAME + 4) + 8] = "";
  size_t used = 0;
  for (int d = 0; mesh->named && d < mesh->ndim; d++) {
    used += (size_t)snprintf(list + used, sizeof list - used, "%s\"%s\"", d ? ", " : "",
                             mesh->names[d]);
  }
  return dt__error(DT_ERR_INVALID, "%s: mesh %llu has no dimension named \"%s\" (%s%s)", op,
                   (unsigned long long)mesh->id, name,
                   mesh->named ? "its dimensions are " : "its dimensions are unnamed",
                   mesh->named ? list : "");
}
