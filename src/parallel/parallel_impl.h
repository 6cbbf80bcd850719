/* Private interface of the tensor-parallel layer. */
#ifndef DT_PARALLEL_IMPL_H
#define DT_PARALLEL_IMPL_H

#include "dtensor/parallel.h"
#include "graph/graph_impl.h"

/* The bytes this rank's collectives move when the transformed graph g runs, by the cost
 * model (dt__step_bytes, the comm ledger's measure) on each communication node's local
 * input and output types. Symbolic dims count at their hints. */
int64_t dt__tp_predicted_comm_bytes(const dt_graph *g);

/* For an error in a hook that dt_parallel_tp_module or dt_parallel_fsdp (fn) installed on a
 * module: such a hook fails inside some model's forward (or an export's trace of it), far
 * from that call, so the message gets the prefix "fn: <which> hook of '<fqn>'". Returns st. */
dt_status dt__parallel_hook_failed(dt_status st, const char *fn, const char *which,
                                   const char *fqn);

/* Rank r's rows of a dim of n rows over w ranks, as torch.chunk splits them. */
static inline int64_t dt__chunk_rows(int64_t n, int w, int r) {
  int64_t c = (n + w - 1) / w, rows = n - (int64_t)r * c;
  return rows < 0 ? 0 : rows < c ? rows : c;
}

/* A data-parallel module's local input (this rank's rows of the batch) as a distributed tensor
 * Shard(0) on mesh dim `dim`, Replicate on the others, with the true global batch: the row
 * counts are gathered over the dim first (one all_gather_into_tensor of one int64), and
 * counts that are not torch.chunk's split of their sum are refused (DT_ERR_INVALID naming fn,
 * the counts and the split expected). A distributed input is returned as it is (retained).
 * Collective over the dim's group for a local input. */
dt_status dt__parallel_batch_input(const char *fn, dt_mesh *mesh, int dim, dt_tensor *in,
                                   dt_tensor **out);

/* Entry k of a TP plan as every path checks it: an FQN, a known style, no earlier entry with
 * the same FQN. DT_ERR_INVALID naming fn, the entry and the fault. (tp_transform.c) */
dt_status dt__tp_plan_entry_check(const char *fn, const dt_tp_plan *plan, int k);

/* A TP plan whose patterns were expanded (tp_plan.c): its entries' FQNs and options owned. */
typedef struct dt__tp_plan_owned {
  dt_tp_plan plan;
  dt_tp_plan_entry *entries;
  dt_tp_style_options *options; /* [plan.n]: entry k's, zero where the caller gave none */
  char **names;
  int cap;
} dt__tp_plan_owned;

/* Whether fqn matches pattern, where '*' matches any run of characters within one dotted
 * segment ("layers.*.mlp" matches "layers.12.mlp", not "layers.1.2.mlp"). */
bool dt__tp_pattern_match(const char *pattern, const char *fqn);
/* plan with every entry holding a '*' replaced by one entry per module of model it matches
 * (in the tree's order, after the literal entries, which keep theirs), options copied along.
 * Errors: DT_ERR_INVALID (an entry without FQN, a pattern matching no module, naming it),
 * DT_ERR_NOMEM. *out is cleared on failure; else dt__tp_plan_owned_clear frees it. */
dt_status dt__tp_plan_expand(dt_module *model, const dt_tp_plan *plan,
                             const dt_tp_style_options *options, dt__tp_plan_owned *out);
void dt__tp_plan_owned_clear(dt__tp_plan_owned *o);

#endif /* DT_PARALLEL_IMPL_H */
