/*
 * Ring attention (context parallelism, PyTorch's experimental context_parallel): each cp rank
 * holds its positions of q, k and v (context_parallel.c's layouts); its queries attend to its
 * own key/value block, then to every other rank's as the blocks rotate around the ring, and the
 * partial outputs are merged through their log-sum-exps. The backward sends dk and dv around the
 * ring with their blocks, so each block's gradient returns to its owner complete. Blocks are
 * attended with the fused attention op (its forward, and its backward op given the global
 * log-sum-exp, so that each block's probabilities are the whole softmax's).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd_impl.h"
#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"
#include "mesh/mesh_impl.h"
#include "ops/attention_impl.h"
#include "parallel/context_parallel_impl.h"
#include "tensor/tensor_impl.h"

#define FN "dt_parallel_cp_attention"

/* What one call computes, the same on every cp rank once the descriptors agree. */
typedef struct cp_ring {
  dt_mesh *mesh; /* a reference: the backward may run after the caller dropped its mesh */
  dt_comm *group;
  int size, rank, next, prev;
  int64_t T, S, B, H, Hk, E, Ev;
  dt_dtype dtype;
  bool causal;
  double scale;                 /* resolved: > 0 */
  dt__cp_segments *qseg, *kseg; /* [size] each: every rank's positions */
  dt_tensor *mask;              /* a reference, or NULL */
} cp_ring;

static void ring_clear(cp_ring *r) {
  dt__mesh_release(r->mesh);
  dt__free(r->qseg);
  dt_tensor_release(r->mask);
  memset(r, 0, sizeof *r);
}

/* ---- Arguments: checked on each rank, then agreed on by all ------------------------------- */

static dt_status check_tensor(const char *arg, const dt_tensor *t, dt_dtype dtype) {
  if (dt_tensor_is_distributed(t))
    return dt__error(DT_ERR_UNSUPPORTED,
                     FN ": %s is distributed (not built: pass this rank's local part, "
                        "dt_dist_to_local)",
                     arg);
  if (dt_tensor_device(t).kind != DT_DEVICE_CPU)
    return dt__error(DT_ERR_UNSUPPORTED, FN ": %s is not on the CPU (the merge reads it)", arg);
  if (dt_tensor_ndim(t) != 4)
    return dt__error(DT_ERR_SHAPE, FN ": %s has %d dims (expected 4: [batch, heads, seq, dim])",
                     arg, dt_tensor_ndim(t));
  if (!dt_dtype_is_floating(dt_tensor_dtype(t)))
    return dt__error(DT_ERR_DTYPE, FN ": %s has dtype %s (expected a floating dtype)", arg,
                     dt_dtype_name(dt_tensor_dtype(t)));
  if (dt_tensor_dtype(t) != dtype)
    return dt__error(DT_ERR_DTYPE, FN ": %s has dtype %s (expected the query's dtype %s)", arg,
                     dt_dtype_name(dt_tensor_dtype(t)), dt_dtype_name(dtype));
  return DT_OK;
}

static dt_status check_local(const dt_tensor *q, const dt_tensor *k, const dt_tensor *v,
                             const dt_tensor *mask, const dt_cp_attention_options *o,
                             dt_tensor **out) {
  if (!q || !k || !v || !out)
    return dt__error(DT_ERR_INVALID, FN ": %s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : "out");
  double scale = o ? o->scale : 0;
  if (!isfinite(scale) || scale < 0)
    return dt__error(DT_ERR_INVALID, FN ": scale %g must be finite and > 0 (0: 1/sqrt(E))", scale);
  if (o && !dt__cp_layout_valid(o->layout))
    return dt__error(DT_ERR_INVALID, FN ": unknown layout %d", (int)o->layout);
  dt_dtype dt = dt_tensor_dtype(q);
  dt_status st = check_tensor("q", q, dt);
  if (!st) st = check_tensor("k", k, dt);
  if (!st) st = check_tensor("v", v, dt);
  if (st) return st;
  const int64_t *qs = dt_tensor_shape(q), *ks = dt_tensor_shape(k), *vs = dt_tensor_shape(v);
  if (ks[0] != qs[0] || vs[0] != qs[0] || ks[1] != vs[1] || ks[2] != vs[2] || ks[3] != qs[3] ||
      ks[1] < 1 || qs[1] % ks[1] != 0)
    return dt__error(DT_ERR_SHAPE,
                     FN ": q [%lld, %lld, %lld, %lld], k [%lld, %lld, %lld, %lld], v [%lld, %lld, "
                        "%lld, %lld]: expected [B, H, Tl, E], [B, Hk, Sl, E], [B, Hk, Sl, Ev] "
                        "with Hk dividing H",
                     (long long)qs[0], (long long)qs[1], (long long)qs[2], (long long)qs[3],
                     (long long)ks[0], (long long)ks[1], (long long)ks[2], (long long)ks[3],
                     (long long)vs[0], (long long)vs[1], (long long)vs[2], (long long)vs[3]);
  if (mask) {
    if (dt_tensor_is_distributed(mask))
      return dt__error(DT_ERR_UNSUPPORTED,
                       FN ": mask is distributed (not built: pass the whole mask as a local "
                          "tensor)");
    if (dt_tensor_dtype(mask) != DT_BOOL && dt_tensor_dtype(mask) != dt)
      return dt__error(DT_ERR_DTYPE, FN ": mask has dtype %s (expected bool or %s)",
                       dt_dtype_name(dt_tensor_dtype(mask)), dt_dtype_name(dt));
    if (dt_tensor_ndim(mask) > 4)
      return dt__error(DT_ERR_SHAPE,
                       FN ": mask has %d dims (at most 4, broadcasting to [B, H, "
                          "T, S])",
                       dt_tensor_ndim(mask));
  }
  return DT_OK;
}

enum {
  D_STATUS,
  D_LQ,
  D_LK,
  D_B, /* from here on, every field must agree across ranks */
  D_H,
  D_HK,
  D_E,
  D_EV,
  D_DTYPE,
  D_CAUSAL,
  D_LAYOUT,
  D_SCALE,
  D_MASK_NDIM, /* -1: no mask */
  D_MASK_DTYPE,
  D_MASK_SHAPE,
  D_FIELDS = D_MASK_SHAPE + 4
};

static const char *const field_names[D_FIELDS] = {
    "status",    "Tl",         "Sl",         "batch",      "heads",      "kv heads",
    "E",         "Ev",         "dtype",      "is_causal",  "layout",     "scale",
    "mask dims", "mask dtype", "mask shape", "mask shape", "mask shape", "mask shape"};

static void describe(const dt_tensor *q, const dt_tensor *k, const dt_tensor *v,
                     const dt_tensor *mask, const dt_cp_attention_options *o, int64_t *d) {
  memset(d, 0, sizeof(int64_t) * D_FIELDS);
  d[D_LQ] = dt_tensor_size(q, 2);
  d[D_LK] = dt_tensor_size(k, 2);
  d[D_B] = dt_tensor_size(q, 0);
  d[D_H] = dt_tensor_size(q, 1);
  d[D_HK] = dt_tensor_size(k, 1);
  d[D_E] = dt_tensor_size(q, 3);
  d[D_EV] = dt_tensor_size(v, 3);
  d[D_DTYPE] = dt_tensor_dtype(q);
  d[D_CAUSAL] = o && o->is_causal;
  d[D_LAYOUT] = o ? o->layout : DT_CP_LAYOUT_HEAD_TAIL;
  double scale = o ? o->scale : 0;
  memcpy(&d[D_SCALE], &scale, sizeof scale);
  d[D_MASK_NDIM] = mask ? dt_tensor_ndim(mask) : -1;
  if (mask) {
    d[D_MASK_DTYPE] = dt_tensor_dtype(mask);
    for (int i = 0; i < dt_tensor_ndim(mask); i++) d[D_MASK_SHAPE + i] = dt_tensor_size(mask, i);
  }
}

/* The mask broadcasts to [B, H, T, S]. */
static dt_status check_mask(const cp_ring *r) {
  if (!r->mask) return DT_OK;
  int64_t full[4] = {r->B, r->H, r->T, r->S};
  int nd = dt_tensor_ndim(r->mask);
  for (int i = 0; i < nd; i++) {
    int64_t m = dt_tensor_size(r->mask, nd - 1 - i);
    if (m != 1 && m != full[3 - i]) {
      char b[160];
      dt_tensor_format(r->mask, b, sizeof b);
      return dt__error(DT_ERR_SHAPE,
                       FN ": mask %s does not broadcast to the whole problem [%lld, %lld, %lld, "
                          "%lld] ([B, H, T, S]; pass the whole mask on every rank)",
                       b, (long long)r->B, (long long)r->H, (long long)r->T, (long long)r->S);
    }
  }
  return DT_OK;
}

/* Every rank's lengths against the layout; causal needs S == T. */
static dt_status check_layout(const cp_ring *r, const int64_t *all, dt_cp_layout layout) {
  if (r->causal && r->S != r->T)
    return dt__error(DT_ERR_SHAPE,
                     FN ": causal attention over the cp ranks needs as many keys as queries "
                        "(S %lld, T %lld)",
                     (long long)r->S, (long long)r->T);
  for (int p = 0; p < r->size; p++) {
    const int64_t *d = all + (size_t)p * D_FIELDS;
    if (d[D_LQ] != r->qseg[p].total || d[D_LK] != r->kseg[p].total)
      return dt__error(DT_ERR_SHAPE,
                       FN ": cp rank %d holds %lld query and %lld key positions; the %s layout of "
                          "T %lld, S %lld over %d ranks gives it %lld and %lld (shard the "
                          "sequence with dt_parallel_cp_shard_sequence)",
                       p, (long long)d[D_LQ], (long long)d[D_LK], dt__cp_layout_name(layout),
                       (long long)r->T, (long long)r->S, r->size, (long long)r->qseg[p].total,
                       (long long)r->kseg[p].total);
  }
  return DT_OK;
}

/* Fills r from every rank's descriptor (all), the same verdict on every rank. */
static dt_status agree(cp_ring *r, const int64_t *all) {
  for (int p = 0; p < r->size; p++)
    if (all[(size_t)p * D_FIELDS + D_STATUS] != 0)
      return dt__error(DT_ERR_INVALID, FN ": cp rank %d refused its arguments (see its error)", p);
  for (int p = 1; p < r->size; p++)
    for (int f = D_B; f < D_FIELDS; f++)
      if (all[(size_t)p * D_FIELDS + f] != all[f])
        return dt__error(DT_ERR_SHAPE, FN ": cp rank %d's %s (%lld) differs from rank 0's (%lld)",
                         p, field_names[f], (long long)all[(size_t)p * D_FIELDS + f],
                         (long long)all[f]);
  r->B = all[D_B], r->H = all[D_H], r->Hk = all[D_HK], r->E = all[D_E], r->Ev = all[D_EV];
  r->dtype = (dt_dtype)all[D_DTYPE];
  r->causal = all[D_CAUSAL] != 0;
  memcpy(&r->scale, &all[D_SCALE], sizeof r->scale);
  if (r->scale == 0) r->scale = 1.0 / sqrt((double)r->E);
  dt_cp_layout layout = (dt_cp_layout)all[D_LAYOUT];
  r->T = r->S = 0;
  for (int p = 0; p < r->size; p++) {
    r->T += all[(size_t)p * D_FIELDS + D_LQ];
    r->S += all[(size_t)p * D_FIELDS + D_LK];
  }
  r->qseg = dt__calloc(sizeof(dt__cp_segments) * 2 * (size_t)r->size);
  if (!r->qseg) return dt__error(DT_ERR_NOMEM, FN ": out of memory");
  r->kseg = r->qseg + r->size;
  for (int p = 0; p < r->size; p++) {
    dt__cp_segments_of(r->T, r->size, p, layout, &r->qseg[p]);
    dt__cp_segments_of(r->S, r->size, p, layout, &r->kseg[p]);
  }
  dt_status st = check_layout(r, all, layout);
  return st ? st : check_mask(r);
}

/* Checks this rank's arguments, gathers every rank's descriptor and fills r. */
static dt_status plan(cp_ring *r, dt_mesh *mesh, int cp_dim, dt_tensor *q, dt_tensor *k,
                      dt_tensor *v, dt_tensor *mask, const dt_cp_attention_options *o,
                      dt_tensor **out) {
  char mine_msg[512] = "";
  int64_t mine[D_FIELDS] = {0};
  dt_status mine_st = check_local(q, k, v, mask, o, out);
  if (mine_st) {
    snprintf(mine_msg, sizeof mine_msg, "%s", dt_last_error());
    mine[D_STATUS] = 1;
  } else {
    describe(q, k, v, mask, o, mine);
  }
  r->mesh = dt__mesh_retain(mesh);
  r->group = dt_mesh_group(mesh, cp_dim);
  r->size = dt_comm_size(r->group);
  r->rank = dt_comm_rank(r->group);
  r->next = (r->rank + 1) % r->size;
  r->prev = (r->rank + r->size - 1) % r->size;
  r->mask = mask ? dt_tensor_retain(mask) : NULL;
  dt_tensor *in = NULL, *all = NULL;
  dt_status st = dt_from_data(mine, 1, (int64_t[]){D_FIELDS}, DT_I64, &in);
  if (!st) st = dt_empty(1, (int64_t[]){(int64_t)D_FIELDS * r->size}, DT_I64, &all);
  if (!st) st = dt_comm_all_gather_into_tensor(r->group, in, all);
  if (!st && mine_st) st = dt__error(mine_st, "%s", mine_msg);
  if (!st) st = agree(r, dt_tensor_data(all));
  dt_tensor_release(in), dt_tensor_release(all);
  return st;
}

/* ---- Blocks ---------------------------------------------------------------------------------- */

typedef enum pair_kind { PAIR_SKIP, PAIR_FULL, PAIR_DIAGONAL } pair_kind;

/* How the queries of q segment a (this rank's) meet the keys of segment b of rank j's block.
 * With S == T both sides cut the sequence at the same chunk boundaries, so under a causal mask
 * two chunks are the same (the diagonal: causal within it), one wholly before the other (full),
 * or wholly after (skipped). */
static pair_kind pair_of(const cp_ring *r, int a, int j, int b) {
  const dt__cp_segments *qs = &r->qseg[r->rank], *ks = &r->kseg[j];
  int64_t q0 = qs->start[a], ql = qs->length[a], k0 = ks->start[b], kl = ks->length[b];
  if (ql == 0 || kl == 0) return PAIR_SKIP;
  if (!r->causal || k0 + kl - 1 <= q0) return PAIR_FULL;
  if (k0 > q0 + ql - 1) return PAIR_SKIP;
  return PAIR_DIAGONAL;
}

/* The views one pair reads: q's rows of segment a, the block's rows of segment b, the mask's
 * rows and columns at their global positions. */
typedef struct pair_views {
  dt_tensor *q, *k, *v, *mask, *gs;
} pair_views;

static void pair_views_release(pair_views *p) {
  dt_tensor_release(p->q), dt_tensor_release(p->k), dt_tensor_release(p->v);
  dt_tensor_release(p->mask), dt_tensor_release(p->gs);
  memset(p, 0, sizeof *p);
}

static dt_status pair_views_make(const cp_ring *r, dt_tensor *q, dt_tensor *gs, dt_tensor *k,
                                 dt_tensor *v, int a, int j, int b, pair_views *p) {
  const dt__cp_segments *qs = &r->qseg[r->rank], *ks = &r->kseg[j];
  memset(p, 0, sizeof *p);
  dt_status st = dt_narrow(q, 2, qs->offset[a], qs->length[a], &p->q);
  if (!st && gs) st = dt_narrow(gs, 2, qs->offset[a], qs->length[a], &p->gs);
  if (!st) st = dt_narrow(k, 2, ks->offset[b], ks->length[b], &p->k);
  if (!st) st = dt_narrow(v, 2, ks->offset[b], ks->length[b], &p->v);
  if (!st && r->mask) {
    int nd = dt_tensor_ndim(r->mask);
    dt_tensor *rows = NULL;
    if (nd >= 2 && dt_tensor_size(r->mask, nd - 2) == r->T)
      st = dt_narrow(r->mask, nd - 2, qs->start[a], qs->length[a], &rows);
    else
      rows = dt_tensor_retain(r->mask);
    if (!st && nd >= 1 && dt_tensor_size(rows, nd - 1) == r->S)
      st = dt_narrow(rows, nd - 1, ks->start[b], ks->length[b], &p->mask);
    else if (!st)
      p->mask = dt_tensor_retain(rows);
    dt_tensor_release(rows);
  }
  if (st) pair_views_release(p);
  return st;
}

/* ---- The ring's transfers ------------------------------------------------------------------ */

typedef struct ring_works {
  dt_work *w[4];
  int n;
} ring_works;

/* Waits for (and destroys) every posted transfer; the first error wins. */
static dt_status works_wait(ring_works *w) {
  dt_status st = DT_OK;
  for (int i = 0; i < w->n; i++) {
    dt_status s = dt_work_wait(w->w[i]);
    if (!st) st = s;
    dt_work_destroy(w->w[i]);
  }
  w->n = 0;
  return st;
}

/* Posts the sends of a and b to the next rank and the receives of ra and rb from the previous
 * one (each skipped when it holds no element: both ends know every block's size). */
static dt_status post(const cp_ring *r, dt_tensor *a, dt_tensor *b, dt_tensor *ra, dt_tensor *rb,
                      ring_works *w) {
  dt_status st = DT_OK;
  dt_tensor *sends[2] = {a, b}, *recvs[2] = {ra, rb};
  for (int i = 0; i < 2 && !st; i++)
    if (dt_tensor_numel(sends[i]) > 0)
      st = dt_comm_send_async(r->group, sends[i], r->next, &w->w[w->n++]);
  for (int i = 0; i < 2 && !st; i++)
    if (dt_tensor_numel(recvs[i]) > 0)
      st = dt_comm_recv_async(r->group, recvs[i], r->prev, &w->w[w->n++]);
  if (st && w->w[w->n - 1] == NULL) w->n--;
  return st;
}

/* Empty blocks of rank j's key and value shapes. */
static dt_status block_empty(const cp_ring *r, int j, bool zero, dt_tensor **k, dt_tensor **v) {
  int64_t ks[4] = {r->B, r->Hk, r->kseg[j].total, r->E},
          vs[4] = {r->B, r->Hk, r->kseg[j].total, r->Ev};
  dt_status st = zero ? dt_zeros(4, ks, r->dtype, k) : dt_empty(4, ks, r->dtype, k);
  if (!st) st = zero ? dt_zeros(4, vs, r->dtype, v) : dt_empty(4, vs, r->dtype, v);
  return st;
}

/* ---- Forward --------------------------------------------------------------------------------- */

/* The running output and log-sum-exp of this rank's rows, in double. */
typedef struct merge_acc {
  double *o, *l;
} merge_acc;

/* Element i of a contiguous tensor, as double. */
static inline double element(const dt_tensor *t, int64_t i) {
  return dt__load_as_double(t->dtype, dt__tensor_base(t) + i * (int64_t)dt__dtype_sizes[t->dtype]);
}

/* Folds a block's (o [B, H, n, Ev], l [B, H, n], both fresh and contiguous) for local rows
 * [off, off + n) into acc: out = (w_acc out_acc + w_blk o) / (w_acc + w_blk), lse = max +
 * log(w_acc + w_blk), the weights exp(lse_x - max). A block that keeps no key for a row (lse
 * -inf) adds nothing to it. */
static void merge(const cp_ring *r, merge_acc *acc, const dt_tensor *o, const dt_tensor *l,
                  int64_t off, int64_t n) {
  int64_t Lq = r->qseg[r->rank].total, Ev = r->Ev, rows = r->B * r->H;
  for (int64_t bh = 0; bh < rows; bh++)
    for (int64_t i = 0; i < n; i++) {
      double lb = element(l, bh * n + i);
      if (lb == -INFINITY) continue;
      double *la = &acc->l[bh * Lq + off + i], *oa = &acc->o[(bh * Lq + off + i) * Ev];
      int64_t ob = (bh * n + i) * Ev;
      if (*la == -INFINITY) {
        for (int64_t e = 0; e < Ev; e++) oa[e] = element(o, ob + e);
        *la = lb;
        continue;
      }
      double m = *la > lb ? *la : lb, wa = exp(*la - m), wb = exp(lb - m), sum = wa + wb;
      for (int64_t e = 0; e < Ev; e++) oa[e] = (wa * oa[e] + wb * element(o, ob + e)) / sum;
      *la = m + log(sum);
    }
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static dt_status forward_block(const cp_ring *r, dt_tensor *q, dt_tensor *k, dt_tensor *v, int j,
                               merge_acc *acc, dt_cp_attention_stats *stats) {
  const dt__cp_segments *qs = &r->qseg[r->rank];
  dt_status st = DT_OK;
  for (int a = 0; a < qs->n && !st; a++)
    for (int b = 0; b < r->kseg[j].n && !st; b++) {
      pair_kind kind = pair_of(r, a, j, b);
      stats->pairs_skipped += kind == PAIR_SKIP;
      stats->pairs_attended += kind != PAIR_SKIP;
      if (kind == PAIR_SKIP) continue;
      pair_views p;
      dt_tensor *o = NULL, *l = NULL;
      st = pair_views_make(r, q, NULL, k, v, a, j, b, &p);
      if (st) break;
      dt_attention_options ao = {.is_causal = kind == PAIR_DIAGONAL, .scale = r->scale};
      st = dt_scaled_dot_product_attention(p.q, p.k, p.v, p.mask, &ao, &o, &l);
      if (!st && (!dt_tensor_is_contiguous(o) || !dt_tensor_is_contiguous(l)))
        st = dt__error(DT_ERR_INTERNAL, FN ": a block's output is not contiguous");
      if (!st) merge(r, acc, o, l, qs->offset[a], qs->length[a]);
      dt_tensor_release(o), dt_tensor_release(l);
      pair_views_release(&p);
    }
  return st;
}

/* out and lse tensors from the accumulators; rows that kept no key get 0 and lse -inf, as
 * SDPA's. */
static dt_status forward_outputs(const cp_ring *r, merge_acc *acc, dt_tensor **out,
                                 dt_tensor **lse) {
  int64_t Lq = r->qseg[r->rank].total, rows = r->B * r->H * Lq;
  dt_dtype ld = r->dtype == DT_F64 ? DT_F64 : DT_F32;
  dt_status st = dt_empty(4, (int64_t[]){r->B, r->H, Lq, r->Ev}, r->dtype, out);
  if (!st) st = dt_empty(3, (int64_t[]){r->B, r->H, Lq}, ld, lse);
  if (st) return st;
  char *ob = dt__tensor_base(*out), *lb = dt__tensor_base(*lse);
  size_t os = dt__dtype_sizes[r->dtype], ls = dt__dtype_sizes[ld];
  for (int64_t i = 0; i < rows; i++) {
    bool none = acc->l[i] == -INFINITY;
    for (int64_t e = 0; e < r->Ev; e++)
      dt__store_from_double(r->dtype, ob + (i * r->Ev + e) * (int64_t)os,
                            none ? 0.0 : acc->o[i * r->Ev + e]);
    dt__store_from_double(ld, lb + i * (int64_t)ls, acc->l[i]);
  }
  return DT_OK;
}

/* kc and vc: this rank's own block, contiguous. */
static dt_status ring_forward(const cp_ring *r, dt_tensor *q, dt_tensor *kc, dt_tensor *vc,
                              dt_tensor **out, dt_tensor **lse, dt_cp_attention_stats *stats) {
  int64_t Lq = r->qseg[r->rank].total, rows = r->B * r->H * Lq;
  double *mem = dt__alloc(sizeof(double) * (size_t)(rows * (r->Ev + 1) + 1));
  if (!mem) return dt__error(DT_ERR_NOMEM, FN ": out of memory for the merge");
  merge_acc acc = {.o = mem, .l = mem + rows * r->Ev};
  memset(acc.o, 0, sizeof(double) * (size_t)(rows * r->Ev));
  for (int64_t i = 0; i < rows; i++) acc.l[i] = -INFINITY;
  dt_tensor *k = dt_tensor_retain(kc), *v = dt_tensor_retain(vc);
  dt_status st = DT_OK;
  for (int s = 0; s < r->size && !st; s++) {
    int j = (r->rank - s + r->size) % r->size;
    ring_works w = {0};
    dt_tensor *kn = NULL, *vn = NULL;
    /* The next block's transfer runs while this one is attended. */
    if (s < r->size - 1) {
      st = block_empty(r, (j + r->size - 1) % r->size, false, &kn, &vn);
      if (!st) st = post(r, k, v, kn, vn, &w);
      stats->bytes_sent +=
          (dt_tensor_numel(k) + dt_tensor_numel(v)) * (int64_t)dt__dtype_sizes[r->dtype];
    }
    double t0 = now_us();
    if (!st) st = forward_block(r, q, k, v, j, &acc, stats);
    double t1 = now_us();
    dt_status ws = works_wait(&w);
    if (!st) st = ws;
    stats->compute_us += t1 - t0;
    stats->wait_us += now_us() - t1;
    dt_tensor_release(k), dt_tensor_release(v);
    k = kn, v = vn;
  }
  dt_tensor_release(k), dt_tensor_release(v);
  if (!st) st = forward_outputs(r, &acc, out, lse);
  dt__free(mem);
  return st;
}

/* ---- Backward -------------------------------------------------------------------------------- */

typedef struct cp_saved {
  cp_ring ring;
  dt_tensor *q, *k, *v, *out, *lse; /* detached; k and v contiguous */
} cp_saved;

static void saved_release(void *state) {
  cp_saved *s = state;
  if (!s) return;
  ring_clear(&s->ring);
  dt_tensor_release(s->q), dt_tensor_release(s->k), dt_tensor_release(s->v);
  dt_tensor_release(s->out), dt_tensor_release(s->lse);
  dt__free(s);
}

/* dq (this rank's rows) += and dk, dv (block j's, zeros on entry) = the block's gradients. */
static dt_status backward_block(const cp_saved *s, dt_tensor *gs, dt_tensor *k, dt_tensor *v, int j,
                                dt_tensor *dq, dt_tensor *dk, dt_tensor *dv) {
  const cp_ring *r = &s->ring;
  const dt__cp_segments *qs = &r->qseg[r->rank], *ks = &r->kseg[j];
  dt_status st = DT_OK;
  for (int a = 0; a < qs->n && !st; a++)
    for (int b = 0; b < ks->n && !st; b++) {
      pair_kind kind = pair_of(r, a, j, b);
      if (kind == PAIR_SKIP) continue;
      pair_views p;
      st = pair_views_make(r, s->q, gs, k, v, a, j, b, &p);
      if (st) break;
      dt_op_call fwd = {.op = DT_OP_SCALED_DOT_PRODUCT_ATTENTION,
                        .n_inputs = 4,
                        .inputs = {p.q, p.k, p.v, p.mask},
                        .n_ints = 1,
                        .ints = {kind == PAIR_DIAGONAL},
                        .scalars = {r->scale}};
      dt_tensor *gq = NULL, *gk = NULL, *gv = NULL, *vq = NULL, *vk = NULL, *vv = NULL;
      st = dt__attention_backward(&fwd, p.gs, &gq, &gk, &gv);
      if (!st) st = dt_narrow(dq, 2, qs->offset[a], qs->length[a], &vq);
      if (!st) st = dt_add_(vq, gq);
      if (!st) st = dt_narrow(dk, 2, ks->offset[b], ks->length[b], &vk);
      if (!st) st = dt_add_(vk, gk);
      if (!st) st = dt_narrow(dv, 2, ks->offset[b], ks->length[b], &vv);
      if (!st) st = dt_add_(vv, gv);
      dt_tensor *tmp[] = {gq, gk, gv, vq, vk, vv};
      for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) dt_tensor_release(tmp[i]);
      pair_views_release(&p);
    }
  return st;
}

/* The ring of the backward: at step s this rank holds block j = rank - s with the sum of the
 * gradients the ranks before it computed for it; it adds its own and passes both on, so after
 * the last step each block's gradient arrives at its owner. */
static dt_status ring_backward(const cp_saved *s, dt_tensor *gs, dt_tensor *dq, dt_tensor **dk,
                               dt_tensor **dv) {
  const cp_ring *r = &s->ring;
  dt_tensor *k = dt_tensor_retain(s->k), *v = dt_tensor_retain(s->v);
  dt_tensor *gk_in = NULL, *gv_in = NULL, *gk_out = NULL, *gv_out = NULL;
  ring_works wg = {0};
  dt_status st = DT_OK;
  for (int step = 0; step < r->size && !st; step++) {
    int j = (r->rank - step + r->size) % r->size, jn = (j + r->size - 1) % r->size;
    ring_works wkv = {0};
    dt_tensor *kn = NULL, *vn = NULL, *gk = NULL, *gv = NULL;
    if (step < r->size - 1) {
      st = block_empty(r, jn, false, &kn, &vn);
      if (!st) st = post(r, k, v, kn, vn, &wkv);
    }
    if (!st) st = block_empty(r, j, true, &gk, &gv);
    if (!st) st = backward_block(s, gs, k, v, j, dq, gk, gv);
    /* The partial sums of block j from the previous rank (posted last step) join ours. */
    dt_status ws = works_wait(&wg);
    if (!st) st = ws;
    dt_tensor_release(gk_out), dt_tensor_release(gv_out);
    gk_out = gv_out = NULL;
    if (!st && gk_in) st = dt_add_(gk, gk_in);
    if (!st && gv_in) st = dt_add_(gv, gv_in);
    dt_tensor_release(gk_in), dt_tensor_release(gv_in);
    gk_in = gv_in = NULL;
    if (!st && r->size > 1) {
      st = block_empty(r, jn, false, &gk_in, &gv_in);
      if (!st) st = post(r, gk, gv, gk_in, gv_in, &wg);
      gk_out = gk, gv_out = gv;
    } else if (!st) {
      *dk = gk, *dv = gv;
    } else {
      dt_tensor_release(gk), dt_tensor_release(gv);
    }
    ws = works_wait(&wkv);
    if (!st) st = ws;
    dt_tensor_release(k), dt_tensor_release(v);
    k = kn, v = vn;
  }
  dt_status ws = works_wait(&wg);
  if (!st) st = ws;
  if (!st && r->size > 1) {
    *dk = gk_in, *dv = gv_in;
    gk_in = gv_in = NULL;
  }
  dt_tensor *tmp[] = {k, v, gk_in, gv_in, gk_out, gv_out};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) dt_tensor_release(tmp[i]);
  return st;
}

static dt_status cp_backward(void *state, int n_out, dt_tensor *const *grad_outputs, int n_in,
                             const bool *needs_grad, dt_tensor **grad_inputs) {
  (void)n_out, (void)n_in;
  cp_saved *s = state;
  dt_tensor *g = grad_outputs[0], *gl = grad_outputs[1];
  /* Every cp rank runs the ring, even one whose gradients arrived as nothing. */
  dt_tensor *gs = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
  /* with the merged (global) lse, so that each block's probabilities are the whole softmax's */
  dt_status st = dt__attention_grad_and_stats(s->out, s->lse, g, gl, &gs);
  if (!st) st = dt_zeros_like(s->q, &dq);
  if (!st) st = ring_backward(s, gs, dq, &dk, &dv);
  dt_tensor *grads[3] = {dq, dk, dv};
  for (int i = 0; i < 3; i++) {
    if (!st && needs_grad[i])
      grad_inputs[i] = grads[i];
    else
      dt_tensor_release(grads[i]);
  }
  dt_tensor_release(gs);
  return st;
}

static const dt_autograd_function cp_function = {
    .name = FN,
    .release = saved_release,
    .backward_n = cp_backward,
};

/* Records the call for backward: the node keeps the plan (r moves into it) and the tensors. */
static dt_status record(cp_ring *r, dt_tensor *q, dt_tensor *kc, dt_tensor *vc,
                        dt_tensor *const *inputs, dt_tensor *out, dt_tensor *lse) {
  cp_saved *s = dt__calloc(sizeof *s);
  if (!s) return dt__error(DT_ERR_NOMEM, FN ": out of memory for its autograd node");
  s->ring = *r;
  memset(r, 0, sizeof *r);
  dt_status st = dt_detach(q, &s->q);
  if (!st) st = dt_detach(kc, &s->k);
  if (!st) st = dt_detach(vc, &s->v);
  if (!st) st = dt_detach(out, &s->out);
  if (!st) st = dt_detach(lse, &s->lse);
  if (st) {
    saved_release(s);
    return st;
  }
  return dt__autograd_record_function_n(&cp_function, s, 3, inputs, 2, (dt_tensor *[]){out, lse});
}

dt_status dt_parallel_cp_attention(dt_mesh *mesh, int cp_dim, dt_tensor *q, dt_tensor *k,
                                   dt_tensor *v, dt_tensor *mask,
                                   const dt_cp_attention_options *options, dt_tensor **out,
                                   dt_tensor **lse) {
  if (out) *out = NULL;
  if (lse) *lse = NULL;
  if (!mesh) return dt__error(DT_ERR_INVALID, FN ": mesh is NULL");
  if (cp_dim < 0 || cp_dim >= dt_mesh_ndim(mesh))
    return dt__error(DT_ERR_INVALID, FN ": cp_dim %d outside the mesh's %d dims", cp_dim,
                     dt_mesh_ndim(mesh));
  cp_ring r = {0};
  bool requires =
      dt_grad_mode_enabled() && q && k && v &&
      (dt_tensor_requires_grad(q) || dt_tensor_requires_grad(k) || dt_tensor_requires_grad(v));
  bool prev = dt_grad_mode_set(false);
  dt_tensor *kc = NULL, *vc = NULL, *o = NULL, *l = NULL;
  dt_status st = plan(&r, mesh, cp_dim, q, k, v, mask, options, out);
  if (!st) st = dt_contiguous(k, &kc);
  if (!st) st = dt_contiguous(v, &vc);
  dt_cp_attention_stats stats = {0};
  if (!st) st = ring_forward(&r, q, kc, vc, &o, &l, &stats);
  if (!st && options && options->stats) *options->stats = stats;
  dt_grad_mode_set(prev);
  if (!st && requires) st = record(&r, q, kc, vc, (dt_tensor *[]){q, k, v}, o, l);
  ring_clear(&r);
  dt_tensor_release(kc), dt_tensor_release(vc);
  if (st) {
    dt_tensor_release(o), dt_tensor_release(l);
    return st;
  }
  *out = o;
  if (lse)
    *lse = l;
  else
    dt_tensor_release(l);
  return DT_OK;
}
