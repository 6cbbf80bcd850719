/* Threads backend: what the last party to arrive checks (do the calls agree?) and how a
 * collective is cut into tasks that any waiting party may run. A task is (piece, chunk):
 * a piece is one source-to-destination(s) transfer or one reduced range, a chunk at most
 * TH_CHUNK_BYTES of it. Pieces shorter than the longest have empty trailing chunks. */
#include <stdio.h>
#include <string.h>

#include "comm/threads/threads_impl.h"
#include "tensor/device_impl.h"
#include "tensor/tensor_impl.h"

static int party_rank(const th_ring *ring, int party) {
  return ring->party_ranks ? ring->party_ranks[party] : party;
}

static const char *byte_ptr(const void *p, int64_t elements, size_t elem) {
  return (const char *)p + elements * (int64_t)elem;
}

/* Elements of piece p, and fills slot->offsets where a kind needs them. */
static int64_t piece_elems(const th_slot *slot, int nparties, int64_t p) {
  const dt_coll_args *a = &slot->posts[0].args;
  switch (a->kind) {
  case DT_COLL_ALL_GATHER:
  case DT_COLL_REDUCE_SCATTER: return a->counts ? a->counts[p] * a->row_numel : a->count;
  case DT_COLL_ALL_TO_ALL: {
    if (!a->send_counts) return a->count;
    int64_t s = p / nparties, d = p % nparties;
    return slot->posts[s].args.send_counts[d] * a->row_numel;
  }
  default: return a->count;
  }
}

static void mismatch_message(dt_comm *comm, th_ring *ring, th_slot *slot, const char *detail) {
  th_group *g = ((th_comm *)comm->state)->group;
  size_t used = 0, size = sizeof slot->message;
  uint64_t seq = atomic_load(&slot->seq);
  if (ring == &g->ring) {
    used += (size_t)snprintf(slot->message, size,
                             "collective mismatch in group '%s' (id %llu) at sequence number "
                             "%llu%s%s:",
                             comm->name, (unsigned long long)g->id, (unsigned long long)seq,
                             detail ? "; " : "", detail ? detail : "");
  } else {
    used += (size_t)snprintf(
        slot->message, size,
        "send/recv mismatch between rank %d and rank %d (message %llu):", ring->party_storage[0],
        ring->party_storage[1], (unsigned long long)seq);
  }
  for (int p = 0; p < ring->nparties && used < size; p++) {
    char call[256];
    dt__coll_describe(&slot->posts[p].args, g->size, call, sizeof call);
    int rank = ring->party_ranks ? ring->party_ranks[p] : p;
    used += (size_t)snprintf(slot->message + used, size - used, "%s rank %d called %s",
                             p ? ";" : "", rank, call);
  }
  slot->error = DT_ERR_MISMATCH;
}

bool dt__th_prepare(dt_comm *comm, th_ring *ring, th_slot *slot) {
  th_group *g = ((th_comm *)comm->state)->group;
  int n = ring->nparties;
  const dt_coll_args *a = &slot->posts[0].args;

  if (ring != &g->ring) {
    const dt_coll_args *recv = &slot->posts[1].args;
    if (a->dtype != recv->dtype || a->count != recv->count) {
      mismatch_message(comm, ring, slot, NULL);
      return false;
    }
  } else {
    for (int r = 1; r < n; r++) {
      if (!dt__coll_same_call(a, &slot->posts[r].args, n)) {
        mismatch_message(comm, ring, slot, NULL);
        return false;
      }
    }
    if (a->kind == DT_COLL_ALL_TO_ALL && a->send_counts) {
      const dt_coll_args *args[DT_COMM_MAX_THREADS];
      for (int r = 0; r < n; r++) args[r] = &slot->posts[r].args;
      int s = 0, d = 0;
      if (!dt__coll_check_all_to_all(args, n, &s, &d)) {
        char detail[160];
        snprintf(detail, sizeof detail,
                 "rank %d sends %lld rows to rank %d, which expects %lld from it", s,
                 (long long)args[s]->send_counts[d], d, (long long)args[d]->recv_counts[s]);
        mismatch_message(comm, ring, slot, detail);
        return false;
      }
    }
  }

  /* Every party's buffers are host memory, or every party's are of one device kind. */
  slot->device_ops = NULL;
  slot->done = NULL;
  for (int r = 1; r < n; r++) {
    if ((slot->posts[r].args.device & 0xffu) != (a->device & 0xffu)) {
      char detail[160], d0[48], dr[48];
      snprintf(detail, sizeof detail, "rank %d's tensors are on %s, rank %d's on %s",
               party_rank(ring, 0), dt__device_key_format(a->device, d0, sizeof d0),
               party_rank(ring, r),
               dt__device_key_format(slot->posts[r].args.device, dr, sizeof dr));
      mismatch_message(comm, ring, slot, detail);
      return false;
    }
  }
  if (a->device & 0xffu) slot->device_ops = slot->posts[0].marker_ops;

  size_t elem = dt__dtype_sizes[a->dtype];
  int64_t npieces = 1;
  switch (a->kind) {
  case DT_COLL_ALL_GATHER:
  case DT_COLL_REDUCE_SCATTER:
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: npieces = n; break;
  case DT_COLL_ALL_TO_ALL: npieces = (int64_t)n * n; break;
  case DT_COLL_BARRIER: npieces = 0; break;
  case DT_COLL_SPLIT:
    slot->ntasks = 1;
    slot->chunks_per_piece = 1;
    return true;
  default: break;
  }
  if (a->counts) {
    int64_t offset = 0;
    for (int r = 0; r < n; r++) {
      slot->offsets[r] = offset;
      offset += a->counts[r] * a->row_numel;
    }
    slot->offsets[n] = offset;
  }
  /* One rank in place has nothing to move. */
  if (n == 1 && a->kind == DT_COLL_ALL_REDUCE && a->send == a->recv) npieces = 0;

  slot->npieces = npieces;
  if (slot->device_ops) {
    /* One task queues every piece, whole, on the running rank's device queue. */
    slot->ntasks = npieces > 0 ? 1 : 0;
    slot->chunks_per_piece = 1;
    slot->chunk_elems = 0;
    return true;
  }
  int64_t longest = 0;
  for (int64_t p = 0; p < npieces; p++) {
    int64_t e = piece_elems(slot, n, p);
    if (e > longest) longest = e;
  }
  slot->chunk_elems = (int64_t)(TH_CHUNK_BYTES / elem);
  slot->chunks_per_piece = longest > 0 ? (longest + slot->chunk_elems - 1) / slot->chunk_elems : 0;
  slot->ntasks = npieces * slot->chunks_per_piece;
  return true;
}

/* Who moves a piece's bytes: the CPU (memcpy and dt__reduce_buffers, at once) or a device's
 * mover (queued; the first error stops the rest). Pieces are described once, below, for both. */
typedef struct mover {
  const th_device_ops *ops; /* NULL: host memory */
  void *run;
  const th_post *posts;
  size_t es;
  bool streaming;
  dt_status status;
} mover;

static int device_of(const mover *mv, int party) {
  return (int)(mv->posts[party].args.device >> 8);
}

static void move(mover *mv, int dst_party, void *dst, int src_party, const void *src,
                 int64_t elems) {
  if (dst == src || elems <= 0) return;
  if (!mv->ops) {
    memcpy(dst, src, (size_t)elems * mv->es);
  } else if (mv->status == DT_OK) {
    mv->status = mv->ops->copy(mv->run, device_of(mv, dst_party), dst, device_of(mv, src_party),
                               src, (size_t)elems * mv->es);
  }
}

/* Reduces the sources of parties src_parties[0..nsrc) into the destinations of dst_parties. */
static void reduce(mover *mv, const dt_coll_args *a, int nsrc, const void *const *src,
                   const int *src_parties, int ndst, void *const *dst, const int *dst_parties,
                   int64_t m, int world) {
  if (!mv->ops) {
    dt__reduce_buffers(a->dtype, a->op, nsrc, src, ndst, dst, m, world, mv->streaming);
    return;
  }
  if (mv->status != DT_OK || m <= 0) return;
  int sdev[DT_COMM_MAX_THREADS], ddev[DT_COMM_MAX_THREADS];
  for (int i = 0; i < nsrc; i++) sdev[i] = device_of(mv, src_parties[i]);
  for (int i = 0; i < ndst; i++) ddev[i] = device_of(mv, dst_parties[i]);
  mv->status =
      mv->ops->reduce(mv->run, a->dtype, a->op, nsrc, src, sdev, ndst, dst, ddev, m, world);
}

/* Elements [lo, lo + m) of piece `piece`. */
static void run_piece(mover *mv, const th_slot *slot, int n, int64_t piece, int64_t lo, int64_t m) {
  const dt_coll_args *a = &slot->posts[0].args;
  const th_post *posts = slot->posts;
  size_t es = mv->es;
  int parties[DT_COMM_MAX_THREADS]; /* party r is the owner of src[r] and dst[r] */
  if (a->kind == DT_COLL_ALL_REDUCE || a->kind == DT_COLL_REDUCE_SCATTER) {
    for (int r = 0; r < n; r++) parties[r] = r;
  }

  switch (a->kind) {
  case DT_COLL_ALL_REDUCE: {
    const void *src[DT_COMM_MAX_THREADS];
    void *dst[DT_COMM_MAX_THREADS];
    for (int r = 0; r < n; r++) {
      src[r] = byte_ptr(posts[r].args.send, lo, es);
      dst[r] = (char *)posts[r].args.recv + lo * (int64_t)es;
    }
    reduce(mv, a, n, src, parties, n, dst, parties, m, n);
    return;
  }
  case DT_COLL_REDUCE_SCATTER: {
    const void *src[DT_COMM_MAX_THREADS];
    int64_t offset = (a->counts ? slot->offsets[piece] : piece * a->count) + lo;
    for (int r = 0; r < n; r++) src[r] = byte_ptr(posts[r].args.send, offset, es);
    void *dst = (char *)posts[piece].args.recv + lo * (int64_t)es;
    int dst_party = (int)piece;
    reduce(mv, a, n, src, parties, 1, &dst, &dst_party, m, n);
    return;
  }
  case DT_COLL_ALL_GATHER: {
    const void *src = byte_ptr(posts[piece].args.send, lo, es);
    int64_t offset = (a->counts ? slot->offsets[piece] : piece * a->count) + lo;
    for (int d = 0; d < n; d++) {
      move(mv, d, (char *)posts[d].args.recv + offset * (int64_t)es, (int)piece, src, m);
    }
    return;
  }
  case DT_COLL_BROADCAST: {
    const void *src = byte_ptr(posts[a->root].args.send, lo, es);
    for (int d = 0; d < n; d++) {
      if (d != a->root) move(mv, d, (char *)posts[d].args.recv + lo * (int64_t)es, a->root, src, m);
    }
    return;
  }
  case DT_COLL_SCATTER:
    move(mv, (int)piece, (char *)posts[piece].args.recv + lo * (int64_t)es, a->root,
         byte_ptr(posts[a->root].args.send, piece * a->count + lo, es), m);
    return;
  case DT_COLL_GATHER:
    move(mv, a->root, (char *)posts[a->root].args.recv + (piece * a->count + lo) * (int64_t)es,
         (int)piece, byte_ptr(posts[piece].args.send, lo, es), m);
    return;
  case DT_COLL_ALL_TO_ALL: {
    int s = (int)(piece / n), d = (int)(piece % n);
    int64_t send_offset = (int64_t)d * a->count, recv_offset = (int64_t)s * a->count;
    if (a->send_counts) {
      const int64_t *sc = posts[s].args.send_counts, *rc = posts[d].args.recv_counts;
      send_offset = recv_offset = 0;
      for (int i = 0; i < d; i++) send_offset += sc[i];
      for (int i = 0; i < s; i++) recv_offset += rc[i];
      send_offset *= a->row_numel;
      recv_offset *= a->row_numel;
    }
    move(mv, d, (char *)posts[d].args.recv + (recv_offset + lo) * (int64_t)es, s,
         byte_ptr(posts[s].args.send, send_offset + lo, es), m);
    return;
  }
  case DT_COLL_SEND:
    move(mv, 1, (char *)posts[1].args.recv + lo * (int64_t)es, 0,
         byte_ptr(posts[0].args.send, lo, es), m);
    return;
  default: return;
  }
}

/* A device collective: every piece, whole, queued on the running party's device queue after
 * every party's marker, then the `done` marker. */
static void run_device(th_ring *ring, th_slot *slot, int party) {
  int n = ring->nparties;
  const dt_coll_args *a = &slot->posts[0].args;
  const th_device_ops *ops = slot->device_ops;
  void *markers[DT_COMM_MAX_THREADS];
  for (int r = 0; r < n; r++) markers[r] = slot->posts[r].marker;
  mover mv = {.ops = ops, .posts = slot->posts, .es = dt__dtype_sizes[a->dtype]};
  int device = (int)(slot->posts[party].args.device >> 8);
  mv.status = ops->begin(a->op_name, device, markers, n, &mv.run);
  if (mv.status == DT_OK) {
    for (int64_t p = 0; p < slot->npieces && mv.status == DT_OK; p++) {
      run_piece(&mv, slot, n, p, 0, piece_elems(slot, n, p));
    }
    mv.status = ops->end(mv.run, mv.status, &slot->done);
  }
  if (mv.status != DT_OK) {
    snprintf(slot->task_message, sizeof slot->task_message, "%s", dt_last_error());
    slot->task_status = mv.status;
  }
}

void dt__th_run_task(th_group *g, th_ring *ring, th_slot *slot, int64_t task, int party) {
  const dt_coll_args *a = &slot->posts[0].args;
  if (a->kind == DT_COLL_SPLIT) {
    dt_status status = dt__th_split_task(g, slot);
    if (status != DT_OK) {
      snprintf(slot->task_message, sizeof slot->task_message,
               "out of memory while building the result");
      slot->task_status = status;
    }
    return;
  }
  if (slot->device_ops) {
    run_device(ring, slot, party);
    return;
  }
  int n = ring->nparties;
  size_t es = dt__dtype_sizes[a->dtype];
  int64_t piece = task / slot->chunks_per_piece;
  int64_t lo = (task % slot->chunks_per_piece) * slot->chunk_elems;
  int64_t total = piece_elems(slot, n, piece);
  if (lo >= total) return;
  int64_t m = total - lo < slot->chunk_elems ? total - lo : slot->chunk_elems;
  mover mv = {.posts = slot->posts,
              .es = es,
              .streaming = a->count * (int64_t)es * n >= TH_STREAMING_BYTES};
  run_piece(&mv, slot, n, piece, lo, m);
}
