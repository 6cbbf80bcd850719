/*
 * Private interface of the op layer: the op call record, op definitions, the op table and
 * the single dispatch entry point every public op function goes through.
 *
 * Adding an op: one X(...) line in ops/op_list.h, an infer function (validates arguments,
 * computes output shapes and dtypes), a kernel, and the public wrapper that fills a
 * dt_op_call and calls dt__dispatch.
 */
#ifndef DT_OP_IMPL_H
#define DT_OP_IMPL_H

#include "dtensor/ops.h"
#include "ops/op_list.h"
#include "tensor/tensor_impl.h"

/* The op enum, generated from the list. */
typedef enum dt_op {
#define DT_OP_ENUM(id, name, kind, required, infer, kernel, schema) DT_OP_##id,
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
} dt_op_call;

#define DT_OP_FLAG_KEEPDIM 1
#define DT_OP_FLAG_GELU_TANH 2

typedef dt_status (*dt_op_infer_fn)(dt_op_call *call, dt_tensor_meta *metas);
typedef dt_status (*dt_op_kernel_fn)(dt_op_call *call);

typedef struct dt_op_def {
  const char *name;   /* ATen-style: "add.Tensor" */
  const char *schema; /* "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor" */
  dt_op_kind kind;
  int n_required; /* inputs[0..n_required) must be non-NULL */
  dt_op_infer_fn infer;
  dt_op_kernel_fn kernel;
} dt_op_def;

extern const dt_op_def dt__op_table[DT_OP_COUNT];

/* Prototypes of every infer and kernel function named in the list. */
#define DT_OP_PROTO(id, name, kind, required, infer, kernel, schema)                               \
  dt_status infer(dt_op_call *call, dt_tensor_meta *metas);                                        \
  dt_status kernel(dt_op_call *call);
DT_OP_LIST(DT_OP_PROTO)
#undef DT_OP_PROTO

/* The single entry point of every op: modes, distributed dispatch, or the local path. */
dt_status dt__dispatch(dt_op_call *call);

/* Past the argument checks and the modes: the distributed hook or the local path. */
dt_status dt__dispatch_inner(dt_op_call *call);

/* The op call behind a mode's invocation (for tracers that record attributes). */
struct dt_invocation;
dt_op_call *dt__invocation_call(struct dt_invocation *inv);

/* Runs a call through the calling thread's dispatch modes (ops/mode.c). */
dt_status dt__dispatch_with_modes(dt_op_call *call);
extern _Thread_local int dt__modes_visible;

/* The local path alone: validate, infer, allocate outputs, run the kernel. */
dt_status dt__dispatch_local(dt_op_call *call);

/* Installed by the dist layer: runs an op that has a distributed input. */
extern dt_status (*dt__dist_dispatch_hook)(dt_op_call *call);

/* ---- Helpers shared by infer functions ---------------------------------------------- */

/* NumPy broadcasting of two shapes into out (ndim in *out_ndim). DT_ERR_SHAPE naming op and
 * both shapes when they are incompatible. */
dt_status dt__broadcast_shapes(const char *op, int ndim_a, const int64_t *shape_a, int ndim_b,
                               const int64_t *shape_b, int *out_ndim, int64_t *out_shape);

/* Strides of t seen through the broadcast shape (ndim, shape): 0 on broadcast dims. */
void dt__broadcast_strides(const dt_tensor *t, int ndim, const int64_t *shape, int64_t *strides);

static inline const char *dt__op_name(const dt_op_call *call) {
  return dt__op_table[call->op].name;
}

static inline void dt__meta_set(dt_tensor_meta *m, dt_dtype dtype, int ndim, const int64_t *shape) {
  m->dtype = dtype;
  m->ndim = ndim;
  for (int i = 0; i < ndim; i++) m->shape[i] = shape[i];
}

#endif /* DT_OP_IMPL_H */
