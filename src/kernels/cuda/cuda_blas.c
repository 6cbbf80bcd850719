/* cuBLAS handles per thread and device (cuda_blas.h). */
#include "kernels/cuda/cuda_blas.h"

static void destroy_handle(int device, void *slot) {
  cublasHandle_t handle = *(cublasHandle_t *)slot;
  if (handle && cudaSetDevice(device) == cudaSuccess) cublasDestroy(handle);
}

static dt_cuda_thread_table handles_table =
    DT_CUDA_THREAD_TABLE_INIT(cublasHandle_t, destroy_handle);
static _Thread_local cublasHandle_t *my_handles; /* one per device */

dt_status dt__cuda_blas_error(const char *op, const char *what, cublasStatus_t status) {
  return dt__cuda_failure(op, what, status == CUBLAS_STATUS_ALLOC_FAILED,
                          status == CUBLAS_STATUS_NOT_SUPPORTED ||
                              status == CUBLAS_STATUS_ARCH_MISMATCH,
                          cublasGetStatusName(status), cublasGetStatusString(status));
}

dt_status dt__cuda_blas(const char *op, int index, cublasHandle_t *out) {
  cudaStream_t stream;
  dt_status st = dt__cuda_stream(op, index, &stream); /* also makes index current */
  if (st) return st;
  if (!my_handles) {
    my_handles = dt__cuda_thread_slots(&handles_table, (void **)&my_handles);
    if (!my_handles) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate the cuBLAS handles", op);
  }
  cublasHandle_t h = my_handles[index];
  if (!h) {
    cublasStatus_t s = cublasCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) return dt__cuda_blas_error(op, "cublasCreate", s);
    s = cublasSetStream(h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h);
      return dt__cuda_blas_error(op, "cublasSetStream", s);
    }
    my_handles[index] = h;
  }
  /* TF32 only when allowed: CUBLAS_DEFAULT_MATH keeps f32 products in f32 (the compute type
   * the GEMMs pass says the same; both are set so that no path uses TF32 by accident). bf16 and
   * f16 products reduce split-K partial sums in f32, never in the 16-bit type, so that they
   * round once as the CPU's do. */
  cublasMath_t mode = dt__cuda_allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  cublasStatus_t s =
      cublasSetMathMode(h, (cublasMath_t)(mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (s != CUBLAS_STATUS_SUCCESS) return dt__cuda_blas_error(op, "cublasSetMathMode", s);
  *out = h;
  return DT_OK;
}
