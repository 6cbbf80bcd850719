/* No output follows a planted link (issue 35 item 2). Another user's link `trace.json ->
 * victim` in a shared folder once made every writer replace the victim: the Chrome traces, the
 * SVG plots, dt_safetensors_save and dt_hf_model_save (config.json, model.safetensors). Now
 * each one's output replaces the link with a regular file of mode 0666 less the umask and the
 * victim is untouched; a FIFO nobody reads is refused without blocking; a directory is
 * refused; a device is written in place. */
#include <criterion/criterion.h>

#include "fixture_main.h" /* a run whose cases skipped for want of fixtures says so */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtensor/dtensor.h"
#include "reference.h"

#define HF DT_FIXTURES_DIR "/hf"

static void make_dir(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/dt_test_links_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(const char *dir) {
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

/* Names starting with ".dt-" in dir: temporaries left behind. */
static int temporaries(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, ".dt-", 4) == 0;
  closedir(d);
  return n;
}

static void write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
  cr_assert_eq(chmod(path, mode), 0);
}

static void expect_text(const char *path, const char *want) {
  char buf[64] = {0};
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  cr_assert_str_eq(buf, want, "%s was written through", path);
}

/* `path` is a regular file (not the link) of `mode`, starting with `start`. */
static void expect_output(const char *path, mode_t mode, const char *start) {
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
  cr_assert(S_ISREG(st.st_mode), "%s is not a regular file (mode %o)", path, (unsigned)st.st_mode);
  cr_assert_eq(st.st_mode & 07777, mode, "%s has mode %03o, want %03o", path,
               (unsigned)(st.st_mode & 07777), (unsigned)mode);
  char buf[16] = {0};
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, strlen(start), f);
  fclose(f);
  cr_assert_eq(n, strlen(start));
  cr_assert(memcmp(buf, start, n) == 0, "%s does not start with %s", path, start);
}

static dt_trace *small_trace(void) {
  static const char text[] =
      "[{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":\"GPU\"}},"
      "{\"name\":\"k\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":0,\"dur\":5}]";
  dt_trace *trace = NULL;
  cr_assert_eq(dt_trace_read_memory(text, sizeof text - 1, &trace), DT_OK, "%s", dt_last_error());
  return trace;
}

typedef enum { TRACE, TRACE_RANK, SVG, SAFETENSORS, WRITERS } writer;
static const char *const writer_file[WRITERS] = {"trace.json", "trace.rank0.json", "plot.svg",
                                                 "model.safetensors"};
static const char *const writer_start[WRITERS] = {"{", "{", "<svg", ""};

static dt_status write_with(writer w, const char *path) {
  dt_profiler *profiler = NULL;
  dt_trace *trace = NULL;
  dt_tensor *t = NULL;
  dt_status st = DT_OK;
  switch (w) {
  case TRACE:
  case TRACE_RANK:
    cr_assert_eq(dt_profiler_create(&profiler), DT_OK);
    st = w == TRACE ? dt_profiler_write_chrome_trace(profiler, path)
                    : dt_profiler_write_chrome_trace_rank(profiler, 0, path);
    dt_profiler_destroy(profiler);
    break;
  case SVG:
    trace = small_trace();
    st = dt_trace_write_svg(trace, "GPU", 0, path);
    dt_trace_destroy(trace);
    break;
  case SAFETENSORS:
    cr_assert_eq(dt_full(1, (int64_t[]){4}, 2.0, DT_F32, &t), DT_OK);
    st = dt_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL);
    dt_tensor_release(t);
    break;
  default: cr_assert_fail("writer %d", (int)w);
  }
  return st;
}

Test(output_links, every_writer_replaces_a_planted_link) {
  static const mode_t masks[] = {022, 077, 027};
  for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
    for (int w = 0; w < WRITERS; w++) {
      umask(masks[m]);
      char dir[64], victim[128], path[128], dangling[128];
      make_dir(dir, sizeof dir);
      snprintf(victim, sizeof victim, "%s/victim", dir);
      snprintf(path, sizeof path, "%s/%s", dir, writer_file[w]);
      snprintf(dangling, sizeof dangling, "%s/dangling.%s", dir, writer_file[w]);
      write_text(victim, "precious", 0644);
      /* An absolute link to the victim, and a dangling one (a file the writer would create). */
      cr_assert_eq(symlink(victim, path), 0);
      cr_assert_eq(symlink("/tmp/dt_test_links_nonexistent/x", dangling), 0);
      cr_assert_eq(write_with((writer)w, path), DT_OK, "%s: %s", path, dt_last_error());
      cr_assert_eq(write_with((writer)w, dangling), DT_OK, "%s: %s", dangling, dt_last_error());
      expect_text(victim, "precious");
      struct stat st;
      cr_assert_eq(stat(victim, &st), 0);
      cr_assert_eq(st.st_mode & 07777, 0644, "the victim's mode changed");
      expect_output(path, 0666 & ~masks[m], writer_start[w]);
      expect_output(dangling, 0666 & ~masks[m], writer_start[w]);
      cr_assert_eq(access("/tmp/dt_test_links_nonexistent", F_OK), -1);
      cr_assert_eq(temporaries(dir), 0);
      remove_dir(dir);
    }
  }
  umask(022);
}

/* Replacing this user's own file never widens it (a private file stays private) and never
 * goes beyond the umask; an old file's wider bits are not kept. */
Test(output_links, replacing_a_file_narrows_never_widens) {
  static const struct {
    mode_t mask, old, want;
  } cases[] = {{022, 0600, 0600}, {077, 0640, 0600}, {027, 0666, 0640}, {0, 0604, 0604}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    umask(cases[i].mask);
    char dir[64], path[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/plot.svg", dir);
    write_text(path, "old", cases[i].old);
    cr_assert_eq(write_with(SVG, path), DT_OK, "%s", dt_last_error());
    expect_output(path, cases[i].want, "<svg");
    remove_dir(dir);
  }
  umask(022);
}

Test(output_links, fifo_directory_and_device, .timeout = 30) {
  umask(022);
  char dir[64], fifo[128], link[128], sub[128];
  make_dir(dir, sizeof dir);
  snprintf(fifo, sizeof fifo, "%s/trace.json", dir);
  snprintf(link, sizeof link, "%s/link.json", dir);
  snprintf(sub, sizeof sub, "%s/sub.json", dir);
  /* A FIFO nobody reads: refused at once, left as it is. */
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  cr_assert_eq(write_with(TRACE, fifo), DT_ERR_IO);
  ref_assert_error_mentions(fifo, "FIFO that no program reads");
  struct stat st;
  cr_assert_eq(lstat(fifo, &st), 0);
  cr_assert(S_ISFIFO(st.st_mode));
  /* A link to the FIFO is replaced, the FIFO never opened. */
  cr_assert_eq(symlink(fifo, link), 0);
  cr_assert_eq(write_with(TRACE, link), DT_OK, "%s", dt_last_error());
  expect_output(link, 0644, "{");
  cr_assert_eq(lstat(fifo, &st), 0);
  cr_assert(S_ISFIFO(st.st_mode));
  /* A directory is refused by name and kept. */
  cr_assert_eq(mkdir(sub, 0700), 0);
  cr_assert_eq(write_with(SVG, sub), DT_ERR_IO);
  ref_assert_error_mentions(sub, "directory");
  cr_assert_eq(rmdir(sub), 0);
  /* A device is written in place. */
  cr_assert_eq(write_with(SVG, "/dev/null"), DT_OK, "%s", dt_last_error());
  cr_assert_eq(lstat("/dev/null", &st), 0);
  cr_assert(S_ISCHR(st.st_mode));
  cr_assert_eq(temporaries(dir), 0);
  remove_dir(dir);
}

/* dt_hf_model_save (so `dtensor finetune --out`): links at config.json and model.safetensors
 * are replaced; the victims keep their bytes; the saved folder loads back. */
Test(output_links, hf_model_save_replaces_planted_links) {
  struct stat fixtures;
  if (stat(HF "/llama_tiny/config.json", &fixtures) != 0)
    cr_skip_test("the hf fixtures are absent (%s)", HF);
  umask(027);
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  char dir[64], out[128], victim[128], victim2[128], path[160];
  make_dir(dir, sizeof dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(victim2, sizeof victim2, "%s/victim2", dir);
  write_text(victim, "precious", 0644);
  write_text(victim2, "precious too", 0644);
  cr_assert_eq(mkdir(out, 0755), 0);
  snprintf(path, sizeof path, "%s/config.json", out);
  cr_assert_eq(symlink(victim, path), 0);
  snprintf(path, sizeof path, "%s/model.safetensors", out);
  cr_assert_eq(symlink(victim2, path), 0);
  cr_assert_eq(dt_hf_model_save(m, out), DT_OK, "%s", dt_last_error());
  expect_text(victim, "precious");
  expect_text(victim2, "precious too");
  snprintf(path, sizeof path, "%s/config.json", out);
  expect_output(path, 0640, "{");
  snprintf(path, sizeof path, "%s/model.safetensors", out);
  expect_output(path, 0640, "");
  cr_assert_eq(temporaries(out), 0);
  dt_hf_model *back = NULL;
  cr_assert_eq(dt_hf_model_load(out, NULL, NULL, &back), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_param_count(back), dt_hf_model_param_count(m));
  dt_hf_model_destroy(back);
  dt_hf_model_destroy(m);
  remove_dir(out);
  remove_dir(dir);
  umask(022);
}
