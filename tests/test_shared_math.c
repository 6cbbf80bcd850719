/*
 * The host/device headers (core/host_device.h): the element arithmetic that the CPU's kernels
 * and the CUDA kernels (src/kernels/cuda/) both compile. What a CUDA kernel computes per
 * element is one of these scalar functions, so these tests check on the CPU that
 *   - the scalar functions give the same bits as the CPU's vectorized loops (the public ops
 *     on contiguous float32 tensors: the target_clones paths), so a GPU computing with them
 *     matches the CPU;
 *   - Philox4x32-10 gives Random123's known-answer vectors, and the element-at-a-time form the
 *     GPU uses gives the CPU's random tensors for any first index and dtype;
 *   - the extreme (max/min/argmax) choice and the compensated sum give a serial scan's answer
 *     when combined in any tree, as a GPU block reduction combines them;
 *   - the 16-bit float conversions round-trip every pattern.
 * Includes private headers: the functions are static inline helpers of the kernels.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/pointwise.h"
#include "kernels/math/binary.h"
#include "kernels/math/norm.h"
#include "kernels/math/reduce.h"
#include "kernels/math/unary.h"
#include "ops/op_impl.h"
#include "tensor/philox.h"
#include "tensor/tensor_impl.h"

static uint32_t bits_of(float f) { return dt__f32_to_bits(f); }

/* n float32 inputs spread over [lo, hi], with the specials at the end. */
static dt_tensor *inputs_f32(int64_t n, float lo, float hi, float **data) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){n}, DT_F32, &t), DT_OK);
  float *p = dt_tensor_data(t);
  for (int64_t i = 0; i < n - 4; i++) p[i] = lo + (hi - lo) * (float)i / (float)(n - 5);
  p[n - 4] = 0.0f;
  p[n - 3] = -0.0f;
  p[n - 2] = INFINITY;
  p[n - 1] = NAN;
  *data = p;
  return t;
}

typedef dt_status (*unary_fn)(dt_tensor *, dt_tensor **);

Test(shared_math, unary_scalar_functions_give_the_vector_loops_bits) {
  static const struct {
    dt_unary_op op;
    unary_fn fn;
    float lo, hi;
  } ops[] = {
      {DT_UNARY_NEG, dt_neg, -50, 50},
      {DT_UNARY_ABS, dt_abs, -50, 50},
      {DT_UNARY_RELU, dt_relu, -50, 50},
      {DT_UNARY_EXP, dt_exp, -100, 90},
      {DT_UNARY_LOG, dt_log, 1e-30f, 1e30f},
      {DT_UNARY_SQRT, dt_sqrt, 0, 1e6f},
      {DT_UNARY_RSQRT, dt_rsqrt, 1e-6f, 1e6f},
      {DT_UNARY_GELU, dt_gelu, -15, 15},
      {DT_UNARY_GELU_TANH, dt_gelu_tanh, -15, 15},
      {DT_UNARY_SILU, dt_silu, -90, 90},
      {DT_UNARY_TANH, dt_tanh, -12, 12},
      {DT_UNARY_SIGMOID, dt_sigmoid, -90, 90},
  };
  const int64_t n = 20011; /* odd: the vector loops' tails run too */
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    float *x;
    dt_tensor *in = inputs_f32(n, ops[k].lo, ops[k].hi, &x), *out = NULL;
    cr_assert_eq(ops[k].fn(in, &out), DT_OK);
    const float *y = dt_tensor_data(out);
    for (int64_t i = 0; i < n; i++) {
      float want = dt__unary_f32(ops[k].op, x[i]);
      cr_assert(bits_of(y[i]) == bits_of(want) || (isnan(y[i]) && isnan(want)),
                "unary op %d at x = %.9g: vector loop %.9g, scalar function %.9g", (int)ops[k].op,
                (double)x[i], (double)y[i], (double)want);
    }
    dt_tensor_release(in);
    dt_tensor_release(out);
  }
}

Test(shared_math, gelu_backward_scalar_function_gives_the_vector_loops_bits) {
  const int64_t n = 4099;
  float *x, *g;
  dt_tensor *xt = inputs_f32(n, -14, 14, &x), *gt = inputs_f32(n, -3, 5, &g);
  for (int form = 0; form < 2; form++) {
    dt_tensor *out = NULL;
    cr_assert_eq(dt__gelu_backward(gt, xt, form ? DT_OP_FLAG_GELU_TANH : 0, &out), DT_OK);
    const float *y = dt_tensor_data(out);
    for (int64_t i = 0; i < n; i++) {
      float d = form ? dt__gelu_tanh_grad_f32(x[i]) : dt__gelu_grad_f32(x[i]);
      float want = g[i] * d;
      cr_assert(bits_of(y[i]) == bits_of(want) || (isnan(y[i]) && isnan(want)),
                "gelu_backward (tanh %d) at x = %.9g: %.9g, scalar %.9g", form, (double)x[i],
                (double)y[i], (double)want);
    }
    dt_tensor_release(out);
  }
  dt_tensor_release(xt);
  dt_tensor_release(gt);
}

/* gelu's loop takes the central formula for runs of 512 and patches the elements beyond
 * |x| = 3.75 afterwards: with such elements scattered (alone in a run, several in a group of
 * 16, at run and group edges, NaN and inf among them), in the tail after the last full run,
 * and in place, every element still gets the scalar function's bits, which are within 7 ulp
 * of the double reference (test_vmath measures the bounds). */
Test(shared_math, gelu_loop_patches_outliers_to_the_scalar_functions_bits) {
  const int64_t n = 5 * 512 + 37;
  dt_tensor *in = NULL, *out = NULL, *inplace = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){n}, DT_F32, &in), DT_OK);
  cr_assert_eq(dt_empty(1, (int64_t[]){n}, DT_F32, &inplace), DT_OK);
  float *x = dt_tensor_data(in);
  uint32_t state = 12345u;
  for (int64_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    x[i] = ((float)(state >> 8) / 16777216.0f - 0.5f) * 7.5f; /* [-3.75, 3.75) */
  }
  static const int64_t at[] = {0,          511,        512,        1024 + 15, 1024 + 16,
                               1536 + 100, 1536 + 101, 1536 + 102, 2559,      2560 + 36};
  static const float far[] = {3.7500002f, -4.0f,     9.0f, -13.5f,      30.0f,
                              INFINITY,   -INFINITY, NAN,  -3.7500002f, 5.0f};
  for (size_t k = 0; k < sizeof at / sizeof *at; k++) x[at[k]] = far[k];
  memcpy(dt_tensor_data(inplace), x, sizeof(float) * (size_t)n);
  cr_assert_eq(dt_gelu(in, &out), DT_OK);
  dt__cpu_unary(DT_UNARY_GELU, inplace, inplace);
  /* The backward's loop has the same runs and patch: g gelu'(x), into a new tensor and in
   * place into g (an element's bits are the scalar function's either way). */
  dt_tensor *g = NULL, *dx = NULL;
  cr_assert_eq(dt_empty(1, (int64_t[]){n}, DT_F32, &g), DT_OK);
  float *gv = dt_tensor_data(g);
  for (int64_t i = 0; i < n; i++) gv[i] = 0.5f + (float)(i % 7) * 0.25f;
  cr_assert_eq(dt__gelu_backward(g, in, 0, &dx), DT_OK);
  const float *d = dt_tensor_data(dx);
  for (int64_t i = 0; i < n; i++) {
    float want = (0.5f + (float)(i % 7) * 0.25f) * dt__gelu_grad_f32(x[i]);
    cr_assert(bits_of(d[i]) == bits_of(want) || (isnan(d[i]) && isnan(want)),
              "gelu_backward at %lld, x = %.9g: loop %.9g, scalar %.9g", (long long)i, (double)x[i],
              (double)d[i], (double)want);
    double ref =
        0.5 * erfc(-(double)x[i] / sqrt(2.0)) +
        (double)x[i] * exp(-0.5 * (double)x[i] * (double)x[i]) / sqrt(2 * 3.14159265358979323846);
    if (isfinite(ref)) /* absolute near the derivative's root at x = -0.75 */
      cr_assert(fabs((double)dt__gelu_grad_f32(x[i]) - ref) <= 1e-6 * fabs(ref) + 1e-7,
                "gelu' at x = %.9g: %.9g, reference %.9g", (double)x[i],
                (double)dt__gelu_grad_f32(x[i]), ref);
  }
  dt__cpu_gelu_backward(false, g, in, g);
  for (int64_t i = 0; i < n; i++) {
    float want = d[i];
    cr_assert(bits_of(gv[i]) == bits_of(want) || (isnan(gv[i]) && isnan(want)),
              "gelu_backward in place at %lld: %.9g, %.9g", (long long)i, (double)gv[i],
              (double)want);
  }
  dt_tensor_release(g);
  dt_tensor_release(dx);
  const float *y = dt_tensor_data(out), *z = dt_tensor_data(inplace);
  for (int64_t i = 0; i < n; i++) {
    float want = dt__gelu_f32(x[i]);
    cr_assert(bits_of(y[i]) == bits_of(want) || (isnan(y[i]) && isnan(want)),
              "gelu at %lld, x = %.9g: loop %.9g, scalar %.9g", (long long)i, (double)x[i],
              (double)y[i], (double)want);
    cr_assert(bits_of(z[i]) == bits_of(want) || (isnan(z[i]) && isnan(want)),
              "gelu in place at %lld, x = %.9g: %.9g, scalar %.9g", (long long)i, (double)x[i],
              (double)z[i], (double)want);
    double ref = 0.5 * (double)x[i] * erfc(-(double)x[i] / sqrt(2.0));
    if (isfinite(ref)) {
      cr_assert(fabs((double)y[i] - ref) <= 7 * 6e-8 * fabs(ref) + 1e-38,
                "gelu at x = %.9g: %.9g, reference %.9g", (double)x[i], (double)y[i], ref);
    }
  }
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_tensor_release(inplace);
}

typedef dt_status (*binary_fn)(dt_tensor *, dt_tensor *, dt_tensor **);

/* The binary element function in double, rounded to float32, is the float32 fast loop's
 * result for add, sub, mul, div, maximum, minimum and the comparisons (double holds each
 * exact result of two float32 operands closely enough that one rounding gives the same
 * float). pow differs (powf against pow): within 1 ulp. */
Test(shared_math, binary_double_functions_give_the_float32_loops_bits) {
  static const struct {
    dt_binary_op op;
    binary_fn fn;
  } ops[] = {
      {DT_BINARY_ADD, dt_add}, {DT_BINARY_SUB, dt_sub},         {DT_BINARY_MUL, dt_mul},
      {DT_BINARY_DIV, dt_div}, {DT_BINARY_MAXIMUM, dt_maximum}, {DT_BINARY_MINIMUM, dt_minimum},
      {DT_BINARY_POW, dt_pow}, {DT_BINARY_EQ, dt_eq},           {DT_BINARY_NE, dt_ne},
      {DT_BINARY_LT, dt_lt},   {DT_BINARY_LE, dt_le},           {DT_BINARY_GT, dt_gt},
      {DT_BINARY_GE, dt_ge},
  };
  const int64_t n = 5003;
  float *a, *b;
  dt_tensor *at = inputs_f32(n, -7, 9, &a), *bt = inputs_f32(n, 3, -2.5f, &b);
  for (int64_t i = 0; i < n; i += 7) b[i] = a[i]; /* ties for the comparisons */
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    dt_tensor *out = NULL;
    cr_assert_eq(ops[k].fn(at, bt, &out), DT_OK);
    const void *y = dt_tensor_data(out);
    for (int64_t i = 0; i < n; i++) {
      double want = dt__binary_f64(ops[k].op, a[i], b[i], 1.0);
      if (ops[k].op >= DT_BINARY_EQ) {
        cr_assert_eq(((const uint8_t *)y)[i], (uint8_t)want, "op %d at %g, %g", (int)ops[k].op,
                     (double)a[i], (double)b[i]);
        continue;
      }
      float got = ((const float *)y)[i], wf = (float)want;
      if (isnan(got) || isnan(wf)) {
        cr_assert(isnan(got) && isnan(wf), "op %d at %g, %g: %g against %g", (int)ops[k].op,
                  (double)a[i], (double)b[i], (double)got, (double)wf);
      } else if (ops[k].op == DT_BINARY_POW) {
        cr_assert(fabsf(got - wf) <= 2 * fabsf(nextafterf(wf, INFINITY) - wf) || got == wf,
                  "pow at %g, %g: %.9g against %.9g", (double)a[i], (double)b[i], (double)got,
                  (double)wf);
      } else {
        cr_assert(bits_of(got) == bits_of(wf), "op %d at %g, %g: %.9g against %.9g", (int)ops[k].op,
                  (double)a[i], (double)b[i], (double)got, (double)wf);
      }
    }
    dt_tensor_release(out);
  }
  dt_tensor_release(at);
  dt_tensor_release(bt);
}

Test(shared_math, binary_integer_functions) {
  cr_assert_eq(dt__binary_i64(DT_BINARY_ADD, INT64_MAX, 1, 1), INT64_MIN); /* wraps */
  cr_assert_eq(dt__binary_i64(DT_BINARY_SUB, 5, 3, 2), -1);
  cr_assert_eq(dt__binary_i64(DT_BINARY_POW, 3, 5, 1), 243);
  cr_assert_eq(dt__binary_i64(DT_BINARY_POW, -1, -3, 1), -1);
  cr_assert_eq(dt__binary_i64(DT_BINARY_POW, 2, -1, 1), 0);
  cr_assert_eq(dt__binary_i64(DT_BINARY_MAXIMUM, -4, 2, 1), 2);
  cr_assert_eq(dt__binary_i64(DT_BINARY_LE, 2, 2, 1), 1);
  cr_assert(isnan(dt__binary_f64(DT_BINARY_MAXIMUM, NAN, 1, 1)));
  cr_assert(isnan(dt__binary_f64(DT_BINARY_MINIMUM, 1, NAN, 1)));
  cr_assert_eq(dt__binary_f64(DT_BINARY_NE, NAN, NAN, 1), 1.0);
  cr_assert_eq(dt__binary_f64(DT_BINARY_EQ, NAN, NAN, 1), 0.0);
  cr_assert_eq(dt__unary_i64(DT_UNARY_NEG, INT64_MIN), INT64_MIN);
  cr_assert_eq(dt__unary_i64(DT_UNARY_ABS, -7), 7);
}

/* Random123's known-answer vectors for Philox4x32-10 (kat_vectors). */
Test(shared_math, philox_known_answers) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int k = 0; k < 3; k++) {
    const uint32_t *v = kat[k];
    dt_philox_block r = dt__philox4x32_10(v[0], v[1], v[2], v[3], v[4], v[5]);
    for (int j = 0; j < 4; j++)
      cr_assert_eq(r.v[j], v[6 + j], "vector %d word %d: %08x, want %08x", k, j, r.v[j], v[6 + j]);
  }
}

/* Element i of the stream, computed alone (as a GPU thread does), is the CPU fill's element i
 * for any first index and dtype. */
Test(shared_math, philox_elements_match_the_cpu_fill) {
  const uint64_t seed = 0x1234567887654321ull;
  const double lo = -1.5, hi = 2.25;
  dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
    for (uint64_t first = 0; first < 7; first += 3) {
      dt_tensor *t = NULL;
      const int64_t n = 103;
      cr_assert_eq(dt_empty(1, (int64_t[]){n}, dtypes[d], &t), DT_OK);
      cr_assert_eq(dt_random_fill(t, DT_RANDOM_UNIFORM, lo, hi, seed, first), DT_OK);
      const char *p = dt_tensor_data(t);
      size_t es = dt_dtype_size(dtypes[d]);
      float flo = (float)lo, below = nextafterf((float)hi, flo);
      float step = (float)(hi - lo) * (1.0f / 16777216.0f);
      for (int64_t i = 0; i < n; i++) {
        uint64_t index = first + (uint64_t)i;
        char want[8] = {0};
        if (dtypes[d] == DT_F32) {
          float v = dt__philox_uniform_f32_at(seed, index, flo, step, below);
          memcpy(want, &v, 4);
        } else {
          dt__philox_store_uniform(dtypes[d], want, dt__philox_uniform_f64_at(seed, index, lo, hi),
                                   lo, hi);
        }
        cr_assert(memcmp(p + i * (int64_t)es, want, es) == 0, "%s element %lld (first %llu)",
                  dt_dtype_name(dtypes[d]), (long long)i, (unsigned long long)first);
      }
      dt_tensor_release(t);
    }
  }
}

/* A serial scan's choice: the first NaN, else the first extreme. */
static int64_t serial_choice(const double *v, int64_t n, int is_max) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++) {
    if (best < 0) {
      best = i;
    } else if (isnan(v[best])) {
      continue;
    } else if (isnan(v[i]) || (is_max ? v[i] > v[best] : v[i] < v[best])) {
      best = i;
    }
  }
  return best;
}

/* A tree of pairwise choices over [lo, hi), split at random points. */
static int64_t tree_choice(const double *v, int64_t lo, int64_t hi, int is_max) {
  if (hi - lo == 1) return lo;
  int64_t mid = lo + 1 + rand() % (hi - lo - 1);
  int64_t a = tree_choice(v, lo, mid, is_max), b = tree_choice(v, mid, hi, is_max);
  /* combine in either order: the predicate must not depend on it */
  if (rand() & 1) return dt__extreme_better(is_max, v[b], b, v[a], a) ? b : a;
  return dt__extreme_better(is_max, v[a], a, v[b], b) ? a : b;
}

Test(shared_math, extreme_choice_is_the_serial_one_in_any_tree) {
  srand(11);
  double v[64];
  for (int trial = 0; trial < 2000; trial++) {
    int64_t n = 1 + rand() % 64;
    for (int64_t i = 0; i < n; i++) {
      int r = rand() % 10;
      v[i] = r == 0 ? NAN : r == 1 ? -INFINITY : (double)(rand() % 5);
    }
    for (int is_max = 0; is_max < 2; is_max++) {
      int64_t want = serial_choice(v, n, is_max), got = tree_choice(v, 0, n, is_max);
      cr_assert_eq(got, want, "trial %d (max %d, n %lld): tree picked %lld, serial %lld", trial,
                   is_max, (long long)n, (long long)got, (long long)want);
    }
  }
}

Test(shared_math, compensated_sum_in_a_tree_is_exact_to_an_ulp) {
  /* 1, then many tiny values, then -1: a plain double sum loses the tiny ones. */
  enum { N = 4096 };
  static double v[N];
  v[0] = 1.0;
  const double tiny = ldexp(1.0, -60); /* multiples of 2^-60: their sum is exact in double */
  for (int i = 1; i < N - 1; i++) v[i] = tiny * (double)(i % 7 + 1);
  v[N - 1] = -1.0;
  double exact = 0;
  for (int i = 1; i < N - 1; i++) exact += tiny * (double)(i % 7 + 1);
  for (int width = 1; width <= 256; width *= 4) {
    /* width partial sums (GPU threads), then combined pairwise */
    dt_neumaier parts[256];
    for (int t = 0; t < width; t++) {
      parts[t] = (dt_neumaier){0, 0};
      for (int i = t; i < N; i += width) dt__neumaier_add(&parts[t], v[i]);
    }
    for (int stride = 1; stride < width; stride *= 2)
      for (int t = 0; t + stride < width; t += 2 * stride)
        dt__neumaier_merge(&parts[t], parts[t + stride]);
    double got = dt__neumaier_result(parts[0]);
    cr_assert(fabs(got - exact) <= 0x1p-52 * fabs(exact), "width %d: %.17g, want %.17g", width, got,
              exact);
  }
}

Test(shared_math, sixteen_bit_floats_round_trip) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f16 = dt__elem_f16_to_f32((uint16_t)h), bf16 = dt__elem_bf16_to_f32((uint16_t)h);
    if (!isnan(f16)) cr_assert_eq(dt__elem_f32_to_f16(f16), h, "f16 %04x", h);
    if (!isnan(bf16)) cr_assert_eq(dt__elem_f32_to_bf16(bf16), h, "bf16 %04x", h);
  }
  cr_assert_eq(dt__elem_clamp_to_i64(1e300), INT64_MAX);
  cr_assert_eq(dt__elem_clamp_to_i64(NAN), 0);
}

Test(shared_math, norm_formulas) {
  double scale, shift;
  dt__batch_norm_affine(2.0, 1.0, 3.0, 4.0 - 1e-5, 1e-5, &scale, &shift);
  cr_assert_float_eq(scale, 1.0, 1e-15);
  cr_assert_float_eq(shift, -2.0, 1e-15);
  cr_assert_float_eq(dt__norm_rstd(8.0, 2.0, 0.0), 0.5, 1e-15);
  cr_assert(isnan(dt__max_nan(NAN, 3.0)));
  cr_assert_eq(dt__max_nan(2.0, 3.0), 3.0);
  /* cross-entropy of [0, log 3] with target 1, no smoothing: log(1 + 3) - log 3 */
  double log_z = log(4.0);
  cr_assert_float_eq(dt__cross_entropy_row(log_z, log(3.0), 0, 0.0, 2), log(4.0 / 3.0), 1e-15);
  cr_assert_float_eq(dt__cross_entropy_grad(2.0, 0.75, 1, 0.0, 2), -0.5, 1e-15);
}
