/* The machine a benchmark runs on, printed first by every suite (a JSON line with --json, a
 * text header otherwise) so that figures from different hosts are never mixed up. */
#ifndef BENCH_MACHINE_H
#define BENCH_MACHINE_H

#include <stdbool.h>

typedef struct bench_machine {
  char cpu[128];           /* "model name" of /proc/cpuinfo */
  int cores;               /* online CPUs */
  double mhz;              /* "cpu MHz" of /proc/cpuinfo (the nominal clock under a hypervisor) */
  int flops_per_cycle;     /* f32 flops per cycle and core: FMA pipes x lanes x 2 */
  char simd[64];           /* how flops_per_cycle was derived */
  double peak_core_gflops; /* mhz x flops_per_cycle / 1000 */
  double max_mhz;          /* cpufreq's cpuinfo_max_freq when the kernel exposes it, else mhz */
  /* One core's f32 peak measured in this run: a loop of independent FMAs (AVX2 or AVX-512,
   * 12 accumulators), best of 9 in thread CPU time; 0 without FMA. Above peak_core_gflops
   * when the core boosts above the nominal clock. */
  double measured_core_gflops;
  const char *blas;  /* the BLAS linked at build time, with its version */
  bool amx;          /* float32 GEMMs run on AMX tiles (kernels/cpu/amx_gemm.h) */
  double memcpy_gbs; /* a 64 MiB memcpy measured in this run (best of 5) */
} bench_machine;

/* Reads /proc/cpuinfo and measures memcpy the first time; later calls return the same. */
const bench_machine *bench_machine_get(void);

/* Prints the header: {"name":"machine",...} with json, "# machine: ..." lines otherwise. */
void bench_machine_print(bool json);

/* Best-of-reps GB/s of memcpy over `bytes` (each byte read once and written once). */
double bench_memcpy_gbs(long long bytes, int reps);

#endif
