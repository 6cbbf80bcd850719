/*
 * libdtensor — compile: trace a C function over tensors once, run it at every size.
 *
 * dt_compile wraps a function `fn(user, n_in, in, n_out, out)` over local or distributed
 * tensors. The first call runs fn eagerly under a tracing dispatch mode that records every
 * op into a graph (the graph IR of graph.h); the sizes of the dims marked dynamic become
 * symbols s0, s1, ... and every size in the graph is a small integer expression of them
 * (sums, products, floor and ceil division, min and max, as views, chunk and sharding make).
 * Whatever the trace assumed (dtypes, placements, mesh, a dim equal to 1 for broadcasting,
 * a divisibility a view needed, a size compared with a constant) is recorded as a guard.
 * Later calls check the guards of the cached variants (a fraction of a microsecond) and run
 * the first variant whose guards hold from its precomputed node list; when none holds, fn is
 * traced again into a new variant, up to cache_limit variants, after which calls run fn
 * eagerly and one warning goes to stderr and through the log callback (dt_set_log_callback).
 *
 * Setting the environment variable DT_COMPILE_LOG=recompiles prints each recompile and its
 * reason on stderr, as TORCH_LOGS=recompiles does. The value must be exactly "recompiles":
 * another one is reported once through the log callback (DT_LOG_WARN) and ignored.
 *
 * Training steps: with options.backward the trace also runs dt_backward of out[0] (a loss of
 * one element, seeded with ones) under the tracer, so the variant holds the forward and the
 * backward formulas' ops (the joint graph); each compiled call then computes the outputs and
 * adds the gradients into the .grad of every leaf that requires grad and that the function
 * reads (inputs, and tensors it reaches otherwise, such as module parameters), exactly as
 * eager `fn(...); dt_backward(out[0], NULL)` would (a new .grad, or old + new). The outputs
 * come back detached (their backward has run). Without options.backward, a call under grad
 * mode whose inputs, or tensors the function reads, require grad is recorded for autograd as
 * PyTorch records a compiled forward: the compiled forward runs, and its floating outputs
 * require grad through one node whose backward recomputes fn eagerly and back-propagates
 * through it (the inputs' gradients flow on; the .grad of the tensors fn reads accumulates).
 *
 * Tensors fn reads without getting them as inputs (module parameters) become constants of
 * the variant held by handle, not copied: an in-place update (an optimizer step) is read by
 * the next call; a tensor replaced by a new handle is not (compile again, or pass it as an
 * input).
 *
 * Missing (see docs/compile.md, "Missing"): conversions between local and distributed tensors
 * inside fn (DT_ERR_UNSUPPORTED). Redistributions dispatch makes are nodes of the graph
 * (docs/compile.md, "Execution").
 *
 * Threads: a dt_compiled is used by one thread at a time (with the threads backend each
 * rank compiles its own).
 */
#ifndef DTENSOR_COMPILE_H
#define DTENSOR_COMPILE_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_compiled dt_compiled;

/* The function compiled: reads in[0..n_in) (borrowed) and stores n_out new references in
 * out[0..n_out). It must compute its outputs with ops only (through the op table), the same
 * way on every call. It may read sizes: a size of a traced value read through dt_tensor_size,
 * dt_tensor_shape, dt_tensor_numel, dt_tensor_strides, dt_tensor_offset or dt_dist_global_shape
 * is guarded to its traced value (another size traces again), so a number computed from it
 * stays right; give -1 to view/reshape/expand to keep a dim symbolic. A decision on element
 * values (read through dt_tensor_data) is not guarded. */
typedef dt_status (*dt_compile_fn)(void *user, int n_in, dt_tensor *const *in, int n_out,
                                   dt_tensor **out);

/* One mark: dim `dim` of input `input` is dynamic (a symbol) or static (its traced size). */
typedef struct dt_compile_mark {
  int input;
  int dim;
  bool dynamic;
} dt_compile_mark;

/* Options of dt_compile; NULL means defaults (every dim static, cache_limit 8). */
typedef struct dt_compile_options {
  bool dynamic;                 /* every dim of every input is dynamic */
  int n_marks;                  /* marks applied after `dynamic`, in order */
  const dt_compile_mark *marks; /* borrowed during dt_compile (copied) */
  int cache_limit;              /* most variants kept; 0 means 8 */
  /* Joint forward+backward (see above): each call also runs the backward of out[0] and
   * accumulates .grad. Needs n_out >= 1 and grad mode on at each call. */
  bool backward;
  /* Turns off the shape-inference cache of tracing (the analog of PyTorch's fake-tensor
   * cache): with it (the default) a call equal to one already traced in everything shape
   * inference reads reuses its symbolic dims and guards. Results are identical either way;
   * stats.shape_cache_hits counts the reuses. */
  bool no_shape_cache;
} dt_compile_options;

/* Compiles lazily: checks the arguments and returns a handle; the first dt_compiled_call
 * traces. user is borrowed for the handle's lifetime. Errors: DT_ERR_INVALID (NULL fn or out,
 * n_in or n_out outside [0, 64], a mark naming a negative input or dim, cache_limit < 0,
 * backward with n_out 0), DT_ERR_NOMEM. */
DT_API dt_status dt_compile(dt_compile_fn fn, void *user, int n_in, int n_out,
                            const dt_compile_options *options, dt_compiled **out);

/* Calls the compiled function: out[0..n_out) receive new references. Errors: DT_ERR_INVALID
 * (NULL or wrong counts; a mark naming a dim an input does not have; options.backward with grad
 * mode off, or out[0] not a one-element tensor that requires grad), DT_ERR_UNSUPPORTED (fn
 * turns grad mode on inside and computes on a tensor that requires grad; a conversion of a
 * traced value inside fn; with options.backward, a traced backward that reads a tensor no
 * traced op made: no known op does, now that redistributed arguments are traced), and
 * whatever fn returns eagerly for these inputs (a wrong dtype gives the op's own error, and
 * a failed trace is not cached). On failure every out[k] is NULL. */
DT_API dt_status dt_compiled_call(dt_compiled *compiled, int n_in, dt_tensor *const *in, int n_out,
                                  dt_tensor **out);

/* Frees the handle, its variants and the constants they hold. NULL is allowed. */
DT_API void dt_compiled_destroy(dt_compiled *compiled);

/* Counters of a compiled function. */
typedef struct dt_compile_stats {
  int64_t calls;            /* dt_compiled_call calls that got past the argument checks */
  int64_t compiles;         /* successful traces (the first one included) */
  int64_t recompiles;       /* successful traces after the first */
  int64_t failed_traces;    /* traces whose eager run failed (nothing cached) */
  int64_t eager_calls;      /* calls run eagerly because the cache was full */
  int variants;             /* variants cached */
  double last_compile_us;   /* time of the last successful trace and analysis */
  int64_t shape_cache_hits; /* traced calls whose symbolic shapes came from the cache */
} dt_compile_stats;

/* Copies the handle's counters into *out (caller-owned). Errors: DT_ERR_INVALID (NULL compiled
 * or out). */
DT_API dt_status dt_compiled_stats(const dt_compiled *compiled, dt_compile_stats *out);

/* Why recompile i happened ("guard s0 == 1 (mul: broadcast of dim 0) failed: s0 = 3"), for
 * i in [0, recompiles); NULL when out of range. Borrowed until the handle is destroyed. */
DT_API const char *dt_compiled_recompile_reason(const dt_compiled *compiled, int i);

/* Why calls run eagerly: NULL until the cache limit first sent a call to eager (then one
 * warning was printed on stderr and sent through the log callback, DT_LOG_WARN, and
 * stats.eager_calls counts such calls), afterwards the reason of that first call. Borrowed
 * until the handle is destroyed. */
DT_API const char *dt_compiled_eager_reason(const dt_compiled *compiled);

/* The text of variant i: the graph in graph.h's text format (symbolic dims as s<k>), then
 * each value's symbolic shape and placements, then the guards. A new string (free with
 * dt_free). Errors: DT_ERR_INVALID (NULL, i out of range), DT_ERR_NOMEM. */
DT_API dt_status dt_compiled_to_string(const dt_compiled *compiled, int i, char **out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_COMPILE_H */
