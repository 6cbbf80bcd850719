/*
 * The eager tensor-parallel path (PyTorch's parallelize_module with ColwiseParallel,
 * RowwiseParallel and SequenceParallel): a module's parameters become distributed tensors and
 * hooks convert its input and output between local tensors and the style's layouts. The
 * distributed dispatch (sharding propagation + redistribution) does the rest: a rowwise
 * Embedding (weight Shard(0)) looks up the rows each rank holds and gives a Partial(sum), a
 * LayerNorm with Replicate parameters on a Shard(1) input normalizes each rank's tokens.
 */
#include <stdio.h>
#include <string.h>

#include "distributed/dist_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/parallel.h"
#include "graph/graph_impl.h"
#include "mesh/mesh_impl.h"
#include "parallel/parallel_impl.h"

typedef struct style_state {
  dt_mesh *mesh;         /* a reference: the hooks may outlive the caller's mesh handle */
  int mesh_ndim, tp_dim; /* the tensor-parallel dim of the mesh */
  dt_placement input_layout, output_layout;
  /* A Linear given an explicit input layout: the input is then redistributed to the layout
   * the style computes with (PyTorch's desired_input_layouts: colwise Replicate, rowwise
   * Shard(-1)), so a Shard(1) sequence-parallel activation is all-gathered, not the weight. */
  bool has_desired;
  dt_placement desired_input;
  bool keep_distributed;
  int64_t in_features; /* the global size of the last input dim; 0: not the Linear's */
  char fqn[];          /* the module's, for error messages */
} style_state;

static void free_state(void *user) {
  style_state *s = user;
  if (s) dt__mesh_release(s->mesh);
  dt__free(s);
}

dt_status dt__parallel_hook_failed(dt_status st, const char *fn, const char *which,
                                   const char *fqn) {
  char prefix[320];
  snprintf(prefix, sizeof prefix, "%s: %s hook of '%s'", fn, which, fqn);
  dt__error_prefix(prefix);
  return st;
}

static dt_status hook_failed(dt_status st, const style_state *s, const char *which) {
  return dt__parallel_hook_failed(st, "dt_parallel_tp_module", which, s->fqn);
}

static dt_status convert_input(dt_module *m, dt_tensor *in, dt_tensor **out, const style_state *s) {
  const char *op = dt_module_type(m);
  dt_placement all[DT_MAX_DIMS];
  if (in->spec && in->spec->mesh_ndim != s->mesh_ndim) {
    return dt__error(DT_ERR_INVALID, "%s: the input is on a %d-D mesh, the module's on a %d-D one",
                     op, in->spec->mesh_ndim, s->mesh_ndim);
  }
  if (in->spec) {
    /* Only the tensor-parallel dim changes: a batch sharded over "dp" stays sharded. */
    memcpy(all, dt_dist_placements(in), sizeof(dt_placement) * (size_t)s->mesh_ndim);
    all[s->tp_dim] = s->has_desired ? s->desired_input : s->input_layout;
    if (all[s->tp_dim].kind == DT_SHARD && all[s->tp_dim].dim < 0)
      all[s->tp_dim].dim += dt_dist_ndim(in);
    return dt_dist_redistribute(in, s->mesh_ndim, all, out);
  }
  dt_placement p = s->input_layout;
  if (p.kind == DT_SHARD) {
    int d = p.dim < 0 ? p.dim + in->ndim : p.dim;
    if (d < 0 || d >= in->ndim) {
      return dt__error(DT_ERR_INVALID, "%s: input layout S(%d) cannot shard an input of %d dims",
                       op, p.dim, in->ndim);
    }
    p.dim = d;
  } else if (p.kind == DT_PARTIAL) {
    return dt__error(DT_ERR_INVALID, "%s: an input layout cannot be Partial", op);
  }
  /* The local input is this rank's piece; the last dim's global size is the Linear's
   * in_features, so uneven shards are wrapped with the right global shape. */
  int64_t global[DT_MAX_DIMS];
  memcpy(global, in->shape, sizeof(int64_t) * (size_t)in->ndim);
  dt_dist_from_local_options opt = {.global_shape = global, .global_ndim = in->ndim};
  bool known = p.kind != DT_SHARD || (p.dim == in->ndim - 1 && s->in_features > 0);
  if (p.kind == DT_SHARD && known) global[p.dim] = s->in_features;
  for (int d = 0; d < s->mesh_ndim; d++) all[d] = dt_replicate();
  all[s->tp_dim] = p;
  if (!s->has_desired)
    return dt_dist_from_local(s->mesh, in, s->mesh_ndim, all, known ? &opt : NULL, out);
  dt_tensor *wrapped = NULL;
  dt_status st = dt_dist_from_local(s->mesh, in, s->mesh_ndim, all, known ? &opt : NULL, &wrapped);
  if (st) return st;
  all[s->tp_dim] = s->desired_input;
  if (all[s->tp_dim].kind == DT_SHARD && all[s->tp_dim].dim < 0) all[s->tp_dim].dim += in->ndim;
  st = dt_dist_redistribute(wrapped, s->mesh_ndim, all, out);
  dt_tensor_release(wrapped);
  return st;
}

static dt_status pre_hook(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  dt_status st = convert_input(m, in, out, user);
  return st ? hook_failed(st, user, "input") : DT_OK;
}

static dt_status convert_output(dt_tensor *in, dt_tensor **out, const style_state *s) {
  dt_placement p = s->output_layout, all[DT_MAX_DIMS];
  if (p.kind == DT_SHARD && p.dim < 0) p.dim += dt_dist_ndim(in);
  memcpy(all, dt_dist_placements(in), sizeof(dt_placement) * (size_t)s->mesh_ndim);
  all[s->tp_dim] = p;
  dt_tensor *moved = NULL;
  dt_status st = dt_dist_redistribute(in, s->mesh_ndim, all, &moved);
  /* The output is made local only when the local tensor says everything: Replicate on every
   * mesh dim but the tensor-parallel one (always so on a 1-D mesh, and on an N-D mesh for a
   * local input). Sharded (a batch split over "dp") or Partial on another dim, it stays
   * distributed: a local piece could not record that split, and the next module or the loss
   * would take it as Replicate there (wrong global shape, gradients not reduced over dp). */
  bool replicated_elsewhere = true;
  for (int d = 0; d < s->mesh_ndim && !st; d++) {
    if (d != s->tp_dim && dt_dist_placements(moved)[d].kind != DT_REPLICATE) {
      replicated_elsewhere = false;
    }
  }
  if (st || s->keep_distributed || !replicated_elsewhere) {
    *out = moved;
    return st;
  }
  st = dt_dist_to_local(moved, out);
  dt_tensor_release(moved);
  return st;
}

static dt_status post_hook(dt_module *m, dt_tensor *in, dt_tensor **out, void *user) {
  (void)m;
  *out = NULL;
  if (!in) return DT_OK; /* unwinding a failed forward: nothing to release */
  dt_status st = convert_output(in, out, user);
  return st ? hook_failed(st, user, "output") : DT_OK;
}

typedef struct pending {
  dt_module *module;
  dt_tensor *weight, *bias;
  style_state *state;
} pending;

static bool is_type(const dt_module *m, const char *type) {
  return strcmp(dt_module_type(m), type) == 0;
}

static dt_status count_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)t;
  if (!is_buffer) ++*(int *)user;
  return DT_OK;
}

/* SequenceParallel applies to modules that act on each token alone with per-feature
 * parameters (LayerNorm, RMSNorm) or none (activations, dropout-like modules). */
static bool sequence_parallel_supported(const dt_module *m) {
  if (is_type(m, "LayerNorm") || is_type(m, "RMSNorm")) return true;
  int n = 0;
  dt_module_visit_tensors(m, count_param, &n);
  return n == 0 && !is_type(m, "BatchNorm1d");
}

/* A layout given through a pointer may hold any integer: refuse a kind outside the enum
 * here, before any parameter is replaced, rather than at forward time. */
static dt_status check_layout(const char *fqn, const char *field, dt_placement p) {
  /* A module's input or output is split along whole dims; a strided shard is a view's
   * placement, not a layout (use Shard on the unflattened tensor). */
  if (p.kind == DT_STRIDED_SHARD) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_tp_module: '%s': options %s is StridedShard SS(%d,%d); a "
                     "layout must be Replicate, Shard or Partial",
                     fqn, field, p.dim, p.split_factor);
  }
  if (p.kind != DT_REPLICATE && p.kind != DT_SHARD && p.kind != DT_PARTIAL) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_module: '%s': options %s has an unknown placement kind %d",
                     fqn, field, (int)p.kind);
  }
  return DT_OK;
}

static dt_status check_entry(dt_module *model, dt_mesh *mesh, const dt_tp_plan *plan, int k) {
  const dt_tp_plan_entry *e = &plan->entries[k];
  dt_status st = dt__tp_plan_entry_check("dt_parallel_tp_module", plan, k);
  if (st) return st;
  dt_module *m = dt_module_find(model, e->fqn);
  if (!m)
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_module: plan names '%s', which is not a module of the model",
                     e->fqn);
  if (e->style == DT_TP_SEQUENCE_PARALLEL) {
    if (!sequence_parallel_supported(m)) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_parallel_tp_module: sequence_parallel style on '%s', a %s (supported "
                       "on LayerNorm, RMSNorm and modules without parameters)",
                       e->fqn, dt_module_type(m));
    }
    const char *names[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++) {
      dt_tensor *t = dt_module_parameter(m, names[i]);
      if (t && dt_tensor_is_distributed(t)) {
        return dt__error(DT_ERR_INVALID,
                         "dt_parallel_tp_module: '%s' has a distributed %s (parallelized twice?)",
                         e->fqn, names[i]);
      }
    }
    return DT_OK;
  }
  if (!is_type(m, "Linear") && !is_type(m, "Embedding")) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_parallel_tp_module: %s style on '%s', a %s (colwise and rowwise apply "
                     "to Linear and Embedding modules only)",
                     dt_parallel_tp_style_name(e->style), e->fqn, dt_module_type(m));
  }
  dt_tensor *w = dt_module_parameter(m, "weight");
  if (!w || dt_tensor_ndim(w) != 2 || dt_tensor_is_distributed(w)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_module: '%s' has no local 2-D weight (parallelized twice?)",
                     e->fqn);
  }
  (void)mesh;
  return DT_OK;
}

dt_status dt_parallel_tp_module(dt_module *model, dt_mesh *mesh, const dt_tp_plan *plan,
                                const dt_tp_style_options *options) {
  if (!model || !mesh || !plan || plan->n < 0 || (plan->n > 0 && !plan->entries)) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_tp_module: NULL model, mesh or plan");
  }
  return dt_parallel_tp_module_on_dim(model, mesh, dt_mesh_ndim(mesh) - 1, plan, options);
}

static dt_status require_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)user;
  if (is_buffer || dt_tensor_requires_grad(t)) return DT_OK;
  return dt_tensor_set_requires_grad(t, true);
}

static dt_status apply_plan(dt_module *model, dt_mesh *mesh, int tp_dim, const dt_tp_plan *plan,
                            const dt_tp_style_options *options) {
  int mesh_ndim = dt_mesh_ndim(mesh);
  /* Check everything, then build every shard, then install: a failure changes nothing. */
  for (int k = 0; k < plan->n; k++) {
    dt_status st = check_entry(model, mesh, plan, k);
    if (st) return st;
  }
  pending *work_list = dt__calloc(sizeof *work_list * (size_t)(plan->n ? plan->n : 1));
  if (!work_list) return dt__error(DT_ERR_NOMEM, "dt_parallel_tp_module: out of memory");
  dt_status st = DT_OK;
  for (int k = 0; k < plan->n && !st; k++) {
    const dt_tp_plan_entry *e = &plan->entries[k];
    const dt_tp_style_options *o = options ? &options[k] : NULL;
    bool colwise = e->style == DT_TP_COLWISE, seq = e->style == DT_TP_SEQUENCE_PARALLEL;
    pending *t = &work_list[k];
    t->module = dt_module_find(model, e->fqn);
    bool embedding = is_type(t->module, "Embedding");
    dt_tensor *w = dt_module_parameter(t->module, "weight"),
              *b = dt_module_parameter(t->module, "bias");
    /* The style's placement on the tensor-parallel dim, Replicate on the others. Linear:
     * colwise S(0)/S(0), rowwise S(1)/R. Embedding [vocab, dim]: rowwise S(0) (vocabulary
     * rows), colwise S(1). Sequence parallel: every parameter Replicate. */
    dt_placement wp[DT_MAX_DIMS], bp[DT_MAX_DIMS];
    for (int d = 0; d < mesh_ndim; d++) wp[d] = bp[d] = dt_replicate();
    if (!seq) {
      wp[tp_dim] = dt_shard(colwise != embedding ? 0 : 1);
      bp[tp_dim] = colwise ? dt_shard(0) : dt_replicate();
    }
    if (w) st = dt_dist_distribute_tensor(mesh, w, mesh_ndim, wp, &t->weight);
    if (!st && b) st = dt_dist_distribute_tensor(mesh, b, mesh_ndim, bp, &t->bias);
    if (st) break;
    size_t fqn_len = strlen(e->fqn);
    t->state = dt__calloc(sizeof *t->state + fqn_len + 1);
    if (!t->state) {
      st = dt__error(DT_ERR_NOMEM, "dt_parallel_tp_module: out of memory");
      break;
    }
    t->state->mesh = dt__mesh_retain(mesh);
    t->state->mesh_ndim = mesh_ndim;
    t->state->tp_dim = tp_dim;
    memcpy(t->state->fqn, e->fqn, fqn_len + 1);
    t->state->in_features = !seq && !embedding ? dt_tensor_shape(w)[1] : 0;
    /* A NULL layout is the style's default (PyTorch's); a given one is copied. Indices of an
     * Embedding come Replicate; the sequence-parallel region is Shard(1) in and out. */
    dt_placement in_default = seq                    ? dt_shard(1)
                              : colwise || embedding ? dt_replicate()
                                                     : dt_shard(-1);
    dt_placement out_default = seq ? dt_shard(1) : colwise ? dt_shard(-1) : dt_replicate();
    t->state->input_layout = o && o->input_layout ? *o->input_layout : in_default;
    t->state->output_layout = o && o->output_layout ? *o->output_layout : out_default;
    t->state->has_desired = !seq && !embedding && o && o->input_layout &&
                            !dt__placements_equal(1, o->input_layout, &in_default);
    t->state->desired_input = in_default;
    st = check_layout(e->fqn, "input_layout", t->state->input_layout);
    if (!st) st = check_layout(e->fqn, "output_layout", t->state->output_layout);
    if (st) break;
    /* SequenceParallel keeps its output distributed (PyTorch's use_local_output=False), so
     * the next module knows it is a sequence shard. */
    t->state->keep_distributed = seq || (o && o->keep_distributed_output);
    if (t->state->output_layout.kind == DT_PARTIAL && !t->state->keep_distributed) {
      st = dt__error(
          DT_ERR_INVALID,
          "dt_parallel_tp_module: '%s': a Partial output layout needs keep_distributed_output",
          e->fqn);
    }
  }
  for (int k = 0; k < plan->n; k++) {
    pending *t = &work_list[k];
    if (!st) {
      if (t->weight) dt_module_set_tensor(t->module, "weight", t->weight);
      if (t->bias) dt_module_set_tensor(t->module, "bias", t->bias);
      /* Checked above: a module with a local weight has no FSDP hooks, so this fits. */
      dt_status hs = dt_module_add_hooks(t->module, pre_hook, post_hook, t->state, free_state);
      if (hs) st = hs;
    } else {
      free_state(t->state);
    }
    dt_tensor_release(t->weight);
    dt_tensor_release(t->bias);
  }
  dt__free(work_list);
  /* As dt_parallel_fsdp and dt_parallel_ddp do: every parameter of the tree is a leaf that
   * requires grad, ready for an optimizer (nn.h: modules make them without). */
  if (!st) st = dt_module_visit_tensors(model, require_grad, NULL);
  return st;
}

dt_status dt_parallel_tp_module_on_dim(dt_module *model, dt_mesh *mesh, int tp_dim,
                                       const dt_tp_plan *plan, const dt_tp_style_options *options) {
  if (!model || !mesh || !plan || plan->n < 0 || (plan->n > 0 && !plan->entries)) {
    return dt__error(DT_ERR_INVALID, "dt_parallel_tp_module_on_dim: NULL model, mesh or plan");
  }
  int mesh_ndim = dt_mesh_ndim(mesh);
  if (tp_dim < 0 || tp_dim >= mesh_ndim) {
    return dt__error(DT_ERR_INVALID,
                     "dt_parallel_tp_module_on_dim: tp_dim %d is not a dim of a %d-D mesh", tp_dim,
                     mesh_ndim);
  }
  /* Patterns become the FQNs they match, so the checks below see one entry per module (a
   * module two entries match is then named twice). */
  dt__tp_plan_owned expanded;
  dt_status st = dt__tp_plan_expand(model, plan, options, &expanded);
  if (!st) st = apply_plan(model, mesh, tp_dim, &expanded.plan, expanded.options);
  dt__tp_plan_owned_clear(&expanded);
  return st;
}
