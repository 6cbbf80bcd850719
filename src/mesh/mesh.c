/* Device meshes over a process group. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/mesh.h"

struct dt_mesh {
  dt_comm *group;
  int ndim;
  int size[DT_MESH_MAX_DIMS];
  int coord[DT_MESH_MAX_DIMS];
  char names[DT_MESH_MAX_DIMS][32];
  dt_comm *dim_group[DT_MESH_MAX_DIMS];
  uint64_t id;
};

/* Meshes are numbered per thread: a threads-backend rank is a thread, and every rank makes
 * its meshes in the same order, so the numbers agree across ranks. */
static _Thread_local uint64_t next_mesh_id;

dt_status dt_mesh_create(dt_comm *group, int ndim, const int64_t *shape,
                         const char *const *dim_names, dt_mesh **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "mesh_create: out is NULL");
  *out = NULL;
  if (!group) return dt__error(DT_ERR_INVALID, "mesh_create: group is NULL");
  if (ndim < 1 || ndim > DT_MESH_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "mesh_create: ndim %d is outside 1..%d", ndim, DT_MESH_MAX_DIMS);
  }
  if (!shape) return dt__error(DT_ERR_INVALID, "mesh_create: shape is NULL");
  int64_t product = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 1) return dt__error(DT_ERR_INVALID, "mesh_create: mesh dim %d has size %" PRId64, i, shape[i]);
    product *= shape[i];
  }
  char buf[96];
  if (product != dt_comm_size(group)) {
    return dt__error(DT_ERR_INVALID, "mesh_create: mesh shape %s has %" PRId64 " ranks but the group has %d",
                     dt__format_ints(buf, sizeof buf, ndim, shape), product, dt_comm_size(group));
  }
  for (int i = 0; i < ndim && dim_names; i++) {
    if (!dim_names[i] || !dim_names[i][0] || strlen(dim_names[i]) > 31) {
      return dt__error(DT_ERR_INVALID, "mesh_create: dim name %d is empty, NULL or longer than 31 characters", i);
    }
    for (int j = 0; j < i; j++) {
      if (strcmp(dim_names[i], dim_names[j]) == 0) {
        return dt__error(DT_ERR_INVALID, "mesh_create: dim name '%s' is used twice", dim_names[i]);
      }
    }
  }
  dt_mesh *mesh = dt__calloc(sizeof *mesh);
  if (!mesh) return dt__error(DT_ERR_NOMEM, "mesh_create: out of memory");
  mesh->group = group;
  mesh->ndim = ndim;
  int rank = dt_comm_rank(group);
  for (int i = ndim - 1, r = rank; i >= 0; i--) {
    mesh->size[i] = (int)shape[i];
    mesh->coord[i] = r % (int)shape[i];
    r /= (int)shape[i];
  }
  for (int i = 0; i < ndim; i++) {
    if (dim_names) {
      snprintf(mesh->names[i], sizeof mesh->names[i], "%s", dim_names[i]);
    } else {
      snprintf(mesh->names[i], sizeof mesh->names[i], "dim%d", i);
    }
  }
  /* Sub-group of dim i: ranks equal in every other coordinate; color = their index. */
  dt_status st = DT_OK;
  for (int i = 0; i < ndim && !st; i++) {
    int color = 0;
    for (int j = 0; j < ndim; j++) {
      if (j != i) color = color * mesh->size[j] + mesh->coord[j];
    }
    st = dt_comm_split(group, color, mesh->coord[i], &mesh->dim_group[i]);
    if (!st) {
      char name[64];
      snprintf(name, sizeof name, "mesh dim '%s'", mesh->names[i]);
      dt_comm_set_name(mesh->dim_group[i], name);
    }
  }
  if (st) {
    dt_mesh_destroy(mesh);
    return st;
  }
  mesh->id = ++next_mesh_id;
  *out = mesh;
  return DT_OK;
}

void dt_mesh_destroy(dt_mesh *mesh) {
  if (!mesh) return;
  for (int i = 0; i < mesh->ndim; i++) dt_comm_destroy(mesh->dim_group[i]);
  dt__free(mesh);
}

int dt_mesh_ndim(const dt_mesh *mesh) { return mesh ? mesh->ndim : 0; }
int dt_mesh_size(const dt_mesh *mesh, int dim) {
  return mesh && dim >= 0 && dim < mesh->ndim ? mesh->size[dim] : -1;
}
int dt_mesh_coordinate(const dt_mesh *mesh, int dim) {
  return mesh && dim >= 0 && dim < mesh->ndim ? mesh->coord[dim] : -1;
}
int dt_mesh_dim_by_name(const dt_mesh *mesh, const char *name) {
  if (!mesh || !name) return -1;
  for (int i = 0; i < mesh->ndim; i++) {
    if (strcmp(mesh->names[i], name) == 0) return i;
  }
  return -1;
}
const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim) {
  return mesh && dim >= 0 && dim < mesh->ndim ? mesh->names[dim] : NULL;
}
dt_comm *dt_mesh_group(const dt_mesh *mesh, int dim) {
  return mesh && dim >= 0 && dim < mesh->ndim ? mesh->dim_group[dim] : NULL;
}
dt_comm *dt_mesh_comm(const dt_mesh *mesh) { return mesh ? mesh->group : NULL; }
uint64_t dt_mesh_id(const dt_mesh *mesh) { return mesh ? mesh->id : 0; }
