/*
 * libdtensor — device mesh: an N-D grid of ranks with (optionally) named dimensions.
 *
 * The ranks of a group of W are laid out row-major over the mesh shape (rank r sits at the
 * coordinates of r in a tensor of that shape, like torch.arange(W).reshape(shape)). Along
 * each mesh dimension d the ranks that share every other coordinate form a sub-group: the
 * group of dimension d, in which this rank's number is its coordinate d. A "dp" x "tp" mesh
 * of 2 x 4 has, for rank 5 (coordinates [1, 1]), the "tp" group {4, 5, 6, 7} and the "dp"
 * group {1, 5}.
 *
 * Ownership and lifetime: the mesh owns its per-dimension groups and borrows the group it is
 * made from (the world). dt_mesh_destroy drops the caller's reference only: every
 * distributed tensor made on the mesh holds a reference too, and the mesh (with its
 * groups) is freed when the last of them is released. So destroying the mesh before its
 * tensors is legal, and those tensors keep working (ops, redistribute, full_tensor).
 * Releasing is safe in any order: on the threads backend a mesh, its distributed tensors, and
 * local tensors whose autograd graph reaches one (dt_dist_full_tensor of a parameter that
 * requires grad) may be released, and dt_mesh_destroy called, after the rank function returned
 * or after the world was destroyed: the mesh keeps the world's handle, and each group the
 * backend's shared state, until the mesh is freed.
 * What must still hold:
 *   - Communication needs the world and the ranks: dt_mesh_world hands the world out and
 *     dt_dist_distribute_tensor_from / dt_dist_visualize_sharding communicate on it; after the
 *     world is destroyed (or dt_comm_spawn returned) a collective on the mesh or its tensors is
 *     undefined (releasing them is not).
 *   - On the threads backend, destroy a rank's meshes before its rank function returns:
 *     dt_comm_spawn warns about those left (PyTorch warns about a process group never
 *     destroyed), though releasing them later is safe.
 *   - dt_mesh_group handles are valid while the mesh is (until its last reference goes);
 *     after dt_mesh_destroy, use them only through the surviving tensors.
 *   - A mesh referenced from another thread's sharding cache (ops on its tensors run on a
 *     thread other than the one that called dt_mesh_destroy) lives until that thread calls
 *     dt_dist_sharding_cache_clear or exits.
 */
#ifndef DTENSOR_MESH_H
#define DTENSOR_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/comm.h"
#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions a mesh may have (the one limit for meshes and the distributed tensors on
 * them: the distributed layer keeps per-mesh-dim placements in fixed arrays of this size, and
 * PyTorch's largest common layouts, e.g. pp x dp x cp x tp, have 4), and the longest
 * dimension name. */
#define DT_MESH_MAX_DIMS 4
#define DT_MESH_MAX_NAME 31

typedef struct dt_mesh dt_mesh;

/* Builds a mesh over `world` (collective: every rank of world calls it, with the same
 * arguments, in the same order relative to its other collectives on world). shape has ndim
 * entries >= 1 whose product must equal the group size. dim_names is NULL or ndim distinct,
 * non-empty names of at most DT_MESH_MAX_NAME characters (copied).
 * Errors: DT_ERR_INVALID (NULL world/shape/out, ndim outside 1..DT_MESH_MAX_DIMS, a size < 1,
 * product != group size — the message names both —, bad or repeated names), DT_ERR_NOMEM,
 * and the errors of dt_comm_split. On failure *out is NULL. */
DT_API dt_status dt_mesh_create(dt_comm *world, int ndim, const int *shape,
                                const char *const *dim_names, dt_mesh **out);

/* PyTorch's init_device_mesh: dt_mesh_create for tensors on devices of `device_type` ("cpu",
 * "cuda": a kind, each rank using its own device of it: dt_mesh_device). dt_mesh_create's
 * meshes are CPU meshes. The rank's device: the one its backend binds it to (nccl: its
 * communicator's GPU), else world rank r takes device r % count (threads ranks share one GPU,
 * or take one each). distribute_tensor and from_local check that the tensor is on this rank's
 * device; ops refuse mixed devices; redistribution keeps every buffer on it.
 * Errors: those of dt_mesh_create; DT_ERR_INVALID (NULL device_type, an unknown kind, a device
 * index such as "cuda:1"); DT_ERR_UNSUPPORTED (a kind not available in this build or process,
 * e.g. no CUDA device, or one the world's backend does not move: fake). */
DT_API dt_status dt_mesh_create_on(const char *device_type, dt_comm *world, int ndim,
                                   const int *shape, const char *const *dim_names, dt_mesh **out);

/* The device kind of the mesh's tensors (DT_DEVICE_CPU for NULL). */
DT_API dt_device_kind dt_mesh_device_kind(const dt_mesh *mesh);

/* This rank's device of the mesh: where its shards live ({DT_DEVICE_CPU, 0} for a CPU mesh
 * and for NULL). Create local tensors there (dt_tensor_options.device) before from_local or
 * distribute_tensor. */
DT_API dt_device dt_mesh_device(const dt_mesh *mesh);

/* Drops the caller's reference (not collective). The mesh and its per-dimension groups (not
 * the world) are freed now if no distributed tensor refers to it, else when the last one is
 * released. Call it once per dt_mesh_create. NULL is allowed. A second call while distributed
 * tensors still hold the mesh is reported through the log callback (DT_LOG_WARN) and ignored;
 * after the mesh is freed the handle is gone and a second call is undefined behaviour (no
 * check can read freed memory). */
DT_API void dt_mesh_destroy(dt_mesh *mesh);

/* Writes "mesh (dp=2, tp=2)" (named dims) or "mesh (2, 2)" into buf, truncated to size, and
 * returns buf ("" when buf is NULL or size is 0). Error messages name meshes this way. Not
 * collective. */
DT_API const char *dt_mesh_format(const dt_mesh *mesh, char *buf, size_t size);

/* An id equal on every rank of the mesh and unique within the process (for caches). */
DT_API uint64_t dt_mesh_id(const dt_mesh *mesh);

/* Number of mesh dims (0 for NULL). */
DT_API int dt_mesh_ndim(const dt_mesh *mesh);
/* The mesh shape (ndim entries). Borrowed. */
DT_API const int *dt_mesh_shape(const dt_mesh *mesh);
/* Size of dimension dim; -1 when dim is out of range. */
DT_API int dt_mesh_size(const dt_mesh *mesh, int dim);
/* This rank's coordinate along dim (= its rank in dt_mesh_group(mesh, dim)); -1 when dim is
 * out of range. */
DT_API int dt_mesh_coordinate(const dt_mesh *mesh, int dim);
/* The group of ranks along dim that share this rank's other coordinates. Borrowed; NULL
 * when dim is out of range. */
DT_API dt_comm *dt_mesh_group(const dt_mesh *mesh, int dim);
/* The group the mesh was made from. Borrowed. */
DT_API dt_comm *dt_mesh_world(const dt_mesh *mesh);
/* Rank in the world group of the rank at coords (ndim entries); -1 if out of range. */
DT_API int dt_mesh_rank_at(const dt_mesh *mesh, const int *coords);

/* The name of dimension dim, or NULL when unnamed or out of range. */
DT_API const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim);
/* Looks a dimension up by name. Errors: DT_ERR_INVALID (NULL arguments, no such name; the
 * message lists the mesh's names). */
DT_API dt_status dt_mesh_dim_by_name(const dt_mesh *mesh, const char *name, int *dim);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_MESH_H */
