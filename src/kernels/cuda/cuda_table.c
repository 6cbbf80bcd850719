/* The CUDA kind's kernel table, and its registration: at start-up (a constructor: the library
 * has no init call) the kind's memory and kernels join the device tables. Nothing here
 * touches the CUDA runtime: the device count is taken on first use, so a process without a
 * GPU or a driver starts as any other and its CUDA tensors fail with "no CUDA device". */
#include "kernels/cuda/cuda_impl.h"
#include "kernels/cuda/op_kernels.h"
#include "kernels/kernel_table.h"

/* Indexed by op id; an op left out is refused, naming the op and the device. */
const dt_op_kernel_fn dt__cuda_kernels[DT_OP_COUNT] = {
    [DT_OP_MM] = dt__cuda_kernel_mm,         [DT_OP_BMM] = dt__cuda_kernel_mm,
    [DT_OP_MATMUL] = dt__cuda_kernel_matmul, [DT_OP_ADDMM] = dt__cuda_kernel_addmm,
    [DT_OP_LINEAR] = dt__cuda_kernel_linear,
};

__attribute__((constructor)) static void register_cuda(void) {
  /* Neither call can fail for the CUDA kind with a complete memory table. */
  (void)dt__device_register_memory(DT_DEVICE_CUDA, &dt__cuda_memory);
  (void)dt__kernels_register(DT_DEVICE_CUDA, dt__cuda_kernels);
}
