/* A failed step of an output's close is reported against the names it used (issue 35 item
 * 11). dt__output_close once returned the rename's errno and every writer said "writing
 * '<path>' failed: <reason>", as if the bytes had not been written, when the rename of the
 * complete temporary over the path had failed (a directory put at the path meanwhile). Now
 * the close records the step and dt__output_close_error names it: the rename with the
 * temporary, the path and the rename's own errno; a failed write stays "writing". */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Private header: the close's steps are what is tested, between open and close. */
#include "fs_helpers.h"
#include "profile/output_file.h"

/* Names in dir starting with ".dt-": temporaries left behind. */
static int temporaries(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, ".dt-", 4) == 0;
  closedir(d);
  return n;
}

Test(output_close, failed_rename_names_the_rename_both_names_and_its_errno) {
  char dir[] = "/tmp/dt_output_close_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char target[128], keep[160];
  snprintf(target, sizeof target, "%s/trace.json", dir);
  snprintf(keep, sizeof keep, "%s/keep", target);
  dt__output_file out;
  FILE *f = dt__output_open(&out, target);
  cr_assert_not_null(f, "%s: %s", target, strerror(errno));
  cr_assert_eq(fputs("{}\n", f) >= 0, true);
  char temporary[sizeof out.tmp];
  snprintf(temporary, sizeof temporary, "%s", out.tmp);
  cr_assert(strncmp(temporary, dir, strlen(dir)) == 0 && strstr(temporary, "/.dt-"), "%s",
            temporary);
  /* A non-empty directory appears at the path after the open: rename(2) of a file over it
   * fails with EISDIR (Linux) or another errno of the rename's own (ENOTEMPTY, EEXIST). */
  cr_assert_eq(mkdir(target, 0755), 0, "%s: %s", target, strerror(errno));
  cr_assert_eq(fs_write_file(keep, "mine\n"), 0);
  errno = 0;
  int err = dt__output_close(&out, f, false);
  cr_assert(err == EISDIR || err == ENOTEMPTY || err == EEXIST, "dt__output_close returned %d (%s)",
            err, strerror(err));
  cr_assert_eq(out.failed_step, DT__OUTPUT_RENAME);
  cr_assert_eq(dt__output_close_error(&out, err, "dt_profiler_write_chrome_trace"), DT_ERR_IO);
  char want[2 * sizeof out.tmp + 200];
  snprintf(want, sizeof want, "dt_profiler_write_chrome_trace: renaming '%s' to '%s' failed: %s",
           temporary, target, strerror(err));
  cr_assert_str_eq(dt_last_error(), want);
  /* The temporary is gone, the directory and its file are untouched. */
  cr_assert_eq(temporaries(dir), 0);
  char *text = fs_read_file(keep, NULL);
  cr_assert_not_null(text);
  cr_assert_str_eq(text, "mine\n");
  free(text);
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

/* A device written in place that takes no bytes: the write step failed, named as writing. */
Test(output_close, failed_write_is_reported_as_writing_the_path) {
  struct stat st;
  if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) cr_skip_test("no /dev/full here");
  dt__output_file out;
  FILE *f = dt__output_open(&out, "/dev/full");
  cr_assert_not_null(f, "/dev/full: %s", strerror(errno));
  cr_assert_eq(fputs("{}\n", f) >= 0, true); /* buffered: the flush in the close fails */
  int err = dt__output_close(&out, f, false);
  cr_assert_eq(err, ENOSPC, "dt__output_close returned %d (%s)", err, strerror(err));
  cr_assert_eq(out.failed_step, DT__OUTPUT_WRITE);
  cr_assert_eq(dt__output_close_error(&out, err, "dt_trace_write_svg"), DT_ERR_IO);
  char want[200];
  snprintf(want, sizeof want, "dt_trace_write_svg: writing '/dev/full' failed: %s",
           strerror(ENOSPC));
  cr_assert_str_eq(dt_last_error(), want);
}

/* A close that succeeds records no failed step and puts the bytes at the path. */
Test(output_close, success_records_no_step) {
  char dir[] = "/tmp/dt_output_close_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char target[128];
  snprintf(target, sizeof target, "%s/out.txt", dir);
  dt__output_file out;
  FILE *f = dt__output_open(&out, target);
  cr_assert_not_null(f);
  fputs("done\n", f);
  cr_assert_eq(dt__output_close(&out, f, false), 0);
  cr_assert_eq(out.failed_step, DT__OUTPUT_OK);
  char *text = fs_read_file(target, NULL);
  cr_assert_not_null(text);
  cr_assert_str_eq(text, "done\n");
  free(text);
  cr_assert_eq(temporaries(dir), 0);
  cr_assert_eq(fs_remove_tree(dir), 0);
}
