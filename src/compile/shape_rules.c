/*
 * Symbolic shape inference: for each shape family (the op list's shape column) the output dims
 * as expressions of the input dims, with the guards the inference assumed. An op whose family
 * is SPECIALIZE, or whose traced call falls outside what its rule handles, is specialized by
 * the caller (its input sizes are guarded to their traced values), which is always correct,
 * only less general.
 */
#include <stdio.h>
#include <string.h>

#include "compile/compile_impl.h"

static void add_guard(dt_shape_ctx *c, dt_guard_kind kind, int a, int b, int64_t k,
                      const char *what, int dim) {
  if (c->n_guards >= (int)(sizeof c->guards / sizeof c->guards[0])) return;
  dt_guard *g = &c->guards[c->n_guards++];
  *g = (dt_guard){.kind = kind, .a = a, .b = b, .c = k};
  snprintf(g->why, sizeof g->why, "%s: %s of dim %d", dt__op_table[c->done->op].name, what, dim);
}

/* Both sizes must be equal: nothing to guard when they are the same expression. */
static void need_equal(dt_shape_ctx *c, int a, int b, const char *what, int dim) {
  if (a != b) add_guard(c, DT_GUARD_EQ, a, b, 0, what, dim);
}

static int hint(const dt_shape_ctx *c, int e, const int64_t *symbols) {
  return (int)(dt__sx_eval(c->pool, e, symbols) == 1);
}

static void copy_dims(dt_shape_ctx *c, int out, int arg) {
  for (int d = 0; d < c->arg_ndim[arg]; d++) c->out_dims[out][d] = c->arg_dims[arg][d];
}

/* NumPy broadcasting over the present arguments. At each dim the traced sizes decide which
 * arguments broadcast (size 1) and which give the size; the guards keep it so: a broadcast
 * size stays 1 and the others stay equal to the first one. */
static bool broadcast(dt_shape_ctx *c, int first, int count, const int64_t *symbols) {
  const dt_tensor_meta *m = &c->metas[0];
  for (int d = 0; d < m->ndim; d++) {
    int size = -1;
    for (int k = first; k < first + count; k++) {
      if (!c->arg_dims[k]) continue;
      int ad = c->arg_ndim[k] - m->ndim + d;
      if (ad < 0) continue;
      int e = c->arg_dims[k][ad];
      if (hint(c, e, symbols)) { /* broadcast here: it must stay 1 */
        int64_t v;
        if (!dt__sx_is_const(c->pool, e, &v)) {
          add_guard(c, DT_GUARD_EQ, e, dt__sx_const(c->pool, 1), 0, "broadcast (size 1)", d);
        }
        continue;
      }
      if (size < 0)
        size = e;
      else
        need_equal(c, size, e, "broadcast", d);
    }
    c->out_dims[0][d] = size >= 0 ? size : dt__sx_const(c->pool, 1);
  }
  return true;
}

/* Entry d of the shape attribute as an expression: the size a size note named, else the
 * number given. */
static int size_attr(dt_shape_ctx *c, int d) {
  if (c->size_exprs && c->size_exprs[d] >= 0) return c->size_exprs[d];
  return dt__sx_const(c->pool, c->given->ints[d]);
}

/* b <= a must hold (a GE guard on a - b), nothing when both are the same expression or
 * constants. */
static void need_at_most(dt_shape_ctx *c, int b, int a, const char *what, int dim) {
  if (a == b || (dt__sx_is_const(c->pool, a, NULL) && dt__sx_is_const(c->pool, b, NULL))) return;
  add_guard(c, DT_GUARD_GE, dt__sx_sub(c->pool, a, b), -1, 0, what, dim);
}

/* expand(self, size): a -1 keeps self's size; a new leading dim is the size given; a dim of
 * self that is 1 broadcasts to the size given (a symbolic one is guarded to stay 1); any
 * other dim must equal the size given. The sizes given are numbers of the trace unless a
 * size note made them expressions (size_exprs). */
static bool rule_expand(dt_shape_ctx *c) {
  const dt_op_call *g = c->given;
  int n = g->n_ints, nd = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  if (c->n_out != 1 || n != c->metas[0].ndim || n < nd) return false;
  for (int d = 0; d < n; d++) {
    int ad = d - (n - nd);
    if (g->ints[d] == -1) {
      if (ad < 0) return false;
      c->out_dims[0][d] = a[ad];
      continue;
    }
    int want = size_attr(c, d);
    c->out_dims[0][d] = want;
    if (ad < 0 || a[ad] == want) continue;
    int64_t v;
    if (dt__sx_is_const(c->pool, a[ad], &v) && v == 1) continue; /* broadcasts to any size */
    if (hint(c, a[ad], c->symbols))
      add_guard(c, DT_GUARD_EQ, a[ad], dt__sx_const(c->pool, 1), 0, "broadcast (size 1)", d);
    else
      need_equal(c, a[ad], want, "expand", d);
  }
  return true;
}

/* scatter_add(self, dim, index, src): self's shape; the index is no larger than src in any
 * dim, nor than self outside dim (what infer checks, kept by guards). A row window (a
 * distributed rewrite) is not covered. */
static bool rule_scatter_add(dt_shape_ctx *c) {
  if (c->n_args < 3 || c->n_out != 1 || c->done->n_ints != 1) return false;
  int nd = c->arg_ndim[0], dim = (int)c->done->ints[0];
  for (int k = 1; k < 3; k++) {
    if (!c->arg_dims[k] || c->arg_ndim[k] != nd) return false;
  }
  const int *self = c->arg_dims[0], *index = c->arg_dims[1], *src = c->arg_dims[2];
  for (int d = 0; d < nd; d++) {
    need_at_most(c, index[d], src[d], "index within src", d);
    if (d != dim) need_at_most(c, index[d], self[d], "index within self", d);
  }
  copy_dims(c, 0, 0);
  return true;
}

static bool rule_same(dt_shape_ctx *c) {
  const int64_t *symbols = c->symbols;
  const dt_op_def *def = &dt__op_table[c->done->op];
  dt_sx_pool *p = c->pool;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  if (def->shape == DT_SHAPE_BROADCAST_INTO) {
    /* The other operand broadcasts into self: its non-1 sizes equal self's. */
    if (c->n_args < 2 || !c->arg_dims[1]) return false;
    for (int d = 0; d < c->arg_ndim[1]; d++) {
      int e = c->arg_dims[1][d], sd = nd0 - c->arg_ndim[1] + d;
      if (sd < 0) return false;
      if (hint(c, e, symbols))
        need_equal(c, e, dt__sx_const(p, 1), "broadcast (size 1)", sd);
      else
        need_equal(c, a[sd], e, "broadcast", sd);
    }
  }
  if (def->kind == DT_OP_KIND_INPLACE || c->n_out >= 1) copy_dims(c, 0, 0);
  return c->metas[0].ndim == nd0;
}

static bool rule_norm(dt_shape_ctx *c) {
  const int64_t *symbols = c->symbols;
  const dt_op_def *def = &dt__op_table[c->done->op];
  dt_sx_pool *p = c->pool;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  /* The input's shape; the channel dim (batch norm) or the normalized trailing dims (layer
   * norm, given as constants) must keep matching the parameters. */
  if (def->shape != DT_SHAPE_LAYER_NORM) {
    if (nd0 < 2) return false;
    if (def->shape == DT_SHAPE_BATCH_NORM_TRAINING && dt__sx_eval(p, a[1], symbols) > 0) {
      /* Batch statistics need more than one value per channel (an error otherwise). */
      int per_channel = a[0];
      for (int d = 2; d < nd0; d++) per_channel = dt__sx_mul(p, per_channel, a[d]);
      if (!dt__sx_is_const(p, per_channel, NULL))
        add_guard(c, DT_GUARD_GE, per_channel, -1, 2, "batch statistics (2 values)", 0);
    }
    for (int k = 1; k < c->n_args; k++) {
      if (c->arg_dims[k] && c->arg_ndim[k] == 1)
        need_equal(c, a[1], c->arg_dims[k][0], "channels", 1);
    }
  } else {
    const dt_op_call *g = c->given;
    if (g->n_int_list < 1 || g->n_int_list > nd0 || !g->int_list) return false;
    for (int j = 0; j < g->n_int_list; j++) {
      int d = nd0 - g->n_int_list + j;
      need_equal(c, a[d], dt__sx_const(p, g->int_list[j]), "normalized shape", d);
    }
  }
  if (c->n_out != 1) return false;
  copy_dims(c, 0, 0);
  return true;
}

static bool rule_cross_entropy(dt_shape_ctx *c) {
  const dt_op_def *def = &dt__op_table[c->done->op];
  dt_sx_pool *p = c->pool;
  /* cross_entropy_loss(logits [N, C], target [N, 1]) -> [N, 1]; its backward (grad [N, 1],
   * logits, target) -> the logits' [N, C]. The row counts must stay equal. */
  bool bwd = def->shape == DT_SHAPE_CROSS_ENTROPY_BACKWARD;
  int li = bwd ? 1 : 0, n_args = bwd ? 3 : 2;
  if (c->n_args < n_args || c->n_out != 1) return false;
  for (int k = 0; k < n_args; k++) {
    if (!c->arg_dims[k] || c->arg_ndim[k] != 2) return false;
  }
  const int *l = c->arg_dims[li];
  for (int k = 0; k < n_args; k++) {
    if (k != li) need_equal(c, l[0], c->arg_dims[k][0], "rows", 0);
  }
  c->out_dims[0][0] = l[0];
  c->out_dims[0][1] = bwd ? l[1] : dt__sx_const(p, 1);
  return true;
}

static bool rule_mm(dt_shape_ctx *c) {
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  if (c->n_args < 2 || nd0 != 2 || c->arg_ndim[1] != 2) return false;
  need_equal(c, a[1], c->arg_dims[1][0], "contraction", 1);
  c->out_dims[0][0] = a[0];
  c->out_dims[0][1] = c->arg_dims[1][1];
  return true;
}

static bool rule_linear(dt_shape_ctx *c) {
  const dt_op_def *def = &dt__op_table[c->done->op];
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  /* x @ w^T (linear) or x @ w (matmul with a 2-D right side). */
  bool linear = def->shape == DT_SHAPE_LINEAR;
  if (c->n_args < 2 || !c->arg_dims[1] || c->arg_ndim[1] != 2 || nd0 < 1) return false;
  const int *w = c->arg_dims[1];
  int k = linear ? w[1] : w[0], n = linear ? w[0] : w[1];
  need_equal(c, a[nd0 - 1], k, "contraction", nd0 - 1);
  if (linear && c->n_args > 2 && c->arg_dims[2]) {
    if (c->arg_ndim[2] != 1) return false;
    need_equal(c, c->arg_dims[2][0], n, "bias", 0);
  }
  for (int d = 0; d < nd0 - 1; d++) c->out_dims[0][d] = a[d];
  c->out_dims[0][nd0 - 1] = n;
  return c->metas[0].ndim == nd0;
}

static bool rule_embedding(dt_shape_ctx *c) {
  const dt_op_call *done = c->done;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  /* embedding(weight, indices): the indices' dims, then the embedding dim. */
  if (c->n_args < 2 || !c->arg_dims[1] || nd0 != 2 || done->n_ints != 0) return false;
  int ni = c->arg_ndim[1];
  for (int d = 0; d < ni; d++) c->out_dims[0][d] = c->arg_dims[1][d];
  c->out_dims[0][ni] = a[1];
  return true;
}

static bool rule_reduce(dt_shape_ctx *c) {
  dt_sx_pool *p = c->pool;
  const dt_op_call *done = c->done;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  const dt_tensor_meta *m = &c->metas[0];
  uint32_t mask = 0;
  if (m->ndim == 0 || done->n_ints == 0) {
    mask = nd0 > 0 ? (uint32_t)((1u << nd0) - 1u) : 0u;
  } else {
    for (int i = 0; i < done->n_ints; i++) mask |= 1u << done->ints[i];
  }
  bool keepdim = m->ndim == nd0 && nd0 > 0 && (done->flags & DT_OP_FLAG_KEEPDIM);
  int o = 0;
  for (int d = 0; d < nd0; d++) {
    bool reduced = (mask >> d) & 1u;
    if (!reduced)
      c->out_dims[0][o++] = a[d];
    else if (keepdim)
      c->out_dims[0][o++] = dt__sx_const(p, 1);
  }
  if (o != m->ndim) return false;
  for (int k = 1; k < c->n_out; k++) memcpy(c->out_dims[k], c->out_dims[0], sizeof c->out_dims[0]);
  return true;
}

/* Whether the tensor-list entries (arguments first on) all have the first one's rank; their
 * dims, but along `skip` (-1: none), are guarded equal to the first one's. */
static bool list_entries_agree(dt_shape_ctx *c, int first, int skip, const char *what) {
  int nd = c->arg_ndim[first];
  for (int k = first + 1; k < c->n_args; k++) {
    if (c->arg_ndim[k] != nd) return false;
    for (int d = 0; d < nd; d++) {
      if (d != skip) need_equal(c, c->arg_dims[first][d], c->arg_dims[k][d], what, d);
    }
  }
  return true;
}

static bool rule_cat(dt_shape_ctx *c) {
  dt_sx_pool *p = c->pool;
  const dt_op_call *done = c->done;
  /* Every entry has the first one's dims except along dim, where the sizes add up; a rank
   * differing is one of the 1-D empty entries cat skips. */
  int first = done->n_inputs, dim = (int)done->ints[0];
  if (c->n_args <= first || !list_entries_agree(c, first, dim, "cat")) return false;
  int nd = c->arg_ndim[first];
  int sum = dt__sx_const(p, 0);
  for (int k = first; k < c->n_args && dim >= 0 && dim < nd; k++)
    sum = dt__sx_add(p, sum, c->arg_dims[k][dim]);
  for (int d = 0; d < nd; d++) c->out_dims[0][d] = d == dim ? sum : c->arg_dims[first][d];
  return true;
}

static bool rule_stack(dt_shape_ctx *c) {
  dt_sx_pool *p = c->pool;
  const dt_op_call *done = c->done;
  /* Every entry has the first one's dims; the new dim (normalized by infer) counts them. */
  int first = done->n_inputs, dim = (int)done->ints[0];
  if (c->n_args <= first) return false;
  int nd = c->arg_ndim[first];
  if (dim < 0 || dim > nd || c->metas[0].ndim != nd + 1) return false;
  if (!list_entries_agree(c, first, -1, "stack")) return false;
  for (int d = 0, s = 0; d < nd + 1; d++)
    c->out_dims[0][d] = d == dim ? dt__sx_const(p, c->n_args - first) : c->arg_dims[first][s++];
  return true;
}

static bool rule_chunk(dt_shape_ctx *c) {
  dt_sx_pool *p = c->pool;
  const dt_op_call *done = c->done;
  const int *a = c->arg_dims[0];
  /* torch.chunk: pieces of ceil(s / chunks), as many as ceil(s / piece); the count is
   * guarded since it is the node's arity, and s >= 1 keeps the piece size positive. */
  int d = (int)done->ints[0];
  int64_t chunks = c->given->ints[0];
  int s = a[d];
  int piece = dt__sx_ceildiv(p, s, dt__sx_const(p, chunks));
  int64_t v;
  if (!dt__sx_is_const(p, s, &v)) {
    add_guard(c, DT_GUARD_GE, s, -1, 1, "chunk (nonempty)", d);
    add_guard(c, DT_GUARD_EQ, dt__sx_ceildiv(p, s, piece), dt__sx_const(p, c->n_out), 0,
              "chunk (number of pieces)", d);
  }
  for (int k = 0; k < c->n_out; k++) {
    copy_dims(c, k, 0);
    int rest = dt__sx_sub(p, s, dt__sx_mul(p, piece, dt__sx_const(p, k)));
    c->out_dims[k][d] = dt__sx_min(p, piece, rest);
  }
  return true;
}

static bool rule_transpose(dt_shape_ctx *c) {
  const dt_op_call *done = c->done;
  const int *a = c->arg_dims[0];
  copy_dims(c, 0, 0);
  int d0 = (int)done->ints[0], d1 = (int)done->ints[1];
  c->out_dims[0][d0] = a[d1];
  c->out_dims[0][d1] = a[d0];
  return true;
}

static bool rule_unsqueeze(dt_shape_ctx *c) {
  dt_sx_pool *p = c->pool;
  const dt_op_call *done = c->done;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  int d = (int)done->ints[0], o = 0;
  for (int k = 0; k <= nd0; k++) c->out_dims[0][k] = k == d ? dt__sx_const(p, 1) : a[o++];
  return true;
}

static bool rule_view(dt_shape_ctx *c) {
  const int64_t *symbols = c->symbols;
  dt_sx_pool *p = c->pool;
  int nd0 = c->arg_ndim[0];
  const int *a = c->arg_dims[0];
  /* The given sizes are numbers (or the expressions a size note made them); a -1 is
   * numel / (product of the others), which must divide; without one, numel must equal the
   * product. */
  const dt_op_call *g = c->given;
  int numel = dt__sx_const(p, 1);
  for (int d = 0; d < nd0; d++) numel = dt__sx_mul(p, numel, a[d]);
  int prod = dt__sx_const(p, 1), infer_dim = -1;
  for (int d = 0; d < g->n_ints; d++) {
    if (g->ints[d] == -1)
      infer_dim = d;
    else
      prod = dt__sx_mul(p, prod, size_attr(c, d));
  }
  int64_t k;
  bool constant = dt__sx_is_const(p, prod, &k);
  if (g->n_ints != c->metas[0].ndim || dt__sx_eval(p, prod, symbols) <= 0) return false;
  for (int d = 0; d < g->n_ints; d++) c->out_dims[0][d] = size_attr(c, d);
  if (infer_dim >= 0) {
    /* A symbolic divisor is kept positive by a guard (the pool simplifies (x*b)/b to x). */
    if (!constant) add_guard(c, DT_GUARD_GE, prod, -1, 1, "view (positive sizes)", infer_dim);
    int q = dt__sx_floordiv(p, numel, prod);
    if (constant && k != 1 && !dt__sx_is_const(p, numel, NULL))
      add_guard(c, DT_GUARD_DIVISIBLE, numel, -1, k, "view (divisibility)", infer_dim);
    else if (!constant)
      need_equal(c, dt__sx_mul(p, q, prod), numel, "view (divisibility)", infer_dim);
    c->out_dims[0][infer_dim] = q;
  } else {
    need_equal(c, numel, prod, "view (element count)", 0);
  }
  return true;
}

/* The rule of the op's shape family (the op list's shape column); false: specialize. */
bool dt__shape_rule(dt_shape_ctx *c) {
  if (c->n_args < 1 || !c->arg_dims[0]) return false;
  switch (dt__op_table[c->done->op].shape) {
  case DT_SHAPE_SAME:
  case DT_SHAPE_BROADCAST_INTO: return rule_same(c);
  case DT_SHAPE_BATCH_NORM:
  case DT_SHAPE_LAYER_NORM:
  case DT_SHAPE_BATCH_NORM_TRAINING: return rule_norm(c);
  case DT_SHAPE_CROSS_ENTROPY:
  case DT_SHAPE_CROSS_ENTROPY_BACKWARD: return rule_cross_entropy(c);
  case DT_SHAPE_BROADCAST: return broadcast(c, 0, c->n_args < 2 ? 1 : 2, c->symbols);
  case DT_SHAPE_WHERE: return broadcast(c, 0, 3, c->symbols);
  case DT_SHAPE_MM: return rule_mm(c);
  case DT_SHAPE_LINEAR:
  case DT_SHAPE_MATMUL: return rule_linear(c);
  case DT_SHAPE_EMBEDDING: return rule_embedding(c);
  case DT_SHAPE_REDUCE: return rule_reduce(c);
  case DT_SHAPE_CAT: return rule_cat(c);
  case DT_SHAPE_STACK: return rule_stack(c);
  case DT_SHAPE_CHUNK: return rule_chunk(c);
  case DT_SHAPE_TRANSPOSE: return rule_transpose(c);
  case DT_SHAPE_UNSQUEEZE: return rule_unsqueeze(c);
  case DT_SHAPE_EXPAND: return rule_expand(c);
  case DT_SHAPE_SCATTER_ADD: return rule_scatter_add(c);
  case DT_SHAPE_VIEW: return rule_view(c);
  case DT_SHAPE_SPECIALIZE:
  case DT_SHAPE_COUNT: break;
  }
  return false;
}
