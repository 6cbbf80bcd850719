/*
 * Activations and gradients between pp ranks: a fixed-size int64 header (what the message is,
 * the dtype, local and global shapes, placements), then the payload, both with the comm
 * layer's send/recv (every backend: threads, MPI). Sends are asynchronous with at most
 * DT_PP_SEND_WINDOW transfers outstanding per peer (the bound the schedule validation
 * simulates); receives wait, into buffers kept in a pool and reused.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "pipeline/pipeline_impl.h"

/* kind, stage, microbatch, dtype, ndim, n_placements, local[8], global[8], 3 per placement */
#define HEADER_LEN (6 + 2 * DT_PP_MAX_DIMS + 3 * DT_MESH_MAX_DIMS)

static void encode(const dt__pp_header *h, int64_t *w) {
  memset(w, 0, sizeof(int64_t) * HEADER_LEN);
  w[0] = h->kind;
  w[1] = h->stage;
  w[2] = h->microbatch;
  w[3] = h->dtype;
  w[4] = h->ndim;
  w[5] = h->n_placements;
  for (int d = 0; d < h->ndim; d++) {
    w[6 + d] = h->local_shape[d];
    w[6 + DT_PP_MAX_DIMS + d] = h->global_shape[d];
  }
  for (int i = 0; i < h->n_placements; i++) {
    int64_t *p = &w[6 + 2 * DT_PP_MAX_DIMS + 3 * i];
    p[0] = h->placements[i].kind;
    p[1] = h->placements[i].dim;
    p[2] = h->placements[i].op;
  }
}

static dt_status decode(const int64_t *w, dt__pp_header *h) {
  memset(h, 0, sizeof *h);
  if (w[4] < 0 || w[4] > DT_PP_MAX_DIMS || w[5] < 0 || w[5] > DT_MESH_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID,
                     "dt_pipeline_step: a received header has %lld dims and %lld "
                     "placements (corrupt or from another program)",
                     (long long)w[4], (long long)w[5]);
  }
  h->kind = (int)w[0];
  h->stage = (int)w[1];
  h->microbatch = (int)w[2];
  h->dtype = (dt_dtype)w[3];
  h->ndim = (int)w[4];
  h->n_placements = (int)w[5];
  for (int d = 0; d < h->ndim; d++) {
    h->local_shape[d] = w[6 + d];
    h->global_shape[d] = w[6 + DT_PP_MAX_DIMS + d];
    if (h->local_shape[d] < 0)
      return dt__error(DT_ERR_INVALID, "dt_pipeline_step: a received header has a negative size");
  }
  for (int i = 0; i < h->n_placements; i++) {
    const int64_t *p = &w[6 + 2 * DT_PP_MAX_DIMS + 3 * i];
    h->placements[i].kind = (dt_placement_kind)p[0];
    h->placements[i].dim = (int)p[1];
    h->placements[i].op = (dt_reduce_op)p[2];
  }
  return DT_OK;
}

/* ---- The buffer pool ---------------------------------------------------------------------------
 */

static bool same_layout(const dt_tensor *t, dt_dtype dtype, int ndim, const int64_t *shape) {
  if (dt_tensor_dtype(t) != dtype || dt_tensor_ndim(t) != ndim) return false;
  const int64_t *s = dt_tensor_shape(t);
  for (int d = 0; d < ndim; d++)
    if (s[d] != shape[d]) return false;
  return true;
}

static dt_status pool_acquire(dt__pp_pool *p, dt_dtype dtype, int ndim, const int64_t *shape,
                              dt_tensor **out) {
  for (int i = 0; i < p->n; i++) {
    if (!p->items[i].busy && same_layout(p->items[i].t, dtype, ndim, shape)) {
      p->items[i].busy = true;
      *out = p->items[i].t;
      return DT_OK;
    }
  }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    struct pp_buffer *items = dt__alloc(sizeof *items * (size_t)cap);
    if (!items) return dt__error(DT_ERR_NOMEM, "dt_pipeline_step: out of memory for buffers");
    if (p->n) memcpy(items, p->items, sizeof *items * (size_t)p->n);
    dt__free(p->items);
    p->items = items;
    p->cap = cap;
  }
  dt_tensor *t = NULL;
  dt_status st = dt_empty(ndim, shape, dtype, &t);
  if (st) return st;
  p->items[p->n++] = (struct pp_buffer){t, true};
  p->allocated++;
  *out = t;
  return DT_OK;
}

void dt__pp_buffer_release(dt__pp_link *link, dt_tensor *buf) {
  if (!buf) return;
  for (int i = 0; i < link->pool.n; i++)
    if (link->pool.items[i].t == buf) link->pool.items[i].busy = false;
}

/* ---- The link ------------------------------------------------------------------------------- */

dt_status dt__pp_link_init(dt__pp_link *link, dt_comm *comm) {
  memset(link, 0, sizeof *link);
  int n = dt_comm_size(comm);
  link->comm = comm;
  link->size = n;
  link->pending = dt__calloc(sizeof *link->pending * (size_t)n * DT_PP_SEND_WINDOW);
  link->first = dt__calloc(sizeof *link->first * (size_t)n);
  link->count = dt__calloc(sizeof *link->count * (size_t)n);
  if (!link->pending || !link->first || !link->count) {
    dt__pp_link_free(link);
    return dt__error(DT_ERR_NOMEM, "dt_pipeline_create: out of memory");
  }
  return DT_OK;
}

/* Waits for the oldest outstanding transfer to peer and frees its slot. */
static dt_status wait_oldest(dt__pp_link *link, int peer) {
  dt__pp_pending *p = &link->pending[peer * DT_PP_SEND_WINDOW + link->first[peer]];
  dt_status st = DT_OK;
  for (int k = 0; k < 2; k++) {
    if (p->works[k]) {
      dt_status w = dt_work_wait(p->works[k]);
      if (!st) st = w;
      dt_work_destroy(p->works[k]);
      p->works[k] = NULL;
    }
  }
  dt__pp_buffer_release(link, p->tensors[0]);
  dt_tensor_release(p->tensors[1]);
  p->tensors[0] = p->tensors[1] = NULL;
  link->first[peer] = (link->first[peer] + 1) % DT_PP_SEND_WINDOW;
  link->count[peer]--;
  return st;
}

dt_status dt__pp_link_flush(dt__pp_link *link) {
  dt_status st = DT_OK;
  int n = link->size;
  for (int peer = 0; peer < n; peer++) {
    while (link->count && link->count[peer] > 0) {
      dt_status w = wait_oldest(link, peer);
      if (!st) st = w;
    }
  }
  return st;
}

void dt__pp_link_free(dt__pp_link *link) {
  int n = link->size;
  for (int i = 0; link->pending && i < n * DT_PP_SEND_WINDOW; i++) {
    /* Only after an error: a send still in flight is abandoned (its work destroyed). */
    for (int k = 0; k < 2; k++) dt_work_destroy(link->pending[i].works[k]);
    dt_tensor_release(link->pending[i].tensors[1]);
  }
  for (int i = 0; i < link->pool.n; i++) dt_tensor_release(link->pool.items[i].t);
  dt__free(link->pool.items);
  dt__free(link->pending);
  dt__free(link->first);
  dt__free(link->count);
  memset(link, 0, sizeof *link);
}

dt_status dt__pp_send(dt__pp_link *link, int peer, const dt__pp_header *h, dt_tensor *payload) {
  if (link->count[peer] == DT_PP_SEND_WINDOW) PP_CHECK(wait_oldest(link, peer));
  int slot = (link->first[peer] + link->count[peer]) % DT_PP_SEND_WINDOW;
  dt__pp_pending *p = &link->pending[peer * DT_PP_SEND_WINDOW + slot];
  dt_tensor *header = NULL;
  PP_CHECK(pool_acquire(&link->pool, DT_I64, 1, (int64_t[]){HEADER_LEN}, &header));
  encode(h, dt_tensor_data(header));
  p->tensors[0] = header;
  p->tensors[1] = dt_tensor_retain(payload);
  link->count[peer]++;
  dt_status st = dt_comm_send_async(link->comm, header, peer, &p->works[0]);
  if (!st) st = dt_comm_send_async(link->comm, payload, peer, &p->works[1]);
  if (!st) {
    link->bytes_sent += (int64_t)(HEADER_LEN * sizeof(int64_t)) +
                        dt_tensor_numel(payload) * (int64_t)dt_dtype_size(dt_tensor_dtype(payload));
  }
  return st;
}

static bool announces(const dt__pp_header *h, const dt__pp_header *want) {
  return h->kind == want->kind && h->stage == want->stage && h->microbatch == want->microbatch;
}

dt_status dt__pp_recv(dt__pp_link *link, int peer, const dt__pp_header *expect, dt__pp_header *h,
                      dt_tensor **buf) {
  *buf = NULL;
  dt_tensor *header = NULL;
  PP_CHECK(pool_acquire(&link->pool, DT_I64, 1, (int64_t[]){HEADER_LEN}, &header));
  dt_status st = dt_comm_recv(link->comm, header, peer);
  if (!st) st = decode(dt_tensor_data(header), h);
  dt__pp_buffer_release(link, header);
  if (st) return st;
  if (!announces(h, expect)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_pipeline_step: expected %s of stage %d microbatch %d from pp rank %d, "
                     "received the header of %s of stage %d microbatch %d (do both ranks run "
                     "the same schedule?)",
                     expect->kind == DT_PP_SEND_ACTIVATION ? "the activation" : "the gradient",
                     expect->stage, expect->microbatch, peer,
                     h->kind == DT_PP_SEND_ACTIVATION ? "the activation" : "the gradient", h->stage,
                     h->microbatch);
  }
  PP_CHECK(pool_acquire(&link->pool, h->dtype, h->ndim, h->local_shape, buf));
  st = dt_comm_recv(link->comm, *buf, peer);
  if (st) {
    dt__pp_buffer_release(link, *buf);
    *buf = NULL;
  }
  return st;
}
