/*
 * Output files that never leave half a file behind and never delete what they did not make.
 * A regular file (or a new path) is written to a temporary file beside it and renamed over
 * the path once complete; a failed write removes only the temporary. A path that exists and
 * is not a regular file (a device, a FIFO) is written in place and never removed.
 *
 * Modes. The umask is never read or changed: it belongs to the process, reading it means
 * setting it, and any other thread creating a file meanwhile gets the wrong mode (or keeps
 * it). The temporary is created with open(O_CREAT | O_EXCL, 0666), so the kernel applies the
 * umask (and a directory's default ACL) exactly as a plain fopen would. A file being replaced
 * keeps its permission bits (the 0777 bits; set-id bits are dropped as a rewrite would).
 *
 * Symbolic links. The path is followed, as fopen follows it: the link stays a link and its
 * target is replaced, the temporary living beside the target so the rename stays within one
 * file system. A link whose target does not exist is refused rather than guessed at. Files
 * whose names the library owns (dt__output_open_owned: a checkpoint's shards) are never
 * followed: the rename replaces whatever sits at the name. The temporary itself is created
 * with O_EXCL | O_NOFOLLOW, so a link planted at its name is never written through.
 *
 * Names. The temporary is ".dt-" and eight random letters in the target's directory, so any
 * legal file name (up to NAME_MAX) can be written.
 *
 * SIGXFSZ. Writing past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the process
 * and would leave the temporary behind. The writing thread blocks the signal from open to
 * close, so the write fails with EFBIG instead, the temporary is removed, and the signal the
 * write raised is consumed before the thread's mask is restored. A caller that already
 * blocks SIGXFSZ keeps it and its pending signal untouched.
 */
/* realpath is an X/Open function: the build's _POSIX_C_SOURCE alone does not declare it. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "profile/output_file.h"

#define TEMP_PREFIX ".dt-"
#define TEMP_RANDOM 8
#define TEMP_ATTEMPTS 100

/* Eight letters that differ between threads, processes and calls; O_EXCL catches the rest. */
static void random_letters(char *out, const void *salt) {
  static atomic_uint_fast64_t counter;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t x = atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
  x = dt__hash_finish(x ^ (uint64_t)getpid() ^ ((uint64_t)(uintptr_t)salt << 16));
  x = dt__hash_finish(x ^ (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 32));
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int i = 0; i < TEMP_RANDOM; i++) {
    out[i] = letters[x % (sizeof letters - 1)];
    x /= sizeof letters - 1;
  }
}

static void block_file_size_signal(dt__output_file *out) {
  sigset_t xfsz;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  out->restore_mask = false;
  if (pthread_sigmask(SIG_BLOCK, &xfsz, &out->old_mask) != 0) return;
  if (sigismember(&out->old_mask, SIGXFSZ)) return; /* the caller's own choice: leave it */
  out->restore_mask = true;
}

static void restore_file_size_signal(dt__output_file *out) {
  if (!out->restore_mask) return;
  out->restore_mask = false;
  int saved = errno;
  sigset_t xfsz, pending;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  /* A SIGXFSZ pending now was raised by our write (it was unblocked before open); the write
   * has already failed with EFBIG, so the signal is consumed, not delivered. */
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&xfsz, NULL, &zero) == -1 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &out->old_mask, NULL);
  errno = saved;
}

/* Creates the temporary beside out->target; a descriptor, or -1 with errno set. */
static int create_temporary(dt__output_file *out) {
  const char *slash = strrchr(out->target, '/');
  size_t dir_length = slash ? (size_t)(slash - out->target) + 1 : 0;
  if (dir_length + sizeof TEMP_PREFIX + TEMP_RANDOM > sizeof out->tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(out->tmp, out->target, dir_length);
  memcpy(out->tmp + dir_length, TEMP_PREFIX, sizeof TEMP_PREFIX - 1);
  char *letters = out->tmp + dir_length + sizeof TEMP_PREFIX - 1;
  letters[TEMP_RANDOM] = '\0';
  for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
    random_letters(letters, out);
    int fd = open(out->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

FILE *dt__output_open(dt__output_file *out, const char *path) {
  out->path = path;
  out->in_place = false;
  out->problem = NULL;
  out->tmp[0] = '\0';
  if (!path[0]) {
    errno = ENOENT; /* "" names nothing; the temporary would land in the working directory */
    return NULL;
  }
  block_file_size_signal(out);
  int err = 0;
  struct stat link_st, st;
  bool exists = lstat(path, &link_st) == 0;
  bool replacing = false;
  if (exists && S_ISLNK(link_st.st_mode)) {
    if (stat(path, &st) != 0) {
      err = errno;
      if (err == ENOENT) out->problem = "a symbolic link whose target does not exist (refused)";
      goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
      out->in_place = true;
    } else if (!realpath(path, out->target)) {
      err = errno;
      goto fail;
    }
    replacing = true;
  } else {
    st = link_st;
    out->in_place = exists && !S_ISREG(st.st_mode);
    replacing = exists;
    size_t n = strlen(path);
    if (n >= sizeof out->target) {
      err = ENAMETOOLONG;
      goto fail;
    }
    memcpy(out->target, path, n + 1);
  }
  if (out->in_place) {
    FILE *f = fopen(path, "w");
    if (!f) {
      err = errno;
      goto fail;
    }
    return f;
  }
  int fd = create_temporary(out);
  if (fd < 0) {
    err = errno;
    out->tmp[0] = '\0';
    goto fail;
  }
  /* A replaced file keeps its permission bits; a failure here must not leave it wider. */
  if (replacing && fchmod(fd, st.st_mode & 0777) != 0) {
    err = errno;
    close(fd);
    unlink(out->tmp);
    goto fail;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    err = errno;
    close(fd);
    unlink(out->tmp);
    goto fail;
  }
  return f;
fail:
  restore_file_size_signal(out);
  errno = err ? err : EIO;
  return NULL;
}

FILE *dt__output_open_owned(dt__output_file *out, const char *path) {
  out->path = path;
  out->in_place = false;
  out->problem = NULL;
  out->tmp[0] = '\0';
  size_t n = strlen(path);
  if (!path[0] || n >= sizeof out->target) {
    errno = path[0] ? ENAMETOOLONG : ENOENT;
    return NULL;
  }
  memcpy(out->target, path, n + 1);
  block_file_size_signal(out);
  int fd = create_temporary(out);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    int err = errno ? errno : EIO;
    if (fd >= 0) {
      close(fd);
      unlink(out->tmp);
    }
    out->tmp[0] = '\0';
    restore_file_size_signal(out);
    errno = err;
  }
  return f;
}

int dt__output_close(dt__output_file *out, FILE *f, bool failed) {
  int err = failed ? (errno ? errno : EIO) : 0;
  if (ferror(f) && !err) err = errno ? errno : EIO;
  if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
  if (!out->in_place) {
    if (!err && rename(out->tmp, out->target) != 0) err = errno;
    if (err) unlink(out->tmp);
  }
  restore_file_size_signal(out);
  return err;
}

const char *dt__output_strerror(const dt__output_file *out, int err) {
  return out->problem ? out->problem : strerror(err);
}
