/*
 * Rewrites of a compiled variant decided once when it is planned (issue 22.7), each giving the
 * bits the ops it replaces give:
 * - A gradient output that is a clone (dt_backward's commit copies a gradient whose storage the
 *   tracer shares) returns the cloned value itself: dt__compile_apply_grads copies a gradient
 *   whose storage is shared when it commits it, so the copy is made only when needed.
 * - A mask multiply, mul(g, to.dtype(gt.Scalar(x, s))) with a float32 mask (relu's backward):
 *   one vectorized loop g[i] * (x[i] > s ? 1 : 0); the bool mask and its float copy are never
 *   made (the two nodes are folded into the multiply).
 * - A mul or add (alpha 1) with an operand expanded from one element (the backward of mean and
 *   of the losses' mean): the element itself as the right operand (both ops commute exactly in
 *   floating point), so that the kernel's scalar fast path runs instead of the strided loop.
 * - add(p, p) with p such a multiply read nowhere else (mse's backward once its common
 *   subexpression is merged): one loop q = t[i] * s, out[i] = q + q.
 * Only local nodes whose values do not reach the outputs are rewritten, so that they run
 * directly (compile/execute.c). Common subexpressions are merged first (compile/cse.c).
 */
#include <string.h>

#include "compile/compile_impl.h"
#include "kernels/cpu/vmath.h"

/* Nodes whose value (or a view of it) reaches the outputs. */
void dt__compile_escapes(const dt_compile_variant *v, bool grads, bool *escapes) {
  const dt_graph *g = v->g;
  int o = dt__graph_output_node(g);
  int roots = o < 0 ? 0 : g->nodes[o].n_list - (grads ? 0 : v->n_grads);
  for (int k = 0; k < roots; k++) escapes[g->nodes[o].list[k]] = true;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const dt_node *nd = &g->nodes[i];
    bool alias = nd->kind == DT_NODE_GETITEM ||
                 (nd->kind == DT_NODE_CALL && dt__op_table[nd->target].kind != DT_OP_KIND_COMPUTE);
    if (alias && nd->inputs[0] >= 0) escapes[nd->inputs[0]] |= escapes[i];
  }
}

/* The nodes node i reads when it runs: a rewrite's, or its graph inputs. */
static int inputs_of(const dt_compile_variant *v, int i, const int **ins) {
  const dt_compile_fused *f = &v->fused[i];
  *ins = f->n_inputs > 0 ? f->inputs : v->g->nodes[i].inputs;
  return f->n_inputs > 0 ? f->n_inputs : v->g->nodes[i].n_inputs;
}

/* How many inputs of later nodes that run read node j (the output list counts). */
static int uses_of(const dt_compile_variant *v, int j) {
  const dt_graph *g = v->g;
  int uses = 0;
  for (int i = j + 1; i < g->n_nodes; i++) {
    const dt_node *nd = &g->nodes[i];
    if (v->fused[i].folded) continue;
    const int *ins;
    int n_in = inputs_of(v, i, &ins);
    for (int k = 0; k < n_in; k++) uses += ins[k] == j;
    for (int k = 0; k < nd->n_list; k++) uses += nd->list[k] == j;
  }
  return uses;
}

static bool is_call(const dt_compile_variant *v, int j, dt_op op) {
  return j >= 0 && v->g->nodes[j].kind == DT_NODE_CALL && v->g->nodes[j].target == (int)op &&
         !v->placements[j];
}

/* Nodes a and b hold float32 values of the same symbolic dims, local. */
static bool same_f32(const dt_compile_variant *v, int a, int b) {
  const dt_value_type *ta = &v->g->nodes[a].types[0], *tb = &v->g->nodes[b].types[0];
  if (ta->dtype != DT_F32 || tb->dtype != DT_F32 || ta->ndim != tb->ndim || v->placements[a] ||
      v->placements[b])
    return false;
  return memcmp(v->dims[a], v->dims[b], sizeof(int) * (size_t)ta->ndim) == 0;
}

/* out[i] = g[i] * (x[i] > s ? 1 : 0): the multiply by the float mask eager makes, so the same
 * bits (0 * g keeps g's sign, and inf or NaN in g gives NaN, as eager's). One branch-free loop
 * gcc vectorizes, compiled per vector width (a select then a multiply; out may be g itself). */
DT_VECTOR_CLONES static void mask_mul_loop(const float *g, const float *x, float s, float *out,
                                           int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    /* The mask as 1.0f's bits or 0 (written as a select, gcc makes g * 1 a branch). */
    uint32_t bits = (uint32_t) - (int32_t)(x[i] > s) & 0x3f800000u;
    float mask;
    memcpy(&mask, &bits, sizeof mask);
    out[i] = g[i] * mask;
  }
}

/* out[i] = g[i] * (x[i] > threshold ? 1 : 0), all float32 of one shape. */
static dt_status mask_mul_kernel(dt_op_call *call) {
  dt_tensor *gt = call->inputs[0], *xt = call->inputs[1], *ot = call->outputs[0];
  dt_tensor *gc = NULL, *xc = NULL;
  /* Planned values are contiguous; a strided view is copied first (rare). */
  if (!dt__is_contiguous(gt->ndim, gt->shape, gt->strides) && dt_contiguous(gt, &gc))
    return dt__error(DT_ERR_NOMEM, "mask multiply: out of memory");
  if (!dt__is_contiguous(xt->ndim, xt->shape, xt->strides) && dt_contiguous(xt, &xc)) {
    dt_tensor_release(gc);
    return dt__error(DT_ERR_NOMEM, "mask multiply: out of memory");
  }
  const float *g = (const float *)dt__tensor_base(gc ? gc : gt);
  const float *x = (const float *)dt__tensor_base(xc ? xc : xt);
  float *out = (float *)dt__tensor_base(ot), s = (float)call->scalars[0];
  int64_t n = dt__numel(ot->ndim, ot->shape);
  mask_mul_loop(g, x, s, out, n);
  dt_tensor_release(gc);
  dt_tensor_release(xc);
  return DT_OK;
}

/* mul(g, to.dtype(gt.Scalar(x, s))) at node m (either operand order). */
static void fuse_mask_mul(dt_compile_variant *v, int m, const bool *escapes) {
  const dt_node *n = &v->g->nodes[m];
  for (int side = 0; side < 2; side++) {
    int t = n->inputs[side], g = n->inputs[1 - side];
    if (!is_call(v, t, DT_OP_TO) || g < 0 || !same_f32(v, m, t) || !same_f32(v, m, g)) continue;
    int c = v->g->nodes[t].inputs[0];
    if (!is_call(v, c, DT_OP_GT_SCALAR)) continue;
    int x = v->g->nodes[c].inputs[0];
    double s = v->templates[c].scalars[0];
    if (x < 0 || !same_f32(v, m, x) || (double)(float)s != s) continue;
    if (escapes[t] || escapes[c] || uses_of(v, t) != 1 || uses_of(v, c) != 1) continue;
    dt_compile_fused *f = &v->fused[m];
    f->n_inputs = 2;
    f->inputs[0] = g;
    f->inputs[1] = x;
    f->kernel = mask_mul_kernel;
    f->scalar = s;
    v->fused[t].folded = v->fused[c].folded = true;
    return;
  }
}

/* mul/add(expand(u), t) with u of one element: (t, u). */
static void fuse_scalar_operand(dt_compile_variant *v, int m) {
  const dt_node *n = &v->g->nodes[m];
  if (n->target == DT_OP_ADD && v->templates[m].scalars[0] != 1.0) return;
  for (int side = 0; side < 2; side++) {
    int e = n->inputs[side], t = n->inputs[1 - side];
    if (!is_call(v, e, DT_OP_EXPAND) || t < 0 || v->placements[t]) continue;
    int u = v->g->nodes[e].inputs[0];
    if (u < 0 || v->placements[u]) continue;
    const dt_value_type *tu = &v->g->nodes[u].types[0], *tt = &v->g->nodes[t].types[0];
    const dt_value_type *tm = &n->types[0];
    bool one = tu->ndim <= tm->ndim && tu->dtype == tt->dtype && tt->dtype == tm->dtype &&
               (tm->dtype == DT_F32 || tm->dtype == DT_F64) && tt->ndim == tm->ndim &&
               memcmp(v->dims[t], v->dims[m], sizeof(int) * (size_t)tm->ndim) == 0;
    for (int d = 0; d < tu->ndim && one; d++) {
      int64_t size;
      one = dt__sx_is_const(&v->pool, v->dims[u][d], &size) && size == 1;
    }
    if (!one) continue;
    dt_compile_fused *f = &v->fused[m];
    f->n_inputs = 2;
    f->inputs[0] = t;
    f->inputs[1] = u;
    return;
  }
}

/* out[i] = q + q with q = t[i] * s: mul then add in float32 as eager's kernels compute them
 * (ISO C: no contraction into an FMA), in one loop compiled per vector width. */
DT_VECTOR_CLONES static void doubled_product_loop(const float *t, float s, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float q = t[i] * s;
    out[i] = q + q;
  }
}

/* add(p, p) with p = t * (one element u), all float32. */
static dt_status doubled_product_kernel(dt_op_call *call) {
  dt_tensor *tt = call->inputs[0], *ut = call->inputs[1], *ot = call->outputs[0], *tc = NULL;
  if (!dt__is_contiguous(tt->ndim, tt->shape, tt->strides) && dt_contiguous(tt, &tc))
    return dt__error(DT_ERR_NOMEM, "doubled product: out of memory");
  float s;
  memcpy(&s, dt__tensor_base(ut), sizeof s);
  doubled_product_loop((const float *)dt__tensor_base(tc ? tc : tt), s,
                       (float *)dt__tensor_base(ot), dt__numel(ot->ndim, ot->shape));
  dt_tensor_release(tc);
  return DT_OK;
}

/* add(p, p) at node m where p = mul(t, expand(u)) reads u's element (fuse_scalar_operand) and
 * nothing else reads p: mse's backward after its common subexpression, one loop instead of
 * two passes. */
static void fuse_doubled_product(dt_compile_variant *v, int m, const bool *escapes) {
  const dt_node *n = &v->g->nodes[m];
  int p = n->inputs[0];
  if (n->target != DT_OP_ADD || v->templates[m].scalars[0] != 1.0 || p < 0 || n->inputs[1] != p ||
      !is_call(v, p, DT_OP_MUL) || escapes[p] || v->fused[p].n_inputs != 2 || v->fused[p].kernel ||
      !same_f32(v, m, p) || uses_of(v, p) != 2)
    return;
  int t = v->fused[p].inputs[0], u = v->fused[p].inputs[1];
  if (!same_f32(v, m, t) || v->g->nodes[u].types[0].dtype != DT_F32) return;
  dt_compile_fused *f = &v->fused[m];
  f->n_inputs = 2;
  f->inputs[0] = t;
  f->inputs[1] = u;
  f->kernel = doubled_product_kernel;
  f->scalar = v->templates[m].scalars[0];
  v->fused[p].folded = true;
}

/* Calls nobody reads any more (an expand whose readers now read its element) are not run:
 * from the last node back, so that a chain dies whole. Only local compute calls without side
 * effects (no in-place or random op) are dropped. uses: room for the node count. */
static void fold_dead(dt_compile_variant *v, int *uses) {
  const dt_graph *g = v->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const dt_node *nd = &g->nodes[i];
    uses[i] = 0;
    if (v->fused[i].folded) continue;
    const int *ins;
    int n_in = inputs_of(v, i, &ins);
    for (int k = 0; k < n_in; k++) {
      if (ins[k] >= 0) uses[ins[k]]++;
    }
    for (int k = 0; k < nd->n_list; k++) uses[nd->list[k]]++;
  }
  for (int j = g->n_nodes - 1; j >= 0; j--) {
    const dt_node *nd = &g->nodes[j];
    if (nd->kind != DT_NODE_CALL || uses[j] || v->fused[j].folded || v->placements[j]) continue;
    const dt_op_def *def = &dt__op_table[nd->target];
    if (def->kind == DT_OP_KIND_INPLACE || (def->traits & DT_TRAIT_RANDOM)) continue;
    v->fused[j].folded = true;
    const int *ins;
    int n_in = inputs_of(v, j, &ins);
    for (int k = 0; k < n_in; k++) {
      if (ins[k] >= 0) uses[ins[k]]--;
    }
    for (int k = 0; k < nd->n_list; k++) uses[nd->list[k]]--;
  }
}

dt_status dt__compile_fuse(dt_compile_variant *v) {
  dt_graph *g = v->g;
  int n = g->n_nodes;
  v->fused = dt__calloc(sizeof *v->fused * (size_t)(n + 1));
  bool *escapes = dt__calloc(sizeof(bool) * (size_t)(n + 1));
  int *uses = dt__alloc(sizeof(int) * (size_t)(n + 1));
  if (!v->fused || !escapes || !uses) {
    dt__free(escapes);
    dt__free(uses);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  /* Gradient outputs that are clones: the cloned value (see the file comment). */
  int o = dt__graph_output_node(g);
  for (int k = 0; o >= 0 && v->joint && k < v->n_grads; k++) {
    int *slot = &g->nodes[o].list[g->nodes[o].n_list - v->n_grads + k];
    if (is_call(v, *slot, DT_OP_CLONE) && g->nodes[*slot].inputs[0] >= 0 &&
        uses_of(v, *slot) == 1) {
      v->fused[*slot].folded = true;
      *slot = g->nodes[*slot].inputs[0];
    }
  }
  dt_status st = dt__compile_cse(v);
  if (st) {
    dt__free(escapes);
    dt__free(uses);
    return st;
  }
  dt__compile_escapes(v, true, escapes);
  for (int m = 0; m < n; m++) {
    const dt_node *nd = &g->nodes[m];
    if (nd->kind != DT_NODE_CALL || escapes[m] || v->placements[m] || nd->n_inputs != 2) continue;
    if (nd->target == DT_OP_MUL) fuse_mask_mul(v, m, escapes);
    if (nd->target == DT_OP_ADD) fuse_doubled_product(v, m, escapes);
    if ((nd->target == DT_OP_MUL || nd->target == DT_OP_ADD) && v->fused[m].n_inputs == 0)
      fuse_scalar_operand(v, m);
  }
  fold_dead(v, uses);
  dt__free(escapes);
  dt__free(uses);
  return DT_OK;
}
