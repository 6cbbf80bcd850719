/* File-system helpers of the tests, without a shell (issue 35 item 3): a test removes its
 * folders, runs the project's scripts and edits files through these, so no path is ever parsed
 * by /bin/sh and scripts/check-no-shell.sh covers tests/ too.
 *
 * Only POSIX.1-2008 calls (the build's _POSIX_C_SOURCE): openat, fdopendir and unlinkat rather
 * than nftw, which glibc declares only for _XOPEN_SOURCE, so that any test may include this
 * header after its other includes. */
#ifndef DT_TESTS_FS_HELPERS_H
#define DT_TESTS_FS_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* POSIX leaves the declaration to the program. */
extern char **environ;

/* Removes every entry of the open folder dfd, then closes it. A link is removed itself, never
 * followed: each entry is examined with AT_SYMLINK_NOFOLLOW and a folder is entered with
 * O_NOFOLLOW, so a link planted in the tree cannot lead the removal outside it. */
static inline int fs__empty_dir(int dfd) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return -1;
  }
  int rc = 0;
  for (struct dirent *e; (errno = 0, e = readdir(d));) {
    const char *name = e->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      rc = -1;
      continue;
    }
    if (S_ISDIR(sb.st_mode)) {
      int child = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0 || fs__empty_dir(child) != 0 || unlinkat(dfd, name, AT_REMOVEDIR) != 0) rc = -1;
    } else if (unlinkat(dfd, name, 0) != 0) {
      rc = -1;
    }
  }
  if (errno != 0) rc = -1; /* readdir itself failed */
  closedir(d);
  return rc;
}

/* Removes path and, if it is a folder, everything below it, as `rm -rf` does: 0 when nothing
 * is left (a missing path included), -1 with errno set otherwise. A link at path or below is
 * removed, never followed. */
static inline int fs_remove_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(sb.st_mode)) return unlink(path);
  int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0 || fs__empty_dir(dfd) != 0) return -1;
  return rmdir(path);
}

/* Runs argv[0] (looked up in PATH) with the argument vector argv (NULL-terminated), never
 * through a shell. With out, the program's stdout and stderr are captured there (at most
 * size - 1 bytes, NUL-terminated; the rest is read and dropped, so the program never blocks on
 * a full pipe); without, its stdout goes to /dev/null and its stderr stays the test's. Returns
 * the exit status, 128 + the signal that ended it, or -1 when it could not be started. */
static inline int fs_run(const char *const argv[], char *out, size_t size) {
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0) return -1;
  int rc = 0;
  if (out) {
    if (pipe(fds) != 0) {
      posix_spawn_file_actions_destroy(&actions);
      return -1;
    }
    rc |= posix_spawn_file_actions_addclose(&actions, fds[0]);
    rc |= posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    rc |= posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    rc |= posix_spawn_file_actions_addclose(&actions, fds[1]);
  } else {
    rc |= posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  /* posix_spawnp takes char *const[] though it writes nothing through it. */
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &actions, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (out) close(fds[1]);
  size_t n = 0;
  if (out) {
    char sink[4096];
    for (;;) {
      bool room = n + 1 < size;
      ssize_t got = read(fds[0], room ? out + n : sink, room ? size - 1 - n : sizeof sink);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      if (room) n += (size_t)got;
    }
    close(fds[0]);
    out[n] = '\0';
  }
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

/* Writes text (a C string) to path, replacing the file: 0, or -1 on failure. */
static inline int fs_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t length = strlen(text);
  size_t put = fwrite(text, 1, length, f);
  return fclose(f) == 0 && put == length ? 0 : -1;
}

/* Reads the whole file into a NUL-terminated heap buffer (free it); NULL on failure. */
static inline char *fs_read_file(const char *path, size_t *length) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = NULL;
  size_t n = 0, cap = 0;
  bool ok = true;
  for (;;) {
    if (n + 4097 > cap) {
      cap = (n + 4097) * 2;
      char *bigger = realloc(text, cap);
      if (!bigger) {
        ok = false;
        break;
      }
      text = bigger;
    }
    size_t got = fread(text + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  if (ferror(f)) ok = false;
  fclose(f);
  if (!ok) {
    free(text);
    return NULL;
  }
  text[n] = '\0';
  if (length) *length = n;
  return text;
}

/* Copies the bytes of from to to (created or replaced): 0, or -1 on failure. */
static inline int fs_copy_file(const char *from, const char *to) {
  size_t length = 0;
  char *bytes = fs_read_file(from, &length);
  if (!bytes) return -1;
  FILE *f = fopen(to, "wb");
  size_t put = f ? fwrite(bytes, 1, length, f) : 0;
  int rc = f && fclose(f) == 0 && put == length ? 0 : -1;
  free(bytes);
  return rc;
}

/* Replaces the first occurrence of `from` on each line of the file with `to`, in place, as
 * `sed -i 's/from/to/'` does with a literal pattern. Returns the number of lines changed, or
 * -1 on failure. */
static inline int fs_replace_in_file(const char *path, const char *from, const char *to) {
  size_t length = 0;
  char *text = fs_read_file(path, &length);
  if (!text || !from[0]) {
    free(text);
    return -1;
  }
  size_t nf = strlen(from), nt = strlen(to);
  int changed = 0;
  for (const char *p = text; *p; p++)
    if (*p == '\n') changed++;
  /* Room for one replacement per line, the last line without a newline included. */
  size_t cap = length + (size_t)(changed + 1) * (nt > nf ? nt - nf : 0) + 1;
  char *result = malloc(cap);
  if (!result) {
    free(text);
    return -1;
  }
  changed = 0;
  size_t n = 0;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    size_t line_length = end ? (size_t)(end - line) + 1 : strlen(line);
    const char *hit = NULL;
    for (const char *p = line; p + nf <= line + line_length; p++)
      if (memcmp(p, from, nf) == 0) {
        hit = p;
        break;
      }
    if (hit) {
      memcpy(result + n, line, (size_t)(hit - line));
      n += (size_t)(hit - line);
      memcpy(result + n, to, nt);
      n += nt;
      memcpy(result + n, hit + nf, line_length - (size_t)(hit - line) - nf);
      n += line_length - (size_t)(hit - line) - nf;
      changed++;
    } else {
      memcpy(result + n, line, line_length);
      n += line_length;
    }
    line += line_length;
  }
  result[n] = '\0';
  FILE *f = fopen(path, "wb");
  size_t put = f ? fwrite(result, 1, n, f) : 0;
  int rc = f && fclose(f) == 0 && put == n ? changed : -1;
  free(text);
  free(result);
  return rc;
}

#endif
