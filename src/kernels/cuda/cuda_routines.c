/*
 * The CUDA kind's fused routines (kernels/device_routines.h) for the optimizers and
 * clip_grad_norm: optim.cu's kernels on the calling thread's stream of the device; the sum of
 * squares and the non-finite test wait for their one value (the caller needs it on the host,
 * to all_reduce it or to decide the step). Registered by cuda_table.c.
 */
#include "kernels/cuda/cuda_impl.h"
#include "kernels/cuda/optim_kernels.h"
#include "kernels/device_routines.h"

static dt_status launched(const char *what, int error) {
  return error ? dt__cuda_error(what, "kernel launch", (cudaError_t)error) : DT_OK;
}

static dt_status optim_update(int index, const dt_optim_update *u, float *p, const float *g,
                              float *s0, float *s1, int64_t count) {
  static const char what[] = "optimizer step (cuda)";
  cudaStream_t s;
  dt_status st = dt__cuda_stream(what, index, &s);
  if (st) return st;
  return launched(what, dt__cuda_launch_optim_update(s, u, p, g, s0, s1, count));
}

/* Runs launch on scratch device memory of nbytes, then copies its first host_bytes to host
 * and waits. */
typedef int (*scratch_launch)(cudaStream_t s, const float *x, int64_t count, void *scratch);

static dt_status with_scratch(const char *what, int index, const float *x, int64_t count,
                              size_t nbytes, scratch_launch launch, void *host, size_t host_bytes) {
  cudaStream_t s;
  dt_status st = dt__cuda_stream(what, index, &s);
  if (st) return st;
  void *scratch = dt__cuda_memory.alloc(index, nbytes);
  if (!scratch)
    return dt__error(DT_ERR_NOMEM, "%s: out of device memory for %zu bytes", what, nbytes);
  int error = launch(s, x, count, scratch);
  if (!error) error = (int)cudaMemcpyAsync(host, scratch, host_bytes, cudaMemcpyDeviceToHost, s);
  if (!error) error = (int)cudaStreamSynchronize(s);
  dt__cuda_memory.free(index, scratch);
  return error ? dt__cuda_error(what, "reading the result", (cudaError_t)error) : DT_OK;
}

static int launch_squares(cudaStream_t s, const float *x, int64_t count, void *scratch) {
  return dt__cuda_launch_sum_squares(s, x, count, scratch);
}

static dt_status sum_squares(int index, const float *x, int64_t count, double *out) {
  *out = 0.0;
  if (count <= 0) return DT_OK;
  return with_scratch("clip_grad_norm (cuda)", index, x, count,
                      sizeof(double) * DT_CUDA_SQUARES_MAX_BLOCKS, launch_squares, out,
                      sizeof *out);
}

static int launch_nonfinite(cudaStream_t s, const float *x, int64_t count, void *scratch) {
  return dt__cuda_launch_any_nonfinite(s, x, count, scratch);
}

static dt_status any_nonfinite(int index, const float *x, int64_t count, bool *out) {
  *out = false;
  if (count <= 0) return DT_OK;
  int flag = 0;
  dt_status st = with_scratch("optimizer step (cuda): non-finite test", index, x, count,
                              sizeof flag, launch_nonfinite, &flag, sizeof flag);
  *out = flag != 0;
  return st;
}

static dt_status scale(int index, float *x, int64_t count, float c) {
  static const char what[] = "clip_grad_norm (cuda)";
  cudaStream_t s;
  dt_status st = dt__cuda_stream(what, index, &s);
  if (st) return st;
  return launched(what, dt__cuda_launch_scale(s, x, count, c));
}

const dt_device_routines dt__cuda_routines = {
    .optim_update = optim_update,
    .sum_squares = sum_squares,
    .any_nonfinite = any_nonfinite,
    .scale = scale,
};
