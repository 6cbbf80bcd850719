/* Identity and thread count of the BLAS chosen at build time (see blas.h). Exactly one of
 * DT_BLAS_OPENBLAS, DT_BLAS_BLIS or DT_BLAS_GENERIC is defined by CMake. */
#include "kernels/cpu/blas.h"

#include "core/core_impl.h"

#include <pthread.h>
#include <stdatomic.h>
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

static void vendor_set_threads(int threads) {
#if defined(DT_BLAS_OPENBLAS)
  openblas_set_num_threads(threads);
#elif defined(DT_BLAS_BLIS)
  bli_thread_set_num_threads(threads);
#else
  (void)threads;
#endif
}

static int vendor_threads(void) {
#if defined(DT_BLAS_OPENBLAS)
  return openblas_get_num_threads();
#elif defined(DT_BLAS_BLIS)
  return (int)bli_thread_get_num_threads();
#else
  return 1;
#endif
}

int dt__blas_threads(void) { return vendor_threads(); }

/* base: the count the BLAS was configured with (0: not read yet); applied: the count last
 * given to the BLAS itself (1 once the library splits GEMMs on its pool). Changes happen
 * under the lock, at most once per change of the setting, never per GEMM. */
static atomic_int base_threads, applied_threads;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;

/* OpenBLAS and BLIS take a thread count: the library splits each large GEMM over its own
 * pool (kernels/cpu/gemm.c) and runs the BLAS on one thread inside each block, so that one
 * pool, whose idle threads block, serves GEMMs and kernels alike. (OpenBLAS's own threads
 * busy-wait after each call for OPENBLAS_THREAD_TIMEOUT, 2^28 cycles by default: on a busy
 * core that stole the time of the pool thread running the next kernel.) A generic CBLAS keeps
 * its own threads: its GEMMs are not split. */
#if defined(DT_BLAS_OPENBLAS) || defined(DT_BLAS_BLIS)
#define GEMMS_ON_THE_POOL 1
#else
#define GEMMS_ON_THE_POOL 0
#endif

void dt__blas_set_threads(int threads) {
  if (threads < 1) threads = 1;
  pthread_mutex_lock(&threads_lock);
  atomic_store(&base_threads, threads);
  atomic_store(&applied_threads, 0); /* the next sync applies its count */
  pthread_mutex_unlock(&threads_lock);
}

static int base_count(void) {
  int base = atomic_load(&base_threads);
  if (base != 0) return base;
  pthread_mutex_lock(&threads_lock);
  if (atomic_load(&base_threads) == 0) atomic_store(&base_threads, vendor_threads());
  base = atomic_load(&base_threads);
  pthread_mutex_unlock(&threads_lock);
  return base;
}

int dt__gemm_threads(void) { return dt__blas_threads_for(base_count()); }

int dt__blas_sync_threads(void) {
  int gemm_threads = dt__gemm_threads();
  int want = GEMMS_ON_THE_POOL ? 1 : gemm_threads;
  if (want != atomic_load(&applied_threads)) {
    pthread_mutex_lock(&threads_lock);
    if (want != atomic_load(&applied_threads)) {
      vendor_set_threads(want);
      atomic_store(&applied_threads, want);
    }
    pthread_mutex_unlock(&threads_lock);
  }
  return GEMMS_ON_THE_POOL ? gemm_threads : 1;
}

int dt__blas_sync_unsplit(void) {
  if (GEMMS_ON_THE_POOL && atomic_load(&applied_threads) == 1) return 1;
  dt__blas_sync_threads();
  return 1;
}

void dt__blas_use_own_threads(void) {
  int want = dt__gemm_threads();
  pthread_mutex_lock(&threads_lock);
  vendor_set_threads(want);
  atomic_store(&applied_threads, GEMMS_ON_THE_POOL ? 0 : want); /* 0: the next sync re-applies */
  pthread_mutex_unlock(&threads_lock);
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
