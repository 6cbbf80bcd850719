/* Private interface of the tensor-parallel layer. */
#ifndef DT_PARALLEL_IMPL_H
#define DT_PARALLEL_IMPL_H

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

#endif /* DT_PARALLEL_IMPL_H */
