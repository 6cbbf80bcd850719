/*
 * The one tracer of export and compile (graph/tracer_impl.h): the value map, the nodes of
 * tensors it meets, the dispatch mode that records calls, and the guards it installs while the
 * traced function runs.
 */
#include <stdio.h>
#include <string.h>

#include "dtensor/mode.h"
#include "graph/tracer_impl.h"

void dt__tracer_type_of(dt_value_type *t, const dt_tensor *x) {
  dt__type_from_tensor(t, x);
  if (x->spec) {
    t->ndim = x->spec->ndim;
    memcpy(t->shape, x->spec->shape, sizeof(int64_t) * (size_t)t->ndim);
  }
}

dt_value_entry *dt__tracer_lookup(dt_tracer *tr, const dt_tensor *x) {
  return dt__value_map_find(&tr->map, x);
}

dt_status dt__tracer_map(dt_tracer *tr, dt_tensor *x, int node, int item) {
  return dt__value_map_set(&tr->map, x, node, item, tr->hooks->who);
}

void dt__tracer_constant_name(dt_tracer *tr, char *buf, size_t size) {
  snprintf(buf, size, "_tensor_constant%d", tr->n_constants++);
}

static dt_status out_of_memory(const dt_tracer *tr) {
  return dt__error(DT_ERR_NOMEM, "%s: out of memory", tr->hooks->who);
}

dt_status dt__tracer_value(dt_tracer *tr, dt_tensor *x, int *node) {
  dt_value_entry *e = dt__tracer_lookup(tr, x);
  if (!e) {
    dt_status st = tr->hooks->unseen(tr, x);
    if (st) return st;
    e = dt__tracer_lookup(tr, x);
    if (!e)
      return dt__error(DT_ERR_INTERNAL, "%s: a tensor the trace met was not mapped",
                       tr->hooks->who);
  }
  if (e->item < 0) {
    *node = e->node;
    return DT_OK;
  }
  int src = e->node, item = e->item;
  int i = dt__graph_add_node(tr->g, DT_NODE_GETITEM, "getitem");
  if (i < 0) return out_of_memory(tr);
  dt_status st = dt__graph_node_types(tr->g, i, 1);
  if (st) return st;
  dt_node *n = &tr->g->nodes[i];
  n->inputs[0] = src;
  n->n_inputs = 1;
  n->ints[0] = item;
  n->n_ints = 1;
  n->types[0] = tr->g->nodes[src].types[item];
  if (tr->hooks->getitem) st = tr->hooks->getitem(tr, i, src, item, x);
  if (st) return st;
  e = dt__tracer_lookup(tr, x); /* the value from now on is the getitem's */
  e->node = i;
  e->item = -1;
  *node = i;
  return DT_OK;
}

static dt_status value_fn(void *tr, dt_tensor *x, int *node) {
  return dt__tracer_value(tr, x, node);
}

dt_status dt__tracer_record_call(dt_tracer *tr, const dt_op_call *given, const dt_op_call *done,
                                 int *n_out, int *node) {
  return dt__graph_record_call(tr->g, given, done, value_fn, tr, tr->hooks->who, n_out, node);
}

/* The dispatch mode: each call runs (the library's own work: quiet), then is recorded as the
 * caller gave it. Ops the call makes itself see only the modes below this one. */
static dt_status trace_mode(dt_invocation *inv, void *user) {
  dt_tracer *tr = user;
  dt_op_call *call = dt__invocation_call(inv);
  dt_op_call given = *call; /* attributes as the caller gave them, before infer normalizes */
  if (tr->hooks->before) tr->hooks->before(tr, call);
  tr->quiet++;
  dt_status st = dt_invocation_run(inv);
  tr->quiet--;
  if (!st && !tr->error) tr->error = tr->hooks->record(tr, &given, call);
  if (tr->hooks->after) tr->hooks->after(tr, call);
  return st;
}

/* The dist layer's conversion guard while the function runs. A conversion's result is a tensor
 * the trace has not seen, so it would become a constant holding this trace's values: when its
 * input is a value the trace holds the graph would ignore its inputs silently. That conversion
 * is refused. A tensor the trace has never seen (dt_ones, ...) converts freely: its result
 * really is a constant. */
static dt_status guard_conversion(void *user, const char *call, const dt_tensor *input) {
  dt_tracer *tr = user;
  const dt_value_entry *e = dt__tracer_lookup(tr, input);
  if (!e) return DT_OK;
  tr->refused = call;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "%s: %s of the traced value %%%s inside %s is not supported: not an op-table "
                   "call, so a graph cannot record it; %s",
                   tr->hooks->who, call, tr->g->nodes[e->node].name, tr->hooks->what,
                   tr->hooks->advice);
}

static void size_read(void *user, const dt_tensor *x, int dim, const char *fn) {
  dt_tracer *tr = user;
  if (!tr->quiet && !tr->error) tr->hooks->size_read(tr, x, dim, fn);
}

dt_status dt__tracer_start(dt_tracer *tr) {
  if (dt_mode_depth() >= DT_MAX_MODES)
    return dt__error(DT_ERR_INVALID, "%s: no room for the tracing mode", tr->hooks->who);
  dt_status st = dt_mode_push(trace_mode, tr);
  if (st) return st;
  tr->outer_guard = dt__dist_guard; /* a trace inside a traced function */
  dt__dist_guard = (dt__dist_convert_guard){guard_conversion, tr};
  tr->outer_reader = dt__size_reader;
  if (tr->hooks->size_read) dt__size_reader = (dt__size_read_hook){size_read, tr};
  return DT_OK;
}

dt_status dt__tracer_stop(dt_tracer *tr, dt_status st) {
  dt__size_reader = tr->outer_reader;
  dt__dist_guard = tr->outer_guard;
  dt_mode_pop();
  if (st) return st;
  if (tr->refused) {
    /* The function went on after a refused conversion: the refusal still stands. */
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: %s succeeded without the %s of a traced value that the tracer refused; "
                     "the graph would not be %s",
                     tr->hooks->who, tr->hooks->what, tr->refused, tr->hooks->what);
  }
  return tr->error;
}

void dt__tracer_clear(dt_tracer *tr) { dt__value_map_clear(&tr->map); }
