/*
 * Fully sharded data parallel (PyTorch's fully_shard, FSDP2) on the eager path.
 *
 * Every module of the tree that has parameters of its own becomes a unit: its parameters are
 * replaced by Shard(0) distributed tensors on the data-parallel mesh dim (leaves that require
 * grad, which the optimizer updates). A pre-hook all-gathers each shard over dp into a buffer
 * the unit can free and refill (in param_dtype under mixed precision) and sets it on the
 * module as a Replicate-on-dp parameter, recorded with a backward that reduce-scatters the
 * Partial gradient back to the shard (in reduce_dtype). A post-hook swaps the sharded
 * parameters back (reshard after forward) and frees the gathered buffers although the
 * autograd graph saved them: the output passes through an identity node whose backward, run
 * before any node of the unit, gathers them again (the pre-backward); the gather's backward
 * frees them once more (reshard after backward). Peak memory then holds one unit's gathered
 * parameters at a time, as in PyTorch FSDP2.
 * With prefetch, a unit's pre-hook also starts the next unit's all-gathers (async
 * collectives) so they run while this unit computes, and a unit's pre-backward starts the
 * previous unit's re-gathers, whose backward comes next.
 */
#include <stdio.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"
#include "dtensor/parallel.h"
#include "mesh/mesh_impl.h"
#include "nn/nn_impl.h"
#include "parallel/parallel_impl.h"
#include "tensor/tensor_impl.h"

/* A gather keeps the per-rank row counts of its dim in its parameter. */
#define DT_FSDP_MAX_GATHER_RANKS 64

typedef struct fsdp_param {
  char name[64];
  dt_tensor *sharded; /* the leaf the optimizer updates (a reference) */
  /* The leaf's placements: Shard(d) or Replicate on the data-parallel dim; the other dims
   * keep what dt_parallel_tp_module gave the parameter (Replicate when it was local). */
  dt_placement shard_p[DT_MAX_DIMS];
  int gather_dim;       /* d of Shard(d) on dp, or -1: Replicate on dp, nothing gathered */
  dt_tensor *unsharded; /* between pre- and post-hook, or kept without resharding */
  /* The gathered local buffer of the last forward (a gathered_buffer, see below). After a
   * recorded forward its storage is freed and the autograd graph holds it empty until the
   * unit's pre-backward gathers into it again. */
  dt_tensor *local;
  /* A gather in flight (or finished, not yet copied) into `gather_target`: the local piece
   * being sent, the staging buffer of a gather on a dim other than 0, the collective. */
  dt_tensor *gather_target, *gather_src, *gather_staging;
  dt_work *gather_work;
  /* Rows per rank: the threads backend reads them until the work completes, so they live
   * here rather than on the stack of the call that starts it. */
  int64_t gather_counts[DT_FSDP_MAX_GATHER_RANKS];
} fsdp_param;

typedef struct fsdp_unit fsdp_unit;

/* The units of one dt_parallel_fsdp call in forward (visit) order, shared by them so that a
 * unit can prefetch the next (and in backward the previous); a unit whose module goes clears
 * its slot. */
typedef struct fsdp_group {
  int refs;
  bool no_sync; /* dt_parallel_fsdp_set_gradient_sync(false): gradients accumulate unreduced */
  int n, cap;
  fsdp_unit **units;
} fsdp_group;

typedef struct fsdp_unit {
  int refs;      /* the module's hooks, and each pre-backward node of a recorded forward */
  dt_mesh *mesh; /* a reference: the hooks may outlive the caller's mesh handle */
  int mesh_dim;
  bool reshard_after_forward;
  bool prefetch;
  dt_dtype param_dtype, reduce_dtype; /* the mixed precision policy (DT_F32: none) */
  fsdp_group *group;                  /* NULL once the module released the unit */
  int index;                          /* in group->units */
  int n;
  fsdp_param params[DT_FSDP_MAX_UNIT_PARAMS];
  char fqn[256]; /* the module's, for error messages */
} fsdp_unit;

static void group_release(fsdp_group *g) {
  if (!g || --g->refs > 0) return;
  dt__free(g->units);
  dt__free(g);
}

/* ---- Gathered buffers ------------------------------------------------------------------------
 * A gathered parameter lives in memory the unit can free and refill while tensors (the ones
 * autograd saved) keep pointing at it, as PyTorch FSDP2 resizes the unsharded storage to 0
 * after forward and back before backward: a dt_wrap_ex tensor over a buffer this file
 * allocates, whose storage's data pointer is set to NULL when freed. Nothing may read it
 * then; the unit's pre-backward refills it before any node that saved it runs. */
typedef struct gathered_buffer {
  void *data;
  size_t nbytes;
} gathered_buffer;

static void gathered_release(void *user) {
  gathered_buffer *b = user;
  dt__free(b->data);
  dt__free(b);
}

static dt_status gathered_new(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  gathered_buffer *b = dt__calloc(sizeof *b);
  if (!b) return dt__error(DT_ERR_NOMEM, "out of memory");
  b->nbytes = (size_t)dt__numel(ndim, shape) * dt__dtype_sizes[dtype];
  b->data = dt__alloc(b->nbytes ? b->nbytes : 1);
  dt_status st = b->data ? DT_OK : dt__error(DT_ERR_NOMEM, "out of memory");
  if (!st) st = dt_wrap_ex(b->data, b->nbytes, ndim, shape, NULL, dtype, gathered_release, b, out);
  if (st) gathered_release(b);
  return st;
}

static bool gathered_is_free(const dt_tensor *local) { return local->storage->data == NULL; }

static void gathered_free(dt_tensor *local) {
  gathered_buffer *b = local->storage->release_user;
  dt__free(b->data);
  b->data = NULL;
  local->storage->data = NULL;
}

static dt_status gathered_refill(dt_tensor *local) {
  if (!gathered_is_free(local)) return DT_OK;
  gathered_buffer *b = local->storage->release_user;
  b->data = dt__alloc(b->nbytes ? b->nbytes : 1);
  if (!b->data) return dt__error(DT_ERR_NOMEM, "out of memory");
  local->storage->data = b->data;
  return DT_OK;
}

/* Waits for (status ignored: called on teardown, after a failure or before a fresh gather)
 * and drops a gather in flight. */
static void drop_gather(fsdp_param *fp) {
  if (fp->gather_work) {
    dt_work_wait(fp->gather_work);
    dt_work_destroy(fp->gather_work);
  }
  fp->gather_work = NULL;
  dt_tensor_release(fp->gather_src);
  dt_tensor_release(fp->gather_staging);
  dt_tensor_release(fp->gather_target);
  fp->gather_src = fp->gather_staging = fp->gather_target = NULL;
}

static void unit_release(fsdp_unit *u) {
  if (!u || --u->refs > 0) return;
  for (int i = 0; i < u->n; i++) {
    drop_gather(&u->params[i]);
    dt_tensor_release(u->params[i].sharded);
    dt_tensor_release(u->params[i].unsharded);
    dt_tensor_release(u->params[i].local);
  }
  dt__mesh_release(u->mesh);
  dt__free(u);
}

/* The module lets go of its unit: it leaves the group (no more prefetching into it); the
 * unit itself lives on while a recorded forward's pre-backward node holds it. */
static void free_unit(void *user) {
  fsdp_unit *u = user;
  if (!u) return;
  if (u->group) {
    u->group->units[u->index] = NULL;
    group_release(u->group);
    u->group = NULL;
  }
  unit_release(u);
}

static dt_status hook_failed(dt_status st, const fsdp_unit *u, const char *which) {
  return dt__parallel_hook_failed(st, "dt_parallel_fsdp", which, u->fqn);
}

static void placements_for(const fsdp_unit *u, dt_placement *p, dt_placement on_dim) {
  for (int d = 0; d < dt_mesh_ndim(u->mesh); d++) p[d] = dt_replicate();
  p[u->mesh_dim] = on_dim;
}

/* A local input is this rank's rows of the batch: it is wrapped as Shard(0) on the
 * data-parallel dim with the true global batch (the row counts are gathered first), so a loss
 * over the output is the mean over the global batch and each weight gradient a Partial sum. */
static dt_status wrap_input(fsdp_unit *u, dt_tensor *in, dt_tensor **out) {
  return dt__parallel_batch_input("dt_parallel_fsdp", u->mesh, u->mesh_dim, in, out);
}

/* With a param_dtype, a floating input is cast to it (PyTorch's cast_forward_inputs), so the
 * module computes in that dtype. */
static dt_status convert_input(fsdp_unit *u, dt_tensor *in, dt_tensor **out) {
  dt_status st = wrap_input(u, in, out);
  dt_dtype dt = dt_tensor_dtype(in);
  if (st || u->param_dtype == DT_F32 || dt == u->param_dtype || !dt_dtype_is_floating(dt)) {
    return st;
  }
  dt_tensor *cast = NULL;
  st = dt_to(*out, u->param_dtype, &cast);
  dt_tensor_release(*out);
  *out = cast;
  return st;
}

/* The backward of a gather (in param_dtype): the gradient is cast to reduce_dtype, reduced
 * back to the shard's placements over dp (a reduce-scatter, as dt_dist_redistribute's
 * recorded backward does) and returned in the master's dtype. With `local` (reshard after
 * forward), the gathered buffer is then freed again: every node that read the gathered
 * parameter feeds this node's gradient, so they have all run (PyTorch's reshard after
 * backward); a second backward's pre-backward refills it. */
typedef struct gather_state {
  int ndim;
  dt_placement p[DT_MAX_DIMS];
  dt_dtype reduce_dtype, master_dtype;
  dt_tensor *local;  /* owned, or NULL: kept gathered */
  dt_tensor *leaf;   /* the sharded leaf (a reference): its accumulated gradient */
  fsdp_group *group; /* a reference: whether gradients are synchronized now */
} gather_state;

/* Without gradient sync the Partial gradient accumulates on the leaf unreduced; with sync, an
 * accumulated one (Partial where the leaf is not) joins this one before its reduce-scatter and
 * the leaf's gradient is cleared for the sum (PyTorch FSDP2's no_sync). */
static dt_status gather_backward(void *state, dt_tensor *grad, dt_tensor **out) {
  gather_state *g = state;
  if (g->group->no_sync) return dt_to(grad, g->master_dtype, out);
  dt_tensor *low = NULL, *reduced = NULL, *acc = NULL, *acc_low = NULL, *sum = NULL;
  dt_status st = dt_to(grad, g->reduce_dtype, &low);
  if (!st) st = dt_tensor_grad(g->leaf, &acc);
  bool unsynced = false;
  for (int d = 0; acc && acc->spec && d < g->ndim; d++)
    unsynced =
        unsynced || (dt_dist_placements(acc)[d].kind == DT_PARTIAL && g->p[d].kind != DT_PARTIAL);
  if (!st && unsynced) {
    st = dt_to(acc, g->reduce_dtype, &acc_low);
    if (!st) st = dt_add(low, acc_low, &sum);
    if (!st) st = dt_tensor_set_grad(g->leaf, NULL);
  }
  if (!st) st = dt_dist_redistribute(sum ? sum : low, g->ndim, g->p, &reduced);
  if (!st) st = dt_to(reduced, g->master_dtype, out);
  dt_tensor_release(low);
  dt_tensor_release(reduced);
  dt_tensor_release(acc);
  dt_tensor_release(acc_low);
  dt_tensor_release(sum);
  if (!st && g->local && !gathered_is_free(g->local)) gathered_free(g->local);
  return st;
}

static void gather_release(void *state) {
  gather_state *g = state;
  dt_tensor_release(g->local);
  dt_tensor_release(g->leaf);
  group_release(g->group);
  dt__free(g);
}

static const dt_autograd_function gather_function = {.name = "dt_parallel_fsdp (all_gather)",
                                                     .backward = gather_backward,
                                                     .release = gather_release};

/* The gathered local shape: this rank's tensor-parallel piece, whole along gather_dim. */
static dt_status gathered_shape(fsdp_param *fp, int *ndim, int64_t *shape) {
  dt_tensor *piece = NULL;
  dt_status st = dt_dist_to_local(fp->sharded, &piece);
  if (st) return st;
  *ndim = dt_tensor_ndim(piece);
  memcpy(shape, dt_tensor_shape(piece), sizeof(int64_t) * (size_t)*ndim);
  shape[fp->gather_dim] = dt_dist_global_shape(fp->sharded)[fp->gather_dim];
  dt_tensor_release(piece);
  return DT_OK;
}

/* Starts gathering fp's shard over dp into target (refilled if freed), in target's dtype
 * (the shard is cast first under mixed precision): the uneven all-gather of dim 0, or for
 * Shard(d), d > 0 (a 2-D parameter), of the shard with dims 0 and d swapped into a staging
 * buffer that gather_finish copies back. Async: gather_finish waits. */
static dt_status gather_start(fsdp_unit *u, fsdp_param *fp, dt_tensor *target, bool async) {
  drop_gather(fp);
  int d = fp->gather_dim, w = dt_mesh_size(u->mesh, u->mesh_dim);
  if (w > DT_FSDP_MAX_GATHER_RANKS) {
    return dt__error(DT_ERR_UNSUPPORTED, "a data-parallel dim of %d ranks (at most %d)", w,
                     DT_FSDP_MAX_GATHER_RANKS);
  }
  int64_t n = dt_dist_global_shape(fp->sharded)[d];
  for (int r = 0; r < w; r++) fp->gather_counts[r] = dt__chunk_rows(n, w, r);
  bool prev = dt_grad_mode_set(false); /* the gather's backward is recorded by its caller */
  dt_tensor *piece = NULL, *cast = NULL, *moved = NULL;
  dt_status st = dt_dist_to_local(fp->sharded, &piece);
  if (!st) st = dt_to(piece, dt_tensor_dtype(target), &cast);
  if (!st && d > 0) st = dt_transpose(cast, 0, d, &moved);
  if (!st) st = dt_contiguous(d > 0 ? moved : cast, &fp->gather_src);
  if (!st && d > 0) {
    int64_t shape[DT_MAX_DIMS];
    int ndim = dt_tensor_ndim(target);
    memcpy(shape, dt_tensor_shape(target), sizeof(int64_t) * (size_t)ndim);
    shape[d] = shape[0];
    shape[0] = n;
    st = dt_empty(ndim, shape, dt_tensor_dtype(target), &fp->gather_staging);
  }
  if (!st) st = gathered_refill(target);
  if (!st) {
    fp->gather_target = dt_tensor_retain(target);
    dt_comm *group = dt_mesh_group(u->mesh, u->mesh_dim);
    dt_tensor *dst = d > 0 ? fp->gather_staging : target;
    st = async ? dt_comm_all_gather_uneven_async(group, fp->gather_src, dst, fp->gather_counts,
                                                 &fp->gather_work)
               : dt_comm_all_gather_uneven(group, fp->gather_src, dst, fp->gather_counts);
  }
  dt_grad_mode_set(prev);
  dt_tensor_release(piece);
  dt_tensor_release(cast);
  dt_tensor_release(moved);
  if (st) drop_gather(fp);
  return st;
}

/* Waits for fp's gather and lays a staged one out in its target. */
static dt_status gather_finish(fsdp_param *fp) {
  dt_status st = DT_OK;
  if (fp->gather_work) {
    st = dt_work_wait(fp->gather_work);
    dt_work_destroy(fp->gather_work);
    fp->gather_work = NULL;
  }
  if (!st && fp->gather_staging) {
    bool prev = dt_grad_mode_set(false);
    dt_tensor *back = NULL;
    /* The copy writes what the nodes that saved the buffer saw: its version stays. */
    uint32_t version = fp->gather_target->storage->version;
    st = dt_transpose(fp->gather_staging, 0, fp->gather_dim, &back);
    if (!st) st = dt_copy_(fp->gather_target, back);
    fp->gather_target->storage->version = version;
    dt_tensor_release(back);
    dt_grad_mode_set(prev);
  }
  drop_gather(fp);
  return st;
}

/* Starts the all-gather of fp into a fresh buffer (fp->local, replacing the previous one);
 * async: it is waited for later (prefetch). */
static dt_status gather_into_new(fsdp_unit *u, fsdp_param *fp, bool async) {
  int ndim = 0;
  int64_t shape[DT_MAX_DIMS];
  dt_tensor_release(fp->local);
  fp->local = NULL;
  dt_status st = gathered_shape(fp, &ndim, shape);
  if (!st) st = gathered_new(ndim, shape, u->param_dtype, &fp->local);
  if (!st) st = gather_start(u, fp, fp->local, async);
  return st;
}

/* Starts the all-gathers of u's parameters into fresh buffers without waiting for them. */
static dt_status start_prefetch(fsdp_unit *u) {
  dt_status st = DT_OK;
  for (int i = 0; i < u->n && !st; i++) {
    fsdp_param *fp = &u->params[i];
    if (fp->gather_dim < 0) continue; /* nothing to gather: redistributed in the hook */
    st = gather_into_new(u, fp, true);
  }
  return st;
}

/* Records fp->unsharded as made from fp->sharded by gather_function (its backward reduces
 * the gradient back to the shard placements); local, when not NULL, is the gathered buffer
 * the backward refills (retained). */
static dt_status record_gather(fsdp_unit *u, fsdp_param *fp, dt_tensor *local) {
  gather_state *g = dt__calloc(sizeof *g);
  if (!g) return dt__error(DT_ERR_NOMEM, "out of memory");
  g->ndim = dt_mesh_ndim(u->mesh);
  memcpy(g->p, fp->shard_p, sizeof g->p);
  g->reduce_dtype = u->reduce_dtype;
  g->master_dtype = dt_tensor_dtype(fp->sharded);
  g->local = local ? dt_tensor_retain(local) : NULL;
  g->leaf = dt_tensor_retain(fp->sharded);
  g->group = u->group;
  u->group->refs++;
  return dt__autograd_record_function(&gather_function, g, fp->sharded, fp->unsharded);
}

/* Wraps fp->local as the Replicate-on-dp unsharded parameter, recorded with the gather's
 * backward. */
static dt_status wrap_gathered(fsdp_unit *u, fsdp_param *fp) {
  int ndim = dt_mesh_ndim(u->mesh);
  dt_placement p[DT_MAX_DIMS];
  memcpy(p, fp->shard_p, sizeof p);
  p[u->mesh_dim] = dt_replicate();
  dt_dist_from_local_options o = {.global_shape = dt_dist_global_shape(fp->sharded),
                                  .global_ndim = dt_dist_ndim(fp->sharded)};
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_dist_from_local(u->mesh, fp->local, ndim, p, &o, &fp->unsharded);
  dt_grad_mode_set(prev);
  if (st || !dt__autograd_should_record(fp->sharded)) return st;
  return record_gather(u, fp, u->reshard_after_forward ? fp->local : NULL);
}

/* A parameter Replicate on dp (a colwise bias on 2-D) is not gathered: it comes out as a
 * recorded identity whose backward all-reduces the Partial gradient over dp, in reduce_dtype
 * (and is cast to param_dtype first). */
static dt_status unshard_replicated(fsdp_unit *u, fsdp_param *fp) {
  int ndim = dt_mesh_ndim(u->mesh);
  dt_tensor *low = NULL;
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_to(fp->sharded, u->param_dtype, &low);
  if (!st) st = dt_dist_redistribute(low, ndim, fp->shard_p, &fp->unsharded);
  dt_grad_mode_set(prev);
  dt_tensor_release(low);
  if (st || !dt__autograd_should_record(fp->sharded)) return st;
  return record_gather(u, fp, NULL);
}

static dt_status unshard(fsdp_unit *u, dt_module *m) {
  for (int i = 0; i < u->n; i++) {
    fsdp_param *fp = &u->params[i];
    /* Gathered again on every forward: the optimizer may have changed the shards since a
     * copy kept without resharding was made. */
    dt_tensor_release(fp->unsharded);
    fp->unsharded = NULL;
    dt_status st = DT_OK;
    if (fp->gather_dim < 0) {
      st = unshard_replicated(u, fp);
    } else if (fp->gather_work && fp->gather_target == fp->local) {
      st = gather_finish(fp); /* prefetched by the previous unit's pre-hook */
      if (!st) st = wrap_gathered(u, fp);
    } else {
      st = gather_into_new(u, fp, false);
      if (!st) st = gather_finish(fp);
      if (!st) st = wrap_gathered(u, fp);
    }
    if (st) return st;
    st = dt_module_set_tensor(m, fp->name, fp->unsharded);
    if (st) return st;
  }
  return DT_OK;
}

/* Puts the sharded leaves back on the module and drops this unit's references to the
 * gathered parameters (the autograd graph keeps what the backward needs). */
static dt_status reshard(fsdp_unit *u, dt_module *m) {
  dt_status first = DT_OK;
  for (int i = 0; i < u->n; i++) {
    fsdp_param *fp = &u->params[i];
    dt_status st = dt_module_set_tensor(m, fp->name, fp->sharded);
    if (st && !first) first = st;
    dt_tensor_release(fp->unsharded);
    fp->unsharded = NULL;
  }
  return first;
}

/* Drops the unit's gathered buffers (a forward that recorded nothing, or one that failed):
 * their memory goes with the last tensor that views them. */
static void drop_locals(fsdp_unit *u) {
  for (int i = 0; i < u->n; i++) {
    drop_gather(&u->params[i]);
    dt_tensor_release(u->params[i].local);
    u->params[i].local = NULL;
  }
}

/* ---- Pre-backward ----------------------------------------------------------------------------
 * After a recorded forward with reshard, the unit's output passes through an identity node
 * whose backward runs before any node of the unit (they all take their gradient from it): it
 * gathers the unit's parameters back into the buffers the graph saved, and with prefetch
 * starts the previous unit's gathers, whose backward comes next (PyTorch FSDP2's
 * pre-backward hook on the module outputs). */
typedef struct prebackward_state {
  fsdp_unit *unit; /* a reference */
  int n;
  int param[DT_FSDP_MAX_UNIT_PARAMS];
  dt_tensor *local[DT_FSDP_MAX_UNIT_PARAMS]; /* owned: this forward's buffers */
} prebackward_state;

static dt_status prebackward(void *state, dt_tensor *grad, dt_tensor **out) {
  prebackward_state *s = state;
  fsdp_unit *u = s->unit;
  dt_status st = DT_OK;
  for (int i = 0; i < s->n && !st; i++) {
    fsdp_param *fp = &u->params[s->param[i]];
    dt_tensor *local = s->local[i];
    if (fp->gather_target == local) {
      st = gather_finish(fp); /* prefetched by the next unit's pre-backward */
    } else if (gathered_is_free(local)) {
      st = gather_start(u, fp, local, false);
      if (!st) st = gather_finish(fp);
    }
  }
  fsdp_unit *prev = u->prefetch && u->group && u->index > 0 ? u->group->units[u->index - 1] : NULL;
  for (int i = 0; prev && i < prev->n && !st; i++) {
    fsdp_param *fp = &prev->params[i];
    if (fp->local && !fp->gather_target && gathered_is_free(fp->local)) {
      st = gather_start(prev, fp, fp->local, true);
    }
  }
  if (st) return hook_failed(st, u, "pre-backward");
  *out = dt_tensor_retain(grad);
  return DT_OK;
}

static void prebackward_release(void *state) {
  prebackward_state *s = state;
  for (int i = 0; i < s->n; i++) dt_tensor_release(s->local[i]);
  unit_release(s->unit);
  dt__free(s);
}

static const dt_autograd_function prebackward_function = {
    .name = "dt_parallel_fsdp (pre-backward gather)",
    .backward = prebackward,
    .release = prebackward_release};

/* Reshard after a recorded forward: the gathered buffers the graph saved are freed, and the
 * output (in) comes back as out through the pre-backward identity that refills them. */
static dt_status free_after_forward(fsdp_unit *u, dt_tensor *in, dt_tensor **out) {
  prebackward_state *s = dt__calloc(sizeof *s);
  if (!s) return dt__error(DT_ERR_NOMEM, "out of memory");
  for (int i = 0; i < u->n; i++) {
    if (!u->params[i].local) continue;
    s->param[s->n] = i;
    s->local[s->n++] = dt_tensor_retain(u->params[i].local);
  }
  s->unit = u;
  u->refs++;
  if (s->n == 0) {
    prebackward_release(s);
    *out = dt_tensor_retain(in);
    return DT_OK;
  }
  dt_tensor *alias = NULL;
  bool prev = dt_grad_mode_set(false);
  dt_status st = dt_detach(in, &alias);
  dt_grad_mode_set(prev);
  if (st) {
    prebackward_release(s);
    return st;
  }
  st = dt__autograd_record_function(&prebackward_function, s, in, alias);
  if (st) {
    dt_tensor_release(alias);
    return st;
  }
  for (int i = 0; i < s->n; i++) gathered_free(s->local[i]);
  *out = alias;
  return DT_OK;
}

static dt_status pre_hook(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  fsdp_unit *u = user;
  dt_status st = convert_input(u, in, out);
  if (!st) st = unshard(u, m);
  /* The next unit's gathers run while this unit computes. */
  fsdp_unit *next = u->group && u->index + 1 < u->group->n ? u->group->units[u->index + 1] : NULL;
  if (!st && u->prefetch && next) st = start_prefetch(next);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
    reshard(u, m);
    drop_locals(u);
    return hook_failed(st, u, "pre-forward");
  }
  return DT_OK;
}

/* in is NULL when a hook or the forward inside this pair failed (dt_module_forward unwinds):
 * the shards go back on the module and the gathered buffers are dropped. */
static dt_status post_hook(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  fsdp_unit *u = user;
  *out = NULL;
  if (!in) {
    reshard(u, m);
    drop_locals(u);
    return DT_OK;
  }
  /* The module holds its sharded leaves again in both modes, so that between forwards a
   * state dict, an optimizer or a load sees the tensors the optimizer updates (PyTorch FSDP2
   * moves to the sharded parameters before a state dict too). Without resharding the unit
   * keeps the gathered buffers (fp->local) until its next forward and its backward does not
   * gather them again (PyTorch's reshard_after_forward=False). */
  dt_status st = reshard(u, m);
  if (!u->reshard_after_forward) {
    *out = st ? NULL : dt_tensor_retain(in);
    return st ? hook_failed(st, u, "post-forward") : DT_OK;
  }
  if (!st && dt_tensor_requires_grad(in)) {
    st = free_after_forward(u, in, out);
  } else if (!st) {
    drop_locals(u); /* nothing recorded: nothing holds the gathered buffers */
    *out = dt_tensor_retain(in);
  }
  if (st) {
    drop_locals(u);
    return hook_failed(st, u, "post-forward");
  }
  return DT_OK;
}

typedef struct shard_ctx {
  dt_mesh *mesh;
  const dt_fsdp_options *opt;
  dt_module *root;
  int units;
  fsdp_group *group;
} shard_ctx;

typedef struct collect_ctx {
  dt_module *module;
  fsdp_unit *unit;
  dt_mesh *mesh;
} collect_ctx;

/* The module's own parameters: dt_module_parameter finds names directly on the module, so a
 * visited FQN without dots after the module's prefix is one of them. */
static dt_status collect_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  collect_ctx *c = user;
  if (is_buffer || strchr(fqn, '.')) return DT_OK;
  fsdp_unit *u = c->unit;
  if (t->spec) {
    /* A tensor-parallel parameter (dt_parallel_tp_module on another dim of this mesh) is
     * sharded further over the dp dim; one already split over the dp dim is not. */
    if (dt_dist_mesh(t) != c->mesh) {
      return dt__error(DT_ERR_INVALID,
                       "dt_parallel_fsdp: parameter '%s' of '%s' is distributed on another mesh",
                       fqn, u->fqn);
    }
    const dt_placement *p = dt_dist_placements(t);
    for (int d = 0; d < dt_mesh_ndim(c->mesh); d++) {
      if (p[d].kind == DT_REPLICATE || (p[d].kind == DT_SHARD && d != u->mesh_dim)) continue;
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_fsdp: parameter '%s' of '%s' is already distributed as %s "
                       "on mesh dim %d (fully_shard applied twice?)",
                       fqn, u->fqn, p[d].kind == DT_SHARD ? "Shard" : "non-Replicate", d);
    }
  }
  if (u->n >= DT_FSDP_MAX_UNIT_PARAMS || strlen(fqn) >= sizeof u->params[0].name) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_fsdp: '%s' has more than %d parameters or a "
                     "name longer than 63 characters ('%s')",
                     u->fqn, DT_FSDP_MAX_UNIT_PARAMS, fqn);
  }
  if (dt_tensor_ndim(t) < 1) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_fsdp: parameter '%s' of '%s' is a scalar; "
                     "Shard(0) needs a dim",
                     fqn, u->fqn);
  }
  snprintf(u->params[u->n].name, sizeof u->params[0].name, "%s", fqn);
  u->n++;
  return DT_OK;
}

/* A tensor-parallel parameter gets Shard(d) on the dp dim for the first tensor dim d that no
 * other mesh dim shards (PyTorch FSDP2's shard_placement_fn idea: a colwise weight, Shard(0)
 * on tp, becomes Shard(1) on dp; a rowwise one, Shard(1) on tp, Shard(0)). Sharding a dim
 * twice ([Shard(0), Shard(0)]) is not done: that layout is not the tp shard split over dp.
 * With no free dim (a colwise bias) it stays Replicate on dp and its gradient is all-reduced
 * over dp. The new leaf is a copy: the optimizer updates it in place. */
static dt_status shard_tp_param(fsdp_unit *u, dt_tensor *t, fsdp_param *fp) {
  int mesh_ndim = dt_mesh_ndim(u->mesh), ndim = dt_dist_ndim(t);
  const dt_placement *p = dt_dist_placements(t);
  memcpy(fp->shard_p, p, sizeof(dt_placement) * (size_t)mesh_ndim);
  fp->shard_p[u->mesh_dim] = dt_replicate();
  fp->gather_dim = -1;
  for (int d = 0; d < ndim; d++) {
    bool taken = false;
    for (int k = 0; k < mesh_ndim; k++) {
      if (k == u->mesh_dim || p[k].kind != DT_SHARD) continue;
      if ((p[k].dim < 0 ? p[k].dim + ndim : p[k].dim) == d) taken = true;
    }
    if (!taken) {
      fp->shard_p[u->mesh_dim] = dt_shard(d);
      fp->gather_dim = d;
      break;
    }
  }
  bool prev = dt_grad_mode_set(false);
  dt_tensor *view = NULL;
  dt_status st = dt_dist_redistribute(t, mesh_ndim, fp->shard_p, &view);
  if (!st) st = dt_clone(view, &fp->sharded);
  dt_tensor_release(view);
  dt_grad_mode_set(prev);
  return st;
}

/* A module visited alone: dt_module_visit_tensors on a module lists its own parameters
 * without dots, its children's with dots. */
static dt_status shard_module(const char *fqn, dt_module *m, void *user) {
  shard_ctx *c = user;
  fsdp_unit *u = dt__calloc(sizeof *u);
  if (!u) return dt__error(DT_ERR_NOMEM, "dt_parallel_fsdp: out of memory");
  u->refs = 1; /* the module's hooks */
  snprintf(u->fqn, sizeof u->fqn, "%s", fqn[0] ? fqn : "(root)");
  u->mesh_dim = c->opt->mesh_dim;
  u->reshard_after_forward = !c->opt->keep_unsharded_after_forward;
  u->prefetch = c->opt->prefetch;
  u->param_dtype = c->opt->param_dtype;
  u->reduce_dtype = c->opt->reduce_dtype;
  collect_ctx cc = {m, u, c->mesh};
  dt_status st = dt_module_visit_tensors(m, collect_param, &cc);
  if (st || u->n == 0) {
    dt__free(u);
    return st;
  }
  u->mesh = dt__mesh_retain(c->mesh);
  for (int i = 0; i < u->n && !st; i++) {
    fsdp_param *fp = &u->params[i];
    dt_tensor *full = dt_module_parameter(m, fp->name);
    if (dt_tensor_is_distributed(full)) {
      st = shard_tp_param(u, full, fp);
    } else {
      placements_for(u, fp->shard_p, dt_shard(0));
      fp->gather_dim = 0;
      st = dt_dist_distribute_tensor(c->mesh, full, dt_mesh_ndim(c->mesh), fp->shard_p,
                                     &fp->sharded);
    }
    if (!st) st = dt_tensor_set_requires_grad(fp->sharded, true);
  }
  for (int i = 0; i < u->n && !st; i++) {
    st = dt_module_set_tensor(m, u->params[i].name, u->params[i].sharded);
  }
  if (st) {
    free_unit(u);
    return st;
  }
  fsdp_group *g = c->group;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 8;
    fsdp_unit **units = dt__calloc(sizeof *units * (size_t)cap);
    if (!units) {
      free_unit(u);
      return dt__error(DT_ERR_NOMEM, "dt_parallel_fsdp: out of memory");
    }
    if (g->n) memcpy(units, g->units, sizeof *units * (size_t)g->n);
    dt__free(g->units);
    g->units = units;
    g->cap = cap;
  }
  u->group = g;
  u->index = g->n;
  g->units[g->n++] = u;
  g->refs++;
  /* Around any tensor-parallel hooks: the input is wrapped over dp and the parameters
   * gathered before the TP input conversion runs, and freed after its output conversion. */
  st = dt_module_add_hooks(m, pre_hook, post_hook, u, free_unit);
  if (st) return st;
  c->units++;
  return DT_OK;
}

dt_status dt_parallel_fsdp(dt_module *module, dt_mesh *mesh, const dt_fsdp_options *options) {
  if (!module || !mesh) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_fsdp: module (%p) and mesh (%p) must not be NULL",
                     (void *)module, (void *)mesh);
  }
  dt_fsdp_options defaults = {0};
  const dt_fsdp_options *opt = options ? options : &defaults;
  if (opt->mesh_dim < 0 || opt->mesh_dim >= dt_mesh_ndim(mesh)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_fsdp: options->mesh_dim %d is not a dim of a %d-D mesh",
                     opt->mesh_dim, dt_mesh_ndim(mesh));
  }
  const dt_dtype policy[2] = {opt->param_dtype, opt->reduce_dtype};
  for (int i = 0; i < 2; i++) {
    if (policy[i] != DT_F32 && policy[i] != DT_BF16 && policy[i] != DT_F16 && policy[i] != DT_F64) {
      return dt__error(
          DT_ERR_INVALID, "dt_parallel_fsdp: options->%s is %s (%d); a floating dtype is needed",
          i ? "reduce_dtype" : "param_dtype", dt_dtype_name(policy[i]), (int)policy[i]);
    }
  }
  fsdp_group *g = dt__calloc(sizeof *g);
  if (!g) return dt__error(DT_ERR_NOMEM, "dt_parallel_fsdp: out of memory");
  g->refs = 1; /* this call's, dropped below: the units hold the others */
  shard_ctx c = {mesh, opt, module, 0, g};
  dt_status st = dt_module_visit(module, shard_module, &c);
  group_release(g);
  if (!st && c.units == 0) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_fsdp: the module has no parameters to shard");
  }
  return st;
}

static dt_status set_sync(const char *fqn, dt_module *m, void *user) {
  (void)fqn;
  bool *c = user; /* c[0]: the setting; c[1]: a unit was found */
  fsdp_unit *u = dt__module_hook_user(m, pre_hook);
  if (u && u->group) u->group->no_sync = !c[0];
  c[1] = c[1] || (u && u->group);
  return DT_OK;
}

dt_status dt_parallel_fsdp_set_gradient_sync(dt_module *module, bool sync) {
  if (!module) return dt__error(DT_ERR_INVALID, "dt_parallel_fsdp_set_gradient_sync: NULL module");
  bool c[2] = {sync, false};
  dt_status st = dt_module_visit(module, set_sync, c);
  if (!st && !c[1]) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_fsdp_set_gradient_sync: the module tree has no "
                                     "unit of dt_parallel_fsdp");
  }
  return st;
}
