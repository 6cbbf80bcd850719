/*
 * cuBLAS as the CUDA kernels use it: one handle per thread and device, bound to the thread's
 * stream (cuda_impl.h), created on first use and destroyed when the thread exits.
 */
#ifndef DT_KERNELS_CUDA_BLAS_H
#define DT_KERNELS_CUDA_BLAS_H

#include <cublas_v2.h>

#include "kernels/cuda/cuda_impl.h"

/* The calling thread's handle for device index, on its current stream there, with the device
 * made current, and TF32 allowed or not as dt_cuda_set_allow_tf32 last said. */
dt_status dt__cuda_blas(const char *op, int index, cublasHandle_t *out);

/* A failed cuBLAS call as a dt_status: "op: what: CUBLAS_STATUS_...: description" (DT_ERR_NOMEM
 * for CUBLAS_STATUS_ALLOC_FAILED, DT_ERR_UNSUPPORTED for NOT_SUPPORTED and ARCH_MISMATCH,
 * otherwise DT_ERR_INTERNAL). */
dt_status dt__cuda_blas_error(const char *op, const char *what, cublasStatus_t status);

#endif /* DT_KERNELS_CUDA_BLAS_H */
