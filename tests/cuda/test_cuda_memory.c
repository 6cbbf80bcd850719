/*
 * CUDA memory on a GPU: tensors to and from the device (the small path and the pinned,
 * chunked one), copies between devices, the host refusing to read device memory, the caching
 * allocator's figures and reuse, streams of several threads. Skipped (77) without a GPU.
 */
#include <pthread.h>
#include <string.h>

#include "cuda/cuda_test.h"

static const dt_device cuda0 = {DT_DEVICE_CUDA, 0};

/* n floats through cuda:device and back; the values must come back bit for bit. */
static void round_trip(int64_t n, int device) {
  float *values = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) values[i] = (float)(i % 1000003) * 0.5f - 7.0f;
  dt_tensor_options on = {.device = {DT_DEVICE_CUDA, device}};
  dt_tensor *g = NULL, *h = NULL;
  CHECK_OK(dt_from_data_ex(values, 1, &n, DT_F32, &on, &g));
  CHECK(dt_tensor_device(g).kind == DT_DEVICE_CUDA && dt_tensor_device(g).index == device,
        "device of the copy");
  CHECK_OK(dt_to_device(g, DT_DEVICE_CPU_VALUE, &h));
  CHECK(memcmp(dt_tensor_data(h), values, sizeof(float) * (size_t)n) == 0,
        "%lld floats changed on the way through cuda:%d", (long long)n, device);
  dt_tensor_release(g);
  dt_tensor_release(h);
  free(values);
}

static void *thread_round_trips(void *arg) {
  (void)arg;
  for (int i = 0; i < 20; i++) round_trip(1000 + 97 * i, 0);
  return NULL;
}

int main(void) {
  dt_test_require_gpu("test_cuda_memory");
  int n_devices = 0;
  CHECK_OK(dt_cuda_device_count(&n_devices));

  /* Small (pageable), exactly a staging chunk, and several chunks plus a tail. */
  int64_t sizes[] = {1, 3, 1000, 1 << 18, (4 << 20) / 4, (9 << 20) / 4 + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) round_trip(sizes[i], 0);

  /* The host never reads device memory. */
  int64_t shape[2] = {2, 2};
  float v[4] = {1, 2, 3, 4};
  dt_tensor_options on0 = {.device = cuda0};
  dt_tensor *g = NULL;
  CHECK_OK(dt_from_data_ex(v, 2, shape, DT_F32, &on0, &g));
  CHECK(dt_tensor_data(g) == NULL, "dt_tensor_data gave a device pointer to the host");
  CHECK(strstr(dt_last_error(), "copy it to the CPU first") != NULL, "message: %s",
        dt_last_error());
  /* dt_to_device onto its own device is the tensor itself (as PyTorch's to). */
  dt_tensor *same = NULL;
  CHECK_OK(dt_to_device(g, cuda0, &same));
  CHECK(same == g, "to the same device made a copy");
  dt_tensor_release(same);

  /* Between two devices, when there are two. */
  if (n_devices > 1) {
    dt_tensor *g1 = NULL, *back = NULL;
    CHECK_OK(dt_to_device(g, (dt_device){DT_DEVICE_CUDA, 1}, &g1));
    CHECK_OK(dt_to_device(g1, DT_DEVICE_CPU_VALUE, &back));
    CHECK(memcmp(dt_tensor_data(back), v, sizeof v) == 0, "cuda:0 -> cuda:1 changed values");
    dt_tensor_release(g1);
    dt_tensor_release(back);
    round_trip(3 << 20, 1);
  }
  dt_tensor_release(g);

  /* The allocator: a freed block is reused without cudaMalloc; figures add up. */
  CHECK_OK(dt_cuda_synchronize(0));
  CHECK_OK(dt_cuda_empty_cache(0));
  dt_cuda_allocator_stats s0, s1, s2;
  CHECK_OK(dt_cuda_memory_stats(0, &s0));
  CHECK(s0.allocated == 0 && s0.n_blocks == 0, "%zu bytes in %llu blocks still allocated",
        s0.allocated, (unsigned long long)s0.n_blocks);
  CHECK(s0.reserved == 0, "empty_cache left %zu bytes reserved", s0.reserved);
  int64_t n = 1000; /* 4000 bytes: one 4096-byte block of a 2 MiB segment */
  dt_tensor *a = NULL, *b = NULL;
  CHECK_OK(dt_empty_ex(1, &n, DT_F32, &on0, &a));
  CHECK_OK(dt_cuda_memory_stats(0, &s1));
  CHECK(s1.allocated == 4096 && s1.reserved == (2u << 20), "allocated %zu reserved %zu",
        s1.allocated, s1.reserved);
  CHECK(s1.n_cuda_malloc == s0.n_cuda_malloc + 1, "cudaMalloc calls %llu -> %llu",
        (unsigned long long)s0.n_cuda_malloc, (unsigned long long)s1.n_cuda_malloc);
  dt_tensor_release(a);
  CHECK_OK(dt_empty_ex(1, &n, DT_F32, &on0, &b));
  CHECK_OK(dt_cuda_memory_stats(0, &s2));
  CHECK(s2.n_cuda_malloc == s1.n_cuda_malloc, "a freed block was not reused");
  CHECK(s2.peak_allocated >= 4096, "peak %zu", s2.peak_allocated);
  dt_tensor_release(b);
  CHECK_OK(dt_cuda_empty_cache(-1));
  CHECK_OK(dt_cuda_memory_stats(0, &s2));
  CHECK(s2.reserved == 0 && s2.n_cuda_free > s1.n_cuda_free, "reserved %zu after empty_cache",
        s2.reserved);

  /* Threads, each on its own stream. */
  pthread_t threads[4];
  for (int t = 0; t < 4; t++) pthread_create(&threads[t], NULL, thread_round_trips, NULL);
  for (int t = 0; t < 4; t++) pthread_join(threads[t], NULL);
  CHECK_OK(dt_cuda_synchronize(-1));
  CHECK_OK(dt_cuda_memory_stats(0, &s2));
  CHECK(s2.allocated == 0, "%zu bytes allocated after the threads", s2.allocated);

  /* Bad arguments. */
  CHECK(dt_cuda_synchronize(n_devices) == DT_ERR_INVALID, "device %d accepted", n_devices);
  CHECK(dt_cuda_memory_stats(-1, &s2) == DT_ERR_INVALID, "device -1 accepted for stats");
  return dt_test_result("test_cuda_memory");
}
