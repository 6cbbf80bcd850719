/* dtensor plan's case (tools/plan_case.c parses it, tools/plan.c runs and prints it): a mesh,
 * an op from the tool's table, its tensor arguments (global shape, placements, dtype) and
 * attributes. */
#ifndef DT_TOOLS_PLAN_H
#define DT_TOOLS_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "dtensor/dtensor.h"

#define PLAN_MAX_INPUTS 8

typedef struct plan_input {
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  dt_placement placements[DT_MESH_MAX_DIMS];
  int n_placements;
  dt_dtype dtype;
} plan_input;

/* Attributes, by name; an op reads those it takes (unset ones have the op's default). */
typedef struct plan_attrs {
  int n_dim;
  int64_t dim[DT_MAX_DIMS]; /* dim=1 or dim=0,1: reductions, softmax, cat, stack */
  bool keepdim;
  int n_shape;
  int64_t shape[DT_MAX_DIMS]; /* shape=6x5 (view, reshape) */
  int n_dims;
  int64_t dims[DT_MAX_DIMS]; /* dims=2,0,1 (permute) */
  int64_t start, end;        /* flatten: start=0 end=-1 */
  int64_t dim0, dim1;        /* transpose: dim0=0 dim1=1 */
  double scalar;             /* scalar ops: scalar=3 */
  int normalized;            /* layer_norm: how many trailing dims are normalized (1) */
} plan_attrs;

typedef struct plan_case {
  int mesh_ndim;
  int mesh_shape[DT_MESH_MAX_DIMS];
  const struct plan_op *op;
  int n_in;
  plan_input in[PLAN_MAX_INPUTS];
  plan_attrs attrs;
} plan_case;

/* ---- The ops: a name, an arity and how to call it with the attributes -------------------- */

typedef dt_status (*plan_unary_fn)(dt_tensor *, dt_tensor **);
typedef dt_status (*plan_binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);
typedef dt_status (*plan_scalar_fn)(dt_tensor *, double, dt_tensor **);
typedef dt_status (*plan_call_fn)(dt_tensor **in, int n, const plan_attrs *a, dt_tensor **out);

typedef struct plan_op {
  const char *name;
  int min_in, max_in;
  plan_unary_fn unary;
  plan_binary_fn binary;
  plan_scalar_fn scalar;
  plan_call_fn call;
  const char *attrs; /* the attributes it reads, for --help and errors */
} plan_op;

/* The op of the tool's table called `name`, or NULL. */
const plan_op *plan_find_op(const char *name);

/* A case from the command line (MESH OP ARG... ATTR=VALUE...); false with a message in err
 * on a usage error. */
bool plan_parse_case(int argc, char **argv, plan_case *c, char *err, size_t size);

#ifdef DT_HAVE_CJSON
/* A case from one JSON line ({"id", "mesh", "op", "args", "attrs"}); *id is -1 without one. */
bool plan_case_from_json(const char *line, plan_case *c, long *id, char *err, size_t size);
#endif

#endif
