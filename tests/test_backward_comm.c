/* The collectives of distributed backward passes, counted with the comm ledger, against
 * PyTorch DTensor's scheme (no communication PyTorch would not issue), and the gradients'
 * values and placements against the local gradients of the full tensors. Ranks are threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_helpers.h"
#include "reference.h"

/* |a - b| <= tol (1 + |b|) elementwise; a may be distributed (gathered first). */
static bool close_to(dt_tensor *a, dt_tensor *b, double tol) {
  dt_tensor *full = NULL;
  if (dt_dist_mesh(a)) {
    if (dt_dist_full_tensor(a, &full)) return false;
  } else {
    full = dt_tensor_retain(a);
  }
  bool same = dt_tensor_numel(full) == dt_tensor_numel(b);
  double *x = ref_values(full), *y = ref_values(b);
  for (int64_t i = 0; same && i < dt_tensor_numel(b); i++) {
    same = fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i]));
  }
  free(x);
  free(y);
  dt_tensor_release(full);
  return same;
}

static bool placements_are(const dt_tensor *t, int n, const dt_placement *expected) {
  const dt_placement *p = dt_dist_placements(t);
  for (int i = 0; i < n; i++) {
    if (p[i].kind != expected[i].kind) return false;
    if (p[i].kind == DT_SHARD && p[i].dim != expected[i].dim) return false;
  }
  return true;
}

/* ---- TP MLP: colwise Linear, relu, rowwise Linear ------------------------------------------ */

enum { BATCH = 6, IN = 8, HIDDEN = 10, OUT = 8 };

/* loss = sum(linear(relu(linear(x, w1)), w2)); y is redistributed to Replicate as
 * RowwiseParallel's default output layout does. */
static dt_status mlp_loss(dt_tensor *x, dt_tensor *w1, dt_tensor *w2, bool replicate_out,
                          dt_tensor **loss) {
  dt_tensor *h = NULL, *a = NULL, *y = NULL, *yr = NULL;
  dt_status st = dt_linear(x, w1, NULL, &h);
  if (!st) st = dt_relu(h, &a);
  if (!st) st = dt_linear(a, w2, NULL, &y);
  if (!st && replicate_out) {
    /* Partial -> Replicate on every mesh dim, shards kept. */
    int nm = dt_mesh_ndim(dt_dist_mesh(y));
    dt_placement p[2];
    for (int m = 0; m < nm; m++) {
      p[m] = dt_dist_placements(y)[m];
      if (p[m].kind == DT_PARTIAL) p[m] = dt_replicate();
    }
    st = dt_dist_redistribute(y, nm, p, &yr);
  } else if (!st) {
    yr = dt_tensor_retain(y);
  }
  if (!st) st = dt_sum(yr, loss);
  dt_tensor_release(h);
  dt_tensor_release(a);
  dt_tensor_release(y);
  dt_tensor_release(yr);
  return st;
}

/* The local reference: clones of the full x, w1 and w2 that require grad, the loss of the
 * MLP on them (not replicated out) and its backward. */
static dt_status local_mlp_grads(dt_tensor *fx, dt_tensor *fw1, dt_tensor *fw2, dt_tensor **lx,
                                 dt_tensor **lw1, dt_tensor **lw2, dt_tensor **lloss) {
  CHECK(!dt_clone(fx, lx) && !dt_clone(fw1, lw1) && !dt_clone(fw2, lw2), "clone");
  dt_tensor *locals[] = {*lx, *lw1, *lw2};
  for (int i = 0; i < 3; i++) CHECK(!dt_tensor_set_requires_grad(locals[i], true), "rg");
  CHECK(!mlp_loss(*lx, *lw1, *lw2, false, lloss), "local forward");
  CHECK(!dt_backward(*lloss, NULL), "local backward");
  return DT_OK;
}

/* The gradient of param has placements `want` (on nm mesh dims; not checked when NULL) and
 * the values of local's gradient within 1e-5. */
static dt_status check_grad(const char *what, dt_tensor *param, dt_tensor *local, int nm,
                            const dt_placement *want) {
  dt_tensor *g = NULL, *lg = NULL;
  CHECK(!dt_tensor_grad(param, &g) && g && !dt_tensor_grad(local, &lg), "%s: no gradient", what);
  bool placed = !want || placements_are(g, nm, want), near = close_to(g, lg, 1e-5);
  dt_tensor_release(g);
  dt_tensor_release(lg);
  CHECK(placed, "%s placements", what);
  CHECK(near, "%s values", what);
  return DT_OK;
}

/* dt_backward(loss) with a comm ledger running: *ledger (stopped; the caller destroys it)
 * holds its collectives, `table` their formatted table. */
static dt_status counted_backward(dt_tensor *loss, dt_comm_ledger **ledger, char *table,
                                  size_t size) {
  CHECK(!dt_comm_ledger_start(ledger), "ledger");
  CHECK(!dt_backward(loss, NULL), "backward");
  CHECK(!dt_comm_ledger_stop(*ledger), "stop");
  CHECK(!dt_comm_ledger_format(*ledger, table, size), "format");
  return DT_OK;
}

typedef struct mlp_case {
  bool two_d_mesh; /* 2 (dp) x 2 (tp), batch Shard(0) on dp; else 2 (tp) */
  bool seq;        /* activations [BATCH, 3, IN] instead of [BATCH, IN] */
  bool x_grad;     /* x requires grad (enters through from_local) */
  bool replicate_out;
} mlp_case;

static dt_status tp_mlp_rank(dt_comm *world, void *arg) {
  const mlp_case *mc = arg;
  dt_mesh *mesh = NULL;
  int nm = mc->two_d_mesh ? 2 : 1;
  dt_status st =
      dt_mesh_create(world, nm, mc->two_d_mesh ? (int[]){2, 2} : (int[]){2}, NULL, &mesh);
  if (st) return st;
  int xn = mc->seq ? 3 : 2;
  int64_t xshape[3] = {BATCH, 3, IN};
  if (!mc->seq) xshape[1] = IN;
  dt_tensor *fx = ref_random(xn, xshape, DT_F32, -1, 1, 1);
  dt_tensor *fw1 = ref_random(2, (int64_t[]){HIDDEN, IN}, DT_F32, -1, 1, 2);
  dt_tensor *fw2 = ref_random(2, (int64_t[]){OUT, HIDDEN}, DT_F32, -1, 1, 3);
  /* Local reference gradients. */
  dt_tensor *lx = NULL, *lw1 = NULL, *lw2 = NULL, *lloss = NULL;
  CHECK(!local_mlp_grads(fx, fw1, fw2, &lx, &lw1, &lw2, &lloss), "local reference");
  dt_placement r = dt_replicate();
  dt_placement px[2] = {r, r}, pw1[2] = {r, dt_shard(0)}, pw2[2] = {r, dt_shard(1)};
  if (mc->two_d_mesh) px[0] = dt_shard(0);
  dt_tensor *x = NULL, *dx = NULL, *w1 = NULL, *w2 = NULL, *loss = NULL;
  CHECK(!dt_clone(fx, &x) && !dt_tensor_set_requires_grad(x, mc->x_grad), "x");
  CHECK(!dt_dist_distribute_tensor(mesh, x, nm, px + (2 - nm), &dx), "x");
  CHECK(!dt_dist_distribute_tensor(mesh, fw1, nm, pw1 + (2 - nm), &w1), "w1");
  CHECK(!dt_dist_distribute_tensor(mesh, fw2, nm, pw2 + (2 - nm), &w2), "w2");
  CHECK(!dt_tensor_set_requires_grad(w1, true) && !dt_tensor_set_requires_grad(w2, true), "rg");
  CHECK(!mlp_loss(dx, w1, w2, mc->replicate_out, &loss), "forward");
  dt_comm_ledger *ledger = NULL;
  char table[4096];
  CHECK(!counted_backward(loss, &ledger, table, sizeof table), "backward");
  /* PyTorch's scheme: the grad of y is Replicate on tp; the rowwise weight's grad and the
   * colwise activations' grads are sharded locally, the colwise weight's grad is Shard(0)
   * from a local product, and x's grad is a Partial(sum) reduced only where from_local
   * brings it back to Replicate (x here is distributed as a leaf: it stays Partial). */
  int64_t n_coll = dt_comm_ledger_count(ledger, NULL);
  CHECK(n_coll == 0, "case %d%d%d%d: %lld collectives in the TP MLP backward:\n%s", mc->two_d_mesh,
        mc->seq, mc->x_grad, mc->replicate_out, (long long)n_coll, table);
  dt_comm_ledger_destroy(ledger);
  dt_tensor *dist[] = {w1, w2, mc->x_grad ? dx : NULL}, *local[] = {lw1, lw2, lx};
  dt_placement want[3][2] = {
      {px[0], dt_shard(0)}, {px[0], dt_shard(1)}, {px[0], dt_partial(DT_REDUCE_SUM)}};
  if (mc->two_d_mesh) want[0][0] = want[1][0] = dt_partial(DT_REDUCE_SUM);
  for (int i = 0; i < 3; i++) {
    char what[16];
    snprintf(what, sizeof what, "grad %d", i);
    if (dist[i]) CHECK(!check_grad(what, dist[i], local[i], nm, want[i] + (2 - nm)), "%s", what);
  }
  dt_tensor *all[] = {fx, fw1, fw2, lx, lw1, lw2, lloss, x, dx, w1, w2, loss};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(backward_comm, tp_mlp_one_all_reduce) {
  for (int k = 0; k < 16; k++) {
    mlp_case mc = {k & 1, k & 2, k & 4, k & 8};
    cr_assert_eq(dt_comm_spawn(mc.two_d_mesh ? 4 : 2, tp_mlp_rank, &mc), DT_OK, "%s",
                 dt_last_error());
  }
}

/* ---- Attention block as the demo builds it (2 (dp) x 2 (tp)) ------------------------------ */

enum { AB = 4, AT = 6, AD = 8, AH = 2, AHD = 4 };

#define TAPE 192
typedef struct tape {
  dt_tensor *t[TAPE];
  int n;
} tape;
static dt_tensor *keep(tape *tp, dt_tensor *t) {
  if (t && tp->n < TAPE) tp->t[tp->n++] = t;
  return t;
}

static dt_status to_heads(tape *tp, dt_tensor *x, dt_tensor **out) {
  dt_tensor *v = NULL;
  dt_status st = dt_view(x, 4, (int64_t[]){AB, AT, AH, AHD}, &v);
  keep(tp, v);
  if (!st) st = dt_transpose(v, 1, 2, out);
  if (!st) keep(tp, *out);
  return st;
}

static dt_status attention(tape *tp, dt_tensor *x, dt_tensor *const *w, dt_tensor *mask,
                           dt_tensor **out) {
  dt_tensor *q = NULL, *k = NULL, *v = NULL, *qh = NULL, *kh = NULL, *vh = NULL, *kt = NULL,
            *s = NULL, *sm = NULL, *pr = NULL, *a = NULL, *at = NULL, *ar = NULL, *o = NULL;
  dt_status st = dt_linear(x, w[0], NULL, &q);
  keep(tp, q);
  if (!st) st = dt_linear(x, w[1], NULL, &k), keep(tp, k);
  if (!st) st = dt_linear(x, w[2], NULL, &v), keep(tp, v);
  if (!st) st = to_heads(tp, q, &qh);
  if (!st) st = to_heads(tp, k, &kh);
  if (!st) st = to_heads(tp, v, &vh);
  if (!st) st = dt_transpose(kh, 2, 3, &kt), keep(tp, kt);
  if (!st) st = dt_matmul(qh, kt, &s), keep(tp, s);
  if (!st) st = dt_masked_fill(s, mask, -1e9, &sm), keep(tp, sm);
  if (!st) st = dt_softmax(sm, -1, &pr), keep(tp, pr);
  if (!st) st = dt_matmul(pr, vh, &a), keep(tp, a);
  if (!st) st = dt_transpose(a, 1, 2, &at), keep(tp, at);
  if (!st) st = dt_reshape(at, 3, (int64_t[]){AB, AT, AD}, &ar), keep(tp, ar);
  if (!st) st = dt_linear(ar, w[3], NULL, &o), keep(tp, o);
  if (!st) st = dt_add(x, o, out), keep(tp, *out);
  return st;
}

static dt_status attention_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh);
  if (st) return st;
  tape tp = {.n = 0};
  dt_placement R = dt_replicate(), col[2] = {R, dt_shard(0)}, row[2] = {R, dt_shard(1)};
  dt_tensor *w[4], *x = NULL, *mask = NULL, *y = NULL, *loss = NULL;
  for (int i = 0; i < 4; i++) {
    dt_tensor *f = keep(&tp, ref_random(2, (int64_t[]){AD, AD}, DT_F32, -1, 1, 10 + i));
    CHECK(!dt_dist_distribute_tensor(mesh, f, 2, i == 3 ? row : col, &w[i]), "w");
    keep(&tp, w[i]);
    CHECK(!dt_tensor_set_requires_grad(w[i], true), "rg");
  }
  dt_tensor *fx = keep(&tp, ref_random(3, (int64_t[]){AB, AT, AD}, DT_F32, -1, 1, 20));
  CHECK(!dt_dist_distribute_tensor(mesh, fx, 2, (dt_placement[]){dt_shard(0), R}, &x), "x");
  keep(&tp, x);
  CHECK(!dt_tensor_set_requires_grad(x, true), "rg");
  bool causal[AT * AT];
  for (int i = 0; i < AT; i++)
    for (int j = 0; j < AT; j++) causal[i * AT + j] = j > i;
  dt_tensor *fm = NULL;
  CHECK(!dt_from_data(causal, 2, (int64_t[]){AT, AT}, DT_BOOL, &fm), "mask");
  keep(&tp, fm);
  CHECK(!dt_dist_distribute_tensor(mesh, fm, 2, (dt_placement[]){R, R}, &mask), "mask");
  keep(&tp, mask);
  CHECK(!attention(&tp, x, w, mask, &y), "forward");
  CHECK(!dt_sum(y, &loss), "sum");
  keep(&tp, loss);
  dt_comm_ledger *ledger = NULL;
  char table[4096];
  CHECK(!counted_backward(loss, &ledger, table, sizeof table), "backward");
  CHECK(dt_comm_ledger_count(ledger, NULL) == 0, "attention backward:\n%s", table);
  dt_comm_ledger_destroy(ledger);
  for (int i = 0; i < tp.n; i++) dt_tensor_release(tp.t[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(backward_comm, attention_block) {
  cr_assert_eq(dt_comm_spawn(4, attention_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- The demo's model (tools/demo_train.c) at small sizes -------------------------------- */

enum { MV = 10, MF = 16 };

typedef struct model_case {
  bool vocab_parallel; /* token embedding [R, S(0)] instead of [R, R] */
} model_case;

/* The demo-like model's loss; the same code runs on the full tensors and on the distributed
 * ones. w: wq wk wv wo w1 w2 tok pos head ln_w ln_b. */
static dt_status model_loss(tape *tp, dt_tensor *const *w, dt_tensor *idx, dt_tensor *tgt,
                            dt_tensor *mask, dt_tensor **loss) {
  const int64_t ns[1] = {AD};
  dt_tensor *e = NULL, *x = NULL, *h = NULL, *x1 = NULL, *h2 = NULL, *u = NULL, *g = NULL,
            *m = NULL, *x2 = NULL, *hf = NULL, *lg = NULL, *flat = NULL;
  dt_status st = dt_embedding(w[6], idx, &e);
  keep(tp, e);
  if (!st) st = dt_add(e, w[7], &x), keep(tp, x);
  if (!st) st = dt_layer_norm(x, 1, ns, w[9], w[10], 1e-5, &h), keep(tp, h);
  if (!st) st = attention(tp, h, w, mask, &x1); /* residual on h (small change) */
  if (!st) st = dt_layer_norm(x1, 1, ns, w[9], w[10], 1e-5, &h2), keep(tp, h2);
  if (!st) st = dt_linear(h2, w[4], NULL, &u), keep(tp, u);
  if (!st) st = dt_gelu(u, &g), keep(tp, g);
  if (!st) st = dt_linear(g, w[5], NULL, &m), keep(tp, m);
  if (!st) st = dt_add(x1, m, &x2), keep(tp, x2);
  if (!st) st = dt_layer_norm(x2, 1, ns, w[9], w[10], 1e-5, &hf), keep(tp, hf);
  if (!st) st = dt_linear(hf, w[8], NULL, &lg), keep(tp, lg);
  if (!st) st = dt_reshape(lg, 2, (int64_t[]){AB * AT, MV}, &flat), keep(tp, flat);
  if (!st) st = dt_cross_entropy(flat, tgt, loss), keep(tp, *loss);
  return st;
}

static dt_status model_rank(dt_comm *world, void *arg) {
  const model_case *mc = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &mesh);
  if (st) return st;
  tape tp = {.n = 0};
  dt_placement R = dt_replicate(), rep[2] = {R, R}, col[2] = {R, dt_shard(0)},
               row[2] = {R, dt_shard(1)};
  int64_t shapes[11][2] = {{AD, AD}, {AD, AD}, {AD, AD}, {AD, AD}, {MF, AD}, {AD, MF},
                           {MV, AD}, {AT, AD}, {MV, AD}, {AD, 0},  {AD, 0}};
  const dt_placement *pl[11] = {col, col, col, row, col, row, rep, rep, col, rep, rep};
  if (mc->vocab_parallel) pl[6] = col;
  dt_tensor *w[11], *lw[11];
  for (int i = 0; i < 11; i++) {
    int nd = shapes[i][1] ? 2 : 1;
    dt_tensor *f = keep(&tp, ref_random(nd, shapes[i], DT_F32, -1, 1, 30 + i));
    CHECK(!dt_dist_distribute_tensor(mesh, f, 2, pl[i], &w[i]), "w");
    keep(&tp, w[i]);
    CHECK(!dt_tensor_set_requires_grad(w[i], true), "rg");
    CHECK(!dt_clone(f, &lw[i]), "clone");
    keep(&tp, lw[i]);
    CHECK(!dt_tensor_set_requires_grad(lw[i], true), "rg");
  }
  int64_t ids[AB * AT], tg[AB * AT];
  for (int i = 0; i < AB * AT; i++) ids[i] = (i * 7 + 3) % MV, tg[i] = (i * 5 + 1) % MV;
  dt_tensor *fi = NULL, *ft = NULL, *idx = NULL, *tgt = NULL, *fm = NULL, *mask = NULL;
  CHECK(!dt_from_data(ids, 2, (int64_t[]){AB, AT}, DT_I64, &fi), "ids");
  keep(&tp, fi);
  CHECK(!dt_from_data(tg, 1, (int64_t[]){AB * AT}, DT_I64, &ft), "tg");
  keep(&tp, ft);
  CHECK(!dt_dist_distribute_tensor(mesh, fi, 2, (dt_placement[]){dt_shard(0), R}, &idx), "i");
  keep(&tp, idx);
  CHECK(!dt_dist_distribute_tensor(mesh, ft, 2, (dt_placement[]){dt_shard(0), R}, &tgt), "t");
  keep(&tp, tgt);
  bool causal[AT * AT];
  for (int i = 0; i < AT; i++)
    for (int j = 0; j < AT; j++) causal[i * AT + j] = j > i;
  CHECK(!dt_from_data(causal, 2, (int64_t[]){AT, AT}, DT_BOOL, &fm), "mask");
  keep(&tp, fm);
  CHECK(!dt_dist_distribute_tensor(mesh, fm, 2, rep, &mask), "mask");
  keep(&tp, mask);
  /* The local reference: the same model on the full tensors. */
  dt_tensor *lloss = NULL, *loss = NULL;
  CHECK(!model_loss(&tp, lw, fi, ft, fm, &lloss), "local forward");
  CHECK(!dt_backward(lloss, NULL), "local backward");
  CHECK(!model_loss(&tp, w, idx, tgt, mask, &loss), "forward");
  dt_comm_ledger *bwd = NULL;
  char table[4096];
  CHECK(!counted_backward(loss, &bwd, table, sizeof table), "backward");
  if (getenv("DT_TEST_VERBOSE") && dt_comm_rank(world) == 0) printf("%s\n", table);
  /* The embedding's backward (embedding_backward) moves nothing (it all-gathered the indices
   * and the gradient over dp before its op had a sharding rule); its gradient is
   * Partial(sum) over dp, where the batch is sharded. */
  CHECK(!strstr(table, "embedding_backward"), "the embedding backward communicates:\n%s", table);
  /* A layer_norm whose input came Partial(sum) from a residual add all-reduced it in the
   * forward; autograd saves the all-reduced input (what the kernel read), so its backward
   * formula (mul, add.Scalar, div, mean ... on the saved input) communicates nothing. */
  const char *not_under[] = {
      "mul", "add.Scalar", "div", "sub", "mean", "rsqrt", "layer_norm_backward_affine"};
  for (size_t i = 0; i < sizeof not_under / sizeof not_under[0]; i++) {
    char needle[32];
    snprintf(needle, sizeof needle, "\n%s ", not_under[i]);
    CHECK(!strstr(table, needle), "a collective under %s in the backward:\n%s", not_under[i],
          table);
  }
  /* What PyTorch's DTensor does for this model (Megatron's scheme): one all_reduce per
   * layer_norm backward, whose output gradient arrives Partial(sum) over tp from the
   * column-wise linears that read the normalized activations (the lm head for lnf, the MLP's
   * up projection for ln2, q/k/v for ln1), brought to the saved input's Replicate. Nothing
   * else: the row-wise linears, attention and gelu get Replicate or Shard gradients and run
   * locally, the Replicate parameters keep Partial(sum) gradients over dp (reduced when
   * something needs them Replicate: the optimizer or the user), the embedding's backward
   * is local, and no backward formula re-reduces a saved Partial input. */
  CHECK(dt_comm_ledger_count(bwd, "all_reduce") == 3 && dt_comm_ledger_count(bwd, NULL) == 3,
        "the demo model's backward should issue exactly 3 all_reduces (one per layer_norm):\n%s",
        table);
  CHECK(dt_comm_ledger_bytes(bwd, NULL) == 3 * (AB / 2) * AT * AD * 4,
        "each all_reduce moves this rank's [%d, %d, %d] float32 gradient block:\n%s", AB / 2, AT,
        AD, table);
  dt_tensor *gr = NULL;
  CHECK(!dt_tensor_grad(w[6], &gr) && gr, "grad");
  CHECK(dt_dist_placements(gr)[0].kind == DT_PARTIAL, "token embedding grad over dp");
  dt_tensor_release(gr);
  /* Every parameter's gradient, gathered, equals the local one. */
  for (int i = 0; i < 11; i++) {
    dt_tensor *g = NULL, *lg = NULL;
    CHECK(!dt_tensor_grad(w[i], &g) && g && !dt_tensor_grad(lw[i], &lg) && lg, "grad %d", i);
    CHECK(close_to(g, lg, 1e-4), "grad of parameter %d differs from the local one", i);
    dt_tensor_release(g);
    dt_tensor_release(lg);
  }
  dt_comm_ledger_destroy(bwd);
  for (int i = 0; i < tp.n; i++) dt_tensor_release(tp.t[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(backward_comm, demo_model) {
  for (int k = 0; k < 2; k++) {
    model_case mc = {k == 1};
    cr_assert_eq(dt_comm_spawn(4, model_rank, &mc), DT_OK, "%s", dt_last_error());
  }
}

/* ---- x through from_local(Replicate): exactly one all_reduce, of x's gradient ------------- */

static dt_status from_local_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh);
  if (st) return st;
  dt_tensor *fx = ref_random(2, (int64_t[]){BATCH, IN}, DT_F32, -1, 1, 1);
  dt_tensor *fw1 = ref_random(2, (int64_t[]){HIDDEN, IN}, DT_F32, -1, 1, 2);
  dt_tensor *fw2 = ref_random(2, (int64_t[]){OUT, HIDDEN}, DT_F32, -1, 1, 3);
  dt_tensor *lx = NULL, *lw1 = NULL, *lw2 = NULL, *lloss = NULL;
  CHECK(!local_mlp_grads(fx, fw1, fw2, &lx, &lw1, &lw2, &lloss), "local reference");
  dt_tensor *x = NULL, *dx = NULL, *w1 = NULL, *w2 = NULL, *loss = NULL;
  CHECK(!dt_clone(fx, &x) && !dt_tensor_set_requires_grad(x, true), "x");
  CHECK(!dt_dist_from_local(mesh, x, 1, (dt_placement[]){dt_replicate()}, NULL, &dx), "from_local");
  CHECK(!dt_dist_distribute_tensor(mesh, fw1, 1, (dt_placement[]){dt_shard(0)}, &w1), "w1");
  CHECK(!dt_dist_distribute_tensor(mesh, fw2, 1, (dt_placement[]){dt_shard(1)}, &w2), "w2");
  CHECK(!dt_tensor_set_requires_grad(w1, true) && !dt_tensor_set_requires_grad(w2, true), "rg");
  CHECK(!mlp_loss(dx, w1, w2, true, &loss), "forward");
  dt_comm_ledger *ledger = NULL;
  char table[4096];
  CHECK(!counted_backward(loss, &ledger, table, sizeof table), "backward");
  CHECK(dt_comm_ledger_count(ledger, NULL) == 1 && dt_comm_ledger_count(ledger, "all_reduce") == 1,
        "expected one all_reduce:\n%s", table);
  CHECK(dt_comm_ledger_bytes(ledger, NULL) == (int64_t)(BATCH * IN * sizeof(float)),
        "the all_reduce moves x's gradient:\n%s", table);
  dt_comm_ledger_destroy(ledger);
  /* x's gradient is the local tensor's, whole on every rank. */
  CHECK(!check_grad("x grad", x, lx, 0, NULL), "x grad");
  dt_tensor *all[] = {fx, fw1, fw2, lx, lw1, lw2, lloss, x, dx, w1, w2, loss};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(backward_comm, tp_mlp_from_local_one_all_reduce) {
  cr_assert_eq(dt_comm_spawn(2, from_local_rank, NULL), DT_OK, "%s", dt_last_error());
}

/* ---- Vocabulary-parallel embedding: the weight's gradient stays Shard(0), nothing moves --- */

typedef struct embedding_case {
  int ranks;       /* 3: 1-D mesh (10 rows: 4, 3, 3); 4: 2 (dp) x 2 (tp) */
  bool two_d_mesh; /* indices Shard(0) on dp: the gradient is Partial(sum) there */
} embedding_case;

static dt_status embedding_rank(dt_comm *world, void *arg) {
  const embedding_case *ec = arg;
  dt_mesh *mesh = NULL;
  int nm = ec->two_d_mesh ? 2 : 1;
  dt_status st =
      dt_mesh_create(world, nm, ec->two_d_mesh ? (int[]){2, 2} : (int[]){3}, NULL, &mesh);
  if (st) return st;
  enum { V = 10, D = 4, N = 8 };
  dt_tensor *fw = ref_random(2, (int64_t[]){V, D}, DT_F32, -1, 1, 5);
  dt_tensor *fc = ref_random(3, (int64_t[]){2, N / 2, D}, DT_F32, -1, 1, 6);
  int64_t ids[N] = {0, 9, 3, 3, 7, 5, 3, 4}; /* repeated: accumulated */
  dt_tensor *fi = NULL, *lw = NULL, *le = NULL, *lm = NULL, *lloss = NULL;
  CHECK(!dt_from_data(ids, 2, (int64_t[]){2, N / 2}, DT_I64, &fi), "indices");
  CHECK(!dt_clone(fw, &lw) && !dt_tensor_set_requires_grad(lw, true), "lw");
  CHECK(!dt_embedding(lw, fi, &le) && !dt_mul(le, fc, &lm) && !dt_sum(lm, &lloss), "local");
  CHECK(!dt_backward(lloss, NULL), "local backward");
  dt_placement r = dt_replicate();
  dt_placement pw[2] = {r, dt_shard(0)}, pi[2] = {ec->two_d_mesh ? dt_shard(0) : r, r};
  dt_placement pc[2] = {pi[0], r};
  dt_tensor *w = NULL, *idx = NULL, *c = NULL, *e = NULL, *m = NULL, *loss = NULL;
  CHECK(!dt_dist_distribute_tensor(mesh, fw, nm, pw + (2 - nm), &w), "w");
  CHECK(!dt_tensor_set_requires_grad(w, true), "rg");
  CHECK(!dt_dist_distribute_tensor(mesh, fi, nm, pi + (2 - nm), &idx), "idx");
  CHECK(!dt_dist_distribute_tensor(mesh, fc, nm, pc + (2 - nm), &c), "c");
  CHECK(!dt_embedding(w, idx, &e) && !dt_mul(e, c, &m) && !dt_sum(m, &loss), "forward");
  dt_comm_ledger *ledger = NULL;
  char table[4096];
  CHECK(!counted_backward(loss, &ledger, table, sizeof table), "backward");
  CHECK(dt_comm_ledger_count(ledger, NULL) == 0, "vocab-parallel embedding backward:\n%s", table);
  dt_comm_ledger_destroy(ledger);
  /* The gradient keeps the weight's rows sharded. */
  dt_placement want[2] = {dt_partial(DT_REDUCE_SUM), dt_shard(0)};
  CHECK(!check_grad("embedding grad", w, lw, nm, want + (2 - nm)), "embedding grad");
  dt_tensor *all[] = {fw, fc, fi, lw, le, lm, lloss, w, idx, c, e, m, loss};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(backward_comm, vocab_parallel_embedding_grad_stays_sharded) {
  embedding_case one = {3, false}, two = {4, true};
  cr_assert_eq(dt_comm_spawn(one.ranks, embedding_rank, &one), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_spawn(two.ranks, embedding_rank, &two), DT_OK, "%s", dt_last_error());
}
