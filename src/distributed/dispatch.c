/*
 * The distributed path of dt__dispatch: sharding propagation (cached per thread), input
 * redistribution, the local kernel on the shards, and wrapping the outputs.
 *
 *   key = hash(op, input specs, attributes)         -- no allocation, no formatting
 *   plan = per-thread cache lookup, else propagate and insert
 *   redistribute the inputs whose placements differ from the plan's
 *   dt__dispatch_local on the local shards
 *   outputs take the plan's (shared, refcounted) specs
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "distributed/propagate_impl.h"
#include "mesh/mesh_impl.h"
#include "profile/profile_impl.h"

#define CACHE_SLOTS 1024 /* power of two */

typedef struct op_plan {
  dt_placement targets[DT_DIST_MAX_ARGS][DT_MESH_MAX_DIMS];
  bool needs_redistribute[DT_DIST_MAX_ARGS];
  bool any_redistribute;
  int n_out;
  dt_dist_spec *out_specs[DT_OP_MAX_META];
  bool local_shape_override; /* view/reshape/expand take this rank's local shape */
  dt_op local_op;            /* the op run on the shards (squeeze and flatten run as reshape) */
  bool shard_geometry;       /* uniform_ takes the global shape and this shard's offset */
  bool row_window; /* input 0's rows sharded (DT_TRAIT_ROW_WINDOW): {row offset, all rows} */
  /* dt__dist_rewrites_call: a narrow covering the whole of a sharded dim runs as slice(dim, 0,
   * end) (its start and length count the global dim); rms_norm with its weight sharded runs
   * without it, then scales this shard's columns [columns[0], + columns[1]) by it. */
  bool rewritten;
  int64_t columns[2];
  bool argmax_candidates; /* dt__dist_argmax_candidates: the input stays, the result is R */
  /* None of the above: the op runs on the arguments as they are (the hit path reads only
   * this). */
  bool direct;
  int64_t window[2];
  /* tril/triu on a shard of the matrix dims: its row offset minus its column offset, added to
   * the diagonal so that the shard keeps its part of the global triangle. */
  int64_t diagonal_shift;
  /* batch_norm_training with its batch sharded on these mesh dims (a bit each): statistics
   * synchronized across them, over sync_count values per channel. */
  uint32_t sync_dims;
  int64_t sync_count;
  int64_t geometry[2 * DT_MAX_DIMS];
  int local_ndim;
  int64_t local_shape[DT_MAX_DIMS];
} op_plan;

typedef struct cache_entry {
  uint64_t key; /* 0: empty */
  bool is_redistribute;
  union {
    op_plan *op;
    dt_redistribute_plan *redistribute;
  } plan;
} cache_entry;

/* Op plans and redistribution plans live in separate tables: an op's execution looks up
 * redistribution plans while it holds its own plan, and an insertion that evicted that plan
 * would pull it from under the caller. */
typedef struct thread_cache {
  cache_entry slots[CACHE_SLOTS];                  /* op plans */
  cache_entry redistribute_slots[CACHE_SLOTS / 4]; /* redistribution plans */
  uint64_t entries;
  dt_dist_sharding_cache_info stats;
} thread_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static _Thread_local thread_cache *tls_cache;
static _Thread_local bool tls_cache_dead; /* destroyed at thread exit: plan without caching */
static atomic_int fallback_logged[DT_OP_COUNT];

static void free_entry(cache_entry *e) {
  if (!e->key) return;
  if (e->is_redistribute) {
    dt__free(e->plan.redistribute);
  } else {
    for (int i = 0; i < e->plan.op->n_out; i++) dt__spec_release(e->plan.op->out_specs[i]);
    dt__free(e->plan.op);
  }
  e->key = 0;
}

static void cache_destroy(void *p) {
  thread_cache *c = p;
  tls_cache = NULL;
  tls_cache_dead = true;
  if (!c) return;
  for (int i = 0; i < CACHE_SLOTS; i++) free_entry(&c->slots[i]);
  for (int i = 0; i < CACHE_SLOTS / 4; i++) free_entry(&c->redistribute_slots[i]);
  dt__free(c);
}

static void spec_release_hook(struct dt_dist_spec *spec) { dt__spec_release(spec); }

/* dt_mesh_destroy on this thread: its op plans on the mesh hold specs, so references to
 * the mesh; dropping them lets the mesh go with its last tensor. Redistribution plans hold
 * no spec (their keys carry the mesh id, which is never reused), so they stay. An emptied
 * slot may cut a probe sequence: a later key behind it then misses and is planned again,
 * which costs time, never correctness. */
static void mesh_destroy_hook(const dt_mesh *mesh) {
  thread_cache *c = tls_cache;
  if (!c) return;
  uint64_t id = dt_mesh_id(mesh);
  for (int i = 0; i < CACHE_SLOTS; i++) {
    cache_entry *e = &c->slots[i];
    if (!e->key || e->is_redistribute || e->plan.op->n_out == 0) continue;
    if (e->plan.op->out_specs[0]->mesh_id != id) continue;
    free_entry(e);
    c->entries--;
  }
}

static dt_status dist_dispatch(dt_op_call *call);

/* Once per process: the per-thread cache key, and the upcalls of the lower layers (the one
 * place they are installed; see dt__upcalls in core/core_impl.h). */
static void init_once(void) {
  pthread_key_create(&cache_key, cache_destroy);
  /* Entry by entry: autograd installs its own entry (core_impl.h). */
  dt__upcall.spec_release = spec_release_hook;
  dt__upcall.spec_retain = dt__spec_retain;
  dt__upcall.dist_dispatch = dist_dispatch;
  dt__upcall.mesh_destroyed = mesh_destroy_hook;
}

void dt__dist_init(void) { pthread_once(&cache_once, init_once); }

static thread_cache *get_cache(void) {
  if (DT_LIKELY(tls_cache != NULL)) return tls_cache;
  if (tls_cache_dead) return NULL;
  dt__dist_init();
  tls_cache = dt__calloc(sizeof *tls_cache);
  if (tls_cache) pthread_setspecific(cache_key, tls_cache);
  return tls_cache;
}

void dt_dist_sharding_cache_clear(void) {
  thread_cache *c = tls_cache;
  if (!c) return;
  for (int i = 0; i < CACHE_SLOTS; i++) free_entry(&c->slots[i]);
  for (int i = 0; i < CACHE_SLOTS / 4; i++) free_entry(&c->redistribute_slots[i]);
  c->entries = 0;
  c->stats = (dt_dist_sharding_cache_info){0};
}

void dt_dist_sharding_cache_stats(dt_dist_sharding_cache_info *stats) {
  if (!stats) return;
  thread_cache *c = tls_cache;
  *stats = c ? c->stats : (dt_dist_sharding_cache_info){0};
  stats->entries = c ? c->entries : 0;
}

static cache_entry *table_of(thread_cache *c, uint64_t key, uint32_t *mask) {
  bool redistribute = key & 1; /* op keys are even, redistribution keys odd */
  *mask = (redistribute ? CACHE_SLOTS / 4 : CACHE_SLOTS) - 1;
  return redistribute ? c->redistribute_slots : c->slots;
}

static cache_entry *cache_find(thread_cache *c, uint64_t key) {
  uint32_t mask;
  cache_entry *slots = table_of(c, key, &mask);
  uint32_t i = (uint32_t)key & mask;
  for (int probe = 0; probe < 8; probe++, i = (i + 1) & mask) {
    if (slots[i].key == key) return &slots[i];
    if (slots[i].key == 0) return NULL;
  }
  return NULL;
}

/* A slot for a new key: the first empty one along the probe sequence, else the home slot
 * is evicted (the cache is bounded). */
static cache_entry *cache_slot(thread_cache *c, uint64_t key) {
  uint32_t mask;
  cache_entry *slots = table_of(c, key, &mask);
  uint32_t home = (uint32_t)key & mask, i = home;
  for (int probe = 0; probe < 8; probe++, i = (i + 1) & mask) {
    if (slots[i].key == 0) {
      c->entries++;
      return &slots[i];
    }
  }
  free_entry(&slots[home]);
  return &slots[home];
}

/* ---- Redistribution plans, cached -------------------------------------------------------------
 */

dt_status dt__redistribute_plan_cached(const dt_dist_spec *from, const dt_placement *to,
                                       dt_redistribute_plan *plan) {
  uint64_t key = dt__hash_mix(from->hash, 0x7ed15757);
  for (int m = 0; m < from->mesh_ndim; m++) {
    key = dt__hash_mix(key, (uint64_t)to[m].kind | ((uint64_t)(uint32_t)to[m].dim << 8) |
                                ((uint64_t)to[m].op << 40));
    if (to[m].kind == DT_STRIDED_SHARD)
      key = dt__hash_mix(key, (uint64_t)(uint32_t)to[m].split_factor);
  }
  key |= 1;
  thread_cache *c = get_cache();
  cache_entry *e = c ? cache_find(c, key) : NULL;
  if (e && e->is_redistribute) {
    *plan = *e->plan.redistribute;
    return DT_OK;
  }
  dt_mesh_info mi;
  dt__mesh_info(from->mesh, &mi);
  dt_redistribute_geometry g =
      dt__redistribute_geometry(from->ndim, from->shape, from->dtype, from->mesh_ndim, mi.size);
  dt_status st = dt__redistribute_plan(&g, from->placements, to, plan);
  if (st || !c) return st;
  dt_redistribute_plan *copy = dt__alloc(sizeof *copy);
  if (!copy) return DT_OK; /* not cached; the plan itself is fine */
  *copy = *plan;
  e = cache_slot(c, key);
  e->key = key;
  e->is_redistribute = true;
  e->plan.redistribute = copy;
  return DT_OK;
}

/* ---- Propagation -------------------------------------------------------------------------------
 */

typedef struct dist_args {
  int n;
  dt_tensor *t[DT_DIST_MAX_ARGS];     /* the call's tensors: inputs, then the list */
  dt_tensor global[DT_DIST_MAX_ARGS]; /* global geometry of each (no storage) */
  const dt_dist_spec *spec;           /* the first distributed argument's spec: the mesh */
  uint64_t hash;                      /* the arguments' part of the call's cache key */
} dist_args;

/* One multiply-xorshift step per word. Each step is a bijection of the word for a given
 * state, and its shift brings the product's high bits down to the low ones that index the
 * table, so no finalizer follows: one would spend ~20 instructions per dispatch and could
 * only add collisions of the 64-bit key, never remove one. */
static inline uint64_t key_step(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

/* Why collect_args refused argument i (first: the first distributed argument), kept out of
 * line so that the hit path carries neither the message buffers nor their setup. */
static DT_NOINLINE dt_status refuse_arg(const dt_op_call *call, const dist_args *a, int i,
                                        int first) {
  const char *op = dt__op_name(call);
  if (i < 0) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: runs on local tensors only (it has no sharding rule), but argument %d "
                     "is distributed; call its unfused ops, or convert the arguments with "
                     "dt_dist_full_tensor or dt_dist_to_local",
                     op, first);
  }
  const dt_tensor *t = a->t[i];
  if (t->spec) {
    char mine[160], theirs[160];
    dt_mesh_format(t->spec->mesh, mine, sizeof mine);
    dt_mesh_format(a->t[first]->spec->mesh, theirs, sizeof theirs);
    /* Two meshes of one shape would read alike: say that they are distinct objects. */
    bool alike = strcmp(mine, theirs) == 0;
    return dt__error(DT_ERR_INVALID,
                     "%s: argument %d lies on %s%s but argument %d on %s (all distributed "
                     "arguments must share one mesh object)",
                     op, i, mine, alike ? " (another mesh object of the same shape)" : "", first,
                     theirs);
  }
  char buf[160];
  return dt__error(DT_ERR_INVALID,
                   "%s: argument %d is a local tensor of shape %s mixed with distributed "
                   "tensors (only 0-d local tensors may be mixed in; make it distributed: "
                   "dt_dist_distribute_tensor if every rank holds the whole tensor, "
                   "dt_dist_from_local if it is this rank's shard)",
                   op, i, dt__format_ints(buf, sizeof buf, t->ndim, t->shape));
}

static dt_status collect_args(const dt_op_call *call, dist_args *a) {
  int n_inputs = call->n_inputs, n = n_inputs + call->n_input_list;
  a->n = 0;
  a->spec = NULL;
  if (n > DT_DIST_MAX_ARGS) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: %d tensor arguments on distributed tensors, at most %d (join a long "
                     "list in groups, then join the groups)",
                     dt__op_name(call), n, DT_DIST_MAX_ARGS);
  }
  for (int i = 0; i < n_inputs; i++) a->t[i] = call->inputs[i];
  for (int i = n_inputs; i < n; i++) a->t[i] = call->input_list[i - n_inputs];
  a->n = n;
  const dt_dist_spec *spec = NULL;
  int first = -1; /* the first distributed argument */
  uint64_t h = 0x0b5e55ed;
  for (int i = 0; i < n; i++) {
    const dt_tensor *t = a->t[i];
    if (!t) {
      h = key_step(h, 1);
      continue;
    }
    const dt_dist_spec *s = t->spec;
    h = key_step(h, s ? s->hash : (0x5ca1a7ull << 8 | (uint64_t)t->dtype));
    if (DT_UNLIKELY(!s)) {
      if (t->ndim != 0) return refuse_arg(call, a, i, first);
    } else if (!spec) {
      spec = s;
      first = i;
    } else if (DT_UNLIKELY(s->mesh_id != spec->mesh_id)) {
      return refuse_arg(call, a, i, first);
    }
  }
  a->spec = spec;
  a->hash = h;
  /* A local-only op would otherwise fall back to replicating: gathering every argument on
   * every rank, silently, for an op whose unfused form shards. */
  if (spec && DT_UNLIKELY(dt__op_has_trait(call->op, DT_TRAIT_LOCAL_ONLY)))
    return refuse_arg(call, a, -1, first);
  return DT_OK;
}

/* The arguments' global geometry, for infer and the rules (cache misses only). */
static void build_globals(dist_args *a) {
  for (int i = 0; i < a->n; i++) {
    dt_tensor *t = a->t[i];
    if (!t) continue;
    a->global[i] = *t;
    if (t->spec) {
      a->global[i].ndim = t->spec->ndim;
      memcpy(a->global[i].shape, t->spec->shape, sizeof(int64_t) * (size_t)t->spec->ndim);
      dt__contiguous_strides(t->spec->ndim, t->spec->shape, a->global[i].strides);
      a->global[i].offset = 0;
    }
  }
}

static uint64_t call_key(const dt_op_call *call, const dist_args *a) {
  /* The arguments were hashed while collect_args read them, as they were before. */
  uint64_t h = key_step(a->hash, (uint64_t)call->op | ((uint64_t)call->n_outputs << 16) |
                                     ((uint64_t)call->flags << 32) | ((uint64_t)call->dtype << 48));
  h = key_step(h, (uint64_t)call->n_ints << 32 | (uint64_t)call->n_int_list);
  for (int i = 0; i < call->n_ints && i < DT_OP_MAX_INTS; i++)
    h = key_step(h, (uint64_t)call->ints[i]);
  for (int i = 0; i < call->n_int_list; i++) h = key_step(h, (uint64_t)call->int_list[i]);
  if (call->scalars[0] != 0 || call->scalars[1] != 0) {
    uint64_t bits[2];
    memcpy(bits, call->scalars, sizeof bits);
    h = key_step(key_step(h, bits[0]), bits[1]);
  }
  return h & ~1ull; /* op keys are even, redistribution keys odd */
}

static dt_status propagate(dt_op_call *call, dist_args *a, op_plan *plan) {
  const dt_op_def *def = &dt__op_table[call->op];
  const dt_dist_spec *spec = a->spec;
  build_globals(a);
  /* Global shapes and argument checks: the op's own infer on global geometry. */
  dt_op_call g = *call;
  for (int i = 0; i < call->n_inputs; i++) g.inputs[i] = a->t[i] ? &a->global[i] : NULL;
  dt_tensor *global_list[DT_DIST_MAX_ARGS];
  for (int i = 0; i < call->n_input_list; i++) global_list[i] = &a->global[call->n_inputs + i];
  g.input_list = global_list;
  dt_tensor_meta metas[DT_OP_MAX_META];
  dt_status st = def->infer(&g, metas);
  if (st) return st;
  int n_out = def->kind == DT_OP_KIND_INPLACE ? 0 : g.n_outputs;
  if (n_out > DT_OP_MAX_META) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: %d outputs on distributed tensors (at most %d)",
                     def->name, n_out, DT_OP_MAX_META);
  }
  dt_mesh_info mi;
  dt__mesh_info(spec->mesh, &mi);
  dt_propagation prop = {
      .call = &g, .n_args = a->n, .n_out = n_out, .out = metas, .mesh_ndim = spec->mesh_ndim};
  memcpy(prop.mesh_size, mi.size, sizeof prop.mesh_size);
  if (def->kind == DT_OP_KIND_INPLACE) {
    prop.n_out = 1;
    metas[0].ndim = a->global[0].ndim;
    metas[0].dtype = a->global[0].dtype;
    memcpy(metas[0].shape, a->global[0].shape, sizeof metas[0].shape);
  }
  for (int i = 0; i < a->n; i++) {
    const dt_tensor *t = a->t[i];
    prop.args[i] = t ? &a->global[i] : NULL;
    prop.fixed_replica[i] = t && !t->spec; /* local scalars are replicas */
    for (int m = 0; m < spec->mesh_ndim; m++)
      prop.current[i][m] = t && t->spec ? t->spec->placements[m] : dt_replicate();
  }
  dt_propagation_result chosen;
  if (dt__propagate(&prop, &chosen)) {
    char p[32];
    int m = chosen.failed_mesh_dim;
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: in place on a tensor placed %s on mesh dim %d would need "
                     "its placement changed; redistribute it first",
                     def->name, dt_placement_format(prop.current[0][m], p, sizeof p), m);
  }
  if (chosen.fallback) {
    thread_cache *c = get_cache();
    if (c) c->stats.fallbacks++;
    if (atomic_exchange(&fallback_logged[call->op], 1) == 0) {
      dt__log(DT_LOG_WARN, "%s has no sharding rule: its inputs are replicated", def->name);
    }
  }
  plan->argmax_candidates = dt__dist_argmax_candidates(&g, spec->mesh_ndim, prop.current[0]) &&
                            dt__tensor_device_key(a->t[0]) == 0;
  for (int m = 0; m < spec->mesh_ndim && plan->argmax_candidates; m++)
    chosen.targets[0][m] = prop.current[0][m], chosen.out[m] = dt_replicate();
  memcpy(plan->targets, chosen.targets, sizeof(chosen.targets[0]) * (size_t)a->n);
  dt_placement *out_placements = chosen.out;
  for (int i = 0; i < a->n; i++) {
    plan->needs_redistribute[i] =
        a->t[i] && a->t[i]->spec &&
        !dt__placements_equal(spec->mesh_ndim, a->t[i]->spec->placements, plan->targets[i]);
    plan->any_redistribute |= plan->needs_redistribute[i];
  }
  plan->n_out = 0;
  for (int i = 0; i < n_out; i++) {
    st = dt__spec_create(spec->mesh, out_placements, metas[i].ndim, metas[i].shape, metas[i].dtype,
                         &plan->out_specs[i]);
    if (st) return st;
    plan->n_out++;
  }
  if (dt__op_has_trait(call->op, DT_TRAIT_ROW_WINDOW)) {
    /* Weight rows sharded on some mesh dim: pass this shard's row window to the kernel (the
     * window of classes, dim 1, for the vocabulary-parallel cross-entropy terms). */
    int wd = def->rule == DT_RULE_VOCAB_TERMS ? 1 : 0;
    bool rows_sharded = false;
    for (int m = 0; m < spec->mesh_ndim; m++) {
      rows_sharded |= plan->targets[0][m].kind == DT_SHARD && plan->targets[0][m].dim == wd;
    }
    if (rows_sharded) {
      const dt_tensor *w = &a->global[0];
      int64_t shape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
      dt__local_region(w->ndim, w->shape, spec->mesh_ndim, mi.size, mi.coord, plan->targets[0],
                       shape, offset);
      plan->row_window = true;
      plan->window[0] = offset[wd];
      plan->window[1] = w->shape[wd];
    }
  }
  plan->rewritten = dt__dist_rewrites_call(&g, spec->mesh_ndim, plan->targets[0],
                                           a->n > 1 ? plan->targets[1] : NULL);
  if (plan->rewritten && call->op == DT_OP_RMS_NORM) {
    int64_t shape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
    int last = metas[0].ndim - 1;
    dt__local_region(metas[0].ndim, metas[0].shape, spec->mesh_ndim, mi.size, mi.coord,
                     out_placements, shape, offset);
    plan->columns[0] = offset[last], plan->columns[1] = shape[last];
  }
  if (def->rule == DT_RULE_TRIANGLE) {
    const dt_tensor *x = &a->global[0];
    int64_t shape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
    dt__local_region(x->ndim, x->shape, spec->mesh_ndim, mi.size, mi.coord, plan->targets[0], shape,
                     offset);
    plan->diagonal_shift = offset[x->ndim - 2] - offset[x->ndim - 1];
  }
  if (def->rule == DT_RULE_BATCH_NORM_TRAINING) {
    /* A shard of a dim other than the channel dim 1: the statistics span the shards. */
    for (int m = 0; m < spec->mesh_ndim; m++) {
      dt_placement t = plan->targets[0][m];
      if (dt__is_sharding(t) && t.dim != 1) plan->sync_dims |= 1u << m;
    }
    const dt_tensor *x = &a->global[0];
    plan->sync_count = x->shape[1] > 0 ? dt__numel(x->ndim, x->shape) / x->shape[1] : 0;
  }
  if (dt__op_has_trait(call->op, DT_TRAIT_RANDOM)) {
    /* A shard that is the whole tensor (every placement Replicate) needs no geometry. */
    const dt_dist_spec *self = a->t[0]->spec;
    int64_t shape[DT_MAX_DIMS];
    dt__local_region(self->ndim, self->shape, self->mesh_ndim, mi.size, mi.coord, self->placements,
                     shape, plan->geometry + self->ndim);
    memcpy(plan->geometry, self->shape, sizeof(int64_t) * (size_t)self->ndim);
    plan->shard_geometry = memcmp(shape, self->shape, sizeof(int64_t) * (size_t)self->ndim) != 0;
  }
  /* Shape-changing views run on the shard with this rank's output shape: their own attributes
   * (a shape, or "every size-1 dim") describe the global tensor, not the shard. squeeze and
   * flatten then run as a reshape to that shape. */
  bool squeezing = dt__op_has_trait(call->op, DT_TRAIT_RUNS_AS_RESHAPE);
  plan->local_shape_override = dt__op_has_trait(call->op, DT_TRAIT_GLOBAL_SHAPE_ATTR);
  plan->local_op = squeezing ? DT_OP_RESHAPE : call->op;
  if (plan->local_shape_override && n_out == 1) {
    int64_t offset[DT_MAX_DIMS];
    plan->local_ndim = metas[0].ndim;
    dt__local_region(metas[0].ndim, metas[0].shape, spec->mesh_ndim, mi.size, mi.coord,
                     out_placements, plan->local_shape, offset);
  }
  plan->direct = !plan->any_redistribute && !plan->local_shape_override && !plan->shard_geometry &&
                 !plan->row_window && !plan->sync_dims && !plan->diagonal_shift &&
                 !plan->rewritten && !plan->argmax_candidates;
  return DT_OK;
}

static void free_plan(op_plan *plan) {
  for (int i = 0; i < plan->n_out; i++) dt__spec_release(plan->out_specs[i]);
  dt__free(plan);
}

/* Gives the local outputs their distributed specs. On failure releases them all. */
static dt_status wrap_outputs(dt_op_call *call, const op_plan *plan) {
  dt_status st = DT_OK;
  for (int i = 0; i < plan->n_out && i < call->n_outputs; i++) {
    dt_tensor *o = call->outputs[i];
    if (o->spec) { /* an input handed back (contiguous of a contiguous shard): new handle */
      dt_tensor *fresh = NULL;
      st = dt__local_view(o, &fresh);
      dt_tensor_release(o);
      call->outputs[i] = o = fresh;
      if (st) break;
    }
    o->spec = dt__spec_retain(plan->out_specs[i]);
  }
  if (st) {
    for (int i = 0; i < call->n_outputs; i++) {
      dt_tensor_release(call->outputs[i]);
      call->outputs[i] = NULL;
    }
  }
  return st;
}

/* For autograd (call->consumed): argument i as the local kernel reads it, a distributed
 * handle on the redistributed shard with the target placements. The node saves it in place
 * of the argument, so the backward formula reads the value the forward read and does not
 * redistribute it again. One spec allocation, only for recorded calls that redistribute. */
static dt_status keep_consumed(dt_op_call *call, const dist_args *a, int i,
                               const dt_placement *targets, dt_tensor *shard) {
  const dt_dist_spec *from = a->t[i]->spec;
  dt_dist_spec *spec = NULL;
  dt_status st =
      dt__spec_create(from->mesh, targets, from->ndim, from->shape, a->t[i]->dtype, &spec);
  dt_tensor *wrapped = NULL;
  if (!st) st = dt__dist_wrap(shard, spec, &wrapped);
  dt__spec_release(spec);
  if (st) return st;
  dt_tensor_release(call->consumed[i]); /* a mode that dispatched the call twice */
  call->consumed[i] = wrapped;
  return DT_OK;
}

/* Synchronized batch norm (PyTorch's SyncBatchNorm): batch_norm_training on this rank's shard
 * of a batch sharded on the plan's sync_dims, its per-channel sums all_reduced over each of
 * them, so every shard is normalized with the whole batch's mean and biased variance. The
 * channel dim may be sharded too (on other mesh dims): each group along a sync dim holds the
 * same channels. Its backward needs nothing more: the formula's reductions over the batch
 * are ops, which reduce their Partial results like any. */
typedef struct sync_groups {
  const dt_mesh *mesh;
  uint32_t dims;
} sync_groups;

static dt_status all_reduce_channels(void *ctx, dt_tensor *sums) {
  const sync_groups *g = ctx;
  dt_status st = DT_OK;
  for (int m = 0; m < DT_MESH_MAX_DIMS && !st; m++) {
    if (g->dims & (1u << m))
      st = dt_comm_all_reduce(dt_mesh_group(g->mesh, m), sums, DT_REDUCE_SUM);
  }
  return st;
}

static dt_status sync_batch_norm(dt_op_call *lc, const dt_mesh *mesh, const op_plan *plan) {
  const dt_tensor *x = lc->inputs[0];
  if (dt__tensor_device_key(x) != 0) {
    char dev[48];
    return dt__error(DT_ERR_UNSUPPORTED,
                     "batch_norm_training: the statistics of a batch sharded over the mesh are "
                     "summed on the host, and this input is on %s (a device mesh); use a CPU "
                     "mesh, or replicate the batch dims",
                     dt__device_key_format(dt__tensor_device_key(x), dev, sizeof dev));
  }
  dt_status st = dt__tensor_new(x->ndim, x->shape, x->dtype, &lc->outputs[0]);
  if (st) return st;
  sync_groups g = {mesh, plan->sync_dims};
  st = dt__batch_norm_training_stats(lc, plan->sync_count, all_reduce_channels, &g);
  if (st) {
    dt_tensor_release(lc->outputs[0]);
    lc->outputs[0] = NULL;
  }
  return st;
}

/* rms_norm with its weight sharded (op_plan.rewritten): the whole rows normalized without the
 * weight, then this shard's columns of them scaled by its piece of it. */
static dt_status weight_columns(dt_op_call *lc, const op_plan *plan) {
  dt_tensor *weight = lc->inputs[1], *normed = NULL, *columns = NULL;
  lc->inputs[1] = NULL;
  dt_status st = dt__dispatch_local(lc);
  lc->inputs[1] = weight;
  if (st) return st;
  normed = lc->outputs[0];
  lc->outputs[0] = NULL;
  dt_op_call narrow = {.op = DT_OP_NARROW,
                       .n_inputs = 1,
                       .inputs = {normed},
                       .n_ints = 3,
                       .ints = {normed->ndim - 1, plan->columns[0], plan->columns[1]},
                       .n_outputs = 1,
                       .outputs = &columns};
  st = dt__dispatch_local(&narrow);
  if (!st) {
    dt_op_call mul = {.op = DT_OP_MUL,
                      .n_inputs = 2,
                      .inputs = {columns, weight},
                      .scalars = {1.0},
                      .n_outputs = 1,
                      .outputs = lc->outputs};
    st = dt__dispatch_local(&mul);
  }
  dt_tensor_release(columns);
  dt_tensor_release(normed);
  return st;
}

static dt_status dist_dispatch(dt_op_call *call) {
  dist_args a;
  dt_status st = collect_args(call, &a);
  if (st) return st;
  thread_cache *c = get_cache();
  uint64_t key = call_key(call, &a);
  cache_entry *e = c ? cache_find(c, key) : NULL;
  op_plan *plan;
  bool owned = false;
  if (e && !e->is_redistribute) {
    plan = e->plan.op;
    c->stats.hits++;
  } else {
    plan = dt__calloc(sizeof *plan);
    if (!plan)
      return dt__error(DT_ERR_NOMEM, "%s: cannot allocate a sharding plan", dt__op_name(call));
    st = propagate(call, &a, plan);
    if (st) {
      free_plan(plan);
      return st;
    }
    /* A mesh its user destroyed lives only for its tensors: a cached plan would keep it
     * alive past them, so plan each call afresh. */
    if (c && !dt__mesh_user_destroyed(a.spec->mesh)) {
      c->stats.misses++;
      e = cache_slot(c, key);
      e->key = key;
      e->is_redistribute = false;
      e->plan.op = plan;
    } else {
      owned = true;
    }
  }
  if (plan->direct) {
    /* The common hit: the shards are the arguments as they are. */
    st = dt__dispatch_local(call);
    if (st) dt__error_prefix("on this rank's shard"); /* value errors: shapes are local */
    if (!st) st = wrap_outputs(call, plan);
    if (owned) free_plan(plan);
    return st;
  }
  /* Local arguments: redistributed shards where the plan says so, else the handles
   * themselves (their geometry is the local shard). */
  dt_tensor *local[DT_DIST_MAX_ARGS];
  bool made[DT_DIST_MAX_ARGS] = {0};
  for (int i = 0; i < a.n && !st; i++) {
    local[i] = a.t[i];
    if (plan->needs_redistribute[i]) {
      st = dt__redistribute_local(a.t[i], a.t[i]->spec, plan->targets[i], &local[i]);
      made[i] = !st;
      if (!st && call->consumed && i < call->n_consumed)
        st = keep_consumed(call, &a, i, plan->targets[i], local[i]);
    }
  }
  if (!st) {
    dt_op_call lc = *call;
    for (int i = 0; i < call->n_inputs; i++) lc.inputs[i] = local[i];
    lc.input_list = local + call->n_inputs;
    if (plan->local_shape_override) {
      lc.op = plan->local_op;
      lc.n_ints = plan->local_ndim;
      memcpy(lc.ints, plan->local_shape, sizeof(int64_t) * (size_t)plan->local_ndim);
      lc.int_list = plan->local_shape;
      lc.n_int_list = plan->local_ndim;
    }
    if (plan->shard_geometry) {
      lc.int_list = plan->geometry;
      lc.n_int_list = 2 * a.t[0]->spec->ndim;
    }
    lc.ints[0] += plan->diagonal_shift;
    if (plan->rewritten && lc.op == DT_OP_NARROW) {
      lc.op = DT_OP_SLICE;
      lc.ints[1] = 0, lc.ints[2] = INT64_MAX, lc.ints[3] = 1;
      lc.n_ints = 4;
    }
    if (plan->row_window) {
      /* After the op's own attributes: embedding {offset, rows}, scatter_add {dim, offset,
       * rows}, gather {dim, sparse_grad, offset, rows}. */
      if (lc.op == DT_OP_GATHER) lc.ints[1] = 0, lc.n_ints = 2;
      lc.ints[lc.n_ints++] = plan->window[0];
      lc.ints[lc.n_ints++] = plan->window[1];
    }
    if (plan->sync_dims)
      st = sync_batch_norm(&lc, a.spec->mesh, plan);
    else if (plan->rewritten && lc.op == DT_OP_RMS_NORM)
      st = weight_columns(&lc, plan);
    else if (plan->argmax_candidates)
      st = dt__dist_argmax_run(&lc, a.spec, plan->out_specs[0]);
    else
      st = dt__dispatch_local(&lc);
    if (st) dt__error_prefix("on this rank's shard"); /* value errors: shapes are local */
    call->n_outputs = lc.n_outputs; /* multi-output ops report how many pieces they made */
    if (!st) st = wrap_outputs(call, plan);
  }
  for (int i = 0; i < a.n; i++) {
    if (made[i]) dt_tensor_release(local[i]);
  }
  if (owned) free_plan(plan);
  return st;
}

dt_status dt__dist_predict_bytes(dt_op_call *call, int64_t *bytes) {
  *bytes = 0;
  dist_args a;
  dt_status st = collect_args(call, &a);
  if (st) return st;
  if (!a.spec) return dt__error(DT_ERR_INVALID, "%s: no distributed argument", dt__op_name(call));
  op_plan *plan = dt__calloc(sizeof *plan);
  if (!plan)
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate a sharding plan", dt__op_name(call));
  st = propagate(call, &a, plan);
  for (int i = 0; i < a.n && !st; i++) {
    if (!plan->needs_redistribute[i]) continue;
    dt_redistribute_plan moves;
    st = dt__redistribute_plan_cached(a.t[i]->spec, plan->targets[i], &moves);
    if (st) break;
    dt__redistribute_exact_bytes(a.t[i]->spec, &moves);
    *bytes += moves.bytes;
  }
  if (!st && plan->argmax_candidates) *bytes += dt__dist_argmax_bytes(a.spec);
  free_plan(plan);
  return st;
}

/* ---- Redistributing a shard (the executor behind dt_dist_redistribute and dispatch) ----- */

const char dt__dist_inferred_hint[] =
    "; no options.global_shape was given, so the global shape was inferred assuming even "
    "shards: pass global_shape for uneven ones";

dt_status dt__dist_add_inferred_hint(dt_status st) {
  char previous[768];
  snprintf(previous, sizeof previous, "%s", dt_last_error());
  return dt__error(st, "%s%s", previous, dt__dist_inferred_hint);
}

dt_status dt__redistribute_local(dt_tensor *local, const dt_dist_spec *from, const dt_placement *to,
                                 dt_tensor **out) {
  if (dt__placements_equal(from->mesh_ndim, from->placements, to)) {
    *out = dt_tensor_retain(local);
    return DT_OK;
  }
  dt_redistribute_plan plan;
  dt_status st = dt__redistribute_plan_cached(from, to, &plan);
  if (st) return st;
  dt__profile_scope scope;
  dt__profile_begin(&scope, "redistribute", DT__PROFILE_CAT_REDISTRIBUTE, DT_PROFILER_LANE_COMM);
  st = dt__redistribute_execute(local, from, &plan, out);
  /* Ranks that guessed different global shapes call mismatched collectives. */
  if (st == DT_ERR_MISMATCH && from->shape_inferred) st = dt__dist_add_inferred_hint(st);
  if (DT_UNLIKELY(scope.start != 0)) {
    char text[96] = "", p[24];
    size_t used = 0;
    for (int m = 0; m < from->mesh_ndim && used < sizeof text; m++) {
      used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", m ? "," : "",
                               dt_placement_format(from->placements[m], p, sizeof p));
    }
    for (int m = 0; m < from->mesh_ndim && used < sizeof text; m++) {
      used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", m ? "," : "->",
                               dt_placement_format(to[m], p, sizeof p));
    }
    dt__profile_end_text(&scope, text);
  }
  return st;
}
