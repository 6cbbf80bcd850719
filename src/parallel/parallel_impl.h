/* Private interface of the tensor-parallel layer. */
#ifndef DT_PARALLEL_IMPL_H
#define DT_PARALLEL_IMPL_H

#include "graph/graph_impl.h"

/* The bytes this rank's collectives move when the transformed graph g runs, by the cost
 * model (dt__step_bytes, the comm ledger's measure) on each communication node's local
 * input and output types. Symbolic dims count at their hints. */
int64_t dt__tp_predicted_comm_bytes(const dt_graph *g);

#endif /* DT_PARALLEL_IMPL_H */
