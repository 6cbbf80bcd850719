/*
 * A CUDA build on a machine without a GPU (or without a driver): the device count is 0, CUDA
 * tensors and the calls of dtensor/cuda.h fail with DT_ERR_UNSUPPORTED saying "no CUDA
 * device" and naming the call, and nothing aborts. Skipped (77) where a GPU is present: the
 * other CUDA tests cover that machine.
 */
#include <string.h>

#include "cuda/cuda_test.h"

static void check_refused(const char *what, dt_status st, const char *op) {
  CHECK(st == DT_ERR_UNSUPPORTED, "%s: status %s", what, dt_status_string(st));
  const char *msg = dt_last_error();
  CHECK(strstr(msg, "no CUDA device") != NULL, "%s: message \"%s\" lacks \"no CUDA device\"", what,
        msg);
  CHECK(strstr(msg, op) != NULL, "%s: message \"%s\" does not name %s", what, msg, op);
}

int main(void) {
  if (dt_cuda_is_available()) {
    printf("test_cuda_absent: skipped: a CUDA device is present\n");
    return DT_TEST_SKIP;
  }
  int n = -1;
  CHECK(dt_cuda_device_count(&n) == DT_OK && n == 0, "device count %d: %s", n, dt_last_error());
  CHECK(dt_cuda_device_count(NULL) == DT_ERR_INVALID, "NULL out accepted");
  dt_device cuda0 = {DT_DEVICE_CUDA, 0};
  CHECK(!dt_device_available(cuda0), "cuda:0 available");

  /* Factories and the copy to the device. */
  dt_tensor_options on_gpu = {.device = cuda0};
  int64_t shape[2] = {2, 3};
  float values[6] = {1, 2, 3, 4, 5, 6};
  dt_tensor *t = (dt_tensor *)1;
  check_refused("dt_empty_ex", dt_empty_ex(2, shape, DT_F32, &on_gpu, &t), "empty");
  CHECK(t == NULL, "dt_empty_ex left *out set");
  check_refused("dt_full_ex", dt_full_ex(2, shape, DT_F32, 1.0, &on_gpu, &t), "full");
  check_refused("dt_from_data_ex", dt_from_data_ex(values, 2, shape, DT_F32, &on_gpu, &t),
                "from_data");
  dt_tensor *cpu = NULL;
  CHECK_OK(dt_from_data(values, 2, shape, DT_F32, &cpu));
  check_refused("dt_to_device", dt_to_device(cpu, cuda0, &t), "dt_to_device");
  CHECK(t == NULL, "dt_to_device left *out set");
  dt_tensor_release(cpu);

  /* dtensor/cuda.h. */
  check_refused("synchronize(0)", dt_cuda_synchronize(0), "dt_cuda_synchronize");
  check_refused("synchronize(-1)", dt_cuda_synchronize(-1), "dt_cuda_synchronize");
  dt_cuda_allocator_stats stats;
  check_refused("memory_stats", dt_cuda_memory_stats(0, &stats), "dt_cuda_memory_stats");
  CHECK(dt_cuda_memory_stats(0, NULL) == DT_ERR_INVALID, "NULL stats accepted");
  check_refused("empty_cache", dt_cuda_empty_cache(-1), "dt_cuda_empty_cache");
  check_refused("reset_peak", dt_cuda_reset_peak_memory_stats(0),
                "dt_cuda_reset_peak_memory_stats");
  /* A setting needs no device. */
  bool allow = true;
  CHECK(dt_cuda_get_allow_tf32(&allow) == DT_OK && !allow, "TF32 allowed by default");
  CHECK(dt_cuda_set_allow_tf32(true) == DT_OK, "set_allow_tf32: %s", dt_last_error());
  CHECK(dt_cuda_get_allow_tf32(&allow) == DT_OK && allow, "TF32 setting not kept");
  CHECK_OK(dt_cuda_set_allow_tf32(false));
  return dt_test_result("test_cuda_absent");
}
