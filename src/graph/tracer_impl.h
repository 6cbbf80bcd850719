/*
 * The one tracer (src/graph/tracer.c), which export (graph/export.c) and compile
 * (compile/trace.c) both drive: a function runs eagerly under a dispatch mode that records each
 * op call, with its attributes as the caller gave them, as a call node of a dt_graph. Tensors are
 * recognized by identity through a value map that retains every tensor seen (so no address is
 * reused during the trace); a tensor the trace has not seen gets a node from its owner (a
 * constant, a state tensor), a tuple element a getitem node on first use. While it runs, the
 * tracer refuses a conversion between local and distributed tensors of a traced value (not an
 * op-table call: its result would be a constant of the trace) and, when its owner asks, hears of
 * sizes the function reads as numbers (tensor/tensor_impl.h: dt__size_read).
 *
 * An owner embeds dt_tracer as the first member of its own state and fills the hooks: what a
 * tracer does beyond the graph (export: state tensors; compile: symbolic dims, guards,
 * redistributions) lives with its owner.
 */
#ifndef DT_GRAPH_TRACER_IMPL_H
#define DT_GRAPH_TRACER_IMPL_H

#include "graph/graph_impl.h"

typedef struct dt_tracer dt_tracer;

typedef struct dt_tracer_hooks {
  const char *who;    /* the public function tracing, first word of messages: "dt_export" */
  const char *what;   /* what runs traced, for messages: "the forward" */
  const char *advice; /* the end of a refused conversion's message */
  /* x is a tensor the trace has not seen: map it (dt__tracer_map) to the node standing for it,
   * as a whole value (item -1) or an element of a tuple. Required. */
  dt_status (*unseen)(dt_tracer *tr, dt_tensor *x);
  /* Getitem node i was made for x, item `item` of tuple node src, its type copied from src's:
   * the owner's facts about the new value. NULL: nothing more. */
  dt_status (*getitem)(dt_tracer *tr, int i, int src, int item, dt_tensor *x);
  /* Before a call runs (NULL: nothing); the call as the caller gave it is kept for record. */
  void (*before)(dt_tracer *tr, dt_op_call *call);
  /* Records a call that ran without error: given as the caller gave it, done as dispatch left it
   * (normalized attributes, outputs). A failure stops recording and is the trace's. Required. */
  dt_status (*record)(dt_tracer *tr, const dt_op_call *given, const dt_op_call *done);
  /* After every call, recorded or not (NULL: nothing). */
  void (*after)(dt_tracer *tr, dt_op_call *call);
  /* fn read size dim (-1: every size) of x as a number, outside the library's own work (quiet).
   * NULL: size reads are not watched. */
  void (*size_read)(dt_tracer *tr, const dt_tensor *x, int dim, const char *fn);
} dt_tracer_hooks;

struct dt_tracer {
  const dt_tracer_hooks *hooks;
  dt_graph *g;
  dt_value_map map;    /* every tensor seen, retained */
  int n_constants;     /* _tensor_constant<N> names given */
  int quiet;           /* > 0 while the library runs (a call's dispatch, a traced backward) */
  dt_status error;     /* the first failure to record (the function itself goes on) */
  const char *refused; /* the conversion refused, if any */
  dt__dist_convert_guard outer_guard;
  dt__size_read_hook outer_reader;
};

/* x's type with its global dims (a distributed tensor's, not its shard's). */
void dt__tracer_type_of(dt_value_type *t, const dt_tensor *x);

/* The map entry of x, or NULL. */
dt_value_entry *dt__tracer_lookup(dt_tracer *tr, const dt_tensor *x);

/* Maps x (retained by the map) to node's value (item -1) or element item of its tuple. */
dt_status dt__tracer_map(dt_tracer *tr, dt_tensor *x, int node, int item);

/* The name of the next constant node: "_tensor_constant<N>". */
void dt__tracer_constant_name(dt_tracer *tr, char *buf, size_t size);

/* The node standing for x: its traced value, a getitem made on first use of a tuple element, or
 * what hooks->unseen maps it to. */
dt_status dt__tracer_value(dt_tracer *tr, dt_tensor *x, int *node);

/* Appends the call node of a call that ran (dt__graph_record_call, its tensors looked up by
 * dt__tracer_value): *node its index, *n_out its output count. Types and the outputs' map
 * entries are the caller's. */
dt_status dt__tracer_record_call(dt_tracer *tr, const dt_op_call *given, const dt_op_call *done,
                                 int *n_out, int *node);

/* Starts tracing on this thread: the dispatch mode, the conversion guard and, when
 * hooks->size_read is set, the size-read hook. Fails (nothing installed) when no mode fits. */
dt_status dt__tracer_start(dt_tracer *tr);

/* Stops tracing (restores what start replaced). st is the traced function's status: returned
 * as it is when it failed; else a refused conversion the function went on without, else the
 * first failure to record, else DT_OK. */
dt_status dt__tracer_stop(dt_tracer *tr, dt_status st);

/* Releases the map's references (the graph stays the owner's). */
void dt__tracer_clear(dt_tracer *tr);

#endif /* DT_GRAPH_TRACER_IMPL_H */
