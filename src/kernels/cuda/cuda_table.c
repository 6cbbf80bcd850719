/* The CUDA kind's kernel table, and its registration: at start-up (a constructor: the library
 * has no init call) the kind's memory, kernels and fused routines (the optimizers') join the
 * device tables. Nothing here touches the CUDA runtime: the device count is taken on first
 * use, so a process without a GPU or a driver starts as any other and its CUDA tensors fail
 * with "no CUDA device". */
#include "kernels/cuda/cuda_impl.h"
#include "kernels/cuda/op_kernels.h"
#include "kernels/device_routines.h"
#include "kernels/kernel_table.h"

/* Indexed by op id; an op left out is refused, naming the op and the device. */
const dt_op_kernel_fn dt__cuda_kernels[DT_OP_COUNT] = {
    /* Pointwise (op_pointwise.c: pointwise.cu's kernels) */
    [DT_OP_NEG] = dt__cuda_kernel_unary,
    [DT_OP_ABS] = dt__cuda_kernel_unary,
    [DT_OP_EXP] = dt__cuda_kernel_unary,
    [DT_OP_LOG] = dt__cuda_kernel_unary,
    [DT_OP_SQRT] = dt__cuda_kernel_unary,
    [DT_OP_RSQRT] = dt__cuda_kernel_unary,
    [DT_OP_RELU] = dt__cuda_kernel_unary,
    [DT_OP_GELU] = dt__cuda_kernel_unary,
    [DT_OP_GELU_BACKWARD] = dt__cuda_kernel_gelu_backward,
    [DT_OP_SILU] = dt__cuda_kernel_unary,
    [DT_OP_TANH] = dt__cuda_kernel_unary,
    [DT_OP_SIGMOID] = dt__cuda_kernel_unary,
    [DT_OP_SIN] = dt__cuda_kernel_unary,
    [DT_OP_COS] = dt__cuda_kernel_unary,
    [DT_OP_ADD] = dt__cuda_kernel_binary,
    [DT_OP_SUB] = dt__cuda_kernel_binary,
    [DT_OP_MUL] = dt__cuda_kernel_binary,
    [DT_OP_DIV] = dt__cuda_kernel_binary,
    [DT_OP_MAXIMUM] = dt__cuda_kernel_binary,
    [DT_OP_MINIMUM] = dt__cuda_kernel_binary,
    [DT_OP_POW] = dt__cuda_kernel_binary,
    [DT_OP_ADD_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_SUB_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_MUL_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_DIV_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_POW_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_ADD_] = dt__cuda_kernel_binary_inplace,
    [DT_OP_SUB_] = dt__cuda_kernel_binary_inplace,
    [DT_OP_MUL_] = dt__cuda_kernel_binary_inplace,
    [DT_OP_DIV_] = dt__cuda_kernel_binary_inplace,
    [DT_OP_ADD_SCALAR_] = dt__cuda_kernel_binary_scalar_inplace,
    [DT_OP_MUL_SCALAR_] = dt__cuda_kernel_binary_scalar_inplace,
    [DT_OP_FILL_] = dt__cuda_kernel_fill_,
    [DT_OP_EQ] = dt__cuda_kernel_binary,
    [DT_OP_NE] = dt__cuda_kernel_binary,
    [DT_OP_LT] = dt__cuda_kernel_binary,
    [DT_OP_LE] = dt__cuda_kernel_binary,
    [DT_OP_GT] = dt__cuda_kernel_binary,
    [DT_OP_GE] = dt__cuda_kernel_binary,
    [DT_OP_EQ_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_NE_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_LT_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_LE_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_GT_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_GE_SCALAR] = dt__cuda_kernel_binary_scalar,
    [DT_OP_WHERE] = dt__cuda_kernel_where,
    [DT_OP_MASKED_FILL] = dt__cuda_kernel_masked_fill,
    /* GEMMs (op_gemm.c: cuBLAS) */
    [DT_OP_MM] = dt__cuda_kernel_mm,
    [DT_OP_BMM] = dt__cuda_kernel_mm,
    [DT_OP_MATMUL] = dt__cuda_kernel_matmul,
    [DT_OP_ADDMM] = dt__cuda_kernel_addmm,
    [DT_OP_LINEAR] = dt__cuda_kernel_linear,
    /* Reductions (op_rows.c: reduce.cu) */
    [DT_OP_SUM] = dt__cuda_kernel_reduce,
    [DT_OP_SUM_DIM] = dt__cuda_kernel_reduce,
    [DT_OP_MEAN] = dt__cuda_kernel_reduce,
    [DT_OP_MEAN_DIM] = dt__cuda_kernel_reduce,
    [DT_OP_MAX] = dt__cuda_kernel_reduce,
    [DT_OP_MIN] = dt__cuda_kernel_reduce,
    [DT_OP_MAX_DIM] = dt__cuda_kernel_reduce,
    [DT_OP_MIN_DIM] = dt__cuda_kernel_reduce,
    [DT_OP_AMAX] = dt__cuda_kernel_reduce,
    [DT_OP_AMIN] = dt__cuda_kernel_reduce,
    [DT_OP_ARGMAX] = dt__cuda_kernel_reduce,
    /* NN (op_rows.c: rows.cu, index.cu; op_attention.c: attention.cu; op_copy.c) */
    [DT_OP_SOFTMAX] = dt__cuda_kernel_softmax,
    [DT_OP_LOG_SOFTMAX] = dt__cuda_kernel_softmax,
    [DT_OP_LAYER_NORM] = dt__cuda_kernel_layer_norm,
    [DT_OP_RMS_NORM] = dt__cuda_kernel_rms_norm,
    [DT_OP_SOFTMAX_BACKWARD] = dt__cuda_kernel_softmax_backward,
    [DT_OP_LOG_SOFTMAX_BACKWARD] = dt__cuda_kernel_softmax_backward,
    [DT_OP_LAYER_NORM_BACKWARD] = dt__cuda_kernel_norm_backward,
    [DT_OP_RMS_NORM_BACKWARD] = dt__cuda_kernel_norm_backward,
    [DT_OP_LAYER_NORM_BACKWARD_AFFINE] = dt__cuda_kernel_norm_backward,
    [DT_OP_RMS_NORM_BACKWARD_WEIGHT] = dt__cuda_kernel_norm_backward,
    [DT_OP_EMBEDDING_BACKWARD] = dt__cuda_kernel_embedding_backward,
    [DT_OP_SCALED_DOT_PRODUCT_ATTENTION] = dt__cuda_kernel_attention,
    [DT_OP_SCALED_DOT_PRODUCT_ATTENTION_BACKWARD] = dt__cuda_kernel_attention_backward,
    [DT_OP_BATCH_NORM] = dt__cuda_kernel_batch_norm,
    [DT_OP_BATCH_NORM_TRAINING] = dt__cuda_kernel_batch_norm_training,
    [DT_OP_EMBEDDING] = dt__cuda_kernel_embedding,
    [DT_OP_SCATTER_ADD] = dt__cuda_kernel_scatter_add,
    [DT_OP_CAT] = dt__cuda_kernel_cat,
    [DT_OP_STACK] = dt__cuda_kernel_stack,
    /* Views: the CPU's adapters, which only make views (no element is read); the copies
     * (op_copy.c) */
    [DT_OP_TRANSPOSE] = dt__kernel_transpose,
    [DT_OP_DETACH] = dt__kernel_detach,
    [DT_OP_CONTIGUOUS] = dt__cuda_kernel_contiguous,
    [DT_OP_CLONE] = dt__cuda_kernel_clone,
    [DT_OP_COPY_] = dt__cuda_kernel_copy_,
    [DT_OP_VIEW] = dt__kernel_view,
    [DT_OP_RESHAPE] = dt__cuda_kernel_reshape,
    [DT_OP_FLATTEN] = dt__cuda_kernel_reshape,
    [DT_OP_PERMUTE] = dt__kernel_permute,
    [DT_OP_EXPAND] = dt__kernel_expand,
    [DT_OP_SQUEEZE] = dt__kernel_squeeze,
    [DT_OP_SQUEEZE_DIM] = dt__kernel_squeeze,
    [DT_OP_UNSQUEEZE] = dt__kernel_unsqueeze,
    [DT_OP_NARROW] = dt__kernel_slice,
    [DT_OP_SLICE] = dt__kernel_slice,
    [DT_OP_SELECT] = dt__kernel_select,
    [DT_OP_SPLIT] = dt__kernel_split,
    [DT_OP_SPLIT_WITH_SIZES] = dt__kernel_split,
    [DT_OP_CHUNK] = dt__kernel_split,
    [DT_OP_TO] = dt__cuda_kernel_to,
    /* Factories */
    [DT_OP_EMPTY_LIKE] = dt__kernel_empty_like,
    [DT_OP_ZEROS_LIKE] = dt__cuda_kernel_fill_like,
    [DT_OP_ONES_LIKE] = dt__cuda_kernel_fill_like,
    [DT_OP_FULL_LIKE] = dt__cuda_kernel_fill_like,
    [DT_OP_UNIFORM_] = dt__cuda_kernel_uniform_,
    /* Losses (op_rows.c: rows.cu) */
    [DT_OP_CROSS_ENTROPY_LOSS] = dt__cuda_kernel_cross_entropy,
    [DT_OP_CROSS_ENTROPY_LOSS_BACKWARD] = dt__cuda_kernel_cross_entropy_backward,
    /* Vocabulary-parallel cross-entropy terms (op_index.c: rows.cu) */
    [DT_OP_CROSS_ENTROPY_VOCAB_TERMS] = dt__cuda_kernel_vocab_terms,
    [DT_OP_CROSS_ENTROPY_VOCAB_TERMS_BACKWARD] = dt__cuda_kernel_vocab_terms_backward,
    /* Index and ordering (op_index.c: order.cu) */
    [DT_OP_TRIL] = dt__cuda_kernel_triangle,
    [DT_OP_TRIU] = dt__cuda_kernel_triangle,
    [DT_OP_CUMSUM] = dt__cuda_kernel_cumsum,
    [DT_OP_TOPK] = dt__cuda_kernel_topk,
    [DT_OP_INDEX_SELECT] = dt__cuda_kernel_index_select,
    [DT_OP_GATHER] = dt__cuda_kernel_gather,
};

__attribute__((constructor)) static void register_cuda(void) {
  /* Neither call can fail for the CUDA kind with a complete memory table. */
  (void)dt__device_register_memory(DT_DEVICE_CUDA, &dt__cuda_memory);
  (void)dt__kernels_register(DT_DEVICE_CUDA, dt__cuda_kernels);
  dt__cuda_profile_register();
  (void)dt__device_routines_register(DT_DEVICE_CUDA, &dt__cuda_routines);
}
