/* Timing helpers shared by the benchmarks. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* CPU time of the whole process (every thread: the BLAS's and our intra-op workers): on a
 * loaded machine it measures the work where wall time measures the queue. */
static inline double bench_process_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The clock of the suites that take --clock cpu|wall (bench ops, bench train --size):
 * process CPU time by default, since the shared machine's run queue inflates wall time. */
__attribute__((unused)) static double (*bench_clock)(void) = bench_process_cpu_us;

/* A whole decimal integer in [lo, hi] from an option's value (atoi took "2abc" as 2 and "x"
 * as 0): true and *out, or false with a line on stderr naming the option and the value. */
static inline bool bench_int_option(const char *option, const char *text, long long lo,
                                    long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (*text >= '0' && *text <= '9' && end && !*end && errno == 0 && v >= lo && v <= hi) {
    *out = v;
    return true;
  }
  fprintf(stderr, "bench: %s \"%.64s\" is not an integer in [%lld, %lld]\n", option, text, lo, hi);
  return false;
}

/* Reads --clock cpu|wall at argv[*i] into bench_clock: 1 taken, 0 not this option, -1 bad. */
static inline int bench_clock_option(int argc, char **argv, int *i) {
  if (strcmp(argv[*i], "--clock") != 0) return 0;
  if (*i + 1 >= argc) return -1;
  const char *v = argv[++*i];
  if (strcmp(v, "cpu") == 0) {
    bench_clock = bench_process_cpu_us;
  } else if (strcmp(v, "wall") == 0) {
    bench_clock = bench_now_us;
  } else {
    return -1;
  }
  return 1;
}

static inline const char *bench_clock_name(void) {
  return bench_clock == bench_now_us ? "wall" : "cpu";
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
