/*
 * libdtensor — models as graphs: the graph IR, its text format, the interpreter, and
 * programs (a graph plus the tensors its parameters name).
 *
 * A graph is a list of nodes in execution order, each producing one value (a multi-output
 * op produces a tuple, taken apart by getitem nodes), as in torch.fx:
 *
 *   graph(s0=7) {
 *     %fc.weight = parameter() : f32[5, 3]
 *     %fc.bias = parameter() : f32[5]
 *     %x = placeholder() : f32[s0, 3]
 *     %linear = linear(%x, %fc.weight, %fc.bias) : f32[s0, 5]
 *     %relu = relu(%linear) : f32[s0, 5]
 *     return (%relu)
 *   }
 *
 * Node kinds: placeholder (a graph input), parameter and buffer (a tensor of the program's
 * state dict, named by its fully-qualified name), call (an op of the op table with its
 * attributes: ints=[..], int_list=[..], scalars=[..], dtype=.., flags=..), getitem (element
 * of a tuple), the communication nodes that the tensor-parallel transformation inserts
 * (all_gather_into_tensor, all_reduce, reduce_scatter_tensor, all_to_all, each followed by
 * wait_tensor), and return. A dim may be symbolic (s0, s1, ...): the header gives each
 * symbol the size it was traced with. After a transformation every value also carries its
 * placement (R, S(d), P(sum)) and its shape is the rank's local shape. See docs/graph.md.
 *
 * The text format round-trips exactly: dt_graph_parse(dt_graph_format(g)) prints the same.
 *
 * Ownership: graphs and programs are opaque; destroy them with dt_graph_destroy /
 * dt_program_destroy (NULL allowed). Tensors passed in are borrowed (a program retains what
 * it keeps); tensors handed out through `dt_tensor **` are new references.
 */
#ifndef DTENSOR_GRAPH_H
#define DTENSOR_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/comm.h"
#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_graph dt_graph;
typedef struct dt_program dt_program;

/* ---- Graphs ------------------------------------------------------------------------------- */

/* Parses the text format. Every reference, op name, attribute, arity and declared type is
 * checked (a call's declared type must be what the op infers from its inputs), so a parsed
 * graph is always runnable. Arity and omitted scalars follow the op's ATen schema
 * (`add.Tensor(%x, %y)` has alpha = 1). Time is linear in the text; a graph holds at most
 * 4,194,304 nodes (docs/graph.md). Errors: DT_ERR_INVALID with "graph_parse: line L,
 * column C: ..." (nothing is returned then), DT_ERR_NOMEM. */
DT_API dt_status dt_graph_parse(const char *text, dt_graph **out);

/* Writes the text form into buf (always NUL-terminated when size > 0) and the length the
 * whole text needs (excluding the NUL) into *needed (may be NULL). The text is truncated
 * when size is too small: call with size 0 first to size the buffer.
 * Errors: DT_ERR_INVALID (NULL graph, NULL buf with size > 0). */
DT_API dt_status dt_graph_format(const dt_graph *graph, char *buf, size_t size, size_t *needed);

/* The text form in a new string (free with dt_free), or NULL when out of memory. */
DT_API char *dt_graph_to_string(const dt_graph *graph);

/* A deep copy. Errors: DT_ERR_INVALID, DT_ERR_NOMEM. */
DT_API dt_status dt_graph_clone(const dt_graph *graph, dt_graph **out);

/* Frees a graph and everything in its arena. NULL is allowed. */
DT_API void dt_graph_destroy(dt_graph *graph);

/* Number of nodes (including the return node). */
DT_API int dt_graph_node_count(const dt_graph *graph);
/* Number of call or communication nodes whose target is `target` ("linear",
 * "all_reduce", "wait_tensor", ...; for ops both the ATen name "add.Tensor" and its base
 * "add" match). */
DT_API int dt_graph_count_target(const dt_graph *graph, const char *target);
/* Number of placeholders (graph inputs) and of returned values. */
DT_API int dt_graph_input_count(const dt_graph *graph);
DT_API int dt_graph_output_count(const dt_graph *graph);
/* For a transformed graph the world size and rank it was made for; 0 and 0 otherwise. */
DT_API int dt_graph_world_size(const dt_graph *graph);
DT_API int dt_graph_rank(const dt_graph *graph);

/* ---- Programs: a graph plus its state dict --------------------------------------------------- */

/* Makes a program from a graph (copied) and a state dict of n entries (names[i] ->
 * tensors[i], retained). Every parameter and buffer node of the graph must have an entry
 * of its declared dtype and shape. Errors: DT_ERR_INVALID (missing or mismatching entry:
 * the message names it), DT_ERR_NOMEM. */
DT_API dt_status dt_program_create(const dt_graph *graph, int n, const char *const *names,
                                   dt_tensor *const *tensors, dt_program **out);
DT_API void dt_program_destroy(dt_program *program);

/* The program's graph (borrowed, valid while the program lives). */
DT_API const dt_graph *dt_program_graph(const dt_program *program);

/* The state-dict entry called name (borrowed), or NULL. */
DT_API dt_tensor *dt_program_state(const dt_program *program, const char *name);
/* Number of state-dict entries and the name / tensor of entry i (borrowed; NULL when out of
 * range). Entries are in graph order. */
DT_API int dt_program_state_count(const dt_program *program);
DT_API const char *dt_program_state_name(const dt_program *program, int i);
DT_API dt_tensor *dt_program_state_tensor(const dt_program *program, int i);

/* The type of the module at fqn ("Linear", "Sequential", ...) when the program was
 * exported from a module tree; NULL otherwise. fqn "" is the root. */
DT_API const char *dt_program_module_type(const dt_program *program, const char *fqn);

/* What one run moved through communication nodes (on this rank). */
typedef struct dt_run_stats {
  int64_t
      comm_calls[4]; /* by kind: all_gather_into_tensor, all_reduce, reduce_scatter, all_to_all */
  /* bytes of each kind, as dt_comm_ledger counts them: the larger buffer of each collective
   * on this rank (an all_gather's gathered result; the input of the others) */
  int64_t comm_bytes[4];
  double comm_seconds; /* wall time spent starting and waiting for collectives */
} dt_run_stats;

/* The names of the kinds indexed in dt_run_stats ("all_gather_into_tensor", ...). */
DT_API const char *dt_comm_node_name(int kind);

/* Options of dt_program_run; NULL means defaults. */
typedef struct dt_run_options {
  /* The group communication nodes run on (its size must be the graph's world size).
   * Needed only when the graph has communication nodes. */
  dt_comm *comm;
  /* When not NULL, receives what this run communicated (added to what it holds). */
  dt_run_stats *stats;
} dt_run_options;

/* Runs the program on n_inputs tensors (one per placeholder, in order; local or
 * distributed; symbolic dims bind to the inputs' sizes, concrete dims must match) and
 * hands the caller its n_outputs results. Each node runs through the op table (so the
 * dispatch modes see it); communication nodes run the collectives of comm.h.
 * Errors: DT_ERR_INVALID (counts, shapes or dtypes of the inputs, a missing group),
 * and whatever an op or a collective returns (the message names the node). On failure
 * every outputs[i] is NULL. */
DT_API dt_status dt_program_run(const dt_program *program, int n_inputs, dt_tensor *const *inputs,
                                int n_outputs, dt_tensor **outputs, const dt_run_options *options);

/* ---- Export by tracing ------------------------------------------------------------------------
 */

struct dt_module;

/* Options of dt_export. Zero-initialise. */
typedef struct dt_export_options {
  /* Dim 0 of the input is symbolic (the batch size), written s0. */
  bool dynamic_batch;
} dt_export_options;

/* Runs model's forward on the input under a tracing dispatch mode and hands the caller a
 * program: the graph of every op the forward called, its parameters and buffers (recognized
 * by tensor identity, named by FQN such as "mlps.0.0.weight") and a state dict sharing the
 * model's tensors. Tensors the forward made outside the op table (dt_ones, dt_from_data...)
 * become constants "_tensor_constant<N>" of the state dict. options may be NULL.
 * A conversion between local and distributed tensors (from_local, to_local, redistribute,
 * full_tensor, distribute_tensor...) of a traced value cannot be recorded: the call fails
 * inside the forward and export with it (so a model after dt_parallel_tp_module does not
 * export; export the local model and use dt_parallel_tp_transform).
 * Errors: DT_ERR_INVALID (NULL, a model without forward), DT_ERR_UNSUPPORTED (such a
 * conversion, named in the message), the forward's own errors, DT_ERR_NOMEM.
 */
DT_API dt_status dt_export(struct dt_module *model, dt_tensor *input,
                           const dt_export_options *options, dt_program **out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_GRAPH_H */
