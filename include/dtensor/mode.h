/*
 * libdtensor — dispatch modes: callbacks that wrap every op call on the calling thread.
 *
 * A mode sees each op as it is dispatched (its ATen name, inputs, and after running it,
 * outputs) and decides when and how often to run it: a timing mode runs it several times,
 * a tracer records it, a comm ledger attributes collectives to it. Modes stack: the most
 * recently pushed one sees the op first; calling dt_invocation_run hands it to the next
 * mode, and the last one runs the op itself. Ops a mode calls from inside its callback are
 * seen only by the modes below it, so a mode never recurses into itself.
 *
 * Modes are per thread: with the threads backend each rank pushes its own.
 */
#ifndef DTENSOR_MODE_H
#define DTENSOR_MODE_H

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most modes one thread may stack. */
#define DT_MAX_MODES 8

/* One op call as a mode sees it. Valid only during the callback. */
typedef struct dt_invocation dt_invocation;

/* The mode's callback: it must call dt_invocation_run at least once for the op to produce
 * its outputs (a mode that does not run the op must return an error), and returns the
 * status the caller of the op should see. */
typedef dt_status (*dt_mode_fn)(dt_invocation *inv, void *user);

/* Pushes a mode on the calling thread's stack. Errors: DT_ERR_INVALID (NULL fn, more than
 * DT_MAX_MODES modes). */
DT_API dt_status dt_mode_push(dt_mode_fn fn, void *user);
/* Pops the most recently pushed mode. Errors: DT_ERR_INVALID (no mode, or called from
 * inside a mode callback). */
DT_API dt_status dt_mode_pop(void);
/* Number of modes on the calling thread's stack. */
DT_API int dt_mode_depth(void);

/* Runs the op (through the remaining modes). May be called again: each run first releases
 * the outputs of the previous one, so the caller gets the last run's outputs. In-place ops
 * are applied again on each run. */
DT_API dt_status dt_invocation_run(dt_invocation *inv);

/* The op's ATen-style name ("add.Tensor") and its index in the op table. */
DT_API const char *dt_invocation_op_name(const dt_invocation *inv);
DT_API int dt_invocation_op(const dt_invocation *inv);
/* Tensor arguments (inputs, then list entries; optional ones may be NULL). Borrowed. */
DT_API int dt_invocation_n_inputs(const dt_invocation *inv);
DT_API dt_tensor *dt_invocation_input(const dt_invocation *inv, int i);
/* Outputs of the last run (NULL before a successful run). Borrowed. */
DT_API int dt_invocation_n_outputs(const dt_invocation *inv);
DT_API dt_tensor *dt_invocation_output(const dt_invocation *inv, int i);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_MODE_H */
