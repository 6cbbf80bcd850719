/*
 * libdtensor — distributed tensors: placements, creation, conversion, redistribution.
 *
 * A distributed tensor is an ordinary dt_tensor handle that also carries a spec: the mesh
 * it lies on, one placement per mesh dimension, and its global shape and dtype. Its
 * geometry (dt_tensor_shape, dt_tensor_data, ...) describes this rank's local shard; the
 * global shape is dt_dist_global_shape. Every op in ops.h accepts distributed tensors: the
 * sharding propagator picks placements, inputs are redistributed with real collectives,
 * the local kernel runs on the shards and the result is wrapped with the output spec.
 *
 * Placements, per mesh dimension (PyTorch's semantics):
 *   Shard(d)     tensor dim d is split into mesh-size pieces with torch.chunk rules: every
 *                piece has ceil(size / n) elements, trailing pieces fewer or none. When
 *                several mesh dims shard the same tensor dim, they split it in mesh-dim
 *                order (the first mesh dim's piece is split again by the next).
 *   Replicate    every rank holds the whole (along that mesh dim).
 *   Partial(op)  every rank holds a partial value; the tensor is their reduction by op
 *                (sum, avg, max, min).
 *   StridedShard(d, f)  (PyTorch's _StridedShard) tensor dim d, of size L, is cut into f
 *                equal blocks of L / f elements (f must divide L); each block is split
 *                over the mesh dim with torch.chunk rules, and a rank holds its chunk of
 *                every block, concatenated in block order. It is what flattening a tensor
 *                sharded on a non-leading dim gives without moving anything: [6, 4]
 *                Shard(1) on 4 ranks viewed as [24] is StridedShard(0, 6), rank r holding
 *                elements {4 i + r : i = 0..5}. Uneven blocks are allowed ([6, 5] Shard(1)
 *                flattens to StridedShard(0, 6) with chunks 2, 2, 1, 0 of each block).
 *                Other mesh dims may Shard d too, in mesh-dim order: Shards before it cut
 *                the extent its blocks come from (they must split d evenly and f must
 *                divide what they leave), Shards after it cut what the rank holds (its f
 *                chunks in block order; the product of their mesh sizes must divide f, so
 *                a rank holds its chunk of consecutive blocks: PyTorch's
 *                (_StridedShard(d, f), Shard(d)), FSDP2 x TP's parameter layout). Uneven
 *                Shards before it, later Shards not dividing f, and two StridedShards of
 *                one dim are DT_ERR_UNSUPPORTED. f = 1 is Shard(d).
 *
 * Every function here is collective over the mesh (all ranks call it in the same order)
 * unless it says otherwise, and returns the same status on every rank for the same bad
 * input (arguments are checked before any communication).
 *
 * Ownership: results through `dt_tensor **out` are new references. A distributed tensor
 * holds a reference to its mesh: dt_mesh_destroy may come before the tensors are released
 * (the mesh is freed with the last of them; see mesh.h for what must outlive what).
 *
 * Memory — copy or share (read this before distributing large weights):
 *   dt_dist_distribute_tensor COPIES: every rank allocates its own contiguous shard, so a
 *     Replicate placement costs one full copy PER RANK, also when the ranks are threads of
 *     one process (threads backend): a 207 MB weight on 2 ranks adds about 400 MB.
 *   dt_dist_from_local SHARES: the distributed tensor is a view of the tensor you pass (no copy).
 *     For in-process ranks that should share one read-only replicated weight, create it
 *     once and dt_dist_from_local it on every rank with Replicate placements; nothing may then
 *     write to it (in-place ops on one rank would change every rank's replica).
 *   Zero-copy Replicate inside dt_dist_distribute_tensor is not done: the library cannot prove
 *   the caller's tensor stays unwritten, and in-place ops on a shared replica would be
 *   silently wrong.
 */
#ifndef DTENSOR_DIST_H
#define DTENSOR_DIST_H

#include "dtensor/comm.h"
#include "dtensor/core.h"
#include "dtensor/mesh.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_placement_kind {
  DT_REPLICATE = 0,
  DT_SHARD = 1,
  DT_PARTIAL = 2,
  DT_STRIDED_SHARD = 3,
} dt_placement_kind;

/* A placement is a small value: {DT_SHARD, dim}, {DT_REPLICATE}, {DT_PARTIAL, .op},
 * {DT_STRIDED_SHARD, dim, .split_factor}. A zero placement is Replicate. */
typedef struct dt_placement {
  dt_placement_kind kind;
  int dim;          /* DT_SHARD, DT_STRIDED_SHARD: the tensor dim (negative counts from the end on
                       input) */
  dt_reduce_op op;  /* DT_PARTIAL: sum, avg, max or min */
  int split_factor; /* DT_STRIDED_SHARD: the number of blocks f (>= 1); 0 otherwise */
} dt_placement;

static inline dt_placement dt_shard(int dim) {
  dt_placement p = {DT_SHARD, dim, DT_REDUCE_SUM, 0};
  return p;
}
static inline dt_placement dt_replicate(void) {
  dt_placement p = {DT_REPLICATE, 0, DT_REDUCE_SUM, 0};
  return p;
}
static inline dt_placement dt_partial(dt_reduce_op op) {
  dt_placement p = {DT_PARTIAL, 0, op, 0};
  return p;
}
/* StridedShard(dim, split_factor): see "Placements" above. */
static inline dt_placement dt_strided_shard(int dim, int split_factor) {
  dt_placement p = {DT_STRIDED_SHARD, dim, DT_REDUCE_SUM, split_factor};
  return p;
}

/* Writes "S(0)", "R", "P(sum)", "SS(0,6)" (StridedShard) into buf. Not collective. */
DT_API const char *dt_placement_format(dt_placement p, char *buf, size_t size);

/* ---- Inspecting a distributed tensor (not collective) -------------------------------- */

/* The mesh, NULL for a local tensor. */
DT_API dt_mesh *dt_dist_mesh(const dt_tensor *t);
/* Placements (mesh ndim entries), NULL for a local tensor. Borrowed. */
DT_API const dt_placement *dt_dist_placements(const dt_tensor *t);
/* The global number of dims and the global shape (borrowed, valid while t lives); for a
 * local tensor, its own ndim and shape. 0 / NULL for NULL. */
DT_API int dt_dist_ndim(const dt_tensor *t);
DT_API const int64_t *dt_dist_global_shape(const dt_tensor *t);

/* ---- Creating and converting ------------------------------------------------------------- */

/* Options of dt_dist_from_local. Zero-initialise; NULL options mean all defaults. */
typedef struct dt_dist_from_local_options {
  /* The global shape, for uneven shards; NULL: computed assuming every rank's shard has
   * the shape this rank's has along sharded dims (even sharding), as PyTorch does. */
  const int64_t *global_shape;
  int global_ndim;
  /* Verify across ranks that shard shapes fit the global shape and that replicas agree;
   * DT_ERR_INVALID on every rank otherwise (costs collectives). */
  bool run_check;
} dt_dist_from_local_options;

/* Wraps this rank's local tensor as its shard of a distributed tensor with the given
 * placements (mesh ndim of them). The local tensor is shared, not copied (see "Memory"
 * above): writes through either handle are seen by the other.
 * Errors: DT_ERR_INVALID (NULL, placement count != mesh ndim, shard dim out of range,
 * Partial(avg) on an integer or bool dtype, local shape inconsistent with the global shape
 * — without options->global_shape the message says the shape was inferred from even
 * shards —, a distributed input), DT_ERR_NOMEM. */
DT_API dt_status dt_dist_from_local(dt_mesh *mesh, dt_tensor *local, int n_placements,
                                    const dt_placement *placements,
                                    const dt_dist_from_local_options *options, dt_tensor **out);

/* Distributes a full tensor that every rank holds: each rank keeps a contiguous COPY of its
 * shard (a Replicate placement copies the whole tensor on every rank, threads included; use
 * dt_dist_from_local to share, see "Memory" above). Partial placements are refused
 * (DT_ERR_INVALID): distribute as Replicate, then dt_dist_redistribute to a Partial. Not
 * communicating. Errors: DT_ERR_INVALID (NULL, placement count != mesh ndim, a bad shard dim, an
 * already distributed tensor), DT_ERR_NOMEM. */
DT_API dt_status dt_dist_distribute_tensor(dt_mesh *mesh, dt_tensor *full, int n_placements,
                                           const dt_placement *placements, dt_tensor **out);

/* As dt_dist_distribute_tensor, but only mesh rank `src` (its rank in the world group of the
 * mesh) holds the tensor; it is broadcast/scattered from there. `full` is read on src only
 * (others may pass NULL, and must pass global ndim/shape/dtype). */
DT_API dt_status dt_dist_distribute_tensor_from(dt_mesh *mesh, dt_tensor *full, int src, int ndim,
                                                const int64_t *shape, dt_dtype dtype,
                                                int n_placements, const dt_placement *placements,
                                                dt_tensor **out);

/* This rank's shard as a local tensor (a view: shares storage). Not collective.
 * Errors: DT_ERR_INVALID (NULL; a local tensor: "to_local: the tensor is not distributed" —
 * deliberately not an identity, as PyTorch has no to_local on a plain tensor). */
DT_API dt_status dt_dist_to_local(dt_tensor *t, dt_tensor **out);

/* The whole tensor on every rank, as a local tensor (redistributes to Replicate).
 * Errors: DT_ERR_INVALID (NULL; a local tensor: "full_tensor: the tensor is not
 * distributed"), the errors of dt_dist_redistribute. */
DT_API dt_status dt_dist_full_tensor(dt_tensor *t, dt_tensor **out);

/* A distributed tensor equal to t with other placements, moved with the cheapest plan.
 * Errors: DT_ERR_INVALID (NULL, a local tensor, bad placements, Partial(avg) on an integer
 * or bool dtype: an average of integers is not representable, so it is refused here rather
 * than at the next reduction), the collective errors. */
DT_API dt_status dt_dist_redistribute(dt_tensor *t, int n_placements,
                                      const dt_placement *placements, dt_tensor **out);

/* The plan dt_dist_redistribute would run, as readable text ("mesh dim 0: S(0) -> R via
 * all_gather, 4096 bytes") with the bytes this rank's collectives handle (the larger buffer
 * of each collective, which is what dt_comm_ledger counts). Not collective. bytes may be NULL.
 * Errors: DT_ERR_INVALID (a local tensor, NULL buf or size 0, bad placements). */
DT_API dt_status dt_dist_redistribute_explain(const dt_tensor *t, int n_placements,
                                              const dt_placement *placements, char *buf,
                                              size_t size, int64_t *bytes);

/* ---- Distributed factories ----------------------------------------------------------------- */
/* A tensor of the global shape with the given placements, each rank creating only its shard.
 * rand/randn: the global values depend only on the seed, never on the mesh or placements
 * (element i of the global tensor is element i of dt_rand's stream). Partial placements
 * are not allowed here (DT_ERR_INVALID). StridedShard: constant, zeros and ones take it;
 * rand, randn and arange refuse it (DT_ERR_UNSUPPORTED: create the tensor Shard or Replicate
 * and dt_dist_redistribute it). Not communicating. */
DT_API dt_status dt_dist_constant(dt_mesh *mesh, int ndim, const int64_t *shape, double value,
                                  dt_dtype dtype, int n_placements, const dt_placement *placements,
                                  dt_tensor **out);
DT_API dt_status dt_dist_zeros(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                               int n_placements, const dt_placement *placements, dt_tensor **out);
DT_API dt_status dt_dist_ones(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                              int n_placements, const dt_placement *placements, dt_tensor **out);
DT_API dt_status dt_dist_rand(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                              uint64_t seed, int n_placements, const dt_placement *placements,
                              dt_tensor **out);
DT_API dt_status dt_dist_randn(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                               uint64_t seed, int n_placements, const dt_placement *placements,
                               dt_tensor **out);
/* dt_arange's 1-D tensor (start, start + step, ... short of end) with the given placements:
 * each rank computes only its shard's values, the same as the whole tensor's. */
DT_API dt_status dt_dist_arange(dt_mesh *mesh, double start, double end, double step,
                                dt_dtype dtype, int n_placements, const dt_placement *placements,
                                dt_tensor **out);

/* Writes a text table of which ranks hold which block of a 1-D or 2-D distributed tensor.
 * Not collective. Errors: DT_ERR_INVALID (local tensor, ndim > 2, NULL). */
DT_API dt_status dt_dist_visualize_sharding(const dt_tensor *t, char *buf, size_t size);

/* Whether op `op` (an index into the op table, see dt_op_name) has a sharding rule; ops
 * without one run on distributed tensors by replicating their inputs, except the local-only
 * fusions (layer_norm_backward_all), which refuse a distributed argument with
 * DT_ERR_UNSUPPORTED. Not collective. */
DT_API bool dt_op_has_sharding_rule(int op);

/* ---- The comm ledger (PyTorch's CommDebugMode) ------------------------------------------------
 * Counts the collectives the calling thread issues, by kind and bytes, and attributes each
 * to the op being dispatched when it ran (redistributions an op needs count under that op;
 * direct calls such as dt_dist_redistribute count under "(no op)"). It is a dispatch mode: start
 * pushes it on this thread's mode stack, stop pops it (stop the ledgers in reverse order of
 * starting them, as modes stack). Bytes are those of the larger buffer of each collective
 * on this rank. */
typedef struct dt_comm_ledger dt_comm_ledger;

/* Creates a ledger and starts recording. Errors: DT_ERR_INVALID (NULL out, too many modes,
 * another ledger already recording on this thread), DT_ERR_NOMEM. */
DT_API dt_status dt_comm_ledger_start(dt_comm_ledger **out);
/* Stops recording (the counts stay readable). Errors: DT_ERR_INVALID (not the innermost mode
 * or not recording). */
DT_API dt_status dt_comm_ledger_stop(dt_comm_ledger *ledger);
/* Calls and bytes of one collective kind ("all_reduce", "all_gather_uneven", ...), over all
 * ops; or of every kind when collective is NULL. */
DT_API int64_t dt_comm_ledger_count(const dt_comm_ledger *ledger, const char *collective);
DT_API int64_t dt_comm_ledger_bytes(const dt_comm_ledger *ledger, const char *collective);
/* Writes the table (op, collective, calls, bytes) into buf, truncated to size. */
DT_API dt_status dt_comm_ledger_format(const dt_comm_ledger *ledger, char *buf, size_t size);
/* Frees a stopped ledger (a recording one is stopped first). NULL is allowed. */
DT_API void dt_comm_ledger_destroy(dt_comm_ledger *ledger);

/* ---- The sharding-propagation cache (per thread, i.e. per threads-backend rank) --------- */
typedef struct dt_dist_sharding_cache_info {
  uint64_t hits;
  uint64_t misses;
  uint64_t entries;
  uint64_t fallbacks; /* ops run by replicating inputs because they have no sharding rule */
} dt_dist_sharding_cache_info;

/* Empties the calling thread's cache of sharding and redistribution plans (and zeroes its
 * stats): the next call of each op plans again. Not collective. */
DT_API void dt_dist_sharding_cache_clear(void);
/* Copies the calling thread's cache stats into *stats (NULL is ignored). Not collective. */
DT_API void dt_dist_sharding_cache_stats(dt_dist_sharding_cache_info *stats);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_DIST_H */
