/* Trains one small transformer-ish block on 1 rank: layer_norm, causal
 * dt_scaled_dot_product_attention over 2 heads, a residual, a GELU MLP and a cross_entropy
 * head, with AdamW and 2 intra-op threads (dt_set_num_threads). Checks that
 *   - the fused attention equals softmax(q k^T / sqrt(E) + causal mask) v written out by hand
 *     (double loops over the same q, k, v),
 *   - the loss after 30 steps is well below the first step's.
 * Exits 0 when both hold, 1 otherwise (ctest example_attention_block_train). */
#include <dtensor/dtensor.h>
#include <math.h>
#include <stdio.h>

enum { B = 2, T = 5, H = 2, E = 4, D = H * E, F = 16, V = 6, NP = 9, STEPS = 30 };

#define CHECK(call)                                                                                \
  do {                                                                                             \
    if ((call) != DT_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, dt_last_error());                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

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

/* softmax(q k^T / sqrt(E), causal) v for [B, H, T, E] arrays, in double. */
static void naive_attention(const double *q, const double *k, const double *v, double *out) {
  for (int bh = 0; bh < B * H; bh++)
    for (int i = 0; i < T; i++) {
      const double *qi = q + ((int64_t)bh * T + i) * E;
      double s[T], m = -INFINITY, z = 0;
      for (int j = 0; j <= i; j++) {
        s[j] = 0;
        for (int e = 0; e < E; e++) s[j] += qi[e] * k[((int64_t)bh * T + j) * E + e];
        s[j] /= sqrt((double)E);
        m = fmax(m, s[j]);
      }
      for (int j = 0; j <= i; j++) z += s[j] = exp(s[j] - m);
      for (int e = 0; e < E; e++) {
        double acc = 0;
        for (int j = 0; j <= i; j++) acc += s[j] / z * v[((int64_t)bh * T + j) * E + e];
        out[((int64_t)bh * T + i) * E + e] = acc;
      }
    }
}

typedef struct block {
  dt_tensor *p[NP]; /* ln_w, ln_b, wq, wk, wv, wo, w1, b1, w2 */
} block;

/* logits [B*T, V] of the block; *attn (may be NULL) receives the attention output
 * [B, H, T, E] and *qkv its inputs. */
static dt_status forward(block *m, dt_tensor *x, dt_tensor **logits, dt_tensor *qkv[3],
                         dt_tensor **attn) {
  dt_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL, *at = NULL, *ac = NULL,
            *o = NULL, *r = NULL, *u = NULL, *g = NULL, *y = NULL;
  dt_status st = dt_layer_norm(x, 1, (int64_t[]){D}, m->p[0], m->p[1], 1e-5, &h);
  if (!st) st = heads(h, m->p[2], &q);
  if (!st) st = heads(h, m->p[3], &k);
  if (!st) st = heads(h, m->p[4], &v);
  if (!st)
    st = dt_scaled_dot_product_attention(q, k, v, NULL, &(dt_attention_options){.is_causal = true},
                                         &a, NULL);
  if (!st) st = dt_transpose(a, 1, 2, &at); /* [B, T, H, E] */
  if (!st) st = dt_reshape(at, 3, (int64_t[]){B, T, D}, &ac);
  if (!st) st = dt_linear(ac, m->p[5], NULL, &o);
  if (!st) st = dt_add(o, x, &r); /* residual */
  if (!st) st = dt_linear(r, m->p[6], m->p[7], &u);
  if (!st) st = dt_gelu(u, &g);
  if (!st) st = dt_linear(g, m->p[8], NULL, &y);
  if (!st) st = dt_reshape(y, 2, (int64_t[]){B * T, V}, logits);
  if (!st && qkv)
    qkv[0] = dt_tensor_retain(q), qkv[1] = dt_tensor_retain(k), qkv[2] = dt_tensor_retain(v);
  if (!st && attn) *attn = dt_tensor_retain(a);
  dt_tensor *all[] = {h, q, k, v, a, at, ac, o, r, u, g, y};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  return st;
}

int main(void) {
  CHECK(dt_set_num_threads(2));
  block m = {0};
  const int64_t shapes[NP][2] = {{D}, {D}, {D, D}, {D, D}, {D, D}, {D, D}, {F, D}, {F}, {V, F}};
  const int ndims[NP] = {1, 1, 2, 2, 2, 2, 2, 1, 2};
  for (int i = 0; i < NP; i++) {
    dt_tensor *r = NULL;
    if (i == 0) {
      CHECK(dt_ones(1, shapes[i], DT_F32, &m.p[i]));
    } else {
      CHECK(dt_randn(ndims[i], shapes[i], DT_F32, 10 + i, &r));
      CHECK(dt_mul_scalar(r, ndims[i] == 2 ? 1.0 / sqrt((double)shapes[i][1]) : 0.1, &m.p[i]));
      dt_tensor_release(r);
    }
    CHECK(dt_tensor_set_requires_grad(m.p[i], true));
  }
  /* Task: predict a token from the features of its own position and earlier ones. */
  dt_tensor *x = NULL, *target = NULL;
  CHECK(dt_randn(3, (int64_t[]){B, T, D}, DT_F32, 1, &x));
  int64_t labels[B * T];
  for (int i = 0; i < B * T; i++) labels[i] = (i * 5 + 2) % V;
  CHECK(dt_from_data(labels, 1, (int64_t[]){B * T}, DT_I64, &target));

  /* 1. The fused attention against the hand-written one, on the block's own q, k, v. */
  dt_tensor *logits = NULL, *qkv[3] = {0}, *attn = NULL;
  CHECK(forward(&m, x, &logits, qkv, &attn));
  enum { N = B * H * T * E };
  static double qd[N], kd[N], vd[N], ad[N], ref[N];
  CHECK(dt_tensor_to_doubles(qkv[0], qd, N)); /* logical row-major order, views included */
  CHECK(dt_tensor_to_doubles(qkv[1], kd, N));
  CHECK(dt_tensor_to_doubles(qkv[2], vd, N));
  CHECK(dt_tensor_to_doubles(attn, ad, N));
  naive_attention(qd, kd, vd, ref);
  double max_err = 0;
  for (int i = 0; i < N; i++) max_err = fmax(max_err, fabs(ad[i] - ref[i]));
  printf("attention: max |fused - naive| = %.3g\n", max_err);
  for (int i = 0; i < 3; i++) dt_tensor_release(qkv[i]);
  dt_tensor_release(attn);
  dt_tensor_release(logits);

  /* 2. Training. */
  dt_optimizer *opt = NULL;
  CHECK(dt_optimizer_create_adamw(NP, m.p, &(dt_adam_options){.lr = 1e-2}, &opt));
  double first = 0, last = 0;
  for (int step = 0; step < STEPS; step++) {
    dt_tensor *loss = NULL;
    CHECK(dt_optimizer_zero_grad(opt, true));
    CHECK(forward(&m, x, &logits, NULL, NULL));
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
  for (int i = 0; i < NP; i++) dt_tensor_release(m.p[i]);
  dt_tensor_release(x);
  dt_tensor_release(target);
  int ok = max_err < 1e-5 && last < 0.5 * first && isfinite(last);
  if (!ok) fprintf(stderr, "FAILED\n");
  return ok ? 0 : 1;
}
