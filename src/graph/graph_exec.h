/* Private interface between the interpreter and the communication nodes it runs. */
#ifndef DT_GRAPH_EXEC_H
#define DT_GRAPH_EXEC_H

#include "graph/graph_impl.h"

/* A started collective of a communication node, finished by its wait_tensor node. */
typedef struct dt_pending_comm dt_pending_comm;

/* Starts node i's collective on x (local). consumable: x is not used after this node, so an
 * all_reduce may reduce it in place. symbols: the run's symbol values. */
dt_status dt__comm_node_start(const dt_graph *g, int i, dt_tensor *x, bool consumable,
                              const int64_t *symbols, dt_comm *comm, dt_run_stats *stats,
                              dt_pending_comm **out);
/* Waits and hands the caller the result in the graph's layout. */
dt_status dt__comm_node_wait(dt_pending_comm *p, dt_run_stats *stats, dt_tensor **out);
/* Waits if needed and frees (NULL allowed). */
void dt__pending_comm_free(dt_pending_comm *p);

#endif /* DT_GRAPH_EXEC_H */
