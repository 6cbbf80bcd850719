/* Device mesh: row-major layout of a group's ranks over an N-D shape, one sub-group per
 * dimension made with dt_comm_split (color: the rank with that coordinate zeroed, key: the
 * coordinate), so any backend that can split can build a mesh. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/refcount.h"
#include "mesh/mesh_impl.h"
#include "tensor/device_impl.h"

struct dt_mesh {
  atomic_int refcount;        /* the user's reference plus one per distributed tensor spec */
  atomic_bool user_destroyed; /* dt_mesh_destroy was called */
  uint64_t id;
  int ndim;
  int shape[DT_MESH_MAX_DIMS];
  int strides[DT_MESH_MAX_DIMS]; /* row-major, in ranks */
  int coords[DT_MESH_MAX_DIMS];
  bool named;
  char names[DT_MESH_MAX_DIMS][DT_MESH_MAX_NAME + 1];
  dt_comm *world;
  dt_comm *groups[DT_MESH_MAX_DIMS];
  dt_device_kind device_kind; /* where its tensors live: DT_DEVICE_CPU unless init_device_mesh */
  int device_index;           /* this rank's device of that kind (mesh_device_index) */
};

/* Frees the mesh and its groups, and drops its reference to the world's handle. */
static void mesh_free(dt_mesh *mesh) {
  for (int d = 0; d < mesh->ndim; d++) dt_comm_destroy(mesh->groups[d]);
  dt__comm_free(mesh->world);
  dt__free(mesh);
}

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
  atomic_init(&mesh->refcount, 1);
  atomic_init(&mesh->user_destroyed, false);
  mesh->id = (world->id << 24) | (++world->meshes_created & 0xffffff);
  mesh->ndim = ndim;
  mesh->world = dt__comm_retain(world);
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
      /* The split's message names dt_comm_split; say which call and dimension it was. */
      char prefix[48];
      snprintf(prefix, sizeof prefix, "dt_mesh_create: dimension %d", d);
      dt__error_prefix(prefix);
      mesh_free(mesh);
      return status;
    }
  }
  /* Group names carry the mesh's shape so timeouts and mismatches say which mesh. */
  char described[160];
  dt_mesh_format(mesh, described, sizeof described);
  for (int d = 0; d < ndim; d++) {
    if (dim_names) {
      snprintf(mesh->groups[d]->name, sizeof mesh->groups[d]->name, "%.40s dim '%s'", described,
               dim_names[d]);
    } else {
      snprintf(mesh->groups[d]->name, sizeof mesh->groups[d]->name, "%.40s dim %d", described, d);
    }
  }
  world->meshes_live++;
  *out = mesh;
  return DT_OK;
}

dt_mesh *dt__mesh_retain(dt_mesh *mesh) {
  if (mesh) dt__ref_take(&mesh->refcount);
  return mesh;
}

void dt__mesh_release(dt_mesh *mesh) {
  if (mesh && dt__ref_drop(&mesh->refcount)) mesh_free(mesh);
}

bool dt__mesh_user_destroyed(const dt_mesh *mesh) {
  return mesh && atomic_load_explicit(&mesh->user_destroyed, memory_order_relaxed);
}

void dt_mesh_destroy(dt_mesh *mesh) {
  if (!mesh) return;
  /* A second call while distributed tensors keep the mesh alive would drop one of their
   * references (and free the mesh under them): reported and ignored. Once the last reference
   * has gone the handle is freed memory, which no check can read: the caller must call once. */
  if (atomic_exchange(&mesh->user_destroyed, true)) {
    char buf[128];
    dt__log(DT_LOG_WARN,
            "dt_mesh_destroy: %s (id %llu) was already destroyed; ignored (call it once per "
            "dt_mesh_create: after its last tensor is released a second call is undefined)",
            dt_mesh_format(mesh, buf, sizeof buf), (unsigned long long)mesh->id);
    return;
  }
  mesh->world->meshes_live--;
  /* This thread's cached plans hold specs on the mesh: drop them so the mesh is freed as
   * soon as its last tensor is, not when the thread exits. */
  if (dt__upcall.mesh_destroyed) dt__upcall.mesh_destroyed(mesh);
  dt__mesh_release(mesh);
}

const char *dt_mesh_format(const dt_mesh *mesh, char *buf, size_t size) {
  if (!buf || size == 0) return "";
  if (!mesh) {
    snprintf(buf, size, "mesh (null)");
    return buf;
  }
  size_t used = (size_t)snprintf(buf, size, "mesh (");
  for (int d = 0; d < mesh->ndim && used < size; d++) {
    if (mesh->named) {
      used += (size_t)snprintf(buf + used, size - used, "%s%s=%d", d ? ", " : "", mesh->names[d],
                               mesh->shape[d]);
    } else {
      used += (size_t)snprintf(buf + used, size - used, "%s%d", d ? ", " : "", mesh->shape[d]);
    }
  }
  if (used < size) snprintf(buf + used, size - used, ")");
  return buf;
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

void dt__mesh_info(const dt_mesh *mesh, dt_mesh_info *info) {
  info->ndim = dt_mesh_ndim(mesh);
  for (int m = 0; m < info->ndim; m++) {
    info->size[m] = mesh->shape[m];
    info->coord[m] = mesh->coords[m];
  }
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
  char described[160];
  return dt__error(DT_ERR_INVALID, "%s: %s has no dimension named \"%s\" (%s%s)", op,
                   dt_mesh_format(mesh, described, sizeof described), name,
                   mesh->named ? "its dimensions are " : "its dimensions are unnamed",
                   mesh->named ? list : "");
}

/* This rank's device of `kind` on a mesh over world: the one the backend binds the rank to
 * (NCCL: its communicator's GPU), else world rank r's r % count (threads: N ranks share one
 * GPU, or take one each; MPI: the ranks of a host in order). 0 for the CPU. */
static int mesh_device_index(const dt_comm *world, dt_device_kind kind) {
  if (kind == DT_DEVICE_CPU) return 0;
  if (world && world->backend->device_index) {
    int index = world->backend->device_index(world, (int)kind);
    if (index >= 0) return index;
  }
  const dt_device_memory *memory = dt__device_memory((int)kind);
  int count = memory && memory->count ? memory->count() : 0;
  return count > 0 && world ? world->rank % count : 0;
}

dt_status dt_mesh_create_on(const char *device_type, dt_comm *world, int ndim, const int *shape,
                            const char *const *dim_names, dt_mesh **out) {
  static const char op[] = "dt_mesh_create_on";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!device_type) return dt__error(DT_ERR_INVALID, "%s: device_type is NULL", op);
  dt_device device;
  dt_status st = dt_device_parse(device_type, &device);
  if (st) {
    dt__error_prefix(op);
    return st;
  }
  if (strchr(device_type, ':')) {
    return dt__error(DT_ERR_INVALID,
                     "%s: device_type \"%s\" names one device; a mesh takes a kind (\"%s\"): each "
                     "rank uses its own device of that kind",
                     op, device_type, dt_device_kind_name((int)device.kind));
  }
  st = dt__device_check_available(op, device);
  if (st) return st;
  if (!world) return dt__error(DT_ERR_INVALID, "%s: world is NULL", op);
  if (!dt__comm_moves_device(world, (int)device.kind)) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: the %s backend of group '%s' does not move %s memory; use a backend "
                     "that does",
                     op, world->backend->name, world->name, device_type);
  }
  device.index = mesh_device_index(world, device.kind);
  st = dt_mesh_create(world, ndim, shape, dim_names, out);
  if (st) return st;
  (*out)->device_kind = device.kind;
  (*out)->device_index = device.index;
  return DT_OK;
}

dt_device_kind dt_mesh_device_kind(const dt_mesh *mesh) {
  return mesh ? mesh->device_kind : DT_DEVICE_CPU;
}

dt_device dt_mesh_device(const dt_mesh *mesh) {
  return mesh ? (dt_device){mesh->device_kind, mesh->device_index} : DT_DEVICE_CPU_VALUE;
}
