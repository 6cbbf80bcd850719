/* dt_parallel_expert_parallel (dtensor/parallel.h): every MoE of a module tree gets its experts
 * split over a mesh dim; the exchange itself lives with the MoE (src/nn/moe_ep.c). */
#include "core/core_impl.h"
#include "dtensor/parallel.h"
#include "nn/nn_impl.h"

typedef struct ep_walk {
  dt_mesh *mesh;
  int dim, found;
} ep_walk;

static dt_status split_moe(const char *fqn, dt_module *m, void *user) {
  (void)fqn;
  ep_walk *w = user;
  if (!dt__nn_is_moe(m)) return DT_OK;
  w->found++;
  return dt__nn_moe_expert_parallel(m, w->mesh, w->dim);
}

dt_status dt_parallel_expert_parallel(dt_module *model, dt_mesh *mesh, int ep_dim) {
  static const char fn[] = "dt_parallel_expert_parallel";
  if (!model || !mesh)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", fn, model ? "mesh" : "model");
  if (ep_dim < 0 || ep_dim >= dt_mesh_ndim(mesh))
    return dt__error(DT_ERR_INVALID, "%s: ep_dim %d is outside the mesh's %d dims", fn, ep_dim,
                     dt_mesh_ndim(mesh));
  ep_walk w = {mesh, ep_dim, 0};
  dt_status st = dt_module_visit(model, split_moe, &w);
  if (!st && w.found == 0)
    st = dt__error(DT_ERR_INVALID, "%s: the %s tree holds no MoE module (dt_nn_moe)", fn,
                   dt_module_type(model));
  return st;
}
