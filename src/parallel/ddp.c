/*
 * Data parallel without sharding (PyTorch's DistributedDataParallel on the eager path):
 * parameters become Replicate distributed leaves, the input is this rank's rows of the batch
 * (Shard(0)), so after backward each gradient is a Partial sum over the data-parallel dim.
 * dt_parallel_ddp_reduce_gradients all-reduces them in buckets (one collective per bucket
 * of flattened gradients, in reverse parameter order as PyTorch's reducer fills them) and
 * stores Replicate gradients, so the optimizer step communicates nothing.
 * On a 2-D mesh over a tensor-parallel module (dt_parallel_tp_module on "tp"), the tp
 * parameters are already Replicate on "dp" and are kept; each gradient is then Partial over dp
 * with the tp placement, and the buckets hold (and all-reduce over dp) the tp-local pieces.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"
#include "dtensor/parallel.h"
#include "mesh/mesh_impl.h"
#include "parallel/parallel_impl.h"
#include "tensor/tensor_impl.h"

/* PyTorch's bucket_cap_mb default. */
#define DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

typedef struct ddp_state {
  dt_mesh *mesh; /* a reference: the hook may outlive the caller's mesh handle */
  int dim;
} ddp_state;

static void free_state(void *user) {
  ddp_state *s = user;
  if (s) dt__mesh_release(s->mesh);
  dt__free(s);
}

/* A local input is this rank's rows of the batch (their counts gathered over the dim, so an
 * uneven split gets its true global size or a clear error); a distributed one is passed
 * through. */
static dt_status pre_hook(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  (void)m;
  ddp_state *s = user;
  return dt__parallel_batch_input("dt_parallel_ddp", s->mesh, s->dim, in, out);
}

typedef struct replicate_ctx {
  dt_module *root;
  dt_mesh *mesh;
  int dim;
  bool apply; /* false: only check every parameter (a failure then changes nothing) */
} replicate_ctx;

/* A local parameter at fqn (on the module owning it) is replaced by a Replicate leaf; a
 * distributed one (tensor parallelism on another mesh dim) must be a leaf on the same mesh
 * that is Replicate on the data-parallel dim, and is kept as it is. */
static dt_status replicate_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  replicate_ctx *c = user;
  if (is_buffer) return DT_OK;
  if (t->spec) {
    if (dt_dist_mesh(t) != c->mesh) {
      return dt__error(DT_ERR_INVALID,
                       "dt_parallel_ddp: parameter '%s' is distributed on another mesh", fqn);
    }
    dt_placement p = dt_dist_placements(t)[c->dim];
    if (p.kind != DT_REPLICATE) {
      char name[32];
      if (p.kind == DT_SHARD) {
        snprintf(name, sizeof name, "Shard(%d)", p.dim);
      } else {
        snprintf(name, sizeof name, "%s", p.kind == DT_PARTIAL ? "Partial" : "StridedShard");
      }
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_ddp: parameter '%s' is already distributed as %s on mesh "
                       "dim %d (data parallel needs Replicate there; fully_shard or tensor "
                       "parallelism on that dim?)",
                       fqn, name, c->dim);
    }
    if (!dt_tensor_is_leaf(t)) {
      return dt__error(DT_ERR_INVALID, "dt_parallel_ddp: parameter '%s' is not a leaf", fqn);
    }
    return c->apply ? dt_tensor_set_requires_grad(t, true) : DT_OK;
  }
  if (!c->apply) return DT_OK;
  char owner[512];
  snprintf(owner, sizeof owner, "%s", fqn);
  char *dot = strrchr(owner, '.');
  const char *name = fqn;
  if (dot) {
    *dot = '\0';
    name = dot + 1;
  } else {
    owner[0] = '\0';
  }
  dt_module *m = dt_module_find(c->root, owner);
  dt_placement p[DT_MAX_DIMS];
  for (int d = 0; d < dt_mesh_ndim(c->mesh); d++) p[d] = dt_replicate();
  dt_tensor *rep = NULL;
  dt_status st = dt_dist_distribute_tensor(c->mesh, t, dt_mesh_ndim(c->mesh), p, &rep);
  if (!st) st = dt_tensor_set_requires_grad(rep, true);
  if (!st) st = dt_module_set_tensor(m, name, rep);
  dt_tensor_release(rep);
  return st;
}

dt_status dt_parallel_ddp(dt_module *module, dt_mesh *mesh, int dim,
                          const dt_ddp_options *options) {
  (void)options;
  if (!module || !mesh) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_ddp: module (%p) and mesh (%p) must not be NULL",
                     (void *)module, (void *)mesh);
  }
  if (dim < 0 || dim >= dt_mesh_ndim(mesh)) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_ddp: dim %d is not a dim of a %d-D mesh", dim,
                     dt_mesh_ndim(mesh));
  }
  ddp_state *s = dt__calloc(sizeof *s);
  if (!s) return dt__error(DT_ERR_NOMEM, "dt_parallel_ddp: out of memory");
  replicate_ctx c = {module, mesh, dim, false};
  dt_status st = dt_module_visit_tensors(module, replicate_param, &c);
  if (st) {
    dt__free(s);
    return st;
  }
  s->mesh = dt__mesh_retain(mesh);
  s->dim = dim;
  /* Outermost: a local input is wrapped over dp before any tensor-parallel hook of the root
   * converts it on its own dim. Added before any parameter is replaced, so a full hook list
   * changes nothing (add_hooks releases s when it refuses). */
  st = dt_module_add_hooks(module, pre_hook, NULL, s, free_state);
  if (st) {
    dt__error_prefix("dt_parallel_ddp");
    return st;
  }
  c.apply = true;
  return dt_module_visit_tensors(module, replicate_param, &c);
}

typedef struct bucket {
  int n;
  int first; /* params[first .. first - n + 1], reverse order */
  int64_t bytes;
} bucket;

/* All-reduces the Partial gradients of bucket b into one flat buffer and stores them back as
 * Replicate gradients. grads[i] is params[i]'s gradient (a reference). */
static dt_status reduce_bucket(dt_tensor *const *params, dt_tensor *const *grads, const bucket *b,
                               int dim) {
  dt_tensor *first = grads[b->first];
  dt_mesh *mesh = dt_dist_mesh(first);
  dt_dtype dtype = dt_tensor_dtype(first);
  size_t esize = dt_dtype_size(dtype);
  dt_reduce_op op = dt_dist_placements(first)[dim].op;
  int64_t total = (int64_t)(b->bytes / (int64_t)esize);
  dt_tensor *flat = NULL;
  dt_status st = dt_empty(1, &total, dtype, &flat);
  /* Flatten: each local gradient, made contiguous, copied at its offset. */
  int64_t offset = 0;
  for (int k = 0; k < b->n && !st; k++) {
    dt_tensor *local = NULL, *packed = NULL;
    st = dt_dist_to_local(grads[b->first - k], &local);
    if (!st) st = dt_contiguous(local, &packed);
    if (!st) {
      size_t bytes = (size_t)dt_tensor_numel(packed) * esize;
      memcpy((char *)dt_tensor_data(flat) + offset, dt_tensor_data(packed), bytes);
      offset += (int64_t)bytes;
    }
    dt_tensor_release(local);
    dt_tensor_release(packed);
  }
  if (!st) st = dt_comm_all_reduce(dt_mesh_group(mesh, dim), flat, op);
  offset = 0;
  for (int k = 0; k < b->n && !st; k++) {
    int i = b->first - k;
    dt_tensor *g = grads[i], *local = NULL, *reduced = NULL, *out = NULL;
    dt_placement p[DT_MAX_DIMS];
    int ndim = dt_mesh_ndim(mesh);
    memcpy(p, dt_dist_placements(g), sizeof(dt_placement) * (size_t)ndim);
    p[dim] = dt_replicate();
    st = dt_dist_to_local(g, &local);
    if (!st) st = dt_empty(dt_tensor_ndim(local), dt_tensor_shape(local), dtype, &reduced);
    if (!st) {
      size_t bytes = (size_t)dt_tensor_numel(reduced) * esize;
      memcpy(dt_tensor_data(reduced), (char *)dt_tensor_data(flat) + offset, bytes);
      offset += (int64_t)bytes;
      dt_dist_from_local_options o = {.global_shape = dt_dist_global_shape(g),
                                      .global_ndim = dt_dist_ndim(g)};
      st = dt_dist_from_local(mesh, reduced, ndim, p, &o, &out);
    }
    if (!st) st = dt_tensor_set_grad(params[i], out);
    dt_tensor_release(local);
    dt_tensor_release(reduced);
    dt_tensor_release(out);
  }
  dt_tensor_release(flat);
  return st;
}

dt_status dt_parallel_ddp_reduce_gradients(int n, dt_tensor *const *params, int dim,
                                           const dt_ddp_options *options, int *buckets) {
  if (buckets) *buckets = 0;
  if (n < 0 || (n > 0 && !params)) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_ddp_reduce_gradients: n is %d, params %p", n,
                     (const void *)params);
  }
  int64_t cap = options && options->bucket_bytes > 0 ? options->bucket_bytes : DEFAULT_BUCKET_BYTES;
  dt_tensor **grads = dt__calloc(sizeof *grads * (size_t)(n + 1));
  if (!grads) return dt__error(DT_ERR_NOMEM, "dt_parallel_ddp_reduce_gradients: out of memory");
  /* Everything is checked before the first collective, so a bad parameter fails on every
   * rank alike and no gradient is half-reduced. */
  dt_status st = DT_OK;
  dt_mesh *mesh = NULL;
  for (int i = 0; i < n && !st; i++) {
    if (!params[i] || !params[i]->spec) {
      st = dt__error(DT_ERR_INVALID, "dt_parallel_ddp_reduce_gradients: params[%d] is %s", i,
                     params[i] ? "not distributed" : "NULL");
      break;
    }
    if (!mesh) mesh = dt_dist_mesh(params[i]);
    if (dt_dist_mesh(params[i]) != mesh) {
      st = dt__error(DT_ERR_INVALID,
                     "dt_parallel_ddp_reduce_gradients: params[%d] is on another "
                     "mesh than params[0]",
                     i);
      break;
    }
    if (dim < 0 || dim >= dt_mesh_ndim(mesh)) {
      st = dt__error(DT_ERR_INVALID,
                     "dt_parallel_ddp_reduce_gradients: dim %d is not a dim of a "
                     "%d-D mesh",
                     dim, dt_mesh_ndim(mesh));
      break;
    }
    st = dt_tensor_grad(params[i], &grads[i]);
  }
  /* Buckets of consecutive gradients (in reverse order) that are Partial on dim with the
   * same dtype and reduce op, each at most cap bytes unless one gradient alone is larger. */
  bucket b = {0};
  for (int i = n - 1; i >= 0 && !st; i--) {
    dt_tensor *g = grads[i];
    bool partial = g && dt_dist_placements(g)[dim].kind == DT_PARTIAL;
    int64_t bytes = 0;
    if (partial) {
      dt_tensor *local = NULL;
      st = dt_dist_to_local(g, &local);
      bytes = local ? dt_tensor_numel(local) * (int64_t)dt_dtype_size(dt_tensor_dtype(g)) : 0;
      dt_tensor_release(local);
    }
    bool fits = b.n > 0 && partial && b.bytes + bytes <= cap &&
                dt_tensor_dtype(grads[b.first]) == dt_tensor_dtype(g) &&
                dt_dist_placements(grads[b.first])[dim].op == dt_dist_placements(g)[dim].op;
    if (b.n > 0 && !fits && !st) {
      st = reduce_bucket(params, grads, &b, dim);
      if (buckets) (*buckets)++;
      b.n = 0;
    }
    if (partial && !st) {
      if (b.n == 0) {
        b.first = i;
        b.bytes = 0;
      }
      b.n++;
      b.bytes += bytes;
    }
  }
  if (b.n > 0 && !st) {
    st = reduce_bucket(params, grads, &b, dim);
    if (buckets) (*buckets)++;
  }
  dt__tensors_free(grads, n);
  return st;
}
