/* The main of a Criterion test whose cases need the shared fixtures (DT_FIXTURES_DIR): a run
 * that skipped any case tells CTest so instead of passing. Criterion itself exits 0 when every
 * case passed or skipped, so a clone without ../shared/fixtures would report the test passed
 * having checked nothing. Here a run whose cases all passed but some skipped exits 77 (the
 * SKIP_RETURN_CODE tests/CMakeLists.txt gives every test) and prints how many cases skipped
 * and the first reason; with DT_REQUIRE_FIXTURES=1 in the environment (CI sets it) it exits 1
 * instead, so a machine that lost its fixtures fails. A failed case exits 1 as before.
 *
 * Include it once, in the test file, after criterion.h; the file must not define main. */
#ifndef DT_TEST_FIXTURE_MAIN_H
#define DT_TEST_FIXTURE_MAIN_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Filled in the runner process by the report hooks below, read by main after the run. */
static size_t fixture_cases_run, fixture_cases_skipped;
static char fixture_skip_reason[512];

ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
  if (stats->test_status != CR_STATUS_SKIPPED || fixture_skip_reason[0]) return;
  snprintf(fixture_skip_reason, sizeof fixture_skip_reason, "%s/%s: %s", stats->test->category,
           stats->test->name, stats->message && stats->message[0] ? stats->message : "skipped");
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  fixture_cases_run = stats->nb_tests;
  fixture_cases_skipped = stats->tests_skipped;
}

int main(int argc, char *argv[]) {
  struct criterion_test_set *tests = criterion_initialize();
  int status = 0;
  /* A false return means the arguments asked for something else (--help, --list): done. */
  if (criterion_handle_args(argc, argv, true)) status = criterion_run_all_tests(tests) ? 0 : 1;
  criterion_finalize(tests);
  if (status != 0 || fixture_cases_skipped == 0) return status;
  const char *require = getenv("DT_REQUIRE_FIXTURES");
  bool required = require && strcmp(require, "") != 0 && strcmp(require, "0") != 0;
  fprintf(stderr, "%s: %zu of %zu cases skipped (first: %s)\n",
          required ? "FAILED (DT_REQUIRE_FIXTURES is set)" : "SKIPPED", fixture_cases_skipped,
          fixture_cases_run, fixture_skip_reason);
  return required ? 1 : 77;
}

#endif
