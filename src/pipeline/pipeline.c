/*
 * Running a pipeline schedule on one pp rank (pipeline.h): the batch split into microbatches,
 * then this rank's actions in order. A stage's input is a leaf that requires grad (received,
 * or detached from the previous stage's output on this rank), so each stage's backward stops
 * at its input and hands the input's gradient to the previous stage; the last stage
 * back-propagates each microbatch's scaled loss. Parameters' gradients accumulate over the
 * microbatches as autograd adds into `.grad`.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"
#include "dtensor/profile.h"
#include "pipeline/pipeline_impl.h"

static const char FN[] = "dt_pipeline_step";

/* The state of one (local stage, microbatch) between its actions. */
typedef struct mb_state {
  dt_tensor *input;    /* the stage's input (stage 0: the microbatch; else a leaf) */
  dt_tensor *act_buf;  /* the pool buffer under a received input */
  dt_tensor *output;   /* the stage's output (not the last stage), Partial made Replicate */
  dt_tensor *loss;     /* the last stage: the scaled loss */
  dt_tensor *grad_out; /* the gradient of output, received */
  dt_tensor *grad_buf; /* the pool buffer under grad_out */
  dt_tensor *grad_in;  /* the gradient of input, to send or hand over */
} mb_state;

struct dt_pipeline {
  dt_pp_schedule *schedule;
  int rank, n_ranks, n_stages, n_micro, n_local;
  dt_module **stages;
  dt_pp_loss_fn loss_fn;
  void *loss_user;
  dt_pipeline_options opt;
  dt__pp_link link;
  mb_state *mb;       /* [n_local * n_micro] */
  dt_tensor **inputs; /* [n_micro] this step's microbatches (rank of stage 0) */
  dt_tensor **targets;
  double *scales; /* [n_micro] loss scales (rank of the last stage) */
  double loss_sum;
  int64_t schedule_hash; /* of the schedule's counts and actions, compared across pp ranks */
};

/* ---- Creating ----------------------------------------------------------------------------- */

void dt_pipeline_destroy(dt_pipeline *p) {
  if (!p) return;
  dt__pp_link_free(&p->link);
  dt_pp_schedule_destroy(p->schedule);
  DT__FREE_EACH(p->stages, p->mb, p->inputs, p->targets, p->scales, p);
}

/* A hash of the schedule: its counts and every rank's actions. */
static int64_t schedule_hash(const dt_pp_schedule *s) {
  uint64_t h = dt__hash_mix(dt__hash_mix(dt__hash_mix(0x9e3779b97f4a7c15ull, (uint64_t)s->n_ranks),
                                         (uint64_t)s->n_stages),
                            (uint64_t)s->n_microbatches);
  for (int r = 0; r < s->n_ranks; r++) {
    h = dt__hash_mix(h, (uint64_t)s->counts[r]);
    for (int i = 0; i < s->counts[r]; i++) {
      const dt_pp_action *a = &s->actions[r][i];
      h = dt__hash_mix(h, ((uint64_t)a->kind << 56) ^ ((uint64_t)(uint32_t)a->stage << 28) ^
                              (uint64_t)(uint32_t)a->microbatch);
    }
  }
  return (int64_t)(h >> 2); /* non-negative, so its negation is too */
}

dt_status dt_pipeline_create(dt_comm *pp_group, const dt_pp_schedule *schedule, int n_local_stages,
                             dt_module *const *stages, dt_pp_loss_fn loss_fn, void *loss_user,
                             const dt_pipeline_options *options, dt_pipeline **out) {
  static const char fn[] = "dt_pipeline_create";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!pp_group || !schedule || !stages || !loss_fn)
    return dt__error(DT_ERR_INVALID, "%s: NULL pp_group, schedule, stages or loss_fn", fn);
  if (dt_comm_size(pp_group) != schedule->n_ranks) {
    return dt__error(DT_ERR_INVALID, "%s: the pp group has %d ranks, the schedule %d", fn,
                     dt_comm_size(pp_group), schedule->n_ranks);
  }
  int per_rank = schedule->n_stages / schedule->n_ranks;
  if (n_local_stages != per_rank) {
    return dt__error(DT_ERR_INVALID, "%s: %d local stages given, the schedule has %d per rank", fn,
                     n_local_stages, per_rank);
  }
  for (int i = 0; i < n_local_stages; i++)
    if (!stages[i]) return dt__error(DT_ERR_INVALID, "%s: stages[%d] is NULL", fn, i);
  dt_pipeline_options opt = options ? *options : (dt_pipeline_options){0};
  if ((unsigned)opt.loss_scale > DT_PP_SCALE_NONE)
    return dt__error(DT_ERR_INVALID, "%s: loss_scale %d is not a dt_pp_loss_scale", fn,
                     (int)opt.loss_scale);
  dt_pipeline *p = dt__calloc(sizeof *p);
  if (!p) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  p->rank = dt_comm_rank(pp_group);
  p->n_ranks = schedule->n_ranks;
  p->n_stages = schedule->n_stages;
  p->n_micro = schedule->n_microbatches;
  p->n_local = n_local_stages;
  p->loss_fn = loss_fn;
  p->loss_user = loss_user;
  p->opt = opt;
  size_t m = (size_t)p->n_micro;
  p->stages = dt__alloc(sizeof *p->stages * (size_t)n_local_stages);
  p->mb = dt__calloc(sizeof *p->mb * (size_t)n_local_stages * m);
  p->inputs = dt__calloc(sizeof *p->inputs * m);
  p->targets = dt__calloc(sizeof *p->targets * m);
  p->scales = dt__calloc(sizeof *p->scales * m);
  dt_status st = p->stages && p->mb && p->inputs && p->targets && p->scales
                     ? DT_OK
                     : dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  if (!st) st = dt__pp_schedule_copy(schedule, &p->schedule);
  if (!st) p->schedule_hash = schedule_hash(p->schedule);
  if (!st) st = dt__pp_link_init(&p->link, pp_group);
  if (st) {
    dt_pipeline_destroy(p);
    return st;
  }
  memcpy(p->stages, stages, sizeof *p->stages * (size_t)n_local_stages);
  *out = p;
  return DT_OK;
}

int64_t dt_pipeline_bytes_sent(const dt_pipeline *p) { return p ? p->link.bytes_sent : 0; }
int64_t dt_pipeline_buffers_allocated(const dt_pipeline *p) {
  return p ? p->link.pool.allocated : 0;
}

/* ---- Microbatches --------------------------------------------------------------------------- */

/* Rows of piece i when n rows split into m (torch.tensor_split: the first n % m get one more). */
static int64_t piece_rows(int64_t n, int m, int i) { return n / m + (i < n % m ? 1 : 0); }
static int64_t piece_start(int64_t n, int m, int i) {
  return (int64_t)i * (n / m) + (i < n % m ? i : n % m);
}

/* Splits t on dim 0 into m pieces (views) and the global rows of each. */
static dt_status split_batch(const char *what, dt_tensor *t, int m, dt_tensor **pieces,
                             int64_t *rows, int64_t *total) {
  int ndim = dt_dist_ndim(t);
  if (ndim < 1) return dt__error(DT_ERR_INVALID, "%s: the %s is 0-d: nothing to split", FN, what);
  const int64_t *global = dt_dist_global_shape(t);
  if (global[0] < m) {
    return dt__error(DT_ERR_INVALID, "%s: the %s has %lld rows, fewer than the %d microbatches", FN,
                     what, (long long)global[0], m);
  }
  *total = global[0];
  if (!dt_tensor_is_distributed(t)) {
    for (int i = 0; i < m; i++) {
      rows[i] = piece_rows(global[0], m, i);
      PP_CHECK(dt_narrow(t, 0, piece_start(global[0], m, i), rows[i], &pieces[i]));
    }
    return DT_OK;
  }
  dt_mesh *mesh = dt_dist_mesh(t);
  const dt_placement *pl = dt_dist_placements(t);
  int mesh_ndim = dt_mesh_ndim(mesh), shard_dim = -1;
  for (int d = 0; d < mesh_ndim; d++) {
    if (pl[d].kind == DT_PARTIAL || pl[d].kind == DT_STRIDED_SHARD) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: the %s is %s on mesh dim %d; a batch is Shard(0) "
                       "or Replicate",
                       FN, what, pl[d].kind == DT_PARTIAL ? "Partial" : "StridedShard", d);
    }
    if (pl[d].kind == DT_SHARD && (pl[d].dim == 0 || pl[d].dim == -ndim)) {
      if (shard_dim >= 0) {
        return dt__error(DT_ERR_UNSUPPORTED, "%s: the %s's dim 0 is sharded by mesh dims %d and %d",
                         FN, what, shard_dim, d);
      }
      shard_dim = d;
    }
  }
  /* The local rows of each coordinate along the sharding mesh dim (torch.chunk). */
  int ranks = shard_dim >= 0 ? dt_mesh_size(mesh, shard_dim) : 1;
  int64_t chunk = (global[0] + ranks - 1) / ranks;
  dt_tensor *local = NULL;
  PP_CHECK(dt_dist_to_local(t, &local));
  int64_t mine = dt_tensor_shape(local)[0];
  dt_status st = DT_OK;
  int64_t shape[DT_PP_MAX_DIMS + 1];
  if (ndim > DT_PP_MAX_DIMS) {
    st = dt__error(DT_ERR_UNSUPPORTED, "%s: the %s has %d dims, more than %d", FN, what, ndim,
                   DT_PP_MAX_DIMS);
  }
  for (int i = 0; i < m && !st; i++) {
    rows[i] = 0;
    for (int c = 0; c < ranks; c++) {
      int64_t lc = global[0] - c * chunk;
      lc = lc < 0 ? 0 : lc > chunk ? chunk : lc;
      rows[i] += piece_rows(lc, m, i);
    }
    if (rows[i] == 0) {
      st = dt__error(DT_ERR_INVALID, "%s: microbatch %d of the %s would be empty", FN, i, what);
      break;
    }
    memcpy(shape, global, sizeof *shape * (size_t)ndim);
    shape[0] = rows[i];
    dt_tensor *piece = NULL;
    st = dt_narrow(local, 0, piece_start(mine, m, i), piece_rows(mine, m, i), &piece);
    dt_dist_from_local_options fo = {.global_shape = shape, .global_ndim = ndim};
    if (!st) st = dt_dist_from_local(mesh, piece, mesh_ndim, pl, &fo, &pieces[i]);
    dt_tensor_release(piece);
  }
  dt_tensor_release(local);
  return st;
}

/* ---- Headers and layouts --------------------------------------------------------------------- */

/* The header of t (local or distributed) and its contiguous local block in *block. */
static dt_status describe(const dt_tensor *t, int kind, int stage, int mb, dt__pp_header *h,
                          dt_tensor **block) {
  memset(h, 0, sizeof *h);
  h->kind = kind;
  h->stage = stage;
  h->microbatch = mb;
  h->dtype = dt_tensor_dtype(t);
  h->ndim = dt_dist_ndim(t);
  if (h->ndim > DT_PP_MAX_DIMS) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: stage %d's %s has %d dims, more than %d", FN, stage,
                     kind == DT_PP_SEND_ACTIVATION ? "output" : "input gradient", h->ndim,
                     DT_PP_MAX_DIMS);
  }
  dt_tensor *local = NULL;
  bool prev = dt_grad_mode_set(false);
  dt_status st = DT_OK;
  if (dt_tensor_is_distributed(t)) {
    h->n_placements = dt_mesh_ndim(dt_dist_mesh(t));
    memcpy(h->placements, dt_dist_placements(t), sizeof *h->placements * (size_t)h->n_placements);
    st = dt_dist_to_local((dt_tensor *)t, &local);
  } else {
    local = dt_tensor_retain((dt_tensor *)t);
  }
  if (!st) st = dt_contiguous(local, block);
  dt_grad_mode_set(prev);
  dt_tensor_release(local);
  if (st) return st;
  memcpy(h->global_shape, dt_dist_global_shape(t), sizeof(int64_t) * (size_t)h->ndim);
  memcpy(h->local_shape, dt_tensor_shape(*block), sizeof(int64_t) * (size_t)h->ndim);
  return DT_OK;
}

/* The tensor a received buffer stands for: a fresh handle on buf (local) or buf wrapped with
 * the header's placements on mesh. */
static dt_status rebuild(dt_mesh *mesh, const dt__pp_header *h, dt_tensor *buf, dt_tensor **out) {
  if (h->n_placements == 0) return dt_detach(buf, out);
  if (!mesh) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: stage %d sent a distributed tensor and this pipeline "
                     "has no stage_mesh (dt_pipeline_options)",
                     FN, h->stage);
  }
  if (h->n_placements != dt_mesh_ndim(mesh)) {
    return dt__error(DT_ERR_INVALID,
                     "%s: stage %d sent placements for a %d-D mesh; the stage mesh "
                     "is %d-D",
                     FN, h->stage, h->n_placements, dt_mesh_ndim(mesh));
  }
  dt_dist_from_local_options fo = {.global_shape = h->global_shape, .global_ndim = h->ndim};
  return dt_dist_from_local(mesh, buf, h->n_placements, h->placements, &fo, out);
}

/* A distributed output with a Partial placement, made Replicate there (recorded). */
static dt_status settle_partial(dt_tensor *y, dt_tensor **out) {
  if (!dt_tensor_is_distributed(y)) {
    *out = dt_tensor_retain(y);
    return DT_OK;
  }
  int n = dt_mesh_ndim(dt_dist_mesh(y));
  dt_placement pl[DT_MESH_MAX_DIMS];
  bool partial = false;
  for (int d = 0; d < n; d++) {
    pl[d] = dt_dist_placements(y)[d];
    if (pl[d].kind == DT_PARTIAL) {
      pl[d] = dt_replicate();
      partial = true;
    }
  }
  if (!partial) {
    *out = dt_tensor_retain(y);
    return DT_OK;
  }
  return dt_dist_redistribute(y, n, pl, out);
}

static dt_status make_leaf(dt_tensor *x) {
  if (!dt_dtype_is_floating(dt_tensor_dtype(x))) return DT_OK;
  return dt_tensor_set_requires_grad(x, true);
}

/* ---- Actions --------------------------------------------------------------------------------- */

static mb_state *state_of(dt_pipeline *p, int stage, int mb) {
  return &p->mb[(size_t)(stage / p->n_ranks) * (size_t)p->n_micro + (size_t)mb];
}

static void state_clear(dt_pipeline *p, mb_state *s) {
  dt_tensor_release(s->input);
  dt_tensor_release(s->output);
  dt_tensor_release(s->loss);
  dt_tensor_release(s->grad_out);
  dt_tensor_release(s->grad_in);
  dt__pp_buffer_release(&p->link, s->act_buf);
  dt__pp_buffer_release(&p->link, s->grad_buf);
  memset(s, 0, sizeof *s);
}

static dt_status loss_of(dt_pipeline *p, mb_state *s, dt_tensor *y, int mb) {
  dt_tensor *loss = NULL, *full = NULL;
  PP_CHECK(p->loss_fn(y, p->targets[mb], p->loss_user, &loss));
  dt_status st = DT_OK;
  if (!loss) st = dt__error(DT_ERR_INVALID, "%s: the loss function returned no loss", FN);
  int64_t numel = 1;
  for (int d = 0; loss && d < dt_dist_ndim(loss); d++) numel *= dt_dist_global_shape(loss)[d];
  if (!st && numel != 1) {
    st = dt__error(DT_ERR_INVALID, "%s: microbatch %d's loss has %lld elements, not 1", FN, mb,
                   (long long)numel);
  }
  if (!st) st = dt_mul_scalar(loss, p->scales[mb], &s->loss);
  bool prev = dt_grad_mode_set(false);
  double value = 0;
  if (!st && dt_tensor_is_distributed(s->loss)) st = dt_dist_full_tensor(s->loss, &full);
  if (!st) st = dt_tensor_to_doubles(full ? full : s->loss, &value, 1);
  dt_grad_mode_set(prev);
  dt_tensor_release(full);
  dt_tensor_release(loss);
  if (!st) p->loss_sum += value;
  return st;
}

static dt_status run_forward(dt_pipeline *p, int stage, int mb) {
  mb_state *s = state_of(p, stage, mb);
  if (stage == 0) {
    s->input = dt_tensor_retain(p->inputs[mb]);
  } else if (!s->input) { /* the previous stage on this rank: hand its output over */
    mb_state *prev = state_of(p, stage - 1, mb);
    bool mode = dt_grad_mode_set(false);
    dt_status st = dt_detach(prev->output, &s->input);
    dt_grad_mode_set(mode);
    PP_CHECK(st);
    PP_CHECK(make_leaf(s->input));
  }
  bool mode = dt_grad_mode_set(true);
  dt_tensor *y = NULL;
  dt_status st = dt_module_forward(p->stages[stage / p->n_ranks], s->input, &y);
  if (!st && stage == p->n_stages - 1) st = loss_of(p, s, y, mb);
  if (!st && stage < p->n_stages - 1) st = settle_partial(y, &s->output);
  dt_grad_mode_set(mode);
  dt_tensor_release(y);
  return st;
}

static dt_status run_backward(dt_pipeline *p, int stage, int mb) {
  mb_state *s = state_of(p, stage, mb);
  dt_status st;
  if (stage == p->n_stages - 1) {
    st = dt_backward(s->loss, NULL);
  } else {
    dt_tensor *g = s->grad_out;
    if (!g) { /* the next stage on this rank */
      mb_state *next = state_of(p, stage + 1, mb);
      g = s->grad_out = next->grad_in;
      next->grad_in = NULL;
    }
    /* A stage whose output needs no gradient (frozen, or no parameters before it) stops. */
    st = dt_tensor_requires_grad(s->output) ? dt_backward(s->output, g) : DT_OK;
  }
  dt_tensor *gi = NULL;
  bool mode = dt_grad_mode_set(false);
  if (!st && stage > 0) {
    st = dt_tensor_grad(s->input, &gi);
    if (!st && !gi) st = dt_zeros_like(s->input, &gi);
    if (!st && dt_tensor_is_distributed(gi)) {
      dt_tensor *moved = NULL;
      int n = dt_mesh_ndim(dt_dist_mesh(s->input));
      st = dt_dist_redistribute(gi, n, dt_dist_placements(s->input), &moved);
      dt_tensor_release(gi);
      gi = moved;
    }
  }
  dt_grad_mode_set(mode);
  if (st) {
    dt_tensor_release(gi);
    return st;
  }
  dt_tensor *keep = gi;
  s->grad_in = NULL;
  state_clear(p, s);
  s->grad_in = keep;
  return DT_OK;
}

static dt_status run_send(dt_pipeline *p, dt_pp_action a) {
  mb_state *s = state_of(p, a.stage, a.microbatch);
  bool act = a.kind == DT_PP_SEND_ACTIVATION;
  dt_tensor *t = act ? s->output : s->grad_in;
  dt__pp_header h;
  dt_tensor *block = NULL;
  PP_CHECK(describe(t, a.kind, a.stage, a.microbatch, &h, &block));
  int peer = dt__pp_stage_rank(p->schedule, act ? a.stage + 1 : a.stage - 1);
  dt_status st = dt__pp_send(&p->link, peer, &h, block);
  dt_tensor_release(block);
  if (!act) {
    dt_tensor_release(s->grad_in);
    s->grad_in = NULL;
  }
  return st;
}

/* Whether the received gradient has the layout of the output it belongs to. */
static dt_status check_grad_layout(const dt__pp_header *h, const dt_tensor *y) {
  bool same = h->dtype == dt_tensor_dtype(y) && h->ndim == dt_dist_ndim(y);
  for (int d = 0; same && d < h->ndim; d++) same = h->global_shape[d] == dt_dist_global_shape(y)[d];
  int n = dt_tensor_is_distributed(y) ? dt_mesh_ndim(dt_dist_mesh(y)) : 0;
  same = same && h->n_placements == n;
  for (int d = 0; same && d < n; d++) {
    dt_placement a = h->placements[d], b = dt_dist_placements(y)[d];
    same = a.kind == b.kind && (a.kind != DT_SHARD || a.dim == b.dim);
  }
  if (same) return DT_OK;
  return dt__error(DT_ERR_INVALID,
                   "%s: the gradient received for stage %d microbatch %d does not "
                   "have the layout (dtype, shape, placements) of the output sent",
                   FN, h->stage - 1, h->microbatch);
}

static dt_status run_recv(dt_pipeline *p, dt_pp_action a) {
  mb_state *s = state_of(p, a.stage, a.microbatch);
  bool act = a.kind == DT_PP_RECV_ACTIVATION;
  int from = act ? a.stage - 1 : a.stage + 1;
  dt__pp_header want = {.kind = act ? DT_PP_SEND_ACTIVATION : DT_PP_SEND_GRAD,
                        .stage = from,
                        .microbatch = a.microbatch},
                got;
  dt_tensor *buf = NULL, *t = NULL;
  PP_CHECK(dt__pp_recv(&p->link, dt__pp_stage_rank(p->schedule, from), &want, &got, &buf));
  dt_status st = act ? DT_OK : check_grad_layout(&got, s->output);
  dt_mesh *mesh = act ? p->opt.stage_mesh : dt_dist_mesh(s->output);
  if (!st) st = rebuild(mesh, &got, buf, &t);
  if (!st && act) st = make_leaf(t);
  if (st) {
    dt_tensor_release(t);
    dt__pp_buffer_release(&p->link, buf);
    return st;
  }
  if (act) {
    s->input = t;
    s->act_buf = buf;
  } else {
    s->grad_out = t;
    s->grad_buf = buf;
  }
  return DT_OK;
}

static dt_status run_action(dt_pipeline *p, dt_pp_action a) {
  char name[48];
  bool named = p->opt.profile_actions && (a.kind == DT_PP_FORWARD || a.kind == DT_PP_BACKWARD);
  if (named) dt_profiler_range_push(dt_pp_action_format(a, name, sizeof name));
  dt_status st;
  switch (a.kind) {
  case DT_PP_FORWARD: st = run_forward(p, a.stage, a.microbatch); break;
  case DT_PP_BACKWARD: st = run_backward(p, a.stage, a.microbatch); break;
  case DT_PP_SEND_ACTIVATION:
  case DT_PP_SEND_GRAD: st = run_send(p, a); break;
  default: st = run_recv(p, a); break;
  }
  if (named) dt_profiler_range_pop();
  return st;
}

/* ---- The step ----------------------------------------------------------------------------------
 */

static void drop_step(dt_pipeline *p) {
  for (int i = 0; i < p->n_local * p->n_micro; i++) state_clear(p, &p->mb[i]);
  for (int i = 0; i < p->n_micro; i++) {
    dt_tensor_release(p->inputs[i]);
    dt_tensor_release(p->targets[i]);
    p->inputs[i] = p->targets[i] = NULL;
  }
}

static dt_status prepare(dt_pipeline *p, dt_tensor *input, dt_tensor *target) {
  bool first = p->rank == 0, last = p->rank == dt__pp_stage_rank(p->schedule, p->n_stages - 1);
  if (first && !input)
    return dt__error(DT_ERR_INVALID, "%s: pp rank 0 holds stage 0 and needs the input", FN);
  if (last && !target) {
    return dt__error(DT_ERR_INVALID, "%s: pp rank %d holds the last stage and needs the target", FN,
                     p->rank);
  }
  int64_t rows[1024], *r = p->n_micro <= 1024 ? rows : dt__alloc(sizeof *r * (size_t)p->n_micro);
  if (!r) return dt__error(DT_ERR_NOMEM, "%s: out of memory", FN);
  int64_t total = 0;
  bool mode = dt_grad_mode_set(false);
  dt_status st = first ? split_batch("input", input, p->n_micro, p->inputs, r, &total) : DT_OK;
  if (!st && last) st = split_batch("target", target, p->n_micro, p->targets, r, &total);
  dt_grad_mode_set(mode);
  for (int i = 0; !st && last && i < p->n_micro; i++) {
    p->scales[i] = p->opt.loss_scale == DT_PP_SCALE_ROWS           ? (double)r[i] / (double)total
                   : p->opt.loss_scale == DT_PP_SCALE_MICROBATCHES ? 1.0 / p->n_micro
                                                                   : 1.0;
  }
  if (r != rows) dt__free(r);
  return st;
}

/* Every pp rank learns whether one refused its arguments, and whether all made the same
 * schedule (one all_reduce of three int64: the refusing rank, the schedule's hash and its
 * negation), so that a refusal on one rank, or a rank with other counts or actions, does not
 * leave the others waiting for transfers that never come. With a stage mesh, a second
 * all_reduce over it tells the other pp groups: a stage mesh holds one rank of every pp group,
 * so a refusal in one group stops every group's step, and no stage's tensor-parallel or
 * data-parallel collective waits for a rank that returned. */
static dt_status agree(dt_pipeline *p, dt_status mine) {
  int64_t h = p->schedule_hash, v[3] = {mine ? p->rank + 1 : 0, h, -h};
  dt_tensor *t = NULL;
  dt_status st = dt_from_data(v, 1, (int64_t[]){3}, DT_I64, &t);
  char message[512];
  snprintf(message, sizeof message, "%s", dt_last_error());
  if (!st) st = dt_comm_all_reduce(p->link.comm, t, DT_REDUCE_MAX);
  if (!st) memcpy(v, dt_tensor_data(t), sizeof v);
  dt_tensor_release(t);
  bool differ = !st && (v[1] != h || -v[2] != h), refused = !st && v[0] > 0;
  int64_t elsewhere = mine || differ || refused;
  if (!st && p->opt.stage_mesh) {
    t = NULL;
    st = dt_from_data(&elsewhere, 1, (int64_t[]){1}, DT_I64, &t);
    if (!st) st = dt_comm_all_reduce(dt_mesh_world(p->opt.stage_mesh), t, DT_REDUCE_MAX);
    if (!st) memcpy(&elsewhere, dt_tensor_data(t), sizeof elsewhere);
    dt_tensor_release(t);
  }
  if (mine) return dt__error(mine, "%s", message);
  if (st) return st;
  if (differ) {
    return dt__error(DT_ERR_INVALID,
                     "%s: the pp ranks run different schedules (pp rank %d: %d ranks, %d stages, "
                     "%d microbatches); every rank must make the same one; no transfer started",
                     FN, p->rank, p->n_ranks, p->n_stages, p->n_micro);
  }
  if (refused) {
    return dt__error(DT_ERR_INVALID,
                     "%s: pp rank %d refused its arguments (its error says "
                     "why); no transfer started",
                     FN, (int)v[0] - 1);
  }
  if (elsewhere) {
    return dt__error(DT_ERR_INVALID,
                     "%s: a rank of another pp group refused its arguments or schedule (its error "
                     "says why); no transfer started in any pp group",
                     FN);
  }
  return DT_OK;
}

dt_status dt_pipeline_step(dt_pipeline *p, dt_tensor *input, dt_tensor *target, double *loss) {
  if (!p) return dt__error(DT_ERR_INVALID, "%s: pipeline is NULL", FN);
  if (loss) *loss = 0;
  p->loss_sum = 0;
  dt_status st = agree(p, prepare(p, input, target));
  if (st) { /* nothing was sent: every pp rank returns the refusal, the group stays usable */
    drop_step(p);
    return st;
  }
  int n = p->schedule->counts[p->rank];
  const dt_pp_action *actions = p->schedule->actions[p->rank];
  for (int i = 0; i < n && !st; i++) st = run_action(p, actions[i]);
  if (st && st != DT_ERR_ABORTED) {
    /* The peers wait for this rank's transfers: abort the group rather than leave them hung. */
    char reason[256];
    snprintf(reason, sizeof reason, "%s failed on pp rank %d: %s", FN, p->rank, dt_last_error());
    dt_comm_abort(p->link.comm, reason);
    dt__error(st, "%s", reason);
  }
  dt_status flushed = dt__pp_link_flush(&p->link);
  if (!st) st = flushed;
  drop_step(p);
  if (st) return st;
  /* Every pp rank learns the loss from the rank of the last stage. */
  dt_tensor *value = NULL;
  st = dt_from_data(&p->loss_sum, 1, (int64_t[]){1}, DT_F64, &value);
  if (!st)
    st = dt_comm_broadcast(p->link.comm, value, dt__pp_stage_rank(p->schedule, p->n_stages - 1));
  if (!st && loss) st = dt_tensor_to_doubles(value, loss, 1);
  dt_tensor_release(value);
  return st;
}
