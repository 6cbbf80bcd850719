/* Private parts of the modules layer: the checkpointed forward (checkpoint.c), below
 * modules.c, which calls it with its own forward without checkpointing. */
#ifndef DT_NN_IMPL_H
#define DT_NN_IMPL_H

#include "dtensor/autograd.h"
#include "dtensor/nn.h"
#include "dtensor/transformer.h"

/* A module's forward without checkpointing (modules.c: its hooks and forward, recorded). */
typedef dt_status (*dt__plain_forward_fn)(dt_module *m, dt_tensor *input, dt_tensor **out);

/* The forward of a checkpointed module under grad mode (checkpoint.c): plain(m, input) run
 * without recording, then one node whose backward runs plain again with recording and
 * back-propagates through the recomputation. type names the module in messages (borrowed,
 * lives with m); params_require_grad says whether any parameter of m's tree requires grad.
 * modules.c passes its plain forward in, so this file calls nothing of modules.c. */
dt_status dt__checkpoint_forward(dt_module *m, const char *type, bool params_require_grad,
                                 dt__plain_forward_fn plain, dt_tensor *input, dt_tensor **out);

/* The user pointer of m's hook pair whose pre hook is `pre` (a wrapper finding its own state
 * on a module, e.g. dt_parallel_fsdp_set_gradient_sync), or NULL. */
void *dt__module_hook_user(const dt_module *m, dt_hook_fn pre);

/* A built-in module's own state in its user pointer: release(user) runs when the module is
 * destroyed (transformer.c's Attention). dt__module_released_by tells whether m's state is
 * released by `release`, i.e. whether m is such a module (its user pointer is that state). */
void dt__module_set_release(dt_module *m, void (*release)(void *user));
bool dt__module_released_by(const dt_module *m, void (*release)(void *user));

/* The KV cache's side of an Attention forward (kv_cache.c). dt__nn_kv_cache_position: the
 * absolute position of `layer`'s next key (committed and pending positions). extend: x (keys:
 * which 0, values: 1; [B, Hk, T, hd]) is appended along dim 2 to what the layer holds: *out
 * (kept on tmp) for this forward, whose first key is *held positions before the new ones; a
 * detached contiguous copy of its last keep_last positions (0: all) becomes the layer's
 * pending entry. */
int64_t dt__nn_kv_cache_position(const dt_nn_kv_cache *cache, int layer);
dt_status dt__nn_kv_cache_extend(dt_nn_kv_cache *cache, int layer, int which, dt_tensor *x,
                                 int64_t keep_last, dt_tensor_list *tmp, dt_tensor **out,
                                 int64_t *held);

/* Expert parallelism of a MoE (moe.c, moe_ep.c): the mesh (retained) and its dim the experts
 * are split over, and this rank's coordinate there. */
typedef struct dt__nn_moe_ep {
  struct dt_mesh *mesh;
  int dim, rank;
} dt__nn_moe_ep;
/* Whether m is a MoE of dt_nn_moe. */
bool dt__nn_is_moe(const dt_module *m);
/* Splits moe's experts over mesh dim `dim` (torch.chunk of n_experts; the others are
 * destroyed). Collective over nothing: each rank keeps its own. Errors: DT_ERR_INVALID (not a
 * MoE, already split, dim outside the mesh). */
dt_status dt__nn_moe_expert_parallel(dt_module *moe, struct dt_mesh *mesh, int dim);
/* The experts' outputs for xp (this rank's token-slot assignments in expert order, counts per
 * global expert), computed on the experts' ranks (moe_ep.c); *out kept by the caller. */
dt_status dt__nn_moe_run_expert_parallel(const dt__nn_moe_ep *ep, dt_module *experts, dt_tensor *xp,
                                         const int64_t *counts, int64_t n_experts,
                                         dt_tensor_list *tmp, dt_tensor **out);

/* Runs an op whose result goes to `r` and keeps it on the dt_tensor_list `tmp` (both in the
 * caller's scope, with its dt_status `st`): nothing runs once st is an error. The forwards of
 * the transformer modules and the models release the list at their end. */
#define DT__KEEP(call, r)                                                                          \
  (st ? st : ((st = (call)), st ? st : (dt_tensor_list_keep(tmp, r) ? DT_OK : (st = DT_ERR_NOMEM))))

#endif /* DT_NN_IMPL_H */
