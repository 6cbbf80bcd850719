/*
 * Private interface of compile: symbolic size expressions (src/compile/symbolic.c) and the
 * symbolic shape rules of the ops (src/compile/shape_rules.c).
 */
#ifndef DT_COMPILE_IMPL_H
#define DT_COMPILE_IMPL_H

#include "dtensor/compile.h"
#include "graph/graph_impl.h"

/* ---- Symbolic sizes --------------------------------------------------------------------- */

/* An expression is an index into a pool of nodes; operands precede the nodes that use them,
 * so one pass over the pool evaluates every expression (what a guard check does). Nodes are
 * hash-consed and simplified as they are made (constants folded, constants on the right of
 * sums and products, x + 0, x * 1, (x * k) // c with c dividing k, ...), so equal expressions
 * built the same way get the same index and a size that does not depend on a symbol is a
 * constant node. */
typedef enum dt_sx_kind {
  DT_SX_CONST = 0,
  DT_SX_SYM,
  DT_SX_ADD,
  DT_SX_MUL,
  DT_SX_FLOORDIV,
  DT_SX_CEILDIV,
  DT_SX_MIN,
  DT_SX_MAX,
} dt_sx_kind;

typedef struct dt_sx_node {
  dt_sx_kind kind;
  int a, b;  /* operands */
  int64_t v; /* CONST: the value; SYM: the symbol */
} dt_sx_node;

typedef struct dt_sx_pool {
  dt_sx_node *nodes;
  int n, cap;
  bool oom; /* an allocation failed: the pool's expressions are not to be trusted */
} dt_sx_pool;

void dt__sx_pool_free(dt_sx_pool *p);
int dt__sx_const(dt_sx_pool *p, int64_t v);
int dt__sx_sym(dt_sx_pool *p, int symbol);
int dt__sx_add(dt_sx_pool *p, int a, int b);
int dt__sx_mul(dt_sx_pool *p, int a, int b);
int dt__sx_floordiv(dt_sx_pool *p, int a, int b);
int dt__sx_ceildiv(dt_sx_pool *p, int a, int b);
int dt__sx_min(dt_sx_pool *p, int a, int b);
int dt__sx_max(dt_sx_pool *p, int a, int b);
/* a - b, as a + (-1) * b. */
int dt__sx_sub(dt_sx_pool *p, int a, int b);
/* True when expression e is a constant (its value in *v). */
bool dt__sx_is_const(const dt_sx_pool *p, int e, int64_t *v);
/* Evaluates every node of the pool with symbols[s] as the symbols' values into vals
 * (capacity p->n). */
void dt__sx_eval_all(const dt_sx_pool *p, const int64_t *symbols, int64_t *vals);
/* Evaluates one expression (walks its operands; for compile time, not the call path). */
int64_t dt__sx_eval(const dt_sx_pool *p, int e, const int64_t *symbols);
/* Writes e as text ("s0*256", "ceil(s1/4)", ...) into buf. */
char *dt__sx_format(const dt_sx_pool *p, int e, char *buf, size_t size);

/* ---- Guards ------------------------------------------------------------------------------ */

typedef enum dt_guard_kind {
  DT_GUARD_EQ = 0,    /* a == b */
  DT_GUARD_DIVISIBLE, /* a % c == 0 */
  DT_GUARD_GE,        /* a >= c */
} dt_guard_kind;

typedef struct dt_guard {
  dt_guard_kind kind;
  int a, b;
  int64_t c;
  char why[96]; /* what needed it: "mul: broadcast of dim 0" */
} dt_guard;

/* ---- Symbolic shape inference ------------------------------------------------------------ */

/* What a shape rule sees and where it writes: the symbolic dims of each tensor argument
 * (inputs then list entries, as in dt_op_call), the call as recorded (attributes as the caller
 * gave them) and as infer normalized it, the traced output metas, and room for guards. */
typedef struct dt_shape_ctx {
  dt_sx_pool *pool;
  const int64_t *symbols;  /* the symbols' traced values */
  const dt_op_call *given; /* attributes before infer normalized them */
  const dt_op_call *done;  /* after: normalized dims */
  int n_args;
  int arg_ndim[DT_OP_MAX_INPUTS + 32];
  const int *arg_dims[DT_OP_MAX_INPUTS + 32]; /* NULL for an absent optional input */
  int n_out;
  const dt_tensor_meta *metas;
  int out_dims[DT_OP_MAX_META][DT_MAX_DIMS];
  /* Guards the rule needs; the caller appends them. */
  int n_guards;
  dt_guard guards[DT_MAX_DIMS * 4 + 8];
} dt_shape_ctx;

/* Fills ctx->out_dims by the op's symbolic rule. Returns false when the op has none (or the
 * call is a form it does not cover): the caller then specializes. */
bool dt__shape_rule(dt_shape_ctx *ctx);

/* ---- Sharding decided at compile time (src/compile/dist_plan.c) --------------------------- */

/* True when the distributed call (as the caller gave it) takes its arguments as they are
 * placed, with nothing rewritten for the shard: it can run on the shards directly. out gets
 * the output's placements (one per mesh dim). */
bool dt__compile_dist_plain(const dt_op_call *call, dt_placement *out);

/* ---- For the benchmark ------------------------------------------------------------------ */

/* The index of the first cached variant whose guards hold for these inputs, or -1: the guard
 * check of dt_compiled_call alone (inputs must be valid). */
int dt__compiled_find_variant(dt_compiled *compiled, int n_in, dt_tensor *const *in);

#endif /* DT_COMPILE_IMPL_H */
