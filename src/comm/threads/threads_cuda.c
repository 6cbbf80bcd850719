/* The threads backend's mover for CUDA memory (th_device_ops, threads_impl.h); a CUDA build
 * only. Ranks are threads, each with its own current stream per device (kernels/cuda). A
 * rank's marker is a CUDA event recorded on its stream when it posts; the collective is queued
 * on the stream of the rank whose thread runs it, after a cudaStreamWaitEvent on every
 * party's event: device-to-device copies (cudaMemcpyAsync on one GPU, cudaMemcpyPeerAsync
 * between GPUs) and the reduction kernel (threads_cuda_reduce.cu), then an event every party's
 * stream waits for. The host never waits for the device here.
 *
 * Between GPUs the kernel reads and writes peer memory directly where peer access can be
 * enabled; otherwise the buffers of the other GPUs are staged through stream-ordered scratch
 * (cudaMallocAsync) on the running GPU with cudaMemcpyPeerAsync. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "comm/threads/threads_cuda.h"
#include "comm/threads/threads_impl.h"
#include "kernels/cuda/cuda_impl.h"

/* ---- Events, pooled per device ---------------------------------------------------------- */

typedef struct cu_marker {
  cudaEvent_t event;
  int device;
  struct cu_marker *next;
} cu_marker;

static struct {
  pthread_mutex_t lock;
  cu_marker *free;
} pools[DT__CUDA_MAX_DEVICES];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;

static void init_pools(void) {
  for (int i = 0; i < DT__CUDA_MAX_DEVICES; i++) pthread_mutex_init(&pools[i].lock, NULL);
}

/* An event of `device` (the current device), from the pool or new. */
static cu_marker *take_marker(const char *op, int device, dt_status *status) {
  pthread_once(&pools_once, init_pools);
  pthread_mutex_lock(&pools[device].lock);
  cu_marker *m = pools[device].free;
  if (m) pools[device].free = m->next;
  pthread_mutex_unlock(&pools[device].lock);
  if (m) return m;
  m = dt__alloc(sizeof *m);
  if (!m) {
    *status = dt__error(DT_ERR_NOMEM, "%s: out of memory for a CUDA event", op);
    return NULL;
  }
  cudaError_t e = cudaEventCreateWithFlags(&m->event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    dt__free(m);
    *status = dt__cuda_error(op, "cudaEventCreateWithFlags", e);
    return NULL;
  }
  m->device = device;
  return m;
}

/* Back to the pool. A stream that waited for the event keeps the state it captured, so the
 * event may be recorded again at once. Events are never destroyed (the pool lives as long as
 * the process, like the streams). */
static void cu_release(void *marker) {
  cu_marker *m = marker;
  if (!m) return;
  pthread_mutex_lock(&pools[m->device].lock);
  m->next = pools[m->device].free;
  pools[m->device].free = m;
  pthread_mutex_unlock(&pools[m->device].lock);
}

static dt_status record(const char *op, int device, cudaStream_t stream, void **out) {
  dt_status status = DT_OK;
  cu_marker *m = take_marker(op, device, &status);
  if (!m) return status;
  cudaError_t e = cudaEventRecord(m->event, stream);
  if (e != cudaSuccess) {
    cu_release(m);
    return dt__cuda_error(op, "cudaEventRecord", e);
  }
  *out = m;
  return DT_OK;
}

static dt_status cu_mark(const char *op, int device, void **out) {
  cudaStream_t stream;
  dt_status status = dt__cuda_stream(op, device, &stream);
  if (status != DT_OK) return status;
  return record(op, device, stream, out);
}

static dt_status cu_wait(const char *op, int device, void *done) {
  cudaStream_t stream;
  dt_status status = dt__cuda_stream(op, device, &stream);
  if (status != DT_OK) return status;
  cudaError_t e = cudaStreamWaitEvent(stream, ((cu_marker *)done)->event, 0);
  return e == cudaSuccess ? DT_OK : dt__cuda_error(op, "cudaStreamWaitEvent", e);
}

/* ---- Peer access ------------------------------------------------------------------------ */

enum { PEER_UNKNOWN = 0, PEER_YES = 1, PEER_NO = 2 };
static atomic_int peer_state[DT__CUDA_MAX_DEVICES][DT__CUDA_MAX_DEVICES];

/* True when kernels on `device` (the current device) may address memory of `other`. */
static bool reachable(int device, int other) {
  if (device == other) return true;
  int state = atomic_load(&peer_state[device][other]);
  if (state != PEER_UNKNOWN) return state == PEER_YES;
  int can = 0;
  bool yes = cudaDeviceCanAccessPeer(&can, device, other) == cudaSuccess && can;
  if (yes) {
    cudaError_t e = cudaDeviceEnablePeerAccess(other, 0);
    yes = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
  }
  (void)cudaGetLastError();
  atomic_store(&peer_state[device][other], yes ? PEER_YES : PEER_NO);
  return yes;
}

/* ---- A run: everything one collective queues -------------------------------------------- */

typedef struct cu_run {
  const char *op;
  int device;
  cudaStream_t stream;
} cu_run;

static dt_status cu_begin(const char *op, int device, void *const *markers, int n, void **out) {
  cu_run *run = dt__alloc(sizeof *run);
  if (!run) return dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
  *run = (cu_run){.op = op, .device = device};
  dt_status status = dt__cuda_stream(op, device, &run->stream);
  for (int i = 0; i < n && status == DT_OK; i++) {
    cudaError_t e = cudaStreamWaitEvent(run->stream, ((cu_marker *)markers[i])->event, 0);
    if (e != cudaSuccess) status = dt__cuda_error(op, "cudaStreamWaitEvent", e);
  }
  if (status != DT_OK) {
    dt__free(run);
    return status;
  }
  *out = run;
  return DT_OK;
}

static dt_status cu_copy(void *state, int dst_device, void *dst, int src_device, const void *src,
                         size_t bytes) {
  cu_run *run = state;
  if (bytes == 0) return DT_OK;
  cudaError_t e = dst_device == src_device
                      ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, run->stream)
                      : cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, run->stream);
  if (e != cudaSuccess) {
    return dt__cuda_error(run->op,
                          dst_device == src_device ? "cudaMemcpyAsync" : "cudaMemcpyPeerAsync", e);
  }
  return DT_OK;
}

/* Stream-ordered scratch on the run's device, freed in stream order by release_scratch. */
static dt_status scratch(cu_run *run, size_t bytes, void **out) {
  cudaError_t e = cudaMallocAsync(out, bytes, run->stream);
  if (e != cudaSuccess) {
    *out = NULL;
    return dt__cuda_error(run->op, "cudaMallocAsync (staging between GPUs)", e);
  }
  return DT_OK;
}

static dt_status cu_reduce(void *state, dt_dtype dtype, dt_reduce_op op, int nsrc,
                           const void *const *src, const int *src_devices, int ndst,
                           void *const *dst, const int *dst_devices, int64_t n, int world) {
  cu_run *run = state;
  size_t bytes = (size_t)n * dt_dtype_size(dtype);
  const void **srcs = dt__alloc(sizeof *srcs * (size_t)nsrc);
  void **dsts = dt__alloc(sizeof *dsts * (size_t)ndst);
  void **staged = dt__calloc(sizeof *staged * (size_t)(nsrc + 1));
  dt_status status = DT_OK;
  if (!srcs || !dsts || !staged) status = dt__error(DT_ERR_NOMEM, "%s: out of memory", run->op);
  /* Sources another GPU holds and this one cannot address: copied here first. */
  for (int i = 0; i < nsrc && status == DT_OK; i++) {
    srcs[i] = src[i];
    if (reachable(run->device, src_devices[i])) continue;
    status = scratch(run, bytes, &staged[i]);
    if (status == DT_OK)
      status = cu_copy(run, run->device, staged[i], src_devices[i], src[i], bytes);
    srcs[i] = staged[i];
  }
  /* Destinations it cannot address: the result goes to one scratch buffer, copied out. */
  bool copy_out = false;
  for (int j = 0; j < ndst && status == DT_OK; j++) {
    dsts[j] = dst[j];
    if (reachable(run->device, dst_devices[j])) continue;
    if (!staged[nsrc]) status = scratch(run, bytes, &staged[nsrc]);
    dsts[j] = staged[nsrc];
    copy_out = true;
  }
  if (status == DT_OK) {
    cudaError_t e =
        dt__cuda_reduce_launch(dtype, op, nsrc, srcs, ndst, dsts, n, world, run->stream);
    if (e != cudaSuccess) status = dt__cuda_error(run->op, "the reduction kernel", e);
  }
  for (int j = 0; copy_out && j < ndst && status == DT_OK; j++) {
    if (dsts[j] == staged[nsrc]) {
      status = cu_copy(run, dst_devices[j], dst[j], run->device, staged[nsrc], bytes);
    }
  }
  for (int i = 0; staged && i <= nsrc; i++) {
    if (staged[i]) (void)cudaFreeAsync(staged[i], run->stream);
  }
  dt__free(srcs);
  dt__free(dsts);
  dt__free(staged);
  return status;
}

static dt_status cu_end(void *state, dt_status so_far, void **done) {
  cu_run *run = state;
  *done = NULL;
  dt_status status = so_far;
  if (status == DT_OK) status = record(run->op, run->device, run->stream, done);
  dt__free(run);
  return status;
}

const th_device_ops dt__th_cuda_ops = {.mark = cu_mark,
                                       .begin = cu_begin,
                                       .copy = cu_copy,
                                       .reduce = cu_reduce,
                                       .end = cu_end,
                                       .wait = cu_wait,
                                       .release = cu_release};
