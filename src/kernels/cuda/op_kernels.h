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

/* The op list's kernels beyond the GEMMs (op_pointwise.c, op_copy.c, op_rows.c,
 * op_attention.c): each reads its call as the CPU's adapter in src/ops/ does. */
dt_status dt__cuda_kernel_unary(dt_op_call *call);
dt_status dt__cuda_kernel_gelu_backward(dt_op_call *call);
dt_status dt__cuda_kernel_binary(dt_op_call *call);
dt_status dt__cuda_kernel_binary_inplace(dt_op_call *call);
dt_status dt__cuda_kernel_binary_scalar(dt_op_call *call);
dt_status dt__cuda_kernel_binary_scalar_inplace(dt_op_call *call);
dt_status dt__cuda_kernel_fill_(dt_op_call *call);
dt_status dt__cuda_kernel_fill_like(dt_op_call *call);
dt_status dt__cuda_kernel_where(dt_op_call *call);
dt_status dt__cuda_kernel_masked_fill(dt_op_call *call);
dt_status dt__cuda_kernel_uniform_(dt_op_call *call);
dt_status dt__cuda_kernel_clone(dt_op_call *call);
dt_status dt__cuda_kernel_contiguous(dt_op_call *call);
dt_status dt__cuda_kernel_copy_(dt_op_call *call);
dt_status dt__cuda_kernel_to(dt_op_call *call);
dt_status dt__cuda_kernel_reshape(dt_op_call *call);
dt_status dt__cuda_kernel_cat(dt_op_call *call);
dt_status dt__cuda_kernel_stack(dt_op_call *call);
dt_status dt__cuda_kernel_reduce(dt_op_call *call);
dt_status dt__cuda_kernel_softmax(dt_op_call *call);
dt_status dt__cuda_kernel_layer_norm(dt_op_call *call);
dt_status dt__cuda_kernel_rms_norm(dt_op_call *call);
dt_status dt__cuda_kernel_batch_norm(dt_op_call *call);
dt_status dt__cuda_kernel_batch_norm_training(dt_op_call *call);
dt_status dt__cuda_kernel_embedding(dt_op_call *call);
dt_status dt__cuda_kernel_scatter_add(dt_op_call *call);
dt_status dt__cuda_kernel_cross_entropy(dt_op_call *call);
dt_status dt__cuda_kernel_cross_entropy_backward(dt_op_call *call);
dt_status dt__cuda_kernel_softmax_backward(dt_op_call *call);
dt_status dt__cuda_kernel_norm_backward(dt_op_call *call);
dt_status dt__cuda_kernel_embedding_backward(dt_op_call *call);
dt_status dt__cuda_kernel_attention(dt_op_call *call);
dt_status dt__cuda_kernel_attention_backward(dt_op_call *call);

/* The index and ordering ops and the vocabulary-parallel cross-entropy terms (op_index.c). */
dt_status dt__cuda_kernel_triangle(dt_op_call *call);
dt_status dt__cuda_kernel_cumsum(dt_op_call *call);
dt_status dt__cuda_kernel_topk(dt_op_call *call);
dt_status dt__cuda_kernel_index_select(dt_op_call *call);
dt_status dt__cuda_kernel_gather(dt_op_call *call);
dt_status dt__cuda_kernel_vocab_terms(dt_op_call *call);
dt_status dt__cuda_kernel_vocab_terms_backward(dt_op_call *call);

#endif /* DT_KERNELS_CUDA_OP_KERNELS_H */
