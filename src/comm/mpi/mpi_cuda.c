/* MPI backend, GPU tensors (a build with MPI and CUDA). The caller's stream is synchronized
 * first (MPI reads memory, not streams). Then either the device pointers go to MPI as they
 * are, when the MPI says it is CUDA-aware (Open MPI's MPIX_Query_cuda_support) and the
 * collective is one the backend never touches on the host (broadcast, send/recv, all_reduce
 * with a predefined MPI reduction: sum/prod of f32/f64, any op of the integers), or this
 * rank's buffers are staged through pinned host memory: copied in before the collective, the
 * host path runs on the copies (every dtype and op, in-place forms included: overlapping
 * buffers share one staging region), and the received bytes are copied back when the
 * collective completes. DT_MPI_CUDA_AWARE=0 forces staging. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/mpi_impl.h"
#include "kernels/cuda/cuda_impl.h"

#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
#include <mpi-ext.h>
#define MP_CAN_QUERY_CUDA 1
#endif

bool dt__mp_cuda_aware(void) {
  const char *env = getenv("DT_MPI_CUDA_AWARE");
  if (env && strcmp(env, "0") == 0) return false;
#ifdef MP_CAN_QUERY_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

/* One rank's staging: up to two regions of device memory (send and recv, merged when they
 * overlap) copied to one pinned host block. */
typedef struct mp_stage {
  int device;
  int n;
  char *dev[2];
  size_t bytes[2];
  size_t at[2];    /* the region's offset in host */
  int recv_region; /* the region to copy back, or -1 */
  char *host;
} mp_stage;

/* The elements of every rank's part together: the rows of counts[0, size) of row_numel each,
 * or size parts of count when counts is NULL (equal parts). */
static int64_t parts_numel(const dt_coll_args *a, const int64_t *counts, int64_t size) {
  if (!counts) return size * a->count;
  int64_t rows = 0;
  for (int i = 0; i < size; i++) rows += counts[i];
  return rows * a->row_numel;
}

/* This rank's send and recv bytes for the call (0 for a NULL buffer). */
static void buffer_bytes(const dt_comm *comm, const dt_coll_args *a, size_t *send, size_t *recv) {
  size_t es = dt_dtype_size(a->dtype);
  int64_t size = comm->size;
  int64_t s = a->count, r = a->count;
  switch (a->kind) {
  case DT_COLL_ALL_GATHER: r = parts_numel(a, a->counts, size); break;
  case DT_COLL_REDUCE_SCATTER: s = parts_numel(a, a->counts, size); break;
  case DT_COLL_ALL_TO_ALL:
    /* recv_counts is read only along with send_counts (rows per peer, or equal parts) */
    s = parts_numel(a, a->send_counts, size);
    r = parts_numel(a, a->send_counts ? a->recv_counts : NULL, size);
    break;
  case DT_COLL_SCATTER: s = size * a->count; break;
  case DT_COLL_GATHER: r = size * a->count; break;
  default: break;
  }
  *send = a->send ? (size_t)s * es : 0;
  *recv = a->recv ? (size_t)r * es : 0;
}

static bool direct_safe(const dt_coll_args *a) {
  switch (a->kind) {
  case DT_COLL_BROADCAST:
  case DT_COLL_SEND:
  case DT_COLL_RECV: return true;
  case DT_COLL_ALL_REDUCE:
    if (a->op == DT_REDUCE_AVG) return false;
    if (a->dtype == DT_F32 || a->dtype == DT_F64) {
      return a->op == DT_REDUCE_SUM || a->op == DT_REDUCE_PROD;
    }
    return a->dtype == DT_I64 || a->dtype == DT_I32 || a->dtype == DT_U8;
  default: return false;
  }
}

static char *host_of(const mp_stage *st, const void *dev) {
  for (int i = 0; i < st->n; i++) {
    const char *p = dev;
    if (p >= st->dev[i] && p < st->dev[i] + st->bytes[i])
      return st->host + st->at[i] + (p - st->dev[i]);
  }
  return NULL;
}

dt_status dt__mp_cuda_begin(dt_comm *comm, dt_work *w) {
  dt_coll_args *a = &w->args;
  const char *op = a->op_name;
  int device = (int)(a->device >> 8);
  cudaStream_t stream;
  dt_status status = dt__cuda_stream(op, device, &stream);
  if (status != DT_OK) return status;
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return dt__cuda_error(op, "cudaStreamSynchronize before MPI", e);
  if (direct_safe(a) && dt__mp_cuda_aware()) return DT_OK; /* MPI reads the device itself */

  size_t send_bytes = 0, recv_bytes = 0;
  buffer_bytes(comm, a, &send_bytes, &recv_bytes);
  mp_stage *st = dt__calloc(sizeof *st);
  if (!st) return dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
  st->device = device;
  st->recv_region = -1;
  char *s0 = (char *)a->send, *r0 = a->recv;
  if (send_bytes && recv_bytes && s0 < r0 + recv_bytes && r0 < s0 + send_bytes) {
    char *lo = s0 < r0 ? s0 : r0;
    char *hi = s0 + send_bytes > r0 + recv_bytes ? s0 + send_bytes : r0 + recv_bytes;
    st->dev[0] = lo;
    st->bytes[0] = (size_t)(hi - lo);
    st->n = 1;
    st->recv_region = 0;
  } else {
    if (send_bytes) {
      st->dev[st->n] = s0;
      st->bytes[st->n++] = send_bytes;
    }
    if (recv_bytes) {
      st->recv_region = st->n;
      st->dev[st->n] = r0;
      st->bytes[st->n++] = recv_bytes;
    }
  }
  size_t total = 0;
  for (int i = 0; i < st->n; i++) {
    st->at[i] = total;
    total += (st->bytes[i] + 63) & ~(size_t)63;
  }
  e = cudaMallocHost((void **)&st->host, total ? total : 64);
  /* The receive region is copied in too: a collective may leave part of it as it was. */
  for (int i = 0; i < st->n && e == cudaSuccess; i++) {
    e = cudaMemcpyAsync(st->host + st->at[i], st->dev[i], st->bytes[i], cudaMemcpyDeviceToHost,
                        stream);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    if (st->host) (void)cudaFreeHost(st->host);
    dt__free(st);
    return dt__cuda_error(op, "staging through pinned host memory", e);
  }
  if (a->send) a->send = host_of(st, a->send);
  if (a->recv) a->recv = host_of(st, a->recv);
  a->device = 0;
  w->backend_ptr[1] = st;
  return DT_OK;
}

dt_status dt__mp_cuda_end(dt_work *w, dt_status status) {
  mp_stage *st = w->backend_ptr[1];
  if (!st) return status;
  w->backend_ptr[1] = NULL;
  if (status == DT_OK && st->recv_region >= 0) {
    const char *op = w->args.op_name;
    int i = st->recv_region;
    cudaStream_t stream;
    status = dt__cuda_stream(op, st->device, &stream);
    if (status == DT_OK) {
      cudaError_t e = cudaMemcpyAsync(st->dev[i], st->host + st->at[i], st->bytes[i],
                                      cudaMemcpyHostToDevice, stream);
      /* The pinned block is freed below: the copy must have read it. */
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) status = dt__cuda_error(op, "copying the received bytes back", e);
    }
  }
  (void)cudaFreeHost(st->host);
  dt__free(st);
  return status;
}
