/*
 * libdtensor — modules: small building blocks of models with PyTorch's parameter layout
 * and fully-qualified names.
 *
 * A model is a tree of modules. Each module has a type ("Linear"), named parameters and
 * buffers, and named children; the FQN of a parameter joins the names on its path with dots
 * ("mlps.0.0.weight"), as torch.nn.Module.named_parameters does. Forward is C code calling
 * the op API, so it works on local and distributed tensors and can be traced (dt_export).
 *
 *   Linear(in, out, bias)    weight [out, in], bias [out]; y = x @ weight^T + bias
 *   ReLU, GELU               elementwise
 *   Sequential(children)     children named "0", "1", ...; forward chains them
 *   ModuleList(children)     children named "0", "1", ...; no forward of its own
 *   Embedding(num, dim)      weight [num, dim]; forward looks up int64/int32 indices
 *   LayerNorm(dim, eps)      weight, bias [dim]; normalizes the last dim
 *   BatchNorm1d(n, eps)      weight, bias [n]; buffers running_mean, running_var [n],
 *                            num_batches_tracked; inference only (running statistics)
 *   custom                   any type name and forward function (dt_module_create)
 *
 * Parameters are float32 and initialised from a seed as PyTorch does in distribution:
 * Linear U(-1/sqrt(in), 1/sqrt(in)), Embedding N(0, 1), norms ones and zeros.
 *
 * requires_grad: a module's parameters start as leaves with requires_grad false (unlike
 * PyTorch's nn.Parameter), so a forward records no autograd graph unless asked: an inference
 * model costs nothing extra. To train, turn it on (dt_tensor_set_requires_grad on each
 * parameter, dt_module_visit_tensors lists them), or use a parallel wrapper: dt_parallel_fsdp,
 * dt_parallel_ddp and dt_parallel_tp_module all make every parameter of the tree a leaf that
 * requires grad (the distributed ones they create and the local ones they leave). Buffers
 * never require grad.
 *
 * Ownership: a module owns its parameters, buffers and children; dt_module_destroy frees the
 * whole tree (NULL allowed). Adding a child hands it to the parent, also on failure.
 */
#ifndef DTENSOR_NN_H
#define DTENSOR_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_module dt_module;

/* A module's forward: one input, one output (a new reference). */
typedef dt_status (*dt_forward_fn)(dt_module *self, dt_tensor *input, dt_tensor **out);

/* ---- Built-in modules (each hands the caller a new module) ------------------------------ */
/* Errors: DT_ERR_INVALID (NULL out, sizes < 1, bad eps), DT_ERR_NOMEM. */

DT_API dt_status dt_nn_linear(int64_t in_features, int64_t out_features, bool bias, uint64_t seed,
                              dt_module **out);
DT_API dt_status dt_nn_relu(dt_module **out);
DT_API dt_status dt_nn_gelu(dt_module **out);
/* Takes ownership of the n children (also on failure). */
DT_API dt_status dt_nn_sequential(int n, dt_module *const *children, dt_module **out);
DT_API dt_status dt_nn_module_list(int n, dt_module *const *children, dt_module **out);
DT_API dt_status dt_nn_embedding(int64_t num_embeddings, int64_t embedding_dim, uint64_t seed,
                                 dt_module **out);
DT_API dt_status dt_nn_layer_norm(int64_t normalized_dim, double eps, dt_module **out);
DT_API dt_status dt_nn_batch_norm1d(int64_t num_features, double eps, dt_module **out);

/* An MLP as Sequential(Linear(in, hidden, hidden_bias), ReLU, Linear(hidden, out,
 * output_bias)): parameters "0.weight", "0.bias" (when hidden_bias), "2.weight", "2.bias"
 * (when output_bias). Each layer has its own flag because the PyTorch models this mirrors
 * often drop only the second bias (a rowwise-parallel output layer without bias needs no
 * extra reduction). The first Linear is seeded with seed, the second with seed + 1. */
DT_API dt_status dt_nn_mlp(int64_t in_features, int64_t hidden, int64_t out_features,
                           bool hidden_bias, bool output_bias, uint64_t seed, dt_module **out);

/* ---- Custom modules ----------------------------------------------------------------------- */

/* A module of type `type` (copied) whose forward is `forward` (NULL: no forward); `user` is
 * readable with dt_module_user. Add its parts with dt_module_add_child/_parameter/_buffer. */
DT_API dt_status dt_module_create(const char *type, dt_forward_fn forward, void *user,
                                  dt_module **out);
/* Adds a child under name (no dots; unique among the module's names). The parent owns child
 * from now on, also when this fails. Errors: DT_ERR_INVALID (NULL, bad or duplicate name). */
DT_API dt_status dt_module_add_child(dt_module *parent, const char *name, dt_module *child);
/* Removes child i (insertion order) from parent and hands it to the caller in *child (who
 * destroys it or adds it elsewhere; its name is dt_module_child_name(parent, i) before the
 * call); the later children move up by one. Errors: DT_ERR_INVALID (NULL, i out of range). */
DT_API dt_status dt_module_take_child(dt_module *parent, int i, dt_module **child);
/* Adds a parameter / buffer (retained). Errors as for dt_module_add_child. */
DT_API dt_status dt_module_add_parameter(dt_module *m, const char *name, dt_tensor *t);
DT_API dt_status dt_module_add_buffer(dt_module *m, const char *name, dt_tensor *t);

/* Frees the module, its children and its parameters and buffers (tensors are released; a
 * tensor the caller still holds stays alive). NULL is allowed. */
DT_API void dt_module_destroy(dt_module *m);

/* ---- Running and inspecting -------------------------------------------------------------------
 */

/* Runs m's forward on input. Errors: DT_ERR_INVALID (NULL, a module without forward such
 * as ModuleList), and the forward's own errors. */
DT_API dt_status dt_module_forward(dt_module *m, dt_tensor *input, dt_tensor **out);

/* Activation checkpointing of m (PyTorch's checkpoint around the module's call, hooks
 * included): under grad mode its forward runs without recording, so the module's intermediate
 * activations are not kept, only its input; the backward runs the forward again with recording
 * on and back-propagates through the recomputation. Gradients are bitwise those without
 * checkpointing (deterministic kernels); the price is one more forward of m per backward.
 * A checkpointed module inside another recomputes again in the outer recomputation's backward.
 * The module must outlive the graphs its forward records. Forwards that draw random numbers
 * would draw again (no module here does). Errors: DT_ERR_INVALID (NULL m, enabling on a module
 * without forward). */
DT_API dt_status dt_module_set_checkpoint(dt_module *m, bool enabled);
/* Whether m is checkpointed; false for NULL. */
DT_API bool dt_module_checkpointed(const dt_module *m);

/* The module's type name ("Linear", ...) and the user data of a custom module; borrowed,
 * valid while the module lives; NULL for NULL. */
DT_API const char *dt_module_type(const dt_module *m);
DT_API void *dt_module_user(const dt_module *m);
/* Child i (in insertion order) and its name; NULL when out of range. */
DT_API int dt_module_child_count(const dt_module *m);
DT_API dt_module *dt_module_child(const dt_module *m, int i);
DT_API const char *dt_module_child_name(const dt_module *m, int i);
/* The submodule at a dotted path ("mlps.0.2"; "" is m itself), or NULL. */
DT_API dt_module *dt_module_find(const dt_module *m, const char *fqn);
/* The parameter or buffer at a dotted path ("fc.weight"), or NULL. Borrowed. */
DT_API dt_tensor *dt_module_get_tensor(const dt_module *m, const char *fqn);
/* The parameter / buffer called name directly on m (no dots), or NULL. Borrowed. */
DT_API dt_tensor *dt_module_parameter(const dt_module *m, const char *name);
DT_API dt_tensor *dt_module_buffer(const dt_module *m, const char *name);
/* Replaces the parameter or buffer called name on m (the new tensor is retained, the old
 * one released). Errors: DT_ERR_INVALID (no such entry). */
DT_API dt_status dt_module_set_tensor(dt_module *m, const char *name, dt_tensor *t);

/* Visits every parameter (is_buffer false) and buffer (true) of the tree in PyTorch's order
 * (a module's own parameters, then its buffers... per module, depth first) with its FQN.
 * Both are borrowed: fqn is a scratch buffer valid only during that call (copy it to keep
 * it), t lives while the module holds it (dt_tensor_retain to keep it longer).
 * Stops at the first non-OK status the visitor returns and returns it. */
typedef dt_status (*dt_tensor_visit_fn)(const char *fqn, dt_tensor *t, bool is_buffer, void *user);
DT_API dt_status dt_module_visit_tensors(const dt_module *m, dt_tensor_visit_fn fn, void *user);

/* Visits every module of the tree (root first, FQN "" for the root), depth first. */
typedef dt_status (*dt_module_visit_fn)(const char *fqn, dt_module *m, void *user);
DT_API dt_status dt_module_visit(dt_module *m, dt_module_visit_fn fn, void *user);

/* ---- Hooks (used by parallelize_module) -------------------------------------------------------
 */

/* Functions run around m's forward: pre turns the input into what forward takes, post turns
 * forward's output into what the module returns. Each hands back a new reference. `user` is
 * passed to both; the module calls release(user) (when not NULL) when the hooks are replaced
 * or removed or the module is destroyed. */
typedef dt_status (*dt_hook_fn)(dt_module *m, dt_tensor *in, dt_tensor **out, void *user);

/* The most hook pairs one module carries (dt_module_add_hooks). */
#define DT_MODULE_MAX_HOOKS 4

/* Replaces all of m's hook pairs by this one; pre and post both NULL removes every hook (and
 * releases user at once). Either may be NULL alone. */
DT_API void dt_module_set_hooks(dt_module *m, dt_hook_fn pre, dt_hook_fn post, void *user,
                                void (*release)(void *user));

/* Adds a hook pair around the ones m already has (e.g. dt_parallel_fsdp's gather/free around
 * dt_parallel_tp_module's input/output conversion): the pair added last is the outermost, so
 * its pre runs first and its post last; pre hooks run from the last added to the first, post
 * hooks from the first to the last. If a pre hook fails, the pairs it wraps do not run; if a
 * pre hook, the forward or a post hook fails, every pair outside it whose pre hook ran gets
 * its post hook called with in == NULL (inner first): it must then release what its pre hook
 * took, set *out to NULL and return DT_OK (its status is ignored; the first error and its
 * message are what dt_module_forward returns). The module owns user from now on (release is called
 * also on failure). Errors: DT_ERR_INVALID (NULL m, pre and post both NULL, already
 * DT_MODULE_MAX_HOOKS pairs). */
DT_API dt_status dt_module_add_hooks(dt_module *m, dt_hook_fn pre, dt_hook_fn post, void *user,
                                     void (*release)(void *user));

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_NN_H */
