/* Below the modes: dt__dispatch_inner hands a call with a distributed input to the
 * distributed layer (through dt__upcall) and runs the others locally (infer, allocate the
 * outputs, the kernel). The dispatch modes (mode.c) re-enter here, so this file calls neither
 * dispatch.c nor mode.c. */
#include "ops/op_impl.h"
#include "profile/profile_impl.h"

static bool has_distributed_input(const dt_op_call *call) {
  for (int i = 0; i < call->n_inputs; i++) {
    if (call->inputs[i] && call->inputs[i]->spec) return true;
  }
  for (int i = 0; i < call->n_input_list; i++) {
    if (call->input_list[i]->spec) return true;
  }
  return false;
}

/* The local kernel, as a profiler event of its own (the op's ATen name, "kernel" category). */
static dt_status run_kernel(const dt_op_def *def, dt_op_call *call) {
  dt__profile_scope scope;
  dt__profile_begin(&scope, def->name, DT__PROFILE_CAT_KERNEL, DT_PROFILER_LANE_COMPUTE);
  dt_status st = def->kernel(call);
  dt__profile_end(&scope);
  return st;
}

dt_status dt__dispatch_local(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  dt_tensor_meta metas[DT_OP_MAX_META];
  dt_status st = def->infer(call, metas);
  if (st) return st;
  if (def->kind != DT_OP_KIND_COMPUTE) {
    st = run_kernel(def, call);
    if (st && def->kind == DT_OP_KIND_VIEW) {
      for (int i = 0; i < call->n_outputs; i++) {
        dt_tensor_release(call->outputs[i]);
        call->outputs[i] = NULL;
      }
    }
    return st;
  }
  DT_ASSERT(call->n_outputs <= DT_OP_MAX_META);
  for (int i = 0; i < call->n_outputs; i++) {
    st = dt__tensor_new(metas[i].ndim, metas[i].shape, metas[i].dtype, &call->outputs[i]);
    if (st) goto fail;
  }
  st = run_kernel(def, call);
  if (st) goto fail;
  return DT_OK;
fail:
  for (int i = 0; i < call->n_outputs; i++) {
    dt_tensor_release(call->outputs[i]);
    call->outputs[i] = NULL;
  }
  return st;
}

dt_status dt__dispatch_inner(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  if (DT_UNLIKELY(has_distributed_input(call))) {
    if (!dt__upcall.dist_dispatch) {
      return dt__error(DT_ERR_UNSUPPORTED, "%s: distributed inputs need the dist layer", def->name);
    }
    return dt__upcall.dist_dispatch(call);
  }
  return dt__dispatch_local(call);
}
