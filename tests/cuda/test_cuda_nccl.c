/*
 * The NCCL backend on a GPU at world size 1 (what a one-GPU machine allows: NCCL refuses two
 * ranks on one GPU) under dt_comm_spawn: every collective of the interface on CUDA tensors
 * against the values a world of one must leave, async with dt_work_test, splits (a colour
 * and none), all_gather_object, a CPU tensor refused, and dt_comm_abort turning the next
 * collective into DT_ERR_ABORTED at once. With 2 or more GPUs, the same on 2 ranks (one GPU
 * each) for all_reduce, uneven all_gather and all_to_all against naive loops. Skips (77)
 * without a GPU or without NCCL in the build.
 */
#include <stdatomic.h>
#include <string.h>

#include "cuda/cuda_test.h"

#ifndef DT_HAVE_NCCL
int main(void) {
  printf("test_cuda_nccl: skipped: this build has no NCCL backend\n");
  return DT_TEST_SKIP;
}
#else

static atomic_int failures;

#define RCHECK(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      atomic_fetch_add(&failures, 1);                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

#define ROK(call)                                                                                  \
  do {                                                                                             \
    dt_status rok_ = (call);                                                                       \
    if (rok_ != DT_OK) {                                                                           \
      atomic_fetch_add(&failures, 1);                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, dt_last_error());              \
      return rok_;                                                                                 \
    }                                                                                              \
  } while (0)

static dt_status on_gpu(const float *values, int64_t rows, int64_t cols, int device,
                        dt_tensor **out) {
  dt_tensor_options o = {.device = {DT_DEVICE_CUDA, device}};
  return dt_from_data_ex(values, 2, (int64_t[]){rows, cols}, DT_F32, &o, out);
}

static dt_status values_of(dt_tensor *t, float *out, int64_t n) {
  dt_tensor *h = NULL;
  dt_status st = dt_to_device(t, DT_DEVICE_CPU_VALUE, &h);
  if (st) return st;
  memcpy(out, dt_tensor_data(h), sizeof(float) * (size_t)n);
  dt_tensor_release(h);
  return DT_OK;
}

static bool equal(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static dt_status one_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_comm *g = NULL;
  ROK(dt_comm_nccl_create(world, -1, &g));
  RCHECK(strcmp(dt_comm_backend_name(g), "nccl") == 0 && dt_comm_size(g) == 1, "group");
  float v[12], got[24];
  for (int i = 0; i < 12; i++) v[i] = (float)i * 0.5f - 2.0f;
  dt_tensor *a = NULL, *b = NULL;
  ROK(on_gpu(v, 3, 4, 0, &a));
  for (int op = DT_REDUCE_SUM; op <= DT_REDUCE_PROD; op++) {
    ROK(dt_comm_all_reduce(g, a, (dt_reduce_op)op));
    ROK(values_of(a, got, 12));
    RCHECK(equal(got, v, 12), "all_reduce op %d of one rank changed the values", op);
  }
  ROK(on_gpu(v, 3, 4, 0, &b));
  float zeros[12] = {0};
  dt_tensor_release(b);
  ROK(on_gpu(zeros, 3, 4, 0, &b));
  ROK(dt_comm_all_gather_into_tensor(g, a, b));
  ROK(values_of(b, got, 12));
  RCHECK(equal(got, v, 12), "all_gather");
  ROK(dt_comm_all_gather_uneven(g, a, b, (int64_t[]){3}));
  ROK(dt_comm_reduce_scatter_tensor(g, a, b, DT_REDUCE_SUM));
  ROK(dt_comm_reduce_scatter_uneven(g, a, b, (int64_t[]){3}, DT_REDUCE_MAX));
  ROK(values_of(b, got, 12));
  RCHECK(equal(got, v, 12), "reduce_scatter");
  dt_tensor_release(b);
  ROK(on_gpu(zeros, 3, 4, 0, &b));
  ROK(dt_comm_all_to_all(g, a, b, (int64_t[]){3}, (int64_t[]){3}));
  ROK(values_of(b, got, 12));
  RCHECK(equal(got, v, 12), "all_to_all");
  ROK(dt_comm_broadcast(g, a, 0));
  ROK(dt_comm_scatter(g, a, b, 0));
  ROK(dt_comm_gather(g, a, b, 0));
  ROK(dt_comm_barrier(g));
  dt_work *w = NULL;
  ROK(dt_comm_all_reduce_async(g, a, DT_REDUCE_SUM, &w));
  bool done = false;
  for (int i = 0; i < 1000000 && !done; i++) ROK(dt_work_test(w, &done));
  ROK(dt_work_wait(w));
  dt_work_destroy(w);
  dt_objects *objects = NULL;
  ROK(dt_comm_all_gather_object(g, "hello", 5, &objects));
  RCHECK(objects->count == 1 && objects->lengths[0] == 5 &&
             memcmp(objects->data + objects->offsets[0], "hello", 5) == 0,
         "all_gather_object");
  dt_free(objects);
  dt_comm *sub = NULL, *none = (dt_comm *)&none;
  ROK(dt_comm_split(g, 0, 0, &sub));
  RCHECK(sub && dt_comm_size(sub) == 1, "split");
  ROK(dt_comm_all_reduce(sub, a, DT_REDUCE_SUM));
  ROK(dt_comm_split(g, -1, 0, &none));
  RCHECK(none == NULL, "a negative colour gets no group");
  /* A CPU tensor is refused, before anything is queued. */
  dt_tensor *c = NULL;
  ROK(dt_full(1, (int64_t[]){4}, 1.0, DT_F32, &c));
  dt_status st = dt_comm_all_reduce(g, c, DT_REDUCE_SUM);
  RCHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "GPU memory only"), "%s",
         dt_last_error());
  /* Abort: the next collective of the group and of its split returns DT_ERR_ABORTED. */
  dt_comm_abort(g, "test");
  st = dt_comm_all_reduce(g, a, DT_REDUCE_SUM);
  RCHECK(st == DT_ERR_ABORTED && strstr(dt_last_error(), "test"), "%s", dt_last_error());
  st = dt_comm_all_reduce(sub, a, DT_REDUCE_SUM);
  RCHECK(st == DT_ERR_ABORTED, "%s", dt_last_error());
  dt_comm_destroy(sub);
  dt_comm_destroy(g);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  return DT_OK;
}

/* Two ranks, one GPU each: sums and uneven movement against naive loops. */
static dt_status two_ranks(dt_comm *world, void *arg) {
  (void)arg;
  int r = dt_comm_rank(world);
  dt_comm *g = NULL;
  ROK(dt_comm_nccl_create(world, -1, &g));
  float v[8], got[16];
  for (int i = 0; i < 8; i++) v[i] = (float)(r * 10 + i);
  dt_tensor *a = NULL, *b = NULL;
  ROK(on_gpu(v, 4, 2, r, &a));
  ROK(dt_comm_all_reduce(g, a, DT_REDUCE_SUM));
  ROK(values_of(a, got, 8));
  for (int i = 0; i < 8; i++) RCHECK(got[i] == (float)(10 + 2 * i), "sum %d: %g", i, got[i]);
  dt_tensor_release(a);
  /* Rank 0 gives 1 row, rank 1 gives 3. */
  int64_t counts[2] = {1, 3};
  ROK(on_gpu(v, counts[r], 2, r, &a));
  float zeros[8] = {0};
  ROK(on_gpu(zeros, 4, 2, r, &b));
  ROK(dt_comm_all_gather_uneven(g, a, b, counts));
  ROK(values_of(b, got, 8));
  float want[8] = {0, 1, 10, 11, 12, 13, 14, 15};
  for (int i = 0; i < 8; i++) RCHECK(got[i] == want[i], "uneven all_gather %d: %g", i, got[i]);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_comm_destroy(g);
  return DT_OK;
}

int main(void) {
  dt_test_require_gpu("test_cuda_nccl");
  int gpus = 0;
  CHECK_OK(dt_cuda_device_count(&gpus));
  CHECK(dt_comm_spawn(1, one_rank, NULL) == DT_OK, "%s", dt_last_error());
  if (gpus >= 2) CHECK(dt_comm_spawn(2, two_ranks, NULL) == DT_OK, "%s", dt_last_error());
  CHECK(atomic_load(&failures) == 0, "%d check(s) failed", atomic_load(&failures));
  return dt_test_result("test_cuda_nccl");
}
#endif
