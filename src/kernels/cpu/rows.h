/*
 * Float32 row primitives of the softmax, normalization and loss kernels: maximum, sums and
 * dot products over a contiguous row, written as 64-lane blocked loops that gcc -O3
 * vectorizes (64 lanes: four AVX-512 accumulators, so that the additions' latency overlaps).
 * Sums accumulate in float32 by blocks: 64 lanes over blocks of 1024 elements, the block sums
 * added into 64 more lanes, the lanes added pairwise, so the rounding error grows with
 * 16 + 6 + n / 1024 additions rather than n (about 1e-6 relative for a row of 8192
 * positive terms, the accuracy of a double accumulator rounded to float32 in practice).
 */
#ifndef DT_KERNELS_CPU_ROWS_H
#define DT_KERNELS_CPU_ROWS_H

#include <stdint.h>

/* The maximum of x[0, n), NaN when any element is NaN; -inf for n == 0 (+0 when the row
 * holds both zeros). */
float dt__row_max_f32(const float *x, int64_t n);

/* The sum of x[0, n). */
float dt__row_sum_f32(const float *x, int64_t n);

/* y[i] = exp(x[i] - m) (y may be x, or NULL to store nothing) and the sum of those terms. */
float dt__row_exp_sum_f32(const float *x, float m, float *y, int64_t n);

/* The softmax of each of `rows` packed rows of n elements (row r at x + r n, y + r n): y =
 * exp(x - max) / sum, with dt__row_exp_sum_f32's bits. One function for all the rows, with
 * the maximum and the exp inlined: nothing is called per row (short rows, as attention's
 * 256, paid two calls and the NaN pass of dt__row_max_f32, which the exp's NaN covers). */
void dt__rows_softmax_f32(const float *x, float *y, int64_t rows, int64_t n);

/* The sum of a[i] * b[i]. */
float dt__row_dot_f32(const float *a, const float *b, int64_t n);

/* sums[0] = the sum of g[i] w[i], sums[1] = the sum of g[i] w[i] (x[i] - mean), in one pass
 * (a normalization's backward). */
void dt__row_norm_grad_sums_f32(const float *g, const float *w, const float *x, float mean,
                                int64_t n, float *sums);

/* The sum of (x[i] - mean)^2. */
float dt__row_sq_dev_sum_f32(const float *x, float mean, int64_t n);

#endif /* DT_KERNELS_CPU_ROWS_H */
