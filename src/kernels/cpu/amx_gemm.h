/* Float32 GEMM on Intel AMX tiles (amx_gemm.c), as accurate as an fp32 sgemm.
 *
 * Each float32 operand x is split into three bfloat16 parts, x = x0 + x1 + x2 (exact for
 * normal numbers: 3 x 8 significant bits cover float32's 24), and a product keeps the six
 * part products of relative size 2^-16 and above (x0y0, x0y1, x1y0, x0y2, x1y1, x2y0); the
 * dropped three are below 2^-24 of x*y. AMX multiplies bfloat16 pairs exactly and adds in
 * float32 with round-to-nearest-even, so each element is a float32 sum like sgemm's, of six
 * terms per k instead of one. Measured against a float64 reference over random operands the
 * largest error per element is at or below OpenBLAS's sgemm's (docs/benchmarks.md); at
 * 6 bfloat16 products per multiply-add an AMX core still does 1.4-1.7x the multiply-adds of
 * OpenBLAS's AVX-512 sgemm at a transformer's shapes. Differences from sgemm: denormal inputs,
 * parts and results are flushed to zero (AMX's DAZ/FTZ), i.e. values below 2^-126 ~ 1.2e-38 in
 * magnitude, so values and products below about 2^-110 lose the parts under 2^-126 (down to
 * bfloat16's precision near 2^-118; docs/design.md); a product x*y above 2^128 (1 - 2^-8) in
 * magnitude may overflow to infinity where sgemm's stays finite (rounded parts x0 y0 can pass
 * 2^128); infinities and NaNs propagate as in sgemm.
 */
#ifndef DT_KERNELS_CPU_AMX_GEMM_H
#define DT_KERNELS_CPU_AMX_GEMM_H

#include <stdbool.h>

/* True when this CPU and OS run AMX-BF16 tiles (CPUID, XCR0, and Linux's permission for
 * the tile state, asked once per process at the first call that gets this far), unless
 * DT_AMX is 0 (read once; a value other than 0 or 1 is reported once through the log and
 * ignored) or dt__amx_set_enabled(false) turned the path off: then false,
 * and the permission (which enlarges signal frames by 8 KiB) is never asked for. Cheap. */
bool dt__amx_usable(void);

/* For tests and benchmarks: turns the AMX path off (false) or back on (true: usable again
 * when the hardware is and DT_AMX is not 0). */
void dt__amx_set_enabled(bool on);

/* Whether a product of op(a) [m, k] and op(b) [k, n] is large enough that the AMX path is
 * faster than the BLAS (packing both operands costs O(mk + kn)). */
bool dt__amx_worth(int m, int n, int k);

/* c[m, n] (row-major, leading dimension ldc) = op(a) op(b), or c += op(a) op(b) when
 * accumulate. a is [m, k] row-major with leading dimension lda (ta: stored as [k, m]), b is
 * [k, n] (tb: stored as [n, k]). Returns false, having written nothing, when AMX is not
 * usable or its per-thread workspace cannot be allocated: the caller then runs the BLAS.
 * Each element's value depends only on its row of op(a), its column of op(b) and k: blocks
 * of rows or columns computed separately give the same bits as the whole product. */
bool dt__amx_sgemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, bool accumulate, float *c, int ldc);

#endif /* DT_KERNELS_CPU_AMX_GEMM_H */
