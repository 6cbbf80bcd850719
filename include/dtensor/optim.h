/*
 * libdtensor — optimizers (SGD, Adam, AdamW with PyTorch's update rules; Lion), zero_grad and
 * clip_grad_norm, for local and distributed parameters, and the optimizer's state dict for
 * exact resumption from a checkpoint.
 *
 * The optimizers form a table: each has named state slots, named hyperparameters with
 * defaults, and a fused step (docs/training.md, "Optimizers"):
 *   "sgd"    slots momentum_buffer (with momentum > 0); lr 1e-3, momentum 0, dampening 0,
 *            weight_decay 0, nesterov 0 (0 or 1)
 *   "adam"   slots exp_avg, exp_avg_sq; lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8,
 *            weight_decay 0 (added to the gradient)
 *   "adamw"  as adam, weight_decay 0.01 (decoupled: the weight decays by lr * weight_decay)
 *   "lion"   slot exp_avg; lr 1e-4, beta1 0.9, beta2 0.99, weight_decay 0 (decoupled)
 *
 * An optimizer holds references to its parameters and keeps its state (momentum buffer,
 * exp_avg, exp_avg_sq) placed exactly like each parameter: a distributed parameter's state
 * is a distributed tensor with the parameter's mesh, placements and global shape, and each
 * rank stores only its shard. The step is one fused loop per parameter over this rank's
 * local shard (plain C over float arrays); it communicates only to reduce Partial gradients
 * to the parameter's placements (data parallelism: a Replicate weight used with a
 * batch-sharded input has a Partial(sum) gradient), and, when asked, to agree across ranks
 * on skipping a step with a non-finite gradient.
 *
 * Parameters: float32 leaf tensors that require grad, with a contiguous local shard; local
 * and distributed ones may mix (as PyTorch's optimizers take plain tensors beside DTensors: a
 * tensor-parallel model leaves the parameters its plan does not name local), and the
 * distributed ones share one mesh. Each is updated as it is: a local one whole on every rank,
 * a distributed one on this rank's shard. With any distributed parameter, every rank of its
 * mesh must call the step and clip_grad_norm. The step runs under no_grad. For bfloat16 or
 * float16 training keep these float32 masters and compute with dt_to copies made in each step
 * (docs/training.md, "Mixed precision"; examples/bf16_attention_train.c).
 *
 * Conventions: tensors passed in are borrowed (the optimizer retains its parameters);
 * a tensor returned through `dt_tensor **out` is a new reference the caller releases.
 */
#ifndef DTENSOR_OPTIM_H
#define DTENSOR_OPTIM_H

#include <stdbool.h>

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_optimizer dt_optimizer;

/* One named hyperparameter for dt_optimizer_create ("lr", "momentum", ...; the table above). */
typedef struct dt_optimizer_hyperparameter {
  const char *name;
  double value; /* used exactly as given: 0 is zero */
} dt_optimizer_hyperparameter;

/* Creates optimizer `name` ("sgd", "adam", "adamw", "lion") over n parameters (see the header
 * comment for what a parameter must be) with the hyperparameters given (n_hyper of them, any
 * order; the others take their defaults). The state is allocated here, zero, placed like each
 * parameter; the arrays are copied, the parameters retained. Not collective.
 * Errors: DT_ERR_INVALID (NULL name or out, an unknown optimizer or hyperparameter name, a name
 * given twice, a value out of range: the message names it and its value, and the parameter errors
 * of dt_optimizer_create_sgd), DT_ERR_DTYPE, DT_ERR_NOMEM. */
DT_API dt_status dt_optimizer_create(const char *name, int n, dt_tensor *const *params, int n_hyper,
                                     const dt_optimizer_hyperparameter *hyper, dt_optimizer **out);

/* The legacy option structs below follow the options convention (docs/api.md, "Naming"): a
 * zero-initialised struct, or NULL options, is PyTorch's defaults. A field whose zero is not
 * its default (lr, Adam's betas and eps, AdamW's weight_decay) reads 0 as that default; to ask
 * for an exact zero in those but lr (a zero rate is refused), pass DT_OPTIM_ZERO. Fields whose
 * default is 0 are used as given. */
#define DT_OPTIM_ZERO (-1.0)

/* SGD options (torch.optim.SGD). */
typedef struct dt_sgd_options {
  double lr;           /* > 0; 0: 1e-3 */
  double momentum;     /* >= 0; 0: no momentum buffer */
  double dampening;    /* applied to the gradient from the second step on, as PyTorch; 0: none */
  double weight_decay; /* >= 0: L2 penalty added to the gradient; 0: none */
  bool nesterov;       /* needs momentum > 0 and dampening == 0 */
} dt_sgd_options;

/* Adam / AdamW options (torch.optim.Adam, torch.optim.AdamW). */
typedef struct dt_adam_options {
  double lr;    /* > 0; 0: 1e-3 */
  double beta1; /* in [0, 1); 0: 0.9, DT_OPTIM_ZERO: 0 */
  double beta2; /* in [0, 1); 0: 0.999, DT_OPTIM_ZERO: 0 */
  double eps;   /* >= 0; 0: 1e-8, DT_OPTIM_ZERO: 0 */
  /* >= 0: Adam adds it to the gradient (L2), AdamW decays the weight. 0: Adam 0, AdamW 0.01
   * (PyTorch's defaults); DT_OPTIM_ZERO: 0 (no decay) for both. */
  double weight_decay;
} dt_adam_options;

/* Creates an optimizer over n parameters (see the header comment for what a parameter must
 * be). The state is allocated here, zero, placed like each parameter; the arrays are
 * copied, the parameters retained. options may be NULL (PyTorch's defaults). Not collective.
 * Errors: DT_ERR_INVALID (NULL params or out, n < 1, a NULL or repeated parameter, a parameter
 * that is not a leaf requiring grad, a non-contiguous local shard, distributed parameters on
 * different mesh objects (local ones mix freely with them), an option out of range: the
 * message names it and its value), DT_ERR_DTYPE (a parameter not float32),
 * DT_ERR_UNSUPPORTED (a parameter on a device kind without optimizer kernels; the CPU and, in
 * a CUDA build, CUDA have them: a CUDA parameter's state lives on its device and its step is
 * one fused kernel per parameter with the CPU's element arithmetic), DT_ERR_NOMEM. */
DT_API dt_status dt_optimizer_create_sgd(int n, dt_tensor *const *params,
                                         const dt_sgd_options *options, dt_optimizer **out);
DT_API dt_status dt_optimizer_create_adam(int n, dt_tensor *const *params,
                                          const dt_adam_options *options, dt_optimizer **out);
DT_API dt_status dt_optimizer_create_adamw(int n, dt_tensor *const *params,
                                           const dt_adam_options *options, dt_optimizer **out);

/* Releases the parameters and the state. NULL is allowed. */
DT_API void dt_optimizer_destroy(dt_optimizer *opt);

/* Options of dt_optimizer_step_ex. Zero-initialise; NULL means all defaults. */
typedef struct dt_optimizer_step_options {
  /* Scan every gradient for NaN and Inf first; if any rank finds one, every rank skips the
   * step (nothing is updated, *skipped is true). One all_reduce of one value. */
  bool skip_if_nonfinite;
} dt_optimizer_step_options;

/* One update of every parameter that has a gradient (parameters without one are left
 * alone, as PyTorch does). Gradients are checked first and nothing is updated unless every
 * check passes. A Partial gradient of a parameter that is not Partial is reduced to the
 * parameter's placements and stored back as its `.grad`.
 * Errors: DT_ERR_INVALID (NULL opt; a gradient local for a distributed parameter or the
 * reverse, on another mesh, or with other placements than its parameter's that are not a
 * Partial to reduce: the message names the parameter index and both placements),
 * DT_ERR_DTYPE (a gradient not float32), DT_ERR_SHAPE (a gradient of another shape), the
 * errors of the reduction; DT_ERR_INVALID too when a parameter's step count or the steps
 * taken is already 2^53, the most an optimizer counts (on every rank; nothing changes).
 * skipped may be NULL.
 * With a learning-rate schedule attached, a step that updates ends by setting "lr" to the
 * next step's rate (as PyTorch's scheduler.step() after optimizer.step()): "lr" read after
 * dt_optimizer_step is the rate the next step will use, not the one this step used; read it
 * before the step (or dt_lr_schedule_value at dt_optimizer_steps_taken - 1) to log that. A
 * skipped step leaves it unchanged. */
DT_API dt_status dt_optimizer_step(dt_optimizer *opt);
DT_API dt_status dt_optimizer_step_ex(dt_optimizer *opt, const dt_optimizer_step_options *options,
                                      bool *skipped);

/* Zeroes every parameter's gradient (dt_tensor_zero_grad). Errors: DT_ERR_INVALID (NULL). */
DT_API dt_status dt_optimizer_zero_grad(dt_optimizer *opt, bool set_to_none);

/* The state tensor of slot `name` ("momentum_buffer" for SGD with momentum, "exp_avg" and
 * "exp_avg_sq" for Adam/AdamW, "exp_avg" for Lion) of parameter index, a new reference; and *steps,
 * the steps taken by that parameter (may be NULL). Errors: DT_ERR_INVALID (NULL, index out of
 * range, no state of that name). */
DT_API dt_status dt_optimizer_state(const dt_optimizer *opt, int index, const char *name,
                                    dt_tensor **out, int64_t *steps);

/* The optimizer's table name ("sgd", ...); NULL for NULL. Borrowed, static. */
DT_API const char *dt_optimizer_name(const dt_optimizer *opt);

/* Reads / sets hyperparameter `name` (the table in the header comment). Setting checks the
 * value as creation does (a learning-rate schedule sets "lr" before each step and after each
 * one, to the next step's rate: see dt_optimizer_step; while one is attached, a value set by
 * hand is replaced before the next step) and refuses a change that would add or drop a state slot
 * (SGD's momentum from or to 0). Not collective: every rank must set the same values. Errors:
 * DT_ERR_INVALID (NULL, unknown name, a value out of range). */
DT_API dt_status dt_optimizer_get_hyperparameter(const dt_optimizer *opt, const char *name,
                                                 double *value);
DT_API dt_status dt_optimizer_set_hyperparameter(dt_optimizer *opt, const char *name, double value);

/* ---- Learning-rate schedules ----------------------------------------------------------------
 * A schedule attached to an optimizer sets its "lr" before every step from the number of
 * steps the optimizer has taken (t = 0 on the first step):
 *   warmup  t < warmup_steps:  peak_lr * (t + 1) / warmup_steps
 *   then, p = (t - warmup_steps) / (total_steps - warmup_steps), capped at 1:
 *     COSINE  min_lr + (peak_lr - min_lr) (1 + cos(pi p)) / 2
 *     LINEAR  min_lr + (peak_lr - min_lr) (1 - p)
 *     WSD     (warmup-stable-decay) peak_lr until the last decay_steps of total_steps, then
 *             linear from peak_lr to min_lr over those decay_steps
 *   and never below min_lr (the floor; also during warmup); from total_steps on, min_lr.
 * Its state (the step count and these settings) is part of the optimizer's state dict. */
typedef enum dt_lr_decay {
  DT_LR_DECAY_COSINE = 0,
  DT_LR_DECAY_LINEAR = 1,
  DT_LR_DECAY_WSD = 2,
} dt_lr_decay;

typedef struct dt_lr_schedule {
  dt_lr_decay decay;
  double peak_lr;       /* > 0 */
  double min_lr;        /* the floor: 0 <= min_lr <= peak_lr */
  int64_t warmup_steps; /* >= 0 */
  int64_t total_steps;  /* > warmup_steps */
  int64_t decay_steps;  /* WSD: 1 <= decay_steps <= total_steps - warmup_steps; else ignored */
} dt_lr_schedule;

/* The learning rate of step t (>= 0) under schedule s, the closed form above. Errors:
 * DT_ERR_INVALID (NULL, t < 0, a setting out of range: named with its value). */
DT_API dt_status dt_lr_schedule_value(const dt_lr_schedule *s, int64_t t, double *lr);

/* Attaches schedule s (copied) to opt, or detaches it (NULL; lr keeps its last value). The
 * schedule counts from the optimizer's steps taken so far (dt_optimizer_step calls that
 * updated; skipped ones do not count), so attaching it to a fresh optimizer starts at t = 0.
 * Not collective (every rank attaches the same). Errors: DT_ERR_INVALID (NULL opt, a bad
 * setting, an lr the optimizer refuses). */
DT_API dt_status dt_optimizer_set_lr_schedule(dt_optimizer *opt, const dt_lr_schedule *s);

/* The optimizer's steps taken so far (see dt_optimizer_set_lr_schedule); -1 for NULL. */
DT_API int64_t dt_optimizer_steps_taken(const dt_optimizer *opt);

/* ---- The optimizer's state dict ------------------------------------------------------------
 * Everything a step depends on besides the parameters, as named tensors that go into a
 * distributed checkpoint beside the model's (dt_checkpoint_save / dt_checkpoint_load, which
 * reshard: save on 4 FSDP ranks, load on 3, on TP 2 or on 1). For parameter i named
 * param_names[i] (its FQN) and prefix P (NULL: "optim."):
 *   P "state." FQN "." SLOT   each slot the optimizer keeps, the optimizer's own state tensor
 *                             (placed like the parameter): a checkpoint load writes into it
 *   P "state." FQN ".step"    the parameter's step count, a local int64 [1]
 *   P "hyper." NAME           each hyperparameter, a local float64 [1]
 *   P "steps_taken"           the optimizer's step count, a local int64 [1]
 *   P "schedule." FIELD       with a learning-rate schedule attached: its fields (decay,
 *                             peak_lr, min_lr, warmup_steps, total_steps, decay_steps), each
 *                             a local float64 [1]; loading them replaces the schedule
 * (PyTorch's flattened optimizer state dict: state.FQN.exp_avg, param_groups.lr.) The kind
 * is implied by the slot and hyperparameter names: loading an Adam checkpoint into SGD fails
 * in dt_checkpoint_load on the missing names. */
typedef struct dt_optimizer_state_dict {
  int count;
  char **names;        /* owned */
  dt_tensor **tensors; /* owned references */
  /* What each entry is, for dt_optimizer_load_state_dict; not for the caller. */
  int *roles;
} dt_optimizer_state_dict;

/* Fills *out with opt's state dict (above). param_names: opt's parameter count of names,
 * copied; prefix may be NULL. The step and hyperparameter tensors hold the current values.
 * Errors: DT_ERR_INVALID (NULL, a NULL or repeated name), DT_ERR_NOMEM; on error *out is
 * empty. */
DT_API dt_status dt_optimizer_get_state_dict(const dt_optimizer *opt,
                                             const char *const *param_names, const char *prefix,
                                             dt_optimizer_state_dict *out);

/* Sets opt's step counts and hyperparameters from sd's tensors (after dt_checkpoint_load
 * filled them), and copies a slot tensor into opt's state when it is not opt's own (a state
 * dict of another optimizer of the same kind and parameter shapes). Everything is checked
 * before anything changes: each step count and steps_taken in [0, 2^53], the schedule's
 * fields finite (decay 0, 1 or 2; its step fields integers of magnitude at most 2^53, checked
 * before any conversion) and in the ranges of dt_optimizer_set_lr_schedule, the
 * hyperparameters as creation checks them (step counts and hyperparameters are CPU tensors),
 * slot tensors of the state's dtype, device, global shape and placements. Not collective.
 * Errors: DT_ERR_INVALID (NULL, a state dict of another kind or parameter count, a bad value:
 * the message names the entry), DT_ERR_SHAPE. */
DT_API dt_status dt_optimizer_load_state_dict(dt_optimizer *opt, const dt_optimizer_state_dict *sd);

/* Releases sd's names and tensors and zeroes it. NULL is ignored. */
DT_API void dt_optimizer_state_dict_clear(dt_optimizer_state_dict *sd);

/* Options of dt_clip_grad_norm. Zero-initialise; NULL means all defaults. */
typedef struct dt_clip_grad_options {
  /* Fail with DT_ERR_INVALID when the total norm is NaN or Inf (PyTorch's
   * error_if_nonfinite); by default the non-finite norm is returned and nothing scaled. */
  bool error_if_nonfinite;
} dt_clip_grad_options;

/* PyTorch's clip_grad_norm_ (2-norm): the norm of all the gradients of params together,
 * over every shard and mesh dim with one all_reduce for the whole list (each rank adds the
 * squares of its local shards; a shard replicated along a mesh dim is counted only by the
 * rank at coordinate 0 of that dim). A local gradient beside distributed ones counts once:
 * each rank adds its squares divided by the mesh's rank count, so local gradients equal on
 * every rank (a TP model's LayerNorms) count once, and ones that differ give every rank the
 * same norm with their squares averaged (as PyTorch's get_total_norm, which replicates a plain
 * tensor's norm beside DTensors). Without distributed parameters nothing is communicated.
 * When max_norm / (norm + 1e-6) < 1 every gradient is scaled by it, in place (max_norm 0: every
 * gradient becomes 0, as PyTorch's). Partial
 * gradients are first reduced as dt_optimizer_step does.
 * Parameters without gradient are skipped. *total_norm receives the norm (may be NULL).
 * Errors: DT_ERR_INVALID (NULL params, n < 1, max_norm negative or NaN, the parameter and gradient
 * errors of dt_optimizer_create_sgd (distributed parameters on two mesh objects: the norm
 * reduces over one) and dt_optimizer_step, a non-finite norm with
 * error_if_nonfinite), the errors of the collective. */
DT_API dt_status dt_clip_grad_norm(int n, dt_tensor *const *params, double max_norm,
                                   const dt_clip_grad_options *options, double *total_norm);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_OPTIM_H */
