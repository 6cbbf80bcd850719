/* What the optimizers and clip_grad_norm share: parameter checks, gradient resolution (a
 * Partial gradient reduced to its parameter's placements) and access to local shards. */
#ifndef DT_OPTIM_IMPL_H
#define DT_OPTIM_IMPL_H

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/comm.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/optim.h"
#include "dtensor/ops.h"

/* Checks the parameter list (see dt_optimizer_create_*): *mesh is the common mesh, NULL when
 * every parameter is local. check_repeats looks for a parameter listed twice (quadratic in n:
 * done when the list is made, not at every step). Not collective. */
dt_status dt__optim_check_params(const char *fn, int n, dt_tensor *const *params,
                                 bool check_repeats, dt_mesh **mesh);

/* grads[i] = params[i]'s gradient ready for a fused loop (a new reference, NULL when it has
 * none): float32, placed like its parameter, with a contiguous local shard. Checks every
 * gradient before any communication; then reduces Partial gradients (every rank must call)
 * and stores each reduced gradient back as its parameter's .grad. On error every grads[i] is
 * NULL. */
dt_status dt__optim_resolve_grads(const char *fn, int n, dt_tensor *const *params,
                                  dt_tensor **grads);

/* Whether any gradient holds NaN or Inf, on any rank of mesh (one all_reduce when mesh is
 * not NULL). */
dt_status dt__optim_any_nonfinite(dt_mesh *mesh, int n, dt_tensor **grads, bool *any);

/* This rank's elements of t: local or the local shard; contiguous float32 (checked before). */
float *dt__optim_floats(dt_tensor *t, int64_t *count);

void dt__optim_release_all(int n, dt_tensor **tensors);

#endif /* DT_OPTIM_IMPL_H */
