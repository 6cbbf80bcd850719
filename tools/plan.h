/* dtensor plan's case (tools/plan_case.c parses it, tools/plan.c runs and prints it): a mesh,
 * an op of the list (src/ops/op_list.h), its tensor arguments (global shape, placements, dtype)
 * and its attributes by the names its schema gives them (src/ops/op_args.h). */
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

typedef struct plan_case {
  int mesh_ndim;
  int mesh_shape[DT_MESH_MAX_DIMS];
  int op;           /* the op of the list (dt_op) the name and the arguments resolved to */
  char op_name[64]; /* the op as the case named it */
  int n_in;
  plan_input in[PLAN_MAX_INPUTS];
  char attrs[1024]; /* the attributes, "name=value" words, as dt__op_run reads them */
} plan_case;

/* A case from the command line (MESH OP ARG... ATTR=VALUE...); false with a message in err
 * on a usage error. */
bool plan_parse_case(int argc, char **argv, plan_case *c, char *err, size_t size);

#ifdef DT_HAVE_CJSON
/* A case from one JSON line ({"id", "mesh", "op", "args", "attrs"}); *id is -1 without one. */
bool plan_case_from_json(const char *line, plan_case *c, long *id, char *err, size_t size);
#endif

#endif
