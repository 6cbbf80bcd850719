/* The CUDA runtime as the library uses it: the device count (once per process, never from a
 * constructor: the runtime starts on first use), each thread's current device and stream,
 * CUDA errors as dt_status, and the public calls of dtensor/cuda.h that are not memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/thread_key.h"
#include "kernels/cuda/cuda_impl.h"

/* ---- Devices ----------------------------------------------------------------------------- */

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int device_count;
static char absent_reason[256];

static void count_devices(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* No driver, a driver older than the runtime, no device: all mean "no GPU here". */
    snprintf(absent_reason, sizeof absent_reason, "no CUDA device (cudaGetDeviceCount: %s: %s)",
             cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    n = 0;
  } else if (n == 0) {
    snprintf(absent_reason, sizeof absent_reason, "no CUDA device (the driver reports none)");
  }
  device_count = n < DT__CUDA_MAX_DEVICES ? n : DT__CUDA_MAX_DEVICES;
}

int dt__cuda_count(void) {
  pthread_once(&count_once, count_devices);
  return device_count;
}

const char *dt__cuda_absent_reason(void) {
  pthread_once(&count_once, count_devices);
  return absent_reason;
}

dt_status dt__cuda_check_device(const char *op, int index) {
  int n = dt__cuda_count();
  if (n == 0) return dt__error(DT_ERR_UNSUPPORTED, "%s: %s", op, absent_reason);
  if (index < 0 || index >= n) {
    return dt__error(DT_ERR_INVALID, "%s: device cuda:%d does not exist (%d CUDA device%s)", op,
                     index, n, n == 1 ? "" : "s");
  }
  return DT_OK;
}

dt_status dt__cuda_failure(const char *op, const char *what, bool out_of_memory, bool unsupported,
                           const char *name, const char *description) {
  dt_status status = out_of_memory ? DT_ERR_NOMEM
                     : unsupported ? DT_ERR_UNSUPPORTED
                                   : DT_ERR_INTERNAL;
  return dt__error(status, "%s: %s: %s: %s", op, what, name, description);
}

dt_status dt__cuda_error(const char *op, const char *what, cudaError_t error) {
  (void)cudaGetLastError();
  return dt__cuda_failure(op, what, error == cudaErrorMemoryAllocation,
                          error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver,
                          cudaGetErrorName(error), cudaGetErrorString(error));
}

/* ---- The calling thread's device and streams --------------------------------------------- */

/* Streams that threads gave back, per device: a thread that exits returns its streams here,
 * and the next thread takes them, so no stream is ever destroyed while a cached block may
 * still name it. */
typedef struct stream_pool {
  pthread_mutex_t lock;
  cudaStream_t *streams;
  int n, capacity;
} stream_pool;

static stream_pool pools[DT__CUDA_MAX_DEVICES];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;

static void init_pools(void) {
  for (int i = 0; i < DT__CUDA_MAX_DEVICES; i++) pthread_mutex_init(&pools[i].lock, NULL);
}

static void give_back_stream(int device, void *slot) {
  cudaStream_t stream = *(cudaStream_t *)slot;
  if (!stream) return;
  stream_pool *p = &pools[device];
  pthread_mutex_lock(&p->lock);
  if (p->n == p->capacity) {
    int capacity = p->capacity ? 2 * p->capacity : 8;
    cudaStream_t *grown = realloc(p->streams, sizeof *grown * (size_t)capacity);
    if (grown) {
      p->streams = grown;
      p->capacity = capacity;
    }
  }
  /* Without room the stream is leaked to the driver, never destroyed under a cached block. */
  if (p->n < p->capacity) p->streams[p->n++] = stream;
  pthread_mutex_unlock(&p->lock);
}

static dt_cuda_thread_table streams_table =
    DT_CUDA_THREAD_TABLE_INIT(cudaStream_t, give_back_stream);
static _Thread_local cudaStream_t *my_streams; /* one per device */

/* Asks the runtime each time (a thread-local read there) rather than caching the device: the
 * user's own code may call cudaSetDevice between two of ours. */
dt_status dt__cuda_use_device(const char *op, int index) {
  int current = -1;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess && current == index) return DT_OK;
  e = cudaSetDevice(index);
  if (e != cudaSuccess) return dt__cuda_error(op, "cudaSetDevice", e);
  return DT_OK;
}

static dt_status take_stream(const char *op, int index, cudaStream_t *out) {
  pthread_once(&pools_once, init_pools);
  stream_pool *p = &pools[index];
  cudaStream_t s = NULL;
  pthread_mutex_lock(&p->lock);
  if (p->n > 0) s = p->streams[--p->n];
  pthread_mutex_unlock(&p->lock);
  if (!s) {
    /* Non-blocking: the legacy default stream, which other libraries may use, does not
     * serialise with it. */
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return dt__cuda_error(op, "cudaStreamCreateWithFlags", e);
  }
  *out = s;
  return DT_OK;
}

dt_status dt__cuda_stream(const char *op, int index, cudaStream_t *out) {
  dt_status st = dt__cuda_use_device(op, index);
  if (st) return st;
  if (DT_LIKELY(my_streams && my_streams[index])) {
    *out = my_streams[index];
    return DT_OK;
  }
  if (!my_streams) {
    my_streams = dt__cuda_thread_slots(&streams_table, (void **)&my_streams);
    if (!my_streams) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate the thread's streams", op);
  }
  st = take_stream(op, index, &my_streams[index]);
  if (!st) *out = my_streams[index];
  return st;
}

/* ---- Public calls ------------------------------------------------------------------------ */

dt_status dt_cuda_device_count(int *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_cuda_device_count: out is NULL");
  *out = dt__cuda_count();
  return DT_OK;
}

bool dt_cuda_is_available(void) { return dt__cuda_count() > 0; }

static dt_status synchronize_one(int index) {
  static const char op[] = "dt_cuda_synchronize";
  dt_status st = dt__cuda_use_device(op, index);
  if (st) return st;
  cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? DT_OK : dt__cuda_error(op, "cudaDeviceSynchronize", e);
}

dt_status dt_cuda_synchronize(int device) {
  static const char op[] = "dt_cuda_synchronize";
  if (device != -1) {
    dt_status st = dt__cuda_check_device(op, device);
    return st ? st : synchronize_one(device);
  }
  int n = dt__cuda_count();
  if (n == 0) return dt__cuda_check_device(op, 0);
  for (int d = 0; d < n; d++) {
    dt_status st = synchronize_one(d);
    if (st) return st;
  }
  return DT_OK;
}

static atomic_bool allow_tf32;

bool dt__cuda_allow_tf32(void) { return atomic_load_explicit(&allow_tf32, memory_order_relaxed); }

dt_status dt_cuda_set_allow_tf32(bool allow) {
  atomic_store_explicit(&allow_tf32, allow, memory_order_relaxed);
  return DT_OK;
}

dt_status dt_cuda_get_allow_tf32(bool *out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_cuda_get_allow_tf32: out is NULL");
  *out = dt__cuda_allow_tf32();
  return DT_OK;
}
