/*
 * Kernels per device. The op list (ops/op_list.h) describes each op once; every device kind
 * registers a table of kernels indexed by op id, from its own folder: src/kernels/cpu/
 * registers the list's kernel column (cpu_table.c), another device its own table
 * (src/kernels/<device>/) in registry.c. An op a device lacks runs dt__kernel_unsupported,
 * which fails with DT_ERR_UNSUPPORTED naming the op and the device, so dispatch picks a kernel
 * with two loads and no test: dt__device_kernels[device key & 0xff][op]. This header declares
 * only (no inline code), so that the files it names stay below the files that include it.
 */
#ifndef DT_KERNELS_KERNEL_TABLE_H
#define DT_KERNELS_KERNEL_TABLE_H

#include "ops/op_def.h"
#include "tensor/device_impl.h"

/* The CPU's kernels: the op list's kernel column (kernels/cpu/cpu_table.c). */
extern const dt_op_kernel_fn dt__cpu_kernels[DT_OP_COUNT];

/* Each device kind's row of kernels, every entry non-NULL. */
extern const dt_op_kernel_fn *dt__device_kernels[DT__DEVICE_KINDS];

/* The kernel of every op a device lacks: DT_ERR_UNSUPPORTED naming the op and the device of
 * the call's first tensor argument. */
dt_status dt__kernel_unsupported(dt_op_call *call);

/* Registers a device kind's kernels: table has DT_OP_COUNT entries, NULL for an op the device
 * lacks (copied; the caller's table may go). NULL table unregisters. Not thread-safe: register
 * before dispatching on the kind. DT_ERR_INVALID for the CPU (its table is the list) or a kind
 * outside the table. */
dt_status dt__kernels_register(int kind, const dt_op_kernel_fn *table);

/* True when a device kind has its own kernel for op (not the refusal). */
bool dt__device_has_kernel(int kind, dt_op op);

#endif /* DT_KERNELS_KERNEL_TABLE_H */
