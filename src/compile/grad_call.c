/*
 * A compiled call under grad mode without options.backward (issue 22.6; PyTorch records a
 * compiled forward for autograd): the variant runs with recording off, then the outputs get
 * one autograd node whose inputs are the call's inputs. The node's backward recomputes the
 * function eagerly with recording on, from detached aliases of the inputs (leaves that require
 * grad where the inputs did), and back-propagates the outputs' gradients through that graph:
 * constants that require grad (parameters the function reads) accumulate into their .grad
 * there, as activation checkpointing does, and the inputs' gradients go back to the outer
 * backward along the node's edges. Kernels are deterministic, so the recomputed forward equals
 * the compiled one and the gradients are eager's; the backward costs an eager forward more.
 */
#include "autograd/autograd_impl.h"
#include "compile/compile_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"

typedef struct grad_call_state {
  dt_compile_fn fn;
  void *user;
  int n_in, n_out;
  dt_tensor **inputs; /* detached aliases of the call's inputs (retained) */
  uint32_t *versions; /* their storages' versions at the call */
  bool *requires;     /* input i required grad */
  int *out_index;     /* node output k is the function's output out_index[k] */
} grad_call_state;

static void state_release(void *p) {
  grad_call_state *s = p;
  for (int i = 0; s->inputs && i < s->n_in; i++) dt_tensor_release(s->inputs[i]);
  dt__free(s->inputs);
  dt__free(s->versions);
  dt__free(s->requires);
  dt__free(s->out_index);
  dt__free(s);
}

/* The function's outputs, recomputed with recording on from fresh leaves x of the inputs. */
static dt_status recompute(grad_call_state *s, dt_tensor **x, dt_tensor **y) {
  for (int i = 0; i < s->n_in; i++) {
    if (s->inputs[i]->storage->version != s->versions[i]) {
      return dt__error(DT_ERR_INVALID,
                       "dt_backward: input %d of a compiled call was modified in place after the "
                       "call; its backward recomputes the function from the inputs",
                       i);
    }
    dt_status st = dt_detach(s->inputs[i], &x[i]);
    if (!st && s->requires[i]) st = dt_tensor_set_requires_grad(x[i], true);
    if (st) return st;
  }
  bool prev = dt_grad_mode_set(true);
  dt_status st = s->fn(s->user, s->n_in, x, s->n_out, y);
  dt_grad_mode_set(prev);
  return st;
}

static dt_status recompute_backward(void *p, int n_out, dt_tensor *const *grads, int n_in,
                                    const bool *needs_grad, dt_tensor **grad_inputs) {
  grad_call_state *s = p;
  dt_tensor *x_storage[16] = {0}, *y_storage[16] = {0};
  dt_tensor **x = s->n_in <= 16 ? x_storage : dt__calloc(sizeof(dt_tensor *) * (size_t)s->n_in);
  dt_tensor **y = s->n_out <= 16 ? y_storage : dt__calloc(sizeof(dt_tensor *) * (size_t)s->n_out);
  dt_status st = x && y ? recompute(s, x, y)
                        : dt__error(DT_ERR_NOMEM, "dt_backward: out of memory (compiled call)");
  /* Each output's gradient through the recomputed graph, the graph kept until the last. */
  int last = -1;
  for (int k = 0; k < n_out && !st; k++) {
    dt_tensor *yk = y[s->out_index[k]];
    if (grads[k] && yk && dt_tensor_requires_grad(yk)) last = k;
  }
  for (int k = 0; k <= last && !st; k++) {
    dt_tensor *yk = y[s->out_index[k]];
    if (!grads[k] || !yk || !dt_tensor_requires_grad(yk)) continue;
    st = dt_backward_ex(yk, grads[k], &(dt_backward_options){.retain_graph = k < last});
  }
  for (int i = 0; i < n_in && !st; i++) {
    if (needs_grad[i] && s->requires[i]) st = dt_tensor_grad(x[i], &grad_inputs[i]);
  }
  for (int i = 0; x && i < s->n_in; i++) dt_tensor_release(x[i]);
  for (int k = 0; y && k < s->n_out; k++) dt_tensor_release(y[k]);
  if (x != x_storage) dt__free(x);
  if (y != y_storage) dt__free(y);
  return st;
}

static const dt_autograd_function compiled_function = {.name = "compiled call (recompute)",
                                                       .release = state_release,
                                                       .backward_n = recompute_backward};

dt_status dt__compile_record_call(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                                  dt_tensor **out) {
  grad_call_state *s = dt__calloc(sizeof *s);
  dt_tensor *rec_storage[16];
  dt_tensor **rec = n_out <= 16 ? rec_storage : dt__alloc(sizeof(dt_tensor *) * (size_t)n_out);
  if (s) {
    s->inputs = dt__calloc(sizeof(dt_tensor *) * (size_t)(n_in + 1));
    s->versions = dt__calloc(sizeof(uint32_t) * (size_t)(n_in + 1));
    s->requires = dt__calloc(sizeof(bool) * (size_t)(n_in + 1));
    s->out_index = dt__calloc(sizeof(int) * (size_t)(n_out + 1));
  }
  if (!s || !rec || !s->inputs || !s->versions || !s->requires || !s->out_index) {
    if (s) state_release(s);
    if (rec != rec_storage) dt__free(rec);
    return dt__error(DT_ERR_NOMEM, "dt_compiled_call: out of memory");
  }
  s->fn = c->fn;
  s->user = c->user;
  s->n_in = n_in;
  s->n_out = n_out;
  bool prev = dt_grad_mode_set(false);
  dt_status st = DT_OK;
  for (int i = 0; i < n_in && !st; i++) {
    st = dt_detach(in[i], &s->inputs[i]);
    if (!st) s->versions[i] = in[i]->storage->version;
    s->requires[i] = in[i]->autograd && dt_tensor_requires_grad(in[i]);
  }
  /* The floating outputs become fresh handles (an output may be an input's own handle) that
   * the node makes require grad. */
  int n_rec = 0;
  for (int k = 0; k < n_out && !st; k++) {
    if (!out[k] || !dt_dtype_is_floating(dt_tensor_dtype(out[k]))) continue;
    dt_tensor *alias = NULL;
    st = dt_detach(out[k], &alias);
    if (st) break;
    dt_tensor_release(out[k]);
    out[k] = alias;
    s->out_index[n_rec] = k;
    rec[n_rec++] = alias;
  }
  dt_grad_mode_set(prev);
  if (!st && n_rec > 0) {
    st = dt__autograd_record_function_n(&compiled_function, s, n_in, in, n_rec, rec);
  } else {
    state_release(s);
  }
  if (rec != rec_storage) dt__free(rec);
  return st;
}
