/* Below the modes: dt__dispatch_inner hands a call with a distributed input to the
 * distributed layer (through dt__upcall) and runs the others locally (infer, allocate the
 * outputs, the kernel). The dispatch modes (mode.c) re-enter here, so this file calls neither
 * dispatch.c nor mode.c. */
#include "kernels/kernel_table.h"
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

/* The local kernel of the call's device, as a profiler event of its own (the op's ATen name,
 * "kernel" category). On a device whose work is queued (CUDA), the host event is the launch;
 * the device's timer also times the work itself on its queue (the device's track). Kept out of
 * line: dispatch without a profiler calls the kernel and nothing else (run_kernel). */
static DT_NOINLINE dt_status run_kernel_profiled(const dt_op_def *def, uint32_t device,
                                                 dt_op_call *call) {
  dt__profile_scope scope;
  dt__profile_begin(&scope, def->name, DT__PROFILE_CAT_KERNEL, DT_PROFILER_LANE_COMPUTE);
  void *timing = DT_UNLIKELY(scope.start != 0 && device != 0)
                     ? dt__profile_device_begin(device, NULL, false)
                     : NULL;
  dt_status st = dt__device_kernels[device & 0xffu][call->op](call);
  if (timing) dt__profile_device_end(device, timing, def->name, DT__PROFILE_CAT_KERNEL, -1);
  dt__profile_end(&scope);
  return st;
}

static inline dt_status run_kernel(const dt_op_def *def, uint32_t device, dt_op_call *call) {
  if (DT_UNLIKELY(dt__profile_enabled())) return run_kernel_profiled(def, device, call);
  return dt__device_kernels[device & 0xffu][call->op](call);
}

/* The device of the call's tensor arguments: that of the first one (the CPU for none), and in
 * *differ the OR of every other one's XOR with it, so that one compare tells whether they
 * agree. */
static inline uint32_t call_device(const dt_op_call *call, uint32_t *differ) {
  const dt_tensor *first = call->n_inputs > 0 ? call->inputs[0] : NULL;
  if (DT_UNLIKELY(!first)) first = call->n_input_list > 0 ? call->input_list[0] : NULL;
  uint32_t device = first ? first->storage->device : 0, x = 0;
  for (int i = 1; i < call->n_inputs; i++) {
    if (call->inputs[i]) x |= call->inputs[i]->storage->device ^ device;
  }
  for (int i = 0; i < call->n_input_list; i++) x |= call->input_list[i]->storage->device ^ device;
  *differ = x;
  return device;
}

/* PyTorch's "Expected all tensors to be on the same device", naming the first two devices. */
static dt_status devices_differ(const dt_op_call *call, uint32_t device) {
  int n = call->n_inputs + call->n_input_list;
  for (int k = 0; k < n; k++) {
    const dt_tensor *t =
        k < call->n_inputs ? call->inputs[k] : call->input_list[k - call->n_inputs];
    if (!t || t->storage->device == device) continue;
    char a[48], b[48];
    return dt__error(DT_ERR_INVALID,
                     "%s: expected all tensors to be on the same device, but found at least two "
                     "devices, %s and %s (tensor argument %d); move one with dt_to_device",
                     dt__op_name(call), dt__device_key_format(device, a, sizeof a),
                     dt__device_key_format(t->storage->device, b, sizeof b), k);
  }
  return dt__error(DT_ERR_INTERNAL, "%s: devices differ", dt__op_name(call));
}

dt_status dt__dispatch_local(dt_op_call *call) {
  const dt_op_def *def = &dt__op_table[call->op];
  uint32_t differ;
  uint32_t device = call_device(call, &differ);
  if (DT_UNLIKELY(differ)) return devices_differ(call, device);
  dt_tensor_meta metas[DT_OP_MAX_META];
  dt_status st = def->infer(call, metas);
  if (st) return st;
  if (def->kind != DT_OP_KIND_COMPUTE) {
    st = run_kernel(def, device, call);
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
    st = DT_LIKELY(device == 0)
             ? dt__tensor_new(metas[i].ndim, metas[i].shape, metas[i].dtype, &call->outputs[i])
             : dt__tensor_new_on(dt__device_of_key(device), metas[i].ndim, metas[i].shape,
                                 metas[i].dtype, &call->outputs[i]);
    if (st) goto fail;
  }
  st = run_kernel(def, device, call);
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
