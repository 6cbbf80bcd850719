/* The CUDA kind's memory: one caching allocator per device over cudaMalloc (its bookkeeping
 * in caching_allocator.c), copies on the calling thread's stream (host copies through pinned
 * staging buffers), and the memory calls of dtensor/cuda.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_impl.h"

/* ---- The allocators ---------------------------------------------------------------------- */

/* The backing allocator of device index: the caller made it the current device. */
static void *backing_alloc(void *context, size_t nbytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, nbytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* out of memory is not sticky: clear it for the retry */
    return NULL;
  }
  return p;
}

static void backing_free(void *context, void *ptr) {
  /* cudaFree waits for the device first: no queued kernel still reads the segment. */
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

/* A block freed from another stream than its own: its stream waits for the freeing stream's
 * work so far before reusing it. Without an event, the freeing stream is waited for. */
static void backing_stream_wait(void *context, uintptr_t owner, uintptr_t freer) {
  cudaEvent_t ev;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
    if (cudaEventRecord(ev, (cudaStream_t)freer) == cudaSuccess &&
        cudaStreamWaitEvent((cudaStream_t)owner, ev, 0) == cudaSuccess) {
      cudaEventDestroy(ev); /* released once it has completed */
      return;
    }
    cudaEventDestroy(ev);
  }
  (void)cudaGetLastError();
  (void)cudaStreamSynchronize((cudaStream_t)freer);
}

static _Atomic(dt_caching_allocator *) allocators[DT__CUDA_MAX_DEVICES];
static pthread_mutex_t allocators_lock = PTHREAD_MUTEX_INITIALIZER;

/* Device index's allocator, created on first use; NULL when the host is out of memory. */
static dt_caching_allocator *allocator_of(int index) {
  dt_caching_allocator *a = atomic_load_explicit(&allocators[index], memory_order_acquire);
  if (DT_LIKELY(a != NULL)) return a;
  pthread_mutex_lock(&allocators_lock);
  a = atomic_load_explicit(&allocators[index], memory_order_relaxed);
  if (!a) {
    dt_block_backing backing = {.context = NULL,
                                .alloc = backing_alloc,
                                .free = backing_free,
                                .stream_wait = backing_stream_wait};
    a = dt__caching_allocator_create(&backing);
    atomic_store_explicit(&allocators[index], a, memory_order_release);
  }
  pthread_mutex_unlock(&allocators_lock);
  return a;
}

static int cuda_count(void) { return dt__cuda_count(); }

static const char *cuda_absent(void) { return dt__cuda_absent_reason(); }

static void *cuda_alloc(int index, size_t nbytes) {
  cudaStream_t stream;
  if (dt__cuda_stream("allocate", index, &stream)) return NULL;
  dt_caching_allocator *a = allocator_of(index);
  return a ? dt__caching_allocator_alloc(a, nbytes, (uintptr_t)stream) : NULL;
}

static void cuda_free(int index, void *ptr) {
  cudaStream_t stream;
  dt_caching_allocator *a = atomic_load_explicit(&allocators[index], memory_order_acquire);
  if (!a || dt__cuda_stream("free", index, &stream)) return;
  if (!dt__caching_allocator_free(a, ptr, (uintptr_t)stream))
    dt__log(DT_LOG_ERROR, "cuda:%d: freeing %p, which its allocator did not hand out", index, ptr);
}

void *dt__cuda_device_alloc(int index, size_t nbytes) { return cuda_alloc(index, nbytes); }

void dt__cuda_device_free(int index, void *ptr) {
  if (ptr) cuda_free(index, ptr);
}

/* ---- Copies ------------------------------------------------------------------------------ */

/* Host copies of at least this many bytes go through the thread's pinned staging buffers, two
 * of them, so that the host's memcpy of one chunk overlaps the DMA of the other. Smaller ones
 * are one cudaMemcpyAsync from pageable memory (the driver stages those). */
#define STAGING_MIN ((size_t)1 << 20)
#define STAGING_CHUNK ((size_t)4 << 20)

typedef struct staging {
  void *buffer[2];
  cudaEvent_t done[2]; /* the last copy that used buffer[i] */
  bool pending[2];
} staging;

static void free_staging(int device, void *slot) {
  staging *s = slot;
  for (int i = 0; i < 2; i++) {
    if (s->done[i]) cudaEventSynchronize(s->done[i]), cudaEventDestroy(s->done[i]);
    if (s->buffer[i]) cudaFreeHost(s->buffer[i]);
  }
}

static dt_cuda_thread_table staging_table = DT_CUDA_THREAD_TABLE_INIT(staging, free_staging);
static _Thread_local staging *my_staging; /* one per device */

/* The thread's staging buffers for device index (the current device), or NULL when pinned
 * memory is not to be had (the copy then goes from pageable memory). */
static staging *staging_of(int index) {
  if (!my_staging) {
    my_staging = dt__cuda_thread_slots(&staging_table, (void **)&my_staging);
    if (!my_staging) return NULL;
  }
  staging *s = &my_staging[index];
  for (int i = 0; i < 2; i++) {
    if (!s->buffer[i] && cudaHostAlloc(&s->buffer[i], STAGING_CHUNK, cudaHostAllocPortable)) {
      s->buffer[i] = NULL;
      (void)cudaGetLastError();
      return NULL;
    }
    if (!s->done[i] && cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming)) {
      s->done[i] = NULL;
      (void)cudaGetLastError();
      return NULL;
    }
  }
  return s;
}

/* Waits until buffer i is no longer read or written by a queued copy. */
static cudaError_t staging_wait(staging *s, int i) {
  if (!s->pending[i]) return cudaSuccess;
  s->pending[i] = false;
  return cudaEventSynchronize(s->done[i]);
}

static cudaError_t staged_from_host(staging *s, cudaStream_t stream, char *dev, const char *host,
                                    size_t nbytes) {
  cudaError_t e = cudaSuccess;
  for (size_t off = 0, i = 0; off < nbytes && !e; off += STAGING_CHUNK, i ^= 1) {
    size_t len = nbytes - off < STAGING_CHUNK ? nbytes - off : STAGING_CHUNK;
    if ((e = staging_wait(s, (int)i))) break;
    memcpy(s->buffer[i], host + off, len);
    e = cudaMemcpyAsync(dev + off, s->buffer[i], len, cudaMemcpyHostToDevice, stream);
    if (!e) e = cudaEventRecord(s->done[i], stream);
    if (!e) s->pending[i] = true;
  }
  /* The host's bytes are all in staging or on the device: the caller may reuse them. */
  return e;
}

static cudaError_t staged_to_host(staging *s, cudaStream_t stream, char *host, const char *dev,
                                  size_t nbytes) {
  size_t n_chunks = (nbytes + STAGING_CHUNK - 1) / STAGING_CHUNK;
  cudaError_t e = cudaSuccess;
  /* Chunk k+1's DMA is queued before chunk k is copied out of its buffer. */
  for (size_t k = 0; k <= n_chunks && !e; k++) {
    if (k < n_chunks) {
      int i = (int)(k & 1);
      size_t off = k * STAGING_CHUNK;
      size_t len = nbytes - off < STAGING_CHUNK ? nbytes - off : STAGING_CHUNK;
      if ((e = staging_wait(s, i))) break;
      e = cudaMemcpyAsync(s->buffer[i], dev + off, len, cudaMemcpyDeviceToHost, stream);
      if (!e) e = cudaEventRecord(s->done[i], stream);
      if (!e) s->pending[i] = true;
    }
    if (k > 0 && !e) {
      int i = (int)((k - 1) & 1);
      size_t off = (k - 1) * STAGING_CHUNK;
      size_t len = nbytes - off < STAGING_CHUNK ? nbytes - off : STAGING_CHUNK;
      if ((e = staging_wait(s, i))) break;
      memcpy(host + off, s->buffer[i], len);
    }
  }
  return e;
}

/* A copy between the host and device index's memory on the thread's stream: through the
 * pinned staging buffers from STAGING_MIN bytes, otherwise one cudaMemcpyAsync. Either way the
 * call returns once the host's bytes may be used (to the host: they have arrived) or reused
 * (from the host: they have been read). */
static dt_status host_copy(const char *op, int index, bool to_host, void *dst, const void *src,
                           size_t nbytes) {
  cudaStream_t stream;
  dt_status st = dt__cuda_stream(op, index, &stream);
  if (st) return st;
  staging *s = nbytes >= STAGING_MIN ? staging_of(index) : NULL;
  cudaError_t e;
  if (s) {
    e = to_host ? staged_to_host(s, stream, dst, src, nbytes)
                : staged_from_host(s, stream, dst, src, nbytes);
  } else {
    /* From pageable memory the call returns once the source has been read. */
    e = cudaMemcpyAsync(dst, src, nbytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                        stream);
    if (!e && to_host) e = cudaStreamSynchronize(stream);
  }
  return e ? dt__cuda_error(op, "cudaMemcpyAsync", e) : DT_OK;
}

static dt_status cuda_to_host(int index, void *host, const void *dev, size_t nbytes) {
  return host_copy("copy to the CPU", index, true, host, dev, nbytes);
}

static dt_status cuda_from_host(int index, void *dev, const void *host, size_t nbytes) {
  return host_copy("copy from the CPU", index, false, dev, host, nbytes);
}

/* `waiter` (on the current device) waits for the work queued so far on `stream`, which is on
 * device `device`; the current device is device `current` again afterwards. */
static cudaError_t wait_for(cudaStream_t waiter, int current, cudaStream_t stream, int device) {
  cudaEvent_t ev;
  cudaError_t e = cudaSetDevice(device);
  if (!e) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e) return e;
  e = cudaEventRecord(ev, stream);
  if (!e) e = cudaSetDevice(current);
  if (!e) e = cudaStreamWaitEvent(waiter, ev, 0);
  cudaEventDestroy(ev);
  return e;
}

static dt_status cuda_within(int dst_index, void *dst, int src_index, const void *src,
                             size_t nbytes) {
  static const char op[] = "copy between CUDA devices";
  cudaStream_t dst_stream, src_stream;
  dt_status st = dt__cuda_stream(op, src_index, &src_stream);
  if (!st) st = dt__cuda_stream(op, dst_index, &dst_stream);
  if (st) return st;
  if (dst_index == src_index) {
    cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, dst_stream);
    return e ? dt__cuda_error(op, "cudaMemcpyAsync", e) : DT_OK;
  }
  /* The copy runs on the destination's stream after the source's producers, and the source's
   * stream waits for it before anything there may overwrite or reuse the source. */
  cudaError_t e = wait_for(dst_stream, dst_index, src_stream, src_index);
  if (!e) e = cudaMemcpyPeerAsync(dst, dst_index, src, src_index, nbytes, dst_stream);
  if (!e) e = wait_for(src_stream, src_index, dst_stream, dst_index);
  if (!e) e = cudaSetDevice(dst_index);
  return e ? dt__cuda_error(op, "cudaMemcpyPeerAsync", e) : DT_OK;
}

const dt_device_memory dt__cuda_memory = {.name = "cuda",
                                          .host_accessible = false,
                                          .count = cuda_count,
                                          .absent = cuda_absent,
                                          .alloc = cuda_alloc,
                                          .free = cuda_free,
                                          .to_host = cuda_to_host,
                                          .from_host = cuda_from_host,
                                          .within = cuda_within};

/* ---- Public calls ------------------------------------------------------------------------ */

dt_status dt_cuda_memory_stats(int device, dt_cuda_allocator_stats *out) {
  static const char op[] = "dt_cuda_memory_stats";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = (dt_cuda_allocator_stats){0};
  dt_status st = dt__cuda_check_device(op, device);
  if (st) return st;
  dt_caching_allocator *a = atomic_load_explicit(&allocators[device], memory_order_acquire);
  if (a) dt__caching_allocator_stats(a, out);
  return DT_OK;
}

/* Runs fn on device `device`'s allocator, or on every device's for -1. */
static dt_status each_allocator(const char *op, int device, void (*fn)(dt_caching_allocator *)) {
  int n = dt__cuda_count();
  if (device != -1 || n == 0) {
    dt_status st = dt__cuda_check_device(op, device == -1 ? 0 : device);
    if (st) return st;
  }
  int first = device == -1 ? 0 : device, last = device == -1 ? n - 1 : device;
  for (int d = first; d <= last; d++) {
    dt_caching_allocator *a = atomic_load_explicit(&allocators[d], memory_order_acquire);
    if (!a) continue;
    dt_status st = dt__cuda_use_device(op, d);
    if (st) return st;
    fn(a);
  }
  return DT_OK;
}

static void empty_one(dt_caching_allocator *a) { (void)dt__caching_allocator_empty_cache(a); }

dt_status dt_cuda_empty_cache(int device) {
  return each_allocator("dt_cuda_empty_cache", device, empty_one);
}

dt_status dt_cuda_reset_peak_memory_stats(int device) {
  return each_allocator("dt_cuda_reset_peak_memory_stats", device,
                        dt__caching_allocator_reset_peak);
}
