/* Timing helpers shared by the benchmarks. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* CPU time of the calling thread: on a shared machine, where other processes take time
 * slices, it still measures the work itself (not the waits in the run queue). */
static inline double bench_thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n samples (sorts them in place). */
static inline double bench_median(double *samples, int n) {
  qsort(samples, (size_t)n, sizeof *samples, bench_cmp_double);
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

/* Median and spread of n samples, for reports that must show how noisy a figure is. */
typedef struct bench_stats {
  double median, min, max;
} bench_stats;

/* Sorts the samples in place. */
static inline bench_stats bench_stats_of(double *samples, int n) {
  bench_stats s;
  s.median = bench_median(samples, n);
  s.min = samples[0];
  s.max = samples[n - 1];
  return s;
}

/* Smallest of n samples. */
static inline double bench_min(const double *samples, int n) {
  double m = samples[0];
  for (int i = 1; i < n; i++) m = samples[i] < m ? samples[i] : m;
  return m;
}

#endif
