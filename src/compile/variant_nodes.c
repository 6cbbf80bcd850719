/*
 * The per-node arrays of a variant being traced (compile/trace.c): growing them with the graph,
 * a distributed value's shard dims as expressions of its global dims, and its guards.
 */
#include <stdio.h>
#include <string.h>

#include "compile/compile_impl.h"
#include "distributed/dist_impl.h"
#include "dtensor/mesh.h"

/* Grows the per-node arrays to the graph's node count. */
dt_status dt__compile_grow_nodes(dt_compile_variant *v, int *cap) {
  if (v->g->n_nodes <= *cap) return DT_OK;
  int n = *cap ? 2 * *cap : 64;
  while (n < v->g->n_nodes) n *= 2;
  int **dims = dt__calloc(sizeof *dims * (size_t)n);
  dt_placement **pl = dt__calloc(sizeof *pl * (size_t)n);
  int *mnd = dt__calloc(sizeof *mnd * (size_t)n);
  dt_tensor **consts = dt__calloc(sizeof *consts * (size_t)n);
  dt_op_call *templates = dt__calloc(sizeof *templates * (size_t)n);
  int **local = dt__calloc(sizeof *local * (size_t)n);
  bool *plain = dt__calloc(sizeof *plain * (size_t)n);
  dt_mesh **meshes = dt__calloc(sizeof *meshes * (size_t)n);
  dt_dist_spec **specs = dt__calloc(sizeof *specs * (size_t)n);
  int *sexpr = dt__alloc(sizeof *sexpr * (size_t)n);
  int **ssrc = dt__calloc(sizeof *ssrc * (size_t)n);
  bool *cgrad = dt__calloc(sizeof *cgrad * (size_t)n);
  if (!dims || !pl || !mnd || !consts || !templates || !local || !plain || !meshes || !specs ||
      !sexpr || !ssrc || !cgrad) {
    void *made[] = {sexpr, ssrc,      cgrad, plain, meshes, specs,
                    local, templates, dims,  pl,    mnd,    consts};
    for (size_t k = 0; k < sizeof made / sizeof made[0]; k++) dt__free(made[k]);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  if (*cap) {
    memcpy(dims, v->dims, sizeof *dims * (size_t)*cap);
    memcpy(pl, v->placements, sizeof *pl * (size_t)*cap);
    memcpy(mnd, v->mesh_ndim, sizeof *mnd * (size_t)*cap);
    memcpy(consts, v->constants, sizeof *consts * (size_t)*cap);
    memcpy(templates, v->templates, sizeof *templates * (size_t)*cap);
    memcpy(local, v->local_dims, sizeof *local * (size_t)*cap);
    memcpy(plain, v->dist_plain, sizeof *plain * (size_t)*cap);
    memcpy(meshes, v->dist_mesh, sizeof *meshes * (size_t)*cap);
    memcpy(sexpr, v->scalar_expr, sizeof *sexpr * (size_t)*cap);
    memcpy(ssrc, v->shape_expr, sizeof *ssrc * (size_t)*cap);
    memcpy(cgrad, v->const_grad, sizeof *cgrad * (size_t)*cap);
  }
  for (int k = *cap; k < n; k++) sexpr[k] = -1;
#define REPLACE(field, fresh) (dt__free(v->field), v->field = (fresh))
  REPLACE(scalar_expr, sexpr), REPLACE(shape_expr, ssrc), REPLACE(const_grad, cgrad);
  REPLACE(dist_plain, plain), REPLACE(dist_mesh, meshes), REPLACE(dist_spec, specs);
  REPLACE(local_dims, local), REPLACE(templates, templates), REPLACE(dims, dims);
  REPLACE(placements, pl), REPLACE(mesh_ndim, mnd), REPLACE(constants, consts);
#undef REPLACE
  *cap = n;
  return DT_OK;
}

/* The size of this rank's piece of a dim of size n split over W ranks as torch.chunk splits
 * it (pieces of ceil(n / W), the last ones smaller or empty), r being this rank's coordinate:
 * max(0, min(ceil(n / W), n - r * ceil(n / W))). */
static int shard_size(dt_sx_pool *p, int n, int w, int r) {
  if (w == 1) return n;
  int chunk = dt__sx_ceildiv(p, n, dt__sx_const(p, w));
  int rest = dt__sx_sub(p, n, dt__sx_mul(p, chunk, dt__sx_const(p, r)));
  return dt__sx_max(p, dt__sx_const(p, 0), dt__sx_min(p, chunk, rest));
}

/* The local dims of a distributed value as expressions of its global dims, mesh dim by mesh
 * dim (a dim sharded on several mesh dims is split again on each); kept only when they give
 * the traced shard's shape. */
dt_status dt__compile_set_local_dims(dt_compile_variant *v, int i, const dt_tensor *x,
                                     const int *dims) {
  const dt_dist_spec *spec = x->spec;
  int local[DT_MAX_DIMS];
  memcpy(local, dims, sizeof(int) * (size_t)spec->ndim);
  for (int m = 0; m < spec->mesh_ndim; m++) {
    dt_placement pl = spec->placements[m];
    if (pl.kind != DT_SHARD || pl.dim < 0 || pl.dim >= spec->ndim) continue;
    local[pl.dim] = shard_size(&v->pool, local[pl.dim], dt_mesh_size(spec->mesh, m),
                               dt_mesh_coordinate(spec->mesh, m));
  }
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  for (int d = 0; d < spec->ndim; d++) {
    if (x->ndim != spec->ndim || dt__sx_eval(&v->pool, local[d], v->hints) != x->shape[d])
      return DT_OK;
  }
  v->local_dims[i] = dt__alloc(sizeof(int) * DT_MAX_DIMS);
  if (!v->local_dims[i]) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  memcpy(v->local_dims[i], local, sizeof(int) * (size_t)spec->ndim);
  return DT_OK;
}

dt_status dt__compile_add_guard(dt_compile_variant *v, const dt_guard *g) {
  for (int i = 0; i < v->n_guards; i++) { /* the same fact once */
    const dt_guard *o = &v->guards[i];
    if (o->kind == g->kind && o->a == g->a && o->b == g->b && o->c == g->c) return DT_OK;
  }
  if (!dt__reserve_arrays(v->n_guards, &v->cap_guards, 16, 1, (void *[]){&v->guards},
                          (size_t[]){sizeof *v->guards}))
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  v->guards[v->n_guards++] = *g;
  return DT_OK;
}

dt_status dt__compile_pin(dt_compile_variant *v, int e, const char *why) {
  if (dt__sx_is_const(&v->pool, e, NULL)) return DT_OK;
  dt_guard gd = {
      .kind = DT_GUARD_EQ, .a = e, .b = dt__sx_const(&v->pool, dt__sx_eval(&v->pool, e, v->hints))};
  snprintf(gd.why, sizeof gd.why, "%s", why);
  if (v->pool.oom) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  return dt__compile_add_guard(v, &gd);
}
