/* The BLAS linked at build time (CMake's DT_BLAS: openblas, blis or generic), named and
 * configured through one place so that benchmarks and tools never call a vendor's API. */
#ifndef DT_KERNELS_CPU_BLAS_H
#define DT_KERNELS_CPU_BLAS_H

/* A static string naming the linked BLAS and its version, e.g. "OpenBLAS 0.3.21 (Zen)" or
 * "BLIS 0.9.0 (zen3)"; a generic CBLAS is named by the libraries CMake was given. */
const char *dt__blas_name(void);

/* Asks the BLAS to use `threads` threads for its own calls (a generic CBLAS has no portable
 * knob, so this does nothing there), and makes that the base count dt__blas_sync_threads
 * caps: without a dt_set_num_threads setting, rank threads still get at most cores / ranks. */
void dt__blas_set_threads(int threads);

/* Before a GEMM: gives the BLAS dt__blas_threads_for(base) threads when that changed since
 * the last call (dt_set_num_threads, DT_NUM_THREADS, rank threads starting or ending). Cheap
 * when nothing changed (two atomic loads and the kernels' thread count). */
void dt__blas_sync_threads(void);

/* The threads the BLAS is set to use now (1 for a generic CBLAS). */
int dt__blas_threads(void);

/* OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's model number when it loads,
 * and falls back to "Prescott" (SSE3) for a model it does not know (0.3.21 on family 6
 * model 207, a Xeon with AVX-512: sgemm 6x slower than its SkylakeX kernels, measured in
 * docs/benchmarks.md). Returns the core type to ask for through OPENBLAS_CORETYPE (read only
 * when the library loads) when that happened: "SkylakeX" with AVX-512, "Haswell" with AVX2 +
 * FMA; NULL otherwise, with another BLAS, or when OPENBLAS_CORETYPE is already set. */
const char *dt__blas_better_coretype(void);

#endif /* DT_KERNELS_CPU_BLAS_H */
