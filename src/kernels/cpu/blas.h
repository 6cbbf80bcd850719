/* The BLAS linked at build time (CMake's DT_BLAS: openblas, blis or generic), named and
 * configured through one place so that benchmarks and tools never call a vendor's API. */
#ifndef DT_KERNELS_CPU_BLAS_H
#define DT_KERNELS_CPU_BLAS_H

/* A static string naming the linked BLAS and its version, e.g. "OpenBLAS 0.3.21 (Zen)" or
 * "BLIS 0.9.0 (zen3)"; a generic CBLAS is named by the libraries CMake was given. */
const char *dt__blas_name(void);

/* Makes `threads` the base count that GEMMs use without a dt_set_num_threads setting (in
 * place of the BLAS's own default or OPENBLAS_NUM_THREADS, read at the first GEMM); rank
 * threads still get at most cores / ranks. */
void dt__blas_set_threads(int threads);

/* The threads a GEMM called now uses: dt__blas_threads_for(base) (the kernels' count when
 * dt_set_num_threads or DT_NUM_THREADS chose one; else the base, capped at cores / ranks). */
int dt__gemm_threads(void);

/* Before a GEMM. With OpenBLAS or BLIS, sets the BLAS itself to one thread (once) and returns
 * dt__gemm_threads(): the caller splits the GEMM over that many threads of the library's
 * pool. With a generic CBLAS (no portable thread knob), returns 1: the BLAS threads itself.
 * Cheap when nothing changed (a few atomic loads). */
int dt__blas_sync_threads(void);

/* dt__blas_sync_threads for a GEMM too small to split, which runs on its caller alone:
 * returns 1. With OpenBLAS or BLIS the BLAS's count is then 1 whatever the setting, so the
 * setting is not read while the BLAS is already at 1 (one atomic load); otherwise as
 * dt__blas_sync_threads. */
int dt__blas_sync_unsplit(void);

/* For benchmarks that time the BLAS alone against the library's GEMMs: lets the BLAS run on
 * dt__gemm_threads() threads of its own for the direct calls that follow (the library's next
 * GEMM sets it back to one thread). Never called by the library itself. */
void dt__blas_use_own_threads(void);

/* The threads the BLAS itself is set to use now (1 once GEMMs run on the pool; 1 for a
 * generic CBLAS). */
int dt__blas_threads(void);

/* OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's model number when it loads,
 * and falls back to "Prescott" (SSE3) for a model it does not know (0.3.21 on family 6
 * model 207, a Xeon with AVX-512: sgemm 6x slower than its SkylakeX kernels, measured in
 * docs/benchmarks.md). Returns the core type to ask for through OPENBLAS_CORETYPE (read only
 * when the library loads) when that happened: "SkylakeX" with AVX-512, "Haswell" with AVX2 +
 * FMA; NULL otherwise, with another BLAS, or when OPENBLAS_CORETYPE is already set. */
const char *dt__blas_better_coretype(void);

#endif /* DT_KERNELS_CPU_BLAS_H */
