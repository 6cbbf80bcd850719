/* Attention memory (issue 27): the fused scaled_dot_product_attention promises O(seq) memory
 * (a flash-style tiled loop: the [T, S] scores are never stored). A counting allocator
 * (dt_set_allocator; it keeps the live and the peak bytes of every tensor, saved activation,
 * gradient and kernel scratch buffer the library allocates) measures the peak above the live
 * bytes before a causal forward + backward at seq 1024 and 2048:
 *  - fused: at most 12 times the bytes of one of q, k, v plus 1 MiB (the output, the
 *    gradients of q, k, v, the log-sum-exp, the backward's dk/dv accumulators and k^T, v^T,
 *    the forward's k^T, the tiles), far below one [B, H, T, T] scores tensor, and at most
 *    2.2 times the seq 1024 peak when the sequence doubles;
 *  - the composition (matmul, scale, masked_fill, softmax, matmul) holds several scores
 *    tensors and grows about 4 times: the accounting sees the quadratic path.
 * Both paths' outputs and gradients agree (the values themselves are checked against naive
 * loops in tests/test_attention.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "dtensor/dtensor.h"
#include "counting_alloc.h" /* live_bytes, peak_bytes, live_blocks */

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())
#define B 1
#define H 1
#define E 16

static void unfused(int64_t T, dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor **out) {
  dt_tensor *kt = NULL, *s = NULL, *ss = NULL, *ones = NULL, *upper = NULL, *sm = NULL, *p = NULL;
  OK(dt_transpose(k, 2, 3, &kt));
  OK(dt_matmul(q, kt, &s));
  OK(dt_mul_scalar(s, 1.0 / sqrt((double)E), &ss));
  OK(dt_ones(2, (int64_t[]){T, T}, DT_BOOL, &ones));
  OK(dt_triu(ones, 1, &upper));
  OK(dt_masked_fill(ss, upper, -INFINITY, &sm));
  OK(dt_softmax(sm, -1, &p));
  OK(dt_matmul(p, v, out));
  dt_tensor_release(kt), dt_tensor_release(s), dt_tensor_release(ss), dt_tensor_release(ones);
  dt_tensor_release(upper), dt_tensor_release(sm), dt_tensor_release(p);
}

/* Peak bytes above the live ones of a causal forward + backward; the output and the gradients
 * of q, k, v (4 x n values) into vals. */
static long long peak_of(int64_t T, bool fused, double *vals) {
  int64_t shape[4] = {B, H, T, E}, n = B * H * T * E;
  dt_tensor *x[3] = {NULL}, *g = NULL, *o = NULL;
  for (int i = 0; i < 3; i++) {
    OK(dt_randn(4, shape, DT_F32, (uint64_t)i + 1, &x[i]));
    OK(dt_tensor_set_requires_grad(x[i], true));
  }
  OK(dt_randn(4, shape, DT_F32, 4, &g));
  long long base = atomic_load(&live_bytes);
  atomic_store(&peak_bytes, base);
  dt_attention_options causal = {.is_causal = true};
  if (fused)
    OK(dt_scaled_dot_product_attention(x[0], x[1], x[2], NULL, &causal, &o, NULL));
  else
    unfused(T, x[0], x[1], x[2], &o);
  OK(dt_backward(o, g));
  long long peak = atomic_load(&peak_bytes) - base;
  OK(dt_tensor_to_doubles(o, vals, n));
  for (int i = 0; i < 3; i++) {
    dt_tensor *gr = NULL;
    OK(dt_tensor_grad(x[i], &gr));
    OK(dt_tensor_to_doubles(gr, vals + (i + 1) * n, n));
    dt_tensor_release(gr);
    dt_tensor_release(x[i]);
  }
  dt_tensor_release(g), dt_tensor_release(o);
  return peak;
}

Test(attention_memory, fused_is_linear_in_seq_the_composition_quadratic, .timeout = 120) {
  dt_set_allocator(&(dt_allocator){.alloc = count_alloc, .free = count_free});
  long long fused[2], comp[2];
  for (int s = 0; s < 2; s++) {
    int64_t T = s ? 2048 : 1024, n = B * H * T * E;
    double *a = malloc(sizeof(double) * 4 * (size_t)n), *b = malloc(sizeof(double) * 4 * (size_t)n);
    cr_assert(a && b);
    fused[s] = peak_of(T, true, a);
    comp[s] = peak_of(T, false, b);
    double d = 0, m = 0;
    for (int64_t i = 0; i < 4 * n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    cr_expect_leq(d, 1e-4 * m, "T %lld: fused and composed values differ by %.3g of %.3g",
                  (long long)T, d, m);
    free(a), free(b);
    long long input = 4LL * n, scores = 4LL * B * H * T * T;
    cr_expect_leq(fused[s], 12 * input + (1 << 20),
                  "T %lld: fused peak %lld bytes above the inputs (one input %lld bytes)",
                  (long long)T, fused[s], input);
    cr_expect_lt(fused[s], scores / 2, "T %lld: fused peak %lld, one scores tensor %lld",
                 (long long)T, fused[s], scores);
    cr_expect_geq(comp[s], 2 * scores, "T %lld: composition peak %lld, one scores tensor %lld",
                  (long long)T, comp[s], scores);
  }
  cr_expect_leq((double)fused[1], 2.2 * (double)fused[0], "fused peak %lld at 2048, %lld at 1024",
                fused[1], fused[0]);
  cr_expect_geq((double)comp[1], 3.5 * (double)comp[0],
                "composition peak %lld at 2048, %lld at 1024", comp[1], comp[0]);
}
