/* Hostile traces (issue 10, items 8 and 9): times whose spans overflow, inputs without end,
 * and strings with terminal escape sequences, through the library and `dtensor trace`. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reference.h"

/* The tool's trace subcommand and the command tables' dispatcher are compiled into this test
 * so that its output can be checked without the dtensor executable (the tests link only the
 * library). */
#include "../tools/command.c"
#include "../tools/trace.c"

#define GPU0 "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":\"GPU 0\"}}"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

static void temp_path(char *path, size_t size, const char *tag) {
  snprintf(path, size, "/tmp/dt_test_hostile_%s_XXXXXX", tag);
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t cap = 1 << 16, n = 0;
  char *text = malloc(cap);
  for (size_t got; (got = fread(text + n, 1, cap - 1 - n, f)) > 0;) {
    n += got;
    if (n + 1 == cap) text = realloc(text, cap *= 2);
  }
  text[n] = '\0';
  fclose(f);
  return text;
}

/* Runs `dtensor trace ARGS...`; returns its exit code with what it wrote to stdout and
 * stderr (to be freed). */
static int run_tool(char **out, char **err, int argc, const char **argv) {
  char out_path[64], err_path[64];
  temp_path(out_path, sizeof out_path, "stdout");
  temp_path(err_path, sizeof err_path, "stderr");
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  int out_fd = open(out_path, O_WRONLY | O_TRUNC), err_fd = open(err_path, O_WRONLY | O_TRUNC);
  cr_assert(saved_out >= 0 && saved_err >= 0 && out_fd >= 0 && err_fd >= 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  int rc = tool_dispatch("dtensor trace", tool_trace_commands, "command", argc, (char **)argv);
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  close(out_fd);
  close(err_fd);
  *out = read_all(out_path);
  *err = read_all(err_path);
  remove(out_path);
  remove(err_path);
  return rc;
}

/* True if text has a terminal control byte or a C1 control in UTF-8 (0xc2 0x80..0x9f). */
static bool has_raw_control(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if ((*p < 0x20 && *p != '\n') || *p == 0x7f) return true;
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return true;
  }
  return false;
}

/* ---- Times ------------------------------------------------------------------------------- */

Test(trace_hostile, overflowing_times_are_refused) {
  /* The trace: the span from -1e308 to 1e308 is infinite, utilization NaN. */
  const char *text =
      "[" GPU0 ",{\"ph\":\"X\",\"name\":\"a\",\"ts\":-1e308,\"dur\":1e308,\"pid\":0},"
      "{\"ph\":\"X\",\"name\":\"b\",\"ts\":1e308,\"dur\":0,\"pid\":0}]";
  dt_trace *trace = (dt_trace *)&text;
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_ERR_INVALID);
  cr_assert_null(trace);
  ref_assert_error_mentions("out of range", "\"ts\" -1e+308");
  /* One end alone out of range is refused too (dur takes ts past the bound). */
  const char *late = "[{\"ph\":\"X\",\"ts\":9e17,\"dur\":2e17,\"pid\":0}]";
  cr_assert_eq(dt_trace_read_memory(late, strlen(late), &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("out of range", "1.1e+18");

  /* The tool says so and prints nothing on stdout. */
  char path[64];
  temp_path(path, sizeof path, "overflow");
  write_file(path, text);
  char *out, *err;
  int rc = run_tool(&out, &err, 4, (const char *[]){"trace", "stats", path, "--json"});
  cr_assert_eq(rc, 1, "exit %d, stdout %s", rc, out);
  cr_assert_str_eq(out, "");
  cr_assert(strstr(err, "out of range") && strstr(err, path), "%s", err);
  free(out);
  free(err);
  remove(path);
}

Test(trace_hostile, times_at_the_bounds_give_finite_figures) {
  const char *text = "[" GPU0 ",{\"ph\":\"X\",\"name\":\"mm\",\"ts\":-1e18,\"dur\":2e18,\"pid\":0},"
                     "{\"ph\":\"X\",\"name\":\"b\",\"ts\":1e18,\"dur\":0,\"pid\":0,\"tid\":1}]";
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, strlen(text), &trace), DT_OK, "%s", dt_last_error());
  dt_trace_stats s;
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", 0, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(s.total_us, 2e18);
  cr_assert_eq(s.busy_us, 2e18);
  cr_assert_eq(s.utilization, 1.0);
  cr_assert_eq(s.mm_fraction, 1.0);
  /* A total that is not a number is refused, not turned into inf or NaN figures. */
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", INFINITY, &s), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_compute_stats", "total_us inf");
  cr_assert_eq(dt_trace_compute_stats(trace, "GPU", NAN, &s), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_compute_stats", "total_us");
  cr_assert_eq(dt_trace_write_svg(trace, "GPU", NAN, "/tmp/never_written.svg"), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_write_svg", "total_us");
  cr_assert_eq(access("/tmp/never_written.svg", F_OK), -1);
  dt_trace_destroy(trace);

  char path[64];
  temp_path(path, sizeof path, "bounds");
  write_file(path, text);
  char *out, *err;
  cr_assert_eq(run_tool(&out, &err, 4, (const char *[]){"trace", "stats", path, "--json"}), 0, "%s",
               err);
  cr_assert(strstr(out, "\"utilization\":1.000000"), "%s", out);
  cr_assert(!strstr(out, "inf") && !strstr(out, "nan"), "%s", out);
  free(out);
  free(err);
  cr_assert_eq(run_tool(&out, &err, 3, (const char *[]){"trace", "stats", path}), 0, "%s", err);
  cr_assert(strstr(out, "utilization 100.00%"), "%s", out);
  cr_assert(!strstr(out, "nan") && !strstr(out, "inf"), "%s", out);
  free(out);
  free(err);
  remove(path);
}

/* ---- Input size ------------------------------------------------------------------------- */

Test(trace_hostile, dev_zero_fails_at_once) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  dt_trace *trace = (dt_trace *)&t0;
  cr_assert_eq(dt_trace_read_file("/dev/zero", &trace), DT_ERR_INVALID);
  cr_assert_null(trace);
  ref_assert_error_mentions("byte 0", "'{' or '['");
  char *out, *err;
  cr_assert_eq(run_tool(&out, &err, 3, (const char *[]){"trace", "stats", "/dev/zero"}), 1);
  cr_assert(strstr(err, "/dev/zero") && strstr(err, "byte 0x00"), "%s", err);
  free(out);
  free(err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  cr_assert_lt(seconds, 5.0, "reading /dev/zero took %.1f s", seconds);
}

Test(trace_hostile, files_over_the_limit_are_refused) {
  /* A valid 5,000-byte trace: whitespace after one event. */
  char *text = malloc(5001);
  const char *event = "[" GPU0 ",{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"pid\":0}]";
  size_t n = strlen(event);
  memcpy(text, event, n);
  memset(text + n, ' ', 5000 - n);
  text[5000] = '\0';
  char path[64];
  temp_path(path, sizeof path, "big");
  write_file(path, text);
  free(text);
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file_ex(path, 4096, &trace), DT_ERR_INVALID);
  cr_assert_null(trace);
  ref_assert_error_mentions("dt_trace_read_file_ex", "5000 bytes, more than the limit of 4096");
  cr_assert_eq(dt_trace_read_file_ex(path, 5000, &trace), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_trace_event_count(trace), 1);
  dt_trace_destroy(trace);
  cr_assert_eq(dt_trace_read_file_ex(path, 0, &trace), DT_OK, "%s", dt_last_error());
  dt_trace_destroy(trace);
  cr_assert_eq(dt_trace_read_file_ex(NULL, 0, &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("dt_trace_read_file_ex", "path is NULL");

  char *out, *err;
  cr_assert_eq(
      run_tool(&out, &err, 6,
               (const char *[]){"trace", "stats", path, "--device-label", "GPU", "--max-bytes"}),
      2); /* --max-bytes without a value */
  free(out);
  free(err);
  cr_assert_eq(run_tool(&out, &err, 7,
                        (const char *[]){"trace", "stats", path, "--device-label", "GPU",
                                         "--max-bytes", "4096"}),
               1);
  cr_assert(strstr(err, "more than the limit of 4096"), "%s", err);
  free(out);
  free(err);
  cr_assert_eq(run_tool(&out, &err, 7,
                        (const char *[]){"trace", "stats", path, "--device-label", "GPU",
                                         "--max-bytes", "-5"}),
               2);
  cr_assert(strstr(err, "--max-bytes wants a positive integer"), "%s", err);
  free(out);
  free(err);
  cr_assert_eq(run_tool(&out, &err, 7,
                        (const char *[]){"trace", "stats", path, "--device-label", "GPU",
                                         "--max-bytes", "5000"}),
               0, "%s", err);
  cr_assert(strstr(out, "1 complete events"), "%s", out);
  free(out);
  free(err);
  remove(path);
}

typedef struct pipe_writer {
  const char *path;
  size_t bytes;
  atomic_bool opened; /* the write end is open: a reader now waits for bytes, not EOF */
} pipe_writer;

static void *feed_pipe(void *p) {
  pipe_writer *w = p;
  int fd = open(w->path, O_WRONLY);
  atomic_store(&w->opened, true);
  if (fd < 0) return NULL;
  char block[1024];
  memset(block, ' ', sizeof block);
  block[0] = '[';
  for (size_t sent = 0; sent < w->bytes;) {
    ssize_t k = write(fd, block, sizeof block);
    if (k <= 0) break; /* the reader stopped: EPIPE (SIGPIPE is ignored) */
    sent += (size_t)k;
    block[0] = ' ';
  }
  close(fd);
  return NULL;
}

Test(trace_hostile, pipes_are_read_up_to_the_limit, .timeout = 30) {
  signal(SIGPIPE, SIG_IGN); /* this test's process only */
  char path[64];
  snprintf(path, sizeof path, "/tmp/dt_test_hostile_fifo_%d", (int)getpid());
  cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
  /* An endless-looking stream of a valid start: stopped at the limit. The reader opens without
   * waiting for a writer, so the writer is connected first (its open needs a reader: this
   * placeholder, closed after the read so that the writer's next write fails with EPIPE). */
  int placeholder = open(path, O_RDONLY | O_NONBLOCK);
  cr_assert(placeholder >= 0, "%s", strerror(errno));
  pipe_writer w = {.path = path, .bytes = 1 << 20};
  pthread_t thread;
  cr_assert_eq(pthread_create(&thread, NULL, feed_pipe, &w), 0);
  while (!atomic_load(&w.opened)) sched_yield();
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_file_ex(path, 10000, &trace), DT_ERR_INVALID);
  ref_assert_error_mentions("holds more than the limit of 10000 bytes", path);
  close(placeholder);
  pthread_join(thread, NULL);
  unlink(path);
}

/* Issue 35 item 6: a FIFO nobody writes once blocked `dtensor trace stats|plot` forever in
 * open. It is opened without waiting and, with no writer, refused at once. */
Test(trace_hostile, fifo_without_a_writer_does_not_block, .timeout = 20) {
  char dir[64], path[96], svg[96];
  snprintf(dir, sizeof dir, "/tmp/dt_test_hostile_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  snprintf(svg, sizeof svg, "%s/plot.svg", dir);
  cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
  dt_trace *trace = (dt_trace *)dir;
  cr_assert_eq(dt_trace_read_file(path, &trace), DT_ERR_IO);
  cr_assert_null(trace);
  ref_assert_error_mentions(path, "no writer");
  ref_assert_error_mentions("dt_trace_read_file", "FIFO");
  char *out, *err;
  cr_assert_eq(run_tool(&out, &err, 3, (const char *[]){"trace", "stats", path}), 1);
  cr_assert(strstr(err, path) && strstr(err, "no writer"), "%s", err);
  free(out);
  free(err);
  cr_assert_eq(run_tool(&out, &err, 5, (const char *[]){"trace", "plot", path, "-o", svg}), 1);
  cr_assert(strstr(err, path) && strstr(err, "no writer"), "%s", err);
  cr_assert_eq(access(svg, F_OK), -1, "a plot was written");
  free(out);
  free(err);
  /* A directory is refused by name, not read. */
  cr_assert_eq(dt_trace_read_file(dir, &trace), DT_ERR_IO);
  ref_assert_error_mentions(dir, "a directory");
  unlink(path);
  rmdir(dir);
}

/* ---- Escape sequences ------------------------------------------------------------------- */

/* A process named with an OSC title and a clear-screen sequence, labels with a colour and a
 * C1 CSI, and a lane whose name has a byte that is not UTF-8. */
static const char hostile[] =
    "{\"traceEvents\":["
    "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":"
    "\"GPU\\u001b[31m\\u009b2J\"}},"
    "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":"
    "\"\\u001b]0;pwned\\u0007\\u001b[2J\"}},"
    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":3,\"args\":{\"name\":\"t\xff\\\\\"}},"
    "{\"name\":\"k\",\"ph\":\"X\",\"pid\":0,\"tid\":3,\"ts\":0,\"dur\":10}]}";

Test(trace_hostile, text_output_escapes_control_characters) {
  char path[64];
  temp_path(path, sizeof path, "escapes");
  write_file(path, hostile);
  char *out, *err;
  cr_assert_eq(run_tool(&out, &err, 3, (const char *[]){"trace", "stats", path}), 0, "%s", err);
  cr_assert_not(has_raw_control(out), "raw control characters in: %s", out);
  cr_assert(strstr(out, "\\x1b]0;pwned\\x07\\x1b[2J"), "%s", out);
  cr_assert(strstr(out, "GPU\\x1b[31m"), "%s", out); /* cut at the 12-column labels cell */
  free(out);
  free(err);
  /* The error that lists the labels present escapes them too. */
  cr_assert_eq(
      run_tool(&out, &err, 5, (const char *[]){"trace", "stats", path, "--device-label", "NPU"}),
      1);
  cr_assert_not(has_raw_control(err), "raw control characters in: %s", err);
  cr_assert(strstr(err, "'GPU\\x1b[31m\\u009b2J'"), "%s", err);
  free(out);
  free(err);
  remove(path);
}

Test(trace_hostile, json_output_escapes_as_json_does) {
  char path[64];
  temp_path(path, sizeof path, "escapes_json");
  write_file(path, hostile);
  char *out, *err;
  cr_assert_eq(run_tool(&out, &err, 4, (const char *[]){"trace", "stats", path, "--json"}), 0, "%s",
               err);
  cr_assert_not(has_raw_control(out), "raw control characters in: %s", out);
  cr_assert(strstr(out, "\"name\":\"\\u001b]0;pwned\\u0007\\u001b[2J\""), "%s", out);
  cr_assert(strstr(out, "\"labels\":\"GPU\\u001b[31m\\u009b2J\""), "%s", out);
  cr_assert(strstr(out, "\"name\":\"t\\ufffd\\\\\""), "%s", out); /* not UTF-8, backslash */
  /* The output reads back as JSON: our own reader accepts it inside a trace's args. */
  char *wrapped = malloc(strlen(out) + 128);
  sprintf(wrapped, "[{\"ph\":\"i\",\"args\":%s}]", out);
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(wrapped, strlen(wrapped), &trace), DT_OK, "%s",
               dt_last_error());
  dt_trace_destroy(trace);
  free(wrapped);
  free(out);
  free(err);
  remove(path);
}
