/* Identity and thread count of the BLAS chosen at build time (see blas.h). Exactly one of
 * DT_BLAS_OPENBLAS, DT_BLAS_BLIS or DT_BLAS_GENERIC is defined by CMake. */
#include "kernels/cpu/blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(DT_BLAS_OPENBLAS)
#include <cblas.h>
#elif defined(DT_BLAS_BLIS)
#include <blis.h>
#endif

#ifndef DT_BLAS_LABEL
#define DT_BLAS_LABEL "generic CBLAS"
#endif

const char *dt__blas_name(void) {
  /* Built once; the vendors' strings do not change while the process runs. */
  static char name[256];
  if (name[0]) return name;
#if defined(DT_BLAS_OPENBLAS)
  /* openblas_get_config() starts with "OpenBLAS <version>"; the core is the kernel set the
   * dynamic-arch build picked for this CPU. */
  snprintf(name, sizeof name, "%s (core %s)", openblas_get_config(), openblas_get_corename());
#elif defined(DT_BLAS_BLIS)
  snprintf(name, sizeof name, "BLIS %s (%s kernels)", bli_info_get_version_str(),
           bli_arch_string(bli_arch_query_id()));
#else
  snprintf(name, sizeof name, "%s", DT_BLAS_LABEL);
#endif
  return name;
}

void dt__blas_set_threads(int threads) {
  if (threads < 1) threads = 1;
#if defined(DT_BLAS_OPENBLAS)
  openblas_set_num_threads(threads);
#elif defined(DT_BLAS_BLIS)
  bli_thread_set_num_threads(threads);
#else
  (void)threads;
#endif
}

const char *dt__blas_better_coretype(void) {
#if defined(DT_BLAS_OPENBLAS) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (getenv("OPENBLAS_CORETYPE") || strcmp(openblas_get_corename(), "Prescott") != 0) return NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return NULL;
}
