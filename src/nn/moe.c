/*
 * The sparse mixture-of-experts MLP (dtensor/transformer.h, dt_nn_moe): a router, top-k experts
 * per token, the tokens permuted into expert order, one SwiGLU per expert over all of its
 * tokens, and the weighted results permuted back. Written with differentiable ops (softmax,
 * topk, index_select, narrow, cat), so autograd gives the backward of every part.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"
#include "dtensor/transformer.h"
#include "dtensor/mesh.h"
#include "mesh/mesh_impl.h"
#include "nn/nn_impl.h"

typedef struct moe_state {
  int64_t n_experts, top_k;
  bool renormalise;
  double aux_coef, z_coef;
  dt_tensor *aux;  /* the last forward's auxiliary loss, or NULL */
  int64_t *counts; /* [n_experts]: assignments per expert in the last forward */
  bool ran;
  dt__nn_moe_ep *ep; /* expert parallelism, or NULL: every expert here */
} moe_state;

static void moe_release(void *user) {
  moe_state *s = user;
  if (!s) return;
  dt_tensor_release(s->aux);
  dt__free(s->counts);
  if (s->ep) dt__mesh_release(s->ep->mesh);
  dt__free(s->ep);
  dt__free(s);
}

/* The experts' order of the token-slot assignments: perm[p] is the flat (token * k + slot)
 * index of the p-th assignment in expert order (stable: by expert, then token, then slot),
 * counts[e] how many expert e got. */
static dt_status expert_order(dt_tensor *indices, int64_t n_assign, int64_t n_experts,
                              int64_t *counts, int64_t **perm_out) {
  double *ids = dt__alloc(sizeof(double) * (size_t)(n_assign ? n_assign : 1));
  int64_t *perm = dt__alloc(sizeof(int64_t) * (size_t)(n_assign ? n_assign : 1));
  int64_t *start = dt__calloc(sizeof(int64_t) * (size_t)(n_experts + 1));
  dt_status st = ids && perm && start ? DT_OK : dt__error(DT_ERR_NOMEM, "MoE: out of memory");
  if (!st) st = dt_tensor_to_doubles(indices, ids, n_assign);
  for (int64_t e = 0; e < n_experts; e++) counts[e] = 0;
  for (int64_t i = 0; i < n_assign && !st; i++) counts[(int64_t)ids[i]]++;
  for (int64_t e = 0; e < n_experts && !st; e++) start[e + 1] = start[e] + counts[e];
  for (int64_t i = 0; i < n_assign && !st; i++) perm[start[(int64_t)ids[i]]++] = i;
  dt__free(ids);
  dt__free(start);
  if (st) {
    dt__free(perm);
    return st;
  }
  *perm_out = perm;
  return DT_OK;
}

/* n_experts * sum_e f_e P_e + z: the auxiliary loss of the options, or NULL. */
static dt_status aux_loss(const moe_state *s, dt_tensor *logits, dt_tensor *probs, int64_t n_tokens,
                          dt_tensor_list *tmp, dt_tensor **out) {
  dt_status st = DT_OK;
  *out = NULL;
  if (s->aux_coef <= 0 && s->z_coef <= 0) return DT_OK;
  if (n_tokens == 0) /* no tokens, no imbalance: 0 (a mean over none would be NaN) */
    return dt_zeros(0, NULL, DT_F32, out);
  dt_tensor *total = NULL;
  if (s->aux_coef > 0) {
    float *f = dt__alloc(sizeof(float) * (size_t)s->n_experts);
    if (!f) return dt__error(DT_ERR_NOMEM, "MoE: out of memory");
    for (int64_t e = 0; e < s->n_experts; e++)
      f[e] = (float)((double)s->counts[e] / (double)(n_tokens * s->top_k));
    dt_tensor *ft = NULL, *p = NULL, *fp = NULL, *sum = NULL;
    st = dt_from_data(f, 1, &s->n_experts, DT_F32, &ft);
    dt__free(f);
    if (!st && !dt_tensor_list_keep(tmp, ft)) st = DT_ERR_NOMEM;
    DT__KEEP(dt_mean_dims(probs, 1, (int64_t[]){0}, false, &p), p);
    DT__KEEP(dt_mul(ft, p, &fp), fp);
    DT__KEEP(dt_sum(fp, &sum), sum);
    if (!st) st = dt_mul_scalar(sum, (double)s->n_experts * s->aux_coef, &total);
  }
  if (!st && s->z_coef > 0) { /* logsumexp, stably: max + log(sum(exp(x - max))) */
    dt_tensor *mx = NULL, *d = NULL, *ex = NULL, *se = NULL, *lg = NULL, *lse = NULL;
    dt_tensor *sq = NULL, *mean = NULL, *z = NULL, *detached = NULL;
    DT__KEEP(dt_amax(logits, 1, (int64_t[]){1}, true, &mx), mx);
    DT__KEEP(dt_detach(mx, &detached), detached);
    DT__KEEP(dt_sub(logits, detached, &d), d);
    DT__KEEP(dt_exp(d, &ex), ex);
    DT__KEEP(dt_sum_dims(ex, 1, (int64_t[]){1}, true, &se), se);
    DT__KEEP(dt_log(se, &lg), lg);
    DT__KEEP(dt_add(lg, detached, &lse), lse);
    DT__KEEP(dt_mul(lse, lse, &sq), sq);
    DT__KEEP(dt_mean(sq, &mean), mean);
    DT__KEEP(dt_mul_scalar(mean, s->z_coef, &z), z);
    if (!st && total) {
      dt_tensor *both = NULL;
      st = dt_add(total, z, &both);
      dt_tensor_release(total);
      total = both;
    } else if (!st) {
      total = dt_tensor_retain(z);
    }
  }
  if (st) {
    dt_tensor_release(total);
    return st;
  }
  *out = total;
  return DT_OK;
}

static dt_status moe_forward_local(dt_module *m, dt_tensor *x, dt_tensor **out) {
  moe_state *s = dt_module_user(m);
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  int nd = dt_tensor_ndim(x);
  if (nd != 2 && nd != 3)
    return dt__error(DT_ERR_SHAPE,
                     "MoE: input is %d-D, expected [tokens, dim] or "
                     "[batch, seq, dim]",
                     nd);
  const int64_t *sh = dt_tensor_shape(x);
  int64_t dim = sh[nd - 1], n_tok = nd == 3 ? sh[0] * sh[1] : sh[0], k = s->top_k;
  dt_module *router = dt_module_child(m, 0), *experts = dt_module_child(m, 1);
  dt_tensor *flat = NULL, *logits = NULL, *lf = NULL, *probs = NULL, *w = NULL, *idx = NULL;
  dt_tensor *wn = NULL, *wsum = NULL, *perm_t = NULL, *inv_t = NULL, *xp = NULL, *yp = NULL;
  dt_tensor *wflat = NULL, *wp = NULL, *wcol = NULL, *yw = NULL, *ys = NULL, *y3 = NULL;
  dt_tensor *y = NULL, *aux = NULL;
  int64_t *perm = NULL, *inv = NULL;
  DT__KEEP(dt_reshape(x, 2, (int64_t[]){n_tok, dim}, &flat), flat);
  DT__KEEP(dt_module_forward(router, flat, &logits), logits);
  /* The routing in float32 as transformers computes it (float64 stays float64). */
  dt_dtype rd = dt_tensor_dtype(x) == DT_F64 ? DT_F64 : DT_F32;
  DT__KEEP(dt_to(logits, rd, &lf), lf);
  DT__KEEP(dt_softmax(lf, 1, &probs), probs);
  DT__KEEP(dt_topk(probs, k, 1, true, &w, &idx), w);
  if (!st && !dt_tensor_list_keep(tmp, idx)) st = DT_ERR_NOMEM;
  if (!st && s->renormalise) {
    DT__KEEP(dt_sum_dims(w, 1, (int64_t[]){1}, true, &wsum), wsum);
    DT__KEEP(dt_div(w, wsum, &wn), wn);
    w = wn;
  }
  int64_t n_assign = n_tok * k;
  if (!st) st = expert_order(idx, n_assign, s->n_experts, s->counts, &perm);
  if (!st) {
    inv = dt__alloc(sizeof(int64_t) * (size_t)(n_assign ? n_assign : 1));
    int64_t *token = dt__alloc(sizeof(int64_t) * (size_t)(n_assign ? n_assign : 1));
    if (!inv || !token) st = dt__error(DT_ERR_NOMEM, "MoE: out of memory");
    for (int64_t p = 0; p < n_assign && !st; p++) inv[perm[p]] = p, token[p] = perm[p] / k;
    if (!st) st = dt_from_data(token, 1, &n_assign, DT_I64, &perm_t);
    if (!st && !dt_tensor_list_keep(tmp, perm_t)) st = DT_ERR_NOMEM;
    if (!st) st = dt_from_data(inv, 1, &n_assign, DT_I64, &inv_t);
    if (!st && !dt_tensor_list_keep(tmp, inv_t)) st = DT_ERR_NOMEM;
    /* perm itself (flat assignment indices) for the weights */
    for (int64_t p = 0; p < n_assign && !st; p++) token[p] = perm[p];
    dt_tensor *pa = NULL;
    if (!st) st = dt_from_data(token, 1, &n_assign, DT_I64, &pa);
    if (!st && !dt_tensor_list_keep(tmp, pa)) st = DT_ERR_NOMEM;
    dt__free(token);
    /* The tokens in expert order, each expert's run through it, back in token-slot order. */
    DT__KEEP(dt_index_select(flat, 0, perm_t, &xp), xp);
    dt_tensor *parts[4096];
    int n_parts = 0;
    int64_t at = 0;
    if (!st && s->ep) {
      st = dt__nn_moe_run_expert_parallel(s->ep, experts, xp, s->counts, s->n_experts, tmp, &yp);
      if (!st && !dt_tensor_list_keep(tmp, yp)) st = DT_ERR_NOMEM;
    }
    for (int64_t e = 0; e < s->n_experts && !st && !s->ep; e++) {
      if (s->counts[e] == 0) continue; /* an expert without tokens costs nothing */
      dt_tensor *xe = NULL, *ye = NULL;
      DT__KEEP(dt_narrow(xp, 0, at, s->counts[e], &xe), xe);
      DT__KEEP(dt_module_forward(dt_module_child(experts, (int)e), xe, &ye), ye);
      if (!st) parts[n_parts++] = ye;
      at += s->counts[e];
    }
    /* No tokens at all: a [0, D] result, still joined to the graph. */
    if (!s->ep && n_parts == 0)
      DT__KEEP(dt_mul_scalar(xp, 0.0, &yp), yp);
    else if (!s->ep)
      DT__KEEP(n_parts == 1 ? (yp = dt_tensor_retain(parts[0]), DT_OK)
                            : dt_cat(n_parts, parts, 0, &yp),
               yp);
    DT__KEEP(dt_reshape(w, 1, &n_assign, &wflat), wflat);
    DT__KEEP(dt_index_select(wflat, 0, pa, &wp), wp);
    DT__KEEP(dt_unsqueeze(wp, 1, &wcol), wcol);
    dt_tensor *wc = NULL;
    DT__KEEP(dt_to(wcol, dt_tensor_dtype(yp ? yp : x), &wc), wc);
    DT__KEEP(dt_mul(yp, wc, &yw), yw);
    DT__KEEP(dt_index_select(yw, 0, inv_t, &ys), ys);
    DT__KEEP(dt_reshape(ys, 3, (int64_t[]){n_tok, k, dim}, &y3), y3);
    DT__KEEP(dt_sum_dims(y3, 1, (int64_t[]){1}, false, &y), y);
  }
  if (!st) st = aux_loss(s, lf, probs, n_tok, tmp, &aux);
  if (!st) st = dt_reshape(y, nd, sh, out);
  if (!st) {
    dt_tensor_release(s->aux);
    s->aux = aux;
    s->ran = true;
  } else {
    dt_tensor_release(aux);
  }
  dt__free(perm);
  dt__free(inv);
  dt_tensor_list_release(tmp);
  return st;
}

/* A local x directly. A distributed one (the residual stream of a TP or FSDP model whose
 * experts every rank holds whole) made whole (Replicate on every mesh dim), its local copy
 * through the MoE, and the result put back to x's placements (a Partial dim comes back
 * Replicate); differentiable throughout, as every rank computes the same. Under expert
 * parallelism the input is this rank's own tokens, a local tensor. */
static dt_status moe_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  if (!x) return dt__error(DT_ERR_INVALID, "MoE: input is NULL");
  if (!dt_tensor_is_distributed(x)) return moe_forward_local(m, x, out);
  moe_state *s = dt_module_user(m);
  if (s->ep)
    return dt__error(DT_ERR_UNSUPPORTED, "MoE: a distributed input under expert parallelism "
                                         "(pass this rank's tokens as a local tensor)");
  dt_tensor_list list = DT_TENSOR_LIST_INIT, *tmp = &list;
  dt_status st = DT_OK;
  dt_mesh *mesh = dt_dist_mesh(x);
  int nd = dt_mesh_ndim(mesh);
  dt_placement whole[DT_MESH_MAX_DIMS], back[DT_MESH_MAX_DIMS];
  bool replicated = true, same = true;
  for (int i = 0; i < nd; i++) {
    whole[i] = dt_replicate();
    back[i] = dt_dist_placements(x)[i];
    if (back[i].kind == DT_PARTIAL) back[i] = dt_replicate();
    replicated &= dt_dist_placements(x)[i].kind == DT_REPLICATE;
    same &= back[i].kind == DT_REPLICATE;
  }
  dt_tensor *xr = NULL, *xl = NULL, *yl = NULL, *y = NULL;
  DT__KEEP(replicated ? (xr = dt_tensor_retain(x), DT_OK) : dt_dist_redistribute(x, nd, whole, &xr),
           xr);
  DT__KEEP(dt_dist_to_local(xr, &xl), xl);
  DT__KEEP(moe_forward_local(m, xl, &yl), yl);
  DT__KEEP(dt_dist_from_local(mesh, yl, nd, whole, NULL, &y), y);
  if (!st) st = same ? (*out = dt_tensor_retain(y), DT_OK) : dt_dist_redistribute(y, nd, back, out);
  dt_tensor_list_release(tmp);
  return st;
}

dt_status dt_nn_moe(int64_t dim, const dt_nn_moe_options *options, dt_module **out) {
  static const char fn[] = "dt_nn_moe";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (!options) return dt__error(DT_ERR_INVALID, "%s: options is NULL", fn);
  const dt_nn_moe_options *o = options;
  if (dim < 1 || o->hidden < 1 || o->n_experts < 1 || o->n_experts > 4096)
    return dt__error(DT_ERR_INVALID,
                     "%s: dim %lld and hidden %lld must be >= 1, n_experts %lld in 1..4096", fn,
                     (long long)dim, (long long)o->hidden, (long long)o->n_experts);
  if (o->top_k < 1 || o->top_k > o->n_experts)
    return dt__error(DT_ERR_INVALID, "%s: top_k %lld is outside 1..n_experts (%lld)", fn,
                     (long long)o->top_k, (long long)o->n_experts);
  if (!isfinite(o->router_aux_loss_coef) || o->router_aux_loss_coef < 0 ||
      !isfinite(o->router_z_loss_coef) || o->router_z_loss_coef < 0)
    return dt__error(DT_ERR_INVALID,
                     "%s: router_aux_loss_coef %g and router_z_loss_coef %g must be finite and "
                     ">= 0",
                     fn, o->router_aux_loss_coef, o->router_z_loss_coef);
  moe_state *s = dt__calloc(sizeof *s);
  if (s) s->counts = dt__calloc(sizeof(int64_t) * (size_t)o->n_experts);
  if (!s || !s->counts) {
    moe_release(s);
    return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  }
  s->n_experts = o->n_experts, s->top_k = o->top_k, s->renormalise = o->norm_topk_prob;
  s->aux_coef = o->router_aux_loss_coef, s->z_coef = o->router_z_loss_coef;
  dt_module *m = NULL, *router = NULL, *list = NULL;
  dt_status st = dt_module_create("MoE", moe_forward, s, &m);
  if (st) {
    moe_release(s);
    return st;
  }
  dt__module_set_release(m, moe_release);
  st = dt_nn_linear(dim, o->n_experts, false, o->seed, &router);
  if (!st) st = dt_module_add_child(m, o->router_name ? o->router_name : "gate", router);
  if (!st) st = dt_nn_module_list(0, NULL, &list);
  for (int64_t e = 0; e < o->n_experts && !st; e++) {
    dt_nn_mlp_options mo = {.kind = DT_NN_MLP_SWIGLU, .seed = o->seed + 1 + 3 * (uint64_t)e};
    memcpy(mo.names, o->expert_names, sizeof o->expert_names);
    dt_module *expert = NULL;
    char name[24];
    snprintf(name, sizeof name, "%lld", (long long)e);
    st = dt_nn_transformer_mlp(dim, o->hidden, &mo, &expert);
    if (!st) st = dt_module_add_child(list, name, expert);
  }
  if (!st)
    st = dt_module_add_child(m, o->experts_name ? o->experts_name : "experts", list);
  else
    dt_module_destroy(list);
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status dt_nn_moe_aux_loss(dt_module *moe, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_nn_moe_aux_loss: out is NULL");
  *out = NULL;
  if (!dt__module_released_by(moe, moe_release))
    return dt__error(DT_ERR_INVALID, "dt_nn_moe_aux_loss: %s is not a MoE (dt_nn_moe)",
                     moe ? dt_module_type(moe) : "NULL");
  moe_state *s = dt_module_user(moe);
  if (!s->ran) return dt__error(DT_ERR_INVALID, "dt_nn_moe_aux_loss: the MoE has not run yet");
  *out = dt_tensor_retain(s->aux);
  return DT_OK;
}

int64_t dt_nn_moe_expert_counts(const dt_module *moe, int64_t *counts, int64_t n) {
  if (!dt__module_released_by(moe, moe_release) || n < 0) return -1;
  const moe_state *s = dt_module_user(moe);
  if (!s->ran) return -1;
  int64_t w = n < s->n_experts ? n : s->n_experts;
  for (int64_t e = 0; e < w && counts; e++) counts[e] = s->counts[e];
  return counts ? w : 0;
}

bool dt__nn_is_moe(const dt_module *m) { return dt__module_released_by(m, moe_release); }

dt_status dt__nn_moe_expert_parallel(dt_module *moe, dt_mesh *mesh, int dim) {
  static const char fn[] = "dt_parallel_expert_parallel";
  if (!dt__nn_is_moe(moe)) return dt__error(DT_ERR_INVALID, "%s: not a MoE module", fn);
  moe_state *s = dt_module_user(moe);
  if (s->ep) return dt__error(DT_ERR_INVALID, "%s: the MoE's experts are already split", fn);
  if (!mesh || dim < 0 || dim >= dt_mesh_ndim(mesh))
    return dt__error(DT_ERR_INVALID, "%s: ep dim %d is outside the mesh's %d dims", fn, dim,
                     mesh ? dt_mesh_ndim(mesh) : 0);
  int size = dt_mesh_size(mesh, dim), rank = dt_mesh_coordinate(mesh, dim);
  int64_t chunk = (s->n_experts + size - 1) / size;
  int64_t first = rank * chunk > s->n_experts ? s->n_experts : rank * chunk;
  int64_t last = first + chunk < s->n_experts ? first + chunk : s->n_experts;
  dt__nn_moe_ep *ep = dt__calloc(sizeof *ep);
  if (!ep) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  dt_module *experts = dt_module_child(moe, 1);
  /* Keep this rank's experts, under their global names ("experts.5" stays "experts.5"). */
  for (int64_t e = s->n_experts - 1; e >= 0; e--) {
    if (e >= first && e < last) continue;
    dt_module *gone = NULL;
    dt_status st = dt_module_take_child(experts, (int)e, &gone);
    dt_module_destroy(gone);
    if (st) {
      dt__free(ep);
      return st;
    }
  }
  ep->mesh = dt__mesh_retain(mesh), ep->dim = dim, ep->rank = rank;
  s->ep = ep;
  return DT_OK;
}
