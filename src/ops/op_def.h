/*
 * The op definitions: the op enum, the call record, the dt_op_def entry and the table's
 * declaration, generated from ops/op_list.h. The table itself is ops/op_table.c, which
 * includes this header only; ops/op_impl.h adds the dispatch entry points and the inline
 * helpers that read the table.
 */
#ifndef DT_OP_DEF_H
#define DT_OP_DEF_H

#include "dtensor/ops.h"
#include "kernels/elementwise.h"
#include "ops/op_list.h"
#include "tensor/tensor_impl.h"

/* The op enum, generated from the list. */
typedef enum dt_op {
#define DT_OP_ENUM(id, name, kind, required, infer, kernel, rule, shape, func, traits, backward,   \
                   schema)                                                                         \
  DT_OP_##id,
  DT_OP_LIST(DT_OP_ENUM)
#undef DT_OP_ENUM
      DT_OP_COUNT
} dt_op;

/* How the dispatcher treats an op's outputs. */
typedef enum dt_op_kind {
  /* New tensors: infer gives their metas, the dispatcher allocates them, the kernel fills
   * them. If the kernel fails the dispatcher releases them. */
  DT_OP_KIND_COMPUTE = 0,
  /* The kernel creates the outputs itself (views of the input, or copies when a view is
   * impossible). On failure it must leave none behind. */
  DT_OP_KIND_VIEW = 1,
  /* The kernel mutates inputs[0]; there are no outputs. */
  DT_OP_KIND_INPLACE = 2,
} dt_op_kind;

/* The sharding-rule family of an op (the list's rule column): which rule of
 * src/distributed/rules.c propagates placements through it. Pure data, so a new op cannot fall into
 * a rule silently: the list names one for every op. */
typedef enum dt_rule_family {
  DT_RULE_REPLICATE = 0, /* no sharding rule: inputs are replicated, the output too */
  DT_RULE_POINTWISE,     /* elementwise with broadcasting: follow any input's shard */
  DT_RULE_LIKE,          /* *_like factories: the output takes the input's layout */
  DT_RULE_REDUCTION,     /* reduced dims become Partial, others keep their shard */
  DT_RULE_MATMUL,        /* mm, bmm, matmul: rows, columns, contraction, batch dims */
  DT_RULE_ADDMM,
  DT_RULE_LINEAR,
  DT_RULE_SOFTMAX,          /* any shard but the softmax dim */
  DT_RULE_SOFTMAX_BACKWARD, /* the same, the gradient and the output alike */
  DT_RULE_LAYER_NORM,       /* any shard but the normalized dims */
  DT_RULE_NORM_BACKWARD,    /* the same, the gradient and the input alike */
  DT_RULE_NORM_AFFINE_GRAD, /* sums over the free dims: their shard gives Partial(sum) */
  DT_RULE_BATCH_NORM, /* per channel: any shard, the channel's with the [C] arguments sliced */
  DT_RULE_BATCH_NORM_TRAINING, /* the same, and other dims with synchronized statistics */
  DT_RULE_EMBEDDING,
  DT_RULE_EMBEDDING_BACKWARD, /* the weight's shard (row window), or a batch: Partial(sum) */
  DT_RULE_SCATTER_ADD,        /* shards off the scatter dim, row windows, Partial(sum) */
  DT_RULE_CAT,
  DT_RULE_STACK,
  DT_RULE_TRANSPOSE, /* views that map input dims to output dims one to one */
  DT_RULE_PERMUTE,
  DT_RULE_UNSQUEEZE,
  DT_RULE_VIEW, /* view, reshape, flatten, squeeze: dims merged or split */
  DT_RULE_SELECT,
  DT_RULE_SLICE, /* narrow, slice, split, chunk: the sliced dim must be whole */
  DT_RULE_EXPAND,
  DT_RULE_ROWS,         /* the losses: all arguments and the output sharded on dim 0 together */
  DT_RULE_VOCAB_TERMS,  /* cross-entropy terms of a shard of classes: Partial(sum), or rows */
  DT_RULE_ATTENTION,    /* attention: batch or heads of every argument together */
  DT_RULE_TRIANGLE,     /* tril/triu: any shard (the diagonal shifted per shard), linear Partials */
  DT_RULE_SCAN,         /* cumsum: any shard but the scanned dim, linear Partials */
  DT_RULE_ALONG_DIM,    /* topk: any shard but the dim it works along */
  DT_RULE_INDEX_SELECT, /* self's shards off dim; the index's shard becomes dim's */
  DT_RULE_GATHER,       /* self and index sharded alike off dim; the index's along dim */
} dt_rule_family;

/* The symbolic shape rule of an op (the list's shape column): how compile's tracer
 * (src/compile/shape_rules.c) writes the op's output dims as expressions of its input dims.
 * SPECIALIZE says, explicitly, that there is none: compile guards the op's input sizes to
 * their traced values (always correct, only less general). */
typedef enum dt_shape_family {
  DT_SHAPE_SPECIALIZE = 0,
  DT_SHAPE_SAME,                   /* the output has input 0's dims */
  DT_SHAPE_BROADCAST_INTO,         /* in place: input 1 broadcasts into input 0's dims */
  DT_SHAPE_BROADCAST,              /* NumPy broadcasting of the two operands */
  DT_SHAPE_WHERE,                  /* NumPy broadcasting of the three operands */
  DT_SHAPE_BATCH_NORM,             /* input 0's dims; the 1-D parameters match the channel dim */
  DT_SHAPE_BATCH_NORM_TRAINING,    /* the same, and two values per channel at least */
  DT_SHAPE_LAYER_NORM,             /* input 0's dims; the trailing dims match normalized_shape */
  DT_SHAPE_CROSS_ENTROPY,          /* [N, C], [N, 1] -> [N, 1] */
  DT_SHAPE_CROSS_ENTROPY_BACKWARD, /* [N, 1], [N, C], [N, 1] -> [N, C] */
  DT_SHAPE_MM,
  DT_SHAPE_LINEAR,    /* x @ w^T (+ bias) */
  DT_SHAPE_MATMUL,    /* x @ w with a 2-D w */
  DT_SHAPE_EMBEDDING, /* the indices' dims, then the embedding dim */
  DT_SHAPE_REDUCE,
  DT_SHAPE_CAT,
  DT_SHAPE_STACK,
  DT_SHAPE_CHUNK,
  DT_SHAPE_TRANSPOSE,
  DT_SHAPE_UNSQUEEZE,
  DT_SHAPE_VIEW,        /* view, reshape: constant sizes, one of them maybe -1 */
  DT_SHAPE_EXPAND,      /* a -1 keeps the size, a 1 broadcasts, new leading dims */
  DT_SHAPE_SCATTER_ADD, /* self's dims; the index within src (and self outside dim) */
  DT_SHAPE_COUNT
} dt_shape_family;

/* The func column's value for an op that applies no element function of
 * kernels/elementwise.h. */
#define NO_FUNC (-1)

/* Facts about an op (the list's traits column), as bits. */
enum {
  /* Linear in all its tensor arguments together: Partial(sum) inputs give a Partial(sum)
   * output when every tensor argument carries the same Partial. */
  DT_TRAIT_LINEAR = 1 << 0,
  /* Linear in its first argument alone (P / R): the others must be replicated. */
  DT_TRAIT_LINEAR_FIRST = 1 << 1,
  /* Linear in each argument separately (P * R and R * P), not in both at once. */
  DT_TRAIT_LINEAR_EACH = 1 << 2,
  /* Returns a tuple of tensors (split, chunk, max.dim): graphs address them by index. */
  DT_TRAIT_TUPLE = 1 << 3,
  /* Takes a Tensor[] argument (cat, stack). */
  DT_TRAIT_TENSOR_LIST = 1 << 4,
  /* On an input 0 sharded by rows, the local kernel needs the shard's row window, appended
   * to its ints (vocabulary-parallel embedding, scatter_add into row shards; the window of
   * classes, dim 1, for the VOCAB_TERMS rule's ops). */
  DT_TRAIT_ROW_WINDOW = 1 << 5,
  /* Fills with counter-based random numbers: the local kernel needs the shard's place in
   * the global tensor so that every shard draws the numbers of the whole. */
  DT_TRAIT_RANDOM = 1 << 6,
  /* Its shape attributes describe the global tensor: on a shard it runs with this rank's
   * output shape instead. */
  DT_TRAIT_GLOBAL_SHAPE_ATTR = 1 << 7,
  /* On a shard it runs as a reshape to the local output shape (squeeze, flatten). */
  DT_TRAIT_RUNS_AS_RESHAPE = 1 << 8,
  /* Autograd never records it and its outputs never require grad: detach, comparisons,
   * argmax, the *_like factories, uniform_. */
  DT_TRAIT_NOT_DIFFERENTIABLE = 1 << 9,
  /* Non-decreasing in its first argument with the others fixed (exp, relu, sigmoid, tanh,
   * adding a replica, copies): a Partial(max|min) first argument with the others replicated
   * gives the same Partial. log and sqrt are left out: a partial value outside their domain
   * gives NaN, which the max reduction propagates even where the maximum is in the domain. */
  DT_TRAIT_MONOTONE = 1 << 10,
  /* Its backward formula reads the op's outputs (exp, sigmoid, softmax, div, max, ...): autograd
   * keeps a detached alias of them in the node. Other ops' nodes keep none, so an output's
   * storage can go as soon as the forward drops it. */
  DT_TRAIT_SAVES_OUTPUT = 1 << 11,
  /* In place, and its backward formula reads self's value from before the write (mul_: the
   * other argument's gradient is grad * old self): autograd saves a copy of self first. */
  DT_TRAIT_SAVES_OLD_SELF = 1 << 12,
  /* Runs on local tensors only: no sharding rule (the rule column says REPLICATE), and a call
   * with a distributed argument is refused (DT_ERR_UNSUPPORTED) rather than run on gathered
   * inputs. For a fusion whose outputs would need two placements at once (the input's shard
   * and Partial(sum)); its unfused ops are the distributed form. */
  DT_TRAIT_LOCAL_ONLY = 1 << 13,
};

#define DT_OP_MAX_INPUTS 6
#define DT_OP_MAX_INTS DT_MAX_DIMS
#define DT_OP_MAX_META 8

/* Shape and dtype of an op's output, as infer computes it. */
typedef struct dt_tensor_meta {
  dt_dtype dtype;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
} dt_tensor_meta;

/*
 * One op invocation: tensor inputs, static attributes and where outputs go. Public
 * wrappers build it on the stack with designated initializers. What each attribute means
 * is documented per op in ops/op_list.h.
 */
typedef struct dt_op_call {
  dt_op op;
  int n_inputs;
  dt_tensor *inputs[DT_OP_MAX_INPUTS]; /* borrowed; optional ones may be NULL */
  dt_tensor *const *input_list;        /* borrowed tensor list (cat, stack) */
  int n_input_list;
  int n_ints;
  int64_t ints[DT_OP_MAX_INTS]; /* dims, sizes, shapes */
  const int64_t *int_list;      /* borrowed long integer list (split sizes) */
  int n_int_list;
  double scalars[2]; /* alpha, beta, fill value, eps, ... */
  dt_dtype dtype;    /* target dtype (to) */
  int flags;         /* DT_OP_FLAG_* */
  int n_outputs;     /* set by the wrapper (capacity); infer may lower it */
  dt_tensor **outputs;
  /* Set by autograd while recording (NULL otherwise): [n_consumed] slots, one per tensor
   * argument (inputs, then the list), NULL on entry. The distributed dispatch puts a new
   * reference in slot i when it redistributed argument i: the distributed tensor the local
   * kernel consumed (the target placements), which the node then saves instead of the
   * argument, so that the backward reads what the forward read without communicating. */
  dt_tensor **consumed;
  int n_consumed;
} dt_op_call;

#define DT_OP_FLAG_KEEPDIM 1
#define DT_OP_FLAG_GELU_TANH 2

typedef dt_status (*dt_op_infer_fn)(dt_op_call *call, dt_tensor_meta *metas);
typedef dt_status (*dt_op_kernel_fn)(dt_op_call *call);

/*
 * What a backward formula sees of a recorded call. Tensor arguments are numbered as slots:
 * inputs[0..n_inputs), then the tensor list.
 *   call          the call as recorded: attributes, call->inputs[i] (and input_list) are the
 *                 saved inputs, call->outputs[k] detached aliases of the outputs
 *   input_metas   each slot's global shape and dtype (a distributed tensor's, not its shard's)
 *   output_metas  each output's global shape and dtype
 *   needs_grad    which slots want a gradient (a formula may skip the others)
 */
typedef struct dt_backward_ctx {
  const dt_op_call *call;
  const dt_tensor_meta *input_metas;
  const dt_tensor_meta *output_metas;
  const bool *needs_grad;
} dt_backward_ctx;

/* A backward formula: from the gradients of the outputs (grad_outputs[k] may be NULL when
 * output k received none: treat it as zeros) computes grad_inputs[slot] (new references,
 * left NULL for no gradient) with the global shape and dtype of input_metas[slot]. Written
 * with public ops only; on failure it releases what it made and leaves grad_inputs NULL. */
typedef dt_status (*dt_op_backward_fn)(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,
                                       dt_tensor **grad_inputs);

typedef struct dt_op_def {
  const char *name;   /* ATen-style: "add.Tensor" */
  const char *schema; /* "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor" */
  dt_op_kind kind;
  int n_required; /* inputs[0..n_required) must be non-NULL */
  dt_op_infer_fn infer;
  /* The kernel column is not here: each device's table holds its kernels
   * (kernels/kernel_table.h; the CPU's is the column, kernels/cpu/cpu_table.c). */
  dt_rule_family rule;
  dt_shape_family shape;      /* the symbolic shape rule (compile) */
  int func;                   /* a dt_unary_op or dt_binary_op, or NO_FUNC */
  unsigned traits;            /* DT_TRAIT_* */
  dt_op_backward_fn backward; /* NULL: no formula yet (NO_BACKWARD) */
} dt_op_def;

extern const dt_op_def dt__op_table[DT_OP_COUNT];

/* The backward column: BACKWARD(x) names dt__backward_x, NO_BACKWARD is NULL. The column
 * token is pasted onto a prefix, so these expand it without BACKWARD being a macro. */
#define DT_BACKWARD_PROTO_BACKWARD(x)                                                              \
  dt_status dt__backward_##x(const dt_backward_ctx *ctx, dt_tensor *const *grad_outputs,           \
                             dt_tensor **grad_inputs);
#define DT_BACKWARD_PROTO_NO_BACKWARD
#define DT_BACKWARD_FN_BACKWARD(x) dt__backward_##x
#define DT_BACKWARD_FN_NO_BACKWARD NULL

/* Prototypes of every infer, kernel and backward function named in the list (a formula
 * shared by several ops is declared again: harmless). */
#define DT_OP_PROTO(id, name, kind, required, infer, kernel, rule, shape, func, traits, backward,  \
                    schema)                                                                        \
  dt_status infer(dt_op_call *call, dt_tensor_meta *metas);                                        \
  dt_status kernel(dt_op_call *call);                                                              \
  DT_BACKWARD_PROTO_##backward
DT_OP_LIST(DT_OP_PROTO)
#undef DT_OP_PROTO

#endif /* DT_OP_DEF_H */
