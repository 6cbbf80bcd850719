/* Redistribution plans and their execution. */
#ifndef DT_REDISTRIBUTE_IMPL_H
#define DT_REDISTRIBUTE_IMPL_H

#include "distributed/dist_impl.h"

typedef enum dt_step_kind {
  DT_STEP_INVALID = 0,
  DT_STEP_ALL_GATHER,
  DT_STEP_ALL_TO_ALL,
  DT_STEP_ALL_REDUCE,
  DT_STEP_REDUCE_SCATTER,
  DT_STEP_SLICE,
  DT_STEP_TO_PARTIAL,
} dt_step_kind;

typedef struct dt_redistribute_step {
  int mesh_dim;
  dt_placement from, to;
  dt_step_kind kind;
  int64_t bytes; /* estimated bytes through this rank */
} dt_redistribute_step;

#define DT_MAX_REDISTRIBUTE_STEPS (4 * DT_MAX_MESH_DIMS)

typedef struct dt_redistribute_plan {
  int n_steps;
  dt_redistribute_step steps[DT_MAX_REDISTRIBUTE_STEPS];
  int64_t bytes;
} dt_redistribute_plan;

/* What the cost model needs of the tensor and the mesh. */
typedef struct dt_redistribute_geometry {
  int mesh_ndim;
  int64_t mesh_size[DT_MAX_MESH_DIMS];
  double global_bytes;
} dt_redistribute_geometry;

dt_status dt__redistribute_plan(const dt_redistribute_geometry *g, const dt_placement *from,
                                const dt_placement *to, dt_redistribute_plan *plan);
void dt__redistribute_plan_format(const dt_redistribute_plan *plan, char *buf, size_t size);

/* Replaces a plan's estimated bytes with what this rank's collectives will move (the larger
 * buffer of each, as the comm ledger counts them), from the exact shard geometry. */
void dt__redistribute_exact_bytes(const dt_dist_spec *from, dt_redistribute_plan *plan);

/* Runs a plan on this rank's shard of a tensor with spec `from`. */
dt_status dt__redistribute_execute(dt_tensor *local, const dt_dist_spec *from,
                                   const dt_redistribute_plan *plan, dt_tensor **out);

#endif
