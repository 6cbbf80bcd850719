/*
 * Private state of autograd: the per-tensor meta, the recorded node, and helpers shared by
 * the backward formulas (src/autograd/backward_*.c).
 *
 * Ownership (no cycles): a tensor's meta retains its grad_fn node; a node retains the
 * nodes its inputs came from, the input tensors it saved, and detached aliases of its
 * outputs (handles without meta), never the output handles themselves. An in-place op that
 * rebases a tensor onto a new node swaps the tensor's handle, where an older node reachable
 * from the new one saved it, for a detached alias (record.c, unsave_self). An in-place op on a
 * view adds two nodes (inplace_view.c): the base's copy-slices node owns the op's node (no
 * edges of its own) and the view chain; the view's view-of-base node retains the base, whose
 * history (the copy-slices node) never leads back to the view once unsave_self has run for
 * both the base and the view.
 */
#ifndef DT_AUTOGRAD_IMPL_H
#define DT_AUTOGRAD_IMPL_H

#include <stdatomic.h>
#include <string.h>

#include "autograd/grad_mode.h"
#include "dtensor/autograd.h"
#include "ops/op_impl.h"

typedef struct dt_autograd_node dt_autograd_node;

/* dt_autograd_function, what the distributed layer's conversions record, is in core/core_impl.h
 * (the distributed layer, below autograd, names it in dt__upcall). */

/* A tensor's autograd state; allocated only for tensors autograd touches. */
typedef struct dt_autograd_meta {
  dt_tensor_ext ext; /* first: the tensor layer frees the meta through ext.destroy */
  bool requires_grad;
  bool retains_grad;         /* a non-leaf whose gradient dt_backward keeps */
  dt_tensor *grad;           /* owned; NULL until a backward reaches the tensor */
  dt_autograd_node *grad_fn; /* owned reference; NULL for a leaf */
  int output_nr;             /* which output of grad_fn this tensor is */
  /* The meta lives in its grad_fn's block (node->metas[output_nr]) rather than its own
   * allocation: the output of a recorded op. Its reference on grad_fn keeps the block alive;
   * an in-place op that rebases the tensor moves the meta into the new node first. */
  bool in_node;
} dt_autograd_meta;

/* Where the gradient of one input slot goes: the node that produced the input, or the leaf
 * itself (the saved input), or nowhere. */
typedef struct dt_autograd_edge {
  dt_autograd_node *node; /* owned reference, or NULL */
  int output_nr;
  bool to_leaf; /* accumulate into the leaf's .grad */
  /* The leaf itself (owned) when the node saved another tensor for this slot (the argument as
   * the distributed dispatch redistributed it); NULL: the leaf is saved[slot]. */
  dt_tensor *leaf;
} dt_autograd_edge;

struct dt_autograd_node {
  atomic_int refcount;
  uint64_t sequence; /* recording order: later nodes run first */
  dt_op_call call;   /* inputs/input_list/outputs point at the saved tensors below */
  int n_slots;       /* n_inputs + n_input_list: the tensor arguments in order */
  /* [n_slots] saved inputs (retained), NULL where absent: the argument itself, or for an
   * argument the distributed dispatch redistributed, the redistributed tensor the local
   * kernel consumed (dt_op_call.consumed). */
  dt_tensor **saved;
  uint32_t *saved_versions;
  dt_tensor_meta *input_metas; /* [n_slots] global shape and dtype */
  bool *needs_grad;            /* [n_slots] */
  dt_autograd_edge *edges;     /* [n_slots] */
  int64_t *int_list;           /* copy of call.int_list (in the node's block) */
  /* The per-output arrays are [n_outputs], in the node's block (node_alloc sizes it by the
   * op's outputs, so that a one-output node stays small enough for malloc's fast path). */
  int n_outputs;
  dt_tensor **outputs; /* detached aliases (no meta), retained */
  uint32_t *output_versions;
  dt_tensor_meta *output_metas;
  dt_autograd_meta **retain_meta; /* weak: metas asking for retain_grad */
  dt_autograd_meta *metas;        /* room for the outputs' metas (dt__autograd_meta_in_node) */
  bool freed;                     /* saved tensors released by a backward without retain_graph */
  const dt_autograd_function *function; /* NULL: call.op names the op and its formula */
  void *function_state;                 /* owned: released with function->release */
  dt_autograd_node *release_next;       /* the thread's list of nodes waiting to be freed */
  /* Engine scratch, valid during one backward. */
  uint64_t visited_by; /* the id of the last backward that collected the node */
  int dependencies;
  dt_tensor **grads; /* [n_outputs] */
};

/* dt__dispatch's path while any meta is alive (dt__autograd_live, ops/op_impl.h): runs the
 * op through the modes or the distributed/local path, then records it. */
dt_status dt__autograd_dispatch(dt_op_call *call);

/* Records fn as the node that made output from input (both already made; output is a fresh
 * handle without autograd state): output then requires grad and points at the node. The node
 * takes state (released with fn->release, also on failure). Keeps input only when it is a
 * leaf (its `.grad` is the gradient's destination). Errors: DT_ERR_NOMEM. */
dt_status dt__autograd_record_function(const dt_autograd_function *fn, void *state,
                                       dt_tensor *input, dt_tensor *output);

/* dt__autograd_record_function for a function of n_in inputs and n_out outputs (fresh handles
 * without autograd state, floating point, which then require grad): the node's input i is
 * inputs[i] (its gradient routed when it requires grad; kept only when it is such a leaf).
 * fn->backward_n computes the gradients. Errors: DT_ERR_NOMEM (state released). */
dt_status dt__autograd_record_function_n(const dt_autograd_function *fn, void *state, int n_in,
                                         dt_tensor *const *inputs, int n_out,
                                         dt_tensor *const *outputs);

/* Whether n's saved tensors are still there and at the versions they were saved at (the
 * engine's check before a node's formula runs). Errors: DT_ERR_INVALID. */
dt_status dt__autograd_check_saved(const dt_autograd_node *n);

/* ---- In-place ops on views (inplace_view.c) --------------------------------------------------
 * The view ops from a base to a view that shares its storage, to be replayed on a gradient of
 * the base's shape: the gradient's region the view covers. */
typedef struct dt_view_chain dt_view_chain;

/* A new chain of no step from base (its shape, and a distributed base's layout), or a copy of
 * chain (NULL with DT_ERR_NOMEM set). */
dt_view_chain *dt__view_chain_new(const dt_tensor *base);
dt_view_chain *dt__view_chain_copy(const dt_view_chain *chain);
/* Appends the view op that node records (its output output_nr), or chain's steps (from
 * chain's base on). Errors: DT_ERR_NOMEM (chain unchanged). */
dt_status dt__view_chain_push(dt_view_chain *chain, const dt_autograd_node *node, int output_nr);
dt_status dt__view_chain_append(dt_view_chain *chain, const dt_view_chain *steps);
void dt__view_chain_free(dt_view_chain *chain);

/* The functions of the two nodes an in-place op on a view records: the base's new history
 * (state: dt__copy_slices_state, the chain and the in-place op's node) and the view's
 * (state: the chain; saved[0] keeps the base, to find it again). */
extern const dt_autograd_function dt__copy_slices_function;
extern const dt_autograd_function dt__view_of_base_function;
typedef struct dt__copy_slices_state {
  dt_view_chain *chain;    /* owned */
  dt_autograd_node *inner; /* owned reference: the op's node on the view, without edges */
} dt__copy_slices_state;
/* The copy-slices node's backward (the engine calls it for dt__copy_slices_function, whose
 * node has several slots): the gradients of all of node's slots from node->grads, with
 * recording off; grad_inputs[n_slots] come in NULL. */
dt_status dt__copy_slices_backward(dt_autograd_node *node, bool retain_graph,
                                   dt_tensor **grad_inputs);

/* When t is a view whose storage was modified in place since its history was recorded (the
 * version its view node saw moved), t's history becomes the region of its base's current
 * history (a view-of-base node), as PyTorch regenerates a view's grad_fn; the recorder runs it
 * on every argument, dt_backward on the loss. A view whose base cannot be found (a leaf, a
 * Partial distributed tensor, a graph already freed) keeps its history, and so does a tensor whose
 * history is not a view. Errors: DT_ERR_NOMEM. */
dt_status dt__autograd_refresh_view(dt_tensor *t);

/* The name of a node's op or function, for messages. */
const char *dt__autograd_node_name(const dt_autograd_node *node);

/* True when an op or conversion taking `input` must be recorded now: grad mode on and input
 * requires grad. One load of a counter while autograd is unused. */
static inline bool dt__autograd_should_record(const dt_tensor *input) {
  if (atomic_load_explicit(&dt__autograd_live, memory_order_relaxed) == 0) return false;
  const dt_autograd_meta *meta = (const dt_autograd_meta *)input->autograd;
  return !dt__grad_disabled && meta && meta->requires_grad;
}

/* The meta of t, created if missing. NULL with DT_ERR_NOMEM set on failure. */
dt_autograd_meta *dt__autograd_meta_get(dt_tensor *t);

/* Gives a fresh output (no autograd state yet) its meta inside node's block, as output k:
 * one allocation fewer per recorded op. A tensor that already has a meta keeps it. */
dt_autograd_meta *dt__autograd_meta_in_node(dt_tensor *t, dt_autograd_node *node, int k);

/* Counts a new node alive and returns its sequence number (recording order). */
uint64_t dt__autograd_node_born(void);

/* ---- Building a node (record_node.c) ------------------------------------------------------ */
/* A handle on t's storage without autograd meta, so that a node keeps its output without the
 * output's meta pointing back at the node (a reference cycle). Grad mode must be off. */
dt_status dt__autograd_detached_alias(dt_tensor *t, dt_tensor **out);
/* A node with n_slots saved slots, n_out outputs and room for n_ints attributes, in one
 * allocation; NULL when out of memory. */
dt_autograd_node *dt__autograd_node_alloc(int n_slots, int n_out, size_t n_ints);
/* Points output (a tensor with a meta) at node as output output_nr; node gains a reference. */
void dt__autograd_attach_output(dt_autograd_node *node, dt_tensor *output, int output_nr);
/* Slot i's edge: to the node that made t, or into leaf's .grad (retained) when t is a leaf;
 * nothing when t does not require grad. */
void dt__autograd_set_edge(dt_autograd_node *node, int i, dt_tensor *t, dt_tensor *leaf);
/* dt__autograd_set_edge for a tensor of meta meta, whether or not it requires grad. */
void dt__autograd_set_edge_meta(dt_autograd_node *node, int i, dt_autograd_meta *meta,
                                dt_tensor *leaf);
void dt__autograd_node_retain(dt_autograd_node *node);
void dt__autograd_node_release(dt_autograd_node *node);
/* Releases a node's saved tensors (after a backward without retain_graph). */
void dt__autograd_node_free_saved(dt_autograd_node *node);

/* The global (for distributed tensors) shape and dtype of t: dt__autograd_meta_of, inline in
 * autograd/meta_of.h for the files that record and run nodes (a distributed tensor's goes
 * through dt__autograd_dist_meta_of, state.c). */
void dt__autograd_dist_meta_of(const dt_tensor *t, dt_tensor_meta *meta);
/* Whether t's global shape is meta's (the dtype is not compared). */
bool dt__autograd_has_shape(const dt_tensor *t, const dt_tensor_meta *meta);

/* ---- Helpers for backward formulas ------------------------------------------------------- */

/* Sums grad down to the shape of meta (undoes broadcasting): leading extra dims and dims
 * where meta has size 1 are summed, then the result is viewed as meta's shape. A grad that
 * already has the shape is returned retained. */
dt_status dt__grad_sum_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out);

/* Casts grad to meta's dtype when they differ (retained otherwise). */
dt_status dt__grad_cast_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out);

/* The backward formula of layer_norm and rms_norm (rms): their fused backward ops
 * (backward_nn.c). */
dt_status dt__backward_norm(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                            dt_tensor **grad_inputs, bool rms);

/* Sum-to then cast: the gradient of a broadcasting, promoting pointwise input. */
dt_status dt__grad_reduce_to(dt_tensor *grad, const dt_tensor_meta *meta, dt_tensor **out);

/* grad_inputs[slot] = dt__grad_reduce_to(t) to input slot's shape and dtype, consuming t; st is
 * a failure while t was made (then returned as it is, t released). */
dt_status dt__grad_give(const dt_backward_ctx *ctx, int slot, dt_tensor *t, dt_status st,
                        dt_tensor **grad_inputs);

/* The core of a formula whose one gradient goes to input slot 0: from the output's gradient g
 * (not NULL) and the recorded call, slot 0's gradient before dt__grad_reduce_to, in *out (a new
 * reference; left NULL on failure). */
typedef dt_status (*dt_grad_input0_fn)(const dt_backward_ctx *ctx, dt_tensor *g, dt_tensor **out);

/* The formula of an op whose gradient goes to input slot 0 alone (its other inputs are not
 * differentiable): nothing when output 0 received no gradient or slot 0 wants none, else
 * grad_inputs[0] = dt__grad_reduce_to(grad(ctx, g)). */
dt_status dt__backward_input0(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                              dt_tensor **grad_inputs, dt_grad_input0_fn grad);

/* The core of a formula whose inputs each get their own gradient: input slot's gradient
 * before dt__grad_reduce_to, from the output's gradient g (not NULL) and the recorded call, in
 * *out (a new reference; left NULL on failure). */
typedef dt_status (*dt_grad_slot_fn)(const dt_backward_ctx *ctx, dt_tensor *g, int slot,
                                     dt_tensor **out);

/* The formula of an op whose tensor arguments (inputs, then the tensor list) each get a
 * gradient of their own from output 0's: nothing when output 0 received none, else
 * grad_inputs[slot] = dt__grad_reduce_to(grad(ctx, g, slot)) for each slot that wants one, in
 * slot order. On failure every grad_inputs entry is released and left NULL. */
dt_status dt__backward_slots(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                             dt_tensor **grad_inputs, dt_grad_slot_fn grad);

/* Releases n tensors (NULL entries are skipped). */
void dt__grad_release(dt_tensor *const *tensors, size_t n);

/* Releases a formula's temporaries in one line: DT_RELEASE_ALL(a, b, c). */
#define DT_RELEASE_ALL(...)                                                                        \
  dt__grad_release((dt_tensor *[]){__VA_ARGS__},                                                   \
                   sizeof((dt_tensor *[]){__VA_ARGS__}) / sizeof(dt_tensor *))

/* Copies src's values into dst in place, under no_grad: for a distributed dst, src is read in
 * the same placements and only this rank's block is copied (loading a state dict into a
 * parameter or an optimizer slot, which are leaves and no part of any graph). (autograd.c) */
dt_status dt__copy_values_no_grad(dt_tensor *dst, dt_tensor *src);

#endif /* DT_AUTOGRAD_IMPL_H */
