/*
 * libdtensor — device meshes: an N-D grid over the ranks of a group, with named dims and
 * one sub-group per dim (the ranks that differ only in that coordinate).
 *
 * Ranks of the group are laid out row-major over the mesh shape: rank r has coordinates
 * unravel(r, shape). Ownership: a mesh belongs to the rank that created it; destroy it with
 * dt_mesh_destroy after every distributed tensor on it. It borrows the group it was made
 * from, which must outlive it.
 */
#ifndef DTENSOR_MESH_H
#define DTENSOR_MESH_H

#include "dtensor/comm.h"
#include "dtensor/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_mesh dt_mesh;

/* Most dims of a mesh. */
#define DT_MESH_MAX_DIMS 4

/* Creates an ndim-dimensional mesh of shape `shape` over `group` (collective over the
 * group: it splits one sub-group per dim). The product of the shape must equal the group
 * size. dim_names may be NULL (names "dim0", "dim1", ...) or hold ndim names (copied,
 * distinct, at most 31 characters).
 * Errors: DT_ERR_INVALID (NULL group/out/shape, ndim outside 1..DT_MESH_MAX_DIMS, a size
 * < 1, product != group size — the message names both — duplicate names), DT_ERR_NOMEM,
 * and the collective errors of dt_comm_split. */
DT_API dt_status dt_mesh_create(dt_comm *group, int ndim, const int64_t *shape,
                                const char *const *dim_names, dt_mesh **out);
/* Destroys the mesh and its sub-groups (collective like dt_comm_destroy). NULL allowed. */
DT_API void dt_mesh_destroy(dt_mesh *mesh);

DT_API int dt_mesh_ndim(const dt_mesh *mesh);
/* Size of dim (-1 if out of range). */
DT_API int dt_mesh_size(const dt_mesh *mesh, int dim);
/* This rank's coordinate along dim (-1 if out of range). */
DT_API int dt_mesh_coordinate(const dt_mesh *mesh, int dim);
/* The dim called `name`, or -1. */
DT_API int dt_mesh_dim_by_name(const dt_mesh *mesh, const char *name);
DT_API const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim);
/* The group of the ranks sharing every coordinate but dim's (borrowed; NULL if out of
 * range). */
DT_API dt_comm *dt_mesh_group(const dt_mesh *mesh, int dim);
/* The whole mesh's group (borrowed). */
DT_API dt_comm *dt_mesh_comm(const dt_mesh *mesh);
/* A number unique to this mesh within the process, equal on its ranks when they create
 * their meshes in the same order (used in cache keys). */
DT_API uint64_t dt_mesh_id(const dt_mesh *mesh);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_MESH_H */
