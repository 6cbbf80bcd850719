/* dtensor/cuda.h in a build without CUDA (DT_WITH_CUDA=OFF compiles this file instead of the
 * rest of the folder): every call says that this library has no CUDA and how to build it. */
#include "core/core_impl.h"
#include "dtensor/cuda.h"

static dt_status no_cuda(const char *function) {
  return dt__error(DT_ERR_UNSUPPORTED,
                   "%s: this libdtensor was built without CUDA (configure with -DDT_WITH_CUDA=ON)",
                   function);
}

dt_status dt_cuda_device_count(int *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_cuda_device_count: out is NULL");
  *out = 0;
  return no_cuda("dt_cuda_device_count");
}

bool dt_cuda_is_available(void) { return false; }

dt_status dt_cuda_synchronize(int device) { return no_cuda("dt_cuda_synchronize"); }

dt_status dt_cuda_memory_stats(int device, dt_cuda_allocator_stats *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_cuda_memory_stats: out is NULL");
  *out = (dt_cuda_allocator_stats){0};
  return no_cuda("dt_cuda_memory_stats");
}

dt_status dt_cuda_reset_peak_memory_stats(int device) {
  return no_cuda("dt_cuda_reset_peak_memory_stats");
}

dt_status dt_cuda_empty_cache(int device) { return no_cuda("dt_cuda_empty_cache"); }

dt_status dt_cuda_set_allow_tf32(bool allow) { return no_cuda("dt_cuda_set_allow_tf32"); }

dt_status dt_cuda_get_allow_tf32(bool *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_cuda_get_allow_tf32: out is NULL");
  *out = false;
  return no_cuda("dt_cuda_get_allow_tf32");
}
