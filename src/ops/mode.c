/* Dispatch modes: a per-thread stack of callbacks around every op call. */
#include "dtensor/mode.h"
#include "ops/op_impl.h"

typedef struct mode_entry {
  dt_mode_fn fn;
  void *user;
} mode_entry;

struct dt_invocation {
  dt_op_call *call;
  int level; /* index of the mode handling this invocation */
  bool ran;
};

static _Thread_local mode_entry modes[DT_MAX_MODES];
static _Thread_local int mode_count;
/* How many modes (from the bottom of the stack) new op calls on this thread go through:
 * all of them normally; inside mode L's callback only those below L. */
_Thread_local int dt__modes_visible;

dt_status dt_mode_push(dt_mode_fn fn, void *user) {
  if (!fn) return dt__error(DT_ERR_INVALID, "dt_mode_push: fn is NULL");
  if (dt__modes_visible != mode_count)
    return dt__error(DT_ERR_INVALID, "dt_mode_push: called from inside a mode");
  if (mode_count >= DT_MAX_MODES)
    return dt__error(DT_ERR_INVALID, "dt_mode_push: more than %d modes", DT_MAX_MODES);
  modes[mode_count++] = (mode_entry){fn, user};
  dt__modes_visible = mode_count;
  return DT_OK;
}

dt_status dt_mode_pop(void) {
  if (dt__modes_visible != mode_count)
    return dt__error(DT_ERR_INVALID, "dt_mode_pop: called from inside a mode");
  if (mode_count == 0) return dt__error(DT_ERR_INVALID, "dt_mode_pop: no mode is active");
  dt__modes_visible = --mode_count;
  return DT_OK;
}

int dt_mode_depth(void) { return mode_count; }

static void release_outputs(dt_op_call *call) {
  if (dt__op_table[call->op].kind == DT_OP_KIND_INPLACE) return;
  for (int i = 0; i < call->n_outputs; i++) {
    dt_tensor_release(call->outputs[i]);
    call->outputs[i] = NULL;
  }
}

/* Hands the call to mode `level`, or runs the op when no mode is left. */
static dt_status run_level(dt_op_call *call, int level) {
  if (level < 0) return dt__dispatch_inner(call);
  dt_invocation inv = {call, level, false};
  int saved = dt__modes_visible;
  dt__modes_visible = level; /* ops the callback calls see only the modes below it */
  dt_status st = modes[level].fn(&inv, modes[level].user);
  dt__modes_visible = saved;
  if (!st && !inv.ran) {
    st = dt__error(DT_ERR_INVALID, "%s: a dispatch mode returned without running the op",
                   dt__op_name(call));
  }
  if (st) release_outputs(call);
  return st;
}

dt_status dt__dispatch_with_modes(dt_op_call *call) {
  return run_level(call, dt__modes_visible - 1);
}

dt_status dt_invocation_run(dt_invocation *inv) {
  if (!inv) return dt__error(DT_ERR_INVALID, "dt_invocation_run: invocation is NULL");
  if (inv->ran) release_outputs(inv->call);
  inv->ran = true;
  return run_level(inv->call, inv->level - 1);
}

dt_op_call *dt__invocation_call(dt_invocation *inv) { return inv ? inv->call : NULL; }

const char *dt_invocation_op_name(const dt_invocation *inv) {
  return inv ? dt__op_name(inv->call) : NULL;
}
int dt_invocation_op(const dt_invocation *inv) { return inv ? (int)inv->call->op : -1; }

int dt_invocation_n_inputs(const dt_invocation *inv) {
  return inv ? inv->call->n_inputs + inv->call->n_input_list : 0;
}

dt_tensor *dt_invocation_input(const dt_invocation *inv, int i) {
  if (!inv || i < 0) return NULL;
  if (i < inv->call->n_inputs) return inv->call->inputs[i];
  i -= inv->call->n_inputs;
  return i < inv->call->n_input_list ? inv->call->input_list[i] : NULL;
}

int dt_invocation_n_outputs(const dt_invocation *inv) {
  if (!inv || dt__op_table[inv->call->op].kind == DT_OP_KIND_INPLACE) return 0;
  return inv->call->n_outputs;
}

dt_tensor *dt_invocation_output(const dt_invocation *inv, int i) {
  if (!inv || i < 0 || i >= dt_invocation_n_outputs(inv) || !inv->call->outputs) return NULL;
  return inv->call->outputs[i];
}
