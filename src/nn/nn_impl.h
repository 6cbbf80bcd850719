/* Private parts of the modules layer: the checkpointed forward (checkpoint.c), below
 * modules.c, which calls it with its own forward without checkpointing. */
#ifndef DT_NN_IMPL_H
#define DT_NN_IMPL_H

#include "dtensor/autograd.h"
#include "dtensor/nn.h"

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

#endif /* DT_NN_IMPL_H */
