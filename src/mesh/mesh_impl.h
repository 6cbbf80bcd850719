/* Private interface of the device mesh: its reference count and what the layers above read
 * of a mesh.
 *
 * A mesh is referenced by its user (dt_mesh_create's result, dropped by dt_mesh_destroy)
 * and by every distributed tensor spec made on it (dt__spec_create retains, the spec's
 * release releases). It is freed, with its per-dimension groups, when the last reference
 * goes, so tensors may outlive the user's handle. */
#ifndef DT_MESH_IMPL_H
#define DT_MESH_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/mesh.h"

/* Adds a reference (NULL is ignored) and returns mesh. */
dt_mesh *dt__mesh_retain(dt_mesh *mesh);
/* Drops a reference; the last one frees the mesh and destroys its groups. NULL is ignored. */
void dt__mesh_release(dt_mesh *mesh);
/* True once the user called dt_mesh_destroy: the mesh lives on only for its tensors, and
 * caches must not take new references to it (they would keep it alive). */
bool dt__mesh_user_destroyed(const dt_mesh *mesh);

/* What the layers above need to know of a mesh (its shape and this rank's coordinates),
 * read once into a small value on the stack: the dispatch hot path reads it per call. */
typedef struct dt_mesh_info {
  int ndim;
  int64_t size[DT_MESH_MAX_DIMS];
  int64_t coord[DT_MESH_MAX_DIMS];
} dt_mesh_info;

/* Fills info from mesh (ndim 0 for NULL). */
void dt__mesh_info(const dt_mesh *mesh, dt_mesh_info *info);

/* dt_mesh_destroy calls dt__upcall.mesh_destroyed (core/core_impl.h) on the calling thread
 * before it drops the user's reference. */

#endif /* DT_MESH_IMPL_H */
