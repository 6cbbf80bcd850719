/* The kernel tables of the device kinds. Adding a device is its folder, src/kernels/<device>/,
 * and one line here (or a call of dt__kernels_register from its start-up). */
#include <stdio.h>

#include "kernels/kernel_table.h"

/* The row of a kind without kernels: every op refused. */
static const dt_op_kernel_fn no_kernels[DT_OP_COUNT] = {
#define DT_NO_KERNEL(id, name, kind, required, infer, kernel, rule, shape, func, traits, backward, \
                     schema)                                                                       \
  [DT_OP_##id] = dt__kernel_unsupported,
    DT_OP_LIST(DT_NO_KERNEL)
#undef DT_NO_KERNEL
};

const dt_op_kernel_fn *dt__device_kernels[DT__DEVICE_KINDS] = {
    [DT_DEVICE_CPU] = dt__cpu_kernels,
    [DT_DEVICE_CUDA] = no_kernels, /* a CUDA build registers src/kernels/cuda/'s table */
    [2] = no_kernels,
    [3] = no_kernels,
};

/* Rows of the kinds registered at run time (the caller's tables are copied). */
static dt_op_kernel_fn registered[DT__DEVICE_KINDS][DT_OP_COUNT];

dt_status dt__kernels_register(int kind, const dt_op_kernel_fn *table) {
  if (kind <= DT_DEVICE_CPU || kind >= DT__DEVICE_KINDS)
    return dt__error(DT_ERR_INVALID, "dt__kernels_register: kind %d cannot be registered", kind);
  if (!table) {
    dt__device_kernels[kind] = no_kernels;
    return DT_OK;
  }
  for (int op = 0; op < DT_OP_COUNT; op++)
    registered[kind][op] = table[op] ? table[op] : dt__kernel_unsupported;
  dt__device_kernels[kind] = registered[kind];
  return DT_OK;
}

bool dt__device_has_kernel(int kind, dt_op op) {
  return dt__device_kernels[kind][op] != dt__kernel_unsupported;
}

/* The device of the call's first tensor argument (the dispatcher checked that they agree). */
static uint32_t call_device(const dt_op_call *call) {
  for (int i = 0; i < call->n_inputs; i++) {
    if (call->inputs[i]) return call->inputs[i]->storage->device;
  }
  if (call->n_input_list > 0) return call->input_list[0]->storage->device;
  return 0;
}

dt_status dt__kernel_unsupported(dt_op_call *call) {
  char name[48];
  return dt__error(
      DT_ERR_UNSUPPORTED, "%s: no kernel for device %s (the op is not implemented on it)",
      dt__op_table[call->op].name, dt__device_key_format(call_device(call), name, sizeof name));
}
