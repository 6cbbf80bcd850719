/* Private interface of the dist layer: specs, shard geometry, redistribution plans. */
#ifndef DT_DIST_IMPL_H
#define DT_DIST_IMPL_H

#include <stdatomic.h>

#include "dtensor/dist.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"
#include "tensor/device_impl.h"
#include "tensor/tensor_impl.h"

/* What a distributed tensor carries besides its local shard. Immutable once built and
 * shared (refcounted) between tensors and cached plans. */
struct dt_dist_spec {
  atomic_int refcount;
  dt_mesh *mesh;
  uint64_t mesh_id;
  int mesh_ndim;
  dt_placement placements[DT_MESH_MAX_DIMS];
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  dt_dtype dtype;
  uint64_t hash; /* of mesh id, placements, shape, dtype: the cache key part */
  /* from_local without global_shape: the shape is this rank's even-shard guess, so a
   * collective mismatch later says that global_shape is the likely cure. */
  bool shape_inferred;
};
typedef struct dt_dist_spec dt_dist_spec;

/* torch.chunk geometry: piece `index` of `n` pieces of a dim of `size`. */
static inline void dt__chunk_range(int64_t size, int64_t n, int64_t index, int64_t *start,
                                   int64_t *length) {
  int64_t piece = n > 0 ? (size + n - 1) / n : size;
  int64_t s = piece * index;
  if (s > size) s = size;
  int64_t l = size - s;
  if (l > piece) l = piece;
  *start = s;
  *length = l;
}

/* How many of dt__chunk_range's n chunks of size are non-empty: the first ones, the rest are
 * empty (a 10-row dim over 256 ranks: 10). */
static inline int64_t dt__chunk_nonempty(int64_t size, int64_t n) {
  int64_t piece = n > 0 ? (size + n - 1) / n : size;
  return piece > 0 ? (size + piece - 1) / piece : 0;
}

/* Whether p splits a tensor dim (Shard or StridedShard). */
static inline bool dt__is_sharding(dt_placement p) {
  return p.kind == DT_SHARD || p.kind == DT_STRIDED_SHARD;
}

/* Whether placing q on mesh dim m of `state` would make a tuple that does not exist. A tensor
 * dim may be sharded by several mesh dims (shards nest in mesh-dim order), at most one of them
 * a StridedShard: `S(d)` on mesh dim m and `SS(d, f)` on a later one is f blocks of what m left,
 * each chunked over the later mesh dim (the nested form); `SS(d, f)` on mesh dim m and `S(d)`
 * on later ones chunk what the rank holds (its f chunks in block order), which is whole chunks
 * when their mesh sizes divide f (the outer form, dt__strided_fits). Refused: two StridedShards
 * of one dim. Inline: the propagator and the planner ask it for every step they price. */
static inline bool dt__strided_conflict(const dt_placement *state, int mesh_ndim, int m,
                                        dt_placement q) {
  if (q.kind != DT_STRIDED_SHARD) return false;
  for (int j = 0; j < mesh_ndim; j++) {
    if (j != m && state[j].kind == DT_STRIDED_SHARD && state[j].dim == q.dim) return true;
  }
  return false;
}
/* No such conflict in the tuple. */
bool dt__placements_valid(int mesh_ndim, const dt_placement *placements);
/* Whether a StridedShard of the tuple has a plain Shard of its dim on another mesh dim (the
 * nested form, Shard first, or the outer form, StridedShard first). */
bool dt__strided_nested(int mesh_ndim, const dt_placement *placements);
/* Whether a StridedShard of the tuple has a plain Shard of its dim on a later mesh dim (the
 * outer form, PyTorch's (_StridedShard(d, f), Shard(d)): FSDP2 x TP's parameter layout). */
bool dt__strided_outer(int mesh_ndim, const dt_placement *placements);
/* Whether every StridedShard(d, f) of the tuple cuts whole blocks: f divides the extent of d it
 * applies to, which for the nested form is what the earlier Shards of d leave, and those must
 * split d evenly (every rank then has the same whole number of blocks); for the outer form the
 * later Shards of d must take whole chunks: the product of their mesh sizes divides f. */
bool dt__strided_fits(int ndim, const int64_t *shape, int mesh_ndim, const int64_t *mesh_size,
                      const dt_placement *placements);
/* DT_ERR_INVALID (or DT_ERR_UNSUPPORTED for an uneven earlier Shard, or later Shards whose
 * mesh sizes do not divide f) unless dt__strided_fits. */
dt_status dt__check_strided(const char *op, int ndim, const int64_t *shape, int mesh_ndim,
                            const int64_t *mesh_size, const dt_placement *placements);

/* The block of the global tensor a rank at `coord` holds under `placements`: its shape
 * and offset per tensor dim. Sharded dims are split in mesh-dim order. For a dim carrying
 * a StridedShard the region is not a box: the shape is the rank's f chunks together and the
 * offset is the global index of its first element, i.e. where the extent the earlier Shards
 * of d left starts (0 when none) plus where its chunk starts inside each block; the blocks are
 * that extent / f long. Later Shards of d (the outer form) keep the convention: the rank holds
 * its chunk of g = f / (their mesh sizes) consecutive blocks, the shape is g chunks and the
 * offset that of its first element (a box when g = 1). */
void dt__local_region(int ndim, const int64_t *global_shape, int mesh_ndim,
                      const int64_t *mesh_size, const int64_t *coord,
                      const dt_placement *placements, int64_t *local_shape, int64_t *offset);

/* Checks placements against a mesh and a tensor rank, normalizing negative shard dims into
 * `normalized`. `op` names the caller in the message. */
dt_status dt__check_placements(const char *op, int mesh_ndim, int ndim, int n_placements,
                               const dt_placement *placements, dt_placement *normalized);

/* Builds a new spec (refcount 1). */
dt_status dt__spec_create(dt_mesh *mesh, const dt_placement *placements, int ndim,
                          const int64_t *shape, dt_dtype dtype, dt_dist_spec **out);
dt_dist_spec *dt__spec_retain(dt_dist_spec *spec);
void dt__spec_release(dt_dist_spec *spec);
/* Whether two tuples of n placements are equal (the fields each kind uses). Inline: the
 * propagator compares placements for every candidate it prices. */
static inline bool dt__placements_equal(int n, const dt_placement *a, const dt_placement *b) {
  for (int i = 0; i < n; i++) {
    if (a[i].kind != b[i].kind) return false;
    if (a[i].kind == DT_SHARD && a[i].dim != b[i].dim) return false;
    if (a[i].kind == DT_PARTIAL && a[i].op != b[i].op) return false;
    if (a[i].kind == DT_STRIDED_SHARD &&
        (a[i].dim != b[i].dim || a[i].split_factor != b[i].split_factor))
      return false;
  }
  return true;
}

/* A new distributed handle: a view of `local` carrying `spec` (retained). */
dt_status dt__dist_wrap(dt_tensor *local, dt_dist_spec *spec, dt_tensor **out);

/* A local handle viewing a distributed tensor's shard (no spec). */
dt_status dt__local_view(const dt_tensor *t, dt_tensor **out);

/* Redistributes the local shard `local` of a tensor with spec `from` to placements `to`,
 * returning the new local shard (a new tensor, or `local` retained when nothing moves). */
dt_status dt__redistribute_local(dt_tensor *local, const dt_dist_spec *from, const dt_placement *to,
                                 dt_tensor **out);

/* A guard over the public calls that convert between local and distributed tensors
 * (from_local, to_local, redistribute, full_tensor, distribute_tensor,
 * distribute_tensor_from). They run outside the op table, so a tracing dispatch mode never
 * sees them: export installs this guard on its thread while it traces (and only there) to
 * refuse a conversion of a value the trace holds, whose result would otherwise become a
 * constant of the graph. `check` runs after the call's own argument checks and before it
 * communicates; a nonzero status (with its message set) is what the call returns. Per
 * thread; check == NULL when nothing traces. It is the one upcall not in dt__upcalls
 * (core/core_impl.h): it is per thread and scoped to one export, not installed once. */
typedef struct dt__dist_convert_guard {
  dt_status (*check)(void *user, const char *call, const dt_tensor *input);
  void *user;
} dt__dist_convert_guard;

extern _Thread_local dt__dist_convert_guard dt__dist_guard;

/* Installs the lower layers' upcalls into this layer (dt__upcall, core/core_impl.h);
 * idempotent. */
void dt__dist_init(void);

/* st with the current message plus a note that from_local inferred the global shape
 * (assuming even shards) and global_shape should be given for uneven ones. */
dt_status dt__dist_add_inferred_hint(dt_status st);
extern const char dt__dist_inferred_hint[]; /* that note, "; no options.global_shape ..." */

/* from_local's run_check (collective): every rank's shard fits (`fits` is this rank's own
 * verdict), every rank declares the same global shape and dtype, replicas agree. */
dt_status dt__from_local_check(dt_mesh *mesh, const dt_tensor *local,
                               const dt_placement *placements, const int64_t *global_shape,
                               bool fits);

/* ---- Sharding propagation -------------------------------------------------------------- */

#define DT_DIST_MAX_ARGS 16
#define DT_RULE_MAX_STRATEGIES 24

/* What a sharding rule sees: the op with its attributes (normalized by a global infer), the
 * tensor arguments as global shapes, the outputs' global metas. */
typedef struct dt_rule_ctx {
  const dt_op_call *call;
  int n_args;
  const dt_tensor *args[DT_DIST_MAX_ARGS]; /* global geometry; NULL for an absent optional */
  int n_out;
  const dt_tensor_meta *out; /* n_out metas (at most DT_OP_MAX_META) */
  int64_t mesh_size;         /* of the mesh dim being decided */
  /* For argument 0: how many pieces each of its dims is cut into when this mesh dim shards
   * it together with the other mesh dims that already shard it (nested sharding). Rules
   * whose validity depends on sizes (even splits, no empty shard) check against this. */
  int64_t split[DT_MAX_DIMS];
  /* For argument 0: how many pieces each of its dims is cut into by Shards on the mesh dims
   * before this one (a StridedShard on this mesh dim works on what they leave). */
  int64_t outer[DT_MAX_DIMS];
  /* For argument 0: whether every piece of each dim is non-empty when cut as `split` counts
   * (torch.chunk at each level of nesting, in mesh-dim order): a max or min of the pieces
   * then has a value on every rank. */
  bool nonempty[DT_MAX_DIMS];
} dt_rule_ctx;

/* Candidate strategies for one mesh dim: the placement each argument must have and the
 * placement every output gets. */
typedef struct dt_strategies {
  int n;
  dt_placement in[DT_RULE_MAX_STRATEGIES][DT_DIST_MAX_ARGS];
  dt_placement out[DT_RULE_MAX_STRATEGIES];
  /* Bit k: strategy k relies on argument 0 keeping its current placements on the earlier mesh
   * dims (a view making or undoing a StridedShard: its split factor counts blocks of what they
   * leave), so the propagator takes it only with those. */
  uint32_t keeps_outer;
  /* unsharded_before[k]: bit d set when strategy k relies on no earlier mesh dim sharding
   * argument 0's dim d (a StridedShard made or undone without nesting). */
  uint32_t unsharded_before[DT_RULE_MAX_STRATEGIES];
} dt_strategies;

/* The losses' rules (rules_loss.c): rows (every argument and the output sharded on dim 0
 * together) and the vocabulary-parallel cross-entropy terms (classes sharded). */
void dt__rule_rows(const dt_rule_ctx *c, dt_strategies *s);
void dt__rule_vocab_terms(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);

/* Proposes strategies for one mesh dim given the arguments' current placements on it.
 * Returns false when the op has no rule (the caller replicates). */
bool dt__sharding_rule(const dt_rule_ctx *ctx, const dt_placement *current, dt_strategies *s);

/* Helpers the rule files share (distributed/rules_common.c): push adds a candidate (a repeat is
 * dropped); keep_free_dims offers the shards of argument 0's dims outside `busy` (a bit mask),
 * the first `alike` arguments placed as argument 0 and the others replicated (`reduces`: a
 * shard of a free dim gives a Partial(sum)), and Replicate. */
void dt__rule_push(dt_strategies *s, const dt_placement *in, int n_in, dt_placement out);
void dt__rule_keep_free_dims(const dt_rule_ctx *c, const dt_placement *cur, uint32_t busy,
                             int alike, bool reduces, dt_strategies *s);
/* Whether the dist dispatcher runs call on the shards as something other than call with local
 * shapes, given the placements self (argument 0) and weight (argument 1, may be NULL) take on
 * each of mesh_ndim mesh dims: a narrow keeping a shard of the dim it narrows (it covers the
 * whole dim: the shard runs a whole slice), rms_norm with its weight sharded (the shard
 * normalizes whole rows and scales its columns by its piece of the weight). A graph node runs
 * call as it is, so compile and the TP transform keep such choices out. */
bool dt__dist_rewrites_call(const dt_op_call *call, int mesh_ndim, const dt_placement *self,
                            const dt_placement *weight);

/* A Partial that linear ops keep: sum or avg. */
static inline bool dt__is_linear_partial(dt_placement p) {
  return p.kind == DT_PARTIAL && (p.op == DT_REDUCE_SUM || p.op == DT_REDUCE_AVG);
}
/* The rules of the matrix products (distributed/rules_matmul.c). */
void dt__rule_matmul(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);
void dt__rule_addmm(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);
void dt__rule_linear(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);
/* The rules of the index ops (distributed/rules_index.c). */
void dt__rule_triangle(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);
void dt__rule_index_select(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);
void dt__rule_gather(const dt_rule_ctx *c, const dt_placement *cur, dt_strategies *s);

/* argmax over every dim of a tensor sharded as `current` (plain Shards, no Partial): whether
 * the dispatcher gathers per-shard candidates instead of the tensor (dispatch_argmax.c). */
bool dt__dist_argmax_candidates(const dt_op_call *g, int mesh_ndim, const dt_placement *current);
/* Runs it: lc is the local call on this rank's shard of a tensor with `spec` (a CPU mesh);
 * the result, shaped as out_spec (replicated), goes to lc->outputs[0]. Collective over the
 * mesh dims that shard the tensor. */
dt_status dt__dist_argmax_run(dt_op_call *lc, const dt_dist_spec *spec,
                              const dt_dist_spec *out_spec);
/* The bytes dt__dist_argmax_run moves on a rank (the comm ledger's count: the gathered
 * candidates of each mesh dim that shards the tensor). */
int64_t dt__dist_argmax_bytes(const dt_dist_spec *spec);

/* A cached redistribution plan between two placement tuples of a spec. */
struct dt_redistribute_plan;
dt_status dt__redistribute_plan_cached(const dt_dist_spec *from, const dt_placement *to,
                                       struct dt_redistribute_plan *plan);

/* ---- Local buffers on the mesh's device (local_device.c) -----------------------------------
 * The redistribution executor and the conversions work on each rank's shard where it lives: on
 * the CPU through the CPU's code as ever, on a device (a CUDA mesh) through its kernels and
 * copies, never through host reads. */

/* A new contiguous, uninitialised tensor on like's device. */
dt_status dt__dist_new_like(const dt_tensor *like, int ndim, const int64_t *shape, dt_dtype dtype,
                            dt_tensor **out);
/* dst = src element by element (same shape and dtype, one device; views allowed). */
dt_status dt__dist_copy(dt_tensor *dst, const dt_tensor *src);
/* Sets every element of t to value (representable in t's dtype: the caller checked). */
dt_status dt__dist_fill(dt_tensor *t, double value);
/* Moves rows of row_bytes bytes between two contiguous tensors of one device: dst[order[k]] =
 * src[k] (scatter) or dst[k] = src[order[k]]; runs of consecutive rows are one copy. */
dt_status dt__dist_permute_rows(const dt_tensor *src, dt_tensor *dst, const int64_t *order,
                                int64_t rows, size_t row_bytes, bool scatter);
/* A new contiguous CPU copy of t (any device, any strides); errors are prefixed with op. */
dt_status dt__dist_to_host(const char *op, const dt_tensor *t, dt_tensor **out);
/* Fills dst (contiguous, on any device) from host (a CPU tensor of its shape and dtype). */
dt_status dt__dist_from_host(dt_tensor *dst, const dt_tensor *host);

#endif /* DT_DIST_IMPL_H */
