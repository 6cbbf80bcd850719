/*
 * The joint forward+backward graph of dt_compile (options.backward): after the compiled
 * function ran under the tracer with autograd recording, dt_backward of its first output runs
 * under the tracer too, so the backward formulas' ops (op-table ops) land in the same variant
 * after the forward. The gradients it makes become extra outputs of the variant; a compiled
 * call adds them into the leaves' .grad as dt_backward's commit does.
 *
 * The leaves' .grad are set aside before the traced backward: otherwise the sum with a
 * gradient already there would be traced with that gradient as a constant.
 */
#include <string.h>

#include "compile/compile_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vmath.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"

static bool requires_grad_leaf(const dt_tensor *t) {
  return t && t->autograd && dt_tensor_requires_grad(t) && dt_tensor_is_leaf(t);
}

static dt_status add_leaf(dt_compile_joint *j, dt_tensor *t, int input, int node) {
  for (int k = 0; k < j->n; k++) {
    if (j->leaf[k] == t) return DT_OK; /* the same tensor passed twice */
  }
  dt_tensor *old = NULL;
  dt_status st = dt_tensor_grad(t, &old);
  if (!st && old) st = dt_tensor_set_grad(t, NULL);
  if (st) {
    dt_tensor_release(old);
    return st;
  }
  j->leaf[j->n] = dt_tensor_retain(t);
  j->old[j->n] = old;
  j->fresh[j->n] = NULL;
  j->input[j->n] = input;
  j->node[j->n] = node;
  j->n++;
  return DT_OK;
}

dt_status dt__compile_joint_backward(dt_compile_variant *v, int n_in, dt_tensor *const *in,
                                     dt_tensor *loss, dt_compile_joint *j) {
  int n = n_in + v->g->n_nodes;
  memset(j, 0, sizeof *j);
  j->leaf = dt__calloc(sizeof *j->leaf * (size_t)(n + 1));
  j->old = dt__calloc(sizeof *j->old * (size_t)(n + 1));
  j->fresh = dt__calloc(sizeof *j->fresh * (size_t)(n + 1));
  j->input = dt__calloc(sizeof *j->input * (size_t)(n + 1));
  j->node = dt__calloc(sizeof *j->node * (size_t)(n + 1));
  if (!j->leaf || !j->old || !j->fresh || !j->input || !j->node)
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  dt_status st = DT_OK;
  for (int i = 0; i < n_in && !st; i++) {
    if (requires_grad_leaf(in[i])) st = add_leaf(j, in[i], i, -1);
  }
  for (int i = 0; i < v->g->n_nodes && !st; i++) {
    if (requires_grad_leaf(v->constants[i])) st = add_leaf(j, v->constants[i], -1, i);
  }
  if (st) return st;
  if (!loss->autograd || !dt_tensor_requires_grad(loss)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_compiled_call: options.backward, but output 0 does not require grad (no "
                     "input or tensor the function read requires grad, or grad mode is off)");
  }
  if (dt__tensor_numel(loss) != 1) {
    return dt__error(DT_ERR_INVALID,
                     "dt_compiled_call: options.backward needs output 0 to be a loss of one "
                     "element (its gradient is ones); it has %lld elements",
                     (long long)dt__tensor_numel(loss));
  }
  st = dt_backward(loss, NULL);
  if (st) {
    dt__error_prefix("dt_compiled_call: the traced backward");
    return st;
  }
  for (int k = 0; k < j->n && !st; k++) st = dt_tensor_grad(j->leaf[k], &j->fresh[k]);
  return st;
}

dt_status dt__compile_joint_finish(dt_compile_joint *j, bool ok) {
  dt_status st = DT_OK;
  /* Every sum first, then every swap, so that a failing add changes no .grad. */
  dt_tensor **final = dt__calloc(sizeof *final * (size_t)(j->n + 1));
  if (!final) st = dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int k = 0; k < j->n && !st; k++) {
    if (!ok || !j->fresh[k])
      final[k] = dt_tensor_retain(j->old[k]);
    else if (!j->old[k])
      final[k] = dt_tensor_retain(j->fresh[k]);
    else
      st = dt_add(j->old[k], j->fresh[k], &final[k]);
  }
  for (int k = 0; k < j->n; k++) {
    /* On failure the old gradients go back. */
    dt_tensor *g = st ? j->old[k] : final[k];
    dt_status s2 = dt_tensor_set_grad(j->leaf[k], g);
    if (!st) st = s2;
  }
  for (int k = 0; k < j->n; k++) {
    if (final) dt_tensor_release(final[k]);
    dt_tensor_release(j->leaf[k]);
    dt_tensor_release(j->old[k]);
    dt_tensor_release(j->fresh[k]);
  }
  dt__free(final);
  dt__free(j->leaf);
  dt__free(j->old);
  dt__free(j->fresh);
  dt__free(j->input);
  dt__free(j->node);
  memset(j, 0, sizeof *j);
  return st;
}

/* Whether .grad old (held by its leaf and by the caller's reference) can take g in place: a
 * local contiguous tensor nobody else holds, of g's dtype and shape. */
static bool accumulate_in_place(const dt_tensor *old, const dt_tensor *g) {
  if (old->spec || g->spec || old->dtype != g->dtype || old->ndim != g->ndim ||
      atomic_load(&old->refcount) != 2 || atomic_load(&old->storage->refcount) != 1 ||
      !dt__is_contiguous(old->ndim, old->shape, old->strides))
    return false;
  return memcmp(old->shape, g->shape, sizeof(int64_t) * (size_t)g->ndim) == 0;
}

/* o[i] += g[i] over separate arrays: the element sums add_ makes, in one loop the compiler
 * vectorizes and unrolls, compiled per vector width. */
#if defined(__GNUC__) && !defined(__clang__)
#define UNROLL_4 _Pragma("GCC unroll 4")
#else
#define UNROLL_4
#endif
DT_VECTOR_CLONES static void add_into_f32(float *restrict o, const float *restrict g, int64_t n) {
  UNROLL_4
  for (int64_t i = 0; i < n; i++) o[i] += g[i];
}

DT_VECTOR_CLONES static void add_into_f64(double *restrict o, const double *restrict g, int64_t n) {
  UNROLL_4
  for (int64_t i = 0; i < n; i++) o[i] += g[i];
}

/* old += g as add_ computes it, on the CPU without dispatch (a compiled call is not seen by
 * dispatch modes): both CPU floating tensors of one shape in separate storages, so that nothing
 * overlaps (old is contiguous: accumulate_in_place). The write bumps old's version as add_
 * does. False: the caller dispatches add_. */
static bool add_on_cpu(dt_tensor *old, const dt_tensor *g, dt_status *st) {
  if (old->storage->device != 0 || g->storage->device != 0 || old->storage == g->storage ||
      (old->dtype != DT_F32 && old->dtype != DT_F64))
    return false;
  int64_t n = dt__tensor_numel(old);
  if (!dt__is_contiguous(g->ndim, g->shape, g->strides)) {
    *st = dt__cpu_binary(DT_BINARY_ADD, 1.0, old, g, old);
  } else if (old->dtype == DT_F32) {
    add_into_f32((float *)dt__tensor_base(old), (const float *)dt__tensor_base(g), n);
    *st = DT_OK;
  } else {
    add_into_f64((double *)dt__tensor_base(old), (const double *)dt__tensor_base(g), n);
    *st = DT_OK;
  }
  old->storage->version++;
  return true;
}

dt_status dt__compile_apply_grads(dt_compile_variant *v, dt_tensor *const *in, dt_tensor **grads) {
  dt_status st = DT_OK;
  dt_tensor *final[DT_COMPILE_MAX_ARGS * 4];
  int n = v->n_grads;
  dt_tensor **fin = n <= (int)(sizeof final / sizeof final[0])
                        ? final
                        : dt__calloc(sizeof(dt_tensor *) * (size_t)n);
  if (!fin) st = dt__error(DT_ERR_NOMEM, "dt_compiled_call: out of memory");
  for (int k = 0; k < n && fin; k++) fin[k] = NULL;
  for (int k = 0; k < n && !st; k++) {
    dt_tensor *leaf = v->grad_input[k] >= 0 ? in[v->grad_input[k]] : v->constants[v->grad_const[k]];
    dt_tensor *old = NULL, *g = grads[k];
    st = dt_tensor_grad(leaf, &old);
    if (st) break;
    if (old && accumulate_in_place(old, g)) {
      /* .grad is ours alone: old += g, the same sum without a new tensor (PyTorch's
       * AccumulateGrad does the same). */
      if (!add_on_cpu(old, g, &st)) st = dt_add_(old, g); /* .grad stays old: fin[k] NULL */
    } else if (old) {
      st = dt_add(old, g, &fin[k]);
    } else {
      /* As dt_backward's commit: a gradient that is a view or shares its storage gets its
       * own, so that zeroing it in place touches nothing else. A gradient in a buffer the
       * variant planned (compile/execute.c) is always shared: the run's reference and the
       * variant's, and the next call writes the buffer again. */
      bool shared = atomic_load(&g->refcount) > 1 || atomic_load(&g->storage->refcount) > 1 ||
                    !dt__is_contiguous(g->ndim, g->shape, g->strides);
      if (shared)
        st = dt_clone(g, &fin[k]);
      else
        fin[k] = dt_tensor_retain(g);
    }
    dt_tensor_release(old);
  }
  for (int k = 0; k < n && !st; k++) {
    dt_tensor *leaf = v->grad_input[k] >= 0 ? in[v->grad_input[k]] : v->constants[v->grad_const[k]];
    if (fin[k]) st = dt_tensor_set_grad(leaf, fin[k]);
  }
  for (int k = 0; k < n; k++) {
    if (fin) dt_tensor_release(fin[k]);
    dt_tensor_release(grads[k]);
    grads[k] = NULL;
  }
  if (fin != final) dt__free(fin);
  return st;
}

dt_status dt__compile_detach_outputs(int n_out, dt_tensor **out) {
  dt_status st = DT_OK;
  for (int k = 0; k < n_out && !st; k++) {
    if (!out[k]->autograd || !dt_tensor_requires_grad(out[k])) continue;
    dt_tensor *d = NULL;
    st = dt_detach(out[k], &d);
    if (!st) {
      dt_tensor_release(out[k]);
      out[k] = d;
    }
  }
  return st;
}
