/* cat and stack: joining a list of tensors along an existing or a new dim. */
#include <stdio.h>

#include "kernels/cpu/matrix.h"
#include "ops/op_impl.h"

static dt_status check_list(const dt_op_call *call) {
  if (call->n_input_list <= 0 || !call->input_list) {
    return dt__error(DT_ERR_INVALID, "%s: expected a non-empty list of tensors, got %d",
                     dt__op_name(call), call->n_input_list);
  }
  return DT_OK;
}

static dt_dtype list_dtype(const dt_op_call *call) {
  dt_dtype d = call->input_list[0]->dtype;
  for (int i = 1; i < call->n_input_list; i++) d = dt_dtype_promote(d, call->input_list[i]->dtype);
  return d;
}

static dt_status mismatch(const dt_op_call *call, int i, const dt_tensor *t, int r,
                          const dt_tensor *ref, const char *rule) {
  char st[160], sr[160];
  return dt__error(DT_ERR_SHAPE, "%s: tensor %d has shape %s but tensor %d has shape %s (%s)",
                   dt__op_name(call), i, dt__format_ints(st, sizeof st, t->ndim, t->shape), r,
                   dt__format_ints(sr, sizeof sr, ref->ndim, ref->shape), rule);
}

/* PyTorch's legacy rule: a 1-D tensor without elements joins any cat and adds nothing. */
static bool is_legacy_empty(const dt_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

dt_status dt__infer_cat(dt_op_call *call, dt_tensor_meta *metas) {
  dt_status st = check_list(call);
  if (st) return st;
  const char *op = dt__op_name(call);
  int n = call->n_input_list, r = -1;
  for (int i = 0; i < n && r < 0; i++) {
    if (!is_legacy_empty(call->input_list[i])) r = i;
  }
  dt_tensor_meta *m = &metas[0];
  m->dtype = list_dtype(call);
  if (r < 0) { /* only legacy empties: the result is one of them */
    int dim;
    st = dt__normalize_dim(op, call->ints[0], 1, &dim);
    if (st) return st;
    call->ints[0] = dim;
    m->ndim = 1;
    m->shape[0] = 0;
    return DT_OK;
  }
  const dt_tensor *ref = call->input_list[r];
  if (ref->ndim == 0) {
    return dt__error(DT_ERR_SHAPE, "%s: tensor %d is zero-dimensional and cannot be concatenated",
                     op, r);
  }
  int dim;
  st = dt__normalize_dim(op, call->ints[0], ref->ndim, &dim);
  if (st) return st;
  call->ints[0] = dim;
  dt__meta_set(m, m->dtype, ref->ndim, ref->shape);
  m->shape[dim] = 0;
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = call->input_list[i];
    if (is_legacy_empty(t)) continue;
    if (t->ndim != ref->ndim) return mismatch(call, i, t, r, ref, "ranks differ");
    for (int d = 0; d < t->ndim; d++) {
      if (d != dim && t->shape[d] != ref->shape[d]) {
        char rule[64];
        snprintf(rule, sizeof rule, "sizes must match except in dim %d", dim);
        return mismatch(call, i, t, r, ref, rule);
      }
    }
    /* Many large empty inputs could wrap the sum before dt__check_shape sees it. */
    if (__builtin_add_overflow(m->shape[dim], t->shape[dim], &m->shape[dim])) {
      return dt__error(DT_ERR_INVALID, "%s: the sizes of dim %d of the %d tensors overflow int64",
                       op, dim, n);
    }
  }
  return dt__check_shape(op, m->ndim, m->shape);
}

dt_status dt__kernel_cat(dt_op_call *call) {
  dt_tensor *out = call->outputs[0];
  /* The all-empty case has nothing to copy; its dim only had to be valid. */
  if (dt__tensor_numel(out) > 0) {
    dt__cpu_concat(call->n_input_list, call->input_list, (int)call->ints[0], false, out);
  }
  return DT_OK;
}

dt_status dt__infer_stack(dt_op_call *call, dt_tensor_meta *metas) {
  dt_status st = check_list(call);
  if (st) return st;
  const char *op = dt__op_name(call);
  const dt_tensor *ref = call->input_list[0];
  if (ref->ndim >= DT_MAX_DIMS) {
    char buf[160];
    return dt__error(DT_ERR_SHAPE,
                     "%s: tensors of shape %s leave no room for a new dim (at most %d dims)", op,
                     dt__format_ints(buf, sizeof buf, ref->ndim, ref->shape), DT_MAX_DIMS);
  }
  for (int i = 1; i < call->n_input_list; i++) {
    const dt_tensor *t = call->input_list[i];
    if (t->ndim != ref->ndim ||
        memcmp(t->shape, ref->shape, sizeof(int64_t) * (size_t)ref->ndim) != 0) {
      return mismatch(call, i, t, 0, ref, "stack needs equal shapes");
    }
  }
  int dim;
  st = dt__normalize_dim(op, call->ints[0], ref->ndim + 1, &dim);
  if (st) return st;
  call->ints[0] = dim;
  dt_tensor_meta *m = &metas[0];
  m->dtype = list_dtype(call);
  m->ndim = ref->ndim + 1;
  for (int d = 0, s = 0; d < m->ndim; d++) {
    m->shape[d] = d == dim ? call->n_input_list : ref->shape[s++];
  }
  return dt__check_shape(op, m->ndim, m->shape);
}

dt_status dt__kernel_stack(dt_op_call *call) {
  dt__cpu_concat(call->n_input_list, call->input_list, (int)call->ints[0], true, call->outputs[0]);
  return DT_OK;
}

/* ---- Public functions ------------------------------------------------------------------------ */

static dt_status join(dt_op op, int n, dt_tensor *const *tensors, int64_t dim, dt_tensor **out) {
  dt_op_call call = {.op = op,
                     .input_list = tensors,
                     .n_input_list = n,
                     .n_ints = 1,
                     .ints = {dim},
                     .n_outputs = 1,
                     .outputs = out};
  return dt__dispatch(&call);
}

dt_status dt_cat(int n, dt_tensor *const *tensors, int64_t dim, dt_tensor **out) {
  return join(DT_OP_CAT, n, tensors, dim, out);
}

dt_status dt_stack(int n, dt_tensor *const *tensors, int64_t dim, dt_tensor **out) {
  return join(DT_OP_STACK, n, tensors, dim, out);
}
