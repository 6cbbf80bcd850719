/* Trace and SVG output files: modes under concurrent writers, replacing keeps the mode,
 * long names, and the file size limit (issue 10, item 2). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reference.h"

/* A trace with `lanes` lanes in one GPU process, so its SVG has a row per lane. */
static dt_trace *trace_with_lanes(int lanes) {
  size_t cap = 256 + (size_t)lanes * 128;
  char *text = malloc(cap);
  size_t n = (size_t)snprintf(
      text, cap,
      "[{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":\"GPU\"}}");
  for (int l = 0; l < lanes; l++) {
    n += (size_t)snprintf(text + n, cap - n,
                          ",{\"name\":\"k\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%d,\"dur\":5}",
                          l, 10 * l);
  }
  n += (size_t)snprintf(text + n, cap - n, "]");
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, n, &trace), DT_OK, "%s", dt_last_error());
  free(text);
  return trace;
}

static void make_dir(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/dt_test_output_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

/* Entries of dir other than . and ..; the names starting with ".dt-" are temporaries. */
static int count_entries(const char *dir, int *temporaries) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  if (temporaries) *temporaries = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    n++;
    if (temporaries && strncmp(e->d_name, ".dt-", 4) == 0) (*temporaries)++;
  }
  closedir(d);
  return n;
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4200];
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static mode_t mode_of(const char *path) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "stat %s: %s", path, strerror(errno));
  return st.st_mode & 07777;
}

static void write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  cr_assert_eq(chmod(path, mode), 0);
}

static void read_start(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* ---- Concurrent writers ------------------------------------------------------------------ */

enum { WRITERS = 16, FILES_EACH = 100 };

typedef struct writer_arg {
  const char *dir;
  int index;
  const dt_trace *trace;
  const dt_profiler *profiler;
  pthread_barrier_t *start;
  int failures;
} writer_arg;

static void *writer_main(void *p) {
  writer_arg *a = p;
  pthread_barrier_wait(a->start);
  char path[512];
  for (int i = 0; i < FILES_EACH; i++) {
    /* Half SVG plots, half per-rank Chrome traces: both go through the same output file. */
    dt_status st;
    if ((a->index + i) % 2) {
      snprintf(path, sizeof path, "%s/w%02d_%03d.svg", a->dir, a->index, i);
      st = dt_trace_write_svg(a->trace, "GPU", 0, path);
    } else {
      snprintf(path, sizeof path, "%s/w%02d_%03d.json", a->dir, a->index, i);
      st = dt_profiler_write_chrome_trace_rank(a->profiler, a->index, path);
    }
    if (st) a->failures++;
  }
  return NULL;
}

static void concurrent_writers_get_mode(mode_t mask) {
  umask(mask);
  char dir[64];
  make_dir(dir, sizeof dir);
  dt_trace *trace = trace_with_lanes(3);
  dt_profiler *profiler = NULL;
  cr_assert_eq(dt_profiler_create(&profiler), DT_OK);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, WRITERS);
  pthread_t threads[WRITERS];
  writer_arg args[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    args[w] =
        (writer_arg){.dir = dir, .index = w, .trace = trace, .profiler = profiler, .start = &start};
    cr_assert_eq(pthread_create(&threads[w], NULL, writer_main, &args[w]), 0);
  }
  for (int w = 0; w < WRITERS; w++) pthread_join(threads[w], NULL);
  pthread_barrier_destroy(&start);
  /* The process umask is exactly what the test set. */
  mode_t now = umask(mask);
  cr_assert_eq(now, mask, "umask changed from %03o to %03o", (unsigned)mask, (unsigned)now);
  int wrong = 0, failures = 0;
  mode_t want = 0666 & ~mask, first_wrong = 0;
  char path[512];
  for (int w = 0; w < WRITERS; w++) {
    failures += args[w].failures;
    for (int i = 0; i < FILES_EACH; i++) {
      snprintf(path, sizeof path, "%s/w%02d_%03d.%s", dir, w, i, (w + i) % 2 ? "svg" : "json");
      mode_t got = mode_of(path);
      if (got != want && !wrong++) first_wrong = got;
    }
  }
  int temporaries;
  int entries = count_entries(dir, &temporaries);
  remove_tree(dir);
  dt_profiler_destroy(profiler);
  dt_trace_destroy(trace);
  cr_assert_eq(failures, 0, "%d writes failed", failures);
  cr_assert_eq(wrong, 0, "%d of %d files do not have mode %03o (first: %03o)", wrong,
               WRITERS * FILES_EACH, (unsigned)want, (unsigned)first_wrong);
  cr_assert_eq(entries, WRITERS * FILES_EACH);
  cr_assert_eq(temporaries, 0);
}

Test(trace_output, concurrent_writers_umask_022) { concurrent_writers_get_mode(022); }

Test(trace_output, concurrent_writers_umask_077) { concurrent_writers_get_mode(077); }

/* ---- Replacing, links, names -------------------------------------------------------------- */

/* A replaced file of ours lends its bits, never more than the umask allows (issue 35 item 2:
 * 0640 under umask 077 gives 0600). */
Test(trace_output, replacing_never_widens_the_mode) {
  static const struct {
    mode_t mask, old, mode;
  } cases[] = {{022, 0600, 0600}, {077, 0640, 0600}, {0, 0604, 0604}};
  dt_trace *trace = trace_with_lanes(2);
  char dir[64], path[128], buf[64];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/plot.svg", dir);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    umask(cases[i].mask);
    write_text(path, "old", cases[i].old);
    cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, path), DT_OK, "%s", dt_last_error());
    read_start(path, buf, sizeof buf);
    cr_assert(strncmp(buf, "<svg", 4) == 0, "case %zu: %s", i, buf);
    cr_assert_eq(mode_of(path), cases[i].mode, "case %zu: mode %03o, want %03o", i,
                 (unsigned)mode_of(path), (unsigned)cases[i].mode);
  }
  cr_assert_eq(count_entries(dir, NULL), 1);
  remove_tree(dir);
  /* An empty path names nothing and leaves nothing in the working directory. */
  char cwd[64];
  make_dir(cwd, sizeof cwd);
  cr_assert_eq(chdir(cwd), 0);
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, ""), DT_ERR_IO);
  ref_assert_error_mentions("dt_trace_write_svg", "''");
  cr_assert_eq(count_entries(cwd, NULL), 0);
  cr_assert_eq(chdir("/"), 0);
  remove_tree(cwd);
  dt_trace_destroy(trace);
}

/* Symbolic links at the path are replaced, never followed (issue 35 item 2): every writer's
 * case is in test_output_links.c. */

Test(trace_output, a_250_character_name) {
  umask(022);
  dt_trace *trace = trace_with_lanes(2);
  char dir[64], path[512];
  make_dir(dir, sizeof dir);
  int n = snprintf(path, sizeof path, "%s/", dir);
  memset(path + n, 'a', 246);
  strcpy(path + n + 246, ".svg"); /* 250 characters, below NAME_MAX (255) */
  cr_assert_eq(strlen(path + n), 250);
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, path), DT_OK, "%s", dt_last_error());
  cr_assert_eq(mode_of(path), 0644);
  /* Replacing it works too. */
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, path), DT_OK, "%s", dt_last_error());
  cr_assert_eq(count_entries(dir, NULL), 1);
  remove_tree(dir);
  dt_trace_destroy(trace);
}

Test(trace_output, file_size_limit_fails_cleanly) {
  /* Criterion runs each test in its own process, so the limit stays in this test. */
  umask(022);
  dt_trace *trace = trace_with_lanes(40); /* an SVG of several kilobytes */
  char dir[64], path[128], buf[64];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/plot.svg", dir);
  write_text(path, "keep", 0644);
  struct rlimit saved, limit;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
  limit = saved;
  limit.rlim_cur = 1024;
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &limit), 0);
  dt_status st = dt_trace_write_svg(trace, "GPU", 0, path);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &saved), 0);
  cr_assert_eq(st, DT_ERR_IO);
  ref_assert_error_mentions("dt_trace_write_svg", strerror(EFBIG));
  /* The old file is untouched, no temporary is left, and no SIGXFSZ is blocked or pending. */
  read_start(path, buf, sizeof buf);
  cr_assert_str_eq(buf, "keep");
  int temporaries;
  cr_assert_eq(count_entries(dir, &temporaries), 1);
  cr_assert_eq(temporaries, 0);
  sigset_t mask, pending;
  pthread_sigmask(SIG_SETMASK, NULL, &mask);
  sigpending(&pending);
  cr_assert_not(sigismember(&mask, SIGXFSZ));
  cr_assert_not(sigismember(&pending, SIGXFSZ));
  /* Without the limit the same write succeeds. */
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", 0, path), DT_OK, "%s", dt_last_error());
  read_start(path, buf, sizeof buf);
  cr_assert(strncmp(buf, "<svg", 4) == 0, "%s", buf);
  remove_tree(dir);
  dt_trace_destroy(trace);
}
