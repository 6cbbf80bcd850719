/*
 * In-place ops on views, as PyTorch records them (its CopySlices): an in-place op on a view v
 * of a base b (a chain of view ops that share b's storage) writes b's elements. b's history is
 * rebased onto a copy-slices node: its gradient is the incoming gradient of b with v's region
 * replaced by the in-place op's backward applied to that region; the op's other arguments get
 * their gradients from the same formula. v's history becomes "the region of b's new history"
 * (a view-of-base node). The record side is in record.c (record_inplace_view).
 *
 * The region is found by replaying the view ops from b to v on a gradient of b's shape, which
 * is contiguous: record.c records only bases that are contiguous too, so that every step that
 * was a view in the forward is a view on the gradient (same sizes and strides). A distributed
 * base's gradients are laid out as the base (its local block and spec), so that the replayed
 * view ops cut the same local views.
 */
#include "autograd/autograd_impl.h"
#include "autograd/meta_of.h"
#include "core/core_impl.h"
#include "tensor/device_impl.h"
#include "tensor/tensor_impl.h"
#include "dtensor/ops.h"

/* A view op's list attribute is a shape or dims (a split_with_sizes, whose list is not, is
 * pushed as a narrow), so a copy of at most DT_MAX_DIMS values lives in the step. */
typedef struct view_step {
  dt_op_call call; /* op and attributes; inputs, outputs and int_list are set at replay */
  int output_nr;   /* the piece of a split that continues the chain */
  int64_t int_list[DT_MAX_DIMS]; /* call.n_int_list values */
} view_step;

struct dt_view_chain {
  dt_tensor_meta base;       /* global shape and dtype */
  dt_tensor_meta local;      /* this rank's block of a distributed base (base when local) */
  struct dt_dist_spec *spec; /* a distributed base's layout (retained), NULL when local */
  int n_steps, capacity;
  view_step *steps;
};

/* A chain of no step from a base of global meta base, local block local and layout spec. */
static dt_view_chain *chain_alloc(const dt_tensor_meta *base, const dt_tensor_meta *local,
                                  struct dt_dist_spec *spec) {
  dt_view_chain *chain = dt__calloc(sizeof *chain);
  if (!chain) {
    dt__error(DT_ERR_NOMEM, "out of memory for an in-place op's view chain");
    return NULL;
  }
  chain->base = *base;
  chain->local = *local;
  if (spec) chain->spec = dt__upcall.spec_retain(spec);
  return chain;
}

dt_view_chain *dt__view_chain_new(const dt_tensor *base) {
  dt_tensor_meta global, local;
  dt__autograd_meta_of(base, &global);
  dt__meta_set(&local, base->dtype, base->ndim, base->shape);
  return chain_alloc(&global, &local, base->spec);
}

dt_view_chain *dt__view_chain_copy(const dt_view_chain *chain) {
  dt_view_chain *copy = chain_alloc(&chain->base, &chain->local, chain->spec);
  if (copy && dt__view_chain_append(copy, chain)) {
    dt__view_chain_free(copy);
    return NULL;
  }
  return copy;
}

void dt__view_chain_free(dt_view_chain *chain) {
  if (!chain) return;
  dt__free(chain->steps);
  if (chain->spec) dt__upcall.spec_release(chain->spec);
  dt__free(chain);
}

/* The call a step records, its int_list pointing at the step's copy. */
static dt_op_call step_call(const view_step *s) {
  dt_op_call call = s->call;
  if (call.n_int_list > 0) call.int_list = s->int_list;
  return call;
}

static dt_status push_call(dt_view_chain *chain, const dt_op_call *call, int output_nr) {
  /* A squeeze.dim of a dim that is not of size 1 was the identity (its infer left -2, which
   * would name a dim if run again). */
  if (call->op == DT_OP_SQUEEZE_DIM && call->ints[0] == -2) return DT_OK;
  if (!dt__reserve_arrays(chain->n_steps, &chain->capacity, 4, 1, (void *[]){&chain->steps},
                          (size_t[]){sizeof *chain->steps})) {
    return dt__error(DT_ERR_NOMEM, "out of memory for an in-place op's view chain");
  }
  int n_list = call->int_list ? call->n_int_list : 0;
  if (n_list > DT_MAX_DIMS) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s on a view: a list of %d values (at most %d)",
                     dt__op_table[call->op].name, n_list, DT_MAX_DIMS);
  }
  view_step *s = &chain->steps[chain->n_steps];
  s->call = *call;
  s->output_nr = output_nr;
  if (n_list > 0) memcpy(s->int_list, call->int_list, sizeof(int64_t) * (size_t)n_list);
  s->call.int_list = NULL;
  s->call.n_int_list = n_list;
  s->call.inputs[0] = NULL;
  s->call.input_list = NULL;
  s->call.n_input_list = 0;
  s->call.outputs = NULL;
  s->call.consumed = NULL;
  s->call.n_consumed = 0;
  chain->n_steps++;
  return DT_OK;
}

dt_status dt__view_chain_push(dt_view_chain *chain, const dt_autograd_node *node, int output_nr) {
  /* A recorded slice holds its window as (dim, start, length, step) (its infer's form); run
   * again, ints[2] must be an end: the one just past the window's last element. */
  dt_op_call call = node->call;
  if (call.op == DT_OP_SLICE) {
    int64_t start = call.ints[1], length = call.ints[2], step = call.ints[3];
    call.ints[2] = length > 0 ? start + (length - 1) * step + 1 : start;
  }
  /* A piece of a split (split, chunk, split_with_sizes: their infers leave ints = {dim, piece
   * size}) is the narrow of that piece. */
  if (call.op == DT_OP_SPLIT || call.op == DT_OP_CHUNK || call.op == DT_OP_SPLIT_WITH_SIZES) {
    int d = (int)call.ints[0];
    int64_t start = 0;
    for (int k = 0; k < output_nr; k++) {
      start += call.op == DT_OP_SPLIT_WITH_SIZES ? call.int_list[k] : call.ints[1];
    }
    int64_t length = node->output_metas[output_nr].shape[d];
    call = (dt_op_call){.op = DT_OP_NARROW, .n_inputs = 1, .n_ints = 3, .n_outputs = 1};
    call.ints[0] = d;
    call.ints[1] = start;
    call.ints[2] = length;
    output_nr = 0;
  }
  return push_call(chain, &call, output_nr);
}

dt_status dt__view_chain_append(dt_view_chain *chain, const dt_view_chain *steps) {
  int before = chain->n_steps;
  for (int i = 0; i < steps->n_steps; i++) {
    dt_op_call call = step_call(&steps->steps[i]);
    dt_status st = push_call(chain, &call, steps->steps[i].output_nr);
    if (st) {
      chain->n_steps = before;
      return st;
    }
  }
  return DT_OK;
}

/* Zeros laid out as the base: its shape, and for a distributed base its placements (this
 * rank's block, the base's spec), so that the replayed view ops cut the same local views. They
 * live on `device`, the device of the gradient that fills them: host memory is cleared
 * directly, another device's runs its fill kernel through dispatch, before the spec makes the
 * tensor distributed. */
static dt_status zeros_like_base(const dt_view_chain *chain, dt_device device, dt_tensor **out) {
  dt_tensor *t = NULL;
  dt_status st =
      dt__tensor_new_on(device, chain->local.ndim, chain->local.shape, chain->local.dtype, &t);
  if (!st && device.kind == DT_DEVICE_CPU) {
    size_t nbytes = (size_t)dt__tensor_numel(t) * dt__dtype_sizes[t->dtype];
    if (nbytes) memset(dt__tensor_base(t), 0, nbytes);
  } else if (!st) {
    st = dt_fill_(t, 0.0);
  }
  if (st) {
    dt_tensor_release(t);
    return st;
  }
  if (chain->spec) t->spec = dt__upcall.spec_retain(chain->spec);
  *out = t;
  return DT_OK;
}

/* The region of g (a contiguous tensor of the base's shape) that the view covers: a view of
 * g's storage, new reference in *out. */
static dt_status replay(const dt_view_chain *chain, dt_tensor *g, dt_tensor **out) {
  dt_tensor *t = dt_tensor_retain(g);
  dt_status st = DT_OK;
  for (int i = 0; i < chain->n_steps && !st; i++) {
    const view_step *s = &chain->steps[i];
    dt_tensor *pieces[DT_OP_MAX_META] = {0};
    dt_op_call call = step_call(s);
    call.inputs[0] = t;
    call.outputs = pieces;
    if (call.n_outputs < 1 || call.n_outputs > DT_OP_MAX_META) call.n_outputs = 1;
    st = dt__dispatch(&call);
    dt_tensor_release(t);
    t = NULL;
    if (st) break;
    t = pieces[s->output_nr];
    pieces[s->output_nr] = NULL;
    for (int k = 0; k < DT_OP_MAX_META; k++) dt_tensor_release(pieces[k]);
    if (!t) {
      st = dt__error(DT_ERR_INTERNAL, "dt_backward: replaying %s gave no output %d",
                     dt__op_table[call.op].name, s->output_nr);
    } else if (t->storage != g->storage) {
      st = dt__error(DT_ERR_INTERNAL,
                     "dt_backward: %s on the gradient of an in-place op's base is not a view",
                     dt__op_table[call.op].name);
    }
  }
  if (st) {
    dt_tensor_release(t);
    return st;
  }
  *out = t;
  return DT_OK;
}

/* ---- The view's new history: zeros of the base's shape, the view's gradient in its region. */

static dt_status view_of_base_backward(void *state, dt_tensor *grad_output,
                                       dt_tensor **grad_input) {
  const dt_view_chain *chain = state;
  dt_tensor *g = NULL, *region = NULL;
  dt_status st = zeros_like_base(chain, dt_tensor_device(grad_output), &g);
  if (!st) st = replay(chain, g, &region);
  if (!st) st = dt_copy_(region, grad_output);
  dt_tensor_release(region);
  if (st) {
    dt_tensor_release(g);
    return st;
  }
  *grad_input = g;
  return DT_OK;
}

static void view_of_base_release(void *state) { dt__view_chain_free(state); }

const dt_autograd_function dt__view_of_base_function = {
    .name = "view_of_base", .backward = view_of_base_backward, .release = view_of_base_release};

/* ---- The base's new history ---------------------------------------------------------------
 * Slot 0 is the base's previous history, slots 1.. the in-place op's other arguments (the
 * inner node's slots). */

dt_status dt__copy_slices_backward(dt_autograd_node *node, bool retain_graph,
                                   dt_tensor **grad_inputs) {
  dt__copy_slices_state *s = node->function_state;
  dt_autograd_node *inner = s->inner;
  dt_tensor *grad = node->grads[0];
  if (!grad) return DT_OK;
  dt_status st = dt__autograd_check_saved(inner);
  if (st) return st;
  dt_tensor *result = NULL, *region = NULL, *region_grad = NULL;
  dt_tensor *inner_grads[DT_OP_MAX_INPUTS] = {0};
  /* A copy of the gradient laid out as the base (copy_ redistributes a distributed one). */
  st = zeros_like_base(s->chain, dt_tensor_device(grad), &result);
  if (!st) st = dt_copy_(result, grad);
  if (!st) st = replay(s->chain, result, &region);
  if (!st) st = dt_clone(region, &region_grad);
  if (!st) {
    dt_backward_ctx ctx = {.call = &inner->call,
                           .input_metas = inner->input_metas,
                           .output_metas = inner->output_metas,
                           .needs_grad = inner->needs_grad};
    st = dt__op_table[inner->call.op].backward(&ctx, &region_grad, inner_grads);
  }
  /* The view's old values do not reach the base's new values except through the op. */
  if (!st) st = inner_grads[0] ? dt_copy_(region, inner_grads[0]) : dt_fill_(region, 0.0);
  if (!st) {
    grad_inputs[0] = result;
    result = NULL;
    for (int i = 1; i < inner->n_slots && i < DT_OP_MAX_INPUTS; i++) {
      grad_inputs[i] = inner_grads[i];
      inner_grads[i] = NULL;
    }
    if (!retain_graph) dt__autograd_node_free_saved(inner);
  }
  dt__grad_release(inner_grads, DT_OP_MAX_INPUTS);
  DT_RELEASE_ALL(result, region, region_grad);
  return st;
}

static void copy_slices_release(void *state) {
  dt__copy_slices_state *s = state;
  if (!s) return;
  dt__view_chain_free(s->chain);
  dt__autograd_node_release(s->inner);
  dt__free(s);
}

/* backward is never called: the engine runs dt__copy_slices_backward for this function. */
const dt_autograd_function dt__copy_slices_function = {
    .name = "copy_slices", .backward = NULL, .release = copy_slices_release};
