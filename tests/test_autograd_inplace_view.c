/* Autograd of in-place ops on views of a tensor that requires grad, as PyTorch's (CopySlices):
 * y = 1.5 a (a non-leaf), v = view(y), v op_= view(b). The base's history is rebased (its
 * gradient: the op's backward on the view's region, the incoming gradient elsewhere) and the
 * view's becomes the region of the base's new history. Every case is checked three ways in
 * float64: the loss against the same computation written without in-place ops (the region
 * as a constant 0/1 mask M of the base's shape: y * (M b + 1 - M) for mul_, y + M b for add_,
 * ...), the gradients of a and b against central finite differences, and against the
 * gradients of that reference. Views taken before an in-place op and read after it follow the
 * base's new history. Then the errors (a view of a leaf, a saved value modified), that no node
 * outlives its tensors, and a distributed case on 2 ranks (threads backend). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "comm_helpers.h"
#include "inplace_dist_helpers.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

static uint64_t lcg_state = 0x2545f4914f6cdd1dull;
static double next_uniform(void) { /* in [0, 1) */
  lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static const int64_t SHAPE[2] = {4, 3};

static void release4(dt_tensor *a, dt_tensor *b, dt_tensor *c, dt_tensor *d) {
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_tensor_release(d);
}
#define DT_RELEASE4(a, b, c, d) release4(a, b, c, d)

/* A float64 [4, 3] leaf that requires grad, values in [lo, lo + 1). */
static dt_tensor *leaf(double lo) {
  double values[12];
  for (int i = 0; i < 12; i++) values[i] = lo + next_uniform();
  dt_tensor *t = NULL;
  OK(dt_from_data(values, 2, SHAPE, DT_F64, &t));
  OK(dt_tensor_set_requires_grad(t, true));
  return t;
}

/* ---- Views (each applied the same way to the base and to b) -------------------------------- */

typedef dt_status (*view_fn)(dt_tensor *t, dt_tensor **out);

static dt_status v_rows(dt_tensor *t, dt_tensor **out) { return dt_slice(t, 0, 1, 3, 1, out); }
static dt_status v_step(dt_tensor *t, dt_tensor **out) { return dt_slice(t, 0, 0, 4, 2, out); }
static dt_status v_narrow(dt_tensor *t, dt_tensor **out) { return dt_narrow(t, 1, 1, 2, out); }
static dt_status v_select(dt_tensor *t, dt_tensor **out) { return dt_select(t, 1, 2, out); }
static dt_status v_transpose(dt_tensor *t, dt_tensor **out) { return dt_transpose(t, 0, 1, out); }
static dt_status v_view(dt_tensor *t, dt_tensor **out) {
  return dt_view(t, 2, (int64_t[]){2, 6}, out);
}
static dt_status v_reshape(dt_tensor *t, dt_tensor **out) {
  return dt_reshape(t, 1, (int64_t[]){12}, out);
}
static dt_status v_permute(dt_tensor *t, dt_tensor **out) {
  return dt_permute(t, 2, (int64_t[]){1, 0}, out);
}
/* unsqueeze then squeeze.dim of a dim that is not of size 1 (the identity) then of the new one. */
static dt_status v_squeeze(dt_tensor *t, dt_tensor **out) {
  dt_tensor *u = NULL, *s = NULL;
  dt_status st = dt_unsqueeze(t, 1, &u);
  if (!st) st = dt_squeeze_dim(u, 0, &s);
  if (!st) st = dt_squeeze_dim(s, 1, out);
  dt_tensor_release(u);
  dt_tensor_release(s);
  return st;
}
/* The second of three chunks along dim 1 (a piece of a multi-output view). */
static dt_status v_chunk(dt_tensor *t, dt_tensor **out) {
  dt_tensor *pieces[3] = {0};
  int n = 0;
  dt_status st = dt_chunk(t, 3, 1, pieces, 3, &n);
  if (!st) {
    *out = pieces[1];
    pieces[1] = NULL;
  }
  for (int i = 0; i < 3; i++) dt_tensor_release(pieces[i]);
  return st;
}
/* A view of a view of a view: y^T[:, 1:4][1] = y[1:4, 1]. */
static dt_status v_nested(dt_tensor *t, dt_tensor **out) {
  dt_tensor *tt = NULL, *s = NULL;
  dt_status st = dt_transpose(t, 0, 1, &tt);
  if (!st) st = dt_narrow(tt, 1, 1, 3, &s);
  if (!st) st = dt_select(s, 0, 1, out);
  dt_tensor_release(tt);
  dt_tensor_release(s);
  return st;
}

/* ---- In-place ops and their out-of-place references ---------------------------------------- */

typedef enum { MUL, ADD, SUB, DIV, ADD_S, MUL_S, FILL, COPY } op_kind;

static dt_status apply_inplace(op_kind op, dt_tensor *v, dt_tensor *bv) {
  switch (op) {
  case MUL: return dt_mul_(v, bv);
  case ADD: return dt_add_(v, bv);
  case SUB: return dt_sub_(v, bv);
  case DIV: return dt_div_(v, bv);
  case ADD_S: return dt_add_scalar_(v, 0.75);
  case MUL_S: return dt_mul_scalar_(v, -2.5);
  case FILL: return dt_fill_(v, 0.5);
  case COPY: return dt_copy_(v, bv);
  }
  return DT_ERR_INVALID;
}

/* The 0/1 mask of the elements of a [4, 3] base that vf's view covers (a constant). */
static dt_tensor *mask_of(view_fn vf) {
  dt_tensor *m = NULL, *mv = NULL;
  bool prev = dt_grad_mode_set(false);
  OK(dt_zeros(2, SHAPE, DT_F64, &m));
  OK(vf(m, &mv));
  OK(dt_fill_(mv, 1.0));
  dt_grad_mode_set(prev);
  dt_tensor_release(mv);
  return m;
}

/* y after `vf(y) op_= vf(b)`, written without in-place ops: with the mask M, mul_ is
 * y * (M b + 1 - M), add_ y + M b, fill_ y (1 - M) + 0.5 M, copy_ y (1 - M) + M b, ... */
static dt_status reference(op_kind op, dt_tensor *y, dt_tensor *m, dt_tensor *b, dt_tensor **out) {
  dt_tensor *mb = NULL, *keep = NULL, *t = NULL;
  dt_status st = dt_mul(m, b, &mb);
  if (!st) st = dt_mul_scalar(m, -1.0, &t);
  if (!st) st = dt_add_scalar(t, 1.0, &keep); /* 1 - M */
  dt_tensor_release(t);
  t = NULL;
  if (st) goto done;
  switch (op) {
  case MUL:
  case DIV:
    st = dt_add(mb, keep, &t);
    if (!st) st = op == MUL ? dt_mul(y, t, out) : dt_div(y, t, out);
    break;
  case ADD: st = dt_add(y, mb, out); break;
  case SUB: st = dt_sub(y, mb, out); break;
  case ADD_S:
    st = dt_mul_scalar(m, 0.75, &t);
    if (!st) st = dt_add(y, t, out);
    break;
  case MUL_S:
    st = dt_mul_scalar(m, -3.5, &t);
    dt_tensor *f = NULL;
    if (!st) st = dt_add_scalar(t, 1.0, &f);
    if (!st) st = dt_mul(y, f, out);
    dt_tensor_release(f);
    break;
  case FILL:
  case COPY: {
    dt_tensor *yk = NULL, *fill = NULL;
    st = dt_mul(y, keep, &yk);
    if (!st && op == FILL) st = dt_mul_scalar(m, 0.5, &fill);
    if (!st) st = dt_add(yk, op == FILL ? fill : mb, out);
    dt_tensor_release(yk);
    dt_tensor_release(fill);
    break;
  }
  }
done:
  dt_tensor_release(mb);
  dt_tensor_release(keep);
  dt_tensor_release(t);
  return st;
}

/* sum(y * y * a) + sum(v * v) + sum(e * a): the base, the view and an earlier use of the base
 * (e = 1.25 y, taken before the in-place op) all reach the loss. */
static dt_status loss_of(dt_tensor *y, dt_tensor *v, dt_tensor *e, dt_tensor *a, dt_tensor **out) {
  dt_tensor *yy = NULL, *yya = NULL, *vv = NULL, *ea = NULL, *s1 = NULL, *s2 = NULL, *s3 = NULL,
            *s12 = NULL;
  dt_status st = dt_mul(y, y, &yy);
  if (!st) st = dt_mul(yy, a, &yya);
  if (!st) st = dt_sum(yya, &s1);
  if (!st) st = dt_mul(v, v, &vv);
  if (!st) st = dt_sum(vv, &s2);
  if (!st) st = dt_mul(e, a, &ea);
  if (!st) st = dt_sum(ea, &s3);
  if (!st) st = dt_add(s1, s2, &s12);
  if (!st) st = dt_add(s12, s3, out);
  dt_tensor *all[] = {yy, yya, vv, ea, s1, s2, s3, s12};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  return st;
}

typedef struct view_case {
  const char *name;
  view_fn vf;
  op_kind op;
} view_case;

/* The computation with the in-place op on the view. */
static dt_status loss_inplace(const view_case *c, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  dt_tensor *y = NULL, *e = NULL, *v = NULL, *bv = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = dt_mul_scalar(y, 1.25, &e);
  if (!st) st = c->vf(y, &v);
  if (!st) st = c->vf(b, &bv);
  if (!st) st = apply_inplace(c->op, v, bv);
  if (!st) st = loss_of(y, v, e, a, out);
  DT_RELEASE4(y, e, v, bv);
  return st;
}

static dt_status loss_reference(const view_case *c, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  dt_tensor *m = mask_of(c->vf);
  dt_tensor *y = NULL, *e = NULL, *yn = NULL, *v = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = dt_mul_scalar(y, 1.25, &e);
  if (!st) st = reference(c->op, y, m, b, &yn);
  if (!st) st = c->vf(yn, &v);
  if (!st) st = loss_of(yn, v, e, a, out);
  DT_RELEASE4(y, e, yn, v);
  dt_tensor_release(m);
  return st;
}

/* ---- The checks ------------------------------------------------------------------------------ */

typedef dt_status (*loss_fn)(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out);

static double value_of(loss_fn fn, const void *ctx, dt_tensor *a, dt_tensor *b) {
  dt_tensor *loss = NULL;
  OK(fn(ctx, a, b, &loss));
  double v = 0;
  OK(dt_tensor_to_doubles(loss, &v, 1));
  dt_tensor_release(loss);
  return v;
}

/* The loss and the gradients of a and b (zeros when none reached it). */
static double grads_of(loss_fn fn, const void *ctx, dt_tensor *a, dt_tensor *b, double ga[12],
                       double gb[12]) {
  dt_tensor *loss = NULL;
  OK(fn(ctx, a, b, &loss));
  cr_assert(dt_tensor_requires_grad(loss));
  double v = 0;
  OK(dt_tensor_to_doubles(loss, &v, 1));
  OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  dt_tensor *leaves[2] = {a, b};
  double *out[2] = {ga, gb};
  for (int l = 0; l < 2; l++) {
    dt_tensor *g = NULL;
    OK(dt_tensor_grad(leaves[l], &g));
    for (int i = 0; i < 12; i++) out[l][i] = 0;
    if (g) OK(dt_tensor_to_doubles(g, out[l], 12));
    dt_tensor_release(g);
  }
  return v;
}

/* A copy of a leaf (same values, its own storage and .grad). */
static dt_tensor *twin(dt_tensor *t) {
  double values[12];
  OK(dt_tensor_to_doubles(t, values, 12));
  dt_tensor *c = NULL;
  OK(dt_from_data(values, 2, SHAPE, DT_F64, &c));
  OK(dt_tensor_set_requires_grad(c, true));
  return c;
}

static bool close_to(double got, double want, double tol) {
  return fabs(got - want) <= tol * (1 + fabs(want));
}

/* fn's gradients against finite differences (fn evaluated under no_grad, where the in-place
 * ops are plain writes) and, when ref is not NULL, fn's loss and gradients against ref's. */
static void check(const char *name, loss_fn fn, loss_fn ref, const void *ctx) {
  dt_tensor *a = leaf(-0.5), *b = leaf(0.5);
  double ga[12], gb[12];
  double loss = grads_of(fn, ctx, a, b, ga, gb);
  if (ref) {
    dt_tensor *a2 = twin(a), *b2 = twin(b);
    double ra[12], rb[12];
    double want = grads_of(ref, ctx, a2, b2, ra, rb);
    cr_assert(close_to(loss, want, 1e-12), "%s: loss %.17g, reference %.17g", name, loss, want);
    for (int i = 0; i < 12; i++) {
      cr_assert(close_to(ga[i], ra[i], 1e-12), "%s: a.grad[%d] = %.17g, reference %.17g", name, i,
                ga[i], ra[i]);
      cr_assert(close_to(gb[i], rb[i], 1e-12), "%s: b.grad[%d] = %.17g, reference %.17g", name, i,
                gb[i], rb[i]);
    }
    dt_tensor_release(a2);
    dt_tensor_release(b2);
  }
  bool prev = dt_grad_mode_set(false);
  dt_tensor *leaves[2] = {a, b};
  double *got[2] = {ga, gb};
  for (int l = 0; l < 2; l++) {
    for (int64_t e = 0; e < 12; e++) {
      int64_t index[2] = {e / 3, e % 3};
      const double h = 1e-6;
      double v0 = 0;
      OK(dt_tensor_get(leaves[l], index, &v0));
      OK(dt_tensor_set(leaves[l], index, v0 + h));
      double up = value_of(fn, ctx, a, b);
      OK(dt_tensor_set(leaves[l], index, v0 - h));
      double down = value_of(fn, ctx, a, b);
      OK(dt_tensor_set(leaves[l], index, v0));
      double want = (up - down) / (2 * h);
      cr_assert(close_to(got[l][e], want, 1e-6),
                "%s: d loss / d %c[%lld] = %.12g, finite differences %.12g", name, "ab"[l],
                (long long)e, got[l][e], want);
    }
  }
  dt_grad_mode_set(prev);
  dt_tensor_release(a);
  dt_tensor_release(b);
  cr_assert_eq(dt_autograd_live_nodes(), 0, "%s: nodes left alive", name);
}

static dt_status case_inplace(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return loss_inplace(ctx, a, b, out);
}
static dt_status case_reference(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  return loss_reference(ctx, a, b, out);
}

static void check_view_case(const char *name, view_fn vf, op_kind op) {
  view_case c = {name, vf, op};
  check(name, case_inplace, case_reference, &c);
}

static const struct {
  const char *name;
  view_fn vf;
} VIEWS[] = {{"slice", v_rows},
             {"slice step 2", v_step},
             {"narrow", v_narrow},
             {"select", v_select},
             {"transpose", v_transpose},
             {"view", v_view},
             {"reshape (a view)", v_reshape},
             {"view of a view of a view", v_nested},
             {"permute", v_permute},
             {"unsqueeze and squeeze.dim", v_squeeze},
             {"a chunk's piece", v_chunk}};
#define N_VIEWS (sizeof VIEWS / sizeof VIEWS[0])

static void check_op_on_every_view(const char *op_name, op_kind op) {
  for (size_t i = 0; i < N_VIEWS; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s on %s", op_name, VIEWS[i].name);
    check_view_case(name, VIEWS[i].vf, op);
  }
}

Test(autograd_inplace_view, mul_) { check_op_on_every_view("mul_", MUL); }
Test(autograd_inplace_view, add_) { check_op_on_every_view("add_", ADD); }
Test(autograd_inplace_view, sub_) { check_op_on_every_view("sub_", SUB); }
Test(autograd_inplace_view, div_) { check_op_on_every_view("div_", DIV); }
Test(autograd_inplace_view, add_scalar_) { check_op_on_every_view("add_.Scalar", ADD_S); }
Test(autograd_inplace_view, mul_scalar_) { check_op_on_every_view("mul_.Scalar", MUL_S); }
Test(autograd_inplace_view, fill_) { check_op_on_every_view("fill_", FILL); }
Test(autograd_inplace_view, copy_) { check_op_on_every_view("copy_", COPY); }

/* Several in-place ops in a row: on a view (mul_, add_.Scalar), on a view of that view
 * (add_.Scalar, its history now the region of the base's new one), on the base itself (mul_.Scalar,
 * its history a copy-slices node), then views taken afresh. Reference: the masks applied in turn.
 */
static dt_status v_row_col0(dt_tensor *t, dt_tensor **out) {
  dt_tensor *r = NULL;
  dt_status st = v_rows(t, &r);
  if (!st) st = dt_select(r, 1, 0, out);
  dt_tensor_release(r);
  return st;
}

static dt_status chain_inplace(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)ctx;
  dt_tensor *y = NULL, *e = NULL, *v = NULL, *bv = NULL, *w = NULL, *v2 = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = dt_mul_scalar(y, 1.25, &e);
  if (!st) st = v_rows(y, &v);
  dt_tensor *b2 = NULL; /* a non-leaf argument: its edge goes to a node */
  if (!st) st = dt_mul_scalar(b, 0.5, &b2);
  if (!st) st = v_rows(b2, &bv);
  dt_tensor_release(b2);
  if (!st) st = dt_mul_(v, bv);
  if (!st) st = dt_add_scalar_(v, 0.75); /* v's history is now a view-of-base node */
  if (!st) st = dt_select(v, 1, 0, &w);
  if (!st) st = dt_add_scalar_(w, 0.75);
  if (!st) st = dt_mul_scalar_(y, 3.0);
  if (!st) st = v_row_col0(y, &v2);
  if (!st) st = loss_of(y, v2, e, a, out);
  DT_RELEASE4(y, e, v, bv);
  DT_RELEASE4(w, v2, NULL, NULL);
  return st;
}

static dt_status chain_reference(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)ctx;
  dt_tensor *m1 = mask_of(v_rows), *m2 = mask_of(v_row_col0);
  dt_tensor *y = NULL, *e = NULL, *y0 = NULL, *y1 = NULL, *y2 = NULL, *y3 = NULL, *v2 = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = dt_mul_scalar(y, 1.25, &e);
  dt_tensor *b2 = NULL;
  if (!st) st = dt_mul_scalar(b, 0.5, &b2);
  if (!st) st = reference(MUL, y, m1, b2, &y0);
  dt_tensor_release(b2);
  if (!st) st = reference(ADD_S, y0, m1, b, &y1); /* + 0.75 M1 */
  if (!st) st = reference(ADD_S, y1, m2, b, &y2); /* + 0.75 M2 */
  if (!st) st = dt_mul_scalar(y2, 3.0, &y3);
  if (!st) st = v_row_col0(y3, &v2);
  if (!st) st = loss_of(y3, v2, e, a, out);
  DT_RELEASE4(y, e, y1, y2);
  DT_RELEASE4(y3, v2, m1, m2);
  dt_tensor_release(y0);
  return st;
}

/* Views taken before an in-place op on an overlapping view (w = y[2:4], then y[1:3] *= b) or
 * on the base itself (u = y^T, then y *= 3) and used after it read the base's new history, as
 * PyTorch regenerates a view's grad_fn. Reference: the masks, views taken afterwards. */
static dt_status v_rows24(dt_tensor *t, dt_tensor **out) { return dt_slice(t, 0, 2, 4, 1, out); }

/* loss_of(y, e, y, a) + sum(f f): e and f are w read after the first and the second op. */
static dt_status stale_loss(dt_tensor *y, dt_tensor *e, dt_tensor *f, dt_tensor *a,
                            dt_tensor **out) {
  dt_tensor *l1 = NULL, *ff = NULL, *l2 = NULL;
  dt_status st = loss_of(y, e, y, a, &l1);
  if (!st) st = dt_mul(f, f, &ff);
  if (!st) st = dt_sum(ff, &l2);
  if (!st) st = dt_add(l1, l2, out);
  DT_RELEASE4(l1, ff, l2, NULL);
  return st;
}

static dt_status stale_inplace(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)ctx;
  dt_tensor *y = NULL, *w = NULL, *u = NULL, *v = NULL, *bv = NULL, *e = NULL, *f = NULL,
            *uu = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = v_rows24(y, &w);
  if (!st) st = v_transpose(y, &u);
  if (!st) st = v_rows(y, &v);
  if (!st) st = v_rows(b, &bv);
  if (!st) st = dt_mul_(v, bv);            /* rows 1..2: w's row 0 changes */
  if (!st) st = dt_mul_scalar(w, 1.0, &e); /* w read after it */
  if (!st) st = dt_mul_scalar_(y, 3.0);    /* the base itself */
  if (!st) st = dt_mul_scalar(w, 1.0, &f); /* w read after that */
  if (!st) st = v_transpose(u, &uu);       /* u (= y^T, taken first) read after both */
  if (!st) st = stale_loss(uu, e, f, a, out);
  DT_RELEASE4(y, w, u, v);
  DT_RELEASE4(bv, e, f, uu);
  return st;
}

static dt_status stale_reference(const void *ctx, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
  (void)ctx;
  dt_tensor *m = mask_of(v_rows);
  dt_tensor *y = NULL, *y1 = NULL, *y2 = NULL, *e = NULL, *f = NULL;
  dt_status st = dt_mul_scalar(a, 1.5, &y);
  if (!st) st = reference(MUL, y, m, b, &y1);
  if (!st) st = v_rows24(y1, &e);
  if (!st) st = dt_mul_scalar(y1, 3.0, &y2);
  if (!st) st = v_rows24(y2, &f);
  if (!st) st = stale_loss(y2, e, f, a, out);
  DT_RELEASE4(y, y1, y2, e);
  DT_RELEASE4(f, m, NULL, NULL);
  return st;
}

Test(autograd_inplace_view, views_taken_before_the_op_read_the_new_history) {
  check("stale views", stale_inplace, stale_reference, NULL);
}

Test(autograd_inplace_view, chain_of_inplace_ops_on_views_and_base) {
  check("chain", chain_inplace, chain_reference, NULL);
}

/* The view's own gradient: retain_grad on the view modified in place keeps the gradient of
 * its new value; v = y[1:3] (y = 2 a), v *= 3, loss = sum(v) + sum(y): a.grad is 2 outside the
 * rows and 6 + 6 = 12 in them (y's rows are v), v.grad is 1 (y's history runs through the
 * base's copy-slices node, not through v), as PyTorch's. */
Test(autograd_inplace_view, view_gradient_and_retain_grad) {
  dt_tensor *a = leaf(0), *y = NULL, *v = NULL, *s1 = NULL, *s2 = NULL, *loss = NULL, *g = NULL;
  OK(dt_mul_scalar(a, 2.0, &y));
  OK(v_rows(y, &v));
  OK(dt_tensor_retain_grad(v));
  OK(dt_mul_scalar_(v, 3.0));
  OK(dt_sum(v, &s1));
  OK(dt_sum(y, &s2));
  OK(dt_add(s1, s2, &loss));
  OK(dt_backward(loss, NULL));
  double got[12];
  OK(dt_tensor_grad(a, &g));
  OK(dt_tensor_to_doubles(g, got, 12));
  for (int i = 0; i < 12; i++) {
    double want = (i >= 3 && i < 9) ? 12.0 : 2.0;
    cr_assert_float_eq(got[i], want, 1e-12, "a.grad[%d] = %g, want %g", i, got[i], want);
  }
  dt_tensor_release(g);
  OK(dt_tensor_grad(v, &g));
  cr_assert_not_null(g);
  OK(dt_tensor_to_doubles(g, got, 6));
  for (int i = 0; i < 6; i++) cr_assert_float_eq(got[i], 1.0, 1e-12);
  dt_tensor_release(g);
  DT_RELEASE4(loss, s1, s2, v);
  DT_RELEASE4(y, a, NULL, NULL);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

/* As PyTorch: a view of a leaf that requires grad is refused (nothing written), directly or
 * through a chain of views; under no_grad it is an update. */
Test(autograd_inplace_view, view_of_a_leaf_is_refused) {
  dt_tensor *a = leaf(0), *v = NULL, *w = NULL;
  double before[12], after[12];
  OK(dt_tensor_to_doubles(a, before, 12));
  OK(v_rows(a, &v));
  cr_assert_eq(dt_mul_scalar_(v, 2.0), DT_ERR_INVALID);
  const char *msg = dt_last_error();
  cr_assert(strstr(msg, "mul_.Scalar") && strstr(msg, "view of a leaf") && strstr(msg, "[4, 3]"),
            "%s", msg);
  OK(dt_transpose(v, 0, 1, &w));
  cr_assert_eq(dt_fill_(w, 0.0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "fill_.Scalar"), "%s", dt_last_error());
  OK(dt_tensor_to_doubles(a, after, 12));
  cr_assert_arr_eq(before, after, sizeof before);
  bool prev = dt_grad_mode_set(false);
  OK(dt_fill_(w, 0.0));
  dt_grad_mode_set(prev);
  cr_assert(dt_tensor_is_leaf(a) && dt_tensor_requires_grad(a));
  DT_RELEASE4(w, v, a, NULL);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

/* A value an earlier node saved (z = y * y saved y) and that the in-place op on a view of y
 * then modified fails the backward, naming that node, as PyTorch's version check. */
Test(autograd_inplace_view, saved_base_modified_through_view_fails_backward) {
  dt_tensor *a = leaf(0), *y = NULL, *z = NULL, *v = NULL, *loss = NULL;
  OK(dt_mul_scalar(a, 2.0, &y));
  OK(dt_mul(y, y, &z));
  OK(dt_narrow(y, 1, 0, 1, &v));
  OK(dt_add_scalar_(v, 1.0));
  OK(dt_sum(z, &loss));
  cr_assert_eq(dt_backward(loss, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "modified in place"),
            "%s", dt_last_error());
  DT_RELEASE4(loss, z, v, y);
  dt_tensor_release(a);
  cr_assert_eq(dt_autograd_live_nodes(), 0);
}

/* Graphs that are dropped without a backward free every node (no reference cycle): the view
 * as its own argument, an argument computed from the view, and views of views. */
Test(autograd_inplace_view, dropped_graphs_free_every_node) {
  dt_tensor *a = leaf(0), *b = leaf(1);
  for (int round = 0; round < 4; round++) {
    dt_tensor *y = NULL, *v = NULL, *w = NULL, *u = NULL, *t = NULL;
    OK(dt_mul_scalar(a, 2.0, &y));
    OK(v_rows(y, &v));
    switch (round) {
    case 0: OK(dt_add_(v, v)); break;
    case 1:
      OK(dt_mul(v, v, &w)); /* saves v */
      OK(dt_add_(v, w));
      break;
    case 2:
      OK(dt_select(v, 1, 1, &w));
      OK(dt_mul(w, w, &u)); /* saves w, whose history saved v, whose history saved y */
      OK(dt_mul_(w, u));
      OK(dt_add_(y, b));
      break;
    case 3:
      OK(dt_transpose(y, 0, 1, &w));
      OK(v_rows(b, &t));
      OK(dt_mul_(v, t));
      OK(dt_narrow(w, 0, 0, 2, &u));
      OK(dt_add_scalar_(u, 1.0));
      break;
    }
    DT_RELEASE4(y, v, w, u);
    dt_tensor_release(t);
    cr_assert_eq(dt_autograd_live_nodes(), 0, "round %d: %lld nodes left", round,
                 (long long)dt_autograd_live_nodes());
  }
  DT_RELEASE4(a, b, NULL, NULL);
}

/* A view of a tensor that does not require grad, modified with an argument that does, records
 * on the view only (the base does not start requiring grad), as before. */
Test(autograd_inplace_view, view_of_a_plain_tensor_records_on_the_view) {
  dt_tensor *a = leaf(0), *x = NULL, *v = NULL, *loss = NULL, *g = NULL, *av = NULL;
  OK(dt_zeros(2, SHAPE, DT_F64, &x));
  OK(v_rows(x, &v));
  OK(v_rows(a, &av));
  OK(dt_add_(v, av));
  cr_assert(dt_tensor_requires_grad(v) && !dt_tensor_requires_grad(x));
  OK(dt_sum(v, &loss));
  OK(dt_backward(loss, NULL));
  OK(dt_tensor_grad(a, &g));
  double got[12];
  OK(dt_tensor_to_doubles(g, got, 12));
  for (int i = 0; i < 12; i++) cr_assert_float_eq(got[i], (i >= 3 && i < 9) ? 1.0 : 0.0, 1e-12);
  DT_RELEASE4(g, loss, v, av);
  DT_RELEASE4(x, a, NULL, NULL);
}

/* ---- Distributed (threads backend, 2 ranks) ------------------------------------------------
 * x, w [5, 3] Shard(0) (uneven: 3 + 2 rows), y = 2 x, v = y[:, 0:2] (a local view: dim 1 is
 * not sharded), v *= w[:, 0:2], loss = sum(y * y) + sum(v * v): in columns 0..1 y = v = 2 x w,
 * so d/dx = 16 x w^2 and d/dw = 16 x^2 w; in column 2 y = 2 x, d/dx = 8 x, d/dw = 0. */

static dt_status rank_view(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *v = NULL, *wv = NULL;
  RANK_OK(dist_leaf(mesh, X, &x));
  RANK_OK(dist_leaf(mesh, W, &w));
  RANK_OK(dt_mul_scalar(x, 2.0, &y));
  RANK_OK(dt_narrow(y, 1, 0, 2, &v));
  RANK_OK(dt_narrow(w, 1, 0, 2, &wv));
  RANK_OK(dt_mul_(v, wv));
  dt_tensor *yy = NULL, *vv = NULL, *s1 = NULL, *s2 = NULL, *loss = NULL;
  RANK_OK(dt_mul(y, y, &yy));
  RANK_OK(dt_sum(yy, &s1));
  RANK_OK(dt_mul(v, v, &vv));
  RANK_OK(dt_sum(vv, &s2));
  RANK_OK(dt_add(s1, s2, &loss));
  RANK_OK(dt_backward(loss, NULL));
  double gx[15], gw[15];
  for (int i = 0; i < 15; i++) {
    bool in_view = i % 3 < 2;
    gx[i] = in_view ? 16 * X[i] * W[i] * W[i] : 8 * X[i];
    gw[i] = in_view ? 16 * X[i] * X[i] * W[i] : 0;
  }
  RANK_OK(check_dist_grad("x.grad", x, gx));
  RANK_OK(check_dist_grad("w.grad", w, gw));
  dt_tensor *rows = NULL; /* a view of the leaf x: refused as for a local leaf */
  RANK_OK(dt_narrow(x, 1, 1, 1, &rows));
  RANK_CHECK(dt_mul_scalar_(rows, 2.0) == DT_ERR_INVALID, "in place on a view of a leaf");
  /* A Partial base: not recorded yet, refused before anything is written. */
  dt_tensor *local = NULL, *p = NULL, *py = NULL, *pv = NULL;
  RANK_OK(dt_full(2, (int64_t[]){2, 3}, 1.0, DT_F64, &local));
  RANK_OK(dt_tensor_set_requires_grad(local, true));
  RANK_OK(
      dt_dist_from_local(mesh, local, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, NULL, &p));
  RANK_OK(dt_mul_scalar(p, 2.0, &py));
  RANK_OK(dt_narrow(py, 1, 0, 2, &pv));
  dt_status st = dt_mul_scalar_(pv, 3.0);
  RANK_CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "Partial"),
             "in place on a view of a Partial tensor: %d %s", (int)st, dt_last_error());
  dt_tensor *all[] = {pv, py, p, local, rows, loss, s1, s2, yy, vv, wv, v, y, w, x};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(autograd_inplace_view, distributed_on_two_ranks) { SPAWN_OK(RANKS, rank_view, NULL); }
