/* Mixed-precision training of a causal attention block on the CPU, as an engine would write
 * it: float32 master weights (the optimizers take float32 parameters), a bfloat16 copy of each
 * made by dt_to inside the step (recorded by autograd, so the gradient comes back float32 on
 * the master), the block computed in bfloat16 (layer_norm, q/k/v projections, causal
 * dt_scaled_dot_product_attention over 2 heads, output projection, residual, head), the
 * logits cast to float32 for cross_entropy (as torch.autocast does), AdamW on the masters,
 * 2 intra-op threads. Checks that
 *   - the bfloat16 attention output is within one rounding to bfloat16 (2^-8 relative, each
 *     element) of the float32 attention run on the same rounded inputs, and the gradients of
 *     q, k, v within 2^-7 of each gradient's largest element (the backward reads the rounded
 *     output), the first query's dq (one key: exactly 0) within 2^-14,
 *   - the loss after STEPS steps is well below the first step's.
 * Exits 0 when both hold, 1 otherwise (ctest example_bf16_attention_train). */
#include <dtensor/dtensor.h>
#include <math.h>
#include <stdio.h>

enum { B = 2, T = 8, H = 2, E = 8, D = H * E, V = 8, NP = 7, STEPS = 25 };
enum { N_QKV = B * H * T * E };

#define CHECK(call)                                                                                \
  do {                                                                                             \
    if ((call) != DT_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, dt_last_error());                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static void release_all(dt_tensor **t, int n) {
  for (int i = 0; i < n; i++) {
    dt_tensor_release(t[i]);
    t[i] = NULL;
  }
}

/* A [B, T, D] projection as [B, H, T, E]: linear, split the heads, heads before time. */
static dt_status heads(dt_tensor *x, dt_tensor *w, dt_tensor **out) {
  dt_tensor *y = NULL, *r = NULL;
  dt_status st = dt_linear(x, w, NULL, &y);
  if (!st) st = dt_reshape(y, 4, (int64_t[]){B, T, H, E}, &r);
  if (!st) st = dt_transpose(r, 1, 2, out);
  dt_tensor_release(y);
  dt_tensor_release(r);
  return st;
}

/* master[NP] float32: ln_w, ln_b, wq, wk, wv, wo, w_head. Returns float32 logits [B*T, V];
 * qkv (may be NULL) receives the bfloat16 q, k, v of the attention. */
static dt_status forward(dt_tensor *const *master, dt_tensor *x32, dt_tensor **logits,
                         dt_tensor *qkv[3]) {
  dt_tensor *p[NP] = {0};
  dt_tensor *t[12] = {0}; /* x, h, q, k, v, a, at, ac, o, r, y, yr */
  dt_status st = DT_OK;
  for (int i = 0; i < NP && !st; i++) st = dt_to(master[i], DT_BF16, &p[i]); /* recorded */
  if (!st) st = dt_to(x32, DT_BF16, &t[0]);
  if (!st) st = dt_layer_norm(t[0], 1, (int64_t[]){D}, p[0], p[1], 1e-5, &t[1]);
  if (!st) st = heads(t[1], p[2], &t[2]);
  if (!st) st = heads(t[1], p[3], &t[3]);
  if (!st) st = heads(t[1], p[4], &t[4]);
  if (!st)
    st = dt_scaled_dot_product_attention(t[2], t[3], t[4], NULL,
                                         &(dt_attention_options){.is_causal = true}, &t[5], NULL);
  if (!st) st = dt_transpose(t[5], 1, 2, &t[6]); /* [B, T, H, E] */
  if (!st) st = dt_reshape(t[6], 3, (int64_t[]){B, T, D}, &t[7]);
  if (!st) st = dt_linear(t[7], p[5], NULL, &t[8]);
  if (!st) st = dt_add(t[8], t[0], &t[9]); /* residual */
  if (!st) st = dt_linear(t[9], p[6], NULL, &t[10]);
  if (!st) st = dt_reshape(t[10], 2, (int64_t[]){B * T, V}, &t[11]);
  if (!st) st = dt_to(t[11], DT_F32, logits); /* the loss in float32 */
  if (!st && qkv)
    for (int i = 0; i < 3; i++) qkv[i] = dt_tensor_retain(t[2 + i]);
  release_all(p, NP);
  release_all(t, 12);
  return st;
}

/* Runs the attention on q, k, v (any floating dtype), then the backward of sum(out * gout):
 * out and the three gradients as doubles in logical order. */
static dt_status attention_and_grads(dt_tensor *const qkv[3], dt_tensor *gout, double *out,
                                     double *grads[3]) {
  dt_tensor *leaf[3] = {0}, *a = NULL, *prod = NULL, *s = NULL, *g = NULL;
  dt_status st = DT_OK;
  for (int i = 0; i < 3 && !st; i++) {
    st = dt_detach(qkv[i], &leaf[i]); /* a leaf of its own, off the block's graph */
    if (!st) st = dt_tensor_set_requires_grad(leaf[i], true);
  }
  if (!st)
    st = dt_scaled_dot_product_attention(leaf[0], leaf[1], leaf[2], NULL,
                                         &(dt_attention_options){.is_causal = true}, &a, NULL);
  if (!st) st = dt_tensor_to_doubles(a, out, N_QKV);
  if (!st) st = dt_mul(a, gout, &prod);
  if (!st) st = dt_sum(prod, &s);
  if (!st) st = dt_backward(s, NULL);
  for (int i = 0; i < 3 && !st; i++) {
    st = dt_tensor_grad(leaf[i], &g);
    if (!st) st = dt_tensor_to_doubles(g, grads[i], N_QKV);
    dt_tensor_release(g);
    g = NULL;
  }
  release_all(leaf, 3);
  dt_tensor_release(a);
  dt_tensor_release(prod);
  dt_tensor_release(s);
  return st;
}

/* Largest |x - ref| / |ref| over elements whose ref is not 0 (an exact 0 must stay 0). */
static double max_rel_err(const double *x, const double *ref, int n) {
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double e = ref[i] != 0 ? fabs(x[i] - ref[i]) / fabs(ref[i]) : (x[i] != 0 ? INFINITY : 0);
    worst = fmax(worst, e);
  }
  return worst;
}

/* Largest |x - ref| over the largest |ref|: the error on the tensor's scale. */
static double max_err_of_scale(const double *x, const double *ref, int n) {
  double top = 0, err = 0;
  for (int i = 0; i < n; i++) {
    top = fmax(top, fabs(ref[i]));
    err = fmax(err, fabs(x[i] - ref[i]));
  }
  return top > 0 ? err / top : err;
}

/* The bfloat16 attention (forward and backward) against the float32 one on the same
 * bfloat16-rounded q, k, v and output gradient. */
static int check_attention(dt_tensor *const qkv16[3]) {
  static double out16[N_QKV], out32[N_QKV], g16[3][N_QKV], g32[3][N_QKV];
  dt_tensor *qkv32[3] = {0}, *gout32 = NULL, *gout16 = NULL;
  for (int i = 0; i < 3; i++) CHECK(dt_to(qkv16[i], DT_F32, &qkv32[i])); /* exact */
  CHECK(dt_randn(4, (int64_t[]){B, H, T, E}, DT_BF16, 99, &gout16));
  CHECK(dt_to(gout16, DT_F32, &gout32));
  CHECK(attention_and_grads(qkv16, gout16, out16, (double *[]){g16[0], g16[1], g16[2]}));
  CHECK(attention_and_grads(qkv32, gout32, out32, (double *[]){g32[0], g32[1], g32[2]}));
  release_all(qkv32, 3);
  dt_tensor_release(gout16);
  dt_tensor_release(gout32);
  /* The output is float32's rounded once to bfloat16 (8 significant bits): within half a unit
   * in the last place, 2^-8 relative, element by element. The backward reads that rounded
   * output (D = rowsum(dO * out)) and rounds each gradient once: within 2^-7 of each
   * gradient's largest element. The first query sees one key (causal), so its probability is
   * 1 and its dq is exactly 0 in exact arithmetic: within 2^-14 of dq's scale. */
  double err_out = max_rel_err(out16, out32, N_QKV), err_g = 0, dq0 = 0, dq_top = 0;
  for (int i = 0; i < 3; i++) err_g = fmax(err_g, max_err_of_scale(g16[i], g32[i], N_QKV));
  for (int i = 0; i < N_QKV; i++) {
    dq_top = fmax(dq_top, fabs(g32[0][i]));
    if (i % (T * E) < E) dq0 = fmax(dq0, fabs(g16[0][i])); /* query 0 of each (b, h) */
  }
  printf("bf16 attention vs float32 on the same rounded inputs: out max rel err %.3g "
         "(bound 2^-8 = %.3g); dq/dk/dv max err / largest %.3g (bound 2^-7 = %.3g); "
         "first query's |dq| %.3g\n",
         err_out, 0x1p-8, err_g, 0x1p-7, dq0);
  if (!(err_out <= 0x1p-8) || !(err_g <= 0x1p-7) || !(dq0 <= 0x1p-14 * dq_top)) {
    fprintf(stderr,
            "FAILED: the bfloat16 attention is not within bfloat16 rounding of float32's\n");
    return 1;
  }
  return 0;
}

int main(void) {
  CHECK(dt_set_num_threads(2));
  dt_tensor *master[NP] = {0};
  const int64_t shapes[NP][2] = {{D}, {D}, {D, D}, {D, D}, {D, D}, {D, D}, {V, D}};
  const int ndims[NP] = {1, 1, 2, 2, 2, 2, 2};
  for (int i = 0; i < NP; i++) {
    dt_tensor *r = NULL;
    if (i == 0) {
      CHECK(dt_ones(1, shapes[i], DT_F32, &master[i]));
    } else {
      CHECK(dt_randn(ndims[i], shapes[i], DT_F32, 20 + i, &r));
      CHECK(dt_mul_scalar(r, ndims[i] == 2 ? 1.0 / sqrt((double)D) : 0.1, &master[i]));
      dt_tensor_release(r);
    }
    CHECK(dt_tensor_set_requires_grad(master[i], true));
  }
  /* Task: predict a token from the features of its own position and earlier ones. */
  dt_tensor *x = NULL, *target = NULL;
  CHECK(dt_randn(3, (int64_t[]){B, T, D}, DT_F32, 1, &x));
  int64_t labels[B * T];
  for (int i = 0; i < B * T; i++) labels[i] = (i * 3 + i / T) % V;
  CHECK(dt_from_data(labels, 1, (int64_t[]){B * T}, DT_I64, &target));

  /* 1. The attention on the block's own bfloat16 q, k, v. */
  dt_tensor *logits = NULL, *qkv[3] = {0};
  CHECK(forward(master, x, &logits, qkv));
  int failed = check_attention(qkv);
  release_all(qkv, 3);
  dt_tensor_release(logits);
  logits = NULL;

  /* 2. Training: the gradients land float32 on the masters. */
  dt_optimizer *opt = NULL;
  CHECK(dt_optimizer_create_adamw(NP, master, &(dt_adam_options){.lr = 1e-2}, &opt));
  double first = 0, last = 0;
  for (int step = 0; step < STEPS; step++) {
    dt_tensor *loss = NULL;
    CHECK(dt_optimizer_zero_grad(opt, true));
    CHECK(forward(master, x, &logits, NULL));
    CHECK(dt_cross_entropy(logits, target, &loss));
    CHECK(dt_backward(loss, NULL));
    CHECK(dt_optimizer_step(opt));
    CHECK(dt_tensor_to_doubles(loss, step ? &last : &first, 1));
    dt_tensor_release(loss);
    dt_tensor_release(logits);
  }
  printf("loss: step 1 %.4f, step %d %.4f (threads %d)\n", first, STEPS, last,
         dt_get_num_threads());
  dt_optimizer_destroy(opt);
  release_all(master, NP);
  dt_tensor_release(x);
  dt_tensor_release(target);
  if (!(isfinite(last) && last < 0.5 * first)) {
    fprintf(stderr, "FAILED: the loss did not fall by half\n");
    failed = 1;
  }
  return failed;
}
