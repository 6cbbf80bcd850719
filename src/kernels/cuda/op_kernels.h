/*
 * The CUDA kernels the table (cuda_table.c) names: dt_op_kernel_fn adapters, as the CPU's in
 * src/ops/, that read a dt_op_call and launch device work on the calling thread's stream
 * (cuda_impl.h), returning once it is queued. They rank with ops (scripts/check-layers.sh:
 * kernels/<device>/op_*), since they read the op's call record; the device code they launch
 * is in .cu files behind plain-C declarations (no tensor or op types: nvcc compiles C++).
 */
#ifndef DT_KERNELS_CUDA_OP_KERNELS_H
#define DT_KERNELS_CUDA_OP_KERNELS_H

#include "ops/op_def.h"

/* The GEMM family on cuBLAS (op_gemm.c): mm and bmm share one kernel, as on the CPU. */
dt_status dt__cuda_kernel_mm(dt_op_call *call);
dt_status dt__cuda_kernel_matmul(dt_op_call *call);
dt_status dt__cuda_kernel_addmm(dt_op_call *call);
dt_status dt__cuda_kernel_linear(dt_op_call *call);

#endif /* DT_KERNELS_CUDA_OP_KERNELS_H */
