/* The local buffers of the distributed layer on any device (dist_impl.h): new tensors on a
 * tensor's device, copies and zero fills through that device's kernels (kernels/kernel_table.h),
 * row moves through the device's copies. Host memory takes the CPU's code directly, as before;
 * a device mesh's shards (CUDA) never pass through the host. */
#include <string.h>

#include "distributed/dist_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/kernel_table.h"

/* True when host code may read and write t's memory (the CPU, or a kind that says so). */
static bool host_memory(const dt_tensor *t) {
  uint32_t key = dt__tensor_device_key(t);
  if (key == 0) return true;
  const dt_device_memory *memory = dt__device_memory((int)(key & 0xffu));
  return memory && memory->host_accessible;
}

dt_status dt__dist_new_like(const dt_tensor *like, int ndim, const int64_t *shape, dt_dtype dtype,
                            dt_tensor **out) {
  uint32_t key = dt__tensor_device_key(like);
  if (key == 0) return dt__tensor_new(ndim, shape, dtype, out);
  return dt__tensor_new_on(dt__device_of_key(key), ndim, shape, dtype, out);
}

/* Runs the device's kernel of `op` on a call made here (inputs only: copy_, fill_). */
static dt_status device_kernel(dt_op op, int n_inputs, dt_tensor *a, dt_tensor *b, double value) {
  dt_op_call call = {.op = op, .n_inputs = n_inputs, .inputs = {a, b}, .scalars = {value}};
  return dt__device_kernels[dt__tensor_device_key(a) & 0xffu][op](&call);
}

dt_status dt__dist_copy(dt_tensor *dst, const dt_tensor *src) {
  if (dt__tensor_numel(dst) == 0) return DT_OK;
  if (host_memory(dst) && host_memory(src)) {
    dt__cpu_copy(dst, src);
    return DT_OK;
  }
  return device_kernel(DT_OP_COPY_, 2, dst, (dt_tensor *)src, 0.0);
}

dt_status dt__dist_fill(dt_tensor *t, double value) {
  if (dt__tensor_numel(t) == 0) return DT_OK;
  if (host_memory(t)) {
    dt__cpu_fill(t, value);
    return DT_OK;
  }
  return device_kernel(DT_OP_FILL_, 1, t, NULL, value);
}

dt_status dt__dist_permute_rows(const dt_tensor *src, dt_tensor *dst, const int64_t *order,
                                int64_t rows, size_t row_bytes, bool scatter) {
  const char *from = dt__tensor_base((dt_tensor *)src);
  char *to = dt__tensor_base(dst);
  bool host = host_memory(src) && host_memory(dst);
  dt_device src_device = dt__device_of_key(dt__tensor_device_key(src));
  dt_device dst_device = dt__device_of_key(dt__tensor_device_key(dst));
  for (int64_t k = 0; k < rows && row_bytes;) {
    /* A run of rows whose positions follow on from each other is one copy. */
    int64_t run = 1;
    while (k + run < rows && order[k + run] == order[k] + run) run++;
    size_t a = (size_t)(scatter ? k : order[k]) * row_bytes;
    size_t b = (size_t)(scatter ? order[k] : k) * row_bytes;
    size_t n = (size_t)run * row_bytes;
    if (host) {
      memcpy(to + b, from + a, n);
    } else {
      dt_status st = dt__device_copy(dst_device, to + b, src_device, from + a, n);
      if (st) return st;
    }
    k += run;
  }
  return DT_OK;
}

dt_status dt__dist_to_host(const char *op, const dt_tensor *t, dt_tensor **out) {
  if (host_memory(t)) {
    dt_status st = dt__tensor_new(t->ndim, t->shape, t->dtype, out);
    if (!st) dt__cpu_copy(*out, t);
    return st;
  }
  dt_tensor *packed = NULL;
  dt_status st = dt__dist_new_like(t, t->ndim, t->shape, t->dtype, &packed);
  if (!st) st = dt__dist_copy(packed, t);
  if (!st) st = dt__tensor_new(t->ndim, t->shape, t->dtype, out);
  if (!st) {
    st = dt__device_copy(DT_DEVICE_CPU_VALUE, dt__tensor_base(*out),
                         dt__device_of_key(dt__tensor_device_key(packed)), dt__tensor_base(packed),
                         (size_t)dt__tensor_numel(t) * dt__dtype_sizes[t->dtype]);
  }
  dt_tensor_release(packed);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
    dt__error_prefix(op);
  }
  return st;
}

dt_status dt__dist_from_host(dt_tensor *dst, const dt_tensor *host) {
  if (host_memory(dst)) {
    dt__cpu_copy(dst, host);
    return DT_OK;
  }
  /* dst is a fresh contiguous tensor of host's shape. */
  return dt__device_copy(dt__device_of_key(dt__tensor_device_key(dst)), dt__tensor_base(dst),
                         DT_DEVICE_CPU_VALUE, dt__tensor_base((dt_tensor *)host),
                         (size_t)dt__tensor_numel(host) * dt__dtype_sizes[host->dtype]);
}
