/* The CPU's kernel table: the op list's kernel column, indexed by op id. */
#include "kernels/kernel_table.h"

const dt_op_kernel_fn dt__cpu_kernels[DT_OP_COUNT] = {
#define DT_CPU_KERNEL(id, name, kind, required, infer, kernel, rule, shape, func, traits,          \
                      backward, schema)                                                            \
  [DT_OP_##id] = kernel,
    DT_OP_LIST(DT_CPU_KERNEL)
#undef DT_CPU_KERNEL
};
