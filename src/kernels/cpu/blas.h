/* The BLAS linked at build time (CMake's DT_BLAS: openblas, blis or generic), named and
 * configured through one place so that benchmarks and tools never call a vendor's API. */
#ifndef DT_KERNELS_CPU_BLAS_H
#define DT_KERNELS_CPU_BLAS_H

/* A static string naming the linked BLAS and its version, e.g. "OpenBLAS 0.3.21 (Zen)" or
 * "BLIS 0.9.0 (zen3)"; a generic CBLAS is named by the libraries CMake was given. */
const char *dt__blas_name(void);

/* Asks the BLAS to use `threads` threads for its own calls (a generic CBLAS has no portable
 * knob, so this does nothing there). Ranks that are threads want 1 each. */
void dt__blas_set_threads(int threads);

#endif /* DT_KERNELS_CPU_BLAS_H */
