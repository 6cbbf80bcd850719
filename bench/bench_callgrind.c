/* Instruction counts under callgrind: running the tool as its own measured child and reading
 * the dumps back (bench_callgrind.h). */
#include "bench_callgrind.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 32

int bench_callgrind_run(const char *who, const char *const *args, bench_callgrind_dir *dir) {
  snprintf(dir->path, sizeof dir->path, "/tmp/dtensor-callgrind-XXXXXX");
  if (!mkdtemp(dir->path)) {
    fprintf(stderr, "%s: mkdtemp: cannot make a dump folder\n", who);
    dir->path[0] = '\0';
    return 1;
  }
  char out_file[128], self[1024];
  snprintf(out_file, sizeof out_file, "--callgrind-out-file=%s/cg.out", dir->path);
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "%s: readlink /proc/self/exe failed\n", who);
    return 1;
  }
  self[n] = '\0';
  const char *argv[MAX_ARGS + 6] = {"valgrind", "--tool=callgrind", "--collect-atstart=no",
                                    out_file, self};
  int k = 5;
  for (int i = 0; args[i] && i < MAX_ARGS; i++) argv[k++] = args[i];
  argv[k] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2); /* valgrind's banner */
    /* valgrind executes no AVX-512: when the tool chose OpenBLAS's core type itself (main.c),
     * the measured child gets OpenBLAS's own choice on valgrind's CPU instead (the marker stays,
     * so the child does not choose again). */
    if (getenv("DT_OPENBLAS_CORETYPE_CHOSEN")) unsetenv("OPENBLAS_CORETYPE");
    execvp("valgrind", (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: the measured run failed (is valgrind installed?) status %d\n", who,
            status);
    return 1;
  }
  return 0;
}

int bench_callgrind_each(const bench_callgrind_dir *dir,
                         void (*fn)(const char *label, long total, void *user), void *user) {
  DIR *d = opendir(dir->path);
  if (!d) return 1;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "cg.out.", 7) != 0) continue; /* the labelled dumps */
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir->path, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char line[512], label[256] = "";
    long total = -1;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "desc: Trigger: Client Request: %255s", label) == 1) continue;
      if (strncmp(line, "totals:", 7) == 0) total = atol(line + 7);
    }
    fclose(f);
    if (total >= 0) fn(label, total, user);
  }
  closedir(d);
  return 0;
}

void bench_callgrind_clean(bench_callgrind_dir *dir) {
  if (!dir->path[0]) return;
  DIR *d = opendir(dir->path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", dir->path, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir->path);
  dir->path[0] = '\0';
}
