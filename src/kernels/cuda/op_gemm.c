/*
 * The GEMM family on CUDA through cuBLAS: mm, bmm, matmul, addmm, linear, for float32, float64,
 * bfloat16 and float16 (bf16/f16 multiply in f32, as the CPU does, and round once).
 *
 * cuBLAS is column-major and the library row-major, so out = a @ b runs as out^T = b^T @ a^T:
 * a row-major operand is a column-major transposed one with the same leading dimension, and a
 * column-major operand (a transposed view) is passed with CUBLAS_OP_T. Only an operand that is
 * neither is copied (a strided copy on the device). Batch dims that form one strided run
 * become one strided-batched call; a single right-hand matrix with a strided run of left rows
 * (linear on [B, S, in]) becomes one GEMM of B*S rows.
 *
 * f32 products use CUBLAS_COMPUTE_32F (no TF32) unless dt_cuda_set_allow_tf32 allowed
 * CUBLAS_COMPUTE_32F_FAST_TF32. Integer products and mixed operand dtypes are refused.
 */
#include <inttypes.h>
#include <limits.h>

#include "kernels/cuda/cuda_blas.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/op_kernels.h"
#include "kernels/matmul_views.h"

static int device_of(const dt_tensor *t) { return (int)(t->storage->device >> 8); }

static dt_cuda_strided strided_of(int ndim, const int64_t *shape, const int64_t *strides) {
  dt_cuda_strided v = {.ndim = ndim};
  for (int i = 0; i < ndim; i++) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  return v;
}

/* dst (contiguous, out's shape) = src broadcast to it, on the thread's stream. */
static dt_status broadcast_copy(const char *op, dt_tensor *dst, const dt_tensor *src) {
  int nd = dst->ndim;
  int64_t strides[DT_MAX_DIMS] = {0};
  for (int i = 0; i < src->ndim; i++) {
    int d = nd - src->ndim + i;
    strides[d] = src->shape[i] == 1 ? 0 : src->strides[i];
  }
  dt_cuda_strided to = strided_of(nd, dst->shape, dst->strides);
  dt_cuda_strided from = strided_of(nd, dst->shape, strides);
  cudaStream_t stream;
  dt_status st = dt__cuda_stream(op, device_of(dst), &stream);
  if (st) return st;
  cudaError_t e =
      dt__cuda_launch_copy_strided(dt__tensor_base(dst), &to, dt__tensor_base(src), &from,
                                   dt__dtype_sizes[dst->dtype], dt__tensor_numel(dst), stream);
  return e ? dt__cuda_error(op, "copy_strided launch", e) : DT_OK;
}

/* *view = t when cuBLAS can read its matrices as they are; otherwise a contiguous copy on the
 * device in *copy (the caller releases it). */
static dt_status prepare_operand(const char *op, const dt_tensor *t, const dt_tensor **view,
                                 dt_tensor **copy, dt_gemm_layout *layout) {
  *view = t;
  if (dt__gemm_matrix_layout(t, layout)) return DT_OK;
  dt_status st =
      dt__tensor_new_on(dt__device_of_key(t->storage->device), t->ndim, t->shape, t->dtype, copy);
  if (!st) st = broadcast_copy(op, *copy, t);
  if (st) return st;
  *view = *copy;
  if (!dt__gemm_matrix_layout(*copy, layout)) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: a row of %" PRId64 " elements is too long for cuBLAS",
                     op, t->shape[t->ndim - 1]);
  }
  return DT_OK;
}

/* The cuBLAS types of a dtype: storage, compute, and whether the scalars are doubles. */
typedef struct gemm_types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool double_scalars;
} gemm_types;

static bool types_of(dt_dtype dtype, gemm_types *out) {
  bool tf32 = dt__cuda_allow_tf32();
  switch (dtype) {
  case DT_F32:
    *out =
        (gemm_types){CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    return true;
  case DT_F64: *out = (gemm_types){CUDA_R_64F, CUBLAS_COMPUTE_64F, true}; return true;
  case DT_BF16: *out = (gemm_types){CUDA_R_16BF, CUBLAS_COMPUTE_32F, false}; return true;
  case DT_F16: *out = (gemm_types){CUDA_R_16F, CUBLAS_COMPUTE_32F, false}; return true;
  default: return false;
  }
}

/* One GEMM description: the column-major out^T = b^T a^T of every batch. */
typedef struct gemm_call {
  const char *op;
  cublasHandle_t handle;
  gemm_types types;
  double alpha, beta;
} gemm_call;

/* One launch of dt__gemm_run through cuBLAS, with the call's types and scalars. */
static dt_status cublas_launch(void *context, const dt_gemm_launch *l) {
  const gemm_call *g = context;
  float alpha32 = (float)g->alpha, beta32 = (float)g->beta;
  const void *alpha = g->types.double_scalars ? (const void *)&g->alpha : (const void *)&alpha32;
  const void *beta = g->types.double_scalars ? (const void *)&g->beta : (const void *)&beta32;
  cublasOperation_t op_a = l->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = l->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cudaDataType_t t = g->types.data;
  cublasStatus_t s;
  if (l->batch == 1) {
    s = cublasGemmEx(g->handle, op_a, op_b, (int)l->m, (int)l->n, (int)l->k, alpha, l->a, t,
                     (int)l->lda, l->b, t, (int)l->ldb, beta, l->c, t, (int)l->ldc,
                     g->types.compute, CUBLAS_GEMM_DEFAULT);
  } else {
    s = cublasGemmStridedBatchedEx(g->handle, op_a, op_b, (int)l->m, (int)l->n, (int)l->k, alpha,
                                   l->a, t, (int)l->lda, l->stride_a, l->b, t, (int)l->ldb,
                                   l->stride_b, beta, l->c, t, (int)l->ldc, l->stride_c,
                                   (int)l->batch, g->types.compute, CUBLAS_GEMM_DEFAULT);
  }
  return s == CUBLAS_STATUS_SUCCESS ? DT_OK : dt__cuda_blas_error(g->op, "cublasGemmEx", s);
}

/* out = beta * bias + alpha * (a @ b); a [..., n, k], b [..., k, m], out [..., n, m]
 * contiguous (the dispatcher's), batch dims broadcast, bias broadcastable to out or NULL. */
static dt_status cuda_matmul(const char *op, const dt_tensor *a, const dt_tensor *b,
                             const dt_tensor *bias, double beta, double alpha, dt_tensor *out) {
  if (dt__tensor_numel(out) == 0) return DT_OK;
  gemm_call g = {.op = op, .alpha = alpha};
  if (!types_of(out->dtype, &g.types)) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: no %s matrix product on CUDA (cuBLAS has no integer GEMM); compute in a "
                     "floating dtype",
                     op, dt_dtype_name(out->dtype));
  }
  if (a->dtype != out->dtype || b->dtype != out->dtype || (bias && bias->dtype != out->dtype)) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: operands of mixed dtypes (%s, %s%s%s) on CUDA; convert them to %s first",
                     op, dt_dtype_name(a->dtype), dt_dtype_name(b->dtype), bias ? ", bias " : "",
                     bias ? dt_dtype_name(bias->dtype) : "", dt_dtype_name(out->dtype));
  }
  int64_t k = a->shape[a->ndim - 1];
  dt_status st = dt__cuda_blas(op, device_of(out), &g.handle);
  if (st) return st;
  bool use_bias = bias && beta != 0;
  if (use_bias) {
    st = broadcast_copy(op, out, bias);
    if (st) return st;
    g.beta = beta;
  }
  if (k == 0) { /* no product: out = beta * bias, or zeros */
    if (!use_bias) {
      cudaStream_t stream;
      st = dt__cuda_stream(op, device_of(out), &stream);
      if (st) return st;
      size_t bytes = (size_t)dt__tensor_numel(out) * dt__dtype_sizes[out->dtype];
      cudaError_t e = cudaMemsetAsync(dt__tensor_base(out), 0, bytes, stream);
      return e ? dt__cuda_error(op, "cudaMemsetAsync", e) : DT_OK;
    }
    if (beta == 1) return DT_OK;
    int64_t count = dt__tensor_numel(out);
    if (count > INT_MAX) return dt__error(DT_ERR_UNSUPPORTED, "%s: too many elements", op);
    float beta32 = (float)beta;
    const void *scale = g.types.double_scalars ? (const void *)&beta : (const void *)&beta32;
    cudaDataType_t scale_type = g.types.double_scalars ? CUDA_R_64F : CUDA_R_32F;
    cublasStatus_t s = cublasScalEx(g.handle, (int)count, scale, scale_type, dt__tensor_base(out),
                                    g.types.data, 1, scale_type);
    return s == CUBLAS_STATUS_SUCCESS ? DT_OK : dt__cuda_blas_error(op, "cublasScalEx", s);
  }
  const dt_tensor *ta, *tb;
  dt_tensor *a_copy = NULL, *b_copy = NULL;
  dt_gemm_layout la, lb;
  st = prepare_operand(op, a, &ta, &a_copy, &la);
  if (!st) st = prepare_operand(op, b, &tb, &b_copy, &lb);
  if (!st) {
    st = dt__gemm_run(op, ta, tb, out, cublas_launch, &g);
  }
  /* Freed to the stream's blocks: the GEMMs queued before any reuse of them. */
  dt_tensor_release(a_copy);
  dt_tensor_release(b_copy);
  return st;
}

/* ---- The ops' kernels -------------------------------------------------------------------- */

dt_status dt__cuda_kernel_mm(dt_op_call *call) {
  return cuda_matmul(dt__op_table[call->op].name, call->inputs[0], call->inputs[1], NULL, 0.0, 1.0,
                     call->outputs[0]);
}

/* A 1-D operand is a one-row or one-column matrix, and out is seen with the unit dims put
 * back, as the CPU kernel does. */
dt_status dt__cuda_kernel_matmul(dt_op_call *call) {
  const dt_tensor *a = call->inputs[0], *b = call->inputs[1];
  dt_tensor *out = call->outputs[0];
  dt_tensor views[3];
  dt__matmul_as_matrices(&a, &b, &out, views);
  return cuda_matmul("matmul", a, b, NULL, 0.0, 1.0, out);
}

dt_status dt__cuda_kernel_addmm(dt_op_call *call) {
  return cuda_matmul("addmm", call->inputs[1], call->inputs[2], call->inputs[0], call->scalars[0],
                     call->scalars[1], call->outputs[0]);
}

/* x [..., in] @ weight^T: weight^T is weight with its strides swapped, which cuBLAS reads as a
 * transposed operand (no copy). */
dt_status dt__cuda_kernel_linear(dt_op_call *call) {
  const dt_tensor *x = call->inputs[0], *w = call->inputs[1], *bias = call->inputs[2];
  dt_tensor *out = call->outputs[0];
  dt_tensor views[3];
  const dt_tensor *wt = dt__linear_as_matmul(&x, w, &out, views);
  return cuda_matmul("linear", x, wt, bias, 1.0, 1.0, out);
}
