/*
 * Any op of the list called by the names its schema gives its arguments ("dim=1 keepdim=true"):
 * the one adapter behind `dtensor plan` (tools/plan_case.c) and the op sweeps
 * (tests/sweep_cases.h), so that an op added to ops/op_list.h reaches both without a
 * hand-written call. The schema column says which parameters an op takes and how they map to
 * dt_op_call (ops/op_list.h's header):
 *   Tensor, Tensor?           the positional inputs, in schema order (absent optional: NULL)
 *   Tensor[]                  the tensor list (cat, stack)
 *   Scalar, float             scalars[0], scalars[1] in schema order
 *   int, SymInt (?)           ints[] in schema order; None ends them (argmax without a dim)
 *   bool keepdim              flags & DT_OP_FLAG_KEEPDIM; another bool: an int slot (is_causal)
 *   int[], SymInt[] (?)       int_list (borrowed from the call's storage); an op without int
 *                             slots also gets it in ints (view, permute, expand)
 *   str approximate           flags & DT_OP_FLAG_GELU_TANH ('tanh')
 *   ScalarType                dtype (to.dtype); an optional one (sum's dtype=) only as None
 * Facts the schema does not carry can be given as raw fields, as the graph text format writes
 * them (ints=, scalars=, flags=); they replace what the named arguments put there.
 */
#ifndef DT_OP_ARGS_H
#define DT_OP_ARGS_H

#include "ops/op_impl.h"

/* The tensors an op's schema takes. */
typedef struct dt_op_params {
  int min_tensors;  /* the list's required column */
  int max_tensors;  /* Tensor and Tensor? parameters; INT_MAX for a Tensor[] */
  bool tensor_list; /* a Tensor[] parameter: the inputs go to input_list */
} dt_op_params;

/* Reads op's schema into *out. DT_ERR_UNSUPPORTED naming the op and the parameter when the
 * schema has a parameter type this adapter cannot map to dt_op_call (an op that would need a
 * hand-written call); DT_ERR_INVALID for an op id outside the list. */
dt_status dt__op_params(int op, dt_op_params *out);

/* A call being built, with the storage its int_list borrows. */
typedef struct dt_op_args {
  dt_op_call call;
  int64_t list[DT_MAX_DIMS];
} dt_op_args;

/* Fills args->call (op, attributes; no tensors, no outputs) from attrs: "name=value" words
 * separated by spaces, names from the op's schema or the raw fields ints=, scalars=, flags=
 * (NULL or "": every default). Values: ints 1, -1, lists 0,1 or 6x5 or [6,5] or [], bools
 * true/false/1/0, numbers, dtype names (float64, f64), None where the schema allows it.
 * DT_ERR_INVALID naming the op and the attribute for an unknown name, a bad value or a
 * missing required argument; DT_ERR_UNSUPPORTED for a value dt_op_call cannot carry. */
dt_status dt__op_args_parse(int op, const char *attrs, dt_op_args *args);

/* Runs op on inputs[0..n) (borrowed) with attrs (as dt__op_args_parse reads them) and gives
 * output `which` of its outputs in *out (a new reference; the other outputs are released).
 * An in-place op runs on a clone of inputs[0], which becomes *out: the inputs are never
 * written. Errors as dt__op_args_parse, DT_ERR_INVALID for n outside the op's tensor count or
 * which outside its outputs, and whatever the op returns; *out is NULL on failure. */
dt_status dt__op_run(int op, dt_tensor *const *inputs, int n, const char *attrs, int which,
                     dt_tensor **out);

#endif /* DT_OP_ARGS_H */
