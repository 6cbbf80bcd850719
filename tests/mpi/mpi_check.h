/* Tiny check harness for the programs run under mpirun (no Criterion: one process per rank).
 * Each rank counts its passed and failed checks; mpi_check_finish sums them over the world,
 * rank 0 prints "N passed, N failed", and every rank returns the exit status. */
#ifndef DT_TESTS_MPI_CHECK_H
#define DT_TESTS_MPI_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtensor/dtensor.h"

static long mpi_passed, mpi_failed;
static int mpi_rank_for_messages;

static void mpi_check_at(bool ok, const char *file, int line, const char *format, ...) {
  if (ok) {
    mpi_passed++;
    return;
  }
  mpi_failed++;
  fprintf(stderr, "[rank %d] FAIL %s:%d: ", mpi_rank_for_messages, file, line);
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fprintf(stderr, " (last error: %s)\n", dt_last_error());
}

#define CHECK(cond, ...) mpi_check_at((cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_OK(expr)                                                                             \
  do {                                                                                             \
    dt_status check_status_ = (expr);                                                              \
    CHECK(check_status_ == DT_OK, "%s returned %s", #expr, dt_status_string(check_status_));       \
  } while (0)

/* Sums the counts over `world` and prints the closing line on rank 0. Returns the exit
 * status for main. */
static int mpi_check_finish(dt_comm *world) {
  int64_t counts[2] = {mpi_passed, mpi_failed};
  dt_tensor *t = NULL;
  if (dt_from_data(counts, 1, (int64_t[]){2}, DT_I64, &t) != DT_OK ||
      dt_comm_all_reduce(world, t, DT_REDUCE_SUM) != DT_OK) {
    fprintf(stderr, "[rank %d] could not sum the results: %s\n", mpi_rank_for_messages,
            dt_last_error());
    dt_tensor_release(t);
    return 1;
  }
  const int64_t *sums = dt_tensor_data(t);
  long passed = (long)sums[0], failed = (long)sums[1];
  dt_tensor_release(t);
  if (dt_comm_rank(world) == 0) {
    printf("%ld passed, %ld failed\n", passed, failed);
    fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

#endif /* DT_TESTS_MPI_CHECK_H */
