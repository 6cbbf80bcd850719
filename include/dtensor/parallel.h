/*
 * libdtensor — tensor parallelism: styles, the eager parallelize_module, and the
 * tensor-parallel transformation of exported programs; FSDP and DDP; context parallelism
 * (ring attention over a "cp" mesh dim, at the end).
 *
 * A plan maps module FQNs to a style, applied on one mesh dim (dt_parallel_tp_transform: a group of
 * world_size ranks; dt_parallel_tp_module: the last dim of an N-D mesh, e.g. "tp" of
 * ("dp", "tp"), Replicate on the others):
 *
 *   COLWISE   Linear weight Shard(0), bias Shard(0): each rank computes a slice of the output
 *             features. Input Replicate, output Shard(-1) (PyTorch's ColwiseParallel).
 *   ROWWISE   Linear weight Shard(1), bias Replicate: each rank contracts a slice of the
 *             input features. Input Shard(-1), output Replicate (PyTorch's RowwiseParallel).
 *   Embedding (eager path only), weight [vocab, dim]:
 *     ROWWISE   vocabulary-parallel: weight Shard(0), each rank looks up the rows it holds
 *               (zeros for the others) so the lookup is a Partial(sum), reduced to the output
 *               layout. Input (indices) Replicate, output Replicate (Shard(1) for sequence
 *               parallelism: a reduce-scatter).
 *     COLWISE   weight Shard(1): input Replicate, output Shard(-1).
 *   SEQUENCE_PARALLEL (eager path only; PyTorch's SequenceParallel) on a LayerNorm, an
 *             RMSNorm or a module without parameters (activations, dropout-like): its
 *             parameters become Replicate, the input is taken as Shard(1) (the sequence dim of
 *             [batch, seq, ...]: a local input is this rank's sequence shard, even sizes assumed; a
 *             distributed one is redistributed to Shard(1)) and the output stays a
 *             distributed Shard(1) tensor (use_local_output=False; keep_distributed_output is
 *             implied), which the next colwise Linear all-gathers (give it input_layout
 *             Shard(1)). The parameters' gradients come back Partial(sum) over the tp dim
 *             (each rank's tokens contribute): the optimizer step all-reduces them to
 *             Replicate, as for any Partial gradient of a Replicate parameter.
 *
 * Everything the plan does not name is replicated. Sizes need not divide: shards follow
 * torch.chunk (ranks at the end may hold fewer rows, or none).
 */
#ifndef DTENSOR_PARALLEL_H
#define DTENSOR_PARALLEL_H

#include "dtensor/core.h"
#include "dtensor/dist.h"
#include "dtensor/graph.h"
#include "dtensor/mesh.h"
#include "dtensor/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_tp_style {
  DT_TP_COLWISE = 0,
  DT_TP_ROWWISE = 1,
  DT_TP_SEQUENCE_PARALLEL = 2, /* eager path only; dt_parallel_tp_transform: DT_ERR_UNSUPPORTED */
} dt_tp_style;

/* "colwise" / "rowwise" / "sequence_parallel". */
DT_API const char *dt_parallel_tp_style_name(dt_tp_style style);

typedef struct dt_tp_plan_entry {
  /* A Linear module: "mlps.0.0" (eager: also Embedding, LayerNorm, ...). The eager path
   * (dt_parallel_tp_module) also takes patterns: a '*' matches any characters within one
   * dotted segment, so "layers.*.self_attn.q_proj" names that Linear in every layer; a pattern
   * matching no module is DT_ERR_INVALID, and so is a module two entries match (named twice). */
  const char *fqn;
  dt_tp_style style;
} dt_tp_plan_entry;

typedef struct dt_tp_plan {
  int n;
  const dt_tp_plan_entry *entries;
} dt_tp_plan;

/* The tensor-parallel transformation (PyTorch's tensor_parallel_transformation): rewrites
 * program for `rank` of `world_size` ranks. Parameters take the plan's placements and the new
 * program's state dict holds this rank's shards only (copies); every value gets a placement
 * from the op table's sharding rules, and where a consumer needs another placement than its
 * input has, explicit communication nodes are inserted (all_gather_into_tensor, all_reduce,
 * reduce_scatter_tensor, all_to_all, each followed by wait_tensor; going from Replicate to a
 * shard or a partial sum is a local op). Graph outputs are Replicate. Run the result with
 * dt_program_run and a group of world_size ranks in which this rank is `rank`.
 * Not collective. Errors: DT_ERR_INVALID (NULL, rank outside the world, a plan FQN that is not
 * a module of the program, an unknown style, a FQN named twice), DT_ERR_UNSUPPORTED (a style on
 * a module that is not a Linear, a symbolic dim that would have to be sharded), DT_ERR_NOMEM. On
 * failure *out is NULL. */
DT_API dt_status dt_parallel_tp_transform(const dt_program *program, int rank, int world_size,
                                          const dt_tp_plan *plan, dt_program **out);

/* Options of a style in the eager path. Zero-initialise; NULL means PyTorch's defaults. The
 * layouts are pointers because a zero dt_placement is Replicate, a meaningful value: NULL
 * means the style's default. dt_parallel_tp_module copies the pointed-to placement, so it only
 * has to live for that call: `.output_layout = &(dt_placement){.kind = DT_REPLICATE}`. */
typedef struct dt_tp_style_options {
  /* The input placement; NULL: COLWISE Replicate, ROWWISE Shard(-1) (Embedding: Replicate),
   * SEQUENCE_PARALLEL Shard(1). A Linear given another one (Shard(1) after a
   * sequence-parallel region) redistributes the input to its default before computing
   * (PyTorch's desired_input_layouts). */
  const dt_placement *input_layout;
  /* The output placement; NULL: COLWISE Shard(-1), ROWWISE Replicate, SEQUENCE_PARALLEL
   * Shard(1). */
  const dt_placement *output_layout;
  bool keep_distributed_output; /* return the distributed tensor (use_local_output=False) */
} dt_tp_style_options;

/* The eager path (PyTorch's parallelize_module): replaces the parameters of every Linear the
 * plan names by distributed tensors with the style's placements on the tensor-parallel mesh
 * dim (the LAST mesh dim, as in TorchTitan's ("dp", "tp") meshes, so a 1-D mesh behaves as
 * before; dt_parallel_tp_module_on_dim names another; Replicate on every other mesh dim; each
 * rank keeping its shard) and adds
 * hooks (dt_module_add_hooks) that turn the module's input into a distributed tensor with the
 * input layout on that dim and its output into one with the output layout there. A
 * distributed input keeps its placements on the other dims (a batch sharded over "dp" stays
 * so); a local one is taken as Replicate on them. Unless keep_distributed_output, the output
 * is then made local (this rank's piece of the tp layout) when it is Replicate on every other
 * mesh dim: always on a 1-D mesh, and on an N-D mesh for a local (or dp-Replicate) input, so a
 * local tensor in gives a local tensor out as on one dim. Sharded or Partial on another dim
 * (a batch split over "dp") it stays distributed whatever the option: a local piece could not
 * say how it is split there, and the next module would take it as Replicate. For 2-D FSDP x
 * TP (TorchTitan) call this first, then dt_parallel_fsdp on the other dim; for DDP x TP,
 * dt_parallel_ddp. Every parameter of the tree (distributed or left local) is then a leaf that
 * requires grad, as after dt_parallel_fsdp and dt_parallel_ddp (nn.h, "requires_grad").
 * `options` may be NULL or hold plan->n entries. Collective over the mesh.
 * Errors: as dt_parallel_tp_transform (colwise/rowwise on a module other than Linear and Embedding
 * is DT_ERR_UNSUPPORTED, as PyTorch's NotImplementedError), plus DT_ERR_UNSUPPORTED for
 * SEQUENCE_PARALLEL on a module with parameters
 * other than a LayerNorm or RMSNorm (e.g. BatchNorm1d, Linear), naming the module and the style;
 * DT_ERR_INVALID for an input on a mesh with another number of dims, or a layout that shards
 * a dim the input does not have (at forward time). */
DT_API dt_status dt_parallel_tp_module(dt_module *model, dt_mesh *mesh, const dt_tp_plan *plan,
                                       const dt_tp_style_options *options);

/* dt_parallel_tp_module with tensor parallelism on mesh dim tp_dim (0 <= tp_dim < the mesh's
 * dims). Errors: dt_parallel_tp_module's, plus DT_ERR_INVALID for tp_dim outside the mesh. */
DT_API dt_status dt_parallel_tp_module_on_dim(dt_module *model, dt_mesh *mesh, int tp_dim,
                                              const dt_tp_plan *plan,
                                              const dt_tp_style_options *options);

/* ---- Expert parallelism ------------------------------------------------------------------- */

/* Splits the experts of every MoE (dt_nn_moe, transformer.h) in model over mesh dim ep_dim
 * (TorchTitan's ExpertParallel): rank r of that dim keeps experts [r c, (r + 1) c) with
 * c = ceil(n_experts / size) (torch.chunk: the counts need not divide; a rank may keep none),
 * under their global names, and destroys the others. In the forward each rank routes its own
 * tokens, every rank's per-expert counts are gathered, the tokens go to their experts' ranks
 * with an all_to_all of uneven counts, run there grouped by expert, and return with the
 * reverse all_to_all; both are recorded for autograd (the backward of one is the other with
 * the counts swapped, so every rank must run backward when any does). Outputs and gradients
 * equal those of one rank with every expert. The ranks of the ep dim must all run the forward
 * (collective); the input is this rank's tokens, a local tensor. The mesh must outlive the
 * model's forwards (the MoE keeps a reference). The router and every parameter outside the
 * experts stay local and get gradients from this rank's tokens only: reduce them over the same
 * dim (dt_parallel_ddp_reduce_gradients, or DDP/FSDP over it) before the optimizer step, as
 * TorchTitan's EP shares the dim with data parallelism. Errors: DT_ERR_INVALID (NULL, ep_dim
 * outside the mesh, a tree without a MoE, experts already split). */
DT_API dt_status dt_parallel_expert_parallel(dt_module *model, dt_mesh *mesh, int ep_dim);

/* ---- Fully sharded data parallel (PyTorch's fully_shard, FSDP2) ------------------------------ */

/* The most parameters one module (a unit) may hold directly. */
#define DT_FSDP_MAX_UNIT_PARAMS 16

/* Options of dt_parallel_fsdp. Zero-initialise; NULL means all defaults. */
typedef struct dt_fsdp_options {
  int mesh_dim; /* the data-parallel mesh dim (default 0) */
  /* PyTorch's reshard_after_forward=False: the unit keeps the gathered parameters until its
   * next forward, and backward does not gather them again. Between forwards the module holds
   * its sharded leaves in both modes (what state dicts save and load). */
  bool keep_unsharded_after_forward;
  /* A unit's pre-hook starts the next unit's all-gathers (async), and its pre-backward the
   * previous unit's re-gathers. */
  bool prefetch;
  /* Mixed precision (PyTorch's MixedPrecisionPolicy); zero (DT_F32) keeps float32. The
   * sharded parameters, their gradients and the optimizer state stay float32 (the master).
   * param_dtype: each shard is cast to it before the all-gather (DT_BF16 gathers half the
   * bytes), the module computes with the gathered copy, and a floating local or distributed
   * input is cast to it (cast_forward_inputs); the output comes out in it.
   * reduce_dtype: the gradient is cast to it before the reduce-scatter (or all-reduce) over
   * dp and cast back to float32 onto the shard. Floating dtypes only. */
  dt_dtype param_dtype;
  dt_dtype reduce_dtype;
} dt_fsdp_options;

/* Shards module for data parallelism over options->mesh_dim: every module of the tree with
 * parameters of its own becomes a unit whose parameters are replaced by Shard(0) distributed
 * tensors (Replicate on other mesh dims; uneven sizes follow torch.chunk), new leaves that
 * require grad: hand them (dt_module_visit_tensors after this call) to the optimizer.
 * Hooks installed on each unit: before its forward the parameters are all-gathered over
 * mesh_dim (recorded by autograd: the backward reduce-scatters the gradient) and set on the
 * module; after it the sharded ones are set back and the gathered buffers freed, even those
 * the autograd graph saved; the unit's output then carries a pre-backward node that gathers
 * them again before the unit's backward, and the gather's backward frees them once more, so
 * peak memory holds one unit's gathered parameters (PyTorch FSDP2). A forward that fails
 * inside the unit's hooks puts the shards back and frees the gathered buffers. A local input is
 * taken as this rank's rows of the batch (Shard(0) on the dim): the ranks' row counts are
 * gathered first (one all_gather_into_tensor of one int64 per forward), so an uneven split in
 * torch.chunk's sizes gets its true global batch and any other split is refused
 * (DT_ERR_INVALID naming the counts) instead of each rank seeing another global shape; a
 * distributed input skips the gather. The output is distributed: take the loss on it, so the loss
 * is the mean over the global batch and each parameter's gradient, Partial over the dim, is
 * reduce-scattered back to Shard(0) by the all-gather's backward (equal to PyTorch's
 * average of per-rank gradients). Collective over the mesh. Adds its hooks around any the
 * units have.
 * 2-D (TorchTitan's FSDP x TP): parameters already distributed by dt_parallel_tp_module on
 * another dim of the same mesh are sharded over mesh_dim on the first tensor dim no other
 * mesh dim shards (a colwise weight [.., Shard(0) on tp] gets Shard(1) on dp, a rowwise one
 * [Shard(1) on tp] Shard(0)); the gather and the reduce-scatter then run over dp only, on
 * the tp-local pieces. A parameter with no free dim (a colwise bias) stays Replicate on dp,
 * and its gradient is all-reduced over dp. Nested sharding of one tensor dim by two mesh
 * dims is not built. The FSDP hooks are added around the TP ones (dt_module_add_hooks).
 * Errors: DT_ERR_INVALID (NULL, a mesh_dim outside the mesh, no parameters, a scalar
 * parameter, a parameter distributed on another mesh, a non-floating param_dtype or
 * reduce_dtype), DT_ERR_UNSUPPORTED (a parameter already sharded over mesh_dim or Partial,
 * e.g. fully_shard applied twice; more than DT_FSDP_MAX_UNIT_PARAMS in one module), the
 * errors of dt_dist_distribute_tensor. On failure the units already made stay sharded. */
DT_API dt_status dt_parallel_fsdp(dt_module *module, dt_mesh *mesh, const dt_fsdp_options *options);

/* Gradient accumulation without a collective per microbatch (PyTorch FSDP2's
 * set_requires_gradient_sync, DDP's no_sync): with sync false, the backward of every unit of
 * module's tree (a tree dt_parallel_fsdp sharded; one call reaches all its units) leaves each
 * gradient unreduced, Partial over the data-parallel dim, accumulated locally on the sharded
 * leaf (the full local size: more memory). With sync true again (the default), the next
 * backward adds what was accumulated to its own gradient before its one reduce-scatter, so a
 * step of k microbatches reduces once, on the last. (Or leave sync false to the end: the
 * optimizer step reduces the Partial gradients.) Not collective; every rank must set the same.
 * Errors: DT_ERR_INVALID (NULL, a tree without dt_parallel_fsdp units). */
DT_API dt_status dt_parallel_fsdp_set_gradient_sync(dt_module *module, bool sync);

/* ---- Data parallel without sharding (PyTorch's DistributedDataParallel) --------------------- */

/* Options of dt_parallel_ddp and dt_parallel_ddp_reduce_gradients. Zero-initialise; NULL
 * means all defaults. */
typedef struct dt_ddp_options {
  int64_t bucket_bytes; /* gradients flattened into one all_reduce up to this size; 0: 25 MiB */
} dt_ddp_options;

/* Replicates module's parameters over mesh dim `dim`: each becomes a Replicate distributed
 * leaf that requires grad (hand them to the optimizer), and the root gets an input hook that
 * takes a local input as this rank's rows of the batch (Shard(0) on dim; the row counts are
 * gathered first as for dt_parallel_fsdp, so an uneven torch.chunk split gets its true global
 * batch and another split is refused; a distributed input is passed through). After backward each
 * gradient is a Partial sum over dim: call dt_parallel_ddp_reduce_gradients before the optimizer
 * step. Collective over the mesh. The input hook is added around any the root has
 * (dt_module_add_hooks, outermost). 2-D (DDP x TP): parameters already distributed by
 * dt_parallel_tp_module on another dim of the same mesh (Replicate on dim) are kept as they are,
 * made to require grad; their gradients come back Partial(sum) on dim with the tp placement, and
 * the reduce all-reduces the tp-local pieces over dim only. Every parameter is checked before any
 * is replaced. Errors: DT_ERR_INVALID (NULL, dim outside the mesh, a parameter distributed on
 * another mesh or not a leaf, the root already has DT_MODULE_MAX_HOOKS hook pairs; nothing
 * changed), DT_ERR_UNSUPPORTED (a parameter distributed with a non-Replicate placement on dim, e.g.
 * after dt_parallel_fsdp), dt_dist_distribute_tensor's. */
DT_API dt_status dt_parallel_ddp(dt_module *module, dt_mesh *mesh, int dim,
                                 const dt_ddp_options *options);

/* All-reduces the gradients of params that are Partial on mesh dim `dim`, in buckets of at
 * most options->bucket_bytes (consecutive parameters in reverse order with the same dtype and
 * reduce op; one larger gradient is a bucket alone), and sets each parameter's gradient to the
 * reduced one with Replicate on dim. Gradients that are absent or not Partial on dim are left
 * alone. *buckets (may be NULL) receives the number of all_reduce calls. Collective over the
 * dim's group. Errors: DT_ERR_INVALID (n < 0, NULL params, a NULL or local parameter, params
 * on different meshes, dim outside the mesh; all checked before any communication), the
 * collective errors. */
DT_API dt_status dt_parallel_ddp_reduce_gradients(int n, dt_tensor *const *params, int dim,
                                                  const dt_ddp_options *options, int *buckets);

/* ---- Context parallelism (PyTorch's experimental context_parallel) ------------------------ */

/* How a sequence of T positions lies over the n ranks of the cp mesh dim. Chunks follow
 * torch.chunk (ceil(T / chunks) positions each, the trailing ones fewer or none), so T need not
 * divide.
 *   HEAD_TAIL   2n chunks; rank i holds chunks i and 2n-1-i, in that order (the load-balanced
 *               layout for causal attention: every rank gets the same share of the triangle).
 *   CONTIGUOUS  n chunks; rank i holds chunk i. */
typedef enum dt_cp_layout {
  DT_CP_LAYOUT_HEAD_TAIL = 0,
  DT_CP_LAYOUT_CONTIGUOUS = 1,
} dt_cp_layout;

/* The global positions rank cp_rank of cp_size holds under layout, for a sequence of seq_len
 * positions: *n_segments (1 or 2; a segment may be empty) runs of lengths[i] positions starting
 * at starts[i], in the order the rank's local sequence holds them. What position ids, rotary
 * tables and labels are built from (or shard them with dt_parallel_cp_shard_sequence). Pure.
 * Errors: DT_ERR_INVALID (NULL output, seq_len < 0, cp_size < 1, cp_rank outside it, an
 * unknown layout). */
DT_API dt_status dt_parallel_cp_segments(int64_t seq_len, int cp_size, int cp_rank,
                                         dt_cp_layout layout, int64_t starts[2], int64_t lengths[2],
                                         int *n_segments);

/* This rank's part of full, a local tensor holding the whole sequence on dim seq_dim (negative
 * counts from the end; every rank passes the same values): the positions
 * dt_parallel_cp_segments gives this rank's coordinate on mesh dim cp_dim, concatenated in that
 * order, in a new tensor (*out: a new reference, contiguous). Recorded by autograd (narrow and
 * cat): the gradient it passes back to full holds this rank's positions only (zeros at the
 * other ranks' positions), so full's gradient over the whole sequence is the sum over the cp
 * ranks. Not collective. Errors: DT_ERR_INVALID (NULL, cp_dim outside the mesh, an unknown
 * layout), DT_ERR_INDEX (seq_dim outside full's dims), DT_ERR_UNSUPPORTED (a distributed full). */
DT_API dt_status dt_parallel_cp_shard_sequence(dt_mesh *mesh, int cp_dim, dt_tensor *full,
                                               int64_t seq_dim, dt_cp_layout layout,
                                               dt_tensor **out);

/* The inverse: gathers every cp rank's local part (dim seq_dim, sizes as the layout gives them;
 * the lengths are all_gathered first, so the total is found and a wrong split is refused) and
 * returns the whole sequence in global order, the same on every cp rank (*out: a new
 * reference). Differentiable: the gradient of the whole tensor comes back as this rank's part
 * of it (the backward does not communicate: every rank holds the same whole gradient, as when
 * a loss is computed on the unsharded output everywhere). Collective over the cp dim's group.
 * Errors: DT_ERR_INVALID (NULL, cp_dim outside the mesh, an unknown layout), DT_ERR_INDEX
 * (seq_dim), DT_ERR_UNSUPPORTED (a distributed local), DT_ERR_SHAPE (a rank's length, or its other
 * dims, not what the layout gives it; reported on every rank), the collective errors. */
DT_API dt_status dt_parallel_cp_unshard_sequence(dt_mesh *mesh, int cp_dim, dt_tensor *local,
                                                 int64_t seq_dim, dt_cp_layout layout,
                                                 dt_tensor **out);

/* What this rank's forward of one dt_parallel_cp_attention call did (the backward is not
 * counted): how the causal mask cut the work, and how much of the ring's transfer time the
 * compute hid (the wait is what it did not). */
typedef struct dt_cp_attention_stats {
  int pairs_attended; /* (query chunk, key chunk) pairs attended */
  int pairs_skipped;  /* pairs wholly in the future under a causal mask, or empty */
  int64_t bytes_sent; /* key and value bytes this rank sent to the next */
  double compute_us;  /* wall time attending blocks and merging them */
  double wait_us;     /* wall time blocked on the transfers once a block's compute was done */
} dt_cp_attention_stats;

/* Options of dt_parallel_cp_attention. Zero-initialise; NULL means all defaults. */
typedef struct dt_cp_attention_options {
  bool is_causal;      /* global query i keeps global keys j <= i (top-left, as SDPA's) */
  double scale;        /* > 0; 0: 1/sqrt(E) */
  dt_cp_layout layout; /* how q, k, v and the outputs lie on the cp dim (default HEAD_TAIL) */
  dt_cp_attention_stats *stats; /* NULL, or overwritten by the call (this rank's forward) */
} dt_cp_attention_options;

/* Ring attention (context parallelism): dt_scaled_dot_product_attention of the whole sequence,
 * computed from each rank's part of it. q [B, H, Tl, E], k [B, Hk, Sl, E], v [B, Hk, Sl, Ev] are
 * local tensors holding this rank's positions of the sequence dim (2) as options->layout lays a
 * T-position (S for keys) sequence over the n ranks of mesh dim cp_dim (the other dims are
 * equal on every cp rank; on a 2-D mesh the other dims may shard the batch or the heads
 * independently). Each rank attends its queries to its own key/value block, then to the
 * others' as the blocks rotate around the ring (send/recv to the next rank, the next block's
 * transfer posted before the current block's compute); the partial outputs are merged through
 * their log-sum-exps. Causal: a block pair is attended in full, with the causal mask (the
 * diagonal chunk) or not at all (a block entirely in the future), by global position; causal
 * needs S == T. mask (NULL, bool or q's dtype) is a local tensor of the whole problem,
 * broadcasting to [B, H, T, S] and equal on every rank; each block reads its rows and columns.
 * *out [B, H, Tl, Ev] (q's dtype) and *lse [B, H, Tl] (may be NULL; float32, float64 for
 * float64) are this rank's rows of SDPA's outputs, in the same layout; the merge runs in
 * double. Differentiable in q, k and v: the backward computes dq locally and sends dk and dv
 * around the ring with their blocks back to their owners, so gradients equal the unsharded
 * attention's. Collective over the cp dim's group, in the forward and in the backward (every
 * cp rank must run both; the mesh is retained until the backward's node dies). The arguments are
 * checked on every rank, then a small descriptor is all_gathered, so every rank returns the
 * same verdict. Errors: DT_ERR_INVALID (NULL mesh, q, k, v or out, cp_dim outside the mesh, a
 * scale not finite or < 0, an unknown layout, another cp rank refused
 * its arguments), DT_ERR_DTYPE (not floating, dtypes differ, a mask neither bool nor q's dtype),
 * DT_ERR_SHAPE (not 4-D, sizes that disagree within a rank or across ranks, a rank's length
 * that is not the layout's share (shard with dt_parallel_cp_shard_sequence), causal with S != T,
 * a mask that does not broadcast), DT_ERR_UNSUPPORTED (a distributed argument: pass the local
 * parts; tensors off the CPU), the collective errors. */
DT_API dt_status dt_parallel_cp_attention(dt_mesh *mesh, int cp_dim, dt_tensor *q, dt_tensor *k,
                                          dt_tensor *v, dt_tensor *mask,
                                          const dt_cp_attention_options *options, dt_tensor **out,
                                          dt_tensor **lse);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_PARALLEL_H */
