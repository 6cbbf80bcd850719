/*
 * Private interface of compile: symbolic size expressions (src/compile/symbolic.c), the
 * symbolic shape rules of the ops (src/compile/shape_rules.c), and what the three parts of
 * dt_compile share: the handle and its variants (src/compile/compile.c: the cache and the
 * guard check), tracing (src/compile/trace.c) and running a variant (src/compile/execute.c).
 */
#ifndef DT_COMPILE_IMPL_H
#define DT_COMPILE_IMPL_H

#include "dtensor/compile.h"
#include "graph/graph_impl.h"

/* ---- Symbolic sizes --------------------------------------------------------------------- */

/* An expression is an index into a pool of nodes; operands precede the nodes that use them,
 * so one pass over the pool evaluates every expression (what a guard check does). Nodes are
 * hash-consed and simplified as they are made (constants folded, constants on the right of
 * sums and products, x + 0, x * 1, (x * k) // c with c dividing k, ...), so equal expressions
 * built the same way get the same index and a size that does not depend on a symbol is a
 * constant node. */
typedef enum dt_sx_kind {
  DT_SX_CONST = 0,
  DT_SX_SYM,
  DT_SX_ADD,
  DT_SX_MUL,
  DT_SX_FLOORDIV,
  DT_SX_CEILDIV,
  DT_SX_MIN,
  DT_SX_MAX,
} dt_sx_kind;

typedef struct dt_sx_node {
  dt_sx_kind kind;
  int a, b;  /* operands */
  int64_t v; /* CONST: the value; SYM: the symbol */
} dt_sx_node;

typedef struct dt_sx_pool {
  dt_sx_node *nodes;
  int n, cap;
  bool oom; /* an allocation failed: the pool's expressions are not to be trusted */
} dt_sx_pool;

void dt__sx_pool_free(dt_sx_pool *p);
int dt__sx_const(dt_sx_pool *p, int64_t v);
int dt__sx_sym(dt_sx_pool *p, int symbol);
int dt__sx_add(dt_sx_pool *p, int a, int b);
int dt__sx_mul(dt_sx_pool *p, int a, int b);
int dt__sx_floordiv(dt_sx_pool *p, int a, int b);
int dt__sx_ceildiv(dt_sx_pool *p, int a, int b);
int dt__sx_min(dt_sx_pool *p, int a, int b);
int dt__sx_max(dt_sx_pool *p, int a, int b);
/* a - b, as a + (-1) * b. */
int dt__sx_sub(dt_sx_pool *p, int a, int b);
/* True when expression e is a constant (its value in *v). */
bool dt__sx_is_const(const dt_sx_pool *p, int e, int64_t *v);
/* Evaluates every node of the pool with symbols[s] as the symbols' values into vals
 * (capacity p->n). */
void dt__sx_eval_all(const dt_sx_pool *p, const int64_t *symbols, int64_t *vals);
/* Evaluates one expression (walks its operands; for compile time, not the call path). */
int64_t dt__sx_eval(const dt_sx_pool *p, int e, const int64_t *symbols);
/* Writes e as text ("s0*256", "ceil(s1/4)", ...) into buf. */
char *dt__sx_format(const dt_sx_pool *p, int e, char *buf, size_t size);

/* ---- Guards ------------------------------------------------------------------------------ */

typedef enum dt_guard_kind {
  DT_GUARD_EQ = 0,    /* a == b */
  DT_GUARD_DIVISIBLE, /* a % c == 0 */
  DT_GUARD_GE,        /* a >= c */
} dt_guard_kind;

typedef struct dt_guard {
  dt_guard_kind kind;
  int a, b;
  int64_t c;
  char why[96]; /* what needed it: "mul: broadcast of dim 0" */
} dt_guard;

/* ---- Symbolic shape inference ------------------------------------------------------------ */

/* What a shape rule sees and where it writes: the symbolic dims of each tensor argument
 * (inputs then list entries, as in dt_op_call), the call as recorded (attributes as the caller
 * gave them) and as infer normalized it, the traced output metas, and room for guards. */
typedef struct dt_shape_ctx {
  dt_sx_pool *pool;
  const int64_t *symbols;  /* the symbols' traced values */
  const dt_op_call *given; /* attributes before infer normalized them */
  const dt_op_call *done;  /* after: normalized dims */
  /* The shape attribute (given->ints) as expressions where a size note said which sizes its
   * entries are (-1: the entry is the number given); NULL when every entry is a number. */
  const int *size_exprs;
  int n_args;
  int arg_ndim[DT_OP_MAX_INPUTS + 32];
  const int *arg_dims[DT_OP_MAX_INPUTS + 32]; /* NULL for an absent optional input */
  int n_out;
  const dt_tensor_meta *metas;
  int out_dims[DT_OP_MAX_META][DT_MAX_DIMS];
  /* Guards the rule needs; the caller appends them. */
  int n_guards;
  dt_guard guards[DT_MAX_DIMS * 4 + 8];
} dt_shape_ctx;

/* Fills ctx->out_dims by the op's symbolic rule. Returns false when the op has none (or the
 * call is a form it does not cover): the caller then specializes. */
bool dt__shape_rule(dt_shape_ctx *ctx);

/* The shape-inference cache of a trace (src/compile/shape_cache.c): the outcome of inferring
 * one call's symbolic dims, found again for a call equal in everything the rule reads. */
typedef struct dt_shape_outcome {
  bool ok; /* the rule applied and agreed with the traced sizes (else: specialized) */
  int out_dims[DT_OP_MAX_META][DT_MAX_DIMS];
  int n_guards;
  const dt_guard *guards; /* the rule's guards (ok only) */
} dt_shape_outcome;

typedef struct dt_shape_cache dt_shape_cache;

dt_shape_cache *dt__shape_cache_create(void); /* NULL when out of memory (then: no cache) */
void dt__shape_cache_destroy(dt_shape_cache *c);
/* True and *out (borrowed from the cache) when an equal call was inferred before. */
bool dt__shape_cache_find(dt_shape_cache *c, const dt_shape_ctx *ctx, dt_shape_outcome *out);
/* Keeps a copy of outcome for ctx's call (nothing when memory runs out: only slower). */
void dt__shape_cache_add(dt_shape_cache *c, const dt_shape_ctx *ctx,
                         const dt_shape_outcome *outcome);

/* ---- Sharding decided at compile time (src/compile/dist_plan.c) --------------------------- */

/* True when the distributed call (as the caller gave it) takes its arguments as they are
 * placed, with nothing rewritten for the shard: it can run on the shards directly. out gets
 * the output's placements (one per mesh dim). */
bool dt__compile_dist_plain(const dt_op_call *call, dt_placement *out);

/* For a call that redistributes, as the caller gave it (its arguments before dispatch moved
 * them), and the same call reading the redistributed values (given): true when the traced
 * choice (pinned by dt__compile_guard_choice's guards) takes given's arguments as they are
 * placed and rewrites nothing for the shard (no row window, no shape attribute, no tuple), so
 * that after its redistribute nodes the op runs on the shards directly. out gets the output's
 * placements. Tensor-list ops qualify: the range guards make the choice size-independent. */
bool dt__compile_dist_pinned(const dt_op_call *caller, const dt_op_call *given, dt_placement *out);

/* For a call that redistributes (arguments as the caller gave them; nodes[i] is argument i's
 * node in v, the inputs then the tensor list): the range [lo[s], hi[s]] of each symbol s (the
 * others at their traced values, sizes the guards so far exclude skipped) over which the propagator
 * makes the traced choice (targets and output placements), found by doubling and bisection: the
 * choice weighs bytes, so it can flip with sizes (a matmul gathering one side or the other). lo 0
 * and hi INT64_MAX mean no bound found (up to 2^40). False when the choice cannot be made here. */
struct dt_compile_variant;
bool dt__compile_dist_range(const struct dt_compile_variant *v, const dt_op_call *call,
                            const int *nodes, int64_t *lo, int64_t *hi);

/* ---- Redistribute nodes (src/compile/redist_node.c) ------------------------------------ */

struct dt_compile_variant;

/* Appends a redistribute node of value src (the tensor from, as traced) into to's placements
 * (the tensor dispatch made for the call), with the plan computed now; *node gets its index.
 * The caller sets the node's value (type, dims, placements). */
dt_status dt__compile_add_redistribute(struct dt_compile_variant *v, int src, const dt_tensor *from,
                                       const dt_tensor *to, int *node);
/* Runs redistribute node i: its source's value redistributed by the traced plan into a new
 * owned value. */
dt_status dt__compile_run_redistribute(struct dt_compile_variant *v, int i);
/* The planned steps of redistribute node i as text ("all_gather(mesh dim 0: S(0) -> R)"). */
/* Guards (through add) each symbol of v to the range where the sharding choice of call (which
 * redistributes; nodes[i]: argument i's node, the inputs then the tensor list) stays the traced one
 * (dt__compile_dist_range); *unplanned when the choice cannot be made at trace time (the caller
 * specializes). */
dt_status dt__compile_guard_choice(struct dt_compile_variant *v, const dt_op_call *call,
                                   const int *nodes,
                                   dt_status (*add)(struct dt_compile_variant *, const dt_guard *),
                                   bool *unplanned);
char *dt__compile_format_redistribute(const struct dt_compile_variant *v, int i, char *buf,
                                      size_t size);

/* ---- Compiled functions and their variants ---------------------------------------------- */

/* Inputs and outputs a compiled function may take. */
#define DT_COMPILE_MAX_ARGS 64

/* What a variant requires of input i beyond the symbolic guards. */
typedef struct dt_compile_input {
  dt_dtype dtype;
  int ndim;
  bool dist;
  uint64_t mesh_id;
  int mesh_ndim;
  dt_placement placements[DT_MESH_MAX_DIMS];
  int64_t shape[DT_MAX_DIMS]; /* traced sizes (the required ones for static dims) */
  int sym[DT_MAX_DIMS];       /* the dim's symbol, or -1 when static */
  bool requires_grad;         /* checked for joint variants only */
} dt_compile_input;

/* A direct node's precomputed work: its call (attributes as infer left them; inputs filled
 * on each call), output handle, kernel, symbolic dims and buffer slot, together in one place
 * so that a call touches one cache line or two per node. */
typedef struct dt_compile_step {
  dt_op_call call;
  dt_tensor *handle;
  dt_op_kernel_fn kernel;
  int ndim, slot, n_inputs;
  int scalar_expr; /* -1, or the expression scalars[0] takes on each call */
  size_t elem_size;
  int dims[DT_MAX_DIMS];
  int inputs[DT_OP_MAX_INPUTS];
} dt_compile_step;

/* A rewrite of one node (compile/fuse.c). */
typedef struct dt_compile_fused {
  bool folded;  /* not run: the node reading it computes it, or the outputs skip it */
  int n_inputs; /* > 0: the step reads these nodes instead of its graph inputs */
  int inputs[DT_OP_MAX_INPUTS];
  dt_op_kernel_fn kernel; /* NULL: the op's own */
  double scalar;          /* the kernel's scalars[0] */
  int same_as;            /* > 0: folded as equal to node same_as - 1 (compile/cse.c) */
  bool identity;          /* same_as is the input of this reshape to its own dims */
} dt_compile_fused;

typedef struct dt_compile_variant {
  dt_graph *g;
  dt_compile_input *inputs;
  int n_symbols;
  int64_t *hints; /* the symbols' traced values */
  dt_sx_pool pool;
  int **dims;                /* per node: n_out * DT_MAX_DIMS expressions of its global dims */
  dt_placement **placements; /* per node: its traced placements, NULL when local */
  int **local_dims;          /* per node: this rank's shard dims as expressions, NULL when local */
  /* Per node: a distributed call whose sharding was decided at trace time (see dist_plan.c),
   * its mesh and the spec its last output had (retained, reused while the global shape
   * stays). */
  bool *dist_plain;
  dt_mesh **dist_mesh;
  dt_dist_spec **dist_spec;
  int *mesh_ndim;
  /* Per node (redist_cap of them): a redistribute node's plan, made at trace time. */
  struct dt_redistribute_plan **redist;
  int redist_cap;
  int n_guards, cap_guards;
  dt_guard *guards;
  dt_tensor **constants; /* per node: the constant a buffer node holds (retained) */
  bool *const_grad;      /* per node: the constant required grad when traced (joint only) */
  /* Per node: sizes a backward formula told the tracer about (autograd/size_note.h), -1 when
   * none: scalars[0] is the value of expression scalar_expr[i]; entry k of the shape attribute
   * the value of shape_expr[i][k]. Set on each call from the symbols. */
  int *scalar_expr;
  int **shape_expr; /* per node: NULL, or per entry of ints an expression (-1: as traced) */
  /* The joint forward+backward graph (compile/joint.c): the output node lists the n_out
   * outputs, then n_grads gradients; gradient k goes to input grad_input[k], or, when that is
   * -1, to the constant of node grad_const[k]. */
  bool joint;
  int n_grads;
  int *grad_input, *grad_const;
  int *last_use;
  int *tuple_base; /* per node: its first slot in tuple_vals, or -1 */
  /* The direct path (see plan_buffers in compile/execute.c): per node the call as infer left it,
   * whether the node runs its kernel directly into a planned buffer, its buffer slot and output
   * handle. */
  dt_op_call *templates;
  bool *direct;
  bool *view_direct; /* per node: a view run_view makes in handles[i] (no dispatch) */
  int *slot_of;
  dt_tensor **handles;
  int n_slots;
  dt_tensor **slot_buf; /* per slot: a byte tensor whose storage the handles point into */
  size_t *slot_bytes;
  struct dt_compile_step *steps; /* per node; filled for direct nodes */
  /* Per node: the owned values whose last use it is (release_list[release_at[i] ..
   * release_at[i + 1])), so that a call does not scan every input of every node. */
  int *release_at, *release_list;
  dt_compile_fused *fused; /* per node (compile/fuse.c) */
  /* Call-time scratch, allocated once: one thread calls a dt_compiled at a time. */
  dt_tensor **values;
  dt_tensor **tuple_vals;
  bool *owned;
  int64_t *symvals, *exprvals;
} dt_compile_variant;

struct dt_compiled {
  dt_compile_fn fn;
  void *user;
  int n_in, n_out;
  bool all_dynamic;
  bool backward;
  bool shape_cache; /* options.no_shape_cache not set */
  int n_marks;
  dt_compile_mark *marks;
  int cache_limit;
  bool log_recompiles;
  bool warned_eager;
  int n_variants;
  dt_compile_variant *variants[64];
  dt_compile_stats stats;
  int n_reasons;
  char **reasons;
  char eager_reason[512]; /* why the first call ran eagerly (the cache was full) */
};

/* Frees a variant and everything it holds (NULL is ignored). */
void dt__compile_variant_destroy(dt_compile_variant *v);

/* Grows v's per-node arrays to its graph's node count (*cap: their capacity). (variant_nodes.c) */
dt_status dt__compile_grow_nodes(dt_compile_variant *v, int *cap);
/* Sets v->local_dims[i], the shard dims of distributed value x (node i) as expressions of its
 * global dims, when they give x's traced shard shape. (variant_nodes.c) */
dt_status dt__compile_set_local_dims(dt_compile_variant *v, int i, const dt_tensor *x,
                                     const int *dims);

/* Appends guard g to v (a guard equal to one v has is kept once). (variant_nodes.c) */
dt_status dt__compile_add_guard(dt_compile_variant *v, const dt_guard *g);
/* Guards expression e to its traced value (e == value at v->hints), why saying what needed it;
 * nothing for a constant. (variant_nodes.c) */
dt_status dt__compile_pin(dt_compile_variant *v, int e, const char *why);

/* Runs c's function eagerly under the tracer; on success out holds its results and *made the
 * new variant, planned. A failure of the function itself is returned as it returned it. */
dt_status dt__compile_trace(dt_compiled *c, dt_tensor *const *in, dt_tensor **out,
                            dt_compile_variant **made);

/* The rewrites of a traced variant (compile/fuse.c): gradient outputs that are clones return
 * the cloned value; mask multiplies fold their comparison and conversion; a mul or add with an
 * operand expanded from one element reads the element. Called by dt__compile_plan first. */
dt_status dt__compile_fuse(dt_compile_variant *v);
/* Common subexpressions (compile/cse.c): a local compute call equal to an earlier one is
 * folded (fused[j].same_as) and its readers read the earlier value. Called by dt__compile_fuse
 * before the other rewrites. */
dt_status dt__compile_cse(dt_compile_variant *v);
/* escapes[i] (room for the node count, false on entry): node i's value or a view of it
 * reaches the outputs; with grads false, the outputs the caller gets (a joint variant's
 * gradients left out). */
void dt__compile_escapes(const dt_compile_variant *v, bool grads, bool *escapes);

/* Last uses, tuple slots, planned buffers and the call-time scratch of a traced variant. */
dt_status dt__compile_plan(dt_compile_variant *v);

/* Runs a variant whose guards hold for in (they left the symbols' values in v->exprvals).
 * grads (room for v->n_grads, may be NULL when there are none) receive the gradients of a
 * joint variant as new references. */
dt_status dt__compile_run(dt_compile_variant *v, dt_tensor *const *in, int n_out, dt_tensor **out,
                          dt_tensor **grads);

/* ---- The joint forward+backward graph (src/compile/joint.c) ------------------------------ */

/* The leaves a traced backward writes: their gradients before it, set aside. */
typedef struct dt_compile_joint {
  int n;
  dt_tensor **leaf;  /* retained */
  dt_tensor **old;   /* their .grad before the trace (owned), NULL when none */
  dt_tensor **fresh; /* their .grad after the traced backward (owned), NULL when not reached */
  int *input;        /* the input index of leaf k, or -1 */
  int *node;         /* the constant node of leaf k, or -1 */
} dt_compile_joint;

/* Under the tracing mode, after fn: sets aside the .grad of every leaf that requires grad
 * (inputs, constants of v), runs dt_backward(loss, NULL) so that the formulas' ops are traced,
 * and keeps the gradients it made. */
dt_status dt__compile_joint_backward(dt_compile_variant *v, int n_in, dt_tensor *const *in,
                                     dt_tensor *loss, dt_compile_joint *j);

/* After the mode is popped: each leaf's .grad becomes its old one plus the fresh one (the old
 * one back alone when the backward failed: ok false). Frees j. */
dt_status dt__compile_joint_finish(dt_compile_joint *j, bool ok);

/* Records a call that ran with recording off (no options.backward, grad mode on, an input
 * or a constant requiring grad) for autograd: one node over the floating outputs (replaced by
 * fresh handles) whose backward recomputes fn eagerly (compile/grad_call.c). On error out is
 * left to the caller. */
dt_status dt__compile_record_call(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                                  dt_tensor **out);

/* After a joint variant ran: adds grads[k] into the .grad of its leaf as dt_backward's commit
 * does (a copy when shared, a sum with the gradient already there). Consumes grads. */
dt_status dt__compile_apply_grads(dt_compile_variant *v, dt_tensor *const *in, dt_tensor **grads);

/* The outputs of a call whose backward has run come back detached (each out[k] that requires
 * grad is replaced by a detached alias), as a compiled call returns them. (joint.c) */
dt_status dt__compile_detach_outputs(int n_out, dt_tensor **out);

/* ---- For the benchmark ------------------------------------------------------------------ */

/* The index of the first cached variant whose guards hold for these inputs, or -1: the guard
 * check of dt_compiled_call alone (inputs must be valid). */
int dt__compiled_find_variant(dt_compiled *compiled, int n_in, dt_tensor *const *in);

#endif /* DT_COMPILE_IMPL_H */
