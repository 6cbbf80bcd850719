/*
 * libdtensor — pipeline parallelism: a model split into stages on the ranks of a "pp" group,
 * microbatches, and schedules (GPipe, 1F1B, interleaved 1F1B) as lists of per-rank actions,
 * after torch.distributed.pipelining.
 *
 * Stages. A model is split into n_stages consecutive parts (modules: the first and last may
 * hold fewer layers). With P ranks in the pp group and v stages per rank (v = 1 for GPipe and
 * 1F1B, v >= 2 for interleaved 1F1B), stage s lives on pp rank s % P ("loop" placement, as
 * PyTorch's interleaved schedules): rank r holds stages r, r + P, r + 2P, ... and calls them
 * its local stages 0, 1, ... in that order.
 *
 * Schedules. A schedule is, for each pp rank, the list of actions it runs in order for one
 * training step: forward or backward of (stage, microbatch), and the sends and receives of
 * activations (to the next stage) and of gradients (to the previous stage). A boundary
 * between two stages of one rank (P = 1) has no send or receive: the activation is handed
 * over in memory. Every schedule is validated when it is made: each action names a stage of
 * its rank and a microbatch in range; every forward, backward and needed transfer appears
 * exactly once; a forward comes after the receive of its input, a backward after its forward
 * and the receive of its output's gradient, a send after what it sends is computed; and a
 * simulation of all ranks (sends complete when posted up to DT_PP_SEND_WINDOW transfers in
 * flight per pair of ranks, receives wait; no tags, so the k-th send from a to b meets the
 * k-th receive on b from a) finishes without deadlock and with every receive meeting the
 * send it expects. A schedule that fails is refused with a message naming the rank, the
 * action's position and what is wrong.
 *
 * Running. dt_pipeline_step splits the batch into microbatches on dim 0 (sizes differing by
 * at most one, torch.tensor_split), runs this rank's actions, and returns the step's loss on
 * every pp rank: the sum over microbatches of the loss function's value times the scale of
 * dt_pipeline_options.loss_scale. Each microbatch's scaled loss is back-propagated on the
 * last stage, so after the step every parameter's `.grad` holds the gradient of that sum
 * (accumulated over the microbatches into whatever the parameters held): call the optimizer
 * step (and dt_parallel_ddp_reduce_gradients under DDP) on this rank's stage parameters
 * afterwards. Activations and gradients cross ranks as this rank's local block with a small
 * header (dtype, shapes, placements) sent before it, so shapes need not be declared; receive
 * buffers are kept and reused across microbatches and steps.
 *
 * Composition (3-D). Inside a stage the modules may be tensor parallel and data parallel on a
 * stage mesh: the mesh of the other dims over the ranks that share this rank's pp coordinate
 * (dt_pp_mesh_create builds both the pp group and the stage mesh from one world). A
 * distributed activation goes to the rank with the same stage-mesh coordinates in the next
 * stage and is rebuilt there with the same placements; a Partial placement is made Replicate
 * (recorded, so its backward is right) before it is sent, and the gradient coming back is
 * redistributed to the activation's placements before it is sent.
 *
 * Ownership: tensors passed in are borrowed; modules passed to dt_pipeline_create are borrowed
 * and must outlive the pipeline. Every function validates its arguments and returns a
 * dt_status; messages name the function and the offending value.
 */
#ifndef DTENSOR_PIPELINE_H
#define DTENSOR_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>

#include "dtensor/comm.h"
#include "dtensor/core.h"
#include "dtensor/mesh.h"
#include "dtensor/nn.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Transfers (an activation or a gradient) one rank may have sent to one peer and the peer has
 * not yet received; a further send waits. The validation's simulation uses the same bound. */
#define DT_PP_SEND_WINDOW 4

/* The most pp ranks a schedule may have, and the most (stage, microbatch) pairs (2^20): the
 * validation simulates every pair of ranks over every transfer. */
#define DT_PP_MAX_RANKS 1024

/* ---- Schedules ----------------------------------------------------------------------------- */

typedef enum dt_pp_schedule_kind {
  DT_PP_GPIPE = 0,            /* all forwards, then all backwards */
  DT_PP_1F1B = 1,             /* warm-up forwards, then one forward one backward, cool-down */
  DT_PP_INTERLEAVED_1F1B = 2, /* 1F1B over v stages per rank (Megatron's order) */
} dt_pp_schedule_kind;

typedef enum dt_pp_action_kind {
  DT_PP_FORWARD = 0,
  DT_PP_BACKWARD = 1,
  DT_PP_SEND_ACTIVATION = 2, /* stage's output to stage + 1 */
  DT_PP_RECV_ACTIVATION = 3, /* stage's input from stage - 1 */
  DT_PP_SEND_GRAD = 4,       /* gradient of stage's input to stage - 1 */
  DT_PP_RECV_GRAD = 5,       /* gradient of stage's output from stage + 1 */
} dt_pp_action_kind;

/* One action of a rank: its kind, the (global) stage it concerns and the microbatch. */
typedef struct dt_pp_action {
  dt_pp_action_kind kind;
  int stage;
  int microbatch;
} dt_pp_action;

typedef struct dt_pp_schedule dt_pp_schedule;

/* Makes the schedule `kind` for n_ranks pp ranks with stages_per_rank stages each (1 for
 * GPipe and 1F1B; >= 1 for interleaved, where n_microbatches must be a multiple of n_ranks
 * as in Megatron's order) and n_microbatches microbatches, and validates it (as
 * dt_pp_schedule_create_custom). The caller owns *out (dt_pp_schedule_destroy).
 * Errors: DT_ERR_INVALID (NULL out, counts < 1, more than DT_PP_MAX_RANKS ranks or 2^20
 * stages x microbatches, an unknown kind, stages_per_rank != 1 for GPipe or 1F1B),
 * DT_ERR_UNSUPPORTED (interleaved with n_microbatches not a multiple of n_ranks), DT_ERR_NOMEM. */
DT_API dt_status dt_pp_schedule_create(dt_pp_schedule_kind kind, int n_ranks, int stages_per_rank,
                                       int n_microbatches, dt_pp_schedule **out);

/* A schedule from explicit lists: rank r runs n_actions[r] actions actions[r][0..] (copied).
 * n_stages must be a multiple of n_ranks (stage s on rank s % n_ranks). Validated as the
 * header comment says. Errors: DT_ERR_INVALID (NULL pointers, counts < 1, the bounds of
 * dt_pp_schedule_create, and a schedule that
 * fails validation: the message names the rank, the action's index and formatted name, and
 * the rule it breaks, or, for a deadlock, each blocked rank and the action it waits in),
 * DT_ERR_NOMEM. */
DT_API dt_status dt_pp_schedule_create_custom(int n_ranks, int n_stages, int n_microbatches,
                                              const int *n_actions,
                                              const dt_pp_action *const *actions,
                                              dt_pp_schedule **out);

/* Frees the schedule (NULL allowed). */
DT_API void dt_pp_schedule_destroy(dt_pp_schedule *schedule);

/* The schedule's counts; 0 for NULL. */
DT_API int dt_pp_schedule_ranks(const dt_pp_schedule *schedule);
DT_API int dt_pp_schedule_stages(const dt_pp_schedule *schedule);
DT_API int dt_pp_schedule_microbatches(const dt_pp_schedule *schedule);

/* Rank's actions (borrowed, valid while the schedule lives) in *actions and their count in
 * *n. Errors: DT_ERR_INVALID (NULL arguments, rank out of range). */
DT_API dt_status dt_pp_schedule_actions(const dt_pp_schedule *schedule, int rank, int *n,
                                        const dt_pp_action **actions);

/* Writes an action as PyTorch's pipelining tests print them: "1F0" (stage 1 forward of
 * microbatch 0), "1B0", "1SEND_F0", "1RECV_F0", "1SEND_B0", "1RECV_B0". Returns buf. */
DT_API const char *dt_pp_action_format(dt_pp_action action, char *buf, size_t size);

/* The idle share of the schedule in the simulation with every forward taking time 1 and every
 * backward time `backward_cost` (transfers free): 1 - (busy time) / (ranks x makespan). For
 * 1F1B with equal stages it is (p - 1) / (m + p - 1). Errors: DT_ERR_INVALID (NULL, cost <= 0). */
DT_API dt_status dt_pp_schedule_bubble(const dt_pp_schedule *schedule, double backward_cost,
                                       double *bubble);

/* ---- Stages -----------------------------------------------------------------------------------
 */

/* Splits model's children (a Sequential's layers, in order) into n_stages consecutive stage
 * modules: stage k takes sizes[k] children (NULL sizes: an even split, one extra child going to
 * the middle stages first, then the first, then the last, so the first and last hold fewer).
 * Each stage is a new module of type "PipelineStage" whose forward chains its children; the
 * children keep their names, so a stage's parameter FQNs are the model's ("2.weight").
 * The children move out of model (which is left with none; the caller still destroys it);
 * the caller owns stages[0..n_stages), each to be destroyed with dt_module_destroy.
 * Errors: DT_ERR_INVALID (NULL arguments, n_stages < 1, more stages than children, sizes
 * that are < 1 or do not add up to the children; checked before anything moves),
 * DT_ERR_NOMEM (the stages made so far are destroyed with the children moved into them). */
DT_API dt_status dt_pp_split_model(dt_module *model, int n_stages, const int *sizes,
                                   dt_module **stages);

/* ---- The pp group and the stage mesh ----------------------------------------------------------
 */

typedef struct dt_pp_mesh dt_pp_mesh;

/* Splits world (ranks row-major over shape, as dt_mesh_create) along the dim named pp_name:
 * the pp group is the ranks that share every other coordinate (this rank's number in it is its
 * pp coordinate), the stage mesh is the mesh of the remaining dims (with their names) over the
 * ranks that share this rank's pp coordinate; NULL when pp is the only dim. Collective over
 * world. The caller owns *out; release the stage mesh's tensors before dt_pp_mesh_destroy.
 * Errors: DT_ERR_INVALID (NULL, no dim or two dims named pp_name, a shape whose product is
 * not the world's size, and dt_mesh_create's), DT_ERR_NOMEM,
 * dt_comm_split's. */
DT_API dt_status dt_pp_mesh_create(dt_comm *world, int ndim, const int *shape,
                                   const char *const *dim_names, const char *pp_name,
                                   dt_pp_mesh **out);
/* The pp group and the stage mesh (borrowed; the stage mesh may be NULL); NULL for NULL. */
DT_API dt_comm *dt_pp_mesh_group(const dt_pp_mesh *pp_mesh);
DT_API dt_mesh *dt_pp_mesh_stage_mesh(const dt_pp_mesh *pp_mesh);
/* Frees the groups and drops the stage mesh (NULL allowed). */
DT_API void dt_pp_mesh_destroy(dt_pp_mesh *pp_mesh);

/* ---- Running a pipeline -------------------------------------------------------------------------
 */

/* The loss of one microbatch from the last stage's output and the microbatch's target: a new
 * reference to a one-element floating tensor (local or distributed) in *loss. */
typedef dt_status (*dt_pp_loss_fn)(dt_tensor *output, dt_tensor *target, void *user,
                                   dt_tensor **loss);

/* How the microbatch losses are summed into the step's loss. */
typedef enum dt_pp_loss_scale {
  /* Each microbatch's loss times its rows over the batch's rows: with a mean loss, the mean
   * over the whole batch, also for uneven microbatches (the default). */
  DT_PP_SCALE_ROWS = 0,
  DT_PP_SCALE_MICROBATCHES = 1, /* times 1 / n_microbatches */
  DT_PP_SCALE_NONE = 2,         /* the plain sum (a sum loss) */
} dt_pp_loss_scale;

/* Options of dt_pipeline_create. Zero-initialise; NULL means all defaults. */
typedef struct dt_pipeline_options {
  dt_pp_loss_scale loss_scale;
  /* The mesh the stages' distributed activations live on (dt_pp_mesh_stage_mesh); NULL when
   * the stages compute on local tensors. */
  dt_mesh *stage_mesh;
  /* Name each forward's and backward's span in the profiler ("1F0", "1B0") when a profiler
   * records (the bubble measurement of `dtensor bench pipeline`); waits are not named. */
  bool profile_actions;
} dt_pipeline_options;

typedef struct dt_pipeline dt_pipeline;

/* Makes this rank's part of a pipeline: the pp group (this rank's number in it is its pp rank;
 * its size must equal the schedule's ranks), the schedule (copied), this rank's
 * n_local_stages stage modules in local order (global stage r, r + P, ...; borrowed), the loss
 * function (called on the rank holding the last stage). Not collective. The caller owns *out.
 * Errors: DT_ERR_INVALID (NULL arguments, a pp group of another size, n_local_stages not the
 * schedule's stages per rank, a bad loss_scale), DT_ERR_NOMEM. */
DT_API dt_status dt_pipeline_create(dt_comm *pp_group, const dt_pp_schedule *schedule,
                                    int n_local_stages, dt_module *const *stages,
                                    dt_pp_loss_fn loss_fn, void *loss_user,
                                    const dt_pipeline_options *options, dt_pipeline **out);

/* Runs one step of the schedule: input is the whole batch on the ranks holding stage 0 (NULL
 * elsewhere), target the batch's targets on the rank holding the last stage (NULL elsewhere);
 * both are split on dim 0 into the schedule's microbatches (a distributed one keeps its
 * placements: a Shard(0) mesh dim splits each rank's rows; at most one mesh dim may shard dim
 * 0). *loss (may be NULL) receives the step's loss on every pp rank. Collective over the pp
 * group and, inside each stage, over the stage mesh.
 * Errors: DT_ERR_INVALID (the pp ranks made different schedules, on every rank; NULL input
 * or target where needed, a batch of fewer rows than
 * microbatches, an activation whose header does not match what the receiving stage expects,
 * a loss of more than one element), DT_ERR_UNSUPPORTED (dim 0 sharded by two mesh dims, a
 * StridedShard or Partial input, a distributed activation without options->stage_mesh), the
 * errors of the stages' forward and backward, the loss function's and the transfers'.
 * Arguments are checked on every pp rank and the ranks agree, on the refusals and on a hash
 * of the schedule (one all_reduce of three int64 per step), before any transfer: a refusal
 * on one rank, or a rank with another schedule, makes every pp rank return DT_ERR_INVALID
 * and the pipeline stays usable. A failure after the transfers started aborts the pp group
 * (dt_comm_abort) so that no peer waits forever; the in-flight state is dropped and the
 * parameters' gradients may be partial. */
DT_API dt_status dt_pipeline_step(dt_pipeline *pipeline, dt_tensor *input, dt_tensor *target,
                                  double *loss);

/* Bytes this rank has sent (headers included) and the receive buffers it has allocated since
 * the pipeline was made (reuse keeps the latter flat across steps). NULL-safe: 0. */
DT_API int64_t dt_pipeline_bytes_sent(const dt_pipeline *pipeline);
DT_API int64_t dt_pipeline_buffers_allocated(const dt_pipeline *pipeline);

/* Frees the pipeline (NULL allowed); the stage modules and the pp group are left alone and
 * not used, so they may be destroyed before it. */
DT_API void dt_pipeline_destroy(dt_pipeline *pipeline);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_PIPELINE_H */
