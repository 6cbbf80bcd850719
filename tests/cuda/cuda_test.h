/*
 * A minimal harness for the CUDA tests (tests/cuda/): plain programs, no Criterion, so that
 * no forking runner starts the CUDA runtime in a parent and uses it in a child, and so that a
 * test can exit 77 (CTest's SKIP_RETURN_CODE) when the machine has no GPU.
 */
#ifndef DT_TESTS_CUDA_TEST_H
#define DT_TESTS_CUDA_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "dtensor/dtensor.h"

#define DT_TEST_SKIP 77

static int dt_test_failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      dt_test_failures++;                                                                          \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

/* A call that must succeed; on failure it prints dt_last_error() and leaves the test. */
#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    dt_status check_ok_status = (call);                                                            \
    if (check_ok_status != DT_OK) {                                                                \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,                     \
              dt_status_string(check_ok_status), dt_last_error());                                 \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Exits 77 (skipped) when there is no CUDA device, saying why. */
static inline void dt_test_require_gpu(const char *test) {
  if (!dt_cuda_is_available()) {
    dt_tensor *t = NULL;
    int64_t one = 1;
    dt_tensor_options o = {.device = {DT_DEVICE_CUDA, 0}};
    dt_empty_ex(1, &one, DT_F32, &o, &t); /* fails, and says why */
    printf("%s: skipped: %s\n", test, dt_last_error());
    exit(DT_TEST_SKIP);
  }
}

static inline int dt_test_result(const char *test) {
  if (dt_test_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", test, dt_test_failures);
    return 1;
  }
  printf("%s: passed\n", test);
  return 0;
}

#endif /* DT_TESTS_CUDA_TEST_H */
