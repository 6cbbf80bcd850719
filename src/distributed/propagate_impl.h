/* The sharding propagator: one strategy choice for a call, shared by eager dispatch
 * (distributed/dispatch.c) and the TP transformation (parallel/tp_transform.c). */
#ifndef DT_PROPAGATE_IMPL_H
#define DT_PROPAGATE_IMPL_H

#include "distributed/redistribute_impl.h"

/* The price of moving argument `arg`, placed `state` (one placement per mesh dim), to `to`
 * on mesh dim m. g describes the argument's global bytes and the mesh. HUGE_VAL forbids the
 * move. The default (a NULL cost function) is dt__transition_cost. */
typedef double (*dt_propagate_cost_fn)(void *user, int arg, const dt_redistribute_geometry *g,
                                       const dt_placement *state, int m, dt_placement to);

/* Whether a candidate strategy for mesh dim m (placements `in` of the arguments, `out` of
 * the outputs) can be used; a NULL function accepts every candidate. */
typedef bool (*dt_propagate_accept_fn)(void *user, int m, const dt_placement *in, dt_placement out);

/* One call to place: the op with attributes normalized by its infer on global geometry,
 * the arguments' global geometry and current placements, the mesh, and the pricing. */
typedef struct dt_propagation {
  const dt_op_call *call;
  int n_args;
  const dt_tensor *args[DT_DIST_MAX_ARGS]; /* global geometry; NULL for an absent optional */
  dt_placement current[DT_DIST_MAX_ARGS][DT_MESH_MAX_DIMS];
  /* A 0-d local tensor mixed in: a replica that cannot be moved to another placement. */
  bool fixed_replica[DT_DIST_MAX_ARGS];
  int n_out;
  const dt_tensor_meta *out; /* n_out global metas */
  int mesh_ndim;
  int64_t mesh_size[DT_MESH_MAX_DIMS];
  dt_propagate_cost_fn cost;
  dt_propagate_accept_fn accept;
  void *user;
} dt_propagation;

/* The chosen strategy. */
typedef struct dt_propagation_result {
  dt_placement targets[DT_DIST_MAX_ARGS][DT_MESH_MAX_DIMS]; /* each argument's placements */
  dt_placement out[DT_MESH_MAX_DIMS];                       /* every output's placements */
  double cost;         /* sum of the chosen transitions' prices */
  bool fallback;       /* the op has no sharding rule: everything replicated */
  int failed_mesh_dim; /* -1, or the mesh dim where no candidate was acceptable */
} dt_propagation_result;

/* Chooses a strategy: the op's sharding rule proposes candidates per mesh dim (all
 * Replicate when it has none), in-place ops keep self's placement, `accept` filters, and
 * the cheapest choice across mesh dims by the cost function wins (the first on ties; an
 * argument changing on several mesh dims is priced along its cheapest order of steps). Returns
 * DT_OK, or DT_ERR_UNSUPPORTED without a message when some mesh dim has no acceptable candidate
 * (r->failed_mesh_dim says which): the caller words the error. */
dt_status dt__propagate(const dt_propagation *p, dt_propagation_result *r);

/* Calls `visit` with every choice dt__propagate weighs for a call (one candidate of the
 * rule per mesh dim, those whose even-split assumptions hold), in its order; r->cost is not
 * set. For tests that compare the propagator's choice with an exhaustive search. Returns
 * what dt__propagate would when no mesh dim has a candidate. */
typedef void (*dt_propagate_visit_fn)(void *user, const dt_propagation_result *choice);
dt_status dt__propagate_each_choice(const dt_propagation *p, dt_propagate_visit_fn visit,
                                    void *user);

/* The bytes this rank's collectives will move when eager dispatch runs `call` (a call on
 * distributed tensors, as the op wrappers build it): the propagator's choice for it, each
 * input's redistribution priced by the cost model on this rank's exact shards. Moves
 * nothing; for tests and tools that compare it with the comm ledger. */
dt_status dt__dist_predict_bytes(dt_op_call *call, int64_t *bytes);

#endif /* DT_PROPAGATE_IMPL_H */
