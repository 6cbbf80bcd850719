/* The machine header of every benchmark (see bench_machine.h). */
#include "bench_machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/blas.h"

double bench_memcpy_gbs(long long bytes, int reps) {
  char *a = malloc((size_t)bytes), *b = malloc((size_t)bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return 0;
  }
  /* Touch both buffers first so page faults are not timed. */
  memset(a, 1, (size_t)bytes);
  memset(b, 2, (size_t)bytes);
  double best = 0;
  for (int r = 0; r < reps; r++) {
    a[r % bytes] = (char)r;
    double t0 = bench_now_us();
    memcpy(b, a, (size_t)bytes);
    double t1 = bench_now_us();
    __asm__ volatile("" : : "r"(b) : "memory");
    double gbs = (double)bytes / ((t1 - t0) * 1e3);
    if (gbs > best) best = gbs;
  }
  free(a);
  free(b);
  return best;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BENCH_HAVE_FMA_LOOP 1

/* iters x 12 independent 8-lane FMAs: enough accumulators to cover two pipes' latency. Named
 * variables, not an array, so that all twelve stay in registers. */
__attribute__((target("avx2,fma"))) static float fma_loop(long iters) {
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(0.1f), a2 = _mm256_set1_ps(0.2f),
         a3 = _mm256_set1_ps(0.3f), a4 = _mm256_set1_ps(0.4f), a5 = _mm256_set1_ps(0.5f),
         a6 = _mm256_set1_ps(0.6f), a7 = _mm256_set1_ps(0.7f), a8 = _mm256_set1_ps(0.8f),
         a9 = _mm256_set1_ps(0.9f), a10 = _mm256_set1_ps(1.0f), a11 = _mm256_set1_ps(1.1f);
  for (long n = 0; n < iters; n++) {
    a0 = _mm256_fmadd_ps(a0, x, y), a1 = _mm256_fmadd_ps(a1, x, y);
    a2 = _mm256_fmadd_ps(a2, x, y), a3 = _mm256_fmadd_ps(a3, x, y);
    a4 = _mm256_fmadd_ps(a4, x, y), a5 = _mm256_fmadd_ps(a5, x, y);
    a6 = _mm256_fmadd_ps(a6, x, y), a7 = _mm256_fmadd_ps(a7, x, y);
    a8 = _mm256_fmadd_ps(a8, x, y), a9 = _mm256_fmadd_ps(a9, x, y);
    a10 = _mm256_fmadd_ps(a10, x, y), a11 = _mm256_fmadd_ps(a11, x, y);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

/* Best of 9 GFLOP/s of fma_loop in thread CPU time (other processes' time slices excluded). */
static double measure_fma_gflops(void) {
  const long iters = 2000000; /* 384 MFLOP: ~4 ms at 96 GFLOP/s */
  volatile float sink = fma_loop(iters / 10);
  double best = 0;
  for (int r = 0; r < 9; r++) {
    double t0 = bench_thread_cpu_us();
    sink = fma_loop(iters);
    double t1 = bench_thread_cpu_us();
    double gflops = (double)iters * 12 * 8 * 2 / ((t1 - t0) * 1e3);
    if (gflops > best) best = gflops;
  }
  (void)sink;
  return best;
}
#endif

/* The value after "key\t: " on the first line of /proc/cpuinfo that starts with key. */
static bool cpuinfo_field(const char *key, char *out, size_t size) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[4096];
  bool found = false;
  size_t n = strlen(key);
  while (!found && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, key, n) != 0 || !colon) continue;
    char *v = colon + 1;
    while (*v == ' ') v++;
    v[strcspn(v, "\n")] = '\0';
    snprintf(out, size, "%s", v);
    found = true;
  }
  fclose(f);
  return found;
}

static bool cpu_has_flag(const char *flags, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = strstr(flags, flag); p; p = strstr(p + 1, flag)) {
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  }
  return false;
}

const bench_machine *bench_machine_get(void) {
  static bench_machine m;
  static bool done;
  if (done) return &m;
  done = true;
  if (!cpuinfo_field("model name", m.cpu, sizeof m.cpu)) snprintf(m.cpu, sizeof m.cpu, "unknown");
  char text[64] = "0", flags[4096] = "";
  cpuinfo_field("cpu MHz", text, sizeof text);
  m.mhz = atof(text);
  cpuinfo_field("flags", flags, sizeof flags);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  m.cores = online > 0 ? (int)online : 1;
  /* Two FMA pipes per core on every AVX2 core since Haswell and Zen 2 (Zen 1 splits its
   * 256-bit ops, so this is an upper bound there); a flop is counted per lane, 2 per FMA. */
  if (cpu_has_flag(flags, "avx512f")) {
    m.flops_per_cycle = 2 * 16 * 2;
    snprintf(m.simd, sizeof m.simd, "AVX-512 FMA: 2 pipes x 16 f32 lanes x 2");
  } else if (cpu_has_flag(flags, "avx2") && cpu_has_flag(flags, "fma")) {
    m.flops_per_cycle = 2 * 8 * 2;
    snprintf(m.simd, sizeof m.simd, "AVX2 FMA: 2 pipes x 8 f32 lanes x 2");
  } else if (cpu_has_flag(flags, "avx")) {
    m.flops_per_cycle = 2 * 8;
    snprintf(m.simd, sizeof m.simd, "AVX: 1 add + 1 mul x 8 f32 lanes");
  } else {
    m.flops_per_cycle = 2 * 4;
    snprintf(m.simd, sizeof m.simd, "SSE: 1 add + 1 mul x 4 f32 lanes");
  }
  m.max_mhz = m.mhz;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
  long khz = 0;
  if (f && fscanf(f, "%ld", &khz) == 1 && khz / 1e3 > m.max_mhz) m.max_mhz = (double)khz / 1e3;
  if (f) fclose(f);
  m.peak_core_gflops = m.max_mhz * m.flops_per_cycle / 1e3;
#ifdef BENCH_HAVE_FMA_LOOP
  /* The AVX2 loop measures an AVX2 core; an AVX-512 one would need its own 16-lane loop. */
  if (cpu_has_flag(flags, "avx2") && cpu_has_flag(flags, "fma"))
    m.measured_core_gflops = measure_fma_gflops();
#endif
  m.blas = dt__blas_name();
  m.amx = dt__amx_usable();
  m.memcpy_gbs = bench_memcpy_gbs(64LL << 20, 5);
  return &m;
}

void bench_machine_print(bool json) {
  const bench_machine *m = bench_machine_get();
  if (json) {
    printf("{\"name\":\"machine\",\"cpu\":\"%s\",\"cores\":%d,\"mhz\":%.1f,"
           "\"max_mhz\":%.1f,\"flops_per_cycle\":%d,\"peak_core_gflops\":%.1f,"
           "\"peak_gflops\":%.1f,\"measured_core_gflops\":%.1f,\"blas\":\"%s\","
           "\"amx_gemm\":%s,\"memcpy_gbs\":%.2f}\n",
           m->cpu, m->cores, m->mhz, m->max_mhz, m->flops_per_cycle, m->peak_core_gflops,
           m->peak_core_gflops * m->cores, m->measured_core_gflops, m->blas,
           m->amx ? "true" : "false", m->memcpy_gbs);
  } else {
    printf("# machine: %s, %d cores, %.0f MHz; BLAS %s\n", m->cpu, m->cores, m->mhz, m->blas);
    if (m->amx)
      printf("# float32 GEMMs of the library on AMX tiles (3 bfloat16 parts per operand, 6 "
             "products; DT_AMX=0 runs them on the BLAS); \"cblas\" and \"sgemm\" rates are "
             "the BLAS's\n");
    printf("# peak f32: %.1f GFLOP/s per core (%.0f MHz x %d flop/cycle, %s), %.1f for %d "
           "cores; measured FMA loop %.1f GFLOP/s per core (%.0f MHz effective); memcpy 64 MiB "
           "%.2f GB/s\n",
           m->peak_core_gflops, m->max_mhz, m->flops_per_cycle, m->simd,
           m->peak_core_gflops * m->cores, m->cores, m->measured_core_gflops,
           m->measured_core_gflops * 1e3 / m->flops_per_cycle, m->memcpy_gbs);
  }
  fflush(stdout);
}
