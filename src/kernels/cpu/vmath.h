/*
 * The CPU's side of the float32 approximations (kernels/math/vmath.h, shared with the CUDA
 * kernels): DT_VECTOR_CLONES, which compiles a loop over them for each vector width.
 */
#ifndef DT_KERNELS_CPU_VMATH_H
#define DT_KERNELS_CPU_VMATH_H

#include "kernels/math/vmath.h"

/* Put before a function whose loops call these: gcc compiles it for AVX-512 (x86-64-v4),
 * AVX2 + FMA (x86-64-v3) and the build's baseline, and the loader picks the clone this CPU
 * runs (an ifunc: the runtime CPU check, with the portable fallback). The source is the
 * same, and the build is ISO C (-ffp-contract=off), so the clones round alike. Not under
 * ThreadSanitizer: the loader runs the ifunc resolver before TSan's runtime is up, and the
 * instrumented resolver crashes (tsan_threads segfaulted at start). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&       \
    !defined(DT_NO_VECTOR_CLONES) && !defined(__SANITIZE_THREAD__)
#define DT_VECTOR_CLONES                                                                           \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DT_VECTOR_CLONES
#endif

/* For a helper of a DT_VECTOR_CLONES function: always inlined, so that each clone compiles
 * it for its own vector width (a helper gcc leaves out of line is compiled once, for the
 * baseline, where fmaf is a libm call: a softmax 35x slower). */
#if defined(__GNUC__)
#define DT_VECTOR_INLINE static inline __attribute__((always_inline))
#else
#define DT_VECTOR_INLINE static inline
#endif

/* For a DT_VECTOR_CLONES function whose loops call a large shared helper (math/unary.h's
 * select of two formulas): inline every call, so that no helper runs the baseline's code. */
#if defined(__GNUC__)
#define DT_VECTOR_FLATTEN __attribute__((flatten))
#else
#define DT_VECTOR_FLATTEN
#endif

#endif /* DT_KERNELS_CPU_VMATH_H */
