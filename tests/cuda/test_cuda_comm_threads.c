/*
 * The threads backend on CUDA memory (docs/gpu-distributed.md): ranks are threads sharing the
 * GPUs (rank r on cuda:r % count; on one GPU all share cuda:0). Every collective of the
 * interface on CUDA tensors, and every reduction op on every dtype, compared with the same
 * collective on CPU tensors (the CPU path, itself checked against naive loops in
 * tests/test_comm_threads*.c) bit for bit, and f32 sums with a naive loop here. Skips (77)
 * without a GPU.
 */
#include <stdatomic.h>
#include <string.h>

#include "cuda/cuda_test.h"

#define RANKS 4
#define N 1000 /* elements per rank: not a multiple of anything the kernel uses */

static int devices;
static atomic_int failures;

#define RCHECK(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      atomic_fetch_add(&failures, 1);                                                              \
      fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", r, __FILE__, __LINE__, #cond);         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

#define ROK(call)                                                                                  \
  do {                                                                                             \
    dt_status rok_ = (call);                                                                       \
    if (rok_ != DT_OK) {                                                                           \
      atomic_fetch_add(&failures, 1);                                                              \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", r, __FILE__, __LINE__, #call, dt_last_error());  \
      return rok_;                                                                                 \
    }                                                                                              \
  } while (0)

/* Rank r's element i as a double every dtype holds exactly. */
static double value(dt_dtype dtype, int r, int64_t i) {
  int64_t k = (int64_t)r * 7 + i * 3 + 1;
  if (dtype == DT_BOOL) return (double)(k % 3 == 0);
  if (dtype == DT_U8) return (double)(k % 9);
  return (double)(k % 9 - 4) + (dtype == DT_F32 || dtype == DT_F64 ? 0.25 * (double)(i % 4) : 0);
}

static dt_status make(dt_dtype dtype, int r, int64_t rows, int64_t cols, int seed, dt_device device,
                      dt_tensor **out) {
  dt_tensor *host = NULL;
  int64_t shape[2] = {rows, cols};
  dt_status st = dt_empty(2, shape, dtype, &host);
  if (st) return st;
  for (int64_t i = 0; i < rows * cols; i++) {
    int64_t index[2] = {i / cols, i % cols};
    st = dt_tensor_set(host, index, value(dtype, r * 13 + seed, i));
    if (st) return st;
  }
  if (device.kind == DT_DEVICE_CPU) {
    *out = host;
    return DT_OK;
  }
  st = dt_to_device(host, device, out);
  dt_tensor_release(host);
  return st;
}

/* True when t (any device) holds exactly the bytes of `want` (CPU). */
static bool same_bytes(dt_tensor *t, dt_tensor *want) {
  dt_tensor *h = NULL;
  if (dt_to_device(t, DT_DEVICE_CPU_VALUE, &h) != DT_OK) return false;
  size_t n = (size_t)dt_tensor_numel(h) * dt_dtype_size(dt_tensor_dtype(h));
  bool same = n == (size_t)dt_tensor_numel(want) * dt_dtype_size(dt_tensor_dtype(want)) &&
              memcmp(dt_tensor_data(h), dt_tensor_data(want), n) == 0;
  dt_tensor_release(h);
  return same;
}

/* The same collective on the GPU and on the CPU: run(comm, in, out) on both, compare out. */
typedef dt_status (*coll_fn)(dt_comm *w, dt_tensor *in, dt_tensor *out, int variant);

static dt_status both(dt_comm *w, dt_dtype dtype, int64_t in_rows, int64_t out_rows, coll_fn fn,
                      int variant, const char *what) {
  int r = dt_comm_rank(w);
  dt_device gpu = {DT_DEVICE_CUDA, r % devices};
  dt_tensor *gi = NULL, *go = NULL, *ci = NULL, *co = NULL;
  ROK(make(dtype, r, in_rows, 5, 0, gpu, &gi));
  ROK(make(dtype, r, out_rows, 5, 1, gpu, &go));
  ROK(make(dtype, r, in_rows, 5, 0, DT_DEVICE_CPU_VALUE, &ci));
  ROK(make(dtype, r, out_rows, 5, 1, DT_DEVICE_CPU_VALUE, &co));
  ROK(fn(w, gi, go, variant));
  ROK(fn(w, ci, co, variant));
  RCHECK(same_bytes(go, co), "%s (%s, variant %d): the GPU's result differs from the CPU's", what,
         dt_dtype_name(dtype), variant);
  /* The input too: all_reduce and broadcast write their result there (in place), and the
   * other collectives must leave it as it was. */
  RCHECK(same_bytes(gi, ci),
         "%s (%s, variant %d): the GPU's input tensor (the in-place result) "
         "differs from the CPU's",
         what, dt_dtype_name(dtype), variant);
  dt_tensor_release(gi);
  dt_tensor_release(go);
  dt_tensor_release(ci);
  dt_tensor_release(co);
  return DT_OK;
}

static dt_status all_reduce(dt_comm *w, dt_tensor *in, dt_tensor *out, int op) {
  (void)out;
  return dt_comm_all_reduce(w, in, (dt_reduce_op)op);
}
static dt_status all_gather(dt_comm *w, dt_tensor *in, dt_tensor *out, int v) {
  (void)v;
  return dt_comm_all_gather_into_tensor(w, in, out);
}
static const int64_t uneven[RANKS] = {3, 0, 5, 1};
static dt_status all_gather_uneven(dt_comm *w, dt_tensor *in, dt_tensor *out, int v) {
  (void)v;
  return dt_comm_all_gather_uneven(w, in, out, uneven);
}
static dt_status reduce_scatter(dt_comm *w, dt_tensor *in, dt_tensor *out, int op) {
  return dt_comm_reduce_scatter_tensor(w, in, out, (dt_reduce_op)op);
}
static dt_status reduce_scatter_uneven(dt_comm *w, dt_tensor *in, dt_tensor *out, int op) {
  return dt_comm_reduce_scatter_uneven(w, in, out, uneven, (dt_reduce_op)op);
}
static dt_status all_to_all(dt_comm *w, dt_tensor *in, dt_tensor *out, int v) {
  (void)v;
  return dt_comm_all_to_all(w, in, out, NULL, NULL);
}
static dt_status broadcast(dt_comm *w, dt_tensor *in, dt_tensor *out, int root) {
  (void)out;
  return dt_comm_broadcast(w, in, root);
}
static dt_status ring(dt_comm *w, dt_tensor *in, dt_tensor *out, int v) {
  (void)v;
  int r = dt_comm_rank(w), n = dt_comm_size(w);
  dt_work *s = NULL;
  dt_status st = dt_comm_send_async(w, in, (r + 1) % n, &s);
  if (st) return st;
  st = dt_comm_recv(w, out, (r + n - 1) % n);
  dt_status ws = dt_work_wait(s);
  dt_work_destroy(s);
  return st ? st : ws;
}

static dt_status rank_fn(dt_comm *w, void *arg) {
  (void)arg;
  int r = dt_comm_rank(w), n = dt_comm_size(w);
  static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16,
                                    DT_I64, DT_I32, DT_U8,   DT_BOOL};
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
    dt_dtype t = dtypes[d];
    bool floating = dt_dtype_is_floating(t);
    for (int op = DT_REDUCE_SUM; op <= DT_REDUCE_PROD; op++) {
      if (op == DT_REDUCE_AVG && !floating) continue;
      ROK(both(w, t, N / 5, N / 5, all_reduce, op, "all_reduce"));
      ROK(both(w, t, 4 * n, 4, reduce_scatter, op, "reduce_scatter"));
      ROK(both(w, t, 9, uneven[r], reduce_scatter_uneven, op, "reduce_scatter_uneven"));
    }
    ROK(both(w, t, 6, 6 * n, all_gather, 0, "all_gather"));
    ROK(both(w, t, uneven[r], 9, all_gather_uneven, 0, "all_gather_uneven"));
    ROK(both(w, t, 2 * n, 2 * n, all_to_all, 0, "all_to_all"));
    ROK(both(w, t, 7, 7, broadcast, 2, "broadcast"));
    ROK(both(w, t, 3, 3, ring, 0, "send/recv"));
  }
  /* f32 sum against a naive loop, and an async all_reduce overlapping queued work. */
  dt_device gpu = {DT_DEVICE_CUDA, r % devices};
  dt_tensor *a = NULL;
  ROK(make(DT_F32, r, N / 5, 5, 0, gpu, &a));
  dt_work *work = NULL;
  ROK(dt_comm_all_reduce_async(w, a, DT_REDUCE_SUM, &work));
  ROK(dt_work_wait(work));
  dt_work_destroy(work);
  dt_tensor *h = NULL;
  ROK(dt_to_device(a, DT_DEVICE_CPU_VALUE, &h));
  const float *got = dt_tensor_data(h);
  for (int64_t i = 0; i < N; i++) {
    float want = 0;
    for (int s = 0; s < n; s++) want += (float)value(DT_F32, s * 13, i);
    RCHECK(got[i] == want, "all_reduce f32 element %lld: %g, expected %g", (long long)i,
           (double)got[i], (double)want);
    if (got[i] != want) break;
  }
  dt_tensor_release(h);
  dt_tensor_release(a);
  return DT_OK;
}

int main(void) {
  dt_test_require_gpu("test_cuda_comm_threads");
  CHECK_OK(dt_cuda_device_count(&devices));
  printf("test_cuda_comm_threads: %d ranks on %d GPU%s\n", RANKS, devices, devices == 1 ? "" : "s");
  dt_status st = dt_comm_spawn(RANKS, rank_fn, NULL);
  CHECK(st == DT_OK, "%s", dt_last_error());
  CHECK(atomic_load(&failures) == 0, "%d rank check(s) failed", atomic_load(&failures));
  return dt_test_result("test_cuda_comm_threads");
}
